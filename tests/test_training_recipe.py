"""The recipe's levers in process: --pretraining_dropout and --nonext_sentence_loss change what
they should and nothing else (against tests/numpy_bert.py, the independent forward pass), the
linear schedule against numbers computed by hand and in numpy, and --adam_beta2 / --adam_epsilon
reaching the update (against the numpy optimizers of tests/test_optimization.py). The levers end
to end (Horovod with accumulation, packed rows, TPUEstimator) are in
test_run_pretraining_recipe.py."""

import numpy as np
import pytest
import tensorflow as tf

import optimization
from tests import helpers
from tests import test_optimization as reference
from tests import test_training_model_fn as model_fn_test
from tests.test_training_model_fn import checkpoint  # noqa: F401  (a fixture)
from utils.core import graph_names
from utils.model import pretraining
from utils.training import model_fn as model_fn_lib

_tf1 = tf.compat.v1
TRAIN, EVAL = tf.estimator.ModeKeys.TRAIN, tf.estimator.ModeKeys.EVAL
BATCH = model_fn_test.BATCH
build = model_fn_test._build  # pylint: disable=protected-access
numpy_outputs = model_fn_test._numpy_outputs  # pylint: disable=protected-access
# Variables only the next-sentence loss trains: the pooler feeds only its head.
NEXT_SENTENCE_ONLY = ("bert/pooler/", "cls/seq_relationship/")


def _train_losses(init_checkpoint, runs=2, **kwargs):
  """The TRAIN graph's losses over `runs` session runs without an update between (dropout draws
  a new mask each run), its graph's operation names and the initial values of its trainable
  variables."""
  with tf.Graph().as_default():
    _tf1.set_random_seed(3)
    spec, _ = build(TRAIN, init_checkpoint=init_checkpoint, **kwargs)
    names = {op.name for op in _tf1.get_default_graph().get_operations()}
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      initial = {v.op.name: sess.run(v) for v in _tf1.trainable_variables()}
      losses = [sess.run(spec.loss) for _ in range(runs)]
  return losses, names, initial


def test_pretraining_dropout_zero_trains_on_numpys_deterministic_forward():
  assert model_fn_test.CONFIG.hidden_dropout_prob == 0.1  # the file's dropout is on
  without, _, initial = _train_losses(None, training_dropout=0.0)
  expected = numpy_outputs(initial)
  target = expected["mlm_loss"] + expected["nsp_loss"]
  np.testing.assert_allclose(without, [target, target], rtol=1e-5)
  # Only the training graph's configuration changes: the caller's keeps its values.
  assert model_fn_test.CONFIG.hidden_dropout_prob == 0.1
  assert model_fn_test.CONFIG.attention_probs_dropout_prob == 0.1
  # A rate of its own: dropout again, a new mask every run (here stronger than the file's; the
  # file's own rate when the flag is not given: test_training_model_fn.py).
  strong, _, initial = _train_losses(None, training_dropout=0.5)
  target = sum(numpy_outputs(initial)[name] for name in ("mlm_loss", "nsp_loss"))
  assert strong[0] != strong[1] and abs(strong[0] - target) > 1e-4


def test_pretraining_dropout_leaves_evaluation_as_it_was(graph, checkpoint):  # noqa: F811
  spec, _ = build(EVAL, init_checkpoint=checkpoint["prefix"], training_dropout=0.5)
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    loss, again = sess.run(spec.loss), sess.run(spec.loss)
  assert loss == again  # no dropout in evaluation
  expected = numpy_outputs(checkpoint["weights"])
  np.testing.assert_allclose(loss, expected["mlm_loss"] + expected["nsp_loss"], rtol=1e-5)


def test_with_training_dropout_copies_the_config():
  config = helpers.tiny_config()
  assert model_fn_lib.with_training_dropout(config, None) is config
  copy = model_fn_lib.with_training_dropout(config, 0.0)
  assert copy is not config and copy.to_dict() == dict(
      config.to_dict(), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def test_without_the_next_sentence_loss_the_loss_is_numpys_masked_lm_loss():
  no_labels = {k: v for k, v in BATCH.items() if k != "next_sentence_labels"}
  head = pretraining.pretraining_head(model_fn_test.CONFIG, next_sentence_loss=False)
  losses, names, initial_off = _train_losses(None, head_fn=head, features=no_labels,
                                             training_dropout=0.0)
  expected = numpy_outputs(initial_off)
  np.testing.assert_allclose(losses, [expected["mlm_loss"]] * 2, rtol=1e-5)
  assert graph_names.MLM_LOSS in names and graph_names.NSP_LOSS not in names
  assert pretraining.pretraining_losses(False) == (graph_names.MLM_LOSS,)
  # The same model is built, initialised bit for bit alike (one graph seed), as with the loss.
  with_nsp, _, initial_on = _train_losses(None, training_dropout=0.0)
  assert sorted(initial_off) == sorted(initial_on)
  assert all(np.array_equal(initial_off[n], initial_on[n]) for n in initial_on)
  np.testing.assert_allclose(with_nsp, [expected["mlm_loss"] + expected["nsp_loss"]] * 2,
                             rtol=1e-5)


def test_without_the_next_sentence_loss_one_update_trains_all_but_its_head(graph):
  head = pretraining.pretraining_head(model_fn_test.CONFIG, next_sentence_loss=False)
  spec, _ = build(TRAIN, head_fn=head, training_dropout=0.0)
  trainable = _tf1.trainable_variables()
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    before = sess.run(trainable)
    sess.run(spec.train_op)
    after = sess.run(trainable)
  unchanged = sorted(v.op.name for v, old, new in zip(trainable, before, after)
                     if np.array_equal(old, new))
  assert unchanged and all(name.startswith(NEXT_SENTENCE_ONLY) for name in unchanged)
  assert len(unchanged) == sum(v.op.name.startswith(NEXT_SENTENCE_ONLY) for v in trainable)
  # No slots for what is not trained.
  slots = {v.op.name for v in _tf1.global_variables() if v.op.name.endswith("/adam_m")}
  assert not any(name.startswith(NEXT_SENTENCE_ONLY) for name in slots) and slots


def test_without_the_next_sentence_loss_evaluation_reports_the_masked_lm_only(
    graph, checkpoint):  # noqa: F811
  head = pretraining.pretraining_head(model_fn_test.CONFIG, next_sentence_loss=False)
  spec, _ = build(EVAL, init_checkpoint=checkpoint["prefix"], head_fn=head)
  assert set(spec.eval_metric_ops) == {"masked_lm_accuracy", "masked_lm_loss"}
  with _tf1.Session() as sess:
    sess.run([_tf1.global_variables_initializer(), _tf1.local_variables_initializer()])
    sess.run({k: op for k, (_, op) in spec.eval_metric_ops.items()})
    metrics = sess.run({k: value for k, (value, _) in spec.eval_metric_ops.items()})
    loss = sess.run(spec.loss)
  expected = numpy_outputs(checkpoint["weights"])
  weights = BATCH["masked_lm_weights"].reshape(-1).astype(np.float64)
  right = expected["mlm_log_probs"].argmax(-1) == BATCH["masked_lm_ids"].reshape(-1)
  np.testing.assert_allclose(loss, expected["mlm_loss"], rtol=1e-5)
  np.testing.assert_allclose(metrics["masked_lm_loss"],
                             (weights * expected["mlm_per_example"]).sum() / weights.sum(),
                             rtol=1e-5)
  np.testing.assert_allclose(metrics["masked_lm_accuracy"], (weights * right).sum() / weights.sum(),
                             rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# The schedule and the moments

def np_linear_schedule(step, peak, train_steps, warmup):
  """Linear warmup to `peak`, then linearly to 0 at `train_steps`."""
  if step < warmup:
    return peak * step / warmup
  return peak * max(0.0, train_steps - step) / (train_steps - warmup)


@pytest.mark.parametrize("optimizer_type", ["lamb", "adam"])
def test_linear_schedule_matches_numbers_by_hand(optimizer_type):
  schedule = optimization.Schedule(optimizer_type, 4e-3, 100, 10, lr_schedule="linear")
  steps = [0, 5, 10, 11, 55, 99, 100, 150]
  with tf.Graph().as_default():
    step = _tf1.placeholder(tf.int64, [])
    rate = schedule.learning_rate_at(step)
    with _tf1.Session() as sess:
      got = [float(sess.run(rate, {step: s})) for s in steps]
  # By hand: half of the peak half-way through warmup; the peak at its end; then (100 - s) / 90
  # of it: 89 / 90, a half at 55, 1 / 90 at 99, 0 at and after the end.
  by_hand = [0.0, 2e-3, 4e-3, 4e-3 * 89 / 90, 2e-3, 4e-3 / 90, 0.0, 0.0]
  # float32: 1 - 99 / 100 loses digits to cancellation, as the recipe's schedule does.
  np.testing.assert_allclose(got, by_hand, rtol=1e-5, atol=1e-9)
  np.testing.assert_allclose(got, [np_linear_schedule(s, 4e-3, 100, 10) for s in steps],
                             rtol=1e-5, atol=1e-9)


def test_the_recipe_schedule_stays_each_optimizers_own():
  for optimizer_type in ("lamb", "adam"):
    recipe = optimization.Schedule(optimizer_type, 4e-3, 100, 10)
    assert recipe.lr_schedule == "recipe"
    with tf.Graph().as_default():
      step = _tf1.placeholder(tf.int64, [])
      rate = recipe.learning_rate_at(step)
      with _tf1.Session() as sess:
        got = float(sess.run(rate, {step: 55}))
    assert got == pytest.approx(reference.np_schedule(55, 4e-3, 100, 10, optimizer_type),
                                rel=1e-6)
  # LAMB's recipe: sqrt decay from the peak (4e-3 x sqrt(0.45)); linear: half of the peak.
  assert reference.np_schedule(55, 4e-3, 100, 10, "lamb") == pytest.approx(4e-3 * 0.45 ** 0.5)


def test_the_optimizers_slots_come_from_the_description():
  for optimizer_type in optimization.OPTIMIZER_TYPES:
    assert optimization.Schedule(optimizer_type, 1e-3, 10, 1).slot_names == ("adam_m", "adam_v")
  with tf.Graph().as_default():
    var = _tf1.get_variable("dense/kernel", shape=[2, 2])
    schedule = optimization.Schedule("adam", 1e-3, 10, 1)
    schedule.optimizer(1e-3).create_slots([var])
    names = sorted(v.op.name for v in _tf1.global_variables())
  assert names == ["dense/kernel"] + ["dense/kernel/" + s for s in schedule.slot_names]


def _trained(schedule, w0, grad, updates):
  """`optimization.build_train_op` on loss = sum(w * grad) (gradient `grad`, norm < 1: no
  clipping) for variable `dense/kernel`; the weights after each update."""
  with tf.Graph().as_default():
    var = _tf1.get_variable("dense/kernel", initializer=tf.constant(w0, tf.float32))
    loss = tf.reduce_sum(var * tf.constant(grad, tf.float32))
    # The weights after the update: read once the train op has run.
    with tf.control_dependencies([optimization.build_train_op(loss, schedule)]):
      after = tf.identity(var.read_value())
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      return [sess.run(after) for _ in range(updates)]


@pytest.mark.parametrize("optimizer_type", ["lamb", "adam"])
def test_beta2_and_epsilon_reach_the_update(optimizer_type):
  w0, grad = np.array([0.5, -1.0, 0.25]), np.array([0.3, 0.05, -0.2])
  peak, steps, beta2, epsilon = 1e-2, 50, 0.9, 1e-2
  schedule = optimization.Schedule(optimizer_type, peak, steps, 0, lr_schedule="linear",
                                   adam_beta2=beta2, adam_epsilon=epsilon)
  got = _trained(schedule, w0, grad, 3)
  w, m, v = w0.copy(), np.zeros(3), np.zeros(3)
  for t in (1, 2, 3):
    lr = np_linear_schedule(t - 1, peak, steps, 0)  # update t uses the rate of step t - 1
    if optimizer_type == "lamb":
      w, m, v = reference.np_lamb_step(w, grad, m, v, t, lr, 0.01, b2=beta2, eps=epsilon)
    else:
      w, m, v = reference.np_adam_wd_step(w, grad, m, v, lr, 0.01, b2=beta2, eps=epsilon)
    np.testing.assert_allclose(got[t - 1], w, rtol=1e-5, err_msg="update %d" % t)
  # The recipe's values give other weights: the settings are not ignored.
  recipe = _trained(optimization.Schedule(optimizer_type, peak, steps, 0, lr_schedule="linear"),
                    w0, grad, 3)
  assert not np.allclose(recipe[2], got[2], rtol=1e-4)
