"""Compiled element-wise blocks between the bf16 matrix products of `--bf16`.

On CPUs with matrix units (AMX) the bf16 products run about three times faster than in fp32, and the
element-wise work between them, op by op in fp32, becomes half of the step (docs/PERFORMANCE.md).
Each block here is one XLA kernel forward and one backward: it reads the products' bf16 outputs,
computes in fp32 and writes once. In training it draws its dropout mask inside the kernel from a
counter hash of (seed, element index) instead of a separate `RandomUniform` tensor, and draws it
again in the backward kernel rather than keeping it; a --deterministic_run's keyed masks are
fp32's own (`_mask_source`).

- `dropout_residual_layer_norm(y, residual, ...)`: layer_norm(dropout(y) + residual), the end of the
  attention and feed-forward sub-layers.
- `masked_softmax_dropout(scores, mask, ...)`: dropout(softmax(scores * scale + mask adder)), the
  attention probabilities.
- `with_registered_gradient(name, output, inputs)`: a tensor whose gradient is a registered
  function, for these blocks and for `modeling.py`'s GELU and widening layers.

This module is a leaf below `modeling.py` and imports nothing of it: `modeling.ComputePrecision`
calls the two blocks and hands them the model's constants (the layer norm's epsilon, the
attention mask's adder). Each block gives the values of the op-by-op fp32 formulas of
`modeling.py` up to float rounding; in training the masks are other draws than `tf.nn.dropout`'s,
with the same probability (docs/PRECISION.md). Only `--bf16` uses them; fp32 and fp16 graphs are
unchanged.
"""

import tensorflow as tf

import fused_layer_norm

_tf1 = tf.compat.v1

# Multipliers of the counter hash ("lowbias32", two rounds of xor-shift-multiply).
_HASH_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)
# The range of the seeds drawn on every run in training (`_draw_seed`).
_SEED_RANGE = 2**62


def _hash32(values):
  """One round of the lowbias32 mixer on uint32 values (a bijection of uint32)."""
  values = tf.bitwise.bitwise_xor(values, tf.bitwise.right_shift(values, 16))
  values = values * tf.constant(_HASH_MULTIPLIERS[0], tf.uint32)
  values = tf.bitwise.bitwise_xor(values, tf.bitwise.right_shift(values, 15))
  values = values * tf.constant(_HASH_MULTIPLIERS[1], tf.uint32)
  return tf.bitwise.bitwise_xor(values, tf.bitwise.right_shift(values, 16))


def keep_mask(shape, seed, rate):
  """The dropout mask of a block: True where a value is kept (probability 1 - rate).

  Element i (row-major) is kept when hash(hash(i xor s0) xor s1) >= rate * 2^32, with s0, s1 the
  low 32 bits of the two seed words: a pure function of (seed, shape), cheap enough to compute
  inside the block's kernel forward and again backward.

  Args:
    shape: static shape (list of ints) of the values.
    seed: int64 Tensor [2].
    rate: Python float in (0, 1), the drop probability.

  Returns:
    bool Tensor of `shape`.
  """
  words = tf.cast(tf.bitwise.bitwise_and(seed, 0xFFFFFFFF), tf.uint32)
  size = 1
  for dim in shape:
    size *= dim
  index = tf.reshape(tf.range(size, dtype=tf.int32), shape)
  bits = _hash32(tf.bitwise.bitwise_xor(_hash32(tf.bitwise.bitwise_xor(
      tf.cast(index, tf.uint32), words[0])), words[1]))
  return bits >= tf.constant(int(round(rate * 2**32)), tf.uint32)


def _dropped(values, mask_source, rate):
  """values * keep / (1 - rate), values fp32; `values` itself for rate 0. `mask_source`: the
  bool keep mask itself, or the int64 [2] seed of `keep_mask` (see `_mask_source`)."""
  if not rate:
    return values
  keep = mask_source
  if mask_source.dtype != tf.bool:
    keep = keep_mask(values.shape.as_list(), mask_source, rate)
  return tf.where(keep, values * (1.0 / (1.0 - rate)), tf.zeros_like(values))


def _normalized(z, epsilon):
  """(z - mean) * rsqrt(variance + epsilon) over the last axis, and the rsqrt [..., 1]."""
  centered = z - tf.reduce_mean(z, axis=-1, keepdims=True)
  inverse_std = tf.math.rsqrt(
      tf.reduce_mean(centered * centered, axis=-1, keepdims=True) + epsilon)
  return centered * inverse_std, inverse_std


def _residual_forward(y, residual, gamma, beta, mask_source, rate, epsilon):
  """(layer_norm(z), z) with z = dropout(fp32(y)) + residual; all fp32 out."""
  z = _dropped(tf.cast(y, tf.float32), mask_source, rate) + residual
  return _normalized(z, epsilon)[0] * gamma + beta, z


def _residual_backward(dout, z, gamma, mask_source, rate, epsilon, y_dtype):
  """Gradients (dy in y_dtype, dresidual, dgamma, dbeta) of `_residual_forward`."""
  x_hat, inverse_std = _normalized(z, epsilon)
  dx_hat = dout * gamma
  dz = inverse_std * (dx_hat - tf.reduce_mean(dx_hat, axis=-1, keepdims=True)
                      - x_hat * tf.reduce_mean(dx_hat * x_hat, axis=-1, keepdims=True))
  return tf.cast(_dropped(dz, mask_source, rate), y_dtype), dz, dout * x_hat


def _softmax_forward(scores, mask, scale, mask_adder, mask_source, rate, out_dtype):
  """(dropout(p), p) in `out_dtype`, p = softmax(fp32(scores) * scale + (1 - mask) * mask_adder);
  mask [batch, from, to] broadcast over the heads."""
  logits = tf.cast(scores, tf.float32) * scale
  if mask is not None:
    logits += (1.0 - tf.expand_dims(mask, axis=1)) * mask_adder
  probs = tf.nn.softmax(logits)
  return tf.cast(_dropped(probs, mask_source, rate), out_dtype), tf.cast(probs, out_dtype)


def _softmax_backward(dprobs, probs, scale, mask_source, rate):
  """Gradient of `_softmax_forward` with respect to `scores`, from its saved probabilities."""
  probs = tf.cast(probs, tf.float32)
  dp = _dropped(tf.cast(dprobs, tf.float32), mask_source, rate)
  dlogits = probs * (dp - tf.reduce_sum(dp * probs, axis=-1, keepdims=True))
  return tf.cast(dlogits * scale, dprobs.dtype)


def _compiled(function):
  return tf.function(function, jit_compile=True, autograph=False)


_RESIDUAL_FORWARD = _compiled(_residual_forward)
_RESIDUAL_BACKWARD = _compiled(_residual_backward)
_SOFTMAX_FORWARD = _compiled(_softmax_forward)
_SOFTMAX_BACKWARD = _compiled(_softmax_backward)


def _draw_seed():
  """A new int64 [2] seed on every run of the graph, from TensorFlow's stateful generator."""
  return _tf1.random.uniform([2], maxval=_SEED_RANGE, dtype=tf.int64)


def _mask_source(shape, rate, seed):
  """What a block's kernels draw the dropout mask from (`_dropped`).

  Without a `seed` (training): a seed drawn on every run, which the kernels hash (`keep_mask`),
  forward and again backward: no mask tensor is computed, stored or read. With a `seed` (the
  stateless masks of a --deterministic_run, `modeling.dropout_site_key`): the very mask
  `modeling.dropout` draws from that seed in fp32 (Philox uniforms >= rate), computed outside the
  kernels and kept for the backward pass, so that such a run drops what the fp32 run drops.

  Returns:
    int64 Tensor [2] (a seed to hash; zeros for rate 0) or bool Tensor `shape` (the mask).
  """
  if not rate:
    return tf.zeros([2], tf.int64)
  if seed is None:
    return _draw_seed()
  return tf.random.stateless_uniform(shape, seed=seed, alg="philox") >= rate


def with_registered_gradient(gradient_name, output, inputs):
  """`output` (computed from `inputs`) with the gradient registered as `gradient_name`.

  `output` and `inputs` go through one IdentityN whose gradient is overridden: the registered
  function receives that op (its inputs are `[output] + inputs`) and the gradient of the output,
  and returns `[None]` followed by the gradients of `inputs`; autodiff of the ops that computed
  `output` is skipped. This is what `tf.custom_gradient` builds in graph mode, without the
  Identity op its variable search leaves behind for every call (an op no output depends on,
  which the original release's graph test rejects), and with one gradient function registered
  per kind instead of one per call.

  Args:
    gradient_name: name a function was registered under with `tf.RegisterGradient`.
    output: Tensor.
    inputs: list of Tensors `output` was computed from.

  Returns:
    Tensor equal to `output`.
  """
  with _tf1.get_default_graph().gradient_override_map({"IdentityN": gradient_name}):
    return tf.identity_n([output] + list(inputs))[0]


def dropout_residual_layer_norm(y, residual, dropout_prob, epsilon, seed=None, name=None):
  """layer_norm(dropout(y) + residual) in fp32, one compiled kernel each way.

  The layer norm's variables are `<name or LayerNorm>/{beta,gamma}`, as `modeling.layer_norm`
  creates them.

  Args:
    y: bf16 (or fp32) Tensor [rows, hidden], a product's output.
    residual: fp32 Tensor [rows, hidden].
    dropout_prob: drop probability on y; None or 0 for none.
    epsilon: Python float added to the variance (`modeling.LAYER_NORM_EPSILON`).
    seed: optional int Tensor [2]: the mask `modeling.dropout` draws from it; None: a new mask
      on every run, drawn inside the kernels (`_mask_source`).
    name: variable scope of the layer norm.

  Returns:
    fp32 Tensor [rows, hidden].
  """
  rate = float(dropout_prob or 0.0)
  with _tf1.variable_scope(name, default_name="LayerNorm"):
    beta, gamma = (tf.convert_to_tensor(v) for v in fused_layer_norm.layer_norm_variables(
        tf.compat.dimension_value(y.shape[-1])))
  mask_source = _mask_source(y.shape.as_list(), rate, seed)
  output, z = _RESIDUAL_FORWARD(y, residual, gamma, beta, mask_source, rate, float(epsilon))
  output.set_shape(residual.shape)
  z.set_shape(residual.shape)
  # The rate and epsilon travel to the gradient as one float32 constant; both round-trip
  # through float32 to the values the forward kernel's float32 constants hold.
  return with_registered_gradient(
      _RESIDUAL_GRADIENT, output,
      [y, residual, gamma, beta, mask_source, z, tf.constant([rate, float(epsilon)])])


_RESIDUAL_GRADIENT = "BertDropoutResidualLayerNormGradient"


@tf.RegisterGradient(_RESIDUAL_GRADIENT)
def _residual_gradient(op, doutput, *unused):
  """Gradient of `dropout_residual_layer_norm`; op.inputs: output, y, residual, gamma, beta,
  mask source, z, [rate, epsilon]."""
  y, gamma, mask_source, z = op.inputs[1], op.inputs[3], op.inputs[5], op.inputs[6]
  rate, epsilon = (float(value) for value in tf.get_static_value(op.inputs[7]))
  dy, dresidual, dgamma_rows = _RESIDUAL_BACKWARD(doutput, z, gamma, mask_source, rate, epsilon,
                                                  y.dtype)
  dgamma, dbeta = tf.reduce_sum(dgamma_rows, axis=0), tf.reduce_sum(doutput, axis=0)
  return [None, dy, dresidual, dgamma, dbeta, None, None, None]


def masked_softmax_dropout(scores, mask, scale, mask_adder, dropout_prob, seed=None):
  """dropout(softmax(scores * scale + (1 - mask) * mask_adder)), in fp32, one compiled kernel
  each way; the backward kernel reads the probabilities the forward one wrote (in the scores'
  dtype).

  Args:
    scores: bf16 Tensor [batch, heads, from_seq, to_seq], the query-key products.
    mask: optional fp32 Tensor [batch, from_seq, to_seq], 1 = may attend.
    scale: Python float multiplying the scores (1 / sqrt(head size)).
    mask_adder: Python float added to the scaled scores where the mask is 0
      (`modeling.ATTENTION_MASK_ADDER`).
    dropout_prob: drop probability on the probabilities; None or 0 for none.
    seed: optional int Tensor [2] (see `dropout_residual_layer_norm`).

  Returns:
    Tensor like `scores` (same dtype): the dropped-out probabilities.
  """
  rate = float(dropout_prob or 0.0)
  mask_source = _mask_source(scores.shape.as_list(), rate, seed)
  dropped, probs = _SOFTMAX_FORWARD(scores, None if mask is None else tf.cast(mask, tf.float32),
                                    float(scale), float(mask_adder), mask_source, rate,
                                    scores.dtype)
  dropped.set_shape(scores.shape)
  probs.set_shape(scores.shape)
  return with_registered_gradient(
      _SOFTMAX_GRADIENT, dropped,
      [scores, mask_source, tf.constant(float(scale)), tf.constant(rate), probs])


_SOFTMAX_GRADIENT = "BertMaskedSoftmaxDropoutGradient"


@tf.RegisterGradient(_SOFTMAX_GRADIENT)
def _softmax_gradient(op, dprobs, *unused):
  """Gradient of `masked_softmax_dropout`; op.inputs: dropped probabilities, scores, mask source,
  scale, rate, probabilities."""
  mask_source, probs = op.inputs[2], op.inputs[5]
  scale = float(tf.get_static_value(op.inputs[3]))
  rate = float(tf.get_static_value(op.inputs[4]))
  dscores = _SOFTMAX_BACKWARD(dprobs, probs, scale, mask_source, rate)
  return [None, dscores, None, None, None, None]
