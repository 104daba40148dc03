"""bf16 compute (--bf16): fp32 master variables and activations, bf16 encoder products, fp32
element-wise ops (dropout, residual sums, layer norm, softmax, GELU: compiled kernels between the
products, tests/test_fused_blocks.py), heads, losses and update;
its numerics against float64 numpy and against the fp32 graph.

Tolerances come from bf16's format: 8 significant bits (7 stored), so rounding one value to bf16
has a relative error of at most u = 2^-8 (round to nearest). A matmul with bf16 operands and fp32
accumulation rounds its two operands and its output, and the bias add after it (in bf16) rounds
once more: <= 4u relative per element (plus the fp32 sum, negligible). A value of the encoder
passes about 3 such products per sub-layer (projection, scores/context, output dense; the layer
norm after it renormalises and does not grow the error), so after L layers a layer-normalised
element (|x| <~ 4) carries <= 3 * 4u * L * 4 absolute error in the worst case; errors of
independent roundings mostly cancel, so the mean error is near u.

These build tiny models on the CPU (bf16 is emulated here, slow) and never skip.
"""

import types

import numpy as np
import pytest
import tensorflow as tf

import gpu_environment
import modeling
import optimization
import run_pretraining
from tests import helpers
from tests import numpy_bert
from utils.core import errors

_tf1 = tf.compat.v1
# bf16's unit roundoff: 8 significant bits.
U = 2.0 ** -8
MATMULS = ("MatMul", "BatchMatMulV2", "BatchMatMulV3")


def _build(config, batch, compute_type, is_training=False):
  return run_pretraining.build_pretraining_model(
      config, helpers.constant_features(batch), is_training=is_training,
      compute_type=compute_type)


def _matmul_dtype(op):
  return op.get_attr("T") if op.type != "BatchMatMulV3" else op.get_attr("Ta")


# The op types that may output bf16 in the encoder's forward pass: the products with their bias
# adds, the casts into and out of them, the reshapes between the projections and the attention
# products, and the compiled kernels between the products (bf16 in and out, fp32 inside). Every
# other element-wise op must stay fp32.
BF16_FORWARD_TYPES = {"Cast", "MatMul", "BatchMatMulV2", "BiasAdd", "IdentityN", "Reshape",
                      "Transpose", "Unpack", "PartitionedCall"}


def _outputs_bf16(op):
  return any(output.dtype == tf.bfloat16 for output in op.outputs)


@pytest.fixture(scope="module")
def bf16_training():
  """The bf16 pretraining graph of a tiny model with its LAMB update, built once and read by the
  tests below: a namespace of the graph, its config, `build_pretraining_model`'s dict, its ops,
  the forward ops and those of the encoder."""
  with tf.Graph().as_default() as graph:
    config = helpers.tiny_config()
    batch = helpers.random_batch(np.random.RandomState(0), 2, 8, config.vocab_size, 3)
    built = _build(config, batch, tf.bfloat16, is_training=True)
    optimization.create_optimizer(built["total_loss"], 1e-3, 10, 1, optimizer_type="lamb",
                                  bf16=True)
  ops = graph.get_operations()
  forward = [op for op in ops if not op.name.startswith("gradients")]
  encoder = [op for op in forward if op.name.startswith("bert/encoder/")]
  return types.SimpleNamespace(graph=graph, config=config, built=built, ops=ops, forward=forward,
                               encoder=encoder)


def test_bf16_variables_outputs_and_losses_fp32_without_a_loss_scale(bf16_training):
  variables = bf16_training.graph.get_collection(_tf1.GraphKeys.GLOBAL_VARIABLES)
  assert all(v.dtype.base_dtype == tf.float32 for v in variables
             if v.dtype.base_dtype.is_floating)
  # The activations between the layers, the outputs and the losses are fp32; no loss scale
  # anywhere (bf16 has fp32's range).
  built = bf16_training.built
  model = built["model"]
  assert all(layer.dtype == tf.float32 for layer in model.get_all_encoder_layers())
  assert model.get_sequence_output().dtype == tf.float32
  assert model.get_pooled_output().dtype == tf.float32
  assert built["total_loss"].dtype == tf.float32
  assert built["mlm_log_probs"].dtype == tf.float32
  assert not [v for v in variables if "loss_scale" in v.op.name]


def test_bf16_encoder_products_their_gradients_and_bias_adds_in_bf16(bf16_training):
  layers = bf16_training.config.num_hidden_layers
  encoder_matmuls = [op for op in bf16_training.encoder if op.type in MATMULS]
  # Per layer: fused q/k/v, scores, context, attention output, intermediate, output = 6.
  assert len(encoder_matmuls) == 6 * layers
  assert all(_matmul_dtype(op) == tf.bfloat16 for op in encoder_matmuls)
  # Their gradients run in bf16 too (the backward matmuls of the encoder).
  backward = [op for op in bf16_training.ops if op.type in MATMULS
              and op.name.startswith("gradients") and "/bert/encoder/" in op.name]
  assert len(backward) >= 2 * len(encoder_matmuls)
  assert all(_matmul_dtype(op) == tf.bfloat16 for op in backward)
  bias_adds = [op for op in bf16_training.encoder if op.type == "BiasAdd"]
  assert len(bias_adds) == 4 * layers  # fused q/k/v and the three dense
  assert all(op.get_attr("T") == tf.bfloat16 for op in bias_adds)


def test_bf16_outputs_only_of_products_casts_reshapes_and_kernels(bf16_training):
  encoder = bf16_training.encoder
  # Nothing but the products (and the casts and reshapes around them) computes in bf16.
  assert {op.type for op in encoder if _outputs_bf16(op)} <= BF16_FORWARD_TYPES
  # The casts per layer, into bf16: the 2 fp32 inputs of the projections (the layer input and
  # the attention output, both layer norms' outputs) and the 4 kernels and 4 biases (each fp32
  # variable read once and cast once per step): 10. None back to fp32: the attention context
  # goes from its product to the next in bf16, and the kernels read and write bf16 (scores in,
  # probabilities out; the intermediate product into GELU and out to the output product; the
  # dense outputs into the residual blocks).
  casts = [op for op in encoder if op.type == "Cast"]
  to_bf16 = [op for op in casts if op.outputs[0].dtype == tf.bfloat16]
  to_fp32 = [op for op in casts if op.inputs[0].dtype == tf.bfloat16
             and op.outputs[0].dtype == tf.float32]
  assert len(to_bf16) == 10 * bf16_training.config.num_hidden_layers
  assert not to_fp32


def _kernel_calls(ops, gradients):
  """The calls of compiled functions among `ops` in the encoder: its forward pass's, or with
  `gradients` its backward pass's."""
  calls = [op for op in ops if op.type in ("PartitionedCall", "StatefulPartitionedCall")]
  if gradients:
    return [op for op in calls if op.name.startswith("gradients") and "/bert/encoder/" in op.name]
  return [op for op in calls if op.name.startswith("bert/encoder/")]


def test_bf16_element_wise_work_in_compiled_kernels_bf16_in_and_out(bf16_training):
  # The element-wise work between the products runs in compiled kernels (fused_blocks.py and the
  # GELU), each bf16 in and out and fp32 inside: per layer the attention's masked softmax and
  # dropout, GELU, and dropout + residual sum + layer norm after each of the two sub-layers. No
  # element-wise op of the layers is left in the graph.
  encoder = bf16_training.encoder
  assert not [op for op in encoder if op.type in ("Softmax", "Mean", "SelectV2", "RandomUniform")]
  calls = _kernel_calls(encoder, gradients=False)
  assert all(op.get_attr("_XlaMustCompile") for op in calls)
  sites = sorted(op.name.split("/", 3)[3].rsplit("/", 1)[0] for op in calls
                 if "layer_0/" in op.name)
  assert sites == ["attention/output", "attention/self", "intermediate", "output"], sites
  assert len(calls) == 4 * bf16_training.config.num_hidden_layers
  assert len(_kernel_calls(bf16_training.ops, gradients=True)) == len(calls)
  gelu_calls = [op for op in calls if "/intermediate/" in op.name]
  assert all(op.inputs[0].dtype == op.outputs[0].dtype == tf.bfloat16 for op in gelu_calls)


def test_bf16_kernels_compute_in_fp32_inside(bf16_training):
  library = {f.signature.name: f for f in bf16_training.graph.as_graph_def().library.function}
  calls = (_kernel_calls(bf16_training.encoder, gradients=False)
           + _kernel_calls(bf16_training.ops, gradients=True))
  bodies = {call.name: library[call.get_attr("f").name].node_def for call in calls}
  bf16_enum = tf.bfloat16.as_datatype_enum
  for name, body in bodies.items():
    # Inside: only casts (and the outputs' identities) touch bf16; all arithmetic is fp32.
    assert not [node.op for node in body if node.attr["T"].type == bf16_enum
                and node.op != "Identity"], name
    assert [node for node in body if node.op == "Cast"], name
  body_ops = {op_type for body in bodies.values() for op_type in (node.op for node in body)}
  assert {"Softmax", "Mean", "Rsqrt", "Tanh", "SelectV2"} <= body_ops


def test_bf16_pooler_product_in_bf16_heads_in_fp32(bf16_training):
  forward = bf16_training.forward
  # The pooler's product runs in bf16 as well; the heads' matmuls are fp32.
  pooler = [op for op in forward if op.type in MATMULS and op.name.startswith("bert/pooler/")]
  assert [_matmul_dtype(op) for op in pooler] == [tf.bfloat16]
  heads = [op for op in forward if op.type in MATMULS and op.name.startswith("cls/")]
  assert heads and all(_matmul_dtype(op) == tf.float32 for op in heads)
  assert not [op for op in forward if op.type.startswith("FusedBatchNorm")]


def test_gradients_reach_the_optimizer_in_fp32(graph):
  config = helpers.tiny_config()
  batch = helpers.random_batch(np.random.RandomState(0), 2, 8, config.vocab_size, 3)
  built = _build(config, batch, tf.bfloat16, is_training=True)
  optimizer = optimization.make_optimizer("lamb", 1e-3)
  grads, tvars = optimization.scaled_gradients(built["total_loss"], optimizer, tf.constant(1.0),
                                               1, use_tpu=False)
  assert len(grads) == len(_tf1.trainable_variables())
  for grad, var in zip(grads, tvars):
    # Each product casts its fp32 variable: the gradient arrives through that cast as fp32.
    assert grad.dtype == tf.float32 and var.dtype.base_dtype == tf.float32, var.op.name


def _weights_and_outputs(tmp_path, config, batch):
  """The fp32 graph and the bf16 graph on one checkpoint (helpers.outputs_in_two_precisions)."""
  return helpers.outputs_in_two_precisions(_build, config, batch, tf.bfloat16,
                                           str(tmp_path / "model.ckpt"))


def test_bf16_forward_of_a_checkpoint_within_bf16_tolerance(tmp_path):
  config = helpers.tiny_config()
  batch = helpers.random_batch(np.random.RandomState(1), 2, 8, config.vocab_size, 3)
  weights, results = _weights_and_outputs(tmp_path, config, batch)
  _, layers, pooled = numpy_bert.encoder(weights, config.num_hidden_layers,
                                         config.num_attention_heads, batch["input_ids"],
                                         batch["input_mask"], batch["segment_ids"])
  expected = {"sequence": layers[-1], "pooled": pooled}
  fp32, bf16 = results[tf.float32], results[tf.bfloat16]
  layers_count = config.num_hidden_layers
  for key, want in expected.items():
    fp32_error = np.abs(fp32[key] - want)
    bf16_error = np.abs(bf16[key] - want)
    assert fp32_error.max() < 1e-4, key
    # Worst case of the module docstring: 3 products of <= 4u each per layer, on values of at
    # most max|x|.
    bound = 3 * 4 * layers_count * U * max(1.0, np.abs(want).max())
    assert bf16_error.max() <= bound, (key, bf16_error.max(), bound)
    # Typical error: near u on O(1) values, not the worst case.
    assert bf16_error.mean() <= 4 * U, (key, bf16_error.mean())
    # The graph really computes in bf16: its error is of bf16's size, far above fp32's.
    assert bf16_error.mean() >= U / 16, (key, bf16_error.mean())
  # The losses are log-probabilities of O(1) logits: their relative error is a few u.
  for key in ("mlm_loss", "nsp_loss"):
    np.testing.assert_allclose(bf16[key], fp32[key], rtol=8 * U, err_msg=key)


def test_bf16_layer_norm_uses_the_fp32_formula(graph):
  rng = np.random.RandomState(3)
  x = (rng.normal(size=(6, 48)) * 3.0 + 1.5).astype(np.float32)
  out = modeling.layer_norm(tf.cast(tf.constant(x), tf.bfloat16))
  assert out.dtype == tf.bfloat16
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    got = sess.run(tf.cast(out, tf.float32)).astype(np.float64)
    x_bf16 = sess.run(tf.cast(tf.cast(tf.constant(x), tf.bfloat16), tf.float64))
  expected = numpy_bert.layer_norm(x_bf16, np.ones(48), np.zeros(48), epsilon=1e-12)
  # Input rounded to bf16 (exactly what the graph sees), statistics in fp32, output rounded once.
  np.testing.assert_allclose(got, expected, atol=U * np.abs(expected).max())


def test_fused_gelu_is_the_fp32_formula_rounded_once(graph):
  # gelu_fused_in_fp32 (the compiled kernel between the bf16 products) against float64 numpy on
  # the same bf16 inputs: forward and gradient (a central difference of numpy's gelu) within one
  # bf16 rounding of the result (u relative) plus fp32's tanh error.
  rng = np.random.RandomState(5)
  x = (rng.normal(size=(64, 48)) * 3.0).astype(np.float32)
  dy = rng.normal(size=(64, 48)).astype(np.float32)
  x_bf16, dy_bf16 = tf.cast(tf.constant(x), tf.bfloat16), tf.cast(tf.constant(dy), tf.bfloat16)
  y = modeling.gelu_fused_in_fp32(x_bf16)
  (dx,) = tf.gradients(y, [x_bf16], grad_ys=dy_bf16)
  assert y.dtype == dx.dtype == tf.bfloat16
  with _tf1.Session() as sess:
    got_y, got_dx, x64, dy64 = (v.astype(np.float64) for v in sess.run(
        [tf.cast(t, tf.float32) for t in (y, dx, x_bf16, dy_bf16)]))
  want_y = numpy_bert.gelu(x64)
  h = 1e-6
  want_dx = dy64 * (numpy_bert.gelu(x64 + h) - numpy_bert.gelu(x64 - h)) / (2 * h)
  for got, want in ((got_y, want_y), (got_dx, want_dx)):
    np.testing.assert_array_less(np.abs(got - want), U * np.abs(want) + 1e-5)
  # ... and it did round to bf16 (fp32 results would be within 1e-5 everywhere).
  assert np.abs(got_y - want_y).max() > 1e-3


def _train_losses(config, batches, compute_type, init_ckpt, steps):
  """Losses of `steps` LAMB updates on `batches` (cycled), from `init_ckpt`, no dropout."""
  with tf.Graph().as_default():
    placeholders = {k: _tf1.placeholder(tf.as_dtype(v.dtype), v.shape[1:])
                    for k, v in batches.items()}
    built = run_pretraining.build_pretraining_model(config, placeholders, is_training=False,
                                                    compute_type=compute_type)
    train_op = optimization.create_optimizer(built["total_loss"], 1e-2, steps, 10,
                                             optimizer_type="lamb",
                                             bf16=compute_type == tf.bfloat16)
    saver = _tf1.train.Saver(_tf1.trainable_variables())
    losses = []
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      saver.restore(sess, init_ckpt)
      num_batches = len(batches["input_ids"])
      for step in range(steps):
        feed = {placeholders[k]: v[step % num_batches] for k, v in batches.items()}
        losses.append(sess.run([built["total_loss"], train_op], feed)[0])
  return np.array(losses)


def test_100_bf16_updates_track_fp32_while_the_loss_falls(tmp_path):
  config = helpers.tiny_config(vocab_size=60, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=16)
  rng = np.random.RandomState(7)
  parts = [helpers.random_batch(rng, 4, 16, config.vocab_size, 3) for _ in range(4)]
  batches = {k: np.stack([p[k] for p in parts]) for k in parts[0]}
  init_ckpt = str(tmp_path / "init.ckpt")
  with tf.Graph().as_default():
    _build(config, {k: v[0] for k, v in batches.items()}, tf.float32)
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      _tf1.train.Saver().save(sess, init_ckpt)
  fp32 = _train_losses(config, batches, tf.float32, init_ckpt, 100)
  bf16 = _train_losses(config, batches, tf.bfloat16, init_ckpt, 100)
  # The loss falls (4 batches, being memorised): the last 10 clearly below the first 10.
  assert fp32[-10:].mean() < 0.8 * fp32[:10].mean()
  assert bf16[-10:].mean() < 0.8 * bf16[:10].mean()
  # Step by step the same trajectory: every loss within the forward's rounding bound (8u
  # relative, as for one forward pass of the checkpoint test): the weights trained on bf16
  # gradients have not drifted beyond it in 100 updates. (Seen: ~1e-4 relative, 2^-5 = 0.031
  # stated.)
  np.testing.assert_allclose(bf16, fp32, rtol=8 * U)
  # ... and not identical: the bf16 run computed in bf16.
  assert np.abs(bf16 - fp32).max() > 1e-5


@pytest.mark.parametrize("other", ["manual_fp16", "amp"])
def test_bf16_with_another_precision_names_both(other):
  with pytest.raises(ValueError) as raised:
    optimization.Precision(bf16=True, **{other: True}).check()
  assert "bf16" in str(raised.value) and other in str(raised.value)
  # The same rule, worded as the flags, when the script checks them.
  with pytest.raises(errors.UsageError, match="^--bf16 and --%s cannot be combined" % other):
    helpers.job_config(["--bert_config_file=bert_config.json", "--output_dir=out", "--bf16",
                        "--" + other]).check({"do_train": True})


def test_precision_compute_types():
  assert optimization.Precision(bf16=True).compute_type == tf.bfloat16
  assert optimization.Precision(manual_fp16=True).compute_type == tf.float16
  assert optimization.Precision().compute_type == tf.float32
  for precision in (optimization.Precision(bf16=True), optimization.Precision(manual_fp16=True),
                    optimization.Precision()):
    assert precision.compute_precision is modeling.ComputePrecision.of(precision.compute_type)
  assert not optimization.Precision(bf16=True).scales_loss()
  assert gpu_environment.get_custom_getter(tf.bfloat16) is \
      gpu_environment.float32_variable_storage_getter


def test_tpu_lookup_keeps_the_embeddings_fp32_and_the_encoder_bf16(graph):
  # With --use_tpu the model looks the word embeddings up by a one-hot matmul: that one stays
  # fp32 (embeddings are summed and normalised before the cast), the encoder's are bf16.
  config = helpers.tiny_config()
  batch = helpers.random_batch(np.random.RandomState(0), 2, 8, config.vocab_size, 3)
  model = modeling.BertModel(config=config, is_training=False,
                             input_ids=tf.constant(batch["input_ids"]),
                             input_mask=tf.constant(batch["input_mask"]),
                             token_type_ids=tf.constant(batch["segment_ids"]),
                             use_one_hot_embeddings=True, compute_type=tf.bfloat16)
  matmuls = [op for op in graph.get_operations() if op.type in MATMULS]
  embedding = [op for op in matmuls if op.name.startswith("bert/embeddings/")]
  assert embedding and all(_matmul_dtype(op) == tf.float32 for op in embedding)
  encoder = [op for op in matmuls if op.name.startswith("bert/encoder/")]
  assert len(encoder) == 6 * config.num_hidden_layers
  assert all(_matmul_dtype(op) == tf.bfloat16 for op in encoder)
  assert model.get_embedding_output().dtype == tf.float32
  assert model.get_sequence_output().dtype == tf.float32
