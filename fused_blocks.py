"""Compiled element-wise blocks between the bf16 matrix products of `--bf16`.

On CPUs with matrix units (AMX) the bf16 products run about three times faster than in fp32, and the
element-wise work between them, op by op in fp32, becomes half of the step (docs/PERFORMANCE.md).
Each block here is one XLA kernel forward and one backward: it reads the products' bf16 outputs,
computes in fp32 and writes once, and draws its dropout mask inside the kernel from a counter hash
of (seed, element index) instead of a separate `RandomUniform` tensor, recomputing the mask in the
backward kernel rather than keeping it.

- `dropout_residual_layer_norm(y, residual, ...)`: layer_norm(dropout(y) + residual), the end of the
  attention and feed-forward sub-layers.
- `masked_softmax_dropout(scores, mask, ...)`: dropout(softmax(scores * scale + mask adder)), the
  attention probabilities.

Each gives the same values as the op-by-op fp32 formulas of `modeling.py` up to float rounding,
except the dropout mask: a function of the seed alone, as the stateless masks are, but a different
one (docs/PRECISION.md). Only `--bf16` uses them; fp32 and fp16 graphs are unchanged.
"""

import tensorflow as tf

import fused_layer_norm

_tf1 = tf.compat.v1

# As `modeling.LAYER_NORM_EPSILON` (the original's), and the attention mask's adder.
_LAYER_NORM_EPSILON = 1e-12
_MASK_ADDER = -10000.0
# Multipliers of the counter hash ("lowbias32", two rounds of xor-shift-multiply).
_HASH_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)
# int64 seed range drawn per call in the stateful mode.
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


def _dropped(values, seed, rate):
  """values * mask / (1 - rate), values fp32; `values` itself for rate 0."""
  if not rate:
    return values
  keep = keep_mask(values.shape.as_list(), seed, rate)
  return tf.where(keep, values * (1.0 / (1.0 - rate)), tf.zeros_like(values))


def _normalized(z):
  """(z - mean) * rsqrt(variance + eps) over the last axis, and the rsqrt [..., 1]."""
  centered = z - tf.reduce_mean(z, axis=-1, keepdims=True)
  inverse_std = tf.math.rsqrt(
      tf.reduce_mean(centered * centered, axis=-1, keepdims=True) + _LAYER_NORM_EPSILON)
  return centered * inverse_std, inverse_std


def _residual_forward(y, residual, gamma, beta, seed, rate):
  """(layer_norm(z), z) with z = dropout(fp32(y)) + residual; all fp32 out."""
  z = _dropped(tf.cast(y, tf.float32), seed, rate) + residual
  return _normalized(z)[0] * gamma + beta, z


def _residual_backward(dout, z, gamma, seed, rate, y_dtype):
  """Gradients (dy in y_dtype, dresidual, dgamma, dbeta) of `_residual_forward`."""
  x_hat, inverse_std = _normalized(z)
  dx_hat = dout * gamma
  dz = inverse_std * (dx_hat - tf.reduce_mean(dx_hat, axis=-1, keepdims=True)
                      - x_hat * tf.reduce_mean(dx_hat * x_hat, axis=-1, keepdims=True))
  return tf.cast(_dropped(dz, seed, rate), y_dtype), dz, dout * x_hat


def _softmax_forward(scores, mask, scale, seed, rate, out_dtype):
  """(dropout(p), p) in `out_dtype`, p = softmax(fp32(scores) * scale + (1 - mask) * adder);
  mask [batch, from, to] broadcast over the heads."""
  logits = tf.cast(scores, tf.float32) * scale
  if mask is not None:
    logits += (1.0 - tf.expand_dims(mask, axis=1)) * _MASK_ADDER
  probs = tf.nn.softmax(logits)
  return tf.cast(_dropped(probs, seed, rate), out_dtype), tf.cast(probs, out_dtype)


def _softmax_backward(dprobs, probs, scale, seed, rate):
  """Gradient of `_softmax_forward` with respect to `scores`, from its saved probabilities."""
  probs = tf.cast(probs, tf.float32)
  dp = _dropped(tf.cast(dprobs, tf.float32), seed, rate)
  dlogits = probs * (dp - tf.reduce_sum(dp * probs, axis=-1, keepdims=True))
  return tf.cast(dlogits * scale, dprobs.dtype)


def _compiled(function):
  return tf.function(function, jit_compile=True, autograph=False)


_RESIDUAL_FORWARD = _compiled(_residual_forward)
_RESIDUAL_BACKWARD = _compiled(_residual_backward)
_SOFTMAX_FORWARD = _compiled(_softmax_forward)
_SOFTMAX_BACKWARD = _compiled(_softmax_backward)


def block_seed(seed):
  """The seed of a block's mask: `seed` (int Tensor [2]) as int64, or, when None, one drawn from
  TensorFlow's stateful generator on every run of the graph (as `tf.nn.dropout` draws its mask)."""
  if seed is None:
    return _tf1.random.uniform([2], maxval=_SEED_RANGE, dtype=tf.int64)
  return tf.cast(seed, tf.int64)


def _with_gradient(gradient_name, outputs, inputs):
  """`outputs` (computed from `inputs`) through one IdentityN whose gradient is `gradient_name`:
  the registered function gets the op (inputs `outputs + inputs`) and the outputs' gradients and
  returns None for each output, then the gradients of `inputs` (as `modeling`'s GELU does)."""
  with _tf1.get_default_graph().gradient_override_map({"IdentityN": gradient_name}):
    return tf.identity_n(list(outputs) + list(inputs))[:len(outputs)]


def dropout_residual_layer_norm(y, residual, dropout_prob, seed=None, name=None):
  """layer_norm(dropout(y) + residual) in fp32, one compiled kernel each way.

  The layer norm's variables are `<name or LayerNorm>/{beta,gamma}`, as `modeling.layer_norm`
  creates them.

  Args:
    y: bf16 (or fp32) Tensor [rows, hidden], a product's output.
    residual: fp32 Tensor [rows, hidden].
    dropout_prob: drop probability on y; None or 0 for none.
    seed: optional int Tensor [2]: the mask is a function of it; None draws one per run.
    name: variable scope of the layer norm.

  Returns:
    fp32 Tensor [rows, hidden].
  """
  rate = float(dropout_prob or 0.0)
  with _tf1.variable_scope(name, default_name="LayerNorm"):
    beta, gamma = (tf.convert_to_tensor(v) for v in fused_layer_norm.layer_norm_variables(
        tf.compat.dimension_value(y.shape[-1])))
  seed = block_seed(seed) if rate else tf.zeros([2], tf.int64)
  output, z = _RESIDUAL_FORWARD(y, residual, gamma, beta, seed, rate)
  output.set_shape(residual.shape)
  z.set_shape(residual.shape)
  return _with_gradient(_RESIDUAL_GRADIENT, [output],
                        [y, residual, gamma, beta, seed, z, tf.constant(rate)])[0]


_RESIDUAL_GRADIENT = "BertDropoutResidualLayerNormGradient"


@tf.RegisterGradient(_RESIDUAL_GRADIENT)
def _residual_gradient(op, doutput, *unused):
  """Gradient of `dropout_residual_layer_norm`; op.inputs: output, y, residual, gamma, beta, seed,
  z, rate."""
  y, gamma, seed, z = op.inputs[1], op.inputs[3], op.inputs[5], op.inputs[6]
  rate = float(tf.get_static_value(op.inputs[7]))
  dy, dresidual, dgamma_rows = _RESIDUAL_BACKWARD(doutput, z, gamma, seed, rate, y.dtype)
  dgamma, dbeta = tf.reduce_sum(dgamma_rows, axis=0), tf.reduce_sum(doutput, axis=0)
  return [None, dy, dresidual, dgamma, dbeta, None, None, None]


def masked_softmax_dropout(scores, mask, scale, dropout_prob, seed=None):
  """dropout(softmax(scores * scale + (1 - mask) * -10000)), in fp32, one compiled kernel each
  way; the softmax is recomputed from `scores` in the backward kernel.

  Args:
    scores: bf16 Tensor [batch, heads, from_seq, to_seq], the query-key products.
    mask: optional fp32 Tensor [batch, from_seq, to_seq], 1 = may attend.
    scale: Python float multiplying the scores (1 / sqrt(head size)).
    dropout_prob: drop probability on the probabilities; None or 0 for none.
    seed: optional int Tensor [2] (see `dropout_residual_layer_norm`).

  Returns:
    Tensor like `scores` (same dtype): the dropped-out probabilities.
  """
  rate = float(dropout_prob or 0.0)
  seed = block_seed(seed) if rate else tf.zeros([2], tf.int64)
  inputs = [scores, seed, tf.constant(float(scale)), tf.constant(rate)]
  if mask is not None:
    inputs.append(tf.cast(mask, tf.float32))
  dropped, probs = _SOFTMAX_FORWARD(scores, inputs[4] if mask is not None else None,
                                    float(scale), seed, rate, scores.dtype)
  dropped.set_shape(scores.shape)
  probs.set_shape(scores.shape)
  return _with_gradient(_SOFTMAX_GRADIENT, [dropped], inputs + [probs])[0]


_SOFTMAX_GRADIENT = "BertMaskedSoftmaxDropoutGradient"


@tf.RegisterGradient(_SOFTMAX_GRADIENT)
def _softmax_gradient(op, dprobs, *unused):
  """Gradient of `masked_softmax_dropout`; op.inputs: dropped probabilities, scores, seed, scale,
  rate[, mask], probabilities."""
  seed, probs = op.inputs[2], op.inputs[-1]
  scale = float(tf.get_static_value(op.inputs[3]))
  rate = float(tf.get_static_value(op.inputs[4]))
  dscores = _SOFTMAX_BACKWARD(dprobs, probs, scale, seed, rate)
  return [None, dscores] + [None] * (len(op.inputs) - 2)
