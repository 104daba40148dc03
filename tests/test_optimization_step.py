"""optimization.create_optimizer's training step on a small model (helpers.softmax_regression_loss):
the first LAMB update, accumulation against one big batch with clipping, the global norm, the
accumulators, dynamic loss scaling with skipped updates.

Expected numbers come from numpy code written here and in test_optimization.py, never from the
code under test.
"""

import numpy as np
import pytest
import tensorflow as tf

import optimization
from tests import helpers
from tests.test_optimization import np_lamb_step

_tf1 = tf.compat.v1


def _train(batches, micro_batch, num_accumulation_steps, optimizer_type, lr=0.05,
           loss_multiplier=1.0, **kwargs):
  """Runs create_optimizer over `batches` (list of dicts), feeding `micro_batch` rows at a time.

  Returns (weights dict, per-run records of step_update / update_step / local_step / lr).
  """
  with tf.Graph().as_default():
    ids = _tf1.placeholder(tf.int32, [None])
    x = _tf1.placeholder(tf.float32, [None, 5])
    y = _tf1.placeholder(tf.int32, [None])
    loss = helpers.softmax_regression_loss({"ids": ids, "x": x}, y) * loss_multiplier
    train_op = optimization.create_optimizer(
        loss, lr, num_train_steps=50, num_warmup_steps=0, optimizer_type=optimizer_type,
        num_accumulation_steps=num_accumulation_steps, **kwargs)
    graph = _tf1.get_default_graph()
    fetch = {"step": graph.get_tensor_by_name("step_update:0"),
             "lr": graph.get_tensor_by_name("learning_rate:0"),
             "norm": graph.get_tensor_by_name("global_norm:0")}
    if num_accumulation_steps > 1:
      fetch["update"] = graph.get_tensor_by_name("update_step:0")
      fetch["local_step"] = helpers.variable("local_step")
    records = []
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      for batch in batches:
        for start in range(0, len(batch["y"]), micro_batch):
          rows = slice(start, start + micro_batch)
          _, record = sess.run([train_op, fetch], {ids: batch["ids"][rows], x: batch["x"][rows],
                                                   y: batch["y"][rows]})
          record["local_step_after"] = (sess.run(fetch["local_step"])
                                        if "local_step" in fetch else None)
          records.append(record)
      weights = {v.op.name: sess.run(v) for v in _tf1.global_variables()}
  return weights, records


def _initial_weights():
  """The initial values of helpers.softmax_regression_loss's variables (the same in every graph:
  its initialisers are constants), by variable name."""
  with tf.Graph().as_default():
    batch = helpers.softmax_regression_data(np.random.RandomState(0), 1)
    helpers.softmax_regression_loss({"ids": tf.constant(batch["ids"]),
                                     "x": tf.constant(batch["x"])}, tf.constant(batch["y"]))
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      return {v.op.name: sess.run(v) for v in _tf1.global_variables()}


def _np_model_grads(weights, batch):
  """Gradients of the mean softmax cross-entropy of helpers.softmax_regression_loss, in numpy (float64)."""
  table, kernel, bias = (weights["emb/table"].astype(np.float64),
                         weights["dense/kernel"].astype(np.float64),
                         weights["dense/bias"].astype(np.float64))
  n = len(batch["y"])
  x = np.concatenate([table[batch["ids"]], batch["x"].astype(np.float64)], axis=1)
  logits = x @ kernel + bias
  p = np.exp(logits - logits.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  dlogits = p.copy()
  dlogits[np.arange(n), batch["y"]] -= 1.0
  dlogits /= n
  g_kernel = x.T @ dlogits
  g_bias = dlogits.sum(0)
  g_x = dlogits @ kernel.T
  g_table = np.zeros_like(table)
  np.add.at(g_table, batch["ids"], g_x[:, :4])
  return {"emb/table": g_table, "dense/kernel": g_kernel, "dense/bias": g_bias}


def test_first_lamb_update_uses_step_one_and_the_lr_of_step_zero():
  rng = np.random.RandomState(2)
  batch = helpers.softmax_regression_data(rng, 8)
  initial = _initial_weights()
  weights, records = _train([batch], 8, 1, "lamb", lr=0.05)

  # numpy: clip by global norm 1.0, then LAMB with t = 1 and the LR of step 0 (= 0.05, no warmup).
  grads = _np_model_grads(initial, batch)
  norm = np.sqrt(sum(np.sum(g * g) for g in grads.values()))
  assert norm > 1.0  # the clip is active
  for name, g in grads.items():
    expected, _, _ = np_lamb_step(initial[name].astype(np.float64), g / norm, 0, 0, 1, 0.05,
                                  0.01, decay=(name != "dense/bias"))
    # The first Adam-type step divides each element by its own magnitude, so elements whose
    # gradient is near epsilon amplify fp32 rounding; a wrong LR or step would be off by ~1e-2.
    np.testing.assert_allclose(weights[name], expected, rtol=2e-5, atol=5e-5, err_msg=name)
  assert records[0]["step"] == 1 and weights["global_step"] == 1
  np.testing.assert_allclose(records[0]["lr"], 0.05)
  assert all(np.all(np.isfinite(v)) for v in weights.values())


# Adam-type directions ignore the gradient's scale while |g| >> epsilon; a loss multiplied by 1e-7
# puts |g| below epsilon (updates ~ g / epsilon), where a missing 1/N would show.
@pytest.mark.parametrize("optimizer_type,loss_multiplier", [
    ("lamb", 1.0), ("adam", 1.0), ("lamb", 1e-7), ("adam", 1e-7)])
def test_accumulation_equals_one_big_batch_with_clipping(optimizer_type, loss_multiplier):
  rng = np.random.RandomState(3)
  batches = [helpers.softmax_regression_data(rng, 8) for _ in range(3)]
  big, _ = _train(batches, 8, 1, optimizer_type, loss_multiplier=loss_multiplier)
  accumulated, records = _train(batches, 2, 4, optimizer_type, loss_multiplier=loss_multiplier)
  for name in ("emb/table", "dense/kernel", "dense/bias"):
    np.testing.assert_allclose(accumulated[name], big[name], rtol=1e-5, atol=1e-6, err_msg=name)
  assert big["global_step"] == 3 and accumulated["global_step"] == 3
  assert [r["local_step_after"] for r in records] == [1, 2, 3, 0] * 3
  assert [bool(r["update"]) for r in records] == [False, False, False, True] * 3
  assert [int(r["step"]) for r in records] == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
  # The clip was active on the first update (numpy gradient norm of the first batch > 1).
  initial = _initial_weights()
  grads = _np_model_grads(initial, batches[0])
  if loss_multiplier == 1.0:
    assert np.sqrt(sum(np.sum(g * g) for g in grads.values())) > 1.0
  # The embedding (tf.gather, IndexedSlices gradient) was trained through the accumulators.
  assert not np.allclose(accumulated["emb/table"], initial["emb/table"])
  assert accumulated["emb/table/accum"].shape == (7, 4)


@pytest.mark.parametrize("micro_batch,num_accumulation_steps", [(8, 1), (2, 4)])
def test_global_norm_is_the_unclipped_norm_of_the_update(micro_batch, num_accumulation_steps):
  rng = np.random.RandomState(7)
  batch = helpers.softmax_regression_data(rng, 8)
  initial = _initial_weights()
  _, records = _train([batch], micro_batch, num_accumulation_steps, "lamb")
  grads = _np_model_grads(initial, batch)
  expected = np.sqrt(sum(np.sum(g * g) for g in grads.values()))
  assert expected > 1.0  # clipping is active: the logged norm is the one before it
  np.testing.assert_allclose(records[-1]["norm"], expected, rtol=1e-5)
  # Micro-steps that apply no update have no norm.
  assert all(np.isnan(r["norm"]) for r in records[:-1])
  assert len(records) == num_accumulation_steps


def test_accumulators_hold_the_big_batch_gradient():
  rng = np.random.RandomState(4)
  batch = helpers.softmax_regression_data(rng, 8)
  initial = _initial_weights()
  weights, _ = _train([batch], 2, 4, "lamb")
  # After one cycle of 4 micro-batches of 2, each accumulator holds the gradient of the mean loss
  # over all 8 rows (each micro-step contributes its mean gradient / 4).
  for name, grad in _np_model_grads(initial, batch).items():
    np.testing.assert_allclose(weights[name + "/accum"], grad, rtol=1e-5, atol=1e-6, err_msg=name)


def test_dynamic_loss_scale_sequence_and_skipped_updates():
  # increment period 2, start 4: finite, finite, finite, inf, finite, nan, finite, finite.
  feeds = [1.0, 1.0, 1.0, np.inf, 1.0, np.nan, 1.0, 1.0]
  with tf.Graph().as_default():
    w = _tf1.get_variable("dense/kernel", initializer=tf.constant([0.5, -0.5]))
    x = _tf1.placeholder(tf.float32, [])
    loss = tf.reduce_sum(w * x) + tf.reduce_sum(w * w)
    train_op = optimization.create_optimizer(
        loss, 0.1, 100, 0, manual_fp16=True, init_loss_scale=4, optimizer_type="lamb",
        loss_scale_increment_period=2)
    graph = _tf1.get_default_graph()
    scale_used = graph.get_tensor_by_name("loss_scale:0")
    norm = graph.get_tensor_by_name("global_norm:0")
    skipped = graph.get_tensor_by_name("skipped_updates:0")
    step = helpers.variable("global_step")
    counter = helpers.variable("skipped_update_count")
    assert counter.dtype.base_dtype == tf.int64 and counter not in _tf1.trainable_variables()
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      scales, used, changed, steps, norms, skips = [], [], [], [], [], []
      for value in feeds:
        before = sess.run(w)
        _, s_used, norm_value, skipped_value = sess.run([train_op, scale_used, norm, skipped],
                                                        {x: value})
        after = sess.run(w)
        used.append(s_used)
        skips.append(skipped_value)
        # d loss / d w = x + 2 w, unscaled: the loss scale (4 to 8 here) must not show.
        if np.isfinite(value):
          np.testing.assert_allclose(norm_value, np.linalg.norm(value + 2.0 * before), rtol=1e-6)
        else:
          assert not np.isfinite(norm_value)
        scales.append(sess.run(helpers.variable("current_loss_scale")))
        changed.append(not np.array_equal(before, after))
        steps.append(sess.run(step))
        assert np.all(np.isfinite(after))
  assert scales == [4, 8, 8, 4, 4, 2, 2, 4]
  assert used == [4, 4, 8, 8, 4, 4, 2, 2]
  assert changed == [True, True, True, False, True, False, True, True]
  assert steps == [1, 2, 3, 3, 4, 4, 5, 6]
  assert skips == [0, 0, 0, 1, 1, 2, 2, 2]
