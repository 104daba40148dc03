"""The Estimator calls of a job: build the estimator, train, evaluate, predict.

`utils/training/job.py`'s `Job` calls these for every script:

  estimator = build_estimator(config, workers, model_fn, output_dir, saves_checkpoints)
  train(estimator, input_fn, max_steps, output_dir, hooks)      # watched_training's hooks
  evaluate(estimator, input_fn, steps, ...)                     # rank 0; eval_results.txt
  for result in predict(estimator, input_fn, ...): ...

Nothing here knows the model: everything comes in as a function, the `job_config.JobConfig` or a
plain value. Errors in what a user gave (flags, files) are `errors.UsageError`s.
"""

import os
import socket

from absl import logging
import tensorflow as tf

from utils.checkpoints import contents as checkpoints
from utils.core import errors
from utils.runtime import hvd_utils
from utils.runtime import workers as workers_lib
from utils.training import eval_timing

_tf1 = tf.compat.v1

# Estimator step-counter interval (rank 0): rare when the job logs its own training lines.
STEP_COUNTER_STEPS = 100
STEP_COUNTER_STEPS_WITH_LOSS_REPORT = 10000
# Errors the input pipeline raises for a bad record.
INPUT_ERRORS = (tf.errors.DataLossError, tf.errors.InvalidArgumentError)


def build_estimator(config, workers, model_fn, model_dir, saves_checkpoints, batch_sizes=None):
  """The Estimator, or a TPUEstimator when the job's distribution uses one.

  Ranks > 0 write no summaries (their step counter included); only workers that save checkpoints
  save them.

  Args:
    config: the `job_config.JobConfig`: the checkpoint (and summary) interval, in steps or
      --save_checkpoints_secs, the checkpoints kept, a deterministic run's graph-level seed,
      --report_loss (the job logs its own training lines: the Estimator's step counter is rare),
      the session's flags and the TPU flags.
    workers: `Workers`.
    model_fn: the model function.
    model_dir: this worker's output directory.
    saves_checkpoints: this worker saves checkpoints.
    batch_sizes: under a TPUEstimator, dict of its train_batch_size, eval_batch_size and
      (optionally) predict_batch_size.

  Returns:
    `tf.estimator.Estimator` or `TPUEstimator` (with --use_tpu False: its CPU/GPU path).
  """
  session = workers_lib.session_config(
      workers, intra_op_threads=config.intra_op_threads, inter_op_threads=config.inter_op_threads,
      use_xla=config.use_xla, amp=config.amp,
      enable_scoped_allocator=config.enable_scoped_allocator)
  save_steps = config.save_checkpoints_steps if saves_checkpoints else None
  save_secs = config.save_checkpoints_secs if saves_checkpoints else None
  step_counter_steps = (STEP_COUNTER_STEPS_WITH_LOSS_REPORT if config.report_loss
                        else STEP_COUNTER_STEPS)
  common = dict(model_dir=model_dir, session_config=session,
                save_checkpoints_steps=None if save_secs else save_steps,
                save_checkpoints_secs=save_secs,
                save_summary_steps=save_steps if workers.rank == 0 else None,
                keep_checkpoint_max=config.keep_checkpoint_max,
                log_step_count_steps=step_counter_steps if workers.rank == 0 else None,
                tf_random_seed=config.random_seed)
  if not config.distribution(workers.hvd).uses_tpu_estimator:
    return tf.estimator.Estimator(model_fn=model_fn, config=tf.estimator.RunConfig(**common))
  cluster = None
  if config.use_tpu and config.tpu_name:
    cluster = tf.distribute.cluster_resolver.TPUClusterResolver(
        config.tpu_name, zone=config.tpu_zone, project=config.gcp_project)
  tpu_lib = _tf1.estimator.tpu
  run_config = tpu_lib.RunConfig(
      cluster=cluster, master=config.master,
      tpu_config=tpu_lib.TPUConfig(
          iterations_per_loop=config.iterations_per_loop, num_shards=config.num_tpu_cores,
          per_host_input_for_training=tpu_lib.InputPipelineConfig.PER_HOST_V2),
      **common)
  return tpu_lib.TPUEstimator(use_tpu=config.use_tpu, model_fn=model_fn, config=run_config,
                              **(batch_sizes or {}))


def checkpoint_step(model_dir):
  """Global step of the newest checkpoint in `model_dir`, 0 when there is none."""
  checkpoint = checkpoints.latest_checkpoint(model_dir)
  if not checkpoint:
    return 0
  return int(tf.train.load_variable(checkpoint, checkpoints.GLOBAL_STEP))


def check_init_checkpoint(path, flag="init_checkpoint"):
  """Raises UsageError naming --`flag` when the checkpoint at `path` cannot be read."""
  try:
    tf.train.list_variables(path)
  except (tf.errors.OpError, ValueError) as e:
    raise errors.UsageError("--%s=%s cannot be read: %s"
                     % (flag, path, getattr(e, "message", str(e)).strip().splitlines()[0]))


def _explained(error, explain_input_error):
  """The error to raise for an input-pipeline `error` (the explanation's, when one is given)."""
  return explain_input_error(error) if explain_input_error is not None else error


def another_worker_ended(output_dir, processes=None, host=None):
  """The error a worker ends with when its collective failed because another rank ended first.

  Args:
    output_dir: where the job's checkpoints are (the line says which one a rerun resumes from).
    processes: [`hvd_utils.RankProcess`] by rank (default: `hvd_utils.rank_processes()`).
    host: this host's name (default: its own).

  Returns:
    `errors.StoppedByAnotherWorker`, e.g. "rank 0 stopped: rank 1 (pid 4242 on nodeA) ended, and
    Horovod shut down with it (a line of that rank, if it printed one, says why); nothing was
    saved after checkpoint 400, which the same command resumes from". From here a rank that was
    killed and one that ended on an error of its own (a bad record, a full disk) look alike: the
    line names it and says what is saved, and leaves the why to that rank or the launcher.
  """
  processes = hvd_utils.rank_processes() if processes is None else processes
  host = socket.gethostname() if host is None else host
  step = checkpoint_step(output_dir)
  saved = ("nothing was saved after checkpoint %d, which the same command resumes from" % step
           if step else "no checkpoint was saved yet")
  return errors.StoppedByAnotherWorker(
      "rank %d stopped: %s, and Horovod shut down with it (a line of that rank, if it printed one, "
      "says why); %s" % (hvd_utils.own_rank(processes, host),
                         hvd_utils.describe_lost_ranks(processes, host), saved))


def train(estimator, input_fn, max_steps, progress_dir, hooks, explain_input_error=None,
          explain_nan_loss=None):
  """Trains to `max_steps`, unless the checkpoints in `progress_dir` are already there.

  Every worker decides from the same (rank 0's) checkpoints, so none waits alone in a collective.

  Args:
    estimator: the Estimator.
    input_fn: the training input function.
    max_steps: global step to train to.
    progress_dir: the job's --output_dir (rank 0's checkpoints).
    hooks: list of SessionRunHooks (`watched_training.TrainingHooks.in_order`).
    explain_input_error: optional function error -> error, naming the bad input after the input
      pipeline raised a DataLossError or InvalidArgumentError.
    explain_nan_loss: optional function checkpoint_step -> `hooks.TrainingDivergedError`, saying
      what to change after the Estimator's NaN-loss check stopped the run.

  Raises:
    errors.StoppedByAnotherWorker: Horovod shut down because another rank ended (that rank
      reports why); the error `explain_input_error` or `explain_nan_loss` gives; any other error
      of the run as it is.
  """
  done_steps = checkpoint_step(progress_dir)
  if done_steps >= max_steps:
    logging.info("%s already holds step %d >= --num_train_steps=%d: nothing to train",
                 progress_dir, done_steps, max_steps)
    return
  logging.info("***** Running training from step %d to %d *****", done_steps, max_steps)
  try:
    estimator.train(input_fn=input_fn, hooks=hooks, max_steps=max_steps)
  except tf.errors.OpError as e:
    if hvd_utils.is_shutdown_error(e):
      raise another_worker_ended(progress_dir) from e
    if isinstance(e, INPUT_ERRORS):
      raise _explained(e, explain_input_error)
    raise
  except _tf1.train.NanLossDuringTrainingError as e:
    if explain_nan_loss is None:
      raise
    raise explain_nan_loss(checkpoint_step(progress_dir)) from e


def write_eval_results(path, result):
  """Writes `key = value` lines, keys sorted (the original release's eval_results.txt)."""
  with tf.io.gfile.GFile(path, "w") as writer:
    for key in sorted(result):
      writer.write("%s = %s\n" % (key, result[key]))


def read_eval_results(path):
  """{key: float} of an eval_results.txt (`write_eval_results`'s lines; run_classifier.py and the
  original release write the same form)."""
  values = {}
  with tf.io.gfile.GFile(path) as reader:
    for line in reader:
      key, _, value = line.partition(" = ")
      if value:
        values[key.strip()] = float(value)
  return values


def evaluate(estimator, input_fn, steps, run_logger, batch_size, output_dir,
             explain_input_error=None, packed=False):
  """Evaluates, logs the timing and the results, and writes `<output_dir>/eval_results.txt`.

  Args:
    estimator: the Estimator.
    input_fn: the evaluation input function.
    steps: at most this many batches (evaluation also stops at the end of the data).
    run_logger: `dllogger_setup.RunLogger` for the timing summary.
    batch_size: sequences per batch.
    output_dir: where eval_results.txt goes.
    explain_input_error: see `train`.
    packed: packed input: the timing counts each batch's sequences (`eval_timing.EvalTimingHook`).

  Returns:
    dict of the evaluation results.
  """
  try:
    result = estimator.evaluate(
        input_fn=input_fn, steps=steps,
        hooks=[eval_timing.EvalTimingHook(run_logger, batch_size, packed=packed)])
  except INPUT_ERRORS as e:
    raise _explained(e, explain_input_error)
  eval_path = os.path.join(output_dir, "eval_results.txt")
  write_eval_results(eval_path, result)
  logging.info("***** Eval results (%s) *****", eval_path)
  for key in sorted(result):
    logging.info("  %s = %s", key, result[key])
  return result


def predict(estimator, input_fn, run_logger, batch_size, explain_input_error=None):
  """Yields the model's predictions, one example at a time, timing every batch.

  Args:
    estimator: the Estimator.
    input_fn: the prediction input function.
    run_logger: `dllogger_setup.RunLogger` for the timing summary (logged after the last batch).
    batch_size: sequences per batch.
    explain_input_error: see `train`.

  Yields:
    the predictions dict of each example.
  """
  logging.info("***** Running prediction, batch %d *****", batch_size)
  try:
    for prediction in estimator.predict(
        input_fn=input_fn, hooks=[eval_timing.EvalTimingHook(run_logger, batch_size)],
        yield_single_examples=True):
      yield prediction
  except INPUT_ERRORS as e:
    raise _explained(e, explain_input_error)
