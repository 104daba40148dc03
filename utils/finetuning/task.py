"""What the fine-tuning scripts (run_squad.py, run_classifier.py) share besides the job itself:
their records and input, the number of updates, the tokenizer, the SavedModel export and the
refusal of an --export_dir in use. Each function takes the typed configurations
(`utils/finetuning/config.FinetuningConfig`, the shared `utils/training/job_config.JobConfig`) or
plain values, never the flags object.

The job (config, workers, output directory, model_fn around the task's head, estimator, training)
is the one every Estimator script opens and runs (`utils/training/job.py`); a task supplies a
head (`utils/model/heads.py`) and its data.

Reduced precision follows TF's official BERT fine-tuning: the encoder's matmuls run in fp16, the
GELU intermediate activation in fp32 (modeling.py), the layer norms in the fused kernel with fp32
statistics, and heads cast the encoder output to fp32, so logits, softmax and loss are fp32.
"""

import os
import shutil

import tensorflow as tf

import tokenization
from utils.core import staging
from utils.core import errors
from utils.data import input_pipeline

def int_record(values):
  """A tf.train.Example from dict name -> list of ints (int64 features, in the dict's order)."""
  return tf.train.Example(features=tf.train.Features(feature={
      name: tf.train.Feature(int64_list=tf.train.Int64List(value=list(ints)))
      for name, ints in values.items()}))


def _record_writer(path):
  """A TFRecordWriter of `path`, its directory made first: a Horovod worker's own output directory
  is made only once something is written there (docs/MULTINODE.md, "Outputs")."""
  tf.io.gfile.makedirs(os.path.dirname(path) or ".")
  return tf.io.TFRecordWriter(path)


def write_records(path, records):
  """Writes an iterable of dicts name -> list of ints as TFRecords; returns how many."""
  count = 0
  with _record_writer(path) as writer:
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
    self._writer = _record_writer(path)

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
    # Traced as written: AutoGraph's source rewriting would only cost start-up time (no Python
    # control flow on tensors here).
    return input_pipeline.without_autotuning(records.map(
        tf.autograph.experimental.do_not_convert(
            lambda batch: _decode_batch(batch, name_to_features))))

  return input_fn


def _decode_batch(records, name_to_features):
  """Parses a batch of serialised examples; int64 features become int32 (as the TPU needs)."""
  features = tf.io.parse_example(records, name_to_features)
  return {name: tf.cast(value, tf.int32) for name, value in features.items()}


def training_steps(tuning, num_examples, global_batch_size):
  """(num_train_steps, num_warmup_steps): the updates of --num_train_epochs over `num_examples`
  training examples (not windows) at the global batch, as the release counts them.

  Args:
    tuning: the `FinetuningConfig` (--num_train_epochs, --warmup_proportion).
    num_examples: the training examples.
    global_batch_size: examples per update (`JobConfig.global_batch_size`).

  Raises:
    errors.UsageError: when that is no update at all.
  """
  num_train_steps = int(num_examples / global_batch_size * tuning.num_train_epochs)
  errors.require(num_train_steps >= 1, "%d training examples make no update of global batch %d "
                 "in --num_train_epochs=%g", num_examples, global_batch_size,
                 tuning.num_train_epochs)
  return num_train_steps, int(num_train_steps * tuning.warmup_proportion)


def load_tokenizer(vocab_file, do_lower_case, vocab_size=None):
  """The FullTokenizer of --vocab_file / --do_lower_case.

  Args:
    vocab_file: the vocabulary (`JobConfig.vocab_file`).
    do_lower_case: `FinetuningConfig.do_lower_case`.
    vocab_size: the model's vocabulary size (`BertConfig.vocab_size`), or None: a vocabulary
      with more tokens gives ids beyond the model's embedding table, refused.

  Returns:
    A `tokenization.FullTokenizer`.

  Raises:
    errors.UsageError: naming a bad or too large file.
  """
  try:
    tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file,
                                           do_lower_case=do_lower_case)
  except (ValueError, OSError) as e:
    raise errors.UsageError("--vocab_file: %s" % e)
  errors.require(vocab_size is None or len(tokenizer.vocab) <= vocab_size,
                 "--vocab_file: %s has %d tokens, more than vocab_size=%s of --bert_config_file "
                 "(its ids would fall outside the model's embeddings)", vocab_file,
                 len(tokenizer.vocab), vocab_size)
  return tokenizer


def predict_input_fn(config, input_file, name_to_features, batch_size):
  """The input_fn of evaluation / prediction records: every record once, in order.

  Args:
    config: the `JobConfig` (--use_tpu: the batch is params["batch_size"], whole batches only).
    input_file, name_to_features: the records and their parsing spec.
    batch_size: sequences per batch.
  """
  return input_fn_builder(input_file, name_to_features, is_training=False,
                          drop_remainder=bool(config.use_tpu),
                          batch_size=None if config.use_tpu else batch_size)


def train_input_fn(config, input_file, name_to_features, workers):
  """The input_fn of this worker's training records (in file order in a deterministic run).

  Args:
    config: the `JobConfig` (--use_tpu, --train_batch_size, --deterministic_run, --seed).
    input_file, name_to_features: the records and their parsing spec.
    workers: the job's workers (their number and this one's rank).
  """
  return input_fn_builder(
      input_file, name_to_features, is_training=True, drop_remainder=True,
      batch_size=None if config.use_tpu else config.train_batch_size, num_workers=workers.size,
      worker_index=workers.rank, deterministic=config.deterministic_run,
      seed=config.random_seed)


# The inputs of a fine-tuned model's SavedModel (`serving_default`), int32 [batch, seq_length].
SERVING_INPUTS = ("input_ids", "input_mask", "segment_ids")


def check_export_dir(export_dir):
  """Refuses an --export_dir that exists and is not empty, before any training (None or "": no
  export)."""
  if export_dir:
    staging.check_empty_or_missing(export_dir, "--export_dir")


def serving_input_receiver_fn(max_seq_length, constant_features=()):
  """The serving input of a fine-tuned model: SERVING_INPUTS as int32 [batch, max_seq_length]
  placeholders, plus features the head reads but serving does not take (e.g. labels), as
  int32 zeros [batch]."""

  def receiver_fn():
    inputs = {name: tf.compat.v1.placeholder(tf.int32, [None, max_seq_length], name=name)
              for name in SERVING_INPUTS}
    features = dict(inputs)
    batch_size = tf.shape(inputs["input_ids"])[0]
    for name in constant_features:
      features[name] = tf.zeros([batch_size], tf.int32)
    return tf.estimator.export.ServingInputReceiver(features, inputs)

  return receiver_fn


def export_saved_model(estimator, export_dir, max_seq_length, constant_features=()):
  """Writes the SavedModel of the Estimator's newest checkpoint into `export_dir` (whole or not
  at all), with the `serving_default` signature: SERVING_INPUTS -> the head's predictions.

  Args:
    estimator: the job's Estimator (its model_dir holds the fine-tuned checkpoint).
    export_dir: the SavedModel's directory; missing or empty.
    max_seq_length: the sequence length the model serves.
    constant_features: names of int32 features fed as zeros (see `serving_input_receiver_fn`).

  Returns:
    `export_dir`.

  Raises:
    errors.UsageError: no checkpoint to export, or a non-empty `export_dir`.
  """
  checkpoint = tf.train.latest_checkpoint(estimator.model_dir)
  if not checkpoint:
    raise errors.UsageError("--export_dir: %s holds no checkpoint to export (fine-tune with "
                            "--do_train first)" % estimator.model_dir)
  with staging.staged_directory(export_dir, "--export_dir") as tmp:
    written = estimator.export_saved_model(
        os.path.join(tmp, "base"), serving_input_receiver_fn(max_seq_length, constant_features),
        checkpoint_path=checkpoint)
    written = written.decode() if isinstance(written, bytes) else written
    for name in os.listdir(written):
      shutil.move(os.path.join(written, name), os.path.join(tmp, name))
    shutil.rmtree(os.path.join(tmp, "base"))
  return export_dir
