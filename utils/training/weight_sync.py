"""Weight sync: the trainable variables averaged over all workers every update
(docs/DESIGN.md section 7).

`weight_sync_enabled` says whether the job wants it (`--force_weight_sync` or the
FORCE_WEIGHT_SYNC environment variable); `WeightSyncHook` runs the averaging before the train op
of every update's last micro-step, reading the session's runs from the job's
`hooks.UpdateSource`. Every worker runs it (the allreduces are collectives).
"""

import tensorflow as tf

from utils.core import env_flags
from utils.runtime import hvd_utils

_tf1 = tf.compat.v1

# Environment variable that turns weight sync on (docs/DESIGN.md section 7).
FORCE_WEIGHT_SYNC_ENV = "FORCE_WEIGHT_SYNC"


def weight_sync_enabled(force_weight_sync, environ=None):
  """Whether the weight-sync hook is wanted (docs/DESIGN.md section 7).

  Args:
    force_weight_sync: value of the `--force_weight_sync` flag.
    environ: environment mapping; `os.environ` when None.

  Returns:
    True when the flag is set or FORCE_WEIGHT_SYNC is true/1/yes/on.

  Raises:
    ValueError: for a FORCE_WEIGHT_SYNC value that is not a boolean.
  """
  return bool(force_weight_sync) or env_flags.env_flag(FORCE_WEIGHT_SYNC_ENV, environ)


class WeightSyncHook(tf.estimator.SessionRunHook):
  """Averages the trainable variables over all workers every `num_accumulation_steps` iterations.

  Iterations are the session's runs (the `UpdateSource`'s count), from 1; on iterations N, 2N, ...
  (N = num_accumulation_steps: the micro-step that applies the update) the averaging runs in its own
  `session.run` from `before_run`, so it completes before that iteration's train op. The averaging
  ops (allreduce Average of each variable, assigned back) are built in `begin()`, inside the graph
  being run. Every worker must run the hook (the allreduces are collectives).
  """

  def __init__(self, updates):
    """Args: updates, the job's `UpdateSource` (earlier in the hook list): its runs and
    num_accumulation_steps (iterations between two syncs)."""
    self.updates = updates
    self._sync_op = None
    # Number of syncs run since `begin()`.
    self.sync_count = 0

  def begin(self):
    """Builds the averaging ops for the trainable variables of the current graph.

    Raises:
      RuntimeError: without an initialised Horovod.
      ValueError: when the graph has no trainable variables.
    """
    if not hvd_utils.horovod_enabled():
      raise RuntimeError("weight sync needs Horovod: call hvd_utils.hvd_init() before training")
    variables = _tf1.trainable_variables()
    if not variables:
      raise ValueError("weight sync: the graph has no trainable variables")
    self._sync_op = hvd_utils.average_variables_op(variables)
    self.sync_count = 0

  def before_run(self, run_context):
    iteration = self.updates.runs + 1  # the run about to start
    if iteration % self.updates.num_accumulation_steps == 0:
      run_context.session.run(self._sync_op)
      self.sync_count += 1
    return None
