"""fused_layer_norm.py: fp16 layer norm with fp32 parameters, against float64 numpy, and its
gradient in fp16."""

import numpy as np
import tensorflow as tf

import fused_layer_norm
from tests import helpers
from tests import numpy_bert

_tf1 = tf.compat.v1


def test_fused_layer_norm_matches_numpy(graph):
  rng = np.random.RandomState(3)
  x = (rng.normal(size=(6, 5, 48)) * 3.0 + 1.5).astype(np.float16)
  out = fused_layer_norm.fused_layer_norm(tf.constant(x))
  assert out.dtype == tf.float16 and out.shape.as_list() == [6, 5, 48]
  gamma = helpers.variable("LayerNorm/gamma")
  beta = helpers.variable("LayerNorm/beta")
  assert gamma.dtype.base_dtype == tf.float32 and beta.dtype.base_dtype == tf.float32
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    gamma_value = rng.normal(size=48).astype(np.float32) + 1.0
    beta_value = rng.normal(size=48).astype(np.float32)
    gamma.load(gamma_value, sess)
    beta.load(beta_value, sess)
    got = sess.run(out).astype(np.float64)
  expected = numpy_bert.layer_norm(x.astype(np.float64), gamma_value, beta_value, epsilon=1e-5)
  np.testing.assert_allclose(got, expected, atol=1e-2)


def test_fused_layer_norm_backprop_runs_in_fp16(graph):
  x = tf.constant(np.random.RandomState(4).normal(size=(4, 16)).astype(np.float16))
  out = fused_layer_norm.fused_layer_norm(x)
  grads = tf.gradients(tf.reduce_sum(tf.cast(out, tf.float32) ** 2), [x] + _tf1.trainable_variables())
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    values = sess.run(grads)
  assert values[0].dtype == np.float16
  assert all(np.all(np.isfinite(v)) for v in values)
