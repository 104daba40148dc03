"""Layer normalisation for reduced-precision activations on the fused batch-norm kernel.

Layer norm normalises every row of a [rows, hidden] matrix over its `hidden` features. The fused
batch-norm kernel normalises every *channel* over all its other elements, in one pass, with fp32
statistics even for fp16 input. Reshaping the matrix to NCHW [1, rows, hidden, 1] makes each row a
channel, so the kernel computes exactly the per-row mean and variance layer norm needs. The
learned per-feature scale (gamma) and shift (beta) are applied afterwards, because the kernel's own
scale/offset are per channel, i.e. per row.

Variables: `<scope>/beta` and `<scope>/gamma`, shape [hidden], stored in fp32, the names the
original BERT checkpoints use, so fp16 and fp32 models share checkpoints.
"""

import tensorflow as tf

_tf1 = tf.compat.v1

# cuDNN's batch-norm kernels reject epsilon below 1e-5 (CUDNN_BN_MIN_EPSILON); TF raises smaller
# values to this. The fp32 path keeps the original 1e-12.
FUSED_LAYER_NORM_EPSILON = 1.001e-5


def layer_norm_variables(hidden):
  """Creates `beta` (zeros) and `gamma` (ones), fp32 [hidden], in the current variable scope.

  Shared by this fp16 layer norm and the fp32 one in `modeling.py`, so both read and write the
  same checkpoint variables. Returns (beta, gamma).
  """
  beta = _tf1.get_variable("beta", [hidden], dtype=tf.float32,
                           initializer=_tf1.zeros_initializer())
  gamma = _tf1.get_variable("gamma", [hidden], dtype=tf.float32,
                            initializer=_tf1.ones_initializer())
  return beta, gamma


def fused_layer_norm(inputs, epsilon=FUSED_LAYER_NORM_EPSILON, scope=None):
  """Layer norm over the last axis using the fused batch-norm kernel.

  Args:
    inputs: float Tensor of shape [..., hidden], fp16 or fp32.
    epsilon: variance epsilon; at least `FUSED_LAYER_NORM_EPSILON` for GPU kernels.
    scope: variable scope name; default "LayerNorm".

  Returns:
    Tensor of the same shape and dtype as `inputs`.
  """
  with _tf1.variable_scope(scope, default_name="LayerNorm"):
    hidden = tf.compat.dimension_value(inputs.shape[-1])
    if hidden is None:
      raise ValueError("fused_layer_norm needs a static last dimension, got shape %s"
                       % inputs.shape)
    beta, gamma = layer_norm_variables(hidden)

    rows = tf.reshape(inputs, [1, -1, hidden, 1])
    num_rows = tf.shape(rows)[1]
    unit_scale = tf.ones([num_rows], dtype=tf.float32)
    zero_offset = tf.zeros([num_rows], dtype=tf.float32)
    normalized, _, _ = _tf1.nn.fused_batch_norm(
        rows, unit_scale, zero_offset, epsilon=epsilon, data_format="NCHW", is_training=True)
    normalized = tf.reshape(normalized, tf.shape(inputs))
    return normalized * tf.cast(gamma, inputs.dtype) + tf.cast(beta, inputs.dtype)
