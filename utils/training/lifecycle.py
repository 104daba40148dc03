"""The one lifecycle of every Estimator script: run_pretraining.py, run_squad.py, run_classifier.py.

A script keeps only what differs (its own flags, its head, its data) and follows these steps, each
written once, here:

  def run(f):                                                  # f: the parsed flags
    lifecycle.check_flags(f, ("do_train", "do_predict"))       # before anything is read
    bert_config = lifecycle.load_bert_config(f)
    workers = lifecycle.start_workers(f)
    ...the script's data...
    job = lifecycle.open_job(f, workers)                       # output dir and its lock, run log
    settings = lifecycle.training_settings(f, workers, num_train_steps, num_warmup_steps)
    model_fn = lifecycle.build_model_fn(f, head_fn, bert_config, settings)
    lifecycle.build_estimator(f, job, model_fn, settings, batch_sizes)
    lifecycle.train(f, job, input_fn, num_train_steps)
    job_lib.evaluate(job.estimator, ...) / job_lib.predict(job.estimator, ...)  # rank 0
    job.close()

  main = lifecycle.script_main("run_squad.py", run, DEFAULTS)  # defaults, logging, exit status

  if __name__ == "__main__":
    cli.run_main(main, DEFAULTS)   # parses with the script's defaults, quiet logs, runs main

Every check of a flag's value happens in `check_flags` (and the script's own checks) before any
graph is built; errors in what a user gave are `errors.UsageError`s, which `script_main` turns into
one line and exit status 2 (`errors.run_reporting_errors`).
"""

import os

from absl import flags
from absl import logging
import tensorflow as tf

import gpu_environment
import modeling
import optimization
from utils.core import errors
from utils.runlog import dllogger_setup
from utils.runtime import workers as workers_lib
from utils.training import flags as job_flags
from utils.training import hooks as hooks_lib
from utils.training import job as job_lib
from utils.training import model_fn as model_fn_lib


def script_main(script_name, run, defaults=None):
  """The `main(argv)` of an Estimator script, for `cli.run_main` or absl's `app.run`.

  Args:
    script_name: e.g. "run_squad.py", for messages.
    run: the script's job, run(flags) -> exit status.
    defaults: dict flag name -> the script's own default (`flags.apply_script_defaults`).

  Returns:
    main(argv) -> exit status: no positional arguments, the script's defaults for the flags not
    given, INFO logging, and `run`'s errors reported as one line with their exit status.
  """

  def main(argv):
    if len(argv) > 1:
      errors.report(script_name, "unexpected arguments: %s" % " ".join(argv[1:]))
      return errors.USAGE_EXIT_CODE
    job_flags.apply_script_defaults(flags.FLAGS, defaults)
    logging.set_verbosity(logging.INFO)
    return errors.run_reporting_errors(script_name, run, flags.FLAGS)

  return main


def check_flags(f, actions):
  """The checks of the shared flags that need no file access.

  Args:
    f: the parsed flags.
    actions: the script's action flags, e.g. ("do_train", "do_eval"): one is required.

  Raises:
    errors.UsageError: naming the flag.
  """
  require = errors.require
  require(any(getattr(f, name) for name in actions),
          "one of %s is required", ", ".join("--" + name for name in actions))
  for name in ("bert_config_file", "output_dir"):
    require(getattr(f, name), "--%s is required", name)
  for name in job_flags.POSITIVE:
    value = getattr(f, name)
    require(value >= 1, "--%s must be >= 1, got %d", name, value)
  require(f.intra_op_threads >= 0 and f.inter_op_threads >= 0,
          "--intra_op_threads and --inter_op_threads must be >= 0")
  try:
    optimization.check_optimizer_type(f.optimizer_type, as_flags=True)
    optimization.check_precision(f.manual_fp16, f.amp, f.init_loss_scale, as_flags=True,
                                 bf16=f.bf16)
    optimization.check_accumulation(f.num_accumulation_steps, as_flags=True)
    optimization.check_distribution(f.use_tpu, f.horovod, f.num_accumulation_steps,
                                    as_flags=True)
  except ValueError as e:
    raise errors.UsageError(str(e))


def refuse_flags(f, names, script_name):
  """Refuses flags of the shared set that this script has no use for, when they were given.

  Raises:
    errors.UsageError: naming the first such flag given.
  """
  for name in names:
    errors.require(not job_flags.given(f, name), "--%s is not a flag of %s", name, script_name)


def load_bert_config(f):
  """The model configuration of --bert_config_file, checked against --max_seq_length.

  A deterministic run also turns on TensorFlow's op determinism here (before any graph); dropout
  stays on, with keyed masks (`utils/training/determinism.py`).

  Raises:
    errors.UsageError: naming the file and the key, or the flag.
  """
  try:
    bert_config = modeling.BertConfig.from_json_file(f.bert_config_file)
  except ValueError as e:
    raise errors.UsageError("--bert_config_file: %s" % e)
  errors.require(bert_config.max_position_embeddings >= f.max_seq_length,
                 "--max_seq_length=%d exceeds max_position_embeddings=%d of %s", f.max_seq_length,
                 bert_config.max_position_embeddings, f.bert_config_file)
  if f.deterministic_run:
    tf.config.experimental.enable_op_determinism()
  return bert_config


def start_workers(f):
  """Starts the job's workers (Horovod with --horovod); returns `workers_lib.Workers`."""
  return workers_lib.start_workers(f.horovod)


def global_batch_size(f, workers):
  """Examples per optimizer update over all workers."""
  return f.train_batch_size * f.num_accumulation_steps * workers.size


class Job(object):
  """A started job: this worker's output directory (locked when it is --output_dir) and run log.

  Attributes:
    workers: `workers_lib.Workers`.
    output_dir: where this worker writes.
    saves_checkpoints: this worker saves checkpoints.
    run_logger: the `dllogger_setup.RunLogger` (writes on rank 0 only).
    log_path: the dllogger log file.
    estimator: set by `build_estimator`.
  """

  def __init__(self, workers, output_dir, saves_checkpoints, run_logger, log_path):
    self.workers = workers
    self.output_dir = output_dir
    self.saves_checkpoints = saves_checkpoints
    self.run_logger = run_logger
    self.log_path = log_path
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


def open_job(f, workers):
  """Creates this worker's output directory (taking --output_dir's lock) and opens the run log.

  A run log that already holds lines (a restart) is appended to after a RESTART line.

  Returns:
    `Job`.
  """
  output_dir, saves = workers_lib.worker_output_dir(
      workers, f.output_dir, f.node_local_output_dir, f.checkpoint_all_workers)
  log_path = f.dllog_path or os.path.join(f.output_dir, "bert_dllog.json")
  run_logger = dllogger_setup.open_run_log(log_path, workers.rank,
                                           job_lib.checkpoint_step(f.output_dir))
  return Job(workers, output_dir, saves, run_logger, log_path)


def training_settings(f, workers, num_train_steps, num_warmup_steps):
  """The training step's settings, built once from the flags, and logged.

  Args:
    f: the parsed flags.
    workers: `workers_lib.Workers` (the learning rate is per worker; the job's is that x workers).
    num_train_steps: optimizer updates (0 when the run does not train).
    num_warmup_steps: warmup updates.

  Returns:
    `model_fn_lib.TrainingSettings`.

  With --bf16 on a CPU without bf16 units (and no GPU), one warning says that TensorFlow emulates
  bf16 there and which CPU flags would make it fast.
  """
  gpu_environment.warn_if_bf16_is_emulated(f.bf16)
  schedule = optimization.Schedule(f.optimizer_type, f.learning_rate * workers.size,
                                   max(num_train_steps, 1), num_warmup_steps)
  logging.info("workers: %d; global batch: %d x %d accumulation x %d workers = %d; learning "
               "rate: %g per worker x %d workers = %g; %d updates, %d of warmup", workers.size,
               f.train_batch_size, f.num_accumulation_steps, workers.size,
               global_batch_size(f, workers), f.learning_rate, workers.size,
               schedule.learning_rate, num_train_steps, num_warmup_steps)
  return model_fn_lib.TrainingSettings(
      schedule=schedule,
      precision=optimization.Precision(manual_fp16=f.manual_fp16, amp=f.amp,
                                       init_loss_scale=f.init_loss_scale, bf16=f.bf16),
      accumulation=optimization.Accumulation(f.num_accumulation_steps,
                                             f.allreduce_post_accumulation),
      distribution=optimization.Distribution(hvd=workers.hvd, use_tpu=f.use_tpu,
                                             tpu_estimator=f.tpu_estimator))


def dropout_seed(f, bert_config, head_dropout_prob=0.0, counts_micro_steps=False):
  """The seed of the keyed dropout masks and the micro-step counter of a deterministic run.

  A deterministic run keeps dropout (the graph users train) and draws each mask from (seed,
  micro-step, rank, layer, site): that needs the micro-step counter in the graph. A run with no
  dropout anywhere needs it only when it resumes its input by micro-steps (pretraining).

  Args:
    f: the parsed flags (--deterministic_run, --seed).
    bert_config: the model's configuration (its dropout probabilities).
    head_dropout_prob: the task head's own dropout.
    counts_micro_steps: the job needs the counter whatever the dropout.

  Returns:
    --seed, or None (stateful dropout, no counter).
  """
  if not f.deterministic_run:
    return None
  drops_out = max(bert_config.hidden_dropout_prob, bert_config.attention_probs_dropout_prob,
                  head_dropout_prob) > 0
  return f.seed if drops_out or counts_micro_steps else None


def build_model_fn(f, head_fn, bert_config, settings, dropout_seed_value=None):
  """The job's `model_fn` around `head_fn` (`utils/training/model_fn.py`).

  Args:
    f: the parsed flags (--init_checkpoint, --verbose_logging).
    head_fn: the task's head.
    bert_config: from `load_bert_config`.
    settings: from `training_settings`.
    dropout_seed_value: from `dropout_seed`.
  """
  return model_fn_lib.model_fn_builder(head_fn, bert_config, f.init_checkpoint, settings,
                                       verbose_logging=f.verbose_logging,
                                       dropout_seed=dropout_seed_value)


def tpu_settings(f, settings):
  """The TPUEstimator's settings (the release's TPU flags), or None without a TPUEstimator."""
  if not settings.distribution.uses_tpu_estimator:
    return None
  return job_lib.TpuSettings(f.use_tpu, f.tpu_name, f.tpu_zone, f.gcp_project, f.master,
                             f.iterations_per_loop, f.num_tpu_cores)


def build_estimator(f, job, model_fn, settings, batch_sizes):
  """Builds the job's Estimator (or TPUEstimator) into `job.estimator`.

  Args:
    f: the parsed flags.
    job: from `open_job`.
    model_fn: from `build_model_fn`.
    settings: from `training_settings`.
    batch_sizes: dict of the TPUEstimator's batch sizes (train_batch_size, eval_batch_size,
      predict_batch_size: those the script uses).
  """
  config = workers_lib.session_config(
      job.workers, intra_op_threads=f.intra_op_threads, inter_op_threads=f.inter_op_threads,
      use_xla=f.use_xla, amp=f.amp, enable_scoped_allocator=f.enable_scoped_allocator)
  job.estimator = job_lib.build_estimator(
      model_fn, job.output_dir, config, job.workers, job.saves_checkpoints,
      f.save_checkpoints_steps, f.keep_checkpoint_max,
      random_seed=f.seed if f.deterministic_run else None, reports_loss=f.report_loss,
      tpu=tpu_settings(f, settings), batch_sizes=batch_sizes)
  return job.estimator


def nan_loss_error(checkpoint_step, output_dir, learning_rate, manual_fp16=False,
                   init_loss_scale=None, bf16=False):
  """The error to stop a job with when the Estimator's NaN-loss check fired.

  Args:
    checkpoint_step: global step of the newest checkpoint (0: none).
    output_dir: where the checkpoints are.
    learning_rate: --learning_rate (per worker).
    manual_fp16: the encoder ran in fp16.
    init_loss_scale: --init_loss_scale (fp16).
    bf16: the encoder ran in bf16.

  Returns:
    an `errors.TrainingDivergedError` naming the flags to change and where a rerun resumes.
  """
  advice = ["lower --learning_rate (now %g per worker) or raise --num_warmup_steps" % learning_rate]
  if manual_fp16:
    advice.append("fp16 activations may overflow: lower --init_loss_scale (now %d), or train in "
                  "fp32 (without --manual_fp16)" % init_loss_scale)
  if bf16:
    advice.append("bf16 has fp32's range but 8 bits of mantissa: if fp32 (without --bf16) "
                  "trains, keep fp32 for this model")
  advice.append("check the input records (a NaN masked_lm_weights value makes a NaN loss)")
  resume = ("running the same command again resumes from the newest checkpoint (step %d in %s)"
            % (checkpoint_step, output_dir) if checkpoint_step else
            "no checkpoint was saved: a rerun starts from step 0")
  return errors.TrainingDivergedError(
      "the training loss became NaN. What to try: %s. After a change, %s."
      % ("; ".join(advice), resume))


def train(f, job, input_fn, num_train_steps, loss_names=None, explain_input_error=None):
  """Trains to `num_train_steps` updates with the job's hooks (checkpoints, the log line every
  --display_loss_steps updates and its TensorBoard scalars, weight sync, Horovod broadcast).

  Args:
    f: the parsed flags.
    job: with its estimator built.
    input_fn: the training input function.
    num_train_steps: optimizer updates to train to.
    loss_names: the losses of the log line besides total_loss; None: the pretraining losses.
    explain_input_error: optional function error -> error naming the bad input.
  """
  log_hook = None
  if f.report_loss:
    kwargs = {} if loss_names is None else {"loss_names": loss_names}
    log_hook = hooks_lib.TrainingLogHook(
        job.run_logger, global_batch_size(f, job.workers),
        num_accumulation_steps=f.num_accumulation_steps, display_loss_steps=f.display_loss_steps,
        save_checkpoints_steps=f.save_checkpoints_steps if job.saves_checkpoints else None,
        num_train_steps=num_train_steps,
        # TensorBoard run "train", beside the Estimator's "eval".
        summary_dir=os.path.join(job.output_dir, "train"), **kwargs)
  hooks = job_lib.training_hooks(
      job.workers, job.output_dir if job.saves_checkpoints else None, f.save_checkpoints_steps,
      save_graph_def=f.save_graph_def, log_hook=log_hook, force_weight_sync=f.force_weight_sync,
      num_accumulation_steps=f.num_accumulation_steps)
  job_lib.train(job.estimator, input_fn, num_train_steps, f.output_dir, hooks,
                explain_input_error=explain_input_error,
                explain_nan_loss=lambda step: nan_loss_error(
                    step, f.output_dir, f.learning_rate, f.manual_fp16, f.init_loss_scale,
                    f.bf16))
