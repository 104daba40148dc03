"""The job of every Estimator script: run_pretraining.py, run_squad.py, run_classifier.py.

A script keeps only what differs (its own flags, its head, its data) and follows these steps, each
written once, here:

  def run(f, config):      # f: the parsed flags (the script's own); config: the shared ones
    config.check({"do_train": f.do_train, "do_predict": f.do_predict})  # before anything is read
    bert_config = job_lib.load_bert_config(config)
    workers = job_lib.start_workers(config)
    ...the script's data...
    model = job_lib.Model(head_fn, bert_config, job_lib.dropout_seed(config, bert_config))
    job = job_lib.Job.open(config, PROGRAM, workers, model,
                           job_lib.Plan(num_train_steps, num_warmup_steps, batch_sizes))
    job.train(input_fn)                                      # every worker
    job.evaluate(input_fn, steps) / job.predict(input_fn, batch_size)   # rank 0
    job.close()

  main = entry.script_main(PROGRAM, run, DEFAULTS)  # PROGRAM = "run_squad.py": defaults, the
                                                    # JobConfig, logging, exit status

`Job.open` is the one set-up between a script's data and its training: the --init_checkpoint's
check, this worker's output directory (--output_dir's lock) and run log, the start line, the
training settings, the model function and the Estimator. Everything here takes the
`job_config.JobConfig`, never the flags object; every check of a flag's value happens in
`JobConfig.check` (and the script's own checks) before any graph is built.
"""

import dataclasses
import os
import typing

from absl import logging
import psutil
import tensorflow as tf

import modeling
import optimization
from utils.checkpoints import compat as checkpoint_compat
from utils.checkpoints import contents as checkpoints_lib
from utils.checkpoints import recovery
from utils.core import errors
from utils.model import size as model_size
from utils.runlog import dllogger_setup
from utils.runlog import start_line
from utils.runtime import hvd_utils
from utils.runtime import workers as workers_lib
from utils.training import determinism
from utils.training import estimator as estimator_lib
from utils.training import job_config
from utils.training import messages
from utils.training import model_fn as model_fn_lib
from utils.training import precision as precision_lib
from utils.training import watched_training


@dataclasses.dataclass(frozen=True)
class Model:
  """What a job builds: a task head on `modeling.BertModel`.

  Attributes:
    head_fn: the task's head (`utils/training/model_fn.py`).
    bert_config: from `load_bert_config`.
    dropout_seed: from `dropout_seed` (None: stateful dropout).
    training_dropout: the training graph's dropout probability instead of the configuration's
      (`model_fn_lib.with_training_dropout`), or None.
    layouts: pretraining's `record_layout.Layouts` (packed rows or not, per graph), or None.
  """
  head_fn: typing.Callable
  bert_config: modeling.BertConfig
  dropout_seed: typing.Optional[int] = None
  training_dropout: typing.Optional[float] = None
  layouts: typing.Optional[tuple] = None


@dataclasses.dataclass(frozen=True)
class Plan:
  """The sizes of a job that the script computes (beside those of its `JobConfig`).

  Attributes:
    num_train_steps: optimizer updates (0 when the run does not train).
    num_warmup_steps: warmup updates.
    batch_sizes: dict of the TPUEstimator's batch sizes (train_batch_size, eval_batch_size,
      predict_batch_size: those the script uses), or None.
    max_sequences_per_pack: K for packed input (rows of up to K sequences: the start line and the
      training log count sequences), 0 otherwise.
    schedule_options: the `optimization.Schedule` fields the script's flags set beyond the steps
      (`JobConfig.schedule`'s options), or None for the recipe's.
  """
  num_train_steps: int
  num_warmup_steps: int = 0
  batch_sizes: typing.Optional[dict] = None
  max_sequences_per_pack: int = 0
  schedule_options: typing.Optional[dict] = None


@dataclasses.dataclass(frozen=True)
class ResumeCheck:
  """Pretraining's check of the checkpoint a job resumes from, before the Estimator is built: the
  checkpoint against the job's graph (`checkpoints/compat.py`), and a deterministic training
  run's input position (the micro-steps done, `determinism.checkpoint_micro_steps`).

  Attributes:
    max_predictions_per_seq: the masked-LM predictions per sequence of the graph.
    sequences_per_row: K when the job reads packed rows of up to K sequences, else 0.
  """
  max_predictions_per_seq: int
  sequences_per_row: int = 0


def start_workers(config):
  """Starts the job's workers (Horovod with --horovod); returns `workers_lib.Workers`."""
  return workers_lib.start_workers(config.horovod)


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
                            predictions_per_seq=predictions_per_seq,
                            optimizer_slots=len(optimization.slot_names(config.optimizer_type)))
    except ValueError as e:
      raise errors.UsageError(str(e))


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


@dataclasses.dataclass(frozen=True)
class Job:
  """An open job: this worker's output directory (locked when it is --output_dir), its run log and
  its Estimator. `open` opens one; `train`, `evaluate` and `predict` run it; `close` ends it.

  Attributes:
    program: the script's name, e.g. "run_squad.py", for the line the job ends with.
    config: the `job_config.JobConfig`.
    workers: `workers_lib.Workers`.
    plan: the `Plan`.
    output_dir: where this worker writes.
    saves_checkpoints: this worker saves checkpoints.
    run_logger: the `dllogger_setup.RunLogger` (writes on rank 0 only).
    log_path: the dllogger log file.
    output_lock: the `output_lock.OutputDirLock` of --output_dir this process holds, or None.
    estimator: the `tf.estimator.Estimator` (or TPUEstimator).
    micro_steps_done: with a `ResumeCheck` and --deterministic_run, the micro-steps done at the
      checkpoint a training job resumes from (its input continues after as many batches); else 0.
  """
  program: str
  config: job_config.JobConfig
  workers: workers_lib.Workers
  plan: Plan
  output_dir: str
  saves_checkpoints: bool
  run_logger: dllogger_setup.RunLogger
  log_path: str
  output_lock: typing.Any = None
  estimator: typing.Any = None
  micro_steps_done: int = 0

  @classmethod
  def open(cls, config, program, workers, model, plan, resume_check=None):
    """Opens the job: everything between the script's data and training, in one order for every
    script (the --init_checkpoint's check, this worker's output directory and run log, the start
    line, the training settings, the model function, `resume_check`, the Estimator).

    Args:
      config: the `job_config.JobConfig`.
      program: the script's name, e.g. "run_squad.py" (as given to `entry.script_main`).
      workers: from `start_workers`.
      model: the `Model`.
      plan: the `Plan`.
      resume_check: None, or pretraining's `ResumeCheck`.

    Returns:
      the `Job`.

    Raises:
      errors.UsageError: --init_checkpoint does not fit the model, or `resume_check` refuses the
        checkpoint.
      errors.DiskFullError: the run log found no space, or a training job's next checkpoint
        would not fit.
    """
    init_checkpoint = checked_init_checkpoint(config, model.bert_config)
    output_dir, saves, lock = workers_lib.worker_output_dir(
        workers, config.output_dir, config.node_local_output_dir, config.checkpoint_all_workers)
    prepare_checkpoints(config, output_dir, saves)
    log_path = config.dllog_path or os.path.join(config.output_dir, "bert_dllog.json")
    with messages.explaining_full_disks(config.output_dir):
      run_logger = dllogger_setup.open_run_log(log_path, workers.rank,
                                               estimator_lib.checkpoint_step(config.output_dir))
    device = start_line.compute_device(config.use_tpu, config.tpu_name, workers.local_rank)
    config, choice = precision_lib.decide_precision(config, model.bert_config, device,
                                                    workers.rank)
    log_start_line(program, config, workers, plan, device, choice)
    if init_checkpoint and workers.rank == 0:
      logging.info("%s: initialising from checkpoint %s%s", program, init_checkpoint,
                   "" if init_checkpoint == config.init_checkpoint else
                   " (the newest in --init_checkpoint=%s)" % config.init_checkpoint)
    model_fn = model_fn_lib.model_fn_builder(
        model.head_fn, model.bert_config, init_checkpoint, training_settings(config, workers, plan),
        verbose_logging=config.verbose_logging, dropout_seed=model.dropout_seed,
        training_dropout=model.training_dropout, layouts=model.layouts)
    micro_steps_done = 0
    if resume_check is not None:
      micro_steps_done = check_resume(config, resume_check, output_dir, saves, model_fn)
    estimator = estimator_lib.build_estimator(config, workers, model_fn, output_dir, saves,
                                              plan.batch_sizes)
    return cls(program=program, config=config, workers=workers, plan=plan, output_dir=output_dir,
               saves_checkpoints=saves, run_logger=run_logger, log_path=log_path,
               output_lock=lock, estimator=estimator, micro_steps_done=micro_steps_done)

  @property
  def is_chief(self):
    """Rank 0: evaluates, predicts and writes the results."""
    return self.workers.rank == 0

  @property
  def checkpoint_dir(self):
    """Where this worker saves checkpoints, or None when it saves none."""
    return self.output_dir if self.saves_checkpoints else None

  def train(self, input_fn, loss_names=None, explain_input_error=None, input_check=None):
    """Trains to the plan's updates, stopping on a signal or a bad input record
    (`watched_training.train`, which says what the arguments are)."""
    watched_training.train(self, input_fn, loss_names=loss_names,
                           explain_input_error=explain_input_error, input_check=input_check)

  def evaluate(self, input_fn, steps, explain_input_error=None):
    """Evaluates at --eval_batch_size, logs the timing and the results, and writes
    `<output_dir>/eval_results.txt`.

    Args:
      input_fn: the evaluation input function.
      steps: at most this many batches (evaluation also stops at the end of the data), or None.
      explain_input_error: optional function error -> error naming the bad input.

    Returns:
      dict of the evaluation results.
    """
    return estimator_lib.evaluate(
        self.estimator, input_fn, steps, self.run_logger, self.config.eval_batch_size,
        self.output_dir, explain_input_error=explain_input_error,
        packed=bool(self.plan.max_sequences_per_pack))

  def predict(self, input_fn, batch_size, explain_input_error=None):
    """The model's predictions, one example at a time, every batch timed.

    Args:
      input_fn: the prediction input function.
      batch_size: sequences per batch.
      explain_input_error: optional function error -> error naming the bad input.

    Returns:
      an iterator of the predictions dict of each example.
    """
    return estimator_lib.predict(self.estimator, input_fn, self.run_logger, batch_size,
                                 explain_input_error=explain_input_error)

  def close(self):
    """Closes the run log and says where the outputs are (rank 0)."""
    self.run_logger.close()
    if self.is_chief:
      logging.info("outputs: checkpoints in %s, dllogger log %s", self.output_dir, self.log_path)


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
  estimator_lib.check_init_checkpoint(prefix)
  mismatch = model_fn_lib.first_shape_mismatch(prefix, bert_config)
  if mismatch is not None:
    name, checkpoint_shape, model_shape = mismatch
    raise errors.UsageError(
        "--init_checkpoint=%s: variable %s has shape %s in the checkpoint but %s in the model of "
        "--bert_config_file=%s" % (prefix, name, checkpoint_shape, model_shape,
                                   config.bert_config_file))
  return prefix


def prepare_checkpoints(config, output_dir, saves_checkpoints):
  """Chooses the checkpoint the job resumes from before anything reads the index; checks that
  a training job's next checkpoint fits on the disk.

  The worker that saves checkpoints into `output_dir` removes the leftovers of interrupted
  saves, steps back from an unreadable newest checkpoint and applies --resume_from_step
  (`recovery.prepare_resume`, one log line when it changes the checkpoint); every worker then
  waits for rank 0, so all read the same index.

  Args:
    config: the `job_config.JobConfig`.
    output_dir: this worker's output directory.
    saves_checkpoints: this worker saves checkpoints there.

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


def start_line_sizes(config, num_workers, plan):
  """The `start_line.Sizes` of a job of `num_workers` workers with the `Plan` `plan`."""
  return start_line.Sizes(
      num_workers=num_workers, batch_size=config.train_batch_size,
      accumulation_steps=config.num_accumulation_steps,
      global_batch_size=config.global_batch_size(num_workers),
      learning_rate=config.learning_rate, job_learning_rate=config.job_learning_rate(num_workers),
      num_train_steps=plan.num_train_steps, num_warmup_steps=plan.num_warmup_steps,
      max_sequences_per_pack=plan.max_sequences_per_pack)


def log_start_line(program, config, workers, plan, device, choice):
  """Logs the start line (`start_line.start_line`) for this machine, on rank 0 only (the job's
  settings are the same on every worker; ranks > 0 log warnings only anyway, but the line must not
  depend on that).

  Args:
    program: the script's name.
    config: the `job_config.JobConfig`.
    workers: `workers_lib.Workers`.
    plan: the `Plan`.
    device: from `start_line.compute_device`.
    choice: the `bf16_probe.PrecisionChoice` of `precision.decide_precision`.
  """
  if workers.rank != 0:
    return
  logging.info("%s", start_line.start_line(
      program, choice.precision, device, start_line_sizes(config, workers.size, plan),
      note=choice.reason, auto=config.auto_precision))


def training_settings(config, workers, plan):
  """The training step's settings, built once from the configuration's views (the start line says
  what they are).

  Args:
    config: the `job_config.JobConfig`.
    workers: `workers_lib.Workers` (the learning rate is per worker; the job's is that x workers).
    plan: the `Plan` (its updates).

  Returns:
    `model_fn_lib.TrainingSettings`.
  """
  return model_fn_lib.TrainingSettings(
      schedule=config.schedule(workers.size, plan.num_train_steps, plan.num_warmup_steps,
                               plan.schedule_options),
      precision=config.precision, accumulation=config.accumulation,
      distribution=config.distribution(workers.hvd))


def check_resume(config, resume_check, output_dir, saves_checkpoints, model_fn):
  """Runs pretraining's `ResumeCheck`: a deterministic training run's micro-steps done (its own
  message first), then the newest checkpoint in `output_dir` against the job's graph; a training
  job that saves checkpoints records its optimizer there.

  Args:
    config: the `job_config.JobConfig`.
    resume_check: the `ResumeCheck`.
    output_dir: this worker's output directory.
    saves_checkpoints: this worker saves checkpoints there.
    model_fn: the job's model function.

  Returns:
    the micro-steps done at --output_dir's newest checkpoint (a deterministic training run),
    else 0.

  Raises:
    errors.UsageError: the checkpoint cannot be resumed by this job (naming why).
  """
  micro_steps = 0
  if config.do_train and config.deterministic_run:
    try:
      micro_steps = determinism.checkpoint_micro_steps(config.output_dir)
    except ValueError as e:
      raise errors.UsageError("--deterministic_run: %s" % e)
    if micro_steps:
      logging.info("deterministic resume: %d micro-steps done, the input continues after %d "
                   "records per worker", micro_steps, micro_steps * config.train_batch_size)
  try:
    checkpoint_compat.check_output_dir(output_dir, model_fn, config.do_train,
                                       config.max_seq_length,
                                       resume_check.max_predictions_per_seq, config.optimizer_type,
                                       resume_check.sequences_per_row)
  except checkpoint_compat.CheckpointMismatch as e:
    raise errors.UsageError(str(e))
  if config.do_train and saves_checkpoints:
    checkpoint_compat.record_optimizer(output_dir, config.optimizer_type)
  return micro_steps
