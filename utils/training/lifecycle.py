"""The one lifecycle of every Estimator script: run_pretraining.py, run_squad.py, run_classifier.py.

A script keeps only what differs (its own flags, its head, its data) and follows these steps, each
written once, here:

  def run(f, config):      # f: the parsed flags (the script's own); config: the shared ones
    config.check({"do_train": f.do_train, "do_predict": f.do_predict})  # before anything is read
    bert_config = lifecycle.load_bert_config(config)
    workers = lifecycle.start_workers(config)
    ...the script's data...
    job = lifecycle.prepare_job(config, PROGRAM, workers, head_fn, bert_config, num_train_steps,
                                num_warmup_steps, batch_sizes)   # output dir and its lock, run
                                                                 # log, the start line (precision,
                                                                 # device, sizes), model_fn,
                                                                 # Estimator
    lifecycle.train(config, job, input_fn, num_train_steps)
    job_lib.evaluate(job.estimator, ...) / job_lib.predict(job.estimator, ...)  # rank 0
    job.close()

  main = entry.script_main(PROGRAM, run, DEFAULTS)  # PROGRAM = "run_squad.py": defaults,
                                                    # the JobConfig, logging, exit status

  if __name__ == "__main__":
    cli.run_main(main, DEFAULTS)   # parses with the script's defaults, quiet logs, runs main

`entry.script_main` reads the shared flags once into a `job_config.JobConfig` (typed, frozen);
everything here takes that, never the flags object. Every check of a flag's value happens in
`JobConfig.check` (and the script's own checks) before any graph is built; errors in what a user
gave are `errors.UsageError`s, which `entry.script_main` turns into one line and exit status 2
(`errors.run_reporting_errors`).
"""

import os

from absl import logging
import psutil
import tensorflow as tf

import modeling
from utils.checkpoints import contents as checkpoints_lib
from utils.checkpoints import recovery
from utils.core import errors
from utils.model import size as model_size
from utils.runlog import dllogger_setup
from utils.runlog import start_line
from utils.runtime import cpu
from utils.runtime import hvd_utils
from utils.runtime import stop_signals
from utils.runtime import workers as workers_lib
from utils.training import health
from utils.training import hooks as hooks_lib
from utils.training import job as job_lib
from utils.training import messages
from utils.training import model_fn as model_fn_lib


def load_bert_config(config, predictions_per_seq=0):
  """The model configuration of --bert_config_file, checked against --max_seq_length and the
  machine's memory (`check_model_fits`).

  A deterministic run also turns on TensorFlow's op determinism here (before any graph); dropout
  stays on, with keyed masks (`utils/training/determinism.py`).

  Args:
    config: the `job_config.JobConfig`.
    predictions_per_seq: pretraining's --max_predictions_per_seq (0: no masked-LM head).

  Returns:
    The `modeling.BertConfig`.

  Raises:
    errors.UsageError: naming the file and the key, or the flag.
  """
  try:
    bert_config = modeling.BertConfig.from_json_file(config.bert_config_file)
  except ValueError as e:
    raise errors.UsageError("--bert_config_file: %s" % e)
  errors.require(bert_config.max_position_embeddings >= config.max_seq_length,
                 "--max_seq_length=%d exceeds max_position_embeddings=%d of %s",
                 config.max_seq_length, bert_config.max_position_embeddings,
                 config.bert_config_file)
  check_model_fits(config, bert_config, psutil.virtual_memory().total, predictions_per_seq)
  if config.deterministic_run:
    tf.config.experimental.enable_op_determinism()
  return bert_config


def check_model_fits(config, bert_config, machine_bytes, predictions_per_seq=0):
  """Refuses a model whose training (--do_train) or evaluation (--do_eval) at the job's batch and
  --max_seq_length would need more memory than the machine has (`utils/model/size.py`), before
  a graph of minutes and gigabytes is built for it.

  Args:
    config: the `job_config.JobConfig`.
    bert_config: the `modeling.BertConfig` of --bert_config_file.
    machine_bytes: this machine's memory, bytes.
    predictions_per_seq: masked-LM predictions per sequence (0: no masked-LM head).

  Raises:
    errors.UsageError: one line naming the file, the key and its value, the estimate and the
      machine's memory.
  """
  half_precision = config.amp or config.manual_fp16 or config.bf16
  runs = [(True, config.train_batch_size)] if config.do_train else []
  runs += [(False, config.eval_batch_size)] if config.do_eval else []
  for training, batch_size in runs:
    try:
      model_size.check_fits(bert_config, machine_bytes, "--bert_config_file: %s"
                            % config.bert_config_file, batch_size, config.max_seq_length,
                            training=training, half_precision=half_precision,
                            accumulation_steps=config.num_accumulation_steps,
                            predictions_per_seq=predictions_per_seq)
    except ValueError as e:
      raise errors.UsageError(str(e))


def start_workers(config):
  """Starts the job's workers (Horovod with --horovod); returns `workers_lib.Workers`."""
  return workers_lib.start_workers(config.horovod)


class Job(object):
  """A started job: this worker's output directory (locked when it is --output_dir) and run log.

  Attributes:
    program: the script's name, e.g. "run_squad.py", for the line the job ends with.
    workers: `workers_lib.Workers`.
    output_dir: where this worker writes.
    saves_checkpoints: this worker saves checkpoints.
    run_logger: the `dllogger_setup.RunLogger` (writes on rank 0 only).
    log_path: the dllogger log file.
    output_lock: the `output_lock.OutputDirLock` of --output_dir this process holds, or None.
    model_fn: set by `prepare_job`.
    estimator: set by `prepare_job`.
  """

  def __init__(self, program, workers, output_dir, saves_checkpoints, run_logger, log_path,
               output_lock=None):
    self.program = program
    self.workers = workers
    self.output_dir = output_dir
    self.saves_checkpoints = saves_checkpoints
    self.run_logger = run_logger
    self.log_path = log_path
    self.output_lock = output_lock
    self.model_fn = None
    self.estimator = None

  @property
  def is_chief(self):
    """Rank 0: evaluates, predicts and writes the results."""
    return self.workers.rank == 0

  def close(self):
    """Closes the run log and says where the outputs are (rank 0)."""
    self.run_logger.close()
    if self.is_chief:
      logging.info("outputs: checkpoints in %s, dllogger log %s", self.output_dir, self.log_path)


def prepare_job(config, program, workers, head_fn, bert_config, num_train_steps,
                num_warmup_steps, batch_sizes, dropout_seed_value=None, check_model_fn=None,
                max_sequences_per_pack=0):
  """Everything between the script's data and training, in one order for every script: the
  --init_checkpoint's check, this worker's output directory (--output_dir's lock) and run log, the
  start line (`log_start_line`), the training settings, the model function and the Estimator.

  Args:
    config: the `job_config.JobConfig`.
    program: the script's name, e.g. "run_squad.py" (as given to `entry.script_main`).
    workers: from `start_workers`.
    head_fn: the task's head (`utils/training/model_fn.py`).
    bert_config: from `load_bert_config`.
    num_train_steps: optimizer updates (0 when the run does not train).
    num_warmup_steps: warmup updates.
    batch_sizes: dict of the TPUEstimator's batch sizes (train_batch_size, eval_batch_size,
      predict_batch_size: those the script uses).
    dropout_seed_value: from `dropout_seed`.
    check_model_fn: optional check_model_fn(job, model_fn), the script's checks of its output
      directory against the model, run before the Estimator is built (raises
      `errors.UsageError`).
    max_sequences_per_pack: K for packed input (rows of up to K sequences; the start line says
      so), 0 otherwise.

  Returns:
    the `Job`, its model_fn and estimator set.
  """
  init_checkpoint = checked_init_checkpoint(config, bert_config)
  job = open_job(config, program, workers)
  log_start_line(program, config, workers, num_train_steps, num_warmup_steps,
                 max_sequences_per_pack)
  if init_checkpoint and workers.rank == 0:
    logging.info("%s: initialising from checkpoint %s%s", program, init_checkpoint,
                 "" if init_checkpoint == config.init_checkpoint else
                 " (the newest in --init_checkpoint=%s)" % config.init_checkpoint)
  settings = training_settings(config, workers, num_train_steps, num_warmup_steps)
  job.model_fn = model_fn_lib.model_fn_builder(
      head_fn, bert_config, init_checkpoint, settings,
      verbose_logging=config.verbose_logging, dropout_seed=dropout_seed_value)
  if check_model_fn is not None:
    check_model_fn(job, job.model_fn)
  session = workers_lib.session_config(
      workers, intra_op_threads=config.intra_op_threads, inter_op_threads=config.inter_op_threads,
      use_xla=config.use_xla, amp=config.amp,
      enable_scoped_allocator=config.enable_scoped_allocator)
  job.estimator = job_lib.build_estimator(
      job.model_fn, job.output_dir, session, workers, job.saves_checkpoints,
      config.save_checkpoints_steps, config.keep_checkpoint_max, random_seed=config.random_seed,
      reports_loss=config.report_loss, tpu=tpu_settings(config, settings),
      batch_sizes=batch_sizes, save_checkpoints_secs=config.save_checkpoints_secs)
  return job


def checked_init_checkpoint(config, bert_config):
  """The checkpoint prefix --init_checkpoint names, checked against the model before anything is
  written: a directory stands for its newest checkpoint; the encoder's variables it holds must
  have the shapes of --bert_config_file's (`model_fn_lib.first_shape_mismatch`).

  Args:
    config: the `job_config.JobConfig`.
    bert_config: from `load_bert_config`.

  Returns:
    the prefix, or None without --init_checkpoint.

  Raises:
    errors.UsageError: one line naming the checkpoint, and the first variable whose shape
      differs with both shapes, or why it cannot be read.
  """
  if not config.init_checkpoint:
    return None
  prefix = config.init_checkpoint
  if tf.io.gfile.isdir(prefix):
    try:
      prefix = checkpoints_lib.resolve_checkpoint(prefix)
    except ValueError as e:
      raise errors.UsageError("--init_checkpoint=%s" % e) from None
  job_lib.check_init_checkpoint(prefix)
  mismatch = model_fn_lib.first_shape_mismatch(prefix, bert_config)
  if mismatch is not None:
    name, checkpoint_shape, model_shape = mismatch
    raise errors.UsageError(
        "--init_checkpoint=%s: variable %s has shape %s in the checkpoint but %s in the model of "
        "--bert_config_file=%s" % (prefix, name, checkpoint_shape, model_shape,
                                   config.bert_config_file))
  return prefix


def open_job(config, program, workers):
  """Creates this worker's output directory (taking --output_dir's lock) and opens the run log.

  A run log that already holds lines (a restart) is appended to after a RESTART line.

  Args:
    config: the `job_config.JobConfig`.
    program: the script's name, e.g. "run_squad.py" (as given to `entry.script_main`).
    workers: from `start_workers`.

  Returns:
    `Job`.
  """
  output_dir, saves, lock = workers_lib.worker_output_dir(
      workers, config.output_dir, config.node_local_output_dir, config.checkpoint_all_workers)
  prepare_checkpoints(config, workers, output_dir, saves)
  log_path = config.dllog_path or os.path.join(config.output_dir, "bert_dllog.json")
  with messages.explaining_full_disks(config.output_dir):
    run_logger = dllogger_setup.open_run_log(log_path, workers.rank,
                                             job_lib.checkpoint_step(config.output_dir))
  return Job(program, workers, output_dir, saves, run_logger, log_path, output_lock=lock)


def prepare_checkpoints(config, workers, output_dir, saves_checkpoints):
  """Chooses the checkpoint the job resumes from before anything reads the index; checks that
  a training job's next checkpoint fits on the disk.

  The worker that saves checkpoints into `output_dir` removes the leftovers of interrupted
  saves, steps back from an unreadable newest checkpoint and applies --resume_from_step
  (`recovery.prepare_resume`, one log line when it changes the checkpoint); every worker then
  waits for rank 0, so all read the same index.

  Raises:
    errors.UsageError: from `recovery.prepare_resume` (naming --resume_from_step).
    errors.DiskFullError: a training job whose newest checkpoint no longer fits on the disk.
  """
  if saves_checkpoints:
    step, note = recovery.prepare_resume(output_dir, config.resume_from_step)
    if note:
      logging.warning("%s", note)
    existing = recovery.listed_checkpoints(output_dir)
    if config.do_train and existing:
      error, _ = recovery.space_problem(output_dir, recovery.checkpoint_bytes(existing[-1][1]),
                                        config.keep_checkpoint_max, len(existing))
      if error:
        raise errors.DiskFullError(error)
  hvd_utils.broadcast_value(0)


def training_settings(config, workers, num_train_steps, num_warmup_steps):
  """The training step's settings, built once from the configuration's views (the start line
  says what they are).

  Args:
    config: the `job_config.JobConfig`.
    workers: `workers_lib.Workers` (the learning rate is per worker; the job's is that x workers).
    num_train_steps: optimizer updates (0 when the run does not train).
    num_warmup_steps: warmup updates.

  Returns:
    `model_fn_lib.TrainingSettings`.

  With --bf16 on a CPU without bf16 units (and no GPU), one warning says that TensorFlow emulates
  bf16 there and which CPU flags would make it fast.
  """
  cpu.warn_if_bf16_is_emulated(config.bf16)
  return model_fn_lib.TrainingSettings(
      schedule=config.schedule(workers.size, num_train_steps, num_warmup_steps),
      precision=config.precision, accumulation=config.accumulation,
      distribution=config.distribution(workers.hvd))


def start_line_sizes(config, num_workers, num_train_steps, num_warmup_steps,
                     max_sequences_per_pack=0):
  """The `start_line.Sizes` of a job of `num_workers` workers (see `start_line.Sizes`)."""
  return start_line.Sizes(
      num_workers=num_workers, batch_size=config.train_batch_size,
      accumulation_steps=config.num_accumulation_steps,
      global_batch_size=config.global_batch_size(num_workers),
      learning_rate=config.learning_rate, job_learning_rate=config.job_learning_rate(num_workers),
      num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
      max_sequences_per_pack=max_sequences_per_pack)


def log_start_line(program, config, workers, num_train_steps, num_warmup_steps,
                   max_sequences_per_pack=0):
  """Logs the start line (`start_line.start_line`) for this machine, on rank 0 only (the job's
  settings are the same on every worker; ranks > 0 log warnings only anyway, but the line must not
  depend on that).

  Args:
    program: the script's name.
    config: the `job_config.JobConfig`.
    workers: `workers_lib.Workers`.
    num_train_steps: optimizer updates (0 when the run does not train).
    num_warmup_steps: warmup updates.
  """
  if workers.rank != 0:
    return
  device = start_line.compute_device(config.use_tpu, config.tpu_name, workers.local_rank)
  sizes = start_line_sizes(config, workers.size, num_train_steps, num_warmup_steps,
                           max_sequences_per_pack)
  logging.info("%s", start_line.start_line(program, config.precision.name, device,
                                           cpu.bf16_units(), sizes))


def dropout_seed(config, bert_config, head_dropout_prob=0.0, counts_micro_steps=False):
  """The seed of the keyed dropout masks and the micro-step counter of a deterministic run.

  A deterministic run keeps dropout (the graph users train) and draws each mask from (seed,
  micro-step, rank, layer, site): that needs the micro-step counter in the graph. A run with no
  dropout anywhere needs it only when it resumes its input by micro-steps (pretraining).

  Args:
    config: the `job_config.JobConfig` (--deterministic_run, --seed).
    bert_config: the model's configuration (its dropout probabilities).
    head_dropout_prob: the task head's own dropout.
    counts_micro_steps: the job needs the counter whatever the dropout.

  Returns:
    --seed, or None (stateful dropout, no counter).
  """
  if not config.deterministic_run:
    return None
  drops_out = max(bert_config.hidden_dropout_prob, bert_config.attention_probs_dropout_prob,
                  head_dropout_prob) > 0
  return config.seed if drops_out or counts_micro_steps else None


def tpu_settings(config, settings):
  """The TPUEstimator's settings (the release's TPU flags), or None without a TPUEstimator."""
  if not settings.distribution.uses_tpu_estimator:
    return None
  return job_lib.TpuSettings(config.use_tpu, config.tpu_name, config.tpu_zone,
                             config.gcp_project, config.master, config.iterations_per_loop,
                             config.num_tpu_cores)


def input_stop_error(job, problem, finder_rank, stop_step, before_logging=None):
  """Logs how a job stopped for a bad input record ended, and returns the error to end it with.

  Args:
    job: the `Job`.
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
    job: the `Job`.
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
  return stop_step is not None and (not job.saves_checkpoints
                                    or job_lib.checkpoint_step(job.output_dir) == stop_step)


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


def train(config, job, input_fn, num_train_steps, loss_names=None, explain_input_error=None,
          input_check=None, max_sequences_per_pack=0):
  """Trains to `num_train_steps` updates with the job's hooks (checkpoints, the log line every
  --display_loss_steps updates and its TensorBoard scalars, weight sync, Horovod broadcast, the
  stop on SIGTERM, SIGINT or SIGUSR1).

  While it trains, the first of those signals (to any worker) ends training at an update boundary
  that every worker agrees on, after a checkpoint of it; a second one exits at once, leaving
  neither a save in flight nor the --output_dir lock (`add_exit_cleanups`,
  `utils/runtime/stop_signals.py`, docs/LONG_RUNS.md). One that comes before this worker's first
  update has begun (graph building, session set-up) ends the process at once, saving nothing
  (`end_before_updates`).

  Args:
    config: the `job_config.JobConfig`.
    job: from `prepare_job`.
    input_fn: the training input function.
    num_train_steps: optimizer updates to train to.
    loss_names: the losses of the log line besides total_loss; None: the pretraining losses.
    explain_input_error: optional function error -> error naming the bad input.
    input_check: None, or a check of this worker's input files running beside training (e.g.
      `utils.data.records.BackgroundRecordCheck`: has `problem` and `close()`). Once it names a
      bad record, every worker stops at the same update as for a signal, saves it, and the job
      ends with exit status 2 and the record named (`input_stop_error`); closed at the end.
    max_sequences_per_pack: K for packed input: the log counts sequences beside rows (each worker's
      count of its batch scaled by the workers) and the padding share; 0 otherwise.

  Raises:
    errors.StoppedBySignal: a signal stopped the run (after its checkpoint).
    errors.UsageError: `input_check` found a bad record (the run stopped after its checkpoint).
  """
  watcher = stop_signals.watch_signals()
  try:
    add_exit_cleanups(watcher, job)
    end_before_updates(watcher, job)
    _train_watched(config, job, input_fn, num_train_steps, loss_names, explain_input_error,
                   watcher, stop_signals.StopRequests(watcher, input_check, job.workers.rank),
                   max_sequences_per_pack)
  finally:
    watcher.close()
    if input_check is not None:
      input_check.close()


def add_exit_cleanups(watcher, job):
  """Has a signal that ends the job at once first remove what this worker would leave behind.

  That exit skips `atexit` handlers and `finally` blocks (utils/runtime/stop_signals.py): without
  these actions, the --output_dir lock and an interrupted save's `model.ckpt-N_temp/` stayed until
  the next run removed them.

  Args:
    watcher: the `stop_signals.SignalWatcher`.
    job: the `Job`.
  """
  if job.saves_checkpoints:
    checkpoint_dir = job.output_dir
    watcher.add_cleanup(lambda: remove_save_in_flight(checkpoint_dir))
  if job.output_lock is not None:
    # Last: another job may take the directory as soon as its lock is gone.
    watcher.add_cleanup(job.output_lock.release)


# How long the main thread waits for the watcher's thread to end the process after a signal before
# the first update (`end_before_updates`): its clean-ups get at most 2 s; past this, something
# failed there and the main thread ends the job itself.
EXIT_WAIT_SECONDS = 30.0


def end_before_updates(watcher, job):
  """Has a signal that comes before this worker's first update end the process at once.

  Graph building of a large model takes minutes and session set-up may sit in TensorFlow's C++
  for long: a stop that waited for the first update was ignored for that long. There is nothing
  to save yet, so the watcher's thread ends the process (the run log's STOP line, the clean-ups
  of `add_exit_cleanups`, the line the job ends with, status 75) whatever the main thread does.

  Args:
    watcher: the `stop_signals.SignalWatcher` (its clean-ups added).
    job: the `Job`.
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


def _train_watched(config, job, input_fn, num_train_steps, loss_names, explain_input_error,
                   watcher, stop_requests, max_sequences_per_pack=0):
  """`train` with the signal watcher installed; `stop_requests` wraps it and the input check."""
  updates = hooks_lib.UpdateSource(config.num_accumulation_steps)
  log_hook = None
  if config.report_loss:
    kwargs = {} if loss_names is None else {"loss_names": loss_names}
    log_hook = hooks_lib.TrainingLogHook(
        job.run_logger, updates, config.global_batch_size(job.workers.size),
        display_loss_steps=config.display_loss_steps,
        save_checkpoints_steps=(config.save_checkpoints_steps
                                if job.saves_checkpoints and not config.save_checkpoints_secs
                                else None),
        num_train_steps=num_train_steps,
        # TensorBoard run "train", beside the Estimator's "eval".
        summary_dir=os.path.join(job.output_dir, "train"),
        max_sequences_per_pack=max_sequences_per_pack, num_workers=job.workers.size,
        seq_length=config.max_seq_length, **kwargs)
  checkpoint_dir = job.output_dir if job.saves_checkpoints else None
  health_hook = health.CheckpointHealthHook(updates, checkpoint_dir,
                                            keep_checkpoint_max=config.keep_checkpoint_max)
  saved_stops = []

  def on_stop_saved(signal_name, stop_step):
    """The stop hook's `on_saved`: logs how the job ends, and has a signal from now on end it so:
    a launcher signals the other workers as soon as the first exits with the stop's status."""
    def saved(error):
      watcher.stop_saved(errors.ending_line(job.program, error), errors.exit_code(error))

    if stop_hook.input_problem_rank is not None:
      error = input_stop_error(job, stop_requests.input_problem, stop_hook.input_problem_rank,
                               stop_step, before_logging=saved)
    else:
      error = stop_error(job, signal_name, stop_step, before_logging=saved)
    saved_stops.append(error)

  hooks = job_lib.training_hooks(
      job.workers, updates, checkpoint_dir, config.save_checkpoints_steps,
      save_graph_def=config.save_graph_def, log_hook=log_hook,
      force_weight_sync=config.force_weight_sync, health_hook=health_hook,
      save_checkpoints_secs=config.save_checkpoints_secs, stop_watcher=stop_requests,
      on_stop_saved=on_stop_saved)
  stop_hook = next(hook for hook in hooks if isinstance(hook, hooks_lib.StopOnSignalHook))
  hooks = list(hooks) + [UpdatesBeginHook(watcher)]
  try:
    with messages.explaining_full_disks(config.output_dir, checkpoint_dir, health_hook):
      job_lib.train(job.estimator, input_fn, num_train_steps, config.output_dir, hooks,
                    explain_input_error=explain_input_error,
                    explain_nan_loss=lambda step: messages.nan_loss_error(
                        config, step, bad_step=health_hook.bad_step,
                        skipped_updates=health_hook.skipped_too_often))
  except hooks_lib.StoppedBeforeFirstUpdate:
    if watcher.ends_before_updates:
      # The watcher's thread ends the process (`end_before_updates`).
      watcher.wait_for_exit(EXIT_WAIT_SECONDS)
    if stop_requests.input_problem is not None:
      raise input_stop_error(job, stop_requests.input_problem, job.workers.rank, None)
    raise stop_error(job, watcher.signal_name, None)
  if stop_hook.stopped:
    raise saved_stops[0]  # a run that stopped and returned has ended its hooks: on_saved ran
  if watcher.ends_before_updates:
    # A signal before any update (e.g. a resumed run already complete): as above.
    watcher.wait_for_exit(EXIT_WAIT_SECONDS)
  if watcher.stop_requested:
    # The signal came during the last update: training is complete; what follows it is not run.
    raise stop_error(job, watcher.signal_name, job_lib.checkpoint_step(job.output_dir))
