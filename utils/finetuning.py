"""What the fine-tuning scripts (run_squad.py, run_classifier.py) share: records, input, model_fn.

A task supplies a *head*: a function that takes the encoder and the features and returns a
`HeadOutput` (loss, predictions, evaluation metrics). `model_fn_builder` wraps it with everything
else: the BertModel (fp32 or fp16 compute), initialisation from a pretrained checkpoint, the
training step of `optimization.create_optimizer` (dynamic loss scaling, fp32 master weights,
accumulation, Horovod allreduce) and the Estimator / TPUEstimator specs.

Reduced precision follows TF's official BERT fine-tuning: the encoder's matmuls run in fp16, the
GELU intermediate activation in fp32 (modeling.py), the layer norms in the fused kernel with fp32
statistics, and heads cast the encoder output to fp32, so logits, softmax and loss are fp32.
"""

import collections
import os

from absl import app
from absl import logging
import tensorflow as tf

import modeling
import optimization
import tokenization
from utils import dllogger_setup
from utils import graph_names
from utils import hooks as hooks_lib
from utils import job as job_lib

_tf1 = tf.compat.v1

HeadOutput = collections.namedtuple("HeadOutput", ["loss", "predictions", "metric_fn",
                                                   "metric_args"])
HeadOutput.__doc__ = """What a task head returns.

Fields: loss, fp32 scalar (None when the mode has no labels); predictions, dict of Tensors
(PREDICT); metric_fn(*metric_args) -> dict of streaming metrics (EVAL), or None."""


def int_record(values):
  """A tf.train.Example from dict name -> list of ints (int64 features, in the dict's order)."""
  return tf.train.Example(features=tf.train.Features(feature={
      name: tf.train.Feature(int64_list=tf.train.Int64List(value=list(ints)))
      for name, ints in values.items()}))


def write_records(path, records):
  """Writes an iterable of dicts name -> list of ints as TFRecords; returns how many."""
  count = 0
  with tf.io.TFRecordWriter(path) as writer:
    for record in records:
      writer.write(int_record(record).SerializeToString())
      count += 1
  return count


class RecordWriter(object):
  """Writes records one at a time (an `output_fn` for streaming feature conversion)."""

  def __init__(self, path, to_record):
    """Opens `path`; `to_record(feature)` gives the dict name -> list of ints to write."""
    self.filename = path
    self.num_features = 0
    self._to_record = to_record
    self._writer = tf.io.TFRecordWriter(path)

  def process_feature(self, feature):
    """Writes one feature."""
    self._writer.write(int_record(self._to_record(feature)).SerializeToString())
    self.num_features += 1

  def close(self):
    self._writer.close()


def int_feature_spec(seq_length, sequence_names, scalar_names):
  """Parsing spec: int64 [seq_length] for `sequence_names`, int64 [] for `scalar_names`."""
  spec = {name: tf.io.FixedLenFeature([seq_length], tf.int64) for name in sequence_names}
  spec.update({name: tf.io.FixedLenFeature([], tf.int64) for name in scalar_names})
  return spec


def input_fn_builder(input_file, name_to_features, is_training, drop_remainder, batch_size=None,
                     num_workers=1, worker_index=0, deterministic=False, seed=None):
  """The input_fn of a fine-tuning record file (features cast to int32).

  Training reads this worker's records (record i goes to worker i mod num_workers), repeated,
  shuffled in a buffer of 100 (not with `deterministic`); otherwise every record once, in order.

  Args:
    input_file: the TFRecord file.
    name_to_features: the parsing spec (`int_feature_spec`).
    is_training: repeat, shard and shuffle.
    drop_remainder: drop a last partial batch.
    batch_size: sequences per batch; None takes params["batch_size"] (TPUEstimator).
    num_workers, worker_index: Horovod size and rank.
    deterministic: no shuffling (the order is the file's).
    seed: shuffle seed.

  Returns:
    input_fn(params) -> tf.data.Dataset of feature dicts.
  """

  def input_fn(params):
    size = batch_size if batch_size is not None else params["batch_size"]
    records = tf.data.TFRecordDataset(input_file)
    if is_training:
      if num_workers > 1:
        records = records.shard(num_workers, worker_index)
      records = records.repeat()
      if not deterministic:
        records = records.shuffle(buffer_size=100, seed=seed)
    records = records.batch(size, drop_remainder=drop_remainder)
    return records.map(lambda batch: _decode_batch(batch, name_to_features))

  return input_fn


def _decode_batch(records, name_to_features):
  """Parses a batch of serialised examples; int64 features become int32 (as the TPU needs)."""
  features = tf.io.parse_example(records, name_to_features)
  return {name: tf.cast(value, tf.int32) for name, value in features.items()}


def training_steps(f, num_examples, workers):
  """(num_train_steps, num_warmup_steps): the updates of --num_train_epochs over `num_examples`
  training examples (not windows) at the global batch, as the release counts them.

  Raises:
    job.UsageError: when that is no update at all.
  """
  batch = global_batch_size(f, workers)
  num_train_steps = int(num_examples / batch * f.num_train_epochs)
  job_lib.require(num_train_steps >= 1, "%d training examples make no update of global batch %d "
                  "in --num_train_epochs=%g", num_examples, batch, f.num_train_epochs)
  return num_train_steps, int(num_train_steps * f.warmup_proportion)


def encoder_output_fp32(tensor):
  """The encoder's output cast to fp32 for a head (fp16 logits would lose the loss' precision)."""
  return tf.cast(tensor, tf.float32)


def log_probabilities(logits):
  """fp32 log-softmax over the last axis."""
  return tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)


def _init_from_checkpoint(init_checkpoint, use_scaffold_fn):
  """Maps the checkpoint's variables onto the graph's; returns (scaffold_fn, loaded names)."""
  tvars = _tf1.trainable_variables()
  if not init_checkpoint:
    return None, {}
  assignment_map, loaded = modeling.get_assignment_map_from_checkpoint(tvars, init_checkpoint)
  if use_scaffold_fn:
    def scaffold_fn():
      _tf1.train.init_from_checkpoint(init_checkpoint, assignment_map)
      return _tf1.train.Scaffold()
    return scaffold_fn, loaded
  _tf1.train.init_from_checkpoint(init_checkpoint, assignment_map)
  return None, loaded


def model_fn_builder(head_fn, bert_config, init_checkpoint, schedule,
                     precision=optimization.Precision(),
                     accumulation=optimization.Accumulation(),
                     distribution=optimization.Distribution(), verbose_logging=False):
  """The model_fn of a fine-tuning Estimator (or TPUEstimator).

  Args:
    head_fn: head_fn(model, features, mode) -> HeadOutput; `model` is the BertModel.
    bert_config: `modeling.BertConfig`.
    init_checkpoint: checkpoint whose matching variables initialise the model, or None.
    schedule, precision, accumulation, distribution: the training step's settings
      (`optimization.build_train_op`); with precision.manual_fp16 the encoder computes in fp16,
      with distribution.use_tpu the embeddings are looked up one-hot, and a TPUEstimator
      (distribution.uses_tpu_estimator) gets TPUEstimatorSpecs.
    verbose_logging: list the trainable variables.

  Returns:
    model_fn(features, labels, mode, params).
  """
  tpu_estimator_spec = distribution.uses_tpu_estimator

  def model_fn(features, labels, mode, params):  # pylint: disable=unused-argument
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    model = modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
        use_one_hot_embeddings=distribution.use_tpu,
        compute_type=tf.float16 if precision.manual_fp16 else tf.float32)
    head = head_fn(model, features, mode)
    scaffold_fn, loaded = _init_from_checkpoint(init_checkpoint, tpu_estimator_spec)
    if verbose_logging:
      for var in _tf1.trainable_variables():
        logging.info("  name = %s, shape = %s%s", var.name, var.shape,
                     ", *INIT_FROM_CKPT*" if var.name in loaded else "")
    spec = {"mode": mode}
    if mode == tf.estimator.ModeKeys.TRAIN:
      loss = tf.identity(head.loss, name=graph_names.TOTAL_LOSS)
      spec.update(loss=loss, train_op=optimization.build_train_op(
          loss, schedule, precision, accumulation, distribution))
    elif mode == tf.estimator.ModeKeys.EVAL:
      spec["loss"] = head.loss
      if tpu_estimator_spec:
        spec["eval_metrics"] = (head.metric_fn, head.metric_args)
      else:
        spec["eval_metric_ops"] = head.metric_fn(*head.metric_args)
    else:
      spec["predictions"] = head.predictions
    if tpu_estimator_spec:
      return _tf1.estimator.tpu.TPUEstimatorSpec(scaffold_fn=scaffold_fn, **spec)
    return tf.estimator.EstimatorSpec(**spec)

  return model_fn


# -------------------------------------------------------------------------------------------------
# The job around the model: checks, start-up, training (on the job skeleton of utils/job.py).
# -------------------------------------------------------------------------------------------------

def check_flags(f, actions):
  """Checks the shared flags that need no file access.

  Args:
    f: parsed flags (see utils/finetuning_flags.py).
    actions: the script's action flags, e.g. ("do_train", "do_predict").

  Raises:
    job.UsageError: naming the flag.
  """
  require = job_lib.require
  require(any(getattr(f, name) for name in actions),
          "one of %s is required", ", ".join("--" + name for name in actions))
  for name in ("bert_config_file", "vocab_file", "output_dir"):
    require(getattr(f, name), "--%s is required", name)
  for name in ("max_seq_length", "train_batch_size", "save_checkpoints_steps",
               "iterations_per_loop", "num_tpu_cores", "keep_checkpoint_max",
               "display_loss_steps"):
    require(getattr(f, name) >= 1, "--%s must be >= 1, got %d", name, getattr(f, name))
  require(f.learning_rate > 0, "--learning_rate must be positive, got %g", f.learning_rate)
  require(f.num_train_epochs > 0, "--num_train_epochs must be positive, got %g",
          f.num_train_epochs)
  require(0 <= f.warmup_proportion < 1, "--warmup_proportion must be in [0, 1), got %g",
          f.warmup_proportion)
  try:
    optimization.check_optimizer_type(f.optimizer_type, as_flags=True)
    optimization.check_precision(f.manual_fp16, f.amp, f.init_loss_scale, as_flags=True)
    optimization.check_accumulation(f.num_accumulation_steps, as_flags=True)
    optimization.check_distribution(f.use_tpu, f.horovod, f.num_accumulation_steps,
                                    as_flags=True)
    tokenization.validate_case_matches_checkpoint(f.do_lower_case, f.init_checkpoint)
  except ValueError as e:
    raise job_lib.UsageError(str(e))


def load_bert_config(f):
  """The model configuration of --bert_config_file, checked against --max_seq_length; without
  dropout and with deterministic ops for --deterministic_run."""
  try:
    bert_config = modeling.BertConfig.from_json_file(f.bert_config_file)
  except ValueError as e:
    raise job_lib.UsageError("--bert_config_file: %s" % e)
  job_lib.require(bert_config.max_position_embeddings >= f.max_seq_length,
                  "--max_seq_length=%d exceeds max_position_embeddings=%d of %s",
                  f.max_seq_length, bert_config.max_position_embeddings, f.bert_config_file)
  if f.deterministic_run:
    bert_config.hidden_dropout_prob = 0.0
    bert_config.attention_probs_dropout_prob = 0.0
    tf.config.experimental.enable_op_determinism()
  return bert_config


def load_tokenizer(f):
  """The FullTokenizer of --vocab_file / --do_lower_case (UsageError naming a bad file)."""
  try:
    return tokenization.FullTokenizer(vocab_file=f.vocab_file, do_lower_case=f.do_lower_case)
  except (ValueError, OSError) as e:
    raise job_lib.UsageError("--vocab_file: %s" % e)


def prepare(f, read_train_examples):
  """What a script needs before its Estimator: configuration, tokenizer, workers, training data.

  Args:
    f: parsed flags.
    read_train_examples: function () -> list of training examples (called with --do_train).

  Returns:
    (bert_config, tokenizer, `job.Workers`, training examples ([] without --do_train),
    (num_train_steps, num_warmup_steps) (0, 0 without --do_train)).
  """
  bert_config = load_bert_config(f)
  tokenizer = load_tokenizer(f)
  workers = job_lib.start_workers(f.horovod)
  if not f.do_train:
    return bert_config, tokenizer, workers, [], (0, 0)
  examples = read_train_examples()
  return bert_config, tokenizer, workers, examples, training_steps(f, len(examples), workers)


Job = collections.namedtuple("Job", ["workers", "output_dir", "saves_checkpoints", "estimator",
                                     "run_logger"])
Job.__doc__ = """A started fine-tuning job: `job.Workers`, this worker's output directory, whether
it saves checkpoints, the Estimator and the `dllogger_setup.RunLogger`."""


def global_batch_size(f, workers):
  """Examples per optimizer update over all workers."""
  return f.train_batch_size * f.num_accumulation_steps * workers.size


def start(f, workers, head_fn, bert_config, num_train_steps, num_warmup_steps, batch_sizes):
  """Builds the Estimator around `head_fn` (see `model_fn_builder`) and the run log.

  Args:
    f: parsed flags.
    workers: from `job.start_workers`.
    head_fn: the task's head.
    bert_config: from `load_bert_config`.
    num_train_steps, num_warmup_steps: optimizer updates (from `training_steps`; 0 without
      training).
    batch_sizes: dict of the TPUEstimator's batch sizes (train_batch_size, eval_batch_size,
      predict_batch_size).

  Returns:
    `Job`.
  """
  if f.init_checkpoint:
    job_lib.check_init_checkpoint(f.init_checkpoint)
  output_dir, saves = job_lib.worker_output_dir(workers, f.output_dir, False, False)
  run_logger = dllogger_setup.open_run_log(
      f.dllog_path or os.path.join(f.output_dir, "bert_dllog.json"), workers.rank,
      job_lib.checkpoint_step(f.output_dir))
  schedule = optimization.Schedule(f.optimizer_type, f.learning_rate * workers.size,
                                   max(num_train_steps, 1), num_warmup_steps)
  distribution = optimization.Distribution(hvd=workers.hvd, use_tpu=f.use_tpu)
  logging.info("workers: %d; global batch: %d; learning rate: %g per worker x %d workers = %g; "
               "%d updates, %d of warmup", workers.size, global_batch_size(f, workers),
               f.learning_rate, workers.size, schedule.learning_rate, num_train_steps,
               num_warmup_steps)
  model_fn = model_fn_builder(
      head_fn, bert_config, f.init_checkpoint, schedule,
      optimization.Precision(manual_fp16=f.manual_fp16, amp=f.amp,
                             init_loss_scale=f.init_loss_scale),
      optimization.Accumulation(f.num_accumulation_steps, f.allreduce_post_accumulation),
      distribution, verbose_logging=f.verbose_logging)
  tpu = None
  if f.use_tpu:
    tpu = job_lib.TpuSettings(f.use_tpu, f.tpu_name, f.tpu_zone, f.gcp_project, f.master,
                              f.iterations_per_loop, f.num_tpu_cores)
  estimator = job_lib.build_estimator(
      model_fn, output_dir, job_lib.session_config(workers, use_xla=f.use_xla, amp=f.amp),
      workers, saves, f.save_checkpoints_steps, f.keep_checkpoint_max,
      random_seed=job_lib.DETERMINISTIC_SEED if f.deterministic_run else None,
      tpu=tpu, batch_sizes=batch_sizes)
  return Job(workers, output_dir, saves, estimator, run_logger)


def train(f, started, train_file, name_to_features, num_train_steps):
  """Fine-tunes on the records of `train_file` (this worker's share) for `num_train_steps`.

  Args:
    f: parsed flags.
    started: the `Job`.
    train_file: the training TFRecords.
    name_to_features: their parsing spec.
    num_train_steps: optimizer updates.
  """
  workers = started.workers
  input_fn = input_fn_builder(
      train_file, name_to_features, is_training=True, drop_remainder=True,
      batch_size=None if f.use_tpu else f.train_batch_size, num_workers=workers.size,
      worker_index=workers.rank, deterministic=f.deterministic_run,
      seed=job_lib.DETERMINISTIC_SEED if f.deterministic_run else None)
  # One dllogger line per --display_loss_steps updates: step, total_loss, learning rate,
  # throughput (fine-tuning has no mlm / nsp losses).
  log_hook = hooks_lib.TrainingLogHook(
      started.run_logger, global_batch_size(f, workers),
      num_accumulation_steps=f.num_accumulation_steps, display_loss_steps=f.display_loss_steps,
      save_checkpoints_steps=f.save_checkpoints_steps if started.saves_checkpoints else None,
      num_train_steps=num_train_steps, loss_names=())
  hooks = job_lib.training_hooks(workers, started.output_dir if started.saves_checkpoints
                                 else None, f.save_checkpoints_steps, log_hook=log_hook,
                                 num_accumulation_steps=f.num_accumulation_steps)
  job_lib.train(started.estimator, input_fn, num_train_steps, f.output_dir, hooks)


def predict_input_fn(f, input_file, name_to_features, batch_size):
  """The input_fn of evaluation / prediction records: every record once, in order."""
  return input_fn_builder(input_file, name_to_features, is_training=False,
                          drop_remainder=bool(f.use_tpu),
                          batch_size=None if f.use_tpu else batch_size)


def main_builder(script_name, run, flag_values):
  """The `main(argv)` of a fine-tuning script for absl's app.run: no positional arguments, INFO
  logging, `run(flag_values)` with usage errors as exit code 2 (`job.run_main`)."""

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError("unexpected arguments: %s" % " ".join(argv[1:]))
    logging.set_verbosity(logging.INFO)
    return job_lib.run_main(script_name, run, flag_values)

  return main
