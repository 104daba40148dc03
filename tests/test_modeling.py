"""modeling.py: shapes, variable names, fp32 numerics against numpy, checkpoints, configs."""

import dataclasses
import json
import logging

import numpy as np
import pytest
import tensorflow as tf

import modeling
import run_pretraining
from tests import helpers
from tests import numpy_bert

_tf1 = tf.compat.v1


def test_output_shapes_tiny_config(graph):
  config = modeling.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=5,
                               num_attention_heads=4, intermediate_size=37)
  rng = np.random.RandomState(0)
  input_ids = tf.constant(rng.randint(0, 99, size=(13, 7)), tf.int32)
  input_mask = tf.constant(rng.randint(0, 2, size=(13, 7)), tf.int32)
  token_type_ids = tf.constant(rng.randint(0, 2, size=(13, 7)), tf.int32)
  model = modeling.BertModel(config, is_training=True, input_ids=input_ids,
                             input_mask=input_mask, token_type_ids=token_type_ids)
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    pooled, sequence, layers, embedding, table = sess.run([
        model.get_pooled_output(), model.get_sequence_output(), model.get_all_encoder_layers(),
        model.get_embedding_output(), model.get_embedding_table()])
  assert pooled.shape == (13, 32)
  assert sequence.shape == (13, 7, 32)
  assert len(layers) == 5 and all(layer.shape == (13, 7, 32) for layer in layers)
  assert embedding.shape == (13, 7, 32)
  assert table.shape == (99, 32)
  np.testing.assert_array_equal(layers[-1], sequence)


def _expected_variables(num_layers, hidden, intermediate, vocab, types, positions):
  """Checkpoint names and shapes of docs/DESIGN.md section 4, spelled out here independently."""
  h, i = hidden, intermediate
  expected = {
      "bert/embeddings/word_embeddings": [vocab, h],
      "bert/embeddings/token_type_embeddings": [types, h],
      "bert/embeddings/position_embeddings": [positions, h],
      "bert/embeddings/LayerNorm/beta": [h],
      "bert/embeddings/LayerNorm/gamma": [h],
      "bert/pooler/dense/kernel": [h, h],
      "bert/pooler/dense/bias": [h],
      "cls/predictions/transform/dense/kernel": [h, h],
      "cls/predictions/transform/dense/bias": [h],
      "cls/predictions/transform/LayerNorm/beta": [h],
      "cls/predictions/transform/LayerNorm/gamma": [h],
      "cls/predictions/output_bias": [vocab],
      "cls/seq_relationship/output_weights": [2, h],
      "cls/seq_relationship/output_bias": [2],
  }
  for n in range(num_layers):
    p = "bert/encoder/layer_%d/" % n
    for proj in ("query", "key", "value"):
      expected[p + "attention/self/%s/kernel" % proj] = [h, h]
      expected[p + "attention/self/%s/bias" % proj] = [h]
    expected[p + "attention/output/dense/kernel"] = [h, h]
    expected[p + "attention/output/dense/bias"] = [h]
    expected[p + "attention/output/LayerNorm/beta"] = [h]
    expected[p + "attention/output/LayerNorm/gamma"] = [h]
    expected[p + "intermediate/dense/kernel"] = [h, i]
    expected[p + "intermediate/dense/bias"] = [i]
    expected[p + "output/dense/kernel"] = [i, h]
    expected[p + "output/dense/bias"] = [h]
    expected[p + "output/LayerNorm/beta"] = [h]
    expected[p + "output/LayerNorm/gamma"] = [h]
  return expected


@pytest.mark.parametrize("compute_type", [tf.float32, tf.float16])
def test_trainable_variable_names_and_shapes(graph, compute_type):
  config = helpers.tiny_config(num_hidden_layers=2)
  batch = helpers.random_batch(np.random.RandomState(1), 2, 8, config.vocab_size, 3)
  run_pretraining.build_pretraining_model(config, helpers.constant_features(batch),
                                          is_training=True, compute_type=compute_type)
  actual = {v.op.name: v.shape.as_list() for v in _tf1.trainable_variables()}
  assert actual == _expected_variables(2, 32, 37, 99, 2, 64)
  # Master weights are fp32 whatever the compute type.
  assert all(v.dtype.base_dtype == tf.float32 for v in _tf1.trainable_variables())


def _run_model_with_random_weights(config, batch, seed):
  """Builds our graph (no dropout), randomises every variable, returns (weights, outputs)."""
  g = tf.Graph()
  with g.as_default():
    built = run_pretraining.build_pretraining_model(
        config, helpers.constant_features(batch), is_training=False)
    model = built["model"]
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      weights = helpers.randomize_variables(sess, _tf1.trainable_variables(),
                                            np.random.RandomState(seed))
      outputs = sess.run({
          "embedding": model.get_embedding_output(),
          "layers": model.get_all_encoder_layers(),
          "pooled": model.get_pooled_output(),
          "mlm_loss": built["mlm_loss"],
          "mlm_per_example": built["mlm_per_example_loss"],
          "nsp_loss": built["nsp_loss"],
          "nsp_per_example": built["nsp_per_example_loss"],
          "total_loss": built["total_loss"],
      })
  return weights, outputs


def test_fp32_forward_equals_numpy_bert():
  config = helpers.tiny_config(num_hidden_layers=3, max_position_embeddings=16)
  batch = helpers.random_batch(np.random.RandomState(2), 3, 12, config.vocab_size, 4)
  weights, out = _run_model_with_random_weights(config, batch, seed=3)

  embedding, layers, pooled = numpy_bert.encoder(
      weights, 3, 4, batch["input_ids"], batch["input_mask"], batch["segment_ids"])
  mlm_loss, mlm_per_example, nsp_loss, nsp_per_example = numpy_bert.pretraining_losses(
      weights, layers[-1], pooled, batch["masked_lm_positions"], batch["masked_lm_ids"],
      batch["masked_lm_weights"], batch["next_sentence_labels"])

  np.testing.assert_allclose(out["embedding"], embedding, atol=1e-5)
  for ours, reference in zip(out["layers"], layers):
    np.testing.assert_allclose(ours, reference, atol=1e-5)
  np.testing.assert_allclose(out["pooled"], pooled, atol=1e-5)
  np.testing.assert_allclose(out["mlm_per_example"], mlm_per_example, atol=1e-5)
  np.testing.assert_allclose(out["mlm_loss"], mlm_loss, atol=1e-5)
  np.testing.assert_allclose(out["nsp_per_example"], nsp_per_example, atol=1e-5)
  np.testing.assert_allclose(out["nsp_loss"], nsp_loss, atol=1e-5)
  np.testing.assert_allclose(out["total_loss"], mlm_loss + nsp_loss, atol=1e-5)
  # The batch has padding, so the attention mask took part in the comparison.
  assert batch["input_mask"].min() == 0


def test_padding_does_not_leak_into_real_tokens():
  config = helpers.tiny_config(max_position_embeddings=16)
  batch = helpers.random_batch(np.random.RandomState(4), 2, 10, config.vocab_size, 3)
  _, out_a = _run_model_with_random_weights(config, batch, seed=5)
  altered = {k: v.copy() for k, v in batch.items()}
  padded = altered["input_mask"] == 0
  altered["input_ids"][padded] = (altered["input_ids"][padded] + 7) % config.vocab_size
  _, out_b = _run_model_with_random_weights(config, altered, seed=5)
  real = batch["input_mask"] == 1
  # -10000 before the softmax leaves padding a weight of ~exp(-10000): invisible in fp32.
  np.testing.assert_allclose(out_a["layers"][-1][real], out_b["layers"][-1][real], atol=1e-6)


def test_gelu_is_the_tanh_approximation(graph):
  x = np.linspace(-6, 6, 41)
  with _tf1.Session() as sess:
    got = sess.run(modeling.gelu(tf.constant(x, tf.float64)))
  expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
  np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-14)
  # And not the exact erf form (differs by ~1e-3 around |x| = 2).
  from math import erf
  exact = np.array([0.5 * v * (1 + erf(v / np.sqrt(2))) for v in x])
  assert np.max(np.abs(got - exact)) > 1e-4


def test_layer_norm_uses_epsilon_1e_12(graph):
  # A row with tiny variance: epsilon 1e-12 normalises it to +-1, a larger epsilon would not.
  x = np.array([[1.0, 1.0 + 2e-5]], np.float32)
  out = modeling.layer_norm(tf.constant(x))
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    got = sess.run(out)
  np.testing.assert_allclose(got, [[-1.0, 1.0]], atol=2e-2)


def test_get_activation():
  assert modeling.get_activation("gelu") is modeling.gelu
  assert modeling.get_activation("relu") is tf.nn.relu
  assert modeling.get_activation("tanh") is tf.tanh
  assert modeling.get_activation("linear") is None
  assert modeling.get_activation(None) is None
  assert modeling.get_activation(tf.sigmoid) is tf.sigmoid
  with pytest.raises(ValueError, match="swish"):
    modeling.get_activation("swish")


def test_checkpoint_loads_into_separately_built_graph(tmp_path):
  config = helpers.tiny_config()
  batch = helpers.random_batch(np.random.RandomState(6), 2, 8, config.vocab_size, 3)
  ckpt = str(tmp_path / "bert_model.ckpt")

  g1 = tf.Graph()
  with g1.as_default():
    built = run_pretraining.build_pretraining_model(config, helpers.constant_features(batch),
                                                    is_training=False)
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      saved = helpers.randomize_variables(sess, _tf1.trainable_variables(),
                                          np.random.RandomState(7))
      expected_loss = sess.run(built["total_loss"])
      _tf1.train.Saver().save(sess, ckpt)

  g2 = tf.Graph()
  with g2.as_default():
    built = run_pretraining.build_pretraining_model(config, helpers.constant_features(batch),
                                                    is_training=False)
    with _tf1.variable_scope("new_head"):
      extra = _tf1.get_variable("kernel", [3, 3])
    tvars = _tf1.trainable_variables()
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(tvars, ckpt)
    bert_names = {v.op.name for v in tvars if v.op.name != "new_head/kernel"}
    assert set(assignment_map) == bert_names
    assert all(assignment_map[name] == name for name in assignment_map)
    assert set(initialized) == bert_names | {name + ":0" for name in bert_names}
    assert extra.op.name not in assignment_map
    _tf1.train.init_from_checkpoint(ckpt, assignment_map)
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      for var in tvars:
        if var.op.name in saved:
          np.testing.assert_array_equal(sess.run(var), saved[var.op.name])
      np.testing.assert_allclose(sess.run(built["total_loss"]), expected_loss, rtol=1e-6)


def test_assignment_map_reports_shape_mismatch(tmp_path):
  ckpt = str(tmp_path / "model.ckpt")
  with tf.Graph().as_default():
    _tf1.get_variable("bert/pooler/dense/kernel", [4, 4])
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      _tf1.train.Saver().save(sess, ckpt)
  with tf.Graph().as_default():
    var = _tf1.get_variable("bert/pooler/dense/kernel", [8, 8])
    with pytest.raises(ValueError, match=r"bert/pooler/dense/kernel.*\[4, 4\].*\[8, 8\]"):
      modeling.get_assignment_map_from_checkpoint([var], ckpt)


def test_config_round_trip(tmp_path):
  config = modeling.BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=4,
                               num_attention_heads=4, intermediate_size=1024, hidden_act="relu",
                               hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.05,
                               max_position_embeddings=256, type_vocab_size=3,
                               initializer_range=0.01)
  as_dict = json.loads(config.to_json_string())
  assert as_dict == {
      "vocab_size": 30522, "hidden_size": 256, "num_hidden_layers": 4,
      "num_attention_heads": 4, "intermediate_size": 1024, "hidden_act": "relu",
      "hidden_dropout_prob": 0.2, "attention_probs_dropout_prob": 0.05,
      "max_position_embeddings": 256, "type_vocab_size": 3, "initializer_range": 0.01}
  path = tmp_path / "bert_config.json"
  path.write_text(config.to_json_string())
  assert modeling.BertConfig.from_json_file(str(path)).to_dict() == config.to_dict()
  assert modeling.BertConfig.from_dict(as_dict).to_dict() == config.to_dict()
  # Defaults are the original's (BERT-base), through an explicit constructor call only.
  defaults = modeling.BertConfig(vocab_size=10).to_dict()
  assert defaults["hidden_size"] == 768 and defaults["num_hidden_layers"] == 12
  assert defaults["type_vocab_size"] == 16 and defaults["initializer_range"] == 0.02


# The size keys of bert_config.json; a file must give every one.
SIZES = {"vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 128, "max_position_embeddings": 64, "type_vocab_size": 2}


@pytest.mark.parametrize("key", sorted(SIZES))
def test_missing_size_key_is_an_error_naming_it_and_the_file(key, tmp_path):
  values = dict(SIZES)
  del values[key]
  with pytest.raises(ValueError, match="config: .*missing required key '%s'" % key):
    modeling.BertConfig.from_dict(values)
  path = tmp_path / "two_layers.json"
  path.write_text(json.dumps(values))
  with pytest.raises(ValueError, match="two_layers.json.*'%s'" % key):
    modeling.BertConfig.from_json_file(str(path))


def test_only_non_size_keys_take_the_release_defaults(caplog):
  with caplog.at_level(logging.INFO):
    config = modeling.BertConfig.from_dict(SIZES, source="small.json")
  assert config.num_hidden_layers == 2 and config.hidden_size == 64
  assert config.hidden_act == "gelu" and config.hidden_dropout_prob == 0.1
  assert config.attention_probs_dropout_prob == 0.1 and config.initializer_range == 0.02
  assert any("small.json" in r.getMessage() and "hidden_dropout_prob=0.1" in r.getMessage()
             for r in caplog.records)


@pytest.mark.parametrize("key,value", [
    ("vocab_size", 0),
    ("vocab_size", "big"),
    ("hidden_size", -8),
    ("num_hidden_layers", 0),
    ("num_attention_heads", 0),
    ("intermediate_size", 2.5),
    ("max_position_embeddings", 0),
    ("type_vocab_size", -1),
    ("hidden_act", "swish"),
    ("hidden_dropout_prob", 1.5),
    ("attention_probs_dropout_prob", -0.1),
    ("initializer_range", 0.0),
])
def test_invalid_config_value_names_the_key(key, value):
  values = dict(SIZES)
  values[key] = value
  with pytest.raises(ValueError, match=key):
    modeling.BertConfig.from_dict(values)


def test_heads_not_dividing_hidden_names_both_keys(graph):
  # As in the original release, a configuration built directly is checked as a whole when a
  # model is built.
  config = modeling.BertConfig(**dict(SIZES, hidden_size=30, num_attention_heads=4))
  with pytest.raises(ValueError, match="hidden_size.*num_attention_heads"):
    config.validate()
  with pytest.raises(ValueError, match="hidden_size.*num_attention_heads"):
    modeling.BertModel(config, is_training=False, input_ids=tf.zeros([2, 8], tf.int32))
  assert not _tf1.global_variables()  # refused before building anything


def test_config_read_from_a_dict_or_file_is_validated_as_a_whole(tmp_path):
  # 128 is not a multiple of 3: refused when read, naming the source and both keys.
  values = dict(SIZES, hidden_size=128, num_attention_heads=3)
  with pytest.raises(ValueError, match=r"heads\.json.*'hidden_size' \(128\).*'num_attention_heads' "
                     r"\(3\)"):
    modeling.BertConfig.from_dict(values, source="heads.json")
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(values))
  with pytest.raises(ValueError, match=r"bert_config\.json.*hidden_size.*num_attention_heads"):
    modeling.BertConfig.from_json_file(str(path))


def test_missing_vocab_size_and_bad_file(tmp_path):
  with pytest.raises(ValueError, match="vocab_size"):
    modeling.BertConfig.from_dict({"hidden_size": 64})
  with pytest.raises(ValueError, match="not found.*missing.json"):
    modeling.BertConfig.from_json_file(str(tmp_path / "missing.json"))
  bad = tmp_path / "bad.json"
  bad.write_text("{not json")
  with pytest.raises(ValueError, match="bad.json.*JSON"):
    modeling.BertConfig.from_json_file(str(bad))


def test_unknown_keys_warn(tmp_path, caplog):
  path = tmp_path / "multilingual_config.json"
  path.write_text(json.dumps(dict(SIZES, directionality="bidi", pooler_fc_size=768)))
  with caplog.at_level(logging.WARNING):
    config = modeling.BertConfig.from_json_file(str(path))
  assert config.hidden_size == 64
  warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
  assert any("directionality" in w and "pooler_fc_size" in w and "multilingual_config.json" in w
             for w in warnings), warnings


def test_sequence_longer_than_positions_is_refused(graph):
  config = helpers.tiny_config(max_position_embeddings=8)
  with pytest.raises(ValueError, match="max_position_embeddings"):
    modeling.BertModel(config, is_training=False, input_ids=tf.zeros([2, 9], tf.int32))


def test_one_hot_embeddings_equal_gather():
  config = helpers.tiny_config()
  ids = np.random.RandomState(8).randint(0, 99, size=(3, 6)).astype(np.int32)
  results = []
  for one_hot in (False, True):
    with tf.Graph().as_default():
      _tf1.set_random_seed(1)
      model = modeling.BertModel(config, is_training=False, input_ids=tf.constant(ids),
                                 use_one_hot_embeddings=one_hot)
      with _tf1.Session() as sess:
        sess.run(_tf1.global_variables_initializer())
        results.append(sess.run(model.get_sequence_output()))
  np.testing.assert_allclose(results[0], results[1], atol=1e-5)


def test_gather_indexes(graph):
  sequence = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)
  positions = np.array([[0, 3], [2, 1]], np.int32)
  with _tf1.Session() as sess:
    got = sess.run(run_pretraining.gather_indexes(tf.constant(sequence), tf.constant(positions)))
  expected = np.stack([sequence[0, 0], sequence[0, 3], sequence[1, 2], sequence[1, 1]])
  np.testing.assert_array_equal(got, expected)


def test_softmax_cross_entropy_value_and_gradient_match_numpy(graph):
  rng = np.random.RandomState(9)
  logits = (rng.normal(size=(6, 50)) * 4).astype(np.float32)
  logits[0, :] = 0.0                           # uniform row
  logits[1, 3] = 6e4                           # one huge logit (fp16-sized)
  logits[2, :] = -3e4                          # large negative everywhere
  labels = rng.randint(0, 50, size=6).astype(np.int32)
  labels[1] = 7                                # a label far below the huge logit
  weights = rng.uniform(0.5, 2.0, size=6).astype(np.float32)
  logits_t = tf.constant(logits)
  loss = run_pretraining.softmax_cross_entropy(logits_t, tf.constant(labels))
  grad = tf.gradients(tf.reduce_sum(loss * weights), logits_t)[0]
  with _tf1.Session() as sess:
    got_loss, got_grad = sess.run([loss, grad])
  x = logits.astype(np.float64)
  log_probs = numpy_bert.log_softmax(x)
  expected_loss = -log_probs[np.arange(6), labels]
  expected_grad = np.exp(log_probs) * weights[:, None]
  expected_grad[np.arange(6), labels] -= weights
  np.testing.assert_allclose(got_loss, expected_loss, rtol=1e-6, atol=1e-5)
  np.testing.assert_allclose(got_grad, expected_grad, atol=1e-6)
  assert np.isfinite(got_loss).all() and got_loss[1] > 5e4


@pytest.mark.parametrize("key,value,expected", [
    ("hidden_act", ["gelu"], "activation name"),
    ("hidden_act", 3, "activation name"),
    ("hidden_act", {"name": "relu"}, "activation name"),
    ("initializer_range", float("inf"), "finite positive"),
    ("initializer_range", float("nan"), "finite positive"),
    ("hidden_dropout_prob", float("nan"), r"\[0, 1\)"),
    ("num_hidden_layers", 2 ** 31, "up to 2147483647"),
    ("vocab_size", 10 ** 40, "up to 2147483647"),
    ("intermediate_size", True, "positive integer"),
])
def test_config_value_of_a_wrong_type_or_range_is_refused(key, value, expected, tmp_path):
  # A list or a number as the activation was taken as the activation itself (and failed deep in
  # the graph); an infinite initializer range or a size beyond int32 was accepted.
  values = dict(SIZES, **{key: value})
  with pytest.raises(ValueError, match=r"typed\.json: bert config: '%s'.*%s" % (key, expected)):
    modeling.BertConfig.from_dict(values, source="typed.json")
  path = tmp_path / "typed.json"
  path.write_text(json.dumps(values))
  with pytest.raises(ValueError, match=r"typed\.json: .*'%s'" % key) as error:
    modeling.BertConfig.from_json_file(str(path))
  assert "\n" not in str(error.value) and len(str(error.value)) - len(str(path)) < 150


def test_null_activation_is_linear_as_in_the_release():
  config = modeling.BertConfig.from_dict(dict(SIZES, hidden_act=None))
  assert config.hidden_act is None and modeling.get_activation(config.hidden_act) is None


@pytest.mark.parametrize("content,expected", [
    (b'{"vocab_size": 100, "hidden_act": "\xff"}', "not UTF-8 text at byte 35"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
])
def test_config_file_that_is_no_json_text_names_the_file(content, expected, tmp_path):
  path = tmp_path / "binary_config.json"
  path.write_bytes(content)
  with pytest.raises(ValueError, match=r"binary_config\.json: .*%s" % expected):
    modeling.BertConfig.from_json_file(str(path))


def test_config_path_that_is_a_directory_names_it(tmp_path):
  with pytest.raises(ValueError, match="%s: cannot read" % tmp_path):
    modeling.BertConfig.from_json_file(str(tmp_path))


@pytest.mark.parametrize("compute_type,activations,products,compiled,scaled", [
    (tf.float32, tf.float32, tf.float32, False, False),
    (tf.float16, tf.float16, tf.float16, False, True),
    (tf.bfloat16, tf.float32, tf.bfloat16, True, False)], ids=["fp32", "fp16", "bf16"])
def test_compute_precision_of_each_compute_type(compute_type, activations, products, compiled,
                                                scaled):
  precision = modeling.ComputePrecision.of(compute_type)
  assert (precision.activations, precision.products) == (activations, products)
  assert precision.compiled_blocks is compiled
  assert precision.needs_loss_scaling is scaled
  # GELU runs in a compiled kernel between bf16 products; another activation never does.
  assert precision.fuses_activation(modeling.gelu) is compiled
  assert not precision.fuses_activation(tf.nn.relu)
  assert modeling.ComputePrecision.of(compute_type.name) is precision
  with pytest.raises(dataclasses.FrozenInstanceError):
    precision.products = tf.float32


def test_compute_precision_refuses_another_compute_type(graph):
  message = "compute_type must be tf.float32, tf.float16 or tf.bfloat16, got <dtype: 'float64'>"
  with pytest.raises(ValueError, match=message):
    modeling.ComputePrecision.of(tf.float64)
  ids = tf.zeros([1, 2], tf.int32)
  with pytest.raises(ValueError, match=message):
    modeling.BertModel(helpers.tiny_config(), is_training=False, input_ids=ids,
                       compute_type=tf.float64)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
def test_without_a_precision_the_layers_compute_in_their_input_type_and_heads_in_fp32(graph,
                                                                                       dtype):
  # What attention_layer, transformer_model and dense_layer use when the release calls them.
  precision = modeling.ComputePrecision.of_tensor(tf.zeros([2, 3], dtype))
  assert (precision.activations, precision.products) == (dtype, dtype)
  assert not precision.compiled_blocks
  if dtype != tf.bfloat16:
    assert precision == modeling.ComputePrecision.of(dtype)
  output = modeling.dense_layer(tf.zeros([2, 3], dtype), 4, name="dense")
  assert output.dtype == dtype
  assert modeling.ComputePrecision.HEADS == tf.float32
  assert modeling.ComputePrecision.to_heads(output).dtype == tf.float32
