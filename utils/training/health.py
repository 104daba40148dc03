"""Training health: non-finite and exploding losses, skipped updates, and the health record each
checkpoint gets.

`CheckpointHealthHook` reads every session run's `updates.RunFacts` from the job's
`hooks.UpdateSource`. When the training diverges it knows the global step at which the loss or
the gradient norm first became non-finite (or the loss exploded); at every checkpoint save it
appends the step, loss and gradient norm of the update that produced the checkpoint to
`<output_dir>/checkpoint_health.json` (`utils/checkpoints/recovery.py` reads and writes that file
and names the newest checkpoint saved before the divergence). docs/LONG_RUNS.md describes both
for users.
"""

import collections
import datetime
import math
import statistics

from absl import logging
import tensorflow as tf

from utils.checkpoints import recovery
from utils.core import errors
from utils.core import graph_names

_tf1 = tf.compat.v1

# Consecutive skipped updates (non-finite gradient norm) after which a run is diverged: in fp32
# a skipped update means the norm overflowed and the weights have not changed, so every later
# batch overflows too (the run would loop for ever); with loss scaling early skips are normal
# while the scale settles (2^32 down to fp16's range takes about 16), so it allows more.
SKIP_LIMIT_FP32 = 3
SKIP_LIMIT_LOSS_SCALED = 64
# A finite loss this many times the median of the recent sane updates' losses (at least 1) counts
# as diverged too: weights blown up by a huge learning rate can give a loss of 1e11 for an update
# or two before it becomes NaN (seen in fp32 on CPUs with AVX-512), and the checkpoint saved
# between must not be named as the one to resume from. Far above any real batch-to-batch spread
# (pretraining losses are ln(vocab) and below; a fine-tuning loss near 0 is compared with 1).
LOSS_EXPLOSION_FACTOR = 100.0
# How many recent sane updates' losses that median is taken over.
LOSS_HISTORY = 20


class UpdatesSkippedError(_tf1.train.NanLossDuringTrainingError):
  """Too many consecutive updates skipped as non-finite: the run diverged (the job reports it as
  a NaN loss, with the same advice)."""


def _finite(value):
  return value is None or math.isfinite(value)


class _HealthListener(_tf1.train.CheckpointSaverListener):
  """The CheckpointSaverListener of a `CheckpointHealthHook`: its `after_save`."""

  def __init__(self, hook):
    self._hook = hook

  def after_save(self, session, global_step_value):
    self._hook.after_save(session, global_step_value)


class CheckpointHealthHook(tf.estimator.SessionRunHook):
  """Watches each update's loss and gradient norm; records them at every checkpoint save.

  Run it on every worker (the gradient norm is the same everywhere, so all stop together), after
  the job's `UpdateSource` and before the checkpoint saver in the hook list (the values of the
  saving update are then in when the saver runs). A micro-step with a non-finite loss, an update
  whose loss exploded (over `LOSS_EXPLOSION_FACTOR` x the median of the last `LOSS_HISTORY` sane
  ones, or 1) or an update skipped as non-finite starts (or continues) a streak of bad values:
  `bad_step` is the global step at its start (the weights that produced it); an applied update
  with finite values that did not explode ends it. After `SKIP_LIMIT_FP32` (fp32) or
  `SKIP_LIMIT_LOSS_SCALED` consecutive skipped updates it raises `UpdatesSkippedError`.

  Through `listener`, the saver's CheckpointSaverListener (the saving worker only), it appends
  {step, loss, global_norm, finite, exploded, time} of the update that produced each checkpoint
  to `directory`'s checkpoint_health.json (`recovery.write_health`).
  """

  def __init__(self, updates, directory=None, keep_checkpoint_max=None):
    """Configures the hook.

    Args:
      updates: the job's `hooks.UpdateSource` (earlier in the hook list).
      directory: where the checkpoints and the health file are (None: this worker saves none).
      keep_checkpoint_max: with `directory`, checks at start-up that the checkpoints fit on its
        disk (`recovery.space_problem`): raises errors.DiskFullError before the first update
        when the next checkpoint does not, warns when the kept ones will not.
    """
    self.updates = updates
    self._directory = directory
    self._keep_checkpoint_max = keep_checkpoint_max
    self.bad_step = None
    self._skips = 0
    self._last_step = None
    self._last_update = None
    self._loss_scaled = False
    self._recent_losses = collections.deque(maxlen=LOSS_HISTORY)
    # Bytes of one checkpoint (the newest's size, else the variables'), known after start-up.
    self.checkpoint_bytes = None
    # The CheckpointSaverListener to give the saver.
    self.listener = _HealthListener(self)

  @property
  def skipped_too_often(self):
    """Whether the run stopped for consecutive skipped updates (not a NaN loss)."""
    return self._skips >= (SKIP_LIMIT_LOSS_SCALED if self._loss_scaled else SKIP_LIMIT_FP32)

  def begin(self):
    self._loss_scaled = graph_names.LOSS_SCALE in self.updates.available

  def after_create_session(self, session, coord):
    del session, coord  # unused
    self._last_step = self.updates.initial_step
    if self._directory is not None and self._keep_checkpoint_max:
      existing = recovery.listed_checkpoints(self._directory)
      needed = (recovery.checkpoint_bytes(existing[-1][1]) if existing
                else recovery.variables_bytes(_tf1.global_variables()))
      self.checkpoint_bytes = needed
      error, warning = recovery.space_problem(self._directory, needed,
                                              self._keep_checkpoint_max, len(existing))
      if error:
        raise errors.DiskFullError(error)
      if warning:
        logging.warning("%s", warning)

  def _mark_bad(self):
    if self.bad_step is None:
      self.bad_step = self._last_step

  def after_run(self, run_context, run_values):
    self.observe(self.updates.facts)

  def observe(self, facts):
    """Books one run's `updates.RunFacts`.

    Raises:
      UpdatesSkippedError: after too many consecutive skipped updates.
    """
    loss = float(facts.values.get(graph_names.TOTAL_LOSS, float("nan")))
    if not math.isfinite(loss):
      self._mark_bad()
    if not facts.ended_update or facts.step is None:
      return
    norm = facts.values.get(graph_names.GLOBAL_NORM)
    norm = None if norm is None else float(norm)
    finite = math.isfinite(loss) and _finite(norm)
    exploded = finite and self.loss_exploded(loss)
    if facts.applied and finite and not exploded:
      self.bad_step = None
      self._skips = 0
      self._recent_losses.append(loss)
    else:
      self._mark_bad()
      self._skips += 0 if facts.applied else 1
    self._last_step = facts.step
    if facts.applied:
      self._last_update = {"step": facts.step, "loss": loss, "global_norm": norm,
                           "finite": finite, "exploded": exploded}
    if self.skipped_too_often:
      raise UpdatesSkippedError("%d consecutive updates skipped as non-finite from step %d"
                                % (self._skips, self.bad_step))

  def loss_exploded(self, loss):
    """Whether a finite `loss` is over LOSS_EXPLOSION_FACTOR x the recent sane losses' median
    (at least 1); never before a first sane update."""
    if not self._recent_losses:
      return False
    return loss > LOSS_EXPLOSION_FACTOR * max(statistics.median(self._recent_losses), 1.0)

  def after_save(self, session, global_step_value):
    """Appends the record of the checkpoint just saved (the saving worker)."""
    del session  # unused
    if self._directory is None:
      return
    record = dict(self._last_update or {"loss": None, "global_norm": None, "finite": True})
    record["step"] = int(global_step_value)
    record["time"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    records = [r for r in recovery.read_health(self._directory) if r["step"] < record["step"]]
    recovery.write_health(self._directory, records + [record])
