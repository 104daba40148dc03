"""The Estimator `model_fn` of every script: the encoder, a task head, initialisation and the step.

  model_fn = model_fn_builder(head_fn, bert_config, init_checkpoint, settings)
  estimator = tf.estimator.Estimator(model_fn=model_fn, ...)

The task supplies only its head (`utils/model/heads.py`): the pretraining heads
(`utils/model/pretraining.py`), the SQuAD span head and the classifier (the fine-tuning scripts).
Everything else is built here, in this order, the same for every task:

1. with a dropout seed (a deterministic run's --seed) and in TRAIN mode: the micro-step counter is
   read and this micro-step's dropout key derived from it (`determinism.begin_micro_step`);
2. `modeling.BertModel` on input_ids / input_mask / segment_ids, computing in the precision's
   compute type (what each part computes in: `Precision.compute_precision`), one-hot embeddings
   on TPU, dropout keyed on that key (in TRAIN mode at `training_dropout` when the job sets one,
   `with_training_dropout`; the configuration itself keeps its own probabilities);
3. the head; its loss is the graph tensor `total_loss`;
4. the matching variables initialised from `init_checkpoint` (under a TPUEstimator in its
   `scaffold_fn`), listed with `*INIT_FROM_CKPT*` when asked;
5. TRAIN: the training step of `optimization.build_train_op` (grouped with the counter's advance);
   EVAL: the head's metrics; PREDICT: the head's predictions. An `EstimatorSpec`, or a
   `TPUEstimatorSpec` when the distribution uses a TPUEstimator.

The order matters to a deterministic run: random initialisers take their seeds from the graph's
op count, so the graph is built in the same order every time.
"""

import collections
import copy
import re

from absl import logging
import tensorflow as tf

import modeling
import optimization
from utils.core import errors
from utils.core import graph_names
from utils.data import record_layout
from utils.model import pretraining
from utils.training import determinism

_tf1 = tf.compat.v1

TrainingSettings = collections.namedtuple(
    "TrainingSettings", ["schedule", "precision", "accumulation", "distribution"])
TrainingSettings.__doc__ = """The training step's settings (`optimization.build_train_op`).

Fields: `optimization.Schedule` (the learning rate already multiplied by the number of workers),
`Precision`, `Accumulation`, `Distribution`."""


# An encoder layer's variables, e.g. "bert/encoder/layer_11/output/dense/kernel": every layer has
# layer 0's shapes.
_LAYER_VARIABLE = re.compile(r"^(bert/encoder/layer_)(\d+)/")


def encoder_variable_shapes(bert_config):
  """The shapes of the encoder's variables for `bert_config`, from a one-layer graph.

  The real `modeling.BertModel` is built (one layer, in a graph of its own: a fraction of a second
  whatever the depth), so the names are the model's own.

  Args:
    bert_config: `modeling.BertConfig`.

  Returns:
    dict variable name (no ":0") -> shape as a list; layer 0 stands for every layer.
  """
  one_layer = copy.deepcopy(bert_config)
  one_layer.num_hidden_layers = 1
  with tf.Graph().as_default():
    # A --deterministic_run has turned op determinism on: its random initialisers need a seed
    # (the values are never computed, only the shapes read).
    _tf1.set_random_seed(0)
    ids = tf.zeros([1, 2], tf.int32)
    modeling.BertModel(config=one_layer, is_training=False, input_ids=ids, input_mask=ids,
                       token_type_ids=ids)
    return {re.sub(r":\d+$", "", var.name): var.shape.as_list()
            for var in _tf1.global_variables()}


def first_shape_mismatch(init_checkpoint, bert_config):
  """The first variable of `init_checkpoint` (by name) that the encoder of `bert_config` also has,
  with another shape: the one the initialisation would fail on once the graph is built.

  Args:
    init_checkpoint: a checkpoint prefix.
    bert_config: `modeling.BertConfig`.

  Returns:
    (name, shape in the checkpoint, shape in the model), shapes as lists; None when every
    variable both have matches.
  """
  model = encoder_variable_shapes(bert_config)
  for name, shape in tf.train.list_variables(init_checkpoint):
    key = name
    layer = _LAYER_VARIABLE.match(name)
    if layer:
      if int(layer.group(2)) >= bert_config.num_hidden_layers:
        continue  # a deeper checkpoint's layers: the model has none of them
      key = _LAYER_VARIABLE.sub(r"\g<1>0/", name)
    if key in model and list(shape) != model[key]:
      return name, list(shape), model[key]
  return None


def init_from_checkpoint(init_checkpoint, use_scaffold_fn):
  """Initialises the trainable variables that `init_checkpoint` holds under the same name.

  Args:
    init_checkpoint: checkpoint path, or None/"" for no initialisation.
    use_scaffold_fn: a TPUEstimator: initialise inside the returned `scaffold_fn`.

  Returns:
    (scaffold_fn or None, dict of the initialised variables' names).

  Raises:
    errors.UsageError: a variable whose checkpoint value has another shape (naming it; a head's:
      the encoder's are checked before anything is written, `first_shape_mismatch`).
  """
  if not init_checkpoint:
    return None, {}
  try:
    assignment_map, loaded = modeling.get_assignment_map_from_checkpoint(
        _tf1.trainable_variables(), init_checkpoint)
  except ValueError as e:
    raise errors.UsageError("--init_checkpoint=%s" % e) from None
  if use_scaffold_fn:
    def scaffold_fn():
      _tf1.train.init_from_checkpoint(init_checkpoint, assignment_map)
      return _tf1.train.Scaffold()
    return scaffold_fn, loaded
  _tf1.train.init_from_checkpoint(init_checkpoint, assignment_map)
  return None, loaded


def with_training_dropout(bert_config, training_dropout):
  """The configuration a training graph is built from: `bert_config`, or with `training_dropout`
  (a float in [0, 1)) a copy whose hidden and attention dropout probabilities are that value.

  Args:
    bert_config: `modeling.BertConfig` (not changed).
    training_dropout: None, or the dropout probability of the training graph.

  Returns:
    `modeling.BertConfig`.
  """
  if training_dropout is None:
    return bert_config
  config = copy.deepcopy(bert_config)
  config.hidden_dropout_prob = training_dropout
  config.attention_probs_dropout_prob = training_dropout
  return config


def _log_trainable_variables(loaded, rank):
  logging.info("**** Trainable Variables ****")
  for var in _tf1.trainable_variables():
    init_string = ", *INIT_FROM_CKPT*" if var.name in loaded else ""
    logging.info("  %d :: name = %s, shape = %s%s", rank, var.name, var.shape, init_string)


def model_fn_builder(head_fn, bert_config, init_checkpoint, settings, verbose_logging=False,
                     dropout_seed=None, training_dropout=None, layouts=None):
  """Returns the `model_fn` of an Estimator (or TPUEstimator) around `head_fn`.

  Args:
    head_fn: head_fn(model, features, mode) -> `utils.model.heads.HeadOutput`, where `model` is the
      built `modeling.BertModel`; it may read `model.dropout_key` for dropout of its own.
    bert_config: `modeling.BertConfig`.
    init_checkpoint: checkpoint whose matching variables initialise the model, or None.
    settings: `TrainingSettings`.
    verbose_logging: list every trainable variable, marking those loaded from the checkpoint.
    dropout_seed: a deterministic run's seed: training counts micro-steps (`determinism`) and
      draws each dropout mask from (seed, micro-step, rank, layer, site); None: stateful dropout.
    training_dropout: None, or the hidden and attention dropout probability of the TRAIN graph
      instead of `bert_config`'s (run_pretraining.py's --pretraining_dropout).
    layouts: pretraining's `record_layout.Layouts`: the encoder of a graph reading packed rows
      takes their positions and sequence numbers; None: one sequence per example (every other
      task).

  Returns:
    model_fn(features, labels, mode, params).
  """
  precision, distribution = settings.precision, settings.distribution
  training_config = with_training_dropout(bert_config, training_dropout)
  tpu_estimator_spec = distribution.uses_tpu_estimator
  rank = distribution.hvd.rank() if distribution.hvd is not None else 0

  def model_fn(features, labels, mode, params):  # pylint: disable=unused-argument
    """Builds the graph of one mode."""
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    layout = record_layout.for_graph(layouts, is_training)
    dropout_key = advance_micro_step = None
    if is_training and dropout_seed is not None:
      dropout_key, advance_micro_step = determinism.begin_micro_step(dropout_seed, rank)
    model = modeling.BertModel(
        config=training_config if is_training else bert_config, is_training=is_training,
        input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
        use_one_hot_embeddings=distribution.use_tpu, compute_type=precision.compute_type,
        dropout_key=dropout_key, **pretraining.packed_encoder_args(features, layout))
    head = head_fn(model, features, mode)
    total_loss = None
    if head.loss is not None:
      total_loss = tf.identity(head.loss, name=graph_names.TOTAL_LOSS)
    scaffold_fn, loaded = init_from_checkpoint(init_checkpoint, tpu_estimator_spec)
    if verbose_logging:
      _log_trainable_variables(loaded, rank)

    spec = {"mode": mode}
    if mode == tf.estimator.ModeKeys.TRAIN:
      train_op = optimization.build_train_op(total_loss, settings.schedule, precision,
                                             settings.accumulation, distribution)
      if advance_micro_step is not None:
        train_op = tf.group(train_op, advance_micro_step, name="train_op_and_micro_step")
      spec.update(loss=total_loss, train_op=train_op)
    elif mode == tf.estimator.ModeKeys.EVAL:
      spec["loss"] = total_loss
      if tpu_estimator_spec:
        spec["eval_metrics"] = (head.metric_fn, head.metric_args)
      else:
        spec["eval_metric_ops"] = head.metric_fn(*head.metric_args)
    elif head.predictions is not None:
      spec["predictions"] = head.predictions
    else:
      raise ValueError("this model has no predictions: only TRAIN and EVAL modes are supported, "
                       "got %s" % mode)
    if tpu_estimator_spec:
      return _tf1.estimator.tpu.TPUEstimatorSpec(scaffold_fn=scaffold_fn, **spec)
    return tf.estimator.EstimatorSpec(**spec)

  return model_fn
