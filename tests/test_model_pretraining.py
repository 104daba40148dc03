"""utils/model/pretraining.py: the masked LM and next-sentence heads, their weighted losses,
log-probs and streaming metrics, each run on small inputs and checked against float64 numpy."""

import numpy as np
import tensorflow as tf

import modeling
from tests import helpers
from tests import numpy_bert
from utils.model import heads
from utils.model import pretraining

_tf1 = tf.compat.v1
MLM_VARIABLES = {
    "cls/predictions/transform/dense/kernel": [8, 8],
    "cls/predictions/transform/dense/bias": [8],
    "cls/predictions/transform/LayerNorm/beta": [8],
    "cls/predictions/transform/LayerNorm/gamma": [8],
    "cls/predictions/output_bias": [11],
}


def test_gather_indexes_keeps_dtype_and_takes_any_positions(graph):
  sequence = np.arange(3 * 5 * 2, dtype=np.float32).reshape(3, 5, 2)
  # Repeated and unordered positions, given as int64: each row picks from its own sequence.
  positions = np.array([[4, 4, 0], [1, 3, 1], [0, 2, 4]], np.int64)
  expected = sequence[np.arange(3)[:, None], positions].reshape(9, 2)
  with _tf1.Session() as sess:
    for dtype in (tf.float32, tf.float16, tf.bfloat16):
      gathered = pretraining.gather_indexes(tf.cast(tf.constant(sequence), dtype),
                                            tf.constant(positions))
      assert gathered.dtype == dtype
      np.testing.assert_array_equal(sess.run(tf.cast(gathered, tf.float32)), expected)


def test_softmax_cross_entropy_is_fp32_for_fp16_logits_and_int64_labels(graph):
  logits = (np.random.RandomState(0).normal(size=(4, 7)) * 3).astype(np.float16)
  labels = np.array([6, 0, 3, 3], np.int64)
  loss = pretraining.softmax_cross_entropy(tf.constant(logits), tf.constant(labels))
  assert loss.dtype == tf.float32
  with _tf1.Session() as sess:
    got = sess.run(loss)
  expected = -numpy_bert.log_softmax(logits.astype(np.float64))[np.arange(4), labels]
  np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_masked_lm_head_matches_numpy_with_fractional_weights(graph):
  config = helpers.tiny_config(vocab_size=11, hidden_size=8, num_attention_heads=2)
  rng = np.random.RandomState(1)
  sequence = rng.normal(size=(2, 5, 8)).astype(np.float32)
  table = rng.normal(size=(11, 8)).astype(np.float32)
  positions = np.array([[4, 0, 2], [1, 1, 3]], np.int32)
  label_ids = np.array([[3, 10, 0], [7, 2, 5]], np.int32)
  label_weights = np.array([[1.0, 0.5, 0.0], [1.0, 1.0, 0.25]], np.float32)
  loss, per_example, log_probs = pretraining.get_masked_lm_output(
      config, tf.constant(sequence), tf.constant(table), tf.constant(positions),
      tf.constant(label_ids), tf.constant(label_weights))
  assert {v.op.name: v.shape.as_list() for v in _tf1.global_variables()} == MLM_VARIABLES
  assert loss.dtype == per_example.dtype == log_probs.dtype == tf.float32
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    w = helpers.randomize_variables(sess, _tf1.global_variables(), rng)
    got_loss, got_per_example, got_log_probs = sess.run([loss, per_example, log_probs])

  w = {name: value.astype(np.float64) for name, value in w.items()}
  p = "cls/predictions/transform/"
  x = sequence.astype(np.float64)[np.arange(2)[:, None], positions].reshape(6, 8)
  x = numpy_bert.gelu(x @ w[p + "dense/kernel"] + w[p + "dense/bias"])
  x = numpy_bert.layer_norm(x, w[p + "LayerNorm/gamma"], w[p + "LayerNorm/beta"])
  expected_log_probs = numpy_bert.log_softmax(x @ table.T + w["cls/predictions/output_bias"])
  expected_per_example = -expected_log_probs[np.arange(6), label_ids.reshape(-1)]
  weights = label_weights.reshape(-1).astype(np.float64)
  expected_loss = (weights * expected_per_example).sum() / (weights.sum() + 1e-5)
  np.testing.assert_allclose(got_log_probs, expected_log_probs, atol=1e-5)
  np.testing.assert_allclose(got_per_example, expected_per_example, atol=1e-5)
  np.testing.assert_allclose(got_loss, expected_loss, rtol=1e-5)


def test_masked_lm_loss_of_an_all_padding_batch_is_zero(graph):
  config = helpers.tiny_config(vocab_size=11, hidden_size=8, num_attention_heads=2)
  rng = np.random.RandomState(2)
  loss, per_example, _ = pretraining.get_masked_lm_output(
      config, tf.constant(rng.normal(size=(2, 4, 8)), tf.float32),
      tf.constant(rng.normal(size=(11, 8)), tf.float32), tf.zeros([2, 3], tf.int32),
      tf.ones([2, 3], tf.int32), tf.zeros([2, 3], tf.float32))
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    got_loss, got_per_example = sess.run([loss, per_example])
  assert got_loss == 0.0
  assert np.isfinite(got_per_example).all() and (got_per_example > 0).all()


def test_next_sentence_head_matches_numpy_for_both_label_shapes(graph):
  config = helpers.tiny_config(hidden_size=8, num_attention_heads=2)
  rng = np.random.RandomState(3)
  pooled = rng.normal(size=(3, 8)).astype(np.float32)
  labels = np.array([0, 1, 1], np.int32)
  outputs = [pretraining.get_next_sentence_output(config, tf.constant(pooled),
                                                  tf.constant(labels))]
  with _tf1.variable_scope(_tf1.get_variable_scope(), reuse=True):
    outputs.append(pretraining.get_next_sentence_output(
        config, tf.constant(pooled.astype(np.float16)), tf.constant(labels[:, None])))
  assert {v.op.name: v.shape.as_list() for v in _tf1.global_variables()} == {
      "cls/seq_relationship/output_weights": [2, 8], "cls/seq_relationship/output_bias": [2]}
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    w = helpers.randomize_variables(sess, _tf1.global_variables(), rng)
    got = sess.run(outputs)
  for inputs, (loss, per_example, log_probs) in zip((pooled, pooled.astype(np.float16)), got):
    logits = (inputs.astype(np.float64) @ w["cls/seq_relationship/output_weights"].T
              + w["cls/seq_relationship/output_bias"])
    expected_log_probs = numpy_bert.log_softmax(logits)
    expected_per_example = -expected_log_probs[np.arange(3), labels]
    assert log_probs.dtype == per_example.dtype == np.float32
    np.testing.assert_allclose(log_probs, expected_log_probs, atol=1e-5)
    np.testing.assert_allclose(per_example, expected_per_example, atol=1e-5)
    np.testing.assert_allclose(loss, expected_per_example.mean(), atol=1e-5)


def test_metric_fn_streams_weighted_mlm_and_plain_nsp_metrics(graph):
  rng = np.random.RandomState(4)
  feeds = {name: _tf1.placeholder(dtype, shape) for name, dtype, shape in [
      ("mlm_loss", tf.float32, [None]), ("mlm_log_probs", tf.float32, [None, 5]),
      ("mlm_ids", tf.int32, [None, 3]), ("mlm_weights", tf.float32, [None, 3]),
      ("nsp_loss", tf.float32, [None]), ("nsp_log_probs", tf.float32, [None, 2]),
      ("nsp_labels", tf.int32, [None, 1])]}
  metrics = pretraining.metric_fn(*[feeds[name] for name in (
      "mlm_loss", "mlm_log_probs", "mlm_ids", "mlm_weights", "nsp_loss", "nsp_log_probs",
      "nsp_labels")])
  batches = []
  for batch_size in (2, 3):
    log_probs = numpy_bert.log_softmax(rng.normal(size=(batch_size * 3, 5)))
    ids = rng.randint(0, 5, size=(batch_size, 3))
    ids.reshape(-1)[::2] = log_probs.argmax(axis=-1)[::2]  # some predictions right
    nsp_log_probs = numpy_bert.log_softmax(rng.normal(size=(batch_size, 2)))
    batches.append({
        "mlm_loss": rng.uniform(1, 3, size=batch_size * 3), "mlm_log_probs": log_probs,
        "mlm_ids": ids, "mlm_weights": rng.choice([0.0, 0.5, 1.0], size=(batch_size, 3)),
        "nsp_loss": rng.uniform(0, 1, size=batch_size), "nsp_log_probs": nsp_log_probs,
        "nsp_labels": rng.randint(0, 2, size=(batch_size, 1))})
  with _tf1.Session() as sess:
    sess.run(_tf1.local_variables_initializer())
    for batch in batches:
      sess.run({k: update for k, (_, update) in metrics.items()},
               {feeds[name]: value for name, value in batch.items()})
    got = sess.run({k: value for k, (value, _) in metrics.items()})

  def joined(name):
    return np.concatenate([batch[name].reshape(len(batch[name]), -1) for batch in batches])

  weights = joined("mlm_weights").reshape(-1)
  mlm_right = joined("mlm_log_probs").argmax(axis=-1) == joined("mlm_ids").reshape(-1)
  nsp_right = joined("nsp_log_probs").argmax(axis=-1) == joined("nsp_labels").reshape(-1)
  assert set(got) == {"masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                      "next_sentence_loss"}
  np.testing.assert_allclose(got["masked_lm_accuracy"],
                             (weights * mlm_right).sum() / weights.sum(), rtol=1e-6)
  np.testing.assert_allclose(got["masked_lm_loss"],
                             (weights * joined("mlm_loss").reshape(-1)).sum() / weights.sum(),
                             rtol=1e-6)
  np.testing.assert_allclose(got["next_sentence_accuracy"], nsp_right.mean(), rtol=1e-6)
  np.testing.assert_allclose(got["next_sentence_loss"], joined("nsp_loss").mean(), rtol=1e-6)


def test_pretraining_head_sums_the_losses_and_names_them(graph):
  config = helpers.tiny_config(num_hidden_layers=1, vocab_size=13, hidden_size=8,
                               num_attention_heads=2, intermediate_size=10)
  batch = helpers.random_batch(np.random.RandomState(5), 2, 6, config.vocab_size, 3)
  features = helpers.constant_features(batch)
  model = modeling.BertModel(config, is_training=False, input_ids=features["input_ids"],
                             input_mask=features["input_mask"],
                             token_type_ids=features["segment_ids"])
  out = pretraining.pretraining_head(config)(model, features, tf.estimator.ModeKeys.TRAIN)
  assert isinstance(out, heads.HeadOutput)
  assert out.predictions is None and out.metric_fn is pretraining.metric_fn
  assert len(out.metric_args) == 7
  assert out.metric_args[2] is features["masked_lm_ids"]
  assert out.metric_args[6] is features["next_sentence_labels"]
  mlm_loss = graph.get_tensor_by_name("mlm_loss:0")
  nsp_loss = graph.get_tensor_by_name("nsp_loss:0")
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    helpers.randomize_variables(sess, _tf1.trainable_variables(), np.random.RandomState(6))
    w = {v.op.name: value for v, value in zip(_tf1.trainable_variables(),
                                              sess.run(_tf1.trainable_variables()))}
    got = sess.run({"loss": out.loss, "mlm": mlm_loss, "nsp": nsp_loss,
                    "args": out.metric_args, "sequence": model.get_sequence_output(),
                    "pooled": model.get_pooled_output()})
  # The heads on this encoder's outputs, in float64 numpy.
  expected = numpy_bert.pretraining_outputs(
      w, got["sequence"].astype(np.float64), got["pooled"].astype(np.float64),
      batch["masked_lm_positions"], batch["masked_lm_ids"], batch["masked_lm_weights"],
      batch["next_sentence_labels"])
  np.testing.assert_allclose(got["mlm"], expected["mlm_loss"], rtol=1e-5)
  np.testing.assert_allclose(got["nsp"], expected["nsp_loss"], rtol=1e-5)
  np.testing.assert_allclose(got["loss"], got["mlm"] + got["nsp"], rtol=1e-6)
  np.testing.assert_allclose(got["args"][0], expected["mlm_per_example"], atol=1e-5)
  np.testing.assert_allclose(got["args"][1], expected["mlm_log_probs"], atol=1e-5)
  np.testing.assert_allclose(got["args"][4], expected["nsp_per_example"], atol=1e-5)
  np.testing.assert_allclose(got["args"][5], expected["nsp_log_probs"], atol=1e-5)


def test_build_pretraining_model_outputs_fp32_of_the_documented_shapes(graph):
  config = helpers.tiny_config(num_hidden_layers=1, vocab_size=13, hidden_size=8,
                               num_attention_heads=2, intermediate_size=10)
  batch = helpers.random_batch(np.random.RandomState(7), 2, 6, config.vocab_size, 3)
  built = pretraining.build_pretraining_model(config, helpers.constant_features(batch),
                                              is_training=True, compute_type=tf.float16)
  assert isinstance(built["model"], modeling.BertModel)
  shapes = {"total_loss": [], "mlm_loss": [], "nsp_loss": [], "mlm_per_example_loss": [6],
            "mlm_log_probs": [6, 13], "nsp_per_example_loss": [2], "nsp_log_probs": [2, 2]}
  assert set(built) == set(shapes) | {"model"}
  for name, shape in shapes.items():
    assert built[name].dtype == tf.float32, name
    assert built[name].shape.as_list() == shape, name
