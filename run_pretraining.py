"""BERT pretraining: masked LM and next-sentence prediction heads, and the training job.

  python run_pretraining.py --bert_config_file=... --input_files_dir=... --output_dir=... \
      --do_train --do_eval [--horovod] ...

Launched once per worker by `mpirun` / `horovodrun` with --horovod, or under a TPUEstimator with
--use_tpu. The flags are those of NVIDIA's run_pretraining.py (plus the original release's
--input_file and TPU flags); see README.md. Importing this module defines the flags and nothing else.
"""

import os
import sys

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

import gpu_environment
import modeling
import optimization
from utils import determinism
from utils import dllogger_setup
from utils import hooks as hooks_lib
from utils import hvd_utils
from utils import session_config as session_config_lib
# The input pipeline and the record checks live in utils/; re-exported here because the original
# release's run_pretraining.py exposes input_fn_builder and callers import it from this module.
from utils.input_pipeline import DEFAULT_INPUT_SEED  # pylint: disable=unused-import
from utils.input_pipeline import input_fn_builder
from utils.input_pipeline import pretraining_feature_spec  # pylint: disable=unused-import
from utils.input_pipeline import resolve_input_files
from utils.input_pipeline import shard_input_files  # pylint: disable=unused-import
from utils.records import check_example  # pylint: disable=unused-import
from utils.records import check_input_files
from utils.records import find_bad_record  # pylint: disable=unused-import
from utils.records import name_bad_input

_tf1 = tf.compat.v1
FLAGS = flags.FLAGS


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
  logits = tf.cast(logits, tf.float32)
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

  return cross_entropy(tf.cast(logits, tf.float32))


def get_masked_lm_output(bert_config, input_tensor, output_weights, positions, label_ids,
                         label_weights):
  """Masked LM head: predicts the original ids at the masked positions.

  The head runs in fp32 whatever the encoder's compute type. Variables:
  `cls/predictions/transform/dense/{kernel,bias}`, `cls/predictions/transform/LayerNorm/{beta,gamma}`,
  `cls/predictions/output_bias`; the output matrix is the word embedding table, transposed.

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
  input_tensor = tf.cast(gather_indexes(input_tensor, positions), tf.float32)

  with _tf1.variable_scope("cls/predictions"):
    with _tf1.variable_scope("transform"):
      input_tensor = modeling.dense_layer(
          input_tensor, bert_config.hidden_size,
          activation=modeling.get_activation(bert_config.hidden_act), name="dense",
          initializer_range=bert_config.initializer_range)
      input_tensor = modeling.layer_norm(input_tensor)

    output_bias = _tf1.get_variable("output_bias", shape=[bert_config.vocab_size],
                                    dtype=tf.float32, initializer=_tf1.zeros_initializer())
    logits = tf.matmul(input_tensor, tf.cast(output_weights, tf.float32), transpose_b=True)
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


def get_next_sentence_output(bert_config, input_tensor, labels):
  """Next-sentence prediction head: is sentence B the continuation of A (0) or random (1)?

  Variables `cls/seq_relationship/output_weights` [2, hidden_size] and `.../output_bias` [2].

  Args:
    bert_config: `modeling.BertConfig`.
    input_tensor: float Tensor [batch_size, hidden_size] (pooled output).
    labels: int32 Tensor [batch_size] or [batch_size, 1].

  Returns:
    (loss scalar, per_example_loss [batch_size], log_probs [batch_size, 2]), all fp32.
  """
  input_tensor = tf.cast(input_tensor, tf.float32)
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
    loss = tf.reduce_mean(per_example_loss)
  return loss, per_example_loss, log_probs


def build_pretraining_model(bert_config, features, is_training, compute_type=tf.float32,
                            use_one_hot_embeddings=False, dropout_key=None):
  """Builds BERT with both pretraining heads on a batch of features.

  Args:
    bert_config: `modeling.BertConfig`.
    features: dict of Tensors (SPEC section 3): input_ids, input_mask, segment_ids
      [batch, seq]; masked_lm_positions, masked_lm_ids, masked_lm_weights [batch, predictions];
      next_sentence_labels [batch, 1].
    is_training: apply dropout.
    compute_type: tf.float32 or tf.float16 for the encoder.
    use_one_hot_embeddings: one-hot word embedding lookup (TPU).
    dropout_key: optional int64 Tensor [2]: stateless dropout keyed on it (see `modeling.BertModel`).

  Returns:
    dict with "model" (`BertModel`), "total_loss", "mlm_loss", "nsp_loss" (fp32 scalars),
    "mlm_per_example_loss" [batch*predictions], "mlm_log_probs" [batch*predictions, vocab],
    "nsp_per_example_loss" [batch], "nsp_log_probs" [batch, 2].
  """
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=features["input_ids"],
      input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
      use_one_hot_embeddings=use_one_hot_embeddings, compute_type=compute_type,
      dropout_key=dropout_key)
  mlm_loss, mlm_per_example_loss, mlm_log_probs = get_masked_lm_output(
      bert_config, model.get_sequence_output(), model.get_embedding_table(),
      features["masked_lm_positions"], features["masked_lm_ids"], features["masked_lm_weights"])
  nsp_loss, nsp_per_example_loss, nsp_log_probs = get_next_sentence_output(
      bert_config, model.get_pooled_output(), features["next_sentence_labels"])
  return {
      "model": model,
      "total_loss": mlm_loss + nsp_loss,
      "mlm_loss": mlm_loss,
      "nsp_loss": nsp_loss,
      "mlm_per_example_loss": mlm_per_example_loss,
      "mlm_log_probs": mlm_log_probs,
      "nsp_per_example_loss": nsp_per_example_loss,
      "nsp_log_probs": nsp_log_probs,
  }


# -------------------------------------------------------------------------------------------------
# Input pipeline: TFRecords of tf.train.Example (SPEC section 3), sharded per worker (section 7).
# -------------------------------------------------------------------------------------------------

# -------------------------------------------------------------------------------------------------
# The Estimator: model_fn, flags, main.
# -------------------------------------------------------------------------------------------------


def _metric_fn(masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids, masked_lm_weights,
               next_sentence_example_loss, next_sentence_log_probs, next_sentence_labels):
  """Evaluation metrics: MLM accuracy and loss weighted by masked_lm_weights; NSP accuracy, loss.

  Args:
    masked_lm_example_loss: [batch * predictions]; masked_lm_log_probs: [batch * predictions, V];
    masked_lm_ids, masked_lm_weights: [batch, predictions];
    next_sentence_example_loss: [batch]; next_sentence_log_probs: [batch, 2];
    next_sentence_labels: [batch, 1].

  Returns:
    dict of (value, update_op) streaming metrics.
  """
  masked_lm_predictions = tf.argmax(masked_lm_log_probs, axis=-1, output_type=tf.int32)
  masked_lm_weights = tf.reshape(masked_lm_weights, [-1])
  masked_lm_ids = tf.reshape(masked_lm_ids, [-1])
  next_sentence_predictions = tf.argmax(next_sentence_log_probs, axis=-1, output_type=tf.int32)
  next_sentence_labels = tf.reshape(next_sentence_labels, [-1])
  return {
      "masked_lm_accuracy": _tf1.metrics.accuracy(
          labels=masked_lm_ids, predictions=masked_lm_predictions, weights=masked_lm_weights),
      "masked_lm_loss": _tf1.metrics.mean(
          values=tf.reshape(masked_lm_example_loss, [-1]), weights=masked_lm_weights),
      "next_sentence_accuracy": _tf1.metrics.accuracy(
          labels=next_sentence_labels, predictions=next_sentence_predictions),
      "next_sentence_loss": _tf1.metrics.mean(values=next_sentence_example_loss),
  }


def _log_trainable_variables(tvars, initialized_variable_names, rank):
  logging.info("**** Trainable Variables ****")
  for var in tvars:
    init_string = ", *INIT_FROM_CKPT*" if var.name in initialized_variable_names else ""
    logging.info("  %d :: name = %s, shape = %s%s", rank, var.name, var.shape, init_string)


def model_fn_builder(bert_config, init_checkpoint, learning_rate, num_train_steps,
                     num_warmup_steps, use_one_hot_embeddings=False, hvd=None, manual_fp16=False,
                     amp=False, num_accumulation_steps=1, optimizer_type="lamb",
                     allreduce_post_accumulation=False, init_loss_scale=2**32, use_tpu=False,
                     tpu_estimator_spec=None, verbose_logging=False, dropout_seed=None):
  """Returns the `model_fn` of the pretraining Estimator (or TPUEstimator).

  Args:
    bert_config: `modeling.BertConfig`.
    init_checkpoint: checkpoint to initialise matching variables from, or None.
    learning_rate: effective peak learning rate (already multiplied by the number of workers).
    num_train_steps, num_warmup_steps: optimizer updates (see `optimization.create_optimizer`).
    use_one_hot_embeddings: one-hot word embedding lookup (TPU).
    hvd: the `horovod.tensorflow` module under Horovod, else None.
    manual_fp16: build the encoder in fp16 (fp32 master weights, loss scaling).
    amp: automatic mixed precision (loss scaling on a GPU; the rewrite is a session option).
    num_accumulation_steps, optimizer_type, allreduce_post_accumulation, init_loss_scale: see
      `optimization.create_optimizer`.
    use_tpu: wrap the optimizer for TPU cores.
    tpu_estimator_spec: return `TPUEstimatorSpec` (for a TPUEstimator); defaults to `use_tpu`.
    verbose_logging: list every trainable variable, marking those loaded from the checkpoint.
    dropout_seed: deterministic mode: training counts micro-steps (`utils/determinism.py`) and
      draws each dropout mask from (seed, micro-step, rank, layer, site); None: stateful dropout.

  Returns:
    model_fn(features, labels, mode, params).
  """
  if tpu_estimator_spec is None:
    tpu_estimator_spec = use_tpu

  def model_fn(features, labels, mode, params):  # pylint: disable=unused-argument
    """Builds the graph of one mode (TRAIN or EVAL)."""
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    dropout_key = advance_micro_step = None
    if is_training and dropout_seed is not None:
      dropout_key, advance_micro_step = determinism.begin_micro_step(
          dropout_seed, hvd.rank() if hvd is not None else 0)
    built = build_pretraining_model(
        bert_config, features, is_training,
        compute_type=tf.float16 if manual_fp16 else tf.float32,
        use_one_hot_embeddings=use_one_hot_embeddings, dropout_key=dropout_key)
    # The graph names of SPEC section 5, read by the logging hook.
    tf.identity(built["mlm_loss"], name="mlm_loss")
    tf.identity(built["nsp_loss"], name="nsp_loss")
    total_loss = tf.identity(built["total_loss"], name="total_loss")

    tvars = _tf1.trainable_variables()
    initialized_variable_names = {}
    scaffold_fn = None
    if init_checkpoint:
      assignment_map, initialized_variable_names = modeling.get_assignment_map_from_checkpoint(
          tvars, init_checkpoint)
      if tpu_estimator_spec:
        def scaffold_fn():
          _tf1.train.init_from_checkpoint(init_checkpoint, assignment_map)
          return _tf1.train.Scaffold()
      else:
        _tf1.train.init_from_checkpoint(init_checkpoint, assignment_map)
    if verbose_logging:
      _log_trainable_variables(tvars, initialized_variable_names,
                               hvd.rank() if hvd is not None else 0)

    if mode == tf.estimator.ModeKeys.TRAIN:
      train_op = optimization.create_optimizer(
          total_loss, learning_rate, num_train_steps, num_warmup_steps, hvd=hvd,
          manual_fp16=manual_fp16, use_fp16=amp, num_accumulation_steps=num_accumulation_steps,
          optimizer_type=optimizer_type, allreduce_post_accumulation=allreduce_post_accumulation,
          init_loss_scale=init_loss_scale, use_tpu=use_tpu)
      if advance_micro_step is not None:
        train_op = tf.group(train_op, advance_micro_step, name="train_op_and_micro_step")
      if tpu_estimator_spec:
        return _tf1.estimator.tpu.TPUEstimatorSpec(mode=mode, loss=total_loss,
                                                   train_op=train_op, scaffold_fn=scaffold_fn)
      return tf.estimator.EstimatorSpec(mode=mode, loss=total_loss, train_op=train_op)

    if mode == tf.estimator.ModeKeys.EVAL:
      metric_args = [built["mlm_per_example_loss"], built["mlm_log_probs"],
                     features["masked_lm_ids"], features["masked_lm_weights"],
                     built["nsp_per_example_loss"], built["nsp_log_probs"],
                     features["next_sentence_labels"]]
      if tpu_estimator_spec:
        return _tf1.estimator.tpu.TPUEstimatorSpec(
            mode=mode, loss=total_loss, eval_metrics=(_metric_fn, metric_args),
            scaffold_fn=scaffold_fn)
      return tf.estimator.EstimatorSpec(mode=mode, loss=total_loss,
                                        eval_metric_ops=_metric_fn(*metric_args))
    raise ValueError("only TRAIN and EVAL modes are supported, got %s" % mode)

  return model_fn


# -------------------------------------------------------------------------------------------------
# Flags: those of NVIDIA's run_pretraining.py (same names, defaults and meaning), the original
# release's --input_file and TPU flags, and ours. Parsed once here; everything below main() takes
# plain arguments.
# -------------------------------------------------------------------------------------------------

flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model to train.")
flags.DEFINE_string("input_files_dir", None,
                    "Directory (or comma-separated directories) whose files are the training "
                    "TFRecords.")
flags.DEFINE_string("input_file", None,
                    "Training TFRecords: comma-separated files or glob patterns (the original "
                    "release's flag; an alternative to --input_files_dir).")
flags.DEFINE_string("eval_files_dir", None,
                    "Directory (or comma-separated directories) of the evaluation TFRecords; "
                    "default: the training input.")
flags.DEFINE_string("output_dir", None, "Where checkpoints, summaries and logs are written.")
flags.DEFINE_string("dllog_path", None,
                    "dllogger JSON log file; default <output_dir>/bert_dllog.json.")
flags.DEFINE_string("init_checkpoint", None,
                    "Checkpoint to initialise from (e.g. a released bert_model.ckpt).")
flags.DEFINE_enum("optimizer_type", "lamb", ["lamb", "adam"], "LAMB or AdamWeightDecay.")
flags.DEFINE_integer("max_seq_length", 512, "Sequence length of the records (must match the data).")
flags.DEFINE_integer("max_predictions_per_seq", 80,
                     "Masked LM predictions per sequence (must match the data).")
flags.DEFINE_bool("do_train", False, "Run training.")
flags.DEFINE_bool("do_eval", False, "Run evaluation (rank 0) after training.")
flags.DEFINE_integer("train_batch_size", 32, "Per-worker batch size of one micro-step.")
flags.DEFINE_integer("eval_batch_size", 8, "Evaluation batch size.")
flags.DEFINE_float("learning_rate", 5e-5,
                   "Per-worker peak learning rate; multiplied by the number of workers.")
flags.DEFINE_integer("num_train_steps", 100000, "Optimizer updates to train for.")
flags.DEFINE_integer("num_warmup_steps", 10000, "Warmup updates.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Save a checkpoint every this many updates.")
flags.DEFINE_integer("display_loss_steps", 10, "Log the training losses every this many updates.")
flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per TPU loop (TPUEstimator).")
flags.DEFINE_integer("max_eval_steps", 100,
                     "Maximum evaluation batches (evaluation also stops at the end of the data).")
flags.DEFINE_integer("num_accumulation_steps", 1,
                     "Micro-steps accumulated per optimizer update. Global batch = "
                     "train_batch_size x num_accumulation_steps x workers.")
flags.DEFINE_bool("allreduce_post_accumulation", False,
                  "Allreduce once per update (after accumulating) instead of every micro-step.")
flags.DEFINE_bool("verbose_logging", False, "List every trainable variable.")
flags.DEFINE_bool("horovod", False, "Run under Horovod (mpirun / horovodrun).")
flags.DEFINE_bool("report_loss", True, "Log the training losses.")
flags.DEFINE_bool("manual_fp16", False,
                  "fp16 encoder with fp32 master weights and dynamic loss scaling.")
flags.DEFINE_bool("amp", False,
                  "Automatic mixed precision graph rewrite (GPU only; no effect on a CPU).")
flags.DEFINE_alias("use_fp16", "amp")
flags.DEFINE_bool("use_xla", False, "XLA JIT compilation of the graph.")
flags.DEFINE_integer("init_loss_scale", 2**32, "Initial dynamic loss scale (fp16).")
# The original release's TPU flags.
flags.DEFINE_bool("use_tpu", False, "Train on TPU cores with TPUEstimator.")
flags.DEFINE_string("tpu_name", None, "Cloud TPU name or grpc address.")
flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU.")
flags.DEFINE_string("gcp_project", None, "GCP project of the Cloud TPU.")
flags.DEFINE_string("master", None, "TensorFlow master URL.")
flags.DEFINE_integer("num_tpu_cores", 8, "TPU cores (with --use_tpu).")
# Ours.
flags.DEFINE_bool("tpu_estimator", False,
                  "Build a TPUEstimator even without --use_tpu (its CPU/GPU path); implied by "
                  "--use_tpu.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept in output_dir.")
flags.DEFINE_bool("deterministic_run", False,
                  "Reproducible run: seeded initialisation and input order, single-threaded input, "
                  "dropout masks drawn from (--seed, micro-step, worker, layer), deterministic ops, "
                  "exact resume from a checkpoint.")
flags.DEFINE_integer("seed", 12345,
                     "Seed of a --deterministic_run (initial weights, input shuffles, dropout).")
flags.DEFINE_bool("enable_scoped_allocator", False,
                  "Scoped allocator for HorovodAllreduce (see docs/DECISIONS.md: Horovod 0.28.1's "
                  "kernel rejects it). TF_DISABLE_SCOPED_ALLOCATOR=1 always turns it off.")
flags.DEFINE_bool("force_weight_sync", False,
                  "Average the trainable variables across workers every num_accumulation_steps "
                  "iterations (also env FORCE_WEIGHT_SYNC=true).")
flags.DEFINE_bool("node_local_output_dir", False,
                  "output_dir is on a node-local disk: each node's local rank 0 uses (and saves "
                  "checkpoints to) output_dir.")
flags.DEFINE_bool("checkpoint_all_workers", False,
                  "Every worker saves checkpoints (ranks > 0 into output_dir/worker_<rank>).")
flags.DEFINE_bool("save_graph_def", False,
                  "Write the graph (graph.pbtxt, the TensorBoard graph, a .meta file per "
                  "checkpoint); not needed to resume or to initialise from a checkpoint.")
flags.DEFINE_integer("intra_op_threads", 0, "Threads inside one op (0: TensorFlow decides).")
flags.DEFINE_integer("inter_op_threads", 0, "Ops run in parallel (0: TensorFlow decides).")


# Horovod cycle time (ms) on machines without a GPU, unless the launch sets one.
CPU_HOROVOD_CYCLE_TIME_MS = 5


class UsageError(ValueError):
  """A bad flag or input, found before any graph is built."""


def _require(condition, message, *args):
  if not condition:
    raise UsageError(message % args)


def validate_flags(f):
  """Checks flag values and combinations that need no file access.

  Args:
    f: the parsed flags (or any object with the same attributes).

  Raises:
    UsageError: naming the flag.
  """
  _require(f.do_train or f.do_eval, "one of --do_train and --do_eval is required")
  _require(f.bert_config_file, "--bert_config_file is required")
  _require(f.output_dir, "--output_dir is required")
  if f.do_train:
    _require(f.input_file or f.input_files_dir,
             "--do_train needs the training data: give --input_files_dir or --input_file")
  if f.do_eval and not f.do_train:
    _require(f.eval_files_dir or f.input_file or f.input_files_dir,
             "--do_eval needs data: give --eval_files_dir (or --input_files_dir / --input_file)")
  for name in ("train_batch_size", "eval_batch_size", "num_accumulation_steps", "num_train_steps",
               "save_checkpoints_steps", "display_loss_steps", "iterations_per_loop",
               "max_eval_steps", "max_seq_length", "max_predictions_per_seq", "num_tpu_cores",
               "keep_checkpoint_max"):
    value = getattr(f, name)
    _require(value >= 1, "--%s must be >= 1, got %d", name, value)
  _require(f.num_warmup_steps >= 0, "--num_warmup_steps must be >= 0, got %d",
           f.num_warmup_steps)
  _require(f.learning_rate > 0, "--learning_rate must be positive, got %g", f.learning_rate)
  _require(f.init_loss_scale > 0, "--init_loss_scale must be positive, got %d", f.init_loss_scale)
  _require(f.max_predictions_per_seq <= f.max_seq_length,
           "--max_predictions_per_seq (%d) cannot exceed --max_seq_length (%d)",
           f.max_predictions_per_seq, f.max_seq_length)
  if f.optimizer_type == "adam":
    _require(f.num_warmup_steps < f.num_train_steps,
             "--num_warmup_steps (%d) must be smaller than --num_train_steps (%d) with "
             "--optimizer_type=adam", f.num_warmup_steps, f.num_train_steps)
  _require(not (f.amp and f.manual_fp16), "--amp and --manual_fp16 cannot be combined")
  _require(not (f.use_tpu and f.horovod), "--use_tpu and --horovod cannot be combined")
  _require(not (f.use_tpu and f.num_accumulation_steps > 1),
           "--num_accumulation_steps > 1 is not supported with --use_tpu")
  _require(f.intra_op_threads >= 0 and f.inter_op_threads >= 0,
           "--intra_op_threads and --inter_op_threads must be >= 0")


def _checkpoint_step(model_dir):
  """Global step of the newest checkpoint in `model_dir`, 0 when there is none."""
  checkpoint = tf.train.latest_checkpoint(model_dir) if tf.io.gfile.isdir(model_dir) else None
  if not checkpoint:
    return 0
  return int(tf.train.load_variable(checkpoint, "global_step"))


def _consumed_records(f):
  """Records each worker consumed up to the newest checkpoint of a deterministic run."""
  try:
    micro_steps = determinism.checkpoint_micro_steps(f.output_dir)
  except ValueError as e:
    raise UsageError("--deterministic_run: %s" % e)
  if micro_steps:
    logging.info("deterministic resume: %d micro-steps done, the input continues after %d "
                 "records per worker", micro_steps, micro_steps * f.train_batch_size)
  return micro_steps * f.train_batch_size


def _check_init_checkpoint(path):
  try:
    tf.train.list_variables(path)
  except (tf.errors.OpError, ValueError) as e:
    raise UsageError("--init_checkpoint=%s cannot be read: %s"
                     % (path, getattr(e, "message", str(e)).strip().splitlines()[0]))


def _resolve_inputs(f):
  """(train_files, eval_files) from the flags; UsageError naming the flags when nothing matches."""
  train_files, eval_files = [], []
  try:
    if f.do_train or not f.eval_files_dir:
      train_files = resolve_input_files(f.input_file, f.input_files_dir)
    eval_files = (resolve_input_files(input_files_dir=f.eval_files_dir, dir_flag="eval_files_dir")
                  if f.eval_files_dir else train_files)
  except ValueError as e:
    raise UsageError(str(e))
  return (train_files if f.do_train else []), (eval_files if f.do_eval else [])


def _build_estimator(f, model_fn, output_dir, session_config, saves_checkpoints, rank):
  """The Estimator (or TPUEstimator with --use_tpu / --tpu_estimator) writing to `output_dir`."""
  save_steps = f.save_checkpoints_steps if saves_checkpoints else None
  seed = f.seed if f.deterministic_run else None
  # Ranks > 0 write no summaries (their step counter included) and no checkpoints.
  log_step_count_steps = (10000 if f.report_loss else 100) if rank == 0 else None
  common = dict(model_dir=output_dir, session_config=session_config,
                save_checkpoints_steps=save_steps, save_checkpoints_secs=None,
                save_summary_steps=save_steps if rank == 0 else None,
                keep_checkpoint_max=f.keep_checkpoint_max,
                log_step_count_steps=log_step_count_steps, tf_random_seed=seed)
  if not (f.use_tpu or f.tpu_estimator):
    return tf.estimator.Estimator(model_fn=model_fn,
                                  config=tf.estimator.RunConfig(**common))
  cluster = None
  if f.use_tpu and f.tpu_name:
    cluster = tf.distribute.cluster_resolver.TPUClusterResolver(
        f.tpu_name, zone=f.tpu_zone, project=f.gcp_project)
  tpu = _tf1.estimator.tpu
  run_config = tpu.RunConfig(
      cluster=cluster, master=f.master,
      tpu_config=tpu.TPUConfig(iterations_per_loop=f.iterations_per_loop,
                               num_shards=f.num_tpu_cores,
                               per_host_input_for_training=tpu.InputPipelineConfig.PER_HOST_V2),
      **common)
  return tpu.TPUEstimator(use_tpu=f.use_tpu, model_fn=model_fn, config=run_config,
                          train_batch_size=f.train_batch_size,
                          eval_batch_size=f.eval_batch_size)


def threads_per_worker(requested, workers_on_node, cores=None):
  """Intra-op threads for one worker: the flag's value, else the node's cores shared by its workers.

  Args:
    requested: --intra_op_threads (0: choose).
    workers_on_node: Horovod local size (1 without Horovod).
    cores: cores of the node; os.cpu_count() when None.

  Returns:
    the thread count for the session config (0 lets TensorFlow use every core).
  """
  if requested > 0 or workers_on_node <= 1:
    return requested
  return max(1, (cores or os.cpu_count() or 1) // workers_on_node)


def _write_eval_results(path, result):
  with tf.io.gfile.GFile(path, "w") as writer:
    for key in sorted(result):
      writer.write("%s = %s\n" % (key, result[key]))


def run(f):
  """The pretraining job: validate, train (every worker), evaluate (rank 0).

  Args:
    f: parsed flags.

  Returns:
    0 on success.

  Raises:
    UsageError: for bad flags or data, before any graph is built.
  """
  validate_flags(f)
  # Per-session thread pools: without this, the first device TF creates (XLA-compiled functions
  # create one while the graph is built) fixes a process-wide pool of one thread per core and
  # --intra_op_threads is silently ignored, so workers sharing a node oversubscribe its cores.
  os.environ.setdefault("TF_OVERRIDE_GLOBAL_THREADPOOL", "1")
  if f.horovod and gpu_environment.local_gpu_count() == 0:
    # Horovod's background thread coordinates the workers every cycle (1 ms by default) even
    # when nothing is pending; on CPU-only nodes that polling takes cycles from the compute
    # threads (docs/PERFORMANCE.md). horovodrun --cycle-time-ms or the variable still decide.
    os.environ.setdefault("HOROVOD_CYCLE_TIME", str(CPU_HOROVOD_CYCLE_TIME_MS))
  hvd = hvd_utils.hvd_init() if f.horovod else None
  rank, size = hvd_utils.hvd_rank(), hvd_utils.hvd_size()
  local_rank = hvd_utils.comm_local_rank()
  if rank != 0:
    logging.set_verbosity(logging.WARNING)

  try:
    bert_config = modeling.BertConfig.from_json_file(f.bert_config_file)
  except ValueError as e:
    raise UsageError("--bert_config_file: %s" % e)
  _require(bert_config.max_position_embeddings >= f.max_seq_length,
           "--max_seq_length=%d exceeds max_position_embeddings=%d of %s", f.max_seq_length,
           bert_config.max_position_embeddings, f.bert_config_file)
  if f.deterministic_run:
    tf.config.experimental.enable_op_determinism()
  train_files, eval_files = _resolve_inputs(f)
  try:
    check_input_files(sorted(set(train_files) | set(eval_files)), f.max_seq_length,
                      f.max_predictions_per_seq, bert_config.vocab_size)
  except ValueError as e:
    raise UsageError("%s (check --max_seq_length / --max_predictions_per_seq and the "
                     "vocabulary of --bert_config_file)" % e)
  if f.init_checkpoint:
    _check_init_checkpoint(f.init_checkpoint)

  output_dir = hvd_utils.worker_output_dir(f.output_dir, rank, local_rank, f.node_local_output_dir)
  tf.io.gfile.makedirs(output_dir)
  saves = f.checkpoint_all_workers or hvd_utils.saves_checkpoints(rank, local_rank,
                                                                  f.node_local_output_dir)
  dllog_path = f.dllog_path or os.path.join(f.output_dir, "bert_dllog.json")
  run_logger = dllogger_setup.RunLogger(dllog_path, rank=rank)
  learning_rate = f.learning_rate * size
  global_batch_size = f.train_batch_size * f.num_accumulation_steps * size
  logging.info("workers: %d; global batch: %d x %d accumulation x %d workers = %d; learning "
               "rate: %g per worker x %d workers = %g", size, f.train_batch_size,
               f.num_accumulation_steps, size, global_batch_size, f.learning_rate, size,
               learning_rate)

  intra_op_threads = threads_per_worker(f.intra_op_threads, hvd_utils.comm_local_size())
  if intra_op_threads != f.intra_op_threads:
    logging.info("%d workers on this node: %d intra-op threads each (set --intra_op_threads to "
                 "override)", hvd_utils.comm_local_size(), intra_op_threads)
  session_config = session_config_lib.build_session_config(
      use_horovod=hvd is not None, local_rank=local_rank,
      enable_scoped_allocator=f.enable_scoped_allocator, use_xla=f.use_xla, amp=f.amp,
      intra_op_threads=intra_op_threads, inter_op_threads=f.inter_op_threads)
  model_fn = model_fn_builder(
      bert_config=bert_config, init_checkpoint=f.init_checkpoint, learning_rate=learning_rate,
      num_train_steps=f.num_train_steps, num_warmup_steps=f.num_warmup_steps,
      use_one_hot_embeddings=f.use_tpu, hvd=hvd, manual_fp16=f.manual_fp16, amp=f.amp,
      num_accumulation_steps=f.num_accumulation_steps, optimizer_type=f.optimizer_type,
      allreduce_post_accumulation=f.allreduce_post_accumulation,
      init_loss_scale=f.init_loss_scale, use_tpu=f.use_tpu,
      tpu_estimator_spec=f.use_tpu or f.tpu_estimator, verbose_logging=f.verbose_logging,
      dropout_seed=f.seed if f.deterministic_run else None)
  estimator = _build_estimator(f, model_fn, output_dir, session_config, saves, rank)

  if f.do_train:
    # Every worker decides from the same (rank 0's) checkpoints, so none waits alone in a collective.
    done_steps = _checkpoint_step(f.output_dir)
    skip_records = _consumed_records(f) if f.deterministic_run else 0
    if done_steps >= f.num_train_steps:
      logging.info("%s already holds step %d >= --num_train_steps=%d: nothing to train",
                   f.output_dir, done_steps, f.num_train_steps)
    else:
      hooks = []
      if saves:
        hooks.append(hooks_lib.PeriodicCheckpointSaverHook(
            output_dir, save_steps=f.save_checkpoints_steps, save_graph_def=f.save_graph_def))
      if f.report_loss:
        hooks.append(hooks_lib.TrainingLogHook(
            run_logger, global_batch_size, num_accumulation_steps=f.num_accumulation_steps,
            display_loss_steps=f.display_loss_steps,
            save_checkpoints_steps=f.save_checkpoints_steps if saves else None))
      if hooks_lib.weight_sync_enabled(f.force_weight_sync):
        hooks.append(hooks_lib.WeightSyncHook(f.num_accumulation_steps))
      if size > 1:
        hooks.append(hvd_utils.broadcast_global_variables_hook(0))
      train_input_fn = input_fn_builder(
          train_files, f.train_batch_size, f.max_seq_length, f.max_predictions_per_seq,
          is_training=True, num_workers=size, worker_index=rank,
          deterministic=f.deterministic_run, seed=f.seed if f.deterministic_run else None,
          skip_records=skip_records)
      logging.info("***** Running training from step %d to %d *****", done_steps,
                   f.num_train_steps)
      try:
        estimator.train(input_fn=train_input_fn, hooks=hooks, max_steps=f.num_train_steps)
      except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        raise name_bad_input(e, train_files, f.max_seq_length, f.max_predictions_per_seq,
                             bert_config.vocab_size)

  if f.do_eval and rank == 0:
    eval_input_fn = input_fn_builder(
        eval_files, f.eval_batch_size, f.max_seq_length, f.max_predictions_per_seq,
        is_training=False, deterministic=f.deterministic_run,
        seed=f.seed if f.deterministic_run else None)
    logging.info("***** Running evaluation on %d file(s), batch %d, at most %d batches *****",
                 len(eval_files), f.eval_batch_size, f.max_eval_steps)
    try:
      result = estimator.evaluate(input_fn=eval_input_fn, steps=f.max_eval_steps,
                                  hooks=[hooks_lib.EvalTimingHook(run_logger, f.eval_batch_size)])
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
      raise name_bad_input(e, eval_files, f.max_seq_length, f.max_predictions_per_seq,
                           bert_config.vocab_size)
    eval_path = os.path.join(output_dir, "eval_results.txt")
    _write_eval_results(eval_path, result)
    logging.info("***** Eval results (%s) *****", eval_path)
    for key in sorted(result):
      logging.info("  %s = %s", key, result[key])

  run_logger.close()
  if rank == 0:
    logging.info("outputs: checkpoints in %s, dllogger log %s", output_dir, dllog_path)
  return 0


def main(argv):
  if len(argv) > 1:
    raise app.UsageError("unexpected arguments: %s" % " ".join(argv[1:]))
  logging.set_verbosity(logging.INFO)
  try:
    return run(FLAGS)
  except UsageError as e:
    print("run_pretraining.py: error: %s" % e, file=sys.stderr, flush=True)
    return 2


if __name__ == "__main__":
  app.run(main)
