"""utils/model/heads.py: the fields of `HeadOutput`, and the fp32 casts and log-softmax every head
computes its logits and losses with, checked against float64 numpy."""

import numpy as np
import pytest
import tensorflow as tf

from utils.model import heads

_tf1 = tf.compat.v1


def _log_softmax(logits):
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def test_head_output_has_the_four_documented_fields_in_order():
  assert heads.HeadOutput._fields == ("loss", "predictions", "metric_fn", "metric_args")
  out = heads.HeadOutput(1.5, None, len, [[1, 2]])
  assert out.loss == 1.5 and out.predictions is None
  assert out.metric_fn(*out.metric_args) == 2


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_encoder_output_fp32_casts_without_changing_values(graph, dtype):
  # Values every one of these types holds exactly.
  values = np.array([[0.5, -3.25, 1024.0], [0.0, 7.0, -0.125]])
  cast = heads.encoder_output_fp32(tf.constant(values, dtype))
  assert cast.dtype == tf.float32
  assert cast.shape.as_list() == [2, 3]
  with _tf1.Session() as sess:
    np.testing.assert_array_equal(sess.run(cast), values.astype(np.float32))


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32])
def test_log_probabilities_is_an_fp32_log_softmax_over_the_last_axis(graph, dtype):
  logits = np.random.RandomState(0).normal(size=(2, 3, 5)) * 4
  logits_t = tf.constant(logits, dtype)
  log_probs = heads.log_probabilities(logits_t)
  assert log_probs.dtype == tf.float32
  with _tf1.Session() as sess:
    rounded, got = sess.run([tf.cast(logits_t, tf.float64), log_probs])
  # The log-softmax of the logits as given (rounded to `dtype`), along the last axis only.
  np.testing.assert_allclose(got, _log_softmax(rounded), atol=2e-6)
  np.testing.assert_allclose(np.exp(got).sum(axis=-1), np.ones((2, 3)), rtol=1e-6)


def test_log_probabilities_of_huge_logits_are_finite_and_exact(graph):
  logits = np.array([[3e4, 0.0, -3e4], [6e4, 6e4, 6e4]], np.float32)
  with _tf1.Session() as sess:
    got = sess.run(heads.log_probabilities(tf.constant(logits, tf.float16)))
  assert np.isfinite(got).all()
  np.testing.assert_allclose(got[0], [0.0, -3e4, -6e4], rtol=1e-6)
  np.testing.assert_allclose(got[1], np.full(3, -np.log(3.0)), rtol=1e-6)
