"""Recovery in-process: recognising a full disk, choosing the checkpoint to resume from, and the
divergence advice built from the checkpoint health record (the hook that writes it:
tests/test_training_health.py).

The same behaviour as users meet it (real processes, a small tmpfs, a diverging run) is drilled
in tests/test_run_pretraining_recovery.py.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from utils.checkpoints import contents
from utils.checkpoints import recovery
from utils.core import errors
from utils.runtime import disk_space
from utils.training import messages

_tf1 = tf.compat.v1


# ---------------------------------------------------------------------------------------------
# Full disks

def test_space_problem_refuses_a_checkpoint_that_cannot_fit_and_warns_for_the_kept_ones(
    tmp_path, monkeypatch):
  monkeypatch.setattr(disk_space, "free_bytes", lambda path: 10 * 10**6)
  error, warning = recovery.space_problem(str(tmp_path), 11 * 10**6, 5, 0)
  assert error and "10 MB free" in error and "about 11 MB" in error and warning is None
  # 3 MB checkpoints, 5 kept, 2 there: 4 more (one written before the oldest goes) = 12 MB.
  error, warning = recovery.space_problem(str(tmp_path), 3 * 10**6, 5, 2)
  assert error is None and "12 MB" in warning and "--keep_checkpoint_max=5" in warning
  assert recovery.space_problem(str(tmp_path), 3 * 10**6, 2, 1) == (None, None)


def test_remove_partial_save_keeps_the_complete_checkpoints(tmp_path):
  prefixes = helpers.write_checkpoints(tmp_path, [2, 4])
  temp = tmp_path / "model.ckpt-6_temp"
  temp.mkdir()
  (temp / "part-00000-of-00001.data-00000-of-00001.tempstate1").write_bytes(b"x" * 100)
  # A merge that failed after moving the data shard: a data file without its index.
  (tmp_path / "model.ckpt-6.data-00000-of-00001").write_bytes(b"y" * 100)
  removed = recovery.remove_partial_save(str(tmp_path))
  assert sorted(os.path.basename(p) for p in removed) == [
      "model.ckpt-6.data-00000-of-00001", "model.ckpt-6_temp"]
  assert not temp.exists()
  assert tf.train.latest_checkpoint(str(tmp_path)) == prefixes[-1]
  assert recovery.checkpoint_problem(prefixes[-1]) is None


# ---------------------------------------------------------------------------------------------
# The checkpoint to resume from

def test_checkpoint_problem_names_a_truncated_or_corrupt_data_file(tmp_path):
  prefix = helpers.write_checkpoints(tmp_path, [1])[0]
  data = prefix + ".data-00000-of-00001"
  size = os.path.getsize(data)
  # 64 x 32 float32 and one int64.
  assert size == 64 * 32 * 4 + 8
  assert recovery.checkpoint_problem(prefix) is None
  raw = open(data, "rb").read()
  with open(data, "wb") as f:
    f.write(raw[:1000])
  assert recovery.checkpoint_problem(prefix) == (
      "%s: 1000 bytes, its index expects %d (truncated)" % (data, size))
  flipped = bytearray(raw)
  flipped[100] ^= 0xFF
  with open(data, "wb") as f:
    f.write(bytes(flipped))
  problem = recovery.checkpoint_problem(prefix)
  assert problem is not None and problem.startswith(data)
  os.remove(prefix + ".index")
  assert recovery.checkpoint_problem(prefix) == "%s.index: missing" % prefix


def test_prepare_resume_steps_back_from_an_unreadable_newest_checkpoint(tmp_path):
  prefixes = helpers.write_checkpoints(tmp_path, [2, 4, 6])
  (tmp_path / "model.ckpt-8_temp").mkdir()
  with open(prefixes[-1] + ".data-00000-of-00001", "r+b") as f:
    f.truncate(10)
  step, note = recovery.prepare_resume(str(tmp_path))
  assert step == 4
  assert "model.ckpt-6 is unreadable" in note and "model.ckpt-6.data-00000-of-00001" in note
  assert "resuming from %s" % prefixes[1] in note
  assert tf.train.latest_checkpoint(str(tmp_path)) == prefixes[1]
  assert sorted(os.listdir(tmp_path / "unreadable")) == [
      "model.ckpt-6.data-00000-of-00001", "model.ckpt-6.index"]
  assert not (tmp_path / "model.ckpt-8_temp").exists()
  # Nothing more to do on the next start.
  assert recovery.prepare_resume(str(tmp_path)) == (4, None)


@pytest.mark.parametrize("kill_lands", ["before the index update", "after the index update",
                                        "while the data is written"])
def test_a_kill_on_either_side_of_the_index_update_resumes_from_the_newest_complete_save(
    tmp_path, kill_lands):
  # A save writes the checkpoint's files, then rewrites the `checkpoint` index to name it.
  prefixes = helpers.write_checkpoints(tmp_path, [10])
  newest = str(tmp_path / "model.ckpt-15")
  contents.write_checkpoint(newest, {"bert/w": np.ones((64, 32), np.float32),
                                     "global_step": np.int64(15)})
  if kill_lands == "after the index update":
    _tf1.train.update_checkpoint_state(str(tmp_path), newest,
                                       all_model_checkpoint_paths=prefixes + [newest])
  elif kill_lands == "while the data is written":
    with open(newest + ".data-00000-of-00001", "r+b") as f:
      f.truncate(100)
  step, note = recovery.prepare_resume(str(tmp_path))
  expected = {"before the index update": (15, "resuming from %s, complete but not yet in the "
                                              "checkpoint index" % newest),
              "after the index update": (15, None),
              "while the data is written": (10, "model.ckpt-15 is unreadable")}[kill_lands]
  assert step == expected[0]
  if expected[1] is None:
    assert note is None
  else:
    assert expected[1] in note
  assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / ("model.ckpt-%d" % step))
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path)))
  assert reader.get_tensor("global_step") == step


def test_prepare_resume_steps_back_when_the_index_names_missing_files(tmp_path):
  prefixes = helpers.write_checkpoints(tmp_path, [2, 4])
  for path in recovery.prefix_files(prefixes[-1]):
    os.remove(path)
  step, note = recovery.prepare_resume(str(tmp_path))
  assert step == 2 and "names model.ckpt-4, whose files are missing" in note
  assert tf.train.latest_checkpoint(str(tmp_path)) == prefixes[0]


def test_prepare_resume_refuses_when_no_checkpoint_is_readable(tmp_path):
  for prefix in helpers.write_checkpoints(tmp_path, [2]):
    with open(prefix + ".data-00000-of-00001", "r+b") as f:
      f.truncate(0)
  with pytest.raises(errors.UsageError, match="--resume_from_step=0"):
    recovery.prepare_resume(str(tmp_path))


def test_resume_from_step_sets_the_newer_checkpoints_aside(tmp_path):
  prefixes = helpers.write_checkpoints(tmp_path, [2, 4, 6])
  recovery.write_health(str(tmp_path), [{"step": s, "loss": 1.0, "global_norm": 1.0,
                                         "finite": True} for s in (2, 4, 6)])
  step, note = recovery.prepare_resume(str(tmp_path), resume_from_step=2)
  assert step == 2 and "set_aside_after_step_2" in note
  assert tf.train.latest_checkpoint(str(tmp_path)) == prefixes[0]
  state = tf.train.get_checkpoint_state(str(tmp_path))
  assert list(state.all_model_checkpoint_paths) == [prefixes[0]]
  aside = tmp_path / "set_aside_after_step_2"
  assert sorted(os.listdir(aside)) == sorted(
      ["checkpoint_health.json", "model.ckpt-4.data-00000-of-00001", "model.ckpt-4.index",
       "model.ckpt-6.data-00000-of-00001", "model.ckpt-6.index"])
  assert [r["step"] for r in recovery.read_health(str(tmp_path))] == [2]
  assert [r["step"] for r in recovery.read_health(str(aside))] == [4, 6]


def test_resume_from_a_step_without_checkpoint_lists_the_steps(tmp_path):
  helpers.write_checkpoints(tmp_path, [2, 4])
  with pytest.raises(errors.UsageError) as e:
    recovery.prepare_resume(str(tmp_path), resume_from_step=3)
  assert str(e.value) == ("--resume_from_step=3: %s has no checkpoint of step 3; its checkpoints "
                          "are of steps 2, 4" % tmp_path)
  # Nothing was moved.
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-4")


def test_resume_from_step_zero_starts_afresh(tmp_path):
  helpers.write_checkpoints(tmp_path, [2])
  assert recovery.prepare_resume(str(tmp_path), resume_from_step=0)[0] == 0
  assert tf.train.latest_checkpoint(str(tmp_path)) is None
  assert not (tmp_path / "checkpoint").exists()


# ---------------------------------------------------------------------------------------------
# The divergence advice

def test_divergence_advice_without_an_earlier_checkpoint_says_start_again(tmp_path):
  helpers.write_checkpoints(tmp_path, [2])
  config = helpers.job_config(["--output_dir=%s" % tmp_path, "--learning_rate=1.0"])
  message = str(messages.nan_loss_error(config, 2, bad_step=2))
  assert "--resume_from_step=0" in message
  # The newest checkpoint is from before the divergence: the same command resumes from it.
  message = str(messages.nan_loss_error(config, 2, bad_step=3))
  assert "running the same command again resumes from the newest checkpoint (step 2" in message
