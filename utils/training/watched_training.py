"""Training that a signal or a bad input record stops at an update boundary, after a checkpoint.

  watched_training.train(job, input_fn, explain_input_error=..., input_check=...)

While it trains, the first SIGTERM, SIGINT or SIGUSR1 (to any worker) ends training at an update
boundary that every worker agrees on, after a checkpoint of it; a second one exits at once, leaving
neither a save in flight nor the --output_dir lock (`add_exit_cleanups`,
`utils/runtime/stop_signals.py`, docs/LONG_RUNS.md). One that comes before this worker's first
update has begun (graph building, session set-up) ends the process at once, saving nothing
(`end_before_updates`). A stopped job logs its STOP line and ends with the stop's error.

The hooks of the run come as one `TrainingHooks` record (`training_hooks`), in the order they run.
"""

import dataclasses
import os
import typing

import tensorflow as tf

from utils.checkpoints import recovery
from utils.core import errors
from utils.runlog import dllogger_setup
from utils.runtime import hvd_utils
from utils.runtime import stop_signals
from utils.training import checkpoint_saver
from utils.training import estimator as estimator_lib
from utils.training import health as health_lib
from utils.training import hooks as hooks_lib
from utils.training import messages
from utils.training import weight_sync as weight_sync_lib

# How long the main thread waits for the watcher's thread to end the process after a signal before
# the first update (`end_before_updates`): its clean-ups get at most 2 s; past this, something
# failed there and the main thread ends the job itself.
EXIT_WAIT_SECONDS = 30.0


@dataclasses.dataclass(frozen=True)
class TrainingHooks:
  """The hooks of a training run, in the order they run; each None when not wanted.

  Attributes:
    updates: the run's `hooks.UpdateSource`, which the log, health, weight sync and stop hooks
      read (first).
    steady_fetches: `hooks.SteadyFetchesHook`.
    health: `health.CheckpointHealthHook`: it runs before the saver (and listens to its saves).
    log: the training log hook (`hooks.TrainingLogHook`). The log line of an update is written
      before its checkpoint: a run killed between the two resumes from the checkpoint before,
      whose later lines the resumed run's replace; in the other order the log would lack the line
      of the checkpoint's own update.
    saver: `checkpoint_saver.PeriodicCheckpointSaverHook` of a worker that saves checkpoints.
    weight_sync: `weight_sync.WeightSyncHook` (--force_weight_sync or FORCE_WEIGHT_SYNC).
    broadcast: Horovod's broadcast of rank 0's variables (several workers).
    stop: the stop on a signal (`hooks.StopOnSignalHook`): after the saver, so its `end()`
      follows the final checkpoint.
    updates_begin: `UpdatesBeginHook`, last.
  """
  updates: hooks_lib.UpdateSource
  steady_fetches: hooks_lib.SteadyFetchesHook
  health: typing.Optional[tf.estimator.SessionRunHook] = None
  log: typing.Optional[tf.estimator.SessionRunHook] = None
  saver: typing.Optional[checkpoint_saver.PeriodicCheckpointSaverHook] = None
  weight_sync: typing.Optional[weight_sync_lib.WeightSyncHook] = None
  broadcast: typing.Optional[tf.estimator.SessionRunHook] = None
  stop: typing.Optional[hooks_lib.StopOnSignalHook] = None
  updates_begin: typing.Optional[tf.estimator.SessionRunHook] = None

  def in_order(self):
    """The list of SessionRunHooks for the Estimator: the fields' hooks, in the fields' order."""
    hooks = [getattr(self, field.name) for field in dataclasses.fields(self)]
    return [hook for hook in hooks if hook is not None]


def training_hooks(config, num_workers, updates, checkpoint_dir, log=None, health=None,
                   stop=None, updates_begin=None):
  """The hooks of a training run.

  Args:
    config: the `job_config.JobConfig`: the checkpoint interval (--save_checkpoints_steps, or
      --save_checkpoints_secs), --save_graph_def and --force_weight_sync (FORCE_WEIGHT_SYNC in
      the environment also turns it on: average the weights once per update).
    num_workers: the job's workers.
    updates: the run's `hooks.UpdateSource`.
    checkpoint_dir: where this worker saves checkpoints, or None when it saves none.
    log, health, stop, updates_begin: the hooks of those fields of `TrainingHooks`, or None.

  Returns:
    `TrainingHooks`.
  """
  steady_fetches = hooks_lib.SteadyFetchesHook()
  saver = None
  if checkpoint_dir is not None:
    saver = checkpoint_saver.PeriodicCheckpointSaverHook(
        checkpoint_dir, save_steps=config.save_checkpoints_steps,
        save_graph_def=config.save_graph_def,
        listeners=[health.listener] if health is not None else None,
        save_secs=config.save_checkpoints_secs)
  weight_sync = None
  if weight_sync_lib.weight_sync_enabled(config.force_weight_sync):
    weight_sync = weight_sync_lib.WeightSyncHook(updates)
  broadcast = hvd_utils.broadcast_global_variables_hook(0) if num_workers > 1 else None
  return TrainingHooks(updates=updates, steady_fetches=steady_fetches, health=health, log=log,
                       saver=saver, weight_sync=weight_sync, broadcast=broadcast, stop=stop,
                       updates_begin=updates_begin)


def train(job, input_fn, loss_names=None, explain_input_error=None, input_check=None):
  """Trains to the job's updates with its hooks (checkpoints, the log line every
  --display_loss_steps updates and its TensorBoard scalars, weight sync, Horovod broadcast, the
  stop on SIGTERM, SIGINT or SIGUSR1).

  Args:
    job: the `job.Job`.
    input_fn: the training input function.
    loss_names: the losses of the log line besides total_loss; None: the pretraining losses.
    explain_input_error: optional function error -> error naming the bad input.
    input_check: None, or a check of this worker's input files running beside training (e.g.
      `utils.data.records.BackgroundRecordCheck`: has `problem` and `close()`). Once it names a
      bad record, every worker stops at the same update as for a signal, saves it, and the job
      ends with exit status 2 and the record named (`input_stop_error`); closed at the end.

  Raises:
    errors.StoppedBySignal: a signal stopped the run (after its checkpoint).
    errors.UsageError: `input_check` found a bad record (the run stopped after its checkpoint).
    errors.StoppedByAnotherWorker: another rank ended and Horovod shut down; the stop signals
      stay ignored from then on (`ended_with_another_rank`).
  """
  watcher = stop_signals.watch_signals()
  another_rank_ended = False
  try:
    add_exit_cleanups(watcher, job)
    end_before_updates(watcher, job)
    stop_requests = stop_signals.StopRequests(watcher, input_check, job.workers.rank)
    hooks = _watched_hooks(job, watcher, stop_requests, loss_names)
    _train_watched(job, input_fn, explain_input_error, watcher, stop_requests, hooks)
  except Exception as e:  # pylint: disable=broad-except  (re-raised)
    another_rank_ended = ended_with_another_rank(e)
    raise
  finally:
    # Once another rank ended, the launcher signals this one too: from the watcher's close on,
    # that signal must not end the process before its line names that rank.
    watcher.close(ignore_from_now=another_rank_ended)
    if input_check is not None:
      input_check.close()


def ended_with_another_rank(error):
  """Whether training raised `error` because another rank had ended and Horovod shut down
  (`estimator.another_worker_ended`'s error, or a shutdown error not yet turned into it)."""
  return (isinstance(error, errors.StoppedByAnotherWorker)
          or hvd_utils.is_shutdown_error(error))


def add_exit_cleanups(watcher, job):
  """Has a signal that ends the job at once first remove what this worker would leave behind.

  That exit skips `atexit` handlers and `finally` blocks (utils/runtime/stop_signals.py): without
  these actions, the --output_dir lock and an interrupted save's `model.ckpt-N_temp/` stayed until
  the next run removed them.

  Args:
    watcher: the `stop_signals.SignalWatcher`.
    job: the `job.Job`.
  """
  if job.saves_checkpoints:
    checkpoint_dir = job.output_dir
    watcher.add_cleanup(lambda: remove_save_in_flight(checkpoint_dir))
  if job.output_lock is not None:
    # Last: another job may take the directory as soon as its lock is gone.
    watcher.add_cleanup(job.output_lock.release)


def end_before_updates(watcher, job):
  """Has a signal that comes before this worker's first update end the process at once.

  Graph building of a large model takes minutes and session set-up may sit in TensorFlow's C++
  for long: a stop that waited for the first update was ignored for that long. There is nothing
  to save yet, so the watcher's thread ends the process (the run log's STOP line, the clean-ups
  of `add_exit_cleanups`, the line the job ends with, status 75) whatever the main thread does.

  Args:
    watcher: the `stop_signals.SignalWatcher` (its clean-ups added).
    job: the `job.Job`.
  """
  def ending_line(signal_name):
    message = stop_signals.stop_message(signal_name, None, False)
    return errors.ending_line(job.program, errors.StoppedBySignal(message))

  watcher.end_before_updates(ending_line, errors.STOP_EXIT_CODE,
                             record=lambda signal_name: stop_error(job, signal_name, None))


class UpdatesBeginHook(tf.estimator.SessionRunHook):
  """Last in the hook list: tells the signal watcher that the first update begins (the session
  run that follows its `before_run`); a signal before that ended the process
  (`end_before_updates`), one after it lets the update in flight finish."""

  def __init__(self, watcher):
    """Args: watcher: the `stop_signals.SignalWatcher`."""
    self._watcher = watcher
    self._begun = False

  def before_run(self, run_context):
    """Raises `hooks_lib.StoppedBeforeFirstUpdate` when a signal came before the first update."""
    if not self._begun:
      if not self._watcher.begin_updates():
        raise hooks_lib.StoppedBeforeFirstUpdate(self._watcher.signum)
      self._begun = True


class EndingStopHook(hooks_lib.StopOnSignalHook):
  """The stop hook of a watched run: once its stop is saved, it logs how the job ends and has a
  signal from then on end the job so (a launcher signals the other workers as soon as the first
  exits with the stop's status).

  Attributes:
    error: the error the job ends with once a stop was saved (`stop_error`, or
      `input_stop_error` for a bad input record); None before.
  """

  def __init__(self, job, watcher, stop_requests, updates):
    """Args:
      job: the `job.Job`.
      watcher: the `stop_signals.SignalWatcher`.
      stop_requests: the `stop_signals.StopRequests` the hook reads (the watcher and the input
        check).
      updates: the run's `hooks.UpdateSource`.
    """
    super().__init__(stop_requests, updates, job.workers.size, on_saved=self._saved)
    self._job = job
    # Not `_watcher`: the base class reads its own (`stop_requests`) under that name.
    self._signal_watcher = watcher
    self._stop_requests = stop_requests
    self.error = None

  def _saved(self, signal_name, stop_step):
    """The hook's `on_saved`: logs how the job ends and keeps its error in `error`."""
    def end_signals_so(error):
      self._signal_watcher.stop_saved(errors.ending_line(self._job.program, error),
                               errors.exit_code(error))

    if self.input_problem_rank is not None:
      self.error = input_stop_error(self._job, self._stop_requests.input_problem,
                                    self.input_problem_rank, stop_step,
                                    before_logging=end_signals_so)
    else:
      self.error = stop_error(self._job, signal_name, stop_step, before_logging=end_signals_so)


def remove_save_in_flight(checkpoint_dir, passes=3):
  """Removes the `_temp` files of a checkpoint save in flight, for a process about to exit at once.

  The rule is a failed save's `_temp` one (`recovery.remove_temporary`). Complete checkpoints
  stay, also one whose save had not updated the index yet: the next run resumes from it (after a
  full disk, `messages.disk_full_error` removes such files too, since that save failed). The main
  thread may still be inside TensorFlow writing the files: a pass that raced with it (a file
  created while its directory was removed) is followed by another, until one finds nothing. A
  file the writer creates after the last pass, in the instant before the exit, stays: the next
  run removes it (`recovery.prepare_resume`).

  Args:
    checkpoint_dir: where this worker saves checkpoints.
    passes: how many passes at most.

  Returns:
    the paths removed.

  Raises:
    tf.errors.OpError or OSError: when the last pass failed.
  """
  removed = []
  for attempt in range(passes):
    try:
      found = recovery.remove_temporary(checkpoint_dir)
    except (tf.errors.OpError, OSError):
      if attempt == passes - 1:
        raise
      continue  # a file appeared or went under the removal: look again
    if not found:
      break
    removed.extend(found)
  return removed


def input_stop_error(job, problem, finder_rank, stop_step, before_logging=None):
  """Logs how a job stopped for a bad input record ended, and returns the error to end it with.

  Args:
    job: the `job.Job`.
    problem: this worker's input check's problem ("<file>: record <k> at byte offset <b>:
      <what>"), or None when another worker found the record.
    finder_rank: the rank whose check found it.
    stop_step: the global step the run stopped at, or None (before its first update).
    before_logging: as for `stop_error`.

  Returns:
    `errors.UsageError` (exit status 2): `messages.input_stop_message`.
  """
  written = _stop_checkpoint_written(job, stop_step)
  message = messages.input_stop_message(problem, finder_rank, stop_step, written)
  return _log_stop(job, errors.UsageError(message), before_logging, signal=None,
                   bad_input_record=problem, update=stop_step, checkpoint_written=written)


def stop_error(job, signal_name, stop_step, before_logging=None):
  """Logs how a job stopped by a signal ended, and returns the error to end it with.

  Args:
    job: the `job.Job`.
    signal_name: e.g. "SIGTERM".
    stop_step: the global step the run stopped at, or None (before its first update).
    before_logging: optional function error -> None, called with the error before anything is
      logged (the stop hook's: from then on a signal ends the run as the stop does, so no one who
      has read the log's STOP line can signal the run into the "nothing saved" exit).

  Returns:
    `errors.StoppedBySignal` with the message (exit status `errors.STOP_EXIT_CODE`).
  """
  written = _stop_checkpoint_written(job, stop_step)
  message = stop_signals.stop_message(signal_name, stop_step, written)
  return _log_stop(job, errors.StoppedBySignal(message), before_logging, signal=signal_name,
                   update=stop_step, checkpoint_written=written)


def _stop_checkpoint_written(job, stop_step):
  """Whether the checkpoint of the update a stopped run ended at is on disk.

  A worker that saves none does not read the checkpoint: rank 0 wrote it, the workers met after
  its save, and rank 0's exit has the launcher signal the others at once (Open MPI kills them 1 s
  later): they must reach the stop's `before_logging` without delay.
  """
  return stop_step is not None and (
      not job.saves_checkpoints or estimator_lib.checkpoint_step(job.output_dir) == stop_step)


def _log_stop(job, error, before_logging, **data):
  """Calls `before_logging(error)` (if given), writes the run log's STOP line (`data`, the error's
  message and exit status) and returns `error`. No absl line of the message: the run ends with it
  (`errors.ending_line`), once."""
  if before_logging is not None:
    before_logging(error)
  job.run_logger.log(step=dllogger_setup.STOP_STEP, data=dict(
      data, message=str(error), exit_code=errors.exit_code(error)))
  job.run_logger.flush()
  return error


def _watched_hooks(job, watcher, stop_requests, loss_names):
  """The `TrainingHooks` of a watched run: the log hook (with --report_loss), the checkpoint
  health, the `EndingStopHook` on `stop_requests` and the `UpdatesBeginHook` of `watcher`."""
  config = job.config
  updates = hooks_lib.UpdateSource(config.num_accumulation_steps)
  log = None
  if config.report_loss:
    kwargs = {} if loss_names is None else {"loss_names": loss_names}
    log = hooks_lib.TrainingLogHook(
        job.run_logger, updates, config.global_batch_size(job.workers.size),
        display_loss_steps=config.display_loss_steps,
        save_checkpoints_steps=(config.save_checkpoints_steps
                                if job.saves_checkpoints and not config.save_checkpoints_secs
                                else None),
        num_train_steps=job.plan.num_train_steps,
        # TensorBoard run "train", beside the Estimator's "eval".
        summary_dir=os.path.join(job.output_dir, "train"),
        max_sequences_per_pack=job.plan.max_sequences_per_pack, num_workers=job.workers.size,
        seq_length=config.max_seq_length, **kwargs)
  health = health_lib.CheckpointHealthHook(updates, job.checkpoint_dir,
                                           keep_checkpoint_max=config.keep_checkpoint_max)
  return training_hooks(config, job.workers.size, updates, job.checkpoint_dir, log=log,
                        health=health, stop=EndingStopHook(job, watcher, stop_requests, updates),
                        updates_begin=UpdatesBeginHook(watcher))


def _train_watched(job, input_fn, explain_input_error, watcher, stop_requests, hooks):
  """`train` with the signal watcher installed; `stop_requests` wraps it and the input check;
  `hooks` from `_watched_hooks`."""
  config = job.config

  def explain_nan_loss(checkpoint_step):
    return messages.nan_loss_error(config, checkpoint_step, bad_step=hooks.health.bad_step,
                                   skipped_updates=hooks.health.skipped_too_often)

  try:
    with messages.explaining_full_disks(config.output_dir, job.checkpoint_dir, hooks.health):
      estimator_lib.train(job.estimator, input_fn, job.plan.num_train_steps, config.output_dir,
                          hooks.in_order(), explain_input_error=explain_input_error,
                          explain_nan_loss=explain_nan_loss)
  except hooks_lib.StoppedBeforeFirstUpdate:
    if watcher.ends_before_updates:
      # The watcher's thread ends the process (`end_before_updates`).
      watcher.wait_for_exit(EXIT_WAIT_SECONDS)
    if stop_requests.input_problem is not None:
      raise input_stop_error(job, stop_requests.input_problem, job.workers.rank, None)
    raise stop_error(job, watcher.signal_name, None)
  _end_training(job, watcher, hooks.stop)


def _end_training(job, watcher, stop):
  """After a training run returned: raises the error of a stop (`stop`'s, or of a signal that came
  during the last update); returns when the run completed without one."""
  if stop.stopped:
    raise stop.error  # a run that stopped and returned has ended its hooks: on_saved ran
  if watcher.ends_before_updates:
    # A signal before any update (e.g. a resumed run already complete): as above.
    watcher.wait_for_exit(EXIT_WAIT_SECONDS)
  if watcher.stop_requested:
    # The signal came during the last update: training is complete; what follows it is not run.
    raise stop_error(job, watcher.signal_name, estimator_lib.checkpoint_step(job.output_dir))
