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

from absl import logging
import tensorflow as tf

import modeling
import optimization

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


def training_steps(num_examples, global_batch_size, num_train_epochs, warmup_proportion):
  """(num_train_steps, num_warmup_steps): updates for the epochs, as the release counts them.

  Args:
    num_examples: training examples (not windows).
    global_batch_size: examples per update over all workers.
    num_train_epochs: float epochs.
    warmup_proportion: fraction of the updates spent warming up.
  """
  num_train_steps = int(num_examples / global_batch_size * num_train_epochs)
  return num_train_steps, int(num_train_steps * warmup_proportion)


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


def model_fn_builder(head_fn, bert_config, init_checkpoint, learning_rate, num_train_steps,
                     num_warmup_steps, hvd=None, manual_fp16=False, amp=False,
                     num_accumulation_steps=1, optimizer_type="adam",
                     allreduce_post_accumulation=False, init_loss_scale=2**32, use_tpu=False,
                     tpu_estimator_spec=None, use_one_hot_embeddings=False,
                     verbose_logging=False):
  """The model_fn of a fine-tuning Estimator (or TPUEstimator).

  Args:
    head_fn: head_fn(model, features, mode) -> HeadOutput; `model` is the BertModel.
    bert_config: `modeling.BertConfig`.
    init_checkpoint: checkpoint whose matching variables initialise the model, or None.
    learning_rate: effective peak learning rate (per-worker rate x workers).
    num_train_steps, num_warmup_steps: optimizer updates.
    hvd: `horovod.tensorflow` under Horovod, else None.
    manual_fp16: fp16 encoder, fp32 master weights, dynamic loss scaling.
    amp: automatic mixed precision (GPU): loss scaling.
    num_accumulation_steps, optimizer_type, allreduce_post_accumulation, init_loss_scale, use_tpu:
      see `optimization.create_optimizer`.
    tpu_estimator_spec: return TPUEstimatorSpecs (default: use_tpu).
    use_one_hot_embeddings: one-hot embedding lookup (TPU).
    verbose_logging: list the trainable variables.

  Returns:
    model_fn(features, labels, mode, params).
  """
  if tpu_estimator_spec is None:
    tpu_estimator_spec = use_tpu

  def model_fn(features, labels, mode, params):  # pylint: disable=unused-argument
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    model = modeling.BertModel(
        config=bert_config, is_training=is_training, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
        use_one_hot_embeddings=use_one_hot_embeddings,
        compute_type=tf.float16 if manual_fp16 else tf.float32)
    head = head_fn(model, features, mode)
    scaffold_fn, loaded = _init_from_checkpoint(init_checkpoint, tpu_estimator_spec)
    if verbose_logging:
      for var in _tf1.trainable_variables():
        logging.info("  name = %s, shape = %s%s", var.name, var.shape,
                     ", *INIT_FROM_CKPT*" if var.name in loaded else "")
    spec = {"mode": mode}
    if mode == tf.estimator.ModeKeys.TRAIN:
      loss = tf.identity(head.loss, name="total_loss")
      spec.update(loss=loss, train_op=optimization.create_optimizer(
          loss, learning_rate, num_train_steps, num_warmup_steps, hvd=hvd,
          manual_fp16=manual_fp16, use_fp16=amp, num_accumulation_steps=num_accumulation_steps,
          optimizer_type=optimizer_type, allreduce_post_accumulation=allreduce_post_accumulation,
          init_loss_scale=init_loss_scale, use_tpu=use_tpu))
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
