"""utils/training/model_fn.py: the Estimator model_fn around the pretraining head, built in process
on a tiny BERT and run on a random batch. TRAIN: an EstimatorSpec whose loss is the graph tensor
`total_loss` (= mlm_loss + nsp_loss, fetched separately), the named tensors of
utils/core/graph_names.py with their dtypes, the precision's compute type and one update applied;
EVAL: the loss and the four metrics against a numpy BERT on the init checkpoint's weights, no
dropout and no optimizer; PREDICT: the head's predictions or a refusal; the init checkpoint (and
its log), a TPUEstimator's specs and scaffold_fn, and the micro-step counter of a seeded run."""

import logging
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import config as tf_config  # pylint: disable=g-direct-tensorflow-import

import modeling
import optimization
from tests import helpers
from tests import test_data_record_layout
from tests import numpy_bert
from utils.checkpoints import contents
from utils.checkpoints import release
from utils.core import errors
from utils.core import graph_names
from utils.data import record_layout
from utils.model import heads
from utils.model import pretraining
from utils.training import determinism
from utils.training import model_fn as model_fn_lib

_tf1 = tf.compat.v1
TRAIN, EVAL, PREDICT = (tf.estimator.ModeKeys.TRAIN, tf.estimator.ModeKeys.EVAL,
                        tf.estimator.ModeKeys.PREDICT)
CONFIG = helpers.tiny_config()
BATCH = helpers.random_batch(np.random.RandomState(1), 3, 12, CONFIG.vocab_size, 4)
LEARNING_RATE = 1e-3
METRICS = {"masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
           "next_sentence_loss"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  """Random weights of CONFIG's pretraining model (gammas near 1), written as a checkpoint."""
  rng = np.random.RandomState(2)
  weights = {}
  for name, shape in release.model_weight_shapes(CONFIG).items():
    value = rng.normal(0, 0.1, shape)
    weights[name] = (1.0 + value if name.endswith("gamma") else value).astype(np.float32)
  prefix = str(tmp_path_factory.mktemp("init") / "model.ckpt")
  contents.write_checkpoint(prefix, weights)
  return {"prefix": prefix, "weights": weights}


def _settings(precision=optimization.Precision(), accumulation=optimization.Accumulation(),
              distribution=optimization.Distribution()):
  # LAMB without warmup: the first update's rate is the peak rate.
  return model_fn_lib.TrainingSettings(optimization.Schedule("lamb", LEARNING_RATE, 10, 0),
                                       precision, accumulation, distribution)


def _build(mode, settings=None, init_checkpoint=None, config=CONFIG, head_fn=None, features=None,
           layouts=None, **kwargs):
  """Calls the model_fn in the default graph as the Estimator does (global step first).

  Returns:
    (spec, the BertModel the head was given).
  """
  seen = {}
  head = head_fn or pretraining.pretraining_head(config, layouts)

  def recording_head(model, features, head_mode):
    seen["model"] = model
    return head(model, features, head_mode)

  model_fn = model_fn_lib.model_fn_builder(recording_head, config, init_checkpoint,
                                           settings or _settings(), layouts=layouts, **kwargs)
  _tf1.train.get_or_create_global_step()
  spec = model_fn(helpers.constant_features(BATCH if features is None else features), None, mode,
                  {})
  return spec, seen["model"]


def _tensor(name):
  return _tf1.get_default_graph().get_tensor_by_name(graph_names.tensor_name(name))


def _has_tensor(name):
  try:
    _tensor(name)
    return True
  except KeyError:
    return False


def _numpy_outputs(weights):
  """The pretraining heads on BATCH in float64 numpy (no dropout)."""
  _, layers, pooled = numpy_bert.encoder(weights, CONFIG.num_hidden_layers,
                                         CONFIG.num_attention_heads, BATCH["input_ids"],
                                         BATCH["input_mask"], BATCH["segment_ids"])
  return numpy_bert.pretraining_outputs(
      weights, layers[-1], pooled, BATCH["masked_lm_positions"], BATCH["masked_lm_ids"],
      BATCH["masked_lm_weights"], BATCH["next_sentence_labels"])


def test_train_spec_loss_is_mlm_plus_nsp_and_its_train_op_applies_one_update(graph):
  spec, model = _build(TRAIN)
  assert isinstance(spec, tf.estimator.EstimatorSpec) and spec.mode == TRAIN
  assert spec.loss is _tensor(graph_names.TOTAL_LOSS)
  assert model.get_sequence_output().dtype == tf.float32
  documented = {graph_names.TOTAL_LOSS: tf.float32, graph_names.MLM_LOSS: tf.float32,
                graph_names.NSP_LOSS: tf.float32, graph_names.LEARNING_RATE: tf.float32,
                graph_names.STEP_UPDATE: tf.int64, graph_names.GLOBAL_NORM: tf.float32}
  for name, dtype in documented.items():
    assert _tensor(name).dtype == dtype and _tensor(name).shape.as_list() == [], name
  assert spec.train_op is graph.get_operation_by_name(graph_names.TRAIN_OP)
  # fp32 without accumulation: no update flag, no loss scale.
  for name in (graph_names.UPDATE_STEP, graph_names.LOSS_SCALE, graph_names.SKIPPED_UPDATES):
    assert not _has_tensor(name), name
  trainable = _tf1.trainable_variables()
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    before = sess.run(trainable)
    got = sess.run({"loss": spec.loss, "mlm": _tensor(graph_names.MLM_LOSS),
                    "nsp": _tensor(graph_names.NSP_LOSS),
                    "lr": _tensor(graph_names.LEARNING_RATE),
                    "step": _tensor(graph_names.STEP_UPDATE),
                    "norm": _tensor(graph_names.GLOBAL_NORM), "train": spec.train_op})
    after = sess.run(trainable)
    global_step = sess.run(_tf1.train.get_global_step())
  np.testing.assert_allclose(got["loss"], got["mlm"] + got["nsp"], rtol=1e-6)
  assert got["mlm"] > 0 and got["nsp"] > 0
  np.testing.assert_allclose(got["lr"], LEARNING_RATE, rtol=1e-6)
  assert got["step"] == 1 and global_step == 1
  assert np.isfinite(got["norm"]) and got["norm"] > 0
  changed = [v.op.name for v, old, new in zip(trainable, before, after)
             if not np.array_equal(old, new)]
  assert changed == [v.op.name for v in trainable]


@pytest.mark.parametrize("precision,accumulation,activation_type,matmul_type,flags", [
    (optimization.Precision(manual_fp16=True, init_loss_scale=2**10),
     optimization.Accumulation(2), tf.float16, tf.float16,
     {graph_names.UPDATE_STEP: tf.bool, graph_names.LOSS_SCALE: tf.float32,
      graph_names.SKIPPED_UPDATES: tf.int64}),
    # bf16: the products in bf16, the activations in fp32 (modeling.ComputePrecision).
    (optimization.Precision(bf16=True), optimization.Accumulation(1), tf.float32, tf.bfloat16,
     {})], ids=["fp16_accumulation", "bf16"])
def test_the_encoder_computes_in_the_precisions_types_and_losses_stay_fp32(
    graph, precision, accumulation, activation_type, matmul_type, flags):
  spec, model = _build(TRAIN, _settings(precision, accumulation))
  assert model.get_sequence_output().dtype == activation_type
  assert model.get_pooled_output().dtype == activation_type
  products = {op.inputs[0].dtype for op in graph.get_operations()
              if op.name.startswith("bert/encoder/") and op.type.startswith(("MatMul",
                                                                             "BatchMatMul"))}
  assert products == {matmul_type}
  for name in (graph_names.TOTAL_LOSS, graph_names.MLM_LOSS, graph_names.NSP_LOSS):
    assert _tensor(name).dtype == tf.float32 and _tensor(name).shape.as_list() == [], name
  for name in (graph_names.UPDATE_STEP, graph_names.LOSS_SCALE, graph_names.SKIPPED_UPDATES):
    assert _has_tensor(name) == (name in flags), name
    if name in flags:
      assert _tensor(name).dtype == flags[name] and _tensor(name).shape.as_list() == [], name
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    got = sess.run({"loss": spec.loss, "mlm": _tensor(graph_names.MLM_LOSS),
                    "nsp": _tensor(graph_names.NSP_LOSS), "norm": _tensor(graph_names.GLOBAL_NORM),
                    "step": _tensor(graph_names.STEP_UPDATE), "train": spec.train_op})
  assert np.isfinite(got["loss"])
  np.testing.assert_allclose(got["loss"], got["mlm"] + got["nsp"], rtol=1e-6)
  if accumulation.num_accumulation_steps == 2:
    # The first of two micro-steps applies no update: no norm, the step unchanged.
    assert np.isnan(got["norm"]) and got["step"] == 0
  else:
    assert np.isfinite(got["norm"]) and got["step"] == 1


def test_eval_spec_loss_and_metrics_match_numpy_on_the_init_checkpoint(graph, checkpoint):
  spec, _ = _build(EVAL, init_checkpoint=checkpoint["prefix"])
  assert isinstance(spec, tf.estimator.EstimatorSpec) and spec.mode == EVAL
  assert spec.loss is _tensor(graph_names.TOTAL_LOSS) and spec.train_op is None
  assert set(spec.eval_metric_ops) == METRICS
  # No optimizer: no learning rate, no slots; the weights and the Estimator's step only.
  assert not _has_tensor(graph_names.LEARNING_RATE)
  assert {v.op.name for v in _tf1.global_variables()} == (
      set(checkpoint["weights"]) | {"global_step"})
  with _tf1.Session() as sess:
    sess.run([_tf1.global_variables_initializer(), _tf1.local_variables_initializer()])
    got = sess.run({"loss": spec.loss, "mlm": _tensor(graph_names.MLM_LOSS),
                    "nsp": _tensor(graph_names.NSP_LOSS),
                    "updates": {k: op for k, (_, op) in spec.eval_metric_ops.items()}})
    again = sess.run(spec.loss)
    metrics = sess.run({k: value for k, (value, _) in spec.eval_metric_ops.items()})
  expected = _numpy_outputs(checkpoint["weights"])
  np.testing.assert_allclose(got["mlm"], expected["mlm_loss"], rtol=1e-5)
  np.testing.assert_allclose(got["nsp"], expected["nsp_loss"], rtol=1e-5)
  np.testing.assert_allclose(got["loss"], expected["mlm_loss"] + expected["nsp_loss"], rtol=1e-5)
  assert again == got["loss"]  # no dropout in EVAL
  weights = BATCH["masked_lm_weights"].reshape(-1).astype(np.float64)
  mlm_right = expected["mlm_log_probs"].argmax(-1) == BATCH["masked_lm_ids"].reshape(-1)
  nsp_right = expected["nsp_log_probs"].argmax(-1) == BATCH["next_sentence_labels"].reshape(-1)
  np.testing.assert_allclose(metrics["masked_lm_loss"],
                             (weights * expected["mlm_per_example"]).sum() / weights.sum(),
                             rtol=1e-5)
  np.testing.assert_allclose(metrics["masked_lm_accuracy"],
                             (weights * mlm_right).sum() / weights.sum(), rtol=1e-6)
  np.testing.assert_allclose(metrics["next_sentence_loss"], expected["nsp_per_example"].mean(),
                             rtol=1e-5)
  np.testing.assert_allclose(metrics["next_sentence_accuracy"], nsp_right.mean(), rtol=1e-6)


def test_train_mode_builds_the_same_model_with_dropout_on(checkpoint):
  expected = _numpy_outputs(checkpoint["weights"])
  no_dropout = helpers.tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  losses = {}
  for name, config in (("without dropout", no_dropout), ("with dropout", CONFIG)):
    with tf.Graph().as_default():
      _tf1.set_random_seed(3)
      spec, _ = _build(TRAIN, init_checkpoint=checkpoint["prefix"], config=config)
      with _tf1.Session() as sess:
        sess.run(_tf1.global_variables_initializer())
        losses[name] = [sess.run(spec.loss) for _ in range(2)]  # no update between
  target = expected["mlm_loss"] + expected["nsp_loss"]
  np.testing.assert_allclose(losses["without dropout"], [target, target], rtol=1e-5)
  # TRAIN applies the config's dropout: a new mask every run, a loss unlike the exact one.
  first, second = losses["with dropout"]
  assert first != second
  assert abs(first - target) > 1e-4 and abs(second - target) > 1e-4


def test_init_checkpoint_loads_only_what_it_holds_and_verbose_logging_marks_it(
    graph, checkpoint, tmp_path, caplog):
  encoder = {name: value for name, value in checkpoint["weights"].items()
             if name.startswith("bert/")}
  prefix = str(tmp_path / "encoder.ckpt")
  contents.write_checkpoint(prefix, dict(encoder, **{"other/thing": np.ones([3], np.float32)}))
  caplog.set_level(logging.INFO, logger="absl")
  _build(EVAL, init_checkpoint=prefix, verbose_logging=True)
  trainable = _tf1.trainable_variables()
  listed = [r.getMessage() for r in caplog.records if " :: name = " in r.getMessage()]
  assert len(listed) == len(trainable)
  marked = {line.split("name = ")[1].split(":0,")[0] for line in listed
            if line.endswith(", *INIT_FROM_CKPT*")}
  assert marked == set(encoder)
  assert all(line.startswith("  0 :: ") for line in listed)
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    values = dict(zip([v.op.name for v in trainable], sess.run(trainable)))
  for name, value in encoder.items():
    assert values[name].tobytes() == value.tobytes(), name
  # The heads keep their initializers' values (the output bias starts at zero).
  assert not values["cls/predictions/output_bias"].any()
  assert not np.array_equal(values["cls/predictions/transform/dense/kernel"],
                            checkpoint["weights"]["cls/predictions/transform/dense/kernel"])
  # No checkpoint: nothing to initialise, under either Estimator.
  assert model_fn_lib.init_from_checkpoint(None, False) == (None, {})
  assert model_fn_lib.init_from_checkpoint("", True) == (None, {})


def test_init_checkpoint_with_a_variable_of_another_shape_is_an_error_naming_it(graph, tmp_path):
  prefix = str(tmp_path / "narrow.ckpt")
  contents.write_checkpoint(prefix, {"bert/embeddings/word_embeddings": np.zeros(
      [CONFIG.vocab_size, 16], np.float32)})
  with pytest.raises(ValueError, match=r"variable bert/embeddings/word_embeddings has shape "
                                       r"\[99, 16\] in the checkpoint but \[99, 32\] in the graph"):
    _build(EVAL, init_checkpoint=prefix)


def test_a_heads_variable_of_another_shape_is_a_usage_error_naming_the_flag(graph, tmp_path):
  """Met at graph build (a head's variable; the encoder's are checked before anything is written):
  one line and exit 2 through the scripts' error reporting, not a traceback."""
  prefix = str(tmp_path / "narrow.ckpt")
  contents.write_checkpoint(prefix, {"bert/embeddings/word_embeddings": np.zeros(
      [CONFIG.vocab_size, 16], np.float32)})
  with pytest.raises(errors.UsageError, match=r"^--init_checkpoint=%s: variable "
                     r"bert/embeddings/word_embeddings has shape \[99, 16\]" % re.escape(prefix)):
    _build(EVAL, init_checkpoint=prefix)


def test_encoder_variable_shapes_follow_the_config_whatever_its_depth():
  hidden, inter = CONFIG.hidden_size, CONFIG.intermediate_size
  shapes = model_fn_lib.encoder_variable_shapes(helpers.tiny_config(num_hidden_layers=5000))
  assert shapes["bert/embeddings/word_embeddings"] == [99, hidden]
  assert shapes["bert/embeddings/position_embeddings"] == [64, hidden]
  assert shapes["bert/embeddings/token_type_embeddings"] == [2, hidden]
  assert shapes["bert/encoder/layer_0/attention/self/query/kernel"] == [hidden, hidden]
  assert shapes["bert/encoder/layer_0/intermediate/dense/kernel"] == [hidden, inter]
  assert shapes["bert/encoder/layer_0/output/dense/kernel"] == [inter, hidden]
  assert shapes["bert/pooler/dense/bias"] == [hidden]
  assert not [name for name in shapes if "layer_1" in name]  # layer 0 stands for them all


def test_encoder_variable_shapes_are_read_with_op_determinism_on():
  # --deterministic_run turns op determinism on before the init checkpoint is checked: the
  # throw-away graph's random initialisers then need a seed (a fine-tuning run failed on it).
  tf_config.enable_op_determinism()
  try:
    shapes = model_fn_lib.encoder_variable_shapes(CONFIG)
  finally:
    tf_config.disable_op_determinism()  # the public API has no way back: the rest of the suite
  assert shapes["bert/pooler/dense/kernel"] == [CONFIG.hidden_size, CONFIG.hidden_size]


def test_packed_rows_on_the_tpu_path_get_the_packed_metrics_and_one_hot_embeddings():
  row = {name: np.asarray(values, np.float32 if name.endswith("weights") else np.int32)
         for name, values in test_data_record_layout.GOOD.items()}
  packed = {name: np.stack([value, value]) for name, value in row.items()}
  with tf.Graph().as_default():
    layout = record_layout.layout_of(test_data_record_layout.example(
        test_data_record_layout.GOOD))
    spec, model = _build(EVAL, _settings(distribution=optimization.Distribution(use_tpu=True)),
                         features=packed, layouts=record_layout.Layouts(layout, layout))
    metric_fn, metric_args = spec.eval_metrics
    # TPUEstimatorSpec checks the count against the function's arguments.
    assert metric_fn is pretraining.packed_metric_fn and len(metric_args) == 8
    # One pooled output per next-sentence slot: 2 rows x 3.
    assert model.get_pooled_output().shape.as_list() == [6, CONFIG.hidden_size]
    metrics = metric_fn(*metric_args)
    with _tf1.Session() as sess:
      sess.run([_tf1.global_variables_initializer(), _tf1.local_variables_initializer()])
      sess.run([update for _, update in metrics.values()])
      sequences, tokens = sess.run([_tensor(graph_names.BATCH_SEQUENCES),
                                    _tensor(graph_names.BATCH_TOKENS)])
    # The row holds 2 sequences of 5 and 4 tokens.
    assert (sequences, tokens) == (4.0, 18.0)


def test_first_shape_mismatch_names_the_first_variable_that_differs(checkpoint, tmp_path):
  assert model_fn_lib.first_shape_mismatch(checkpoint["prefix"], CONFIG) is None
  # Hidden 32 in the checkpoint, 64 in the model: by name, the embeddings' layer norm is first.
  assert model_fn_lib.first_shape_mismatch(
      checkpoint["prefix"], helpers.tiny_config(hidden_size=64)) == (
          "bert/embeddings/LayerNorm/beta", [32], [64])
  # A deeper checkpoint: layers the model lacks are not compared; a layer it has is.
  weights = dict(checkpoint["weights"])
  weights["bert/encoder/layer_7/output/dense/bias"] = np.zeros([5], np.float32)
  deeper = str(tmp_path / "deeper.ckpt")
  contents.write_checkpoint(deeper, weights)
  assert model_fn_lib.first_shape_mismatch(deeper, CONFIG) is None
  weights["bert/encoder/layer_1/intermediate/dense/bias"] = np.zeros([5], np.float32)
  contents.write_checkpoint(deeper, weights)
  assert model_fn_lib.first_shape_mismatch(deeper, CONFIG) == (
      "bert/encoder/layer_1/intermediate/dense/bias", [5], [37])


def test_a_tpu_estimator_gets_tpu_specs_that_initialise_in_scaffold_fn(checkpoint):
  word = "bert/embeddings/word_embeddings"
  with tf.Graph().as_default():
    spec, _ = _build(TRAIN, _settings(distribution=optimization.Distribution(tpu_estimator=True)),
                     init_checkpoint=checkpoint["prefix"])
    assert isinstance(spec, _tf1.estimator.tpu.TPUEstimatorSpec)
    assert spec.loss is _tensor(graph_names.TOTAL_LOSS) and spec.train_op is not None
    table = helpers.variable(word)
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      assert not np.array_equal(sess.run(table), checkpoint["weights"][word])
      # The checkpoint is read when the TPUEstimator calls scaffold_fn, not before.
      assert isinstance(spec.scaffold_fn(), _tf1.train.Scaffold)
      sess.run(_tf1.global_variables_initializer())
      assert sess.run(table).tobytes() == checkpoint["weights"][word].tobytes()
  with tf.Graph().as_default():
    spec, _ = _build(EVAL, _settings(distribution=optimization.Distribution(use_tpu=True)))
    assert isinstance(spec, _tf1.estimator.tpu.TPUEstimatorSpec) and spec.scaffold_fn is None
    metric_fn, metric_args = spec.eval_metrics
    assert metric_fn is pretraining.metric_fn and len(metric_args) == 7
    # On TPU the word embeddings are looked up with a one-hot matmul over the vocabulary.
    one_hot_depths = [op.outputs[0].shape.as_list()[-1]
                      for op in _tf1.get_default_graph().get_operations() if op.type == "OneHot"]
    assert CONFIG.vocab_size in one_hot_depths
  with tf.Graph().as_default():
    _build(EVAL)
    one_hot_depths = [op.outputs[0].shape.as_list()[-1]
                      for op in _tf1.get_default_graph().get_operations() if op.type == "OneHot"]
    assert CONFIG.vocab_size not in one_hot_depths


def test_predict_spec_holds_the_heads_predictions_and_a_head_without_them_is_refused():
  def pooled_head(model, features, mode):  # pylint: disable=unused-argument
    return heads.HeadOutput(loss=None, predictions={"pooled": model.get_pooled_output()},
                            metric_fn=None, metric_args=None)

  with tf.Graph().as_default():
    spec, model = _build(PREDICT, head_fn=pooled_head)
    assert isinstance(spec, tf.estimator.EstimatorSpec) and spec.mode == PREDICT
    assert spec.predictions["pooled"] is model.get_pooled_output()
    assert spec.loss is None and spec.train_op is None
    assert not _has_tensor(graph_names.TOTAL_LOSS)  # no loss, no total_loss tensor
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match="this model has no predictions: only TRAIN and EVAL "
                                         "modes are supported, got infer"):
      _build(PREDICT)


def test_a_dropout_seed_counts_micro_steps_in_training_only(checkpoint):
  losses = []
  with tf.Graph().as_default() as graph:
    spec, _ = _build(TRAIN, init_checkpoint=checkpoint["prefix"], dropout_seed=5)
    assert spec.train_op.name == "train_op_and_micro_step"
    counter = helpers.variable(determinism.MICRO_STEP_NAME)
    assert counter.dtype.base_dtype == tf.int64 and counter not in _tf1.trainable_variables()
    for session in range(2):  # two sessions from the same weights: the same keyed masks
      with _tf1.Session(graph=graph) as sess:
        sess.run(_tf1.global_variables_initializer())
        assert sess.run(counter) == 0
        losses.append(sess.run([spec.loss, spec.train_op])[0])
        assert sess.run(counter) == 1
        if session == 0:
          sess.run(spec.train_op)
          assert sess.run(counter) == 2
  assert losses[0] == losses[1]
  expected = _numpy_outputs(checkpoint["weights"])
  assert abs(losses[0] - (expected["mlm_loss"] + expected["nsp_loss"])) > 1e-4  # dropout is on
  for mode, seed in ((EVAL, 5), (TRAIN, None)):
    with tf.Graph().as_default():
      spec, _ = _build(mode, dropout_seed=seed)
      names = {v.op.name for v in _tf1.global_variables()}
      assert determinism.MICRO_STEP_NAME not in names, mode
      if mode == TRAIN:
        assert spec.train_op.name == graph_names.TRAIN_OP
