"""BERT pretraining: masked LM and next-sentence prediction heads, and the training job.

  python run_pretraining.py --bert_config_file=... --input_files_dir=... --output_dir=... \
      --do_train --do_eval [--horovod] ...

Launched once per worker by `mpirun` / `horovodrun` with --horovod, or under a TPUEstimator with
--use_tpu. The flags are those of NVIDIA's run_pretraining.py (plus the original release's
--input_file and TPU flags); see README.md. Importing this module defines the flags and nothing else.
"""

import os

from absl import app
from absl import flags
from absl import logging
# Before TensorFlow: cli sets TensorFlow's native log level, which TensorFlow reads when it loads.
from utils import cli  # pylint: disable=g-bad-import-order
import tensorflow as tf

import modeling
import optimization
from utils import checkpoint_compat
from utils import determinism
from utils import dllogger_setup
from utils import graph_names
from utils import hooks as hooks_lib
from utils import job
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
    features: dict of Tensors (docs/DESIGN.md section 3): input_ids, input_mask, segment_ids
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


def model_fn_builder(bert_config, init_checkpoint, schedule,
                     precision=optimization.Precision(),
                     accumulation=optimization.Accumulation(),
                     distribution=optimization.Distribution(), verbose_logging=False,
                     dropout_seed=None):
  """Returns the `model_fn` of the pretraining Estimator (or TPUEstimator).

  Args:
    bert_config: `modeling.BertConfig`.
    init_checkpoint: checkpoint to initialise matching variables from, or None.
    schedule: `optimization.Schedule` (learning rate already multiplied by the number of workers).
    precision: `optimization.Precision`; with manual_fp16 the encoder computes in fp16.
    accumulation: `optimization.Accumulation`.
    distribution: `optimization.Distribution`: Horovod, or TPU cores (one-hot embedding lookup);
      a TPUEstimator (`uses_tpu_estimator`) gets `TPUEstimatorSpec`s.
    verbose_logging: list every trainable variable, marking those loaded from the checkpoint.
    dropout_seed: deterministic mode: training counts micro-steps (`utils/determinism.py`) and
      draws each dropout mask from (seed, micro-step, rank, layer, site); None: stateful dropout.

  Returns:
    model_fn(features, labels, mode, params).
  """
  tpu_estimator_spec = distribution.uses_tpu_estimator
  hvd = distribution.hvd

  def model_fn(features, labels, mode, params):  # pylint: disable=unused-argument
    """Builds the graph of one mode (TRAIN or EVAL)."""
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    dropout_key = advance_micro_step = None
    if is_training and dropout_seed is not None:
      dropout_key, advance_micro_step = determinism.begin_micro_step(
          dropout_seed, hvd.rank() if hvd is not None else 0)
    built = build_pretraining_model(
        bert_config, features, is_training,
        compute_type=tf.float16 if precision.manual_fp16 else tf.float32,
        use_one_hot_embeddings=distribution.use_tpu, dropout_key=dropout_key)
    # The graph names the logging hook reads.
    tf.identity(built["mlm_loss"], name=graph_names.MLM_LOSS)
    tf.identity(built["nsp_loss"], name=graph_names.NSP_LOSS)
    total_loss = tf.identity(built["total_loss"], name=graph_names.TOTAL_LOSS)

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
      train_op = optimization.build_train_op(total_loss, schedule, precision, accumulation,
                                             distribution)
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
flags.DEFINE_integer("seed", job.DETERMINISTIC_SEED,
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


UsageError = job.UsageError


def validate_flags(f):
  """Checks flag values and combinations that need no file access.

  The optimizer's settings are checked by `optimization`'s own checks (the rules the configuration
  objects enforce), here with the flags named.

  Args:
    f: the parsed flags (or any object with the same attributes).

  Raises:
    UsageError: naming the flag.
  """
  require = job.require
  require(f.do_train or f.do_eval, "one of --do_train and --do_eval is required")
  require(f.bert_config_file, "--bert_config_file is required")
  require(f.output_dir, "--output_dir is required")
  if f.do_train:
    require(f.input_file or f.input_files_dir,
            "--do_train needs the training data: give --input_files_dir or --input_file")
  if f.do_eval and not f.do_train:
    require(f.eval_files_dir or f.input_file or f.input_files_dir,
            "--do_eval needs data: give --eval_files_dir (or --input_files_dir / --input_file)")
  for name in ("train_batch_size", "eval_batch_size", "save_checkpoints_steps",
               "display_loss_steps", "iterations_per_loop", "max_eval_steps", "max_seq_length",
               "max_predictions_per_seq", "num_tpu_cores", "keep_checkpoint_max"):
    value = getattr(f, name)
    require(value >= 1, "--%s must be >= 1, got %d", name, value)
  require(f.max_predictions_per_seq <= f.max_seq_length,
          "--max_predictions_per_seq (%d) cannot exceed --max_seq_length (%d)",
          f.max_predictions_per_seq, f.max_seq_length)
  require(f.intra_op_threads >= 0 and f.inter_op_threads >= 0,
          "--intra_op_threads and --inter_op_threads must be >= 0")
  try:
    optimization.check_accumulation(f.num_accumulation_steps, as_flags=True)
    optimization.check_schedule(f.learning_rate, f.num_train_steps, f.num_warmup_steps,
                                f.optimizer_type, as_flags=True)
    optimization.check_precision(f.manual_fp16, f.amp, f.init_loss_scale, as_flags=True)
    optimization.check_distribution(f.use_tpu, f.horovod, f.num_accumulation_steps,
                                    as_flags=True)
  except ValueError as e:
    raise UsageError(str(e))


def training_settings(f, workers):
  """The optimizer's configuration objects, built once from the flags.

  Args:
    f: the parsed flags.
    workers: `job.Workers` (the learning rate is per worker; the job's is that x workers).

  Returns:
    (`optimization.Schedule`, `Precision`, `Accumulation`, `Distribution`).
  """
  schedule = optimization.Schedule(f.optimizer_type, f.learning_rate * workers.size,
                                   f.num_train_steps, f.num_warmup_steps)
  precision = optimization.Precision(manual_fp16=f.manual_fp16, amp=f.amp,
                                     init_loss_scale=f.init_loss_scale)
  accumulation = optimization.Accumulation(f.num_accumulation_steps,
                                           f.allreduce_post_accumulation)
  distribution = optimization.Distribution(hvd=workers.hvd, use_tpu=f.use_tpu,
                                           tpu_estimator=f.tpu_estimator)
  return schedule, precision, accumulation, distribution


def _load_bert_config(f):
  """The model configuration of --bert_config_file, checked against --max_seq_length; with
  deterministic ops for --deterministic_run (dropout stays: its masks are keyed, see
  `utils/determinism.py`)."""
  try:
    bert_config = modeling.BertConfig.from_json_file(f.bert_config_file)
  except ValueError as e:
    raise UsageError("--bert_config_file: %s" % e)
  job.require(bert_config.max_position_embeddings >= f.max_seq_length,
              "--max_seq_length=%d exceeds max_position_embeddings=%d of %s", f.max_seq_length,
              bert_config.max_position_embeddings, f.bert_config_file)
  if f.deterministic_run:
    tf.config.experimental.enable_op_determinism()
  return bert_config


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


def _resolve_inputs(f, vocab_size):
  """(train_files, eval_files) from the flags, their first records checked against the model.

  Raises:
    UsageError: naming the flags when nothing matches, or the file whose record does not fit.
  """
  train_files, eval_files = [], []
  try:
    if f.do_train or not f.eval_files_dir:
      train_files = resolve_input_files(f.input_file, f.input_files_dir)
    eval_files = (resolve_input_files(input_files_dir=f.eval_files_dir, dir_flag="eval_files_dir")
                  if f.eval_files_dir else train_files)
  except ValueError as e:
    raise UsageError(str(e))
  train_files = train_files if f.do_train else []
  eval_files = eval_files if f.do_eval else []
  try:
    check_input_files(sorted(set(train_files) | set(eval_files)), f.max_seq_length,
                      f.max_predictions_per_seq, vocab_size)
  except ValueError as e:
    raise UsageError("%s (check --max_seq_length / --max_predictions_per_seq and the "
                     "vocabulary of --bert_config_file)" % e)
  return train_files, eval_files


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
  workers = job.start_workers(f.horovod)
  bert_config = _load_bert_config(f)
  train_files, eval_files = _resolve_inputs(f, bert_config.vocab_size)
  if f.init_checkpoint:
    job.check_init_checkpoint(f.init_checkpoint)

  output_dir, saves = job.worker_output_dir(workers, f.output_dir, f.node_local_output_dir,
                                            f.checkpoint_all_workers)
  dllog_path = f.dllog_path or os.path.join(f.output_dir, "bert_dllog.json")
  run_logger = dllogger_setup.open_run_log(dllog_path, workers.rank,
                                            job.checkpoint_step(f.output_dir))
  schedule, precision, accumulation, distribution = training_settings(f, workers)
  global_batch_size = f.train_batch_size * f.num_accumulation_steps * workers.size
  logging.info("workers: %d; global batch: %d x %d accumulation x %d workers = %d; learning "
               "rate: %g per worker x %d workers = %g", workers.size, f.train_batch_size,
               f.num_accumulation_steps, workers.size, global_batch_size, f.learning_rate,
               workers.size, schedule.learning_rate)

  config = job.session_config(
      workers, intra_op_threads=f.intra_op_threads, inter_op_threads=f.inter_op_threads,
      use_xla=f.use_xla, amp=f.amp, enable_scoped_allocator=f.enable_scoped_allocator)
  model_fn = model_fn_builder(bert_config, f.init_checkpoint, schedule, precision, accumulation,
                              distribution, verbose_logging=f.verbose_logging,
                              dropout_seed=f.seed if f.deterministic_run else None)
  # A deterministic resume needs the checkpoint's micro-step counter (its own message, first).
  skip_records = _consumed_records(f) if f.do_train and f.deterministic_run else 0
  try:
    checkpoint_compat.check_output_dir(output_dir, model_fn, f.do_train, f.max_seq_length,
                                       f.max_predictions_per_seq, f.optimizer_type)
  except checkpoint_compat.CheckpointMismatch as e:
    raise UsageError(str(e))
  if f.do_train and saves:
    checkpoint_compat.record_optimizer(output_dir, f.optimizer_type)
  tpu = None
  if distribution.uses_tpu_estimator:
    tpu = job.TpuSettings(f.use_tpu, f.tpu_name, f.tpu_zone, f.gcp_project, f.master,
                          f.iterations_per_loop, f.num_tpu_cores)
  estimator = job.build_estimator(
      model_fn, output_dir, config, workers, saves, f.save_checkpoints_steps,
      f.keep_checkpoint_max, random_seed=f.seed if f.deterministic_run else None,
      reports_loss=f.report_loss,
      tpu=tpu, batch_sizes=dict(train_batch_size=f.train_batch_size,
                                eval_batch_size=f.eval_batch_size))

  def explain(files):
    return lambda error: name_bad_input(error, files, f.max_seq_length,
                                        f.max_predictions_per_seq, bert_config.vocab_size)

  if f.do_train:
    log_hook = None
    if f.report_loss:
      log_hook = hooks_lib.TrainingLogHook(
          run_logger, global_batch_size, num_accumulation_steps=f.num_accumulation_steps,
          display_loss_steps=f.display_loss_steps,
          save_checkpoints_steps=f.save_checkpoints_steps if saves else None,
          num_train_steps=f.num_train_steps,
          # TensorBoard run "train", beside the Estimator's "eval".
          summary_dir=os.path.join(output_dir, "train"))
    hooks = job.training_hooks(
        workers, output_dir if saves else None, f.save_checkpoints_steps,
        save_graph_def=f.save_graph_def, log_hook=log_hook,
        force_weight_sync=f.force_weight_sync, num_accumulation_steps=f.num_accumulation_steps)
    train_input_fn = input_fn_builder(
        train_files, f.train_batch_size, f.max_seq_length, f.max_predictions_per_seq,
        is_training=True, num_workers=workers.size, worker_index=workers.rank,
        deterministic=f.deterministic_run, seed=f.seed if f.deterministic_run else None,
        skip_records=skip_records)
    job.train(estimator, train_input_fn, f.num_train_steps, f.output_dir, hooks,
              explain_input_error=explain(train_files),
              explain_nan_loss=lambda step: hooks_lib.nan_loss_error(
                  step, f.output_dir, f.learning_rate, f.manual_fp16, f.init_loss_scale))

  if f.do_eval and workers.rank == 0:
    eval_input_fn = input_fn_builder(
        eval_files, f.eval_batch_size, f.max_seq_length, f.max_predictions_per_seq,
        is_training=False, deterministic=f.deterministic_run,
        seed=f.seed if f.deterministic_run else None)
    logging.info("***** Running evaluation on %d file(s), batch %d, at most %d batches *****",
                 len(eval_files), f.eval_batch_size, f.max_eval_steps)
    job.evaluate(estimator, eval_input_fn, f.max_eval_steps, run_logger, f.eval_batch_size,
                 output_dir, explain_input_error=explain(eval_files))

  run_logger.close()
  if workers.rank == 0:
    logging.info("outputs: checkpoints in %s, dllogger log %s", output_dir, dllog_path)
  return 0


def main(argv):
  if len(argv) > 1:
    raise app.UsageError("unexpected arguments: %s" % " ".join(argv[1:]))
  logging.set_verbosity(logging.INFO)
  return job.run_main("run_pretraining.py", run, FLAGS)


if __name__ == "__main__":
  cli.run_main(main)
