"""The pretraining heads: masked LM and next-sentence prediction on a `modeling.BertModel`.

The release's run_pretraining.py defines these functions under the same names and signatures;
run_pretraining.py re-exports them. Variables, shapes and fp32 numerics are the release's
(docs/DESIGN.md section 4): the heads run in fp32 whatever the encoder's compute type
(`heads.encoder_output_fp32`, `modeling.ComputePrecision.HEADS`).

  built = build_pretraining_model(bert_config, features, is_training=True)   # encoder + heads
  head_fn = pretraining_head(bert_config, layouts)   # for utils/training/model_fn.py

Whether a batch holds packed rows is never read from its feature names: the record layout
(`utils/data/record_layout.py`) is decided once from the files and handed in.
"""

import modeling
import tensorflow as tf

from utils.core import graph_names
from utils.data import record_layout
from utils.model import heads

_tf1 = tf.compat.v1


def gather_indexes(sequence_tensor, positions):
  """Gathers the vectors at the masked positions of every sequence.

  Args:
    sequence_tensor: float Tensor [batch_size, seq_length, width].
    positions: int32 Tensor [batch_size, num_positions].

  Returns:
    Tensor [batch_size * num_positions, width], dtype of `sequence_tensor`.
  """
  batch_size, seq_length, width = modeling.get_shape_list(sequence_tensor, expected_rank=3)
  flat_offsets = tf.reshape(tf.range(0, batch_size, dtype=tf.int32) * seq_length, [-1, 1])
  flat_positions = tf.reshape(tf.cast(positions, tf.int32) + flat_offsets, [-1])
  flat_sequence_tensor = tf.reshape(sequence_tensor, [batch_size * seq_length, width])
  return tf.gather(flat_sequence_tensor, flat_positions)


def _stable_log_softmax(logits):
  """log-softmax in fp32 with the row maximum subtracted first (finite for any finite logits)."""
  logits = modeling.ComputePrecision.to_heads(logits)
  shifted = logits - tf.stop_gradient(tf.reduce_max(logits, axis=-1, keepdims=True))
  return tf.nn.log_softmax(shifted, axis=-1)


def softmax_cross_entropy(logits, labels):
  """-log softmax(logits)[label] per row, stable for any finite logits, with a cheap gradient.

  The loss is logsumexp(row) - row[label] = (max - row[label]) - log(max(softmax(row))): the
  largest probability is at least 1 / vocab_size, so its log never underflows, and the softmax
  (one fused kernel that subtracts the row maximum) is computed once and reused by the gradient,
  softmax - one_hot. Over a 30k vocabulary this is ~2.5x faster than
  `sparse_softmax_cross_entropy_with_logits` on CPUs and never materialises log-probs or one-hot
  labels (docs/PERFORMANCE.md).

  Args:
    logits: float32 Tensor [rows, classes].
    labels: int32 Tensor [rows], in [0, classes).

  Returns:
    float32 Tensor [rows].
  """
  labels = tf.cast(labels, tf.int32)
  label_index = tf.stack([tf.range(tf.shape(labels)[0]), labels], axis=1)

  @tf.custom_gradient
  def cross_entropy(logits):
    probs = tf.nn.softmax(logits)
    # (max - label logit) first: both may be huge, their difference is what matters.
    margin = tf.reduce_max(logits, axis=-1) - tf.gather_nd(logits, label_index)
    loss = margin - tf.math.log(tf.reduce_max(probs, axis=-1))

    def grad(dy):
      return tf.tensor_scatter_nd_sub(probs * dy[:, None], label_index, dy)

    return loss, grad

  return cross_entropy(modeling.ComputePrecision.to_heads(logits))


def get_masked_lm_output(bert_config, input_tensor, output_weights, positions, label_ids,
                         label_weights):
  """Masked LM head: predicts the original ids at the masked positions.

  The head runs in fp32 whatever the encoder's compute type. Variables:
  `cls/predictions/transform/dense/{kernel,bias}`,
  `cls/predictions/transform/LayerNorm/{beta,gamma}`, `cls/predictions/output_bias`; the output
  matrix is the word embedding table, transposed.

  Args:
    bert_config: `modeling.BertConfig`.
    input_tensor: float Tensor [batch_size, seq_length, hidden_size] (sequence output).
    output_weights: float32 Tensor [vocab_size, hidden_size] (the embedding table).
    positions: int32 Tensor [batch_size, max_predictions_per_seq].
    label_ids: int32 Tensor [batch_size, max_predictions_per_seq].
    label_weights: float Tensor [batch_size, max_predictions_per_seq], 1.0 real, 0.0 padding.

  Returns:
    (loss scalar, per_example_loss [batch_size * max_predictions_per_seq],
     log_probs [batch_size * max_predictions_per_seq, vocab_size]), all fp32.
  """
  input_tensor = heads.encoder_output_fp32(gather_indexes(input_tensor, positions))

  with _tf1.variable_scope("cls/predictions"):
    with _tf1.variable_scope("transform"):
      input_tensor = modeling.dense_layer(
          input_tensor, bert_config.hidden_size,
          activation=modeling.get_activation(bert_config.hidden_act), name="dense",
          initializer_range=bert_config.initializer_range)
      input_tensor = modeling.layer_norm(input_tensor)

    output_bias = _tf1.get_variable("output_bias", shape=[bert_config.vocab_size],
                                    dtype=tf.float32, initializer=_tf1.zeros_initializer())
    logits = tf.matmul(input_tensor, modeling.ComputePrecision.to_heads(output_weights),
                       transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    # For evaluation and callers; a training step that does not fetch it never computes it.
    log_probs = _stable_log_softmax(logits)

    label_ids = tf.reshape(label_ids, [-1])
    label_weights = tf.cast(tf.reshape(label_weights, [-1]), tf.float32)
    per_example_loss = softmax_cross_entropy(logits, label_ids)
    # Padding predictions have weight 0; the epsilon keeps an all-padding batch finite.
    numerator = tf.reduce_sum(label_weights * per_example_loss)
    denominator = tf.reduce_sum(label_weights) + 1e-5
    loss = numerator / denominator
  return loss, per_example_loss, log_probs


def get_next_sentence_output(bert_config, input_tensor, labels, weights=None):
  """Next-sentence prediction head: is sentence B the continuation of A (0) or random (1)?

  Variables `cls/seq_relationship/output_weights` [2, hidden_size] and `.../output_bias` [2].

  Args:
    bert_config: `modeling.BertConfig`.
    input_tensor: float Tensor [batch_size, hidden_size] (pooled output).
    labels: int32 Tensor [batch_size] or [batch_size, 1].
    weights: optional float Tensor [batch_size]: 1.0 for a real sequence, 0.0 for an empty slot
      of a packed row; the loss is then the mean over the real sequences. None: all real.

  Returns:
    (loss scalar, per_example_loss [batch_size], log_probs [batch_size, 2]), all fp32.
  """
  input_tensor = heads.encoder_output_fp32(input_tensor)
  with _tf1.variable_scope("cls/seq_relationship"):
    output_weights = _tf1.get_variable(
        "output_weights", shape=[2, bert_config.hidden_size], dtype=tf.float32,
        initializer=modeling.create_initializer(bert_config.initializer_range))
    output_bias = _tf1.get_variable("output_bias", shape=[2], dtype=tf.float32,
                                    initializer=_tf1.zeros_initializer())
    logits = tf.nn.bias_add(tf.matmul(input_tensor, output_weights, transpose_b=True),
                            output_bias)
    log_probs = _stable_log_softmax(logits)
    labels = tf.reshape(labels, [-1])
    one_hot_labels = tf.one_hot(labels, depth=2, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    if weights is None:
      loss = tf.reduce_mean(per_example_loss)
    else:
      weights = tf.cast(tf.reshape(weights, [-1]), tf.float32)
      # A batch of empty slots only (never in a real batch) stays finite.
      loss = tf.reduce_sum(weights * per_example_loss) / (tf.reduce_sum(weights) + 1e-5)
  return loss, per_example_loss, log_probs


def build_pretraining_model(bert_config, features, is_training, compute_type=tf.float32,
                            use_one_hot_embeddings=False, dropout_key=None, layout=None):
  """Builds BERT with both pretraining heads on a batch of features.

  Args:
    bert_config: `modeling.BertConfig`.
    features: dict of Tensors (docs/DESIGN.md section 3): input_ids, input_mask, segment_ids
      [batch, seq]; masked_lm_positions, masked_lm_ids, masked_lm_weights [batch, predictions];
      next_sentence_labels [batch, 1].
    is_training: apply dropout.
    compute_type: tf.float32, tf.float16 or tf.bfloat16 for the encoder
      (`modeling.ComputePrecision` says what each part computes in).
    use_one_hot_embeddings: one-hot word embedding lookup (TPU).
    dropout_key: optional int64 Tensor [2]: stateless dropout keyed on it (see
      `modeling.BertModel`).
    layout: the `record_layout.Layout` of the features; None: the release's (unpacked) records.

  Returns:
    dict with "model" (`BertModel`), "total_loss", "mlm_loss", "nsp_loss" (fp32 scalars),
    "mlm_per_example_loss" [batch*predictions], "mlm_log_probs" [batch*predictions, vocab],
    "nsp_per_example_loss" [batch], "nsp_log_probs" [batch, 2].
  """
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=features["input_ids"],
      input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
      use_one_hot_embeddings=use_one_hot_embeddings, compute_type=compute_type,
      dropout_key=dropout_key, **packed_encoder_args(features, layout))
  return dict(_heads_on(bert_config, model, features, layout), model=model)


def _is_packed(layout):
  """Whether `layout` (a `record_layout.Layout`, None: the release's records) is packed rows."""
  return layout is not None and layout.packed


def packed_encoder_args(features, layout):
  """The `modeling.BertModel` arguments that packed rows add; {} for unpacked features.

  Args:
    features: dict of Tensors; packed: positions [batch, seq] (restarting per sequence),
      input_mask [batch, seq] (sequence numbers), next_sentence_positions [batch, sequences].
    layout: the features' `record_layout.Layout`; None: the release's records.

  Returns:
    dict: position_ids, packed_sequences=True and cls_positions, or {}.
  """
  if not _is_packed(layout):
    return {}
  return dict(position_ids=features["positions"], packed_sequences=True,
              cls_positions=features["next_sentence_positions"])


def _prediction_weights(features, layout):
  """masked_lm_weights as 1.0 / 0.0: packed rows hold each prediction's sequence number there."""
  weights = features["masked_lm_weights"]
  if _is_packed(layout):
    return tf.cast(tf.greater(weights, 0), tf.float32)
  return weights


def batch_counts(features, layout):
  """The real sequences and tokens of a batch of `layout`, for the throughput log.

  Returns:
    (sequences, tokens): float32 scalars; unpacked rows hold one sequence each.
  """
  real_tokens = tf.reduce_sum(tf.cast(tf.greater(features["input_mask"], 0), tf.float32))
  if _is_packed(layout):
    sequences = tf.reduce_sum(tf.cast(features["next_sentence_weights"], tf.float32))
  else:
    sequences = tf.cast(tf.shape(features["input_ids"])[0], tf.float32)
  return sequences, real_tokens


def _next_sentence_labels(features, layout):
  """features["next_sentence_labels"], or zeros of its shape for features without it (a run
  without the next-sentence loss, whose records need not hold it): int32 [batch, K or 1]."""
  if "next_sentence_labels" in features:
    return features["next_sentence_labels"]
  if _is_packed(layout):
    return tf.zeros_like(features["next_sentence_positions"], dtype=tf.int32)
  return tf.zeros([tf.shape(features["input_ids"])[0], 1], tf.int32)


def _heads_on(bert_config, model, features, layout):
  """Both heads on a built encoder: the dict of `build_pretraining_model` without "model".

  The next-sentence head is built even when a job trains without its loss (`pretraining_head`):
  its variables stay in the checkpoint (a fine-tuning or a resumed run finds the release's
  names) and the graph's random initialisers keep their order."""
  mlm_loss, mlm_per_example_loss, mlm_log_probs = get_masked_lm_output(
      bert_config, model.get_sequence_output(), model.get_embedding_table(),
      features["masked_lm_positions"], features["masked_lm_ids"],
      _prediction_weights(features, layout))
  nsp_loss, nsp_per_example_loss, nsp_log_probs = get_next_sentence_output(
      bert_config, model.get_pooled_output(), _next_sentence_labels(features, layout),
      weights=features.get("next_sentence_weights"))
  return {
      "total_loss": mlm_loss + nsp_loss,
      "mlm_loss": mlm_loss,
      "nsp_loss": nsp_loss,
      "mlm_per_example_loss": mlm_per_example_loss,
      "mlm_log_probs": mlm_log_probs,
      "nsp_per_example_loss": nsp_per_example_loss,
      "nsp_log_probs": nsp_log_probs,
  }


def metric_fn(masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids, masked_lm_weights,
              next_sentence_example_loss, next_sentence_log_probs, next_sentence_labels):
  """Evaluation metrics: MLM accuracy and loss weighted by masked_lm_weights; NSP accuracy, loss.

  Args:
    masked_lm_example_loss: [batch * predictions]; masked_lm_log_probs: [batch * predictions, V];
    masked_lm_ids, masked_lm_weights: [batch, predictions] (weights 1.0 / 0.0);
    next_sentence_example_loss: [batch]; next_sentence_log_probs: [batch, 2];
    next_sentence_labels: [batch, 1].

  Returns:
    dict of (value, update_op) streaming metrics.
  """
  return packed_metric_fn(masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids,
                          masked_lm_weights, next_sentence_example_loss, next_sentence_log_probs,
                          next_sentence_labels, None)


def packed_metric_fn(masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids,
                     masked_lm_weights, next_sentence_example_loss, next_sentence_log_probs,
                     next_sentence_labels, next_sentence_weights):
  """`metric_fn` on packed rows: the next-sentence metrics count the real sequences only, so
  packed and unpacked records of the same sequences give the same metrics.

  Args:
    as `metric_fn`, with next_sentence_example_loss [batch * K], next_sentence_log_probs
    [batch * K, 2], next_sentence_labels [batch, K], and next_sentence_weights [batch, K]: 1.0 for
    a real sequence, 0.0 for an empty slot (None: every slot is real).

  Returns:
    dict of (value, update_op) streaming metrics.
  """
  metrics = masked_lm_metric_fn(masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids,
                                masked_lm_weights)
  next_sentence_predictions = tf.argmax(next_sentence_log_probs, axis=-1, output_type=tf.int32)
  next_sentence_labels = tf.reshape(next_sentence_labels, [-1])
  if next_sentence_weights is not None:
    next_sentence_weights = tf.reshape(next_sentence_weights, [-1])
  metrics.update({
      "next_sentence_accuracy": _tf1.metrics.accuracy(
          labels=next_sentence_labels, predictions=next_sentence_predictions,
          weights=next_sentence_weights),
      "next_sentence_loss": _tf1.metrics.mean(values=next_sentence_example_loss,
                                              weights=next_sentence_weights),
  })
  return metrics


def masked_lm_metric_fn(masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids,
                        masked_lm_weights):
  """The masked-LM half of `metric_fn`: a run without the next-sentence loss evaluates only it.

  Args:
    as `metric_fn`'s first four.

  Returns:
    dict of (value, update_op) streaming metrics: masked_lm_accuracy, masked_lm_loss.
  """
  masked_lm_predictions = tf.argmax(masked_lm_log_probs, axis=-1, output_type=tf.int32)
  masked_lm_weights = tf.reshape(masked_lm_weights, [-1])
  masked_lm_ids = tf.reshape(masked_lm_ids, [-1])
  return {
      "masked_lm_accuracy": _tf1.metrics.accuracy(
          labels=masked_lm_ids, predictions=masked_lm_predictions, weights=masked_lm_weights),
      "masked_lm_loss": _tf1.metrics.mean(
          values=tf.reshape(masked_lm_example_loss, [-1]), weights=masked_lm_weights),
  }


def pretraining_losses(next_sentence_loss=True):
  """The graph tensors of the losses a pretraining job logs beside total_loss: mlm_loss, and
  nsp_loss when it trains the next-sentence loss."""
  if next_sentence_loss:
    return (graph_names.MLM_LOSS, graph_names.NSP_LOSS)
  return (graph_names.MLM_LOSS,)


def pretraining_head(bert_config, layouts=None, next_sentence_loss=True):
  """The head of the pretraining job for `utils/training/model_fn.model_fn_builder`.

  Args:
    bert_config: `modeling.BertConfig`.
    layouts: `record_layout.Layouts` of the job's files: the TRAIN graph reads `layouts.train`'s
      batches, the EVAL graph `layouts.eval`'s (packed rows or not); None: the release's records.
    next_sentence_loss: add the next-sentence loss (the release's); False (run_pretraining.py's
      --nonext_sentence_loss): the loss is mlm_loss alone, the records' next_sentence_labels are
      not read and evaluation reports the masked-LM metrics only. The next-sentence head is built
      either way (`_heads_on`); without its loss it and the pooler get no gradient and are not
      trained.

  Returns:
    head_fn(model, features, mode) -> `heads.HeadOutput`: the loss mlm_loss + nsp_loss, or
    mlm_loss (the graph tensors of `pretraining_losses` named for the log hook), the evaluation
    metrics of `metric_fn` (or `masked_lm_metric_fn`), no predictions.
  """

  def head_fn(model, features, mode):
    layout = record_layout.for_graph(layouts, mode == tf.estimator.ModeKeys.TRAIN)
    built = _heads_on(bert_config, model, features, layout)
    tf.identity(built["mlm_loss"], name=graph_names.MLM_LOSS)
    if next_sentence_loss:
      tf.identity(built["nsp_loss"], name=graph_names.NSP_LOSS)
    sequences, tokens = batch_counts(features, layout)
    tf.identity(sequences, name=graph_names.BATCH_SEQUENCES)
    tf.identity(tokens, name=graph_names.BATCH_TOKENS)
    metric_args = [built["mlm_per_example_loss"], built["mlm_log_probs"],
                   features["masked_lm_ids"], _prediction_weights(features, layout)]
    if not next_sentence_loss:
      return heads.HeadOutput(loss=built["mlm_loss"], predictions=None,
                              metric_fn=masked_lm_metric_fn, metric_args=metric_args)
    metric_args += [built["nsp_per_example_loss"], built["nsp_log_probs"],
                    features["next_sentence_labels"]]
    metrics = metric_fn
    if _is_packed(layout):
      metrics = packed_metric_fn
      metric_args.append(features["next_sentence_weights"])
    return heads.HeadOutput(loss=built["total_loss"], predictions=None, metric_fn=metrics,
                            metric_args=metric_args)

  return head_fn
