"""--manual_fp16 end to end in the graph: fp32 master weights, fp16 encoder matmuls, stable heads
(the fused layer norm: tests/test_fused_layer_norm.py; the getter: tests/test_gpu_environment.py).

These run on the CPU (TF has fp16 CPU kernels, slow, so the shapes are tiny); they never skip.
"""

import numpy as np
import tensorflow as tf

import modeling
import run_pretraining
from tests import helpers

_tf1 = tf.compat.v1


def _build(config, batch, compute_type):
  return run_pretraining.build_pretraining_model(
      config, helpers.constant_features(batch), is_training=False, compute_type=compute_type)


def test_variables_fp32_and_encoder_matmuls_fp16(graph):
  config = helpers.tiny_config()
  batch = helpers.random_batch(np.random.RandomState(0), 2, 8, config.vocab_size, 3)
  built = _build(config, batch, tf.float16)

  assert all(v.dtype.base_dtype == tf.float32 for v in _tf1.global_variables())
  encoder_matmuls = [op for op in graph.get_operations()
                     if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3")
                     and op.name.startswith("bert/encoder/")]
  # Per layer: q/k/v (one fused matmul), scores, context, attention output, intermediate,
  # output = 6.
  assert len(encoder_matmuls) == 6 * config.num_hidden_layers
  fused_qkv = [op for op in encoder_matmuls
               if op.outputs[0].shape.as_list()[-1] == 3 * config.hidden_size]
  assert len(fused_qkv) == config.num_hidden_layers
  for op in encoder_matmuls:
    dtype = op.get_attr("T") if op.type != "BatchMatMulV3" else op.get_attr("Ta")
    assert dtype == tf.float16, op.name
  # The GELU of the intermediate layer is evaluated in fp32.
  tanh_ops = [op for op in graph.get_operations()
              if op.type == "Tanh" and "/intermediate/" in op.name]
  assert tanh_ops and all(op.get_attr("T") == tf.float32 for op in tanh_ops)
  # The encoder's layer norms go through the fused kernel.
  fused = [op for op in graph.get_operations() if op.type.startswith("FusedBatchNorm")
           and op.name.startswith("bert/encoder/")]
  assert len(fused) == 2 * config.num_hidden_layers
  # The heads and their losses are fp32.
  assert built["mlm_log_probs"].dtype == tf.float32
  assert built["total_loss"].dtype == tf.float32
  assert built["model"].get_sequence_output().dtype == tf.float16


def test_fp16_outputs_close_to_fp32_on_same_weights(tmp_path):
  config = helpers.tiny_config()
  batch = helpers.random_batch(np.random.RandomState(1), 2, 8, config.vocab_size, 3)
  _, results = helpers.outputs_in_two_precisions(_build, config, batch, tf.float16,
                                                 str(tmp_path / "model.ckpt"))
  fp32, fp16 = results[tf.float32], results[tf.float16]
  for key in fp32:
    np.testing.assert_allclose(fp16[key], fp32[key], atol=2e-2, err_msg=key)
  # The two paths really differ in precision (the fp16 graph is not secretly fp32).
  assert np.max(np.abs(fp16["sequence"] - fp32["sequence"])) > 1e-5


def _large_logit_losses(dtype):
  """NSP and MLM heads fed fp16/fp32 inputs that produce logits of magnitude ~6e4."""
  config = helpers.tiny_config(vocab_size=5, hidden_size=8, num_attention_heads=2)
  with tf.Graph().as_default():
    pooled = tf.constant(np.full((2, 8), 6.0e4), dtype)
    nsp_loss, _, nsp_log_probs = run_pretraining.get_next_sentence_output(
        config, pooled, tf.constant([[0], [1]]))
    sequence = tf.constant(np.random.RandomState(5).normal(size=(2, 4, 8)), dtype)
    table = tf.constant(np.random.RandomState(6).normal(size=(5, 8)), tf.float32)
    mlm_loss, _, mlm_log_probs = run_pretraining.get_masked_lm_output(
        config, sequence, table, tf.constant([[1, 2], [0, 3]]), tf.constant([[0, 1], [2, 4]]),
        tf.constant([[1.0, 1.0], [1.0, 0.0]]))
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      # NSP logits: 6e4 * (w0 - w1) summed over 8 features -> +-6e4 per unit weight gap.
      sess.run(_tf1.assign(helpers.variable("cls/seq_relationship/output_weights"),
                           np.array([[0.125] * 8, [-0.125] * 8], np.float32)))
      sess.run(_tf1.assign(helpers.variable("cls/predictions/output_bias"),
                           np.array([6e4, -6e4, 3e4, 0.0, -3e4], np.float32)))
      return sess.run([nsp_loss, nsp_log_probs, mlm_loss, mlm_log_probs])


def test_huge_fp16_logits_give_finite_exact_losses():
  nsp_loss, nsp_log_probs, mlm_loss, mlm_log_probs = _large_logit_losses(tf.float16)
  assert np.isfinite(nsp_loss) and np.isfinite(mlm_loss)
  assert np.all(np.isfinite(nsp_log_probs)) and np.all(np.isfinite(mlm_log_probs))
  # Logits are [6e4, -6e4] for both examples: label 0 costs ~0, label 1 costs 1.2e5.
  np.testing.assert_allclose(nsp_log_probs, [[0.0, -1.2e5], [0.0, -1.2e5]], rtol=1e-3)
  np.testing.assert_allclose(nsp_loss, 6e4, rtol=1e-3)
  # MLM: the bias dominates; labels 0, 1, 2 weighted -> (0 + 1.2e5 + 3e4) / 3.
  np.testing.assert_allclose(mlm_loss, (0.0 + 1.2e5 + 3e4) / 3, rtol=1e-3)
