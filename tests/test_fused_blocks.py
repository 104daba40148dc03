"""The compiled blocks between --bf16's products (fused_blocks.py): their dropout masks against a
numpy implementation of the counter hash, their values against float64 numpy, and their gradients
against TensorFlow's autodiff of the op-by-op fp32 formula given the same mask."""

import numpy as np
import pytest
import tensorflow as tf

import fused_blocks
import modeling
from tests import numpy_bert

_tf1 = tf.compat.v1
U = 2.0 ** -8  # bf16's unit roundoff
# The constants the model hands the blocks.
EPSILON, MASK_ADDER = modeling.LAYER_NORM_EPSILON, modeling.ATTENTION_MASK_ADDER


def _mix(v):
  """lowbias32 (Wellons's integer hash), written out on numpy uint32."""
  v = v ^ (v >> np.uint32(16))
  v = v * np.uint32(0x7FEB352D)
  v = v ^ (v >> np.uint32(15))
  v = v * np.uint32(0x846CA68B)
  return v ^ (v >> np.uint32(16))


def numpy_keep(shape, seed, rate):
  """Element i kept when mix(mix(i ^ s0) ^ s1) >= rate * 2^32, s = the seed words' low 32 bits."""
  s0, s1 = (np.uint32(int(word) & 0xFFFFFFFF) for word in seed)
  index = np.arange(int(np.prod(shape)), dtype=np.uint32)
  with np.errstate(over="ignore"):
    bits = _mix(_mix(index ^ s0) ^ s1)
  return (bits >= np.uint32(round(rate * 2**32))).reshape(shape)


def _run(fetches):
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    return sess.run(fetches)


def test_keep_mask_is_the_hash_and_keeps_one_minus_rate(graph):
  seed = (123456789012345, -987654321)
  shape = [64, 12, 40]
  got = _run(fused_blocks.keep_mask(shape, tf.constant(seed, tf.int64), 0.1))
  np.testing.assert_array_equal(got, numpy_keep(shape, seed, 0.1))
  # Kept with probability 0.9: within 5 standard deviations of a binomial count.
  n = got.size
  assert abs(got.sum() - 0.9 * n) < 5 * np.sqrt(n * 0.9 * 0.1)
  # Neighbouring elements are not correlated (a poor mixer keeps runs of its input's bits).
  flat = got.reshape(-1).astype(np.float64)
  assert abs(np.corrcoef(flat[:-1], flat[1:])[0, 1]) < 0.02
  # Another seed, another mask; the same seed, the same mask.
  other = numpy_keep(shape, (seed[0] + 1, seed[1]), 0.1)
  assert (other != got).mean() > 0.1
  np.testing.assert_array_equal(numpy_keep(shape, seed, 0.1), got)


def _numpy_residual_layer_norm(y, residual, gamma, beta, keep, rate):
  z = np.where(keep, y / (1.0 - rate), 0.0) + residual if rate else y + residual
  return numpy_bert.layer_norm(z, gamma, beta, epsilon=1e-12)


def _known_seed(monkeypatch, seed):
  """Training's per-run seed made `seed`, so that the test knows the hashed mask."""
  monkeypatch.setattr(fused_blocks, "_draw_seed", lambda: tf.constant(seed, tf.int64))


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_dropout_residual_layer_norm_values_and_gradients(graph, monkeypatch, rate):
  rng = np.random.RandomState(11)
  rows, hidden = 24, 48
  y = (rng.normal(size=(rows, hidden)) * 2.0).astype(np.float32)
  residual = rng.normal(size=(rows, hidden)).astype(np.float32)
  dout = rng.normal(size=(rows, hidden)).astype(np.float32)
  seed = (5, 7)
  _known_seed(monkeypatch, seed)
  y_bf16 = tf.cast(tf.constant(y), tf.bfloat16)
  residual_t = tf.constant(residual)
  out = fused_blocks.dropout_residual_layer_norm(y_bf16, residual_t, rate, EPSILON, name="ln")
  with _tf1.variable_scope("ln", reuse=True):
    gamma, beta = _tf1.get_variable("gamma"), _tf1.get_variable("beta")
  assign = [gamma.assign(rng.uniform(0.5, 1.5, hidden).astype(np.float32)),
            beta.assign(rng.normal(size=hidden).astype(np.float32))]
  grads = tf.gradients(out, [y_bf16, residual_t, gamma, beta], grad_ys=tf.constant(dout))
  assert out.dtype == tf.float32 and grads[0].dtype == tf.bfloat16
  # The reference: the op-by-op fp32 formula, autodiff, with the numpy mask as a constant.
  keep = numpy_keep([rows, hidden], seed, rate)
  y32 = tf.cast(y_bf16, tf.float32)
  dropped = tf.where(keep, y32 / (1.0 - rate), 0.0) if rate else y32
  z = dropped + residual_t
  mean = tf.reduce_mean(z, -1, keepdims=True)
  variance = tf.reduce_mean(tf.square(z - mean), -1, keepdims=True)
  reference = (z - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta
  reference_grads = tf.gradients(reference, [y32, residual_t, gamma, beta],
                                 grad_ys=tf.constant(dout))
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    sess.run(assign)
    got, got_grads, want_grads, y_seen, gamma_v, beta_v = sess.run(
        [out, [tf.cast(g, tf.float32) for g in grads], reference_grads,
         tf.cast(y_bf16, tf.float64), gamma, beta])
  want = _numpy_residual_layer_norm(y_seen, residual, gamma_v, beta_v, keep, rate)
  np.testing.assert_allclose(got, want, atol=1e-5)
  # dy is rounded to bf16 once (u relative); the others are fp32.
  np.testing.assert_allclose(got_grads[0], want_grads[0],
                             atol=U * np.abs(want_grads[0]).max())
  for got_grad, want_grad in zip(got_grads[1:], want_grads[1:]):
    np.testing.assert_allclose(got_grad, want_grad, atol=1e-5 * max(1.0, np.abs(want_grad).max()))
  if rate:  # the dropped elements get no gradient, and some were dropped
    assert (~keep).any() and not got_grads[0][~keep].any()


@pytest.mark.parametrize("rate, with_mask", [(0.0, True), (0.1, True), (0.1, False)])
def test_masked_softmax_dropout_values_and_gradients(graph, monkeypatch, rate, with_mask):
  rng = np.random.RandomState(12)
  batch, heads, seq = 2, 3, 16
  scores = (rng.normal(size=(batch, heads, seq, seq)) * 4.0).astype(np.float32)
  mask = (rng.uniform(size=(batch, seq, seq)) > 0.3).astype(np.float32)
  mask[..., 0] = 1.0  # every row attends somewhere
  dprobs = rng.normal(size=scores.shape).astype(np.float32)
  seed, scale = (3, 9), 0.25
  _known_seed(monkeypatch, seed)
  scores_bf16 = tf.cast(tf.constant(scores), tf.bfloat16)
  probs = fused_blocks.masked_softmax_dropout(
      scores_bf16, tf.constant(mask) if with_mask else None, scale, MASK_ADDER, rate)
  (dscores,) = tf.gradients(probs, [scores_bf16],
                            grad_ys=tf.cast(tf.constant(dprobs), tf.bfloat16))
  assert probs.dtype == dscores.dtype == tf.bfloat16
  keep = numpy_keep(list(scores.shape), seed, rate)
  s32 = tf.cast(scores_bf16, tf.float32)
  logits = s32 * scale + ((1.0 - mask[:, None]) * -10000.0 if with_mask else 0.0)
  reference = tf.nn.softmax(logits)
  if rate:
    reference = tf.where(keep, reference / (1.0 - rate), 0.0)
  (reference_grad,) = tf.gradients(
      reference, [s32], grad_ys=tf.cast(tf.cast(tf.constant(dprobs), tf.bfloat16), tf.float32))
  got, got_grad, want_grad, s_seen = _run([tf.cast(probs, tf.float64),
                                           tf.cast(dscores, tf.float64), reference_grad,
                                           tf.cast(scores_bf16, tf.float64)])
  want = numpy_bert.softmax(s_seen * scale + ((1.0 - mask[:, None]) * -10000.0
                                              if with_mask else 0.0))
  if rate:
    want = np.where(keep, want / (1.0 - rate), 0.0)
  # Probabilities rounded to bf16 once: u relative.
  np.testing.assert_array_less(np.abs(got - want), U * np.abs(want) + 1e-7)
  np.testing.assert_allclose(got_grad, want_grad, atol=U * np.abs(want_grad).max())
  if rate:
    assert (~keep).any() and not got[~keep].any()


def test_without_a_seed_each_run_draws_a_new_mask_and_with_one_the_same(graph):
  x = tf.cast(tf.ones([64, 32]), tf.bfloat16)
  residual = tf.zeros([64, 32])
  unseeded = fused_blocks.dropout_residual_layer_norm(x, residual, 0.5, EPSILON, name="a")
  seeded = fused_blocks.dropout_residual_layer_norm(x, residual, 0.5, EPSILON,
                                                    seed=tf.constant([1, 2]), name="b")
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    first, second = sess.run(unseeded), sess.run(unseeded)
    same_a, same_b = sess.run(seeded), sess.run(seeded)
  assert (first != second).mean() > 0.1
  np.testing.assert_array_equal(same_a, same_b)


def test_a_keyed_mask_is_the_one_fp32_dropout_draws_from_the_key(graph):
  # --deterministic_run: the blocks drop exactly what modeling.dropout drops in the fp32 graph
  # for the same site key, in the forward and the backward pass.
  key = modeling.dropout_site_key(tf.constant([17, 4], tf.int64), 3, 2)
  fp32_dropped = modeling.dropout(tf.ones([32, 48]), 0.1, seed=key)
  y = tf.cast(tf.ones([32, 48]), tf.bfloat16)
  out = fused_blocks.dropout_residual_layer_norm(y, tf.zeros([32, 48]), 0.1, EPSILON, seed=key)
  (dy,) = tf.gradients(out, [y], grad_ys=tf.random.normal([32, 48]))
  probs = fused_blocks.masked_softmax_dropout(tf.cast(tf.zeros([2, 3, 16, 16]), tf.bfloat16),
                                              None, 1.0, MASK_ADDER, 0.1, seed=key)
  fp32_probs = modeling.dropout(tf.fill([2, 3, 16, 16], 1.0 / 16), 0.1, seed=key)
  kept, got_dy, got_probs, want_probs = _run(
      [tf.not_equal(fp32_dropped, 0.0), tf.cast(dy, tf.float32), tf.cast(probs, tf.float32),
       fp32_probs])
  assert (~kept).sum() > 20  # some were dropped
  assert not got_dy[~kept].any() and got_dy[kept].all()
  np.testing.assert_array_equal(got_probs == 0.0, want_probs == 0.0)
  np.testing.assert_allclose(got_probs, want_probs, rtol=U)
