"""SessionRunHooks of the training job that read every session run: the per-run facts, the training
log, the stop on a signal, and the one set of fetches.

Each hook gets everything it needs in its constructor and reads the graph tensors named in
`utils/core/graph_names.py`. The hooks run on every worker (the graph is the same everywhere, so
collectives never stall); logging goes through a `dllogger_setup.RunLogger`, which writes on rank
0 only.

* `UpdateSource`: fetches the per-run tensors (losses, learning rate, global step, update flag,
  gradient norm, loss scale) once per session run and keeps that run's `updates.RunFacts` (did it
  end an update, was the update applied); the hooks below that need them (training log, checkpoint
  health in `utils/training/health.py`, weight sync, stop on a signal) read them from it, so it
  comes first in the hook list.
* `SteadyFetchesHook`: fetches on every training run what the Estimator's own hooks fetch on some
  runs only, so the session builds one executor for training instead of three.
* `TrainingLogHook`: per optimizer update, throughput (global batch / time of the update), losses,
  the average loss over the update's micro-steps, the learning rate and (fp16) the loss scale, every
  `display_loss_steps` updates; at the end a summary with the throughput average; for packed
  input, sequences (not rows) per second, rows/s and the padding share. What to log is computed by
  the TensorFlow-free `utils/runlog/meter.py`; the hook fetches and writes.
* `StopOnSignalHook`: ends training at an update boundary, the same one on every worker, once a
  stop signal arrived (docs/LONG_RUNS.md).

The job's other hooks have modules of their own: `checkpoint_saver.py` (a checkpoint every N
updates or seconds and at the end), `weight_sync.py` (the variables averaged over the workers),
`eval_timing.py` (the evaluation's batch times and throughput), `health.py` (checkpoint health).
"""

import collections
import time

from absl import logging
import tensorflow as tf

import optimization
from utils.core import checks
from utils.core import graph_names
from utils.core import updates as updates_lib
from utils.runlog import dllogger_setup
from utils.runlog import meter as meter_lib
from utils.runtime import hvd_utils
from utils.runtime import stop_signals

_tf1 = tf.compat.v1

# Graph tensors the training log needs besides the job's own losses (`loss_names`);
# `update_step`, `global_norm`, `loss_scale` and `skipped_updates` are optional.
REQUIRED_TRAIN_TENSORS = (graph_names.TOTAL_LOSS, graph_names.LEARNING_RATE,
                          graph_names.STEP_UPDATE)
# The pretraining losses logged beside total_loss (fine-tuning has total_loss only).
PRETRAINING_LOSSES = meter_lib.PRETRAINING_LOSSES
# Graph tensors that exist only when the optimizer scales the loss (fp16).
LOSS_SCALING_TENSORS = (graph_names.LOSS_SCALE, graph_names.SKIPPED_UPDATES)
# TensorBoard tag of each per-update log key written as a scalar; the loss scale keeps its graph
# name there (the log uses NVIDIA's `loss_scaler`).
SUMMARY_TAGS = collections.OrderedDict([
    ("learning_rate", "learning_rate"), ("total_loss", "total_loss"), ("mlm_loss", "mlm_loss"),
    ("nsp_loss", "nsp_loss"), ("throughput_train", "throughput_train"),
    ("global_norm", "global_norm"), ("loss_scaler", "loss_scale"),
    ("skipped_updates", "skipped_updates"),
    # Packed input only: throughput_train counts sequences, these the rows and the empty slots.
    ("rows_per_sec", "rows_per_sec"), ("padding", "padding")])
# Graph tensors of each micro-batch's real sequences and tokens: every pretraining graph has them,
# fine-tuning graphs do not; the log hook fetches them for packed input only (an unpacked row is
# one sequence: its log needs no count).
BATCH_COUNT_TENSORS = (graph_names.BATCH_SEQUENCES, graph_names.BATCH_TOKENS)
# Update steps left out of the throughput average at the start of a run (utils/runlog/meter.py).
DEFAULT_WARMUP_STEPS = meter_lib.DEFAULT_WARMUP_STEPS


def _graph_tensor(graph, name):
  """The tensor `<name>:0` of `graph`, or None when the graph has no op of that name."""
  try:
    return graph.get_tensor_by_name(graph_names.tensor_name(name))
  except KeyError:
    return None


# The readable durations and progress of the training log (re-exported).
format_duration = meter_lib.format_duration
progress_message = meter_lib.progress_message


class UpdateSource(tf.estimator.SessionRunHook):
  """Fetches the per-run tensors once per session run; keeps the run's `updates.RunFacts`.

  The tensors are those of `updates.PER_RUN_TENSORS` the graph has. Put it first in the hook
  list: the hooks that read `facts` in their `after_run` (and `runs` in their `before_run`) then
  see the run that has just ended.

  Attributes:
    facts: the `RunFacts` of the latest run (None before the first).
    available: the names of the tensors fetched (known after `begin`).
  """

  def __init__(self, num_accumulation_steps=1):
    """Args: num_accumulation_steps, micro-steps per update.

    Raises:
      ValueError: for a bad count.
    """
    self._tracker = updates_lib.UpdateTracker(num_accumulation_steps)
    self._fetches = None
    self._global_step_tensor = None
    self.available = frozenset()
    self.facts = None

  @property
  def num_accumulation_steps(self):
    return self._tracker.num_accumulation_steps

  @property
  def runs(self):
    """Session runs of this session that have ended."""
    return self._tracker.runs

  @property
  def initial_step(self):
    """The global step the session started from (None when the graph has none)."""
    return self._tracker.initial_step

  def begin(self):
    graph = _tf1.get_default_graph()
    self._fetches = {}
    for name in updates_lib.PER_RUN_TENSORS:
      tensor = _graph_tensor(graph, name)
      if tensor is not None:
        self._fetches[name] = tensor
    self.available = frozenset(self._fetches)
    self._global_step_tensor = _tf1.train.get_global_step()
    self._tracker.start(None)
    self.facts = None

  def after_create_session(self, session, coord):
    """Reads the global step the session starts from."""
    del coord  # unused
    self._tracker.start(None if self._global_step_tensor is None
                        else int(session.run(self._global_step_tensor)))
    self.facts = None

  def before_run(self, run_context):
    return tf.estimator.SessionRunArgs(self._fetches)

  def after_run(self, run_context, run_values):
    self.facts = self._tracker.run_ended(run_values.results)


class SteadyFetchesHook(tf.estimator.SessionRunHook):
  """Fetches, on every training run, what the Estimator's own hooks fetch only on some runs.

  A TensorFlow session builds an executor (graph pruning, grappler, kernels) for every new
  combination of fetched tensors. The Estimator's summary saver fetches the merged summaries only
  on its summary steps (the first run, then every `save_summary_steps`), and its loss logger the
  global step only on its logging steps, so a run has three combinations, each built once: 1-3 s
  each for BERT-base and ~0.5 s for the tests' 2-layer model on a Zen 3 (docs/PERFORMANCE.md).
  Fetching both on every run (a scalar summary and a variable read; the results are not used
  here) leaves one. The other hooks still fetch, log and write exactly what and when they did.
  """

  def __init__(self):
    self._fetches = None

  def begin(self):
    self._fetches = None

  def before_run(self, run_context):
    if self._fetches is None:
      # The merged summary op exists once the session's scaffold is finalized, after `begin`.
      fetches = {}
      summary_ops = _tf1.get_collection(_tf1.GraphKeys.SUMMARY_OP)
      if summary_ops:
        fetches["summary"] = summary_ops[0]
      global_step = _tf1.train.get_global_step()
      if global_step is not None:
        fetches["global_step"] = global_step
      self._fetches = fetches
    return tf.estimator.SessionRunArgs(self._fetches)


class TrainingLogHook(tf.estimator.SessionRunHook):
  """Training log per optimizer update (NVIDIA's `_LogSessionRunHook`).

  The hook passes the `RunFacts` of each session run (one micro-step), which the job's
  `UpdateSource` fetched, to a `meter.TrainingMeter` (utils/runlog/meter.py), which times the runs
  and says what to log for each optimizer update: throughput_train (global batch / summed time of
  the update's micro-steps), avg_loss_step (mean total_loss over them), the last micro-step's losses
  and learning rate, global_norm, and with loss scaling loss_scaler and skipped_updates. The hook
  writes them: a dllogger line with `step` = the global step after the update, for the first applied
  update of the run and whenever that step is a multiple of `display_loss_steps`, the same values as
  TensorBoard scalars (tags in SUMMARY_TAGS) to `summary_dir` from the values already fetched (no
  summary op enters the graph), and the progress line (update k of N, elapsed, ETA). An update the
  optimizer skipped (non-finite gradients: the global step did not advance, the fp16 loss scale was
  lowered) gets no step line, which would repeat the step of the last applied update: it is logged
  as a skipped update with the loss scale now in effect (absl log, rank 0) and counted in the
  summary's `skipped_updates` (skips of this run). At `end()` it logs a summary line (step []) whose
  `throughput_train` is the throughput average: global batch x updates / time over the updates after
  the first `warmup_steps` (and without the updates that wrote a checkpoint, when
  `save_checkpoints_steps` is given). It is None (JSON null) when no update qualifies, e.g. a run
  shorter than the warm-up.

  Packed input (`max_sequences_per_pack` > 0): the hook also fetches `batch_sequences` and
  `batch_tokens` (BATCH_COUNT_TENSORS) on every run, and the meter counts sequences:
  throughput_train is sequences/s (this worker's count x `num_workers`), and each line (and
  TensorBoard) gains sequences_per_update, rows_per_sec and padding; see utils/runlog/meter.py.
  """

  def __init__(self, logger, updates, global_batch_size, display_loss_steps=1, log_loss_scale=None,
               warmup_steps=DEFAULT_WARMUP_STEPS, save_checkpoints_steps=None,
               num_train_steps=None, summary_dir=None, loss_names=PRETRAINING_LOSSES,
               clock=time.perf_counter, max_sequences_per_pack=0, num_workers=1,
               seq_length=None):
    """Configures the hook.

    Args:
      logger: `dllogger_setup.RunLogger` (writes on rank 0 only).
      updates: the job's `UpdateSource` (earlier in the hook list).
      global_batch_size: rows per update over all workers (a row is a sequence unless packed):
        per-worker batch x accumulation steps x workers.
      display_loss_steps: log every this many global steps.
      log_loss_scale: log the loss scale (`loss_scale` tensor) as `loss_scaler` and the
        `skipped_updates` count: True expects the tensors (a warning when the graph lacks one),
        False never logs them, None (default) logs them when the graph has them (the optimizer
        creates them only when it scales the loss).
      warmup_steps: update steps left out of the throughput average at the start of the run.
      save_checkpoints_steps: when given, the updates on which the Estimator saves a checkpoint
        (every this many global steps from the start of the run) are left out of the average.
      num_train_steps: global step the run ends at, for the progress line's "of N" and ETA.
      summary_dir: directory of the TensorBoard events file of the per-update scalars (written
        by the worker whose logger is enabled, rank 0); None writes none.
      loss_names: graph tensors logged (and required) beside total_loss: the pretraining
        losses by default, () for a job whose only loss is total_loss (fine-tuning).
      clock: function returning seconds (injected by tests); `time.perf_counter` by default.
      max_sequences_per_pack: 0 for unpacked input (the log as it always was); K > 0 for rows
        packed with up to K sequences (the input records' own count).
      num_workers: the job's workers (packed: this worker's counts scaled by it).
      seq_length: tokens per row, the records' max_seq_length (required when packed).

    Raises:
      ValueError: for a bad argument, naming it.
    """
    dllogger_setup.check_run_logger(logger)
    self.updates = updates
    self._meter = meter_lib.TrainingMeter(
        global_batch_size, display_loss_steps=display_loss_steps, warmup_steps=warmup_steps,
        save_checkpoints_steps=save_checkpoints_steps, num_train_steps=num_train_steps,
        loss_names=loss_names, loss_scale_multiplier=optimization.LOSS_SCALE_MULTIPLIER,
        clock=clock, max_sequences_per_pack=max_sequences_per_pack, num_workers=num_workers,
        seq_length=seq_length)
    self._logger = logger
    self._log_loss_scale = log_loss_scale
    self._summary_dir = summary_dir
    self._summary_writer = None
    self._names = None
    self._batch_fetches = None

  @property
  def update_times(self):
    """Seconds of every update of this run, in order (warm-up included)."""
    return self._meter.update_times

  def begin(self):
    """Checks that the graph has the tensors the log needs; chooses the optional ones it logs.

    Raises:
      ValueError: naming the required tensors the graph does not have.
    """
    available = self.updates.available
    required = self._meter.loss_names + REQUIRED_TRAIN_TENSORS
    missing = [name for name in required if name not in available]
    if missing:
      raise ValueError("training log hook: the graph has no tensor named %s (the training "
                       "graph names: %s)" % (", ".join(missing), ", ".join(required)))
    names = set(required)
    accumulation = self.updates.num_accumulation_steps
    if accumulation > 1:
      self._add_optional(names, graph_names.UPDATE_STEP,
                         "counting every %d-th run as an update" % accumulation)
    self._add_optional(names, graph_names.GLOBAL_NORM, "the gradient norm is not logged")
    for name in LOSS_SCALING_TENSORS:
      if self._log_loss_scale:
        self._add_optional(names, name, "it is not logged")
      elif self._log_loss_scale is None and name in available:
        names.add(name)
    self._names = frozenset(names)
    self._batch_fetches = self._batch_count_fetches()
    self._meter.start(None)
    self._close_summary_writer()
    if self._summary_dir and self._logger.enabled:
      self._summary_writer = _tf1.summary.FileWriter(self._summary_dir)
      logging.info("training scalars for TensorBoard every %d updates in %s",
                   self._meter.display_loss_steps, self._summary_dir)

  def _batch_count_fetches(self):
    """{name: tensor} of BATCH_COUNT_TENSORS for packed input; None for unpacked input.

    Raises:
      ValueError: for packed input, naming the count tensors the graph does not have.
    """
    if not self._meter.packed:
      return None
    graph = _tf1.get_default_graph()
    fetches = {name: _graph_tensor(graph, name) for name in BATCH_COUNT_TENSORS}
    missing = [name for name, tensor in fetches.items() if tensor is None]
    if missing:
      raise ValueError("training log hook: packed input, but the graph has no tensor named %s "
                       "(the pretraining graph names: %s)"
                       % (", ".join(missing), ", ".join(BATCH_COUNT_TENSORS)))
    return fetches

  def _add_optional(self, names, name, consequence):
    """Adds `name` to `names` when the graph has the tensor; warns (rank 0) when it does not."""
    if name in self.updates.available:
      names.add(name)
    elif self._logger.enabled:
      logging.warning("training log hook: the graph has no tensor named %s: %s", name, consequence)

  def after_create_session(self, session, coord):
    """Starts the meter at the global step the run starts from (checkpoint saves count from it)."""
    del session, coord  # unused
    self._meter.start(self.updates.initial_step)

  def before_run(self, run_context):
    self._meter.run_started()
    if self._batch_fetches is None:
      return None
    return tf.estimator.SessionRunArgs(self._batch_fetches)

  def after_run(self, run_context, run_values):
    facts = self.updates.facts
    # The meter logs what this hook chose to (`log_loss_scale`), not everything fetched.
    values = {name: value for name, value in facts.values.items() if name in self._names}
    if self._batch_fetches is not None:
      values.update(run_values.results)
    update = self._meter.run_ended(facts._replace(values=values))
    if update is None:
      return
    if update.data is not None:
      self._logger.log(step=update.step, data=update.data)
      self._write_summary(update.step, update.data)
    if self._logger.enabled:
      for line in update.lines:
        logging.info("%s", line)

  def _write_summary(self, step, data):
    """Writes the scalars of SUMMARY_TAGS found in `data` (None values left out) at `step`."""
    if self._summary_writer is None:
      return
    values = [_tf1.Summary.Value(tag=tag, simple_value=float(data[key]))
              for key, tag in SUMMARY_TAGS.items() if data.get(key) is not None]
    self._summary_writer.add_summary(_tf1.Summary(value=values), global_step=step)
    # Flushed at once: someone watching a long run sees every point as it is logged.
    self._summary_writer.flush()

  def _close_summary_writer(self):
    if self._summary_writer is not None:
      self._summary_writer.close()
      self._summary_writer = None

  def summary(self):
    """Throughput summary of the run so far: `meter.TrainingMeter.summary`."""
    return self._meter.summary()

  def end(self, session):
    """Logs the summary line (step []) and closes the TensorBoard events file."""
    del session  # unused
    self._close_summary_writer()
    summary = self._meter.summary()
    self._logger.log(step=dllogger_setup.SUMMARY_STEP, data=summary)
    if self._logger.enabled:
      for line in self._meter.summary_lines(summary):
        logging.info("%s", line)


class StoppedBeforeFirstUpdate(Exception):
  """A stop signal arrived before the run's first update (one worker): nothing to save."""


class StopOnSignalHook(tf.estimator.SessionRunHook):
  """Ends training at an update boundary once a stop signal arrived (docs/LONG_RUNS.md).

  `watcher` (a `utils.runtime.stop_signals.SignalWatcher`, or anything with `stop_requested` and
  `signal_name`) is read after every session run; the update boundary is the `UpdateSource`'s.
  With several workers, every run also carries a tiny collective: the maximum over the workers of
  their "stop requested" flags (fed as an int32 scalar), so all of them see the same combined flag
  after the same micro-step; each stops at the first update boundary from there, the same update
  everywhere, and none is left waiting in an allreduce. At `end()`, after the checkpoint saver (which comes earlier in the hook list and
  writes the final update's checkpoint), the workers meet once more so none exits while rank 0
  still writes (a launcher ends every worker when one exits non-zero). From there the stop is
  saved: `on_saved` is called, so that a launcher's signal to a worker that has not exited yet
  ends it with the stop's line, not as a stop that saved nothing.

  One worker asked to stop before its first update raises `StoppedBeforeFirstUpdate` (nothing to
  save); several workers always finish the update the combined flag is seen in.

  A watcher may also stop the run for a bad input record (`stop_signals.StopRequests`): its code
  (`stop_signals.INPUT_PROBLEM_CODE` + the finding rank) is combined like a signal's.

  Attributes:
    stopped: True once the hook asked the session to stop.
    stop_code: the combined code that stopped the run: a signal's number, or one of a bad input
      record (`stop_signals.input_problem_rank`); None before. `stop_signal_name` (another
      worker's signal when that one got it) and `input_problem_rank` are read from it.
    stop_step: the global step the run stopped at (read at `end()`), or None.
  """

  def __init__(self, watcher, updates, num_workers=1, on_saved=None):
    """Configures the hook.

    Args:
      watcher: has `stop_requested` (bool) and `signum` (int or None: the stop's code).
      updates: the job's `UpdateSource` (earlier in the hook list).
      num_workers: workers of the job (> 1: the flag is combined over them with Horovod).
      on_saved: None, or a function (signal name, stop step) -> None, called at `end()` of a
        stopped run once its final checkpoint is written and every worker has met after it.

    Raises:
      ValueError: for a bad count.
    """
    checks.check_integer("num_workers", num_workers, 1)
    self._watcher = watcher
    self.updates = updates
    self._num_workers = num_workers
    self._on_saved = on_saved
    self._flag_in = None
    self._combined = None
    self._barrier = None
    self._fetches = None
    self._global_step_tensor = None
    self._reset()

  def _reset(self):
    self._stopping_signum = None
    self.stopped = False
    self.stop_code = None
    self.stop_step = None

  def begin(self):
    """Builds the combined flag's collective (several workers)."""
    self._reset()
    self._fetches = {}
    if self._num_workers > 1:
      self._flag_in = _tf1.placeholder_with_default(
          tf.constant(0, tf.int32), shape=[], name="stop_signal_flag")
      self._combined = hvd_utils.max_over_workers(self._flag_in, "stop_signal_combined")
      self._barrier = hvd_utils.max_over_workers(tf.constant(0, tf.int32), "stop_signal_barrier")
      self._fetches["combined"] = self._combined
    self._global_step_tensor = _tf1.train.get_global_step()

  def _local_signum(self):
    """This worker's signal number, 0 without one."""
    return int(self._watcher.signum or 0) if self._watcher.stop_requested else 0

  def before_run(self, run_context):
    if self.updates.runs == 0 and self._num_workers == 1 and self._watcher.stop_requested:
      raise StoppedBeforeFirstUpdate(self._watcher.signum)
    if self._num_workers > 1:
      return tf.estimator.SessionRunArgs(
          self._fetches, feed_dict={self._flag_in: self._local_signum()})
    return tf.estimator.SessionRunArgs(self._fetches) if self._fetches else None

  def after_run(self, run_context, run_values):
    results = run_values.results or {}
    if self._stopping_signum is None:
      signum = int(results["combined"]) if "combined" in results else self._local_signum()
      if signum:
        self._stopping_signum = signum
    if self._stopping_signum is None or not self.updates.facts.ended_update:
      return
    self.stopped = True
    self.stop_code = self._stopping_signum
    run_context.request_stop()

  @property
  def input_problem_rank(self):
    """The rank whose input check stopped the run, or None."""
    return stop_signals.input_problem_rank(self.stop_code)

  @property
  def stop_signal_name(self):
    """The name of the signal that stopped the run, or None (not stopped, or by a bad record)."""
    if self.stop_code is None or self.input_problem_rank is not None:
      return None
    return stop_signals.signal_name(self.stop_code)

  def end(self, session):
    """Reads the step the run ended at; with several workers, meets the others once more; then
    calls `on_saved`."""
    if not self.stopped:
      return
    if self._global_step_tensor is not None:
      self.stop_step = int(session.run(self._global_step_tensor))
    if self._barrier is not None:
      session.run(self._barrier)
    if self._on_saved is not None:
      self._on_saved(self.stop_signal_name, self.stop_step)
