"""A straightforward LAMB training step in plain TF ops: the un-optimised reference.

Written from the LAMB paper (You et al., 2019) and docs/DESIGN.md section 6, sharing no code with
`optimization.py`: one op per formula term and per variable, no fused kernels, no XLA. The caller
feeds the learning rate and the update count t (so the schedule lives in numpy, in the test).

  gradients -> global norm -> clip to norm 1.0 -> per variable:
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd w      (no wd for excluded names)
    w = w - lr * (||w|| / ||u|| if both > 0 else 1) * u
"""

import re

import tensorflow as tf

_tf1 = tf.compat.v1


def lamb_train_op(loss, tvars, learning_rate, update_count, weight_decay_rate=0.01, beta_1=0.9,
                  beta_2=0.999, epsilon=1e-6, exclude=("LayerNorm", "layer_norm", "bias"),
                  clip_norm=1.0):
  """Returns (train_op, global_norm) for one LAMB update of `tvars` on `loss`.

  Args:
    loss: float32 scalar Tensor.
    tvars: the trainable variables.
    learning_rate: float32 scalar Tensor (e.g. a placeholder).
    update_count: float32 scalar Tensor t >= 1 (e.g. a placeholder).
    weight_decay_rate, beta_1, beta_2, epsilon: LAMB hyper-parameters.
    exclude: regexes of variable names without weight decay.
    clip_norm: global-norm clipping threshold.
  """
  grads = [tf.convert_to_tensor(g) for g in tf.gradients(loss, tvars)]
  global_norm = tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(g)) for g in grads]))
  factor = clip_norm / tf.maximum(global_norm, clip_norm)
  assignments = []
  for grad, var in zip(grads, tvars):
    name = var.op.name
    g = grad * factor
    m = _tf1.get_variable(name + "/plain_m", shape=var.shape, dtype=tf.float32,
                          initializer=_tf1.zeros_initializer(), trainable=False)
    v = _tf1.get_variable(name + "/plain_v", shape=var.shape, dtype=tf.float32,
                          initializer=_tf1.zeros_initializer(), trainable=False)
    next_m = beta_1 * m + (1.0 - beta_1) * g
    next_v = beta_2 * v + (1.0 - beta_2) * g * g
    m_hat = next_m / (1.0 - tf.pow(beta_1, update_count))
    v_hat = next_v / (1.0 - tf.pow(beta_2, update_count))
    update = m_hat / (tf.sqrt(v_hat) + epsilon)
    if not any(re.search(pattern, name) for pattern in exclude):
      update = update + weight_decay_rate * var
    w_norm = tf.sqrt(tf.reduce_sum(tf.square(var)))
    u_norm = tf.sqrt(tf.reduce_sum(tf.square(update)))
    ratio = tf.where(tf.logical_and(w_norm > 0.0, u_norm > 0.0),
                     w_norm / tf.maximum(u_norm, 1e-30), 1.0)
    with tf.control_dependencies([update, ratio]):
      assignments += [var.assign_sub(learning_rate * ratio * update), m.assign(next_m),
                      v.assign(next_v)]
  return tf.group(*assignments), global_norm
