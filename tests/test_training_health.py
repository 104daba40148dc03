"""utils/training/health.py: the checkpoint health hook fed the run facts of a real
`hooks.UpdateSource`, every streak, explosion and record worked out by hand.

The same behaviour as users meet it (a diverging run and its advice) is drilled in
tests/test_run_pretraining_recovery.py.
"""

import collections
import json

import pytest
import tensorflow as tf

from tests import helpers
from utils.checkpoints import recovery
from utils.training import health
from utils.training import hooks
from utils.training import messages

_tf1 = tf.compat.v1
RunValues = collections.namedtuple("RunValues", ["results"])


def _health_hook(directory, loss_scaled=False):
  """A CheckpointHealthHook and its UpdateSource, begun on a graph with the per-run tensors and
  a session started at global step 0; returns the hook."""
  graph = tf.Graph()
  with graph.as_default():
    step = _tf1.train.get_or_create_global_step()
    for name, dtype in (("total_loss", tf.float32), ("step_update", tf.int64),
                        ("global_norm", tf.float32)) + ((("loss_scale", tf.float32),)
                                                        if loss_scaled else ()):
      tf.identity(tf.constant(0, dtype), name=name)
    hook = health.CheckpointHealthHook(hooks.UpdateSource(1), directory)
    hook.updates.begin()
    hook.begin()
    with _tf1.Session() as session:
      session.run(step.initializer)
      hook.updates.after_create_session(session, None)
      hook.after_create_session(session, None)
  return hook


def _run(hook, loss, step, norm):
  """One session run whose fetched values are these, through the source and then the hook."""
  hook.updates.after_run(None, RunValues({"total_loss": loss, "step_update": step,
                                          "global_norm": norm}))
  hook.after_run(None, None)


def test_health_names_the_weights_that_went_bad_and_the_checkpoint_before(tmp_path):
  helpers.write_checkpoints(tmp_path, [1, 2])
  hook = _health_hook(str(tmp_path))
  _run(hook, 9.6, 1, 2.4)
  hook.listener.after_save(None, 1)
  _run(hook, 9.7, 2, 2.5)
  hook.listener.after_save(None, 2)
  assert hook.bad_step is None
  # The weights of step 2 give a NaN loss: the update is skipped, the step stays 2.
  _run(hook, float("nan"), 2, float("nan"))
  assert hook.bad_step == 2
  records = json.loads((tmp_path / "checkpoint_health.json").read_text())["checkpoints"]
  assert [(r["step"], r["loss"], r["finite"]) for r in records] == [
      (1, pytest.approx(9.6), True), (2, pytest.approx(9.7), True)]
  step, prefix, record = recovery.newest_good_checkpoint(str(tmp_path), hook.bad_step)
  assert step == 1 and prefix.endswith("model.ckpt-1")
  config = helpers.job_config(["--output_dir=%s" % tmp_path, "--learning_rate=1e6"])
  message = str(messages.nan_loss_error(config, 2, bad_step=hook.bad_step))
  assert "from the weights of step 2 on" in message
  assert "resume from %s (loss 9.6, gradient norm 2.4)" % prefix in message
  assert "--resume_from_step=1" in message


def test_a_loss_that_explodes_before_it_is_nan_marks_the_weights_before_it(tmp_path):
  # lr 1e6 in fp32: update 2 blows the weights up; their loss (update 3) is 1e11, still finite,
  # and only update 4's is NaN. The checkpoint of step 2 holds the blown-up weights.
  helpers.write_checkpoints(tmp_path, [1, 2, 3])
  hook = _health_hook(str(tmp_path))
  for step, loss, norm in ((1, 5.50, 2.6), (2, 5.54, 2.9), (3, 1.0e11, 6.0e6)):
    _run(hook, loss, step, norm)
    hook.listener.after_save(None, step)
  assert hook.bad_step == 2  # 1e11 > 100 x 5.52: the weights of step 2 went bad
  _run(hook, float("nan"), 3, float("nan"))
  assert hook.bad_step == 2  # the NaN continues the streak
  records = json.loads((tmp_path / "checkpoint_health.json").read_text())["checkpoints"]
  assert [(r["step"], r["finite"], r["exploded"]) for r in records] == [
      (1, True, False), (2, True, False), (3, True, True)]
  step, prefix, _ = recovery.newest_good_checkpoint(str(tmp_path), hook.bad_step)
  assert step == 1 and prefix.endswith("model.ckpt-1")
  # Without a known bad step the exploded record is passed over too.
  assert recovery.newest_good_checkpoint(str(tmp_path), None)[0] == 2


def test_an_ordinary_spike_is_not_an_explosion(tmp_path):
  hook = _health_hook(None)
  # Fine-tuning near a loss of 0: a batch with loss 50 is under 100 x max(median, 1).
  for step, loss in enumerate([0.02, 0.01, 0.015, 50.0, 0.01], start=1):
    _run(hook, loss, step, 1.0)
    assert hook.bad_step is None, (step, loss)
  assert not hook.loss_exploded(100.0) and hook.loss_exploded(100.5)
  # The first update has nothing to compare with.
  assert not _health_hook(None).loss_exploded(1e30)


def test_health_streak_ends_with_a_finite_applied_update(tmp_path):
  hook = _health_hook(str(tmp_path), loss_scaled=True)
  _run(hook, 9.6, 0, float("inf"))   # a loss-scale overflow while the scale settles
  assert hook.bad_step == 0
  _run(hook, 9.6, 1, 2.0)
  assert hook.bad_step is None


def test_fp32_run_whose_updates_keep_being_skipped_is_stopped(tmp_path):
  hook = _health_hook(None)
  _run(hook, 9.6, 1, 2.0)
  _run(hook, 50.0, 2, 1e9)
  for _ in range(health.SKIP_LIMIT_FP32 - 1):
    _run(hook, 300.0, 2, float("inf"))
  with pytest.raises(health.UpdatesSkippedError):
    _run(hook, 300.0, 2, float("inf"))
  assert hook.bad_step == 2 and hook.skipped_too_often
