"""The training meter: what the training log says about each optimizer update. No TensorFlow.

The training log hook (`utils/training/hooks.py`) hands the `RunFacts` of each session run
(`utils/core/updates.py`: the update boundary, the global step, the fetched values) to a
`TrainingMeter`; the meter times the runs with its clock and tells the hook what to write:

  meter = TrainingMeter(global_batch_size=256, clock=clock)
  meter.start(initial_step)                   # the global step the run starts from
  meter.run_started()                         # before each session run (one micro-step)
  update = meter.run_ended(facts)             # after it: the run's updates.RunFacts
  if update is not None:                      # the run ended an optimizer update
    update.data                               # the dllogger line's data, when due (else None)
    update.lines                              # readable lines for the absl log (rank 0)
  meter.summary(), meter.summary_lines()      # at the end of the run

What it computes for an update (a session run is one micro-step; with gradient accumulation an
update spans several, and ends on the run whose facts say `ended_update`):

  throughput_train = global_batch_size / (summed run time of the update's micro-steps); the time
                     between runs (input, hooks, checkpoints outside the run) is not counted
  avg_loss_step    = mean of total_loss over the update's micro-steps
  total_loss, learning_rate and the `loss_names` losses: values of the last micro-step
  global_norm, loss_scaler (from `loss_scale`), skipped_updates: when the values have them

Packed input (`max_sequences_per_pack` > 0: a row holds several sequences; docs/TRAINING.md) counts
sequences, not rows. Every pretraining graph names two scalars of each micro-batch,
`batch_sequences` and `batch_tokens` (utils/core/graph_names.py), counted on the worker that runs
it; the meter takes this worker's counts x the workers as the job's (the chief's count scaled, not
a sum over the workers: no collective for the log). For an update, over its micro-steps:

  sequences_per_update = sum(batch_sequences) x num_workers
  throughput_train     = sequences_per_update / update time (unpacked sequences per second)
  rows_per_sec         = global_batch_size (rows) / update time
  padding              = 1 - sum(batch_tokens) x num_workers / (global_batch_size x seq_length)

the three new keys at the end of the line. Unpacked runs log exactly what they did before.

The update is logged (`data`) with step = the global step after it, for the first applied update of
the run and whenever that step is a multiple of `display_loss_steps`, together with a progress line
(update k of N, elapsed since the first run started, ETA from the time per update since the first
applied update ended). An update the optimizer skipped (non-finite gradients: the global step did
not advance, `applied` is False) gets no data, which would repeat the step of the last applied
update, but a line "update skipped at step N (non-finite gradients); loss scale now S", S being the
scale in effect after the skip: dynamic loss scaling divides the scale this update used by
`loss_scale_multiplier`, never below 1 (`optimization.LossScaling`).

The summary's throughput average (sequences/s; packed: the measured updates' sequences / their time,
with the rows/s beside it, and over the run's updates the sequences per row and the padding) leaves
out the first `warmup_steps` updates (start-up, graph optimisation, XLA compilation) and, when
`save_checkpoints_steps` is given, the updates on which a checkpoint is saved (every that many
global steps from the start of the run).
"""

import collections
import time

import numpy as np

from utils.core import checks
from utils.core import graph_names

# Update steps left out of the throughput average at the start of a run (start-up, first-run graph
# optimisation, XLA compilation), as NVIDIA's script does.
DEFAULT_WARMUP_STEPS = 6
# The pretraining losses logged beside total_loss (fine-tuning has total_loss only).
PRETRAINING_LOSSES = (graph_names.MLM_LOSS, graph_names.NSP_LOSS)
# Dynamic loss scaling divides the scale by this after a non-finite update (and multiplies it after
# a run of finite ones); optimization.LOSS_SCALE_MULTIPLIER.
DEFAULT_LOSS_SCALE_MULTIPLIER = 2.0
# The smallest scale dynamic loss scaling lowers to.
MIN_LOSS_SCALE = 1.0

Update = collections.namedtuple("Update", ["step", "applied", "data", "lines"])
Update.__doc__ = """What the log says about one optimizer update.

Fields: step, the global step after the update; applied, False when the optimizer skipped it;
data, the OrderedDict of the dllogger line (NVIDIA's keys; also the TensorBoard scalars), or None
when the update is not logged; lines, tuple of readable lines for the absl log."""


def format_duration(seconds):
  """`seconds` as H:MM:SS, whole seconds truncated (hours may exceed 24)."""
  minutes, secs = divmod(int(seconds), 60)
  hours, minutes = divmod(minutes, 60)
  return "%d:%02d:%02d" % (hours, minutes, secs)


def progress_message(step, num_train_steps, elapsed, seconds_per_update):
  """The readable progress of a run.

  Args:
    step: global step after the latest update.
    num_train_steps: global step the run ends at, or None when unknown.
    elapsed: seconds since the run's first update started.
    seconds_per_update: recent seconds per update, or None before there is a measure.

  Returns:
    e.g. "update 20 of 600 (3.3%), elapsed 0:01:02, ETA 0:30:58"; without `num_train_steps`
    "update 20, elapsed 0:01:02"; "ETA unknown" without `seconds_per_update`.
  """
  if num_train_steps is None:
    return "update %d, elapsed %s" % (step, format_duration(elapsed))
  if seconds_per_update is None:
    eta = "unknown"
  else:
    eta = format_duration(max(num_train_steps - step, 0) * seconds_per_update)
  return "update %d of %d (%.1f%%), elapsed %s, ETA %s" % (
      step, num_train_steps, 100.0 * step / num_train_steps, format_duration(elapsed), eta)


def loss_scale_after_skip(loss_scale, multiplier=DEFAULT_LOSS_SCALE_MULTIPLIER):
  """The dynamic loss scale after a skipped update that used `loss_scale`: divided, floored at 1."""
  return max(loss_scale / multiplier, MIN_LOSS_SCALE)


class TrainingMeter(object):
  """Times the runs of a training job and says what to log for each optimizer update.

  See the module docstring for what is computed. All state is per run: `start` clears it.
  """

  def __init__(self, global_batch_size, display_loss_steps=1, warmup_steps=DEFAULT_WARMUP_STEPS,
               save_checkpoints_steps=None, num_train_steps=None, loss_names=PRETRAINING_LOSSES,
               loss_scale_multiplier=DEFAULT_LOSS_SCALE_MULTIPLIER, clock=time.perf_counter,
               max_sequences_per_pack=0, num_workers=1, seq_length=None):
    """Configures the meter.

    Args:
      global_batch_size: rows per update over all workers (a row is a sequence unless packed):
        per-worker batch x accumulation steps x workers.
      display_loss_steps: log every this many global steps.
      warmup_steps: update steps left out of the throughput average at the start of the run.
      save_checkpoints_steps: when given, the updates on which a checkpoint is saved (every this
        many global steps from the start of the run) are left out of the average.
      num_train_steps: global step the run ends at, for the progress line's "of N" and ETA.
      loss_names: values logged beside total_loss (pretraining: mlm_loss, nsp_loss).
      loss_scale_multiplier: the factor dynamic loss scaling divides the scale by after a skip.
      clock: function returning seconds; `time.perf_counter` by default.
      max_sequences_per_pack: 0 for unpacked input; K > 0 for packed rows of up to K sequences:
        every run's values must then hold batch_sequences and batch_tokens.
      num_workers: the job's workers (packed: this worker's counts are scaled by it).
      seq_length: tokens per row (packed: the padding's denominator; required then).

    Raises:
      ValueError: for a bad argument, naming it.
    """
    checks.check_integer("global_batch_size", global_batch_size, 1)
    checks.check_integer("display_loss_steps", display_loss_steps, 1)
    checks.check_integer("warmup_steps", warmup_steps, 0)
    if save_checkpoints_steps is not None:
      checks.check_integer("save_checkpoints_steps", save_checkpoints_steps, 1)
    if num_train_steps is not None:
      checks.check_integer("num_train_steps", num_train_steps, 1)
    if not loss_scale_multiplier > 1.0:
      raise ValueError("loss_scale_multiplier must be > 1, got %r" % (loss_scale_multiplier,))
    checks.check_integer("max_sequences_per_pack", max_sequences_per_pack, 0)
    checks.check_integer("num_workers", num_workers, 1)
    if max_sequences_per_pack > 0 or seq_length is not None:
      checks.check_integer("seq_length", seq_length, 1)
    self.global_batch_size = global_batch_size
    self.display_loss_steps = display_loss_steps
    self.warmup_steps = warmup_steps
    self.save_checkpoints_steps = save_checkpoints_steps
    self.num_train_steps = num_train_steps
    self.loss_names = tuple(loss_names)
    self.loss_scale_multiplier = loss_scale_multiplier
    self.max_sequences_per_pack = max_sequences_per_pack
    self.num_workers = num_workers
    self.seq_length = seq_length
    self._clock = clock
    self.start(None)

  def start(self, initial_step):
    """Clears the measurements for a new run.

    Args:
      initial_step: the global step the run starts from (checkpoint saves count from it), or None
        when unknown (then 0).
    """
    self._initial_step = 0 if initial_step is None else int(initial_step)
    self._applied_updates = 0
    self._skipped_updates = 0
    self._first_run_start = None
    self._first_update_end = None
    self._run_start = None
    self._micro_time = 0.0
    self._micro_losses = []
    # Packed: this worker's sequences and tokens over the update's micro-steps so far.
    self._micro_sequences = 0.0
    self._micro_tokens = 0.0
    # Seconds of every update of this run, in order (warm-up and skipped updates included).
    self.update_times = []
    self._steady_time = 0.0
    self._steady_updates = 0
    # Packed: the job's sequences in the averaged updates, and in all updates with their tokens.
    self._steady_sequences = 0.0
    self._run_sequences = 0.0
    self._run_tokens = 0.0

  @property
  def packed(self):
    """Whether the rows are packed (several sequences each): the log counts sequences."""
    return self.max_sequences_per_pack > 0

  def run_started(self):
    """Notes the start of a session run (one micro-step)."""
    self._run_start = self._clock()
    if self._first_run_start is None:
      self._first_run_start = self._run_start

  def run_ended(self, facts):
    """Books a session run that has just ended.

    Args:
      facts: the run's `updates.RunFacts`; its values (graph name -> number) hold total_loss,
        learning_rate, step_update and the `loss_names` losses, optionally global_norm,
        loss_scale, skipped_updates.

    Returns:
      `Update` when the run ended an optimizer update, else None.
    """
    now = self._clock()
    self._micro_time += now - self._run_start
    self._micro_losses.append(float(facts.values[graph_names.TOTAL_LOSS]))
    if self.packed:
      self._micro_sequences += _batch_count(facts.values, graph_names.BATCH_SEQUENCES)
      self._micro_tokens += _batch_count(facts.values, graph_names.BATCH_TOKENS)
    if not facts.ended_update:
      return None
    return self._finish_update(facts.values, facts.applied, now)

  def _finish_update(self, values, applied, now):
    """Books the update's time (it ended at `now`); returns its `Update`."""
    update_time = self._micro_time
    avg_loss_step = float(np.mean(self._micro_losses))
    # The job's counts: this worker's scaled by the workers (each sees a batch of the same rows).
    counts = (self._micro_sequences * self.num_workers, self._micro_tokens * self.num_workers)
    self._micro_time = 0.0
    self._micro_losses = []
    self._micro_sequences = self._micro_tokens = 0.0
    self.update_times.append(update_time)
    self._run_sequences += counts[0]
    self._run_tokens += counts[1]
    step = int(values[graph_names.STEP_UPDATE])
    if self._counts_for_average(len(self.update_times), step):
      self._steady_time += update_time
      self._steady_updates += 1
      self._steady_sequences += counts[0]
    if not applied:
      self._skipped_updates += 1
      scale = ""
      if graph_names.LOSS_SCALE in values:
        scale = "; loss scale now %g" % loss_scale_after_skip(
            float(values[graph_names.LOSS_SCALE]), self.loss_scale_multiplier)
      return Update(step, False, None,
                    ("update skipped at step %d (non-finite gradients)%s" % (step, scale),))
    self._applied_updates += 1
    if self._first_update_end is None:
      self._first_update_end = now
    if not (self._applied_updates == 1 or step % self.display_loss_steps == 0):
      return Update(step, True, None, ())
    data = self._update_data(values, update_time, avg_loss_step)
    if self.packed:
      self._add_packed_data(data, update_time, *counts)
    return Update(step, True, data, (self._progress(step, now),))

  def _progress(self, step, now):
    """The progress line; the ETA uses the time per update since the first update ended."""
    later_updates = len(self.update_times) - 1
    seconds_per_update = ((now - self._first_update_end) / later_updates if later_updates
                          else None)
    return progress_message(step, self.num_train_steps, now - self._first_run_start,
                            seconds_per_update)

  def _counts_for_average(self, update_index, step):
    """Whether update number `update_index` of the run (1-based) enters the throughput average."""
    if update_index <= self.warmup_steps:
      return False
    if self.save_checkpoints_steps is not None and step > self._initial_step:
      return (step - self._initial_step) % self.save_checkpoints_steps != 0
    return True

  def _update_data(self, values, update_time, avg_loss_step):
    """The data of a per-update log line (NVIDIA's keys)."""
    data = collections.OrderedDict()
    data["throughput_train"] = (self.global_batch_size / update_time if update_time > 0
                                else None)
    for name in self.loss_names:
      data[name] = float(values[name])
    data["total_loss"] = float(values[graph_names.TOTAL_LOSS])
    data["avg_loss_step"] = avg_loss_step
    data["learning_rate"] = float(values[graph_names.LEARNING_RATE])
    if graph_names.LOSS_SCALE in values:
      data["loss_scaler"] = float(values[graph_names.LOSS_SCALE])
    if graph_names.GLOBAL_NORM in values:
      data["global_norm"] = float(values[graph_names.GLOBAL_NORM])
    if graph_names.SKIPPED_UPDATES in values:
      data["skipped_updates"] = int(values[graph_names.SKIPPED_UPDATES])
    return data

  def _padding(self, tokens, rows):
    """The share of `rows` x seq_length token slots that `tokens` real tokens leave empty."""
    return 1.0 - tokens / (float(rows) * self.seq_length)

  def _add_packed_data(self, data, update_time, sequences, tokens):
    """Packed: throughput_train counts the update's `sequences` (the job's), and the data gains
    sequences_per_update, rows_per_sec and padding (from the job's `tokens`), at its end."""
    timed = update_time > 0
    data["throughput_train"] = sequences / update_time if timed else None
    data["sequences_per_update"] = sequences
    data["rows_per_sec"] = self.global_batch_size / update_time if timed else None
    data["padding"] = self._padding(tokens, self.global_batch_size)

  def summary(self):
    """Throughput summary of the run so far.

    Returns:
      OrderedDict: throughput_train (the throughput average, sequences/s, or None when no update
      qualifies), total_time (seconds of all updates), update_steps, steady_update_steps (updates
      in the average), steady_time (their seconds), skipped_updates (updates the optimizer
      skipped in this run, included in update_steps). Packed: throughput_train counts the
      measured updates' sequences; rows_per_sec (rows/s over the same updates, or None),
      sequences_per_row and padding (over all the run's updates, or None without one) follow.
    """
    measured = self._steady_updates > 0 and self._steady_time > 0
    steady_rows = self.global_batch_size * self._steady_updates
    throughput = None
    if measured:
      throughput = (self._steady_sequences if self.packed else steady_rows) / self._steady_time
    summary = collections.OrderedDict([
        ("throughput_train", throughput),
        ("total_time", float(sum(self.update_times))),
        ("update_steps", len(self.update_times)),
        ("steady_update_steps", self._steady_updates),
        ("steady_time", self._steady_time),
        ("skipped_updates", self._skipped_updates),
    ])
    if self.packed:
      run_rows = self.global_batch_size * len(self.update_times)
      summary["rows_per_sec"] = steady_rows / self._steady_time if measured else None
      summary["sequences_per_row"] = self._run_sequences / run_rows if run_rows else None
      summary["padding"] = self._padding(self._run_tokens, run_rows) if run_rows else None
    return summary

  def summary_lines(self, summary=None):
    """The readable lines of the run's summary (`summary()` unless given)."""
    summary = self.summary() if summary is None else summary
    if summary["throughput_train"] is None:
      return ("Throughput Average: not measured (%d update steps, the first %d are warm-up)"
              % (summary["update_steps"], self.warmup_steps),)
    line = ("Throughput Average (sequences/s) = %.2f (%d of %d update steps measured, %.2f s)"
            % (summary["throughput_train"], summary["steady_update_steps"],
               summary["update_steps"], summary["steady_time"]))
    if summary.get("rows_per_sec") is not None:
      line += ("; %.2f rows/s, %.2f sequences per row, padding %.1f%%"
               % (summary["rows_per_sec"], summary["sequences_per_row"],
                  100.0 * summary["padding"]))
    return (line,)


def _batch_count(values, name):
  """The fetched count `name` (batch_sequences or batch_tokens) of a run of packed input.

  Args:
    values: the run's {graph name: number}.
    name: the graph name.

  Returns:
    float.

  Raises:
    ValueError: when the run did not fetch it (a packed log needs both counts).
  """
  if name not in values:
    raise ValueError("packed input: the run's values have no %s (the pretraining graph names "
                     "%s and %s)" % (name, graph_names.BATCH_SEQUENCES, graph_names.BATCH_TOKENS))
  return float(values[name])
