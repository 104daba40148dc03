"""What each session run of a training job tells about the optimizer update: the one rule.

A session run is one micro-step; with gradient accumulation an update spans
`num_accumulation_steps` of them and the optimizer applies it in the last. Every per-update
reader (the training log's meter, the checkpoint health record, the graceful stop, the weight
sync) takes the same `RunFacts` from one `UpdateTracker`, fed by one hook
(`utils/training/hooks.UpdateSource`) that fetches the tensors below once per run:

  tracker = UpdateTracker(num_accumulation_steps=2)
  tracker.start(initial_step)            # the global step the session starts from, or None
  facts = tracker.run_ended(values)      # after each run: values = {graph name: number}
  facts.ended_update, facts.applied, facts.step, facts.values

No TensorFlow import.
"""

import collections

from utils.core import checks
from utils.core import graph_names

# The graph tensors fetched once per run when the graph has them: the losses, the learning rate,
# the global step after the run, the update flag (accumulation only), the gradient norm, and with
# loss scaling the scale and the skipped-update count.
PER_RUN_TENSORS = (graph_names.TOTAL_LOSS, graph_names.MLM_LOSS, graph_names.NSP_LOSS,
                   graph_names.LEARNING_RATE, graph_names.STEP_UPDATE, graph_names.UPDATE_STEP,
                   graph_names.GLOBAL_NORM, graph_names.LOSS_SCALE,
                   graph_names.SKIPPED_UPDATES)

RunFacts = collections.namedtuple("RunFacts", ["micro_step", "ended_update", "step", "applied",
                                               "values"])
RunFacts.__doc__ = """What one session run (micro-step) tells.

Fields: micro_step, the runs of this session so far, this one included (the first is 1);
ended_update, whether the run applied (or skipped) an optimizer update; step, the global step after
the run (None when the graph has no `step_update`); applied, the run ended an update and the global
step advanced (False for an update the optimizer skipped as non-finite, and mid-accumulation);
values, {graph name: number} of what the run fetched."""


def ended_update(values, micro_steps, num_accumulation_steps):
  """Whether a session run was the micro-step that applied the optimizer (ended an update).

  The graph's UPDATE_STEP flag when the run fetched it (with gradient accumulation), else every
  `num_accumulation_steps`-th run.

  Args:
    values: dict name -> fetched value of the run.
    micro_steps: runs so far, this one included (the first run is 1).
    num_accumulation_steps: micro-steps per update.

  Returns:
    bool.
  """
  if graph_names.UPDATE_STEP in values:
    return bool(values[graph_names.UPDATE_STEP])
  return micro_steps % num_accumulation_steps == 0


class UpdateTracker(object):
  """Turns the fetched values of each run into `RunFacts` (see the module docstring)."""

  def __init__(self, num_accumulation_steps=1):
    """Args: num_accumulation_steps, micro-steps per update (an int >= 1).

    Raises:
      ValueError: for a bad count.
    """
    checks.check_integer("num_accumulation_steps", num_accumulation_steps, 1)
    self.num_accumulation_steps = num_accumulation_steps
    self.start(None)

  def start(self, initial_step):
    """Starts a session.

    Args:
      initial_step: the global step it starts from (the first update that leaves it unchanged is
        a skip), or None when unknown (the first update then counts as applied).
    """
    self.initial_step = None if initial_step is None else int(initial_step)
    self._last_step = self.initial_step
    # Runs of this session so far.
    self.runs = 0

  def run_ended(self, values):
    """The `RunFacts` of the run that has just ended, whose fetched values are `values`."""
    self.runs += 1
    ended = ended_update(values, self.runs, self.num_accumulation_steps)
    step = int(values[graph_names.STEP_UPDATE]) if graph_names.STEP_UPDATE in values else None
    applied = False
    if ended and step is not None:
      applied = self._last_step is None or step != self._last_step
      self._last_step = step
    return RunFacts(self.runs, ended, step, applied, dict(values))
