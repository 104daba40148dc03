"""optimization.py: optimizers, LR schedule, step ordering, TPU wrap.

Expected numbers come from numpy code written here (or from the issue's hand-computed values),
never from the code under test. The training step on a small model (accumulation, loss scaling) is
in test_optimization_step.py, Horovod runs are in test_optimization_horovod.py.
"""

import logging

import numpy as np
import pytest
import tensorflow as tf

import optimization
from tests import helpers

_tf1 = tf.compat.v1


# ---------------------------------------------------------------------------------------------
# numpy references

def np_lamb_step(w, g, m, v, t, lr, wd, decay=True, b1=0.9, b2=0.999, eps=1e-6):
  m = b1 * m + (1 - b1) * g
  v = b2 * v + (1 - b2) * g * g
  update = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
  if decay:
    update = update + wd * w
  w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
  ratio = w_norm / u_norm if (w_norm > 0 and u_norm > 0) else 1.0
  return w - lr * ratio * update, m, v


def np_adam_wd_step(w, g, m, v, lr, wd, decay=True, b1=0.9, b2=0.999, eps=1e-6):
  m = b1 * m + (1 - b1) * g
  v = b2 * v + (1 - b2) * g * g
  update = m / (np.sqrt(v) + eps)
  if decay:
    update = update + wd * w
  return w - lr * update, m, v


def np_schedule(step, init_lr, train_steps, warmup, optimizer_type):
  if warmup and step < warmup:
    return init_lr * step / warmup
  if optimizer_type == "adam":
    start, power = init_lr / (1 - warmup / train_steps), 1.0
  else:
    start, power = init_lr, 0.5
  return start * (1 - min(step, train_steps) / train_steps) ** power


# ---------------------------------------------------------------------------------------------
# Optimizers on their own

def _run_updates(optimizer, name, w0, grad, num_updates):
  """Applies `grad` `num_updates` times, incrementing global_step before each apply."""
  with tf.Graph().as_default():
    var = _tf1.get_variable(name, initializer=tf.constant(w0, tf.float32))
    step = _tf1.train.get_or_create_global_step()
    increment = step.assign_add(1)
    with tf.control_dependencies([increment]):
      train = optimizer().apply_gradients([(tf.constant(grad, tf.float32), var)],
                                          global_step=step)
    history = []
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      for _ in range(num_updates):
        sess.run(train)
        history.append(sess.run(var))
  return history


def _lamb(lr=1e-3, wd=0.01):
  return lambda: optimization.LAMBOptimizer(
      learning_rate=lr, weight_decay_rate=wd,
      exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])


@pytest.mark.parametrize("name,w0,grad,decay", [
    ("dense/kernel", [1.0, 2.0], [0.1, 0.1], True),
    ("dense/bias", [1.0, 2.0], [0.1, 0.1], False),           # excluded from weight decay
    ("dense/kernel", [1.0, 2.0], [0.0, 0.0], True),          # zero gradient: decay only
    ("output/LayerNorm/gamma", [1.0, 2.0], [0.0, 0.0], False),  # zero update: ratio 1
    ("dense/kernel", [0.0, 0.0], [0.1, -0.3], True),         # zero weight: ratio 1
])
def test_lamb_three_updates_match_numpy(name, w0, grad, decay):
  history = _run_updates(_lamb(), name, w0, grad, 3)
  w, m, v = np.array(w0, np.float64), np.zeros(2), np.zeros(2)
  for t in (1, 2, 3):
    w, m, v = np_lamb_step(w, np.array(grad, np.float64), m, v, t, 1e-3, 0.01, decay)
    np.testing.assert_allclose(history[t - 1], w, rtol=1e-6, atol=1e-7)


def test_lamb_first_update_hand_computed_value():
  history = _run_updates(_lamb(), "dense/kernel", [1.0, 2.0], [0.1, 0.1], 1)
  np.testing.assert_allclose(history[0], [0.99842667, 1.99841109], rtol=1e-7)


def test_lamb_needs_the_step_and_refuses_step_zero():
  with tf.Graph().as_default():
    var = _tf1.get_variable("w", initializer=tf.constant([1.0]))
    with pytest.raises(ValueError, match="global_step"):
      _lamb()().apply_gradients([(tf.constant([0.1]), var)])
    step = _tf1.train.get_or_create_global_step()
    train = _lamb()().apply_gradients([(tf.constant([0.1]), var)], global_step=step)
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      # Reading the step before incrementing it is the NVIDIA bug (1 - beta^0 = 0 -> NaN).
      with pytest.raises(tf.errors.InvalidArgumentError, match="increment the step"):
        sess.run(train)


def test_optimizer_slots_are_named_adam_m_and_adam_v():
  with tf.Graph().as_default():
    var = _tf1.get_variable("layer/dense/kernel", shape=[3, 2])
    opt = optimization.LAMBOptimizer(learning_rate=0.1)
    opt.apply_gradients([(tf.ones([3, 2]), var)],
                        global_step=_tf1.train.get_or_create_global_step())
    names = sorted(v.op.name for v in _tf1.global_variables())
    assert names == ["global_step", "layer/dense/kernel", "layer/dense/kernel/adam_m",
                     "layer/dense/kernel/adam_v"]
    assert opt.get_slot(var, "m").op.name == "layer/dense/kernel/adam_m"


def test_adam_weight_decay_solves_the_quadratic():
  # The original release's test: minimise mean((x - w)^2) from w = [0.1, -0.2, -0.1].
  with tf.Graph().as_default():
    w = _tf1.get_variable("w", initializer=tf.constant([0.1, -0.2, -0.1]))
    x = tf.constant([0.4, 0.2, -0.5])
    loss = tf.reduce_mean(tf.square(x - w))
    grads = tf.gradients(loss, [w])
    opt = optimization.AdamWeightDecayOptimizer(learning_rate=0.2)
    train = opt.apply_gradients(list(zip(grads, [w])))
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      for _ in range(100):
        sess.run(train)
      np.testing.assert_allclose(sess.run(w), [0.4, 0.2, -0.5], atol=1e-2)


def test_adam_weight_decay_matches_numpy_without_bias_correction():
  history = _run_updates(
      lambda: optimization.AdamWeightDecayOptimizer(
          learning_rate=0.01, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"]),
      "dense/kernel", [0.5, -1.0], [0.2, 0.05], 3)
  w, m, v = np.array([0.5, -1.0]), np.zeros(2), np.zeros(2)
  for t in range(3):
    w, m, v = np_adam_wd_step(w, np.array([0.2, 0.05]), m, v, 0.01, 0.01)
    np.testing.assert_allclose(history[t], w, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Learning-rate schedule

@pytest.mark.parametrize("optimizer_type", ["adam", "lamb"])
def test_learning_rate_schedule(optimizer_type):
  init_lr, train_steps, warmup = 4e-3, 100, 10
  steps = [0, 5, 9, 10, 11, 55, 99, 100, 150]
  with tf.Graph().as_default():
    step = _tf1.placeholder(tf.int64, [])
    lr = optimization.learning_rate_schedule(step, init_lr, train_steps, warmup, optimizer_type)
    with _tf1.Session() as sess:
      got = [sess.run(lr, {step: s}) for s in steps]
  expected = [np_schedule(s, init_lr, train_steps, warmup, optimizer_type) for s in steps]
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-9)
  # Spot values by hand: warmup midpoint, end of warmup, the end.
  assert got[1] == pytest.approx(2e-3)
  if optimizer_type == "adam":
    assert got[3] == pytest.approx(init_lr)              # continuous at the crossover
    assert got[5] == pytest.approx(4e-3 / 0.9 * 0.45)    # linear decay from the adjusted start
  else:
    assert got[3] == pytest.approx(4e-3 * np.sqrt(0.9))  # sqrt decay from init_lr
    assert got[5] == pytest.approx(4e-3 * np.sqrt(0.45))
  assert got[7] == 0.0 and got[8] == 0.0


def test_schedule_rejects_bad_values():
  with pytest.raises(ValueError, match="num_warmup_steps"):
    optimization.learning_rate_schedule(tf.constant(0), 1e-3, 10, 10, "adam")
  with pytest.raises(ValueError, match="optimizer_type"):
    optimization.learning_rate_schedule(tf.constant(0), 1e-3, 10, 1, "sgd")
  with pytest.raises(ValueError, match="num_train_steps"):
    optimization.learning_rate_schedule(tf.constant(0), 1e-3, 0, 0, "lamb")


# ---------------------------------------------------------------------------------------------
# create_optimizer: step ordering, checks, the TPU wrap, the original release's call

def _find_if_ops(graph):
  return [op for op in graph.get_operations() if op.type in ("If", "StatelessIf")]


def _ancestors(op):
  seen, stack = set(), [op]
  while stack:
    current = stack.pop()
    for parent in [t.op for t in current.inputs] + list(current.control_inputs):
      if parent not in seen:
        seen.add(parent)
        stack.append(parent)
  return seen


def test_structure_optimizer_reads_step_after_increment():
  with tf.Graph().as_default() as graph:
    w = _tf1.get_variable("dense/kernel", initializer=tf.constant([1.0, 2.0]))
    optimization.create_optimizer(tf.reduce_sum(w * w), 0.1, 10, 0, optimizer_type="lamb")
    step_var = helpers.variable("global_step")
    # The LR is computed from exactly one read of the step.
    learning_rate = graph.get_tensor_by_name("learning_rate:0")
    lr_reads = [op for op in _ancestors(learning_rate.op) if op.type == "ReadVariableOp"
                and op.inputs[0] is step_var.handle]
    assert len(lr_reads) == 1

    (update_cond,) = _find_if_ops(graph)
    branch = update_cond._true_graph  # pylint: disable=protected-access
    outer_inputs = list(update_cond.inputs)[1:]  # input 0 is the predicate
    inner_handle = branch.inputs[[i for i, t in enumerate(outer_inputs)
                                  if t is step_var.handle][0]]
    assigns = [op for op in branch.get_operations()
               if op.type == "AssignVariableOp" and op.inputs[0] is inner_handle]
    reads = [op for op in branch.get_operations()
             if op.type == "ReadVariableOp" and op.inputs[0] is inner_handle]
    assert len(assigns) == 1 and reads
    for read in reads:
      assert assigns[0] in _ancestors(read), read.name
    # The increment writes a value computed from the same read as the LR (a data edge).
    feeding = [outer_inputs[i] for i, t in enumerate(branch.inputs)
               if t.op in _ancestors(assigns[0])]
    assert any(t.op is lr_reads[0] or lr_reads[0] in _ancestors(t.op) for t in feeding)


def test_none_gradients_are_warned_by_name(caplog):
  with tf.Graph().as_default():
    used = _tf1.get_variable("used/kernel", initializer=tf.constant([1.0]))
    _tf1.get_variable("unused/kernel", initializer=tf.constant([1.0]))
    _tf1.get_variable("also_unused/bias", initializer=tf.constant([1.0]))
    with caplog.at_level(logging.WARNING):
      optimization.create_optimizer(tf.reduce_sum(used * used), 0.1, 10, 1)
  messages = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
  named = set(messages.split(": ")[-1].split(", "))
  assert named == {"unused/kernel", "also_unused/bias"}


def test_all_none_gradients_raise_naming_variables():
  with tf.Graph().as_default():
    _tf1.get_variable("a/kernel", initializer=tf.constant([1.0]))
    _tf1.get_variable("b/kernel", initializer=tf.constant([1.0]))
    with pytest.raises(ValueError, match="a/kernel.*b/kernel"):
      optimization.create_optimizer(tf.constant(1.0) * 2.0, 0.1, 10, 1)


def test_invalid_arguments():
  with tf.Graph().as_default():
    w = _tf1.get_variable("w", initializer=tf.constant([1.0]))
    loss = tf.reduce_sum(w)
    with pytest.raises(ValueError, match="num_accumulation_steps"):
      optimization.create_optimizer(loss, 0.1, 10, 1, num_accumulation_steps=0)
    with pytest.raises(ValueError, match="optimizer_type"):
      optimization.create_optimizer(loss, 0.1, 10, 1, optimizer_type="sgd")
    with pytest.raises(ValueError, match="use_tpu.*num_accumulation_steps"):
      optimization.create_optimizer(loss, 0.1, 10, 1, use_tpu=True, num_accumulation_steps=2)


def test_amp_without_gpu_trains_in_fp32(caplog):
  with tf.Graph().as_default() as graph:
    w = _tf1.get_variable("w", initializer=tf.constant([1.0]))
    with caplog.at_level(logging.WARNING):
      optimization.create_optimizer(tf.reduce_sum(w * w), 0.1, 10, 1, use_fp16=True)
    # No loss scaling and no fp16 anywhere in the graph.
    assert "loss_scale" not in [op.name for op in graph.get_operations()]
    assert not any(t.dtype == tf.float16 for op in graph.get_operations() for t in op.outputs)
  assert any("no effect without a GPU" in r.getMessage() for r in caplog.records)


def test_use_tpu_wraps_in_cross_shard_optimizer():
  with tf.Graph().as_default() as graph:
    w = _tf1.get_variable("dense/kernel", initializer=tf.constant([1.0, 2.0]))
    train_op = optimization.create_optimizer(tf.reduce_sum(w * w), 0.1, 10, 1,
                                             optimizer_type="lamb", use_tpu=True)
    sums = [op for op in graph.get_operations() if op.type == "CrossReplicaSum"]
    # One cross-core sum per gradient, before the finiteness check (outside the update cond).
    assert len(sums) == 1
    (update_cond,) = _find_if_ops(graph)
    assert sums[0] in _ancestors(update_cond)
    # The op has no CPU kernel, so the graph cannot even be placed here: it needs a TPU.
    with _tf1.Session() as sess:
      with pytest.raises(tf.errors.OpError, match="CrossReplicaSum"):
        sess.run(_tf1.global_variables_initializer())
        sess.run(train_op)


def test_the_original_releases_positional_call():
  # create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu), as the original
  # release's run_classifier.py and run_squad.py call it: AdamWeightDecay, no Horovod.
  w0, grad = np.array([1.0, 2.0]), np.array([0.05, 0.05])  # norm < 1: no clipping
  with tf.Graph().as_default():
    w = _tf1.get_variable("dense/kernel", initializer=tf.constant(w0, tf.float32))
    train_op = optimization.create_optimizer(tf.reduce_sum(w * tf.constant(grad, tf.float32)),
                                             0.1, 10, 2, False)
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      for _ in range(3):
        sess.run(train_op)
      got = sess.run(w)
  expected, m, v = w0, np.zeros(2), np.zeros(2)
  for k in range(1, 4):
    lr = np_schedule(k - 1, 0.1, 10, 2, "adam")
    expected, m, v = np_adam_wd_step(expected, grad, m, v, lr, 0.01)
  np.testing.assert_allclose(got, expected, rtol=1e-6)
  assert not np.allclose(got, w0)

  with tf.Graph().as_default() as graph:
    w = _tf1.get_variable("dense/kernel", initializer=tf.constant([1.0, 2.0]))
    optimization.create_optimizer(tf.reduce_sum(w * w), 0.1, 10, 1, True)
    assert [op for op in graph.get_operations() if op.type == "CrossReplicaSum"]
  with tf.Graph().as_default():
    w = _tf1.get_variable("dense/kernel", initializer=tf.constant([1.0, 2.0]))
    with pytest.raises(ValueError, match="use_tpu given twice"):
      optimization.create_optimizer(tf.reduce_sum(w * w), 0.1, 10, 1, False, use_tpu=True)
