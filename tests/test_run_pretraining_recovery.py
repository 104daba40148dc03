"""Recovery drills, run as a user would: a full disk (a small tmpfs the test mounts), a truncated
newest checkpoint, a diverged run and the advice it prints followed as printed.

Each drill asserts what the user sees (exit code, the one error line, files, log lines). Tiny
models, few steps, outer timeouts on every process. The full-disk drills mount a tmpfs and so
need root: skipped otherwise, a failure under CI (which runs as root), as the multi-node tests.
"""

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tests.cluster.conftest import require_root
from tests.test_run_pretraining import common_flags
from tests.test_run_pretraining import data  # noqa: F401  (the module's data fixture)
from tests.test_run_pretraining import read_dllog
from tests.test_run_pretraining import SCRIPT
from tests.test_run_pretraining import run_job
from tests.test_run_pretraining_launchers import _horovodrun

SEQ, PRED = 32, 5
# A vocabulary large enough that a checkpoint (weights and LAMB moments) is 3.4 MB.
BIG_VOCAB = 8000
# Free bytes left on the small disk: the run's events file (1.3 MB) and two checkpoints fit, the
# third does not.
FREE_FOR_THE_RUN = 8_200_000


@pytest.fixture(scope="module")
def big_vocab(tmp_path_factory):
  root = tmp_path_factory.mktemp("big_vocab")
  config = dict(vocab_size=BIG_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                initializer_range=0.02)
  (root / "bert_config.json").write_text(json.dumps(config))
  (root / "train").mkdir()
  helpers.write_batch_records(root / "train" / "part-0.tfrecord",
                              helpers.random_batch(np.random.RandomState(0), 64, SEQ, BIG_VOCAB,
                                                   PRED))
  return {"config": str(root / "bert_config.json"), "train_dir": str(root / "train")}


@pytest.fixture
def small_disk(tmp_path):
  """A 16 MB tmpfs mounted for the test, filled by a ballast file to FREE_FOR_THE_RUN bytes
  free; yields (mount point, ballast path); unmounted afterwards."""
  require_root()
  mount = tmp_path / "disk"
  mount.mkdir()
  subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=True,
                 timeout=30)
  try:
    stat = os.statvfs(str(mount))
    ballast = mount / "ballast"
    with open(ballast, "wb") as f:
      f.write(b"\0" * (stat.f_bavail * stat.f_frsize - FREE_FOR_THE_RUN))
    yield mount, ballast
  finally:
    if subprocess.run(["umount", str(mount)], timeout=60).returncode != 0:
      subprocess.run(["umount", "-l", str(mount)], timeout=60)


def _disk_flags(big_vocab, out, **overrides):
  # Two kept checkpoints: after the ballast goes, the resumed run (its own events file, one
  # checkpoint written before the oldest is deleted) fits.
  return common_flags(dict(big_vocab), out, do_train=True, num_train_steps=8,
                      save_checkpoints_steps=2, keep_checkpoint_max=2, **overrides)


def _error_lines(text):
  return [line for line in text.splitlines() if "error: " in line]


def _bytes(text):
  """'3.43 MB' -> 3430000."""
  number, unit = text.split()
  return float(number) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]


def _checkpoint_size(prefix):
  directory = os.path.dirname(prefix)
  return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)
             if name.startswith(os.path.basename(prefix) + "."))


def _read_all(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _step_lines(log_path):
  return [line for line in read_dllog(log_path) if isinstance(line["step"], int)]


@pytest.mark.e2e
def test_full_disk_one_line_partial_removed_relaunch_refused_then_resumed(big_vocab, small_disk,
                                                                         tmp_path):
  mount, ballast = small_disk
  out = mount / "out"
  args = _disk_flags(big_vocab, out)
  first = run_job(args, check=False, timeout=300)
  assert first.returncode == 2, first.stderr[-4000:]
  newest = tf.train.latest_checkpoint(str(out))
  assert newest is not None, first.stderr[-3000:]
  newest_step = int(newest.rsplit("-", 1)[1])
  # The start-up warning: the kept checkpoints cannot fit.
  assert "--keep_checkpoint_max=2" in first.stderr
  lines = _error_lines(first.stderr)
  assert len(lines) == 1, first.stderr[-4000:]
  line = lines[0]
  assert "no space left on the device of %s (writing checkpoint model.ckpt-%d)" % (
      out, newest_step + 2) in line
  needed = re.search(r"a checkpoint needs about ([\d.]+ [kMG]?B)", line).group(1)
  assert abs(_bytes(needed) - _checkpoint_size(newest)) <= 0.005 * _checkpoint_size(newest)
  free = _bytes(re.search(r"([\d.]+ [kMG]?B) free", line).group(1))
  stat = os.statvfs(str(mount))
  assert abs(free - stat.f_bavail * stat.f_frsize) < 50e3 and free < _bytes(needed)
  assert "removed the partial model.ckpt-%d_temp" % (newest_step + 2) in line
  # Nor TensorFlow's native line of the failed save ("OP_REQUIRES failed at
  # save_restore_v2_ops.cc: RESOURCE_EXHAUSTED"): the line above says it.
  for text in ("Traceback", "report_tensor_allocations_upon_oom", "OOM", "OP_REQUIRES",
               "RESOURCE_EXHAUSTED"):
    assert text not in first.stderr, first.stderr[-4000:]
  # No partial checkpoint left, the index names complete ones only and every tensor reads back.
  assert not [name for name in os.listdir(out) if "_temp" in name]
  assert int(_read_all(newest)["global_step"]) == newest_step
  state = tf.train.get_checkpoint_state(str(out))
  for path in state.all_model_checkpoint_paths:
    assert "_temp" not in path and os.path.exists(path + ".index"), path
    _read_all(path)
  log_lines = len(read_dllog(out / "bert_dllog.json"))

  relaunch = run_job(args, check=False, timeout=300)
  assert relaunch.returncode == 2
  assert _error_lines(relaunch.stderr) == [
      line for line in relaunch.stderr.splitlines() if "the next checkpoint needs about" in line]
  assert len(_error_lines(relaunch.stderr)) == 1 and "Traceback" not in relaunch.stderr
  assert "%s has " % out in relaunch.stderr
  # Refused before training: the log did not grow.
  assert len(read_dllog(out / "bert_dllog.json")) == log_lines

  ballast.unlink()
  resumed = run_job(args, timeout=300)
  assert "error" not in "\n".join(_error_lines(resumed.stderr))
  restart = [line for line in read_dllog(out / "bert_dllog.json") if line["step"] == "RESTART"]
  assert restart[-1]["data"] == {"resumed_from_step": newest_step}
  assert int(_read_all(tf.train.latest_checkpoint(str(out)))["global_step"]) == 8


@pytest.mark.e2e
def test_full_disk_under_horovod_is_one_line_from_rank_0(big_vocab, small_disk):
  mount, _ = small_disk
  out = mount / "out"
  proc = run_job(_disk_flags(big_vocab, out, horovod=True), launcher=_horovodrun(), check=False,
                 timeout=400)
  output = proc.stdout + proc.stderr
  assert proc.returncode != 0
  rank0 = [line for line in output.splitlines()
           if line.startswith("[0]") and "error: " in line]
  assert len(rank0) == 1 and "no space left on the device of %s" % out in rank0[0], output[-5000:]
  # No rank prints a traceback (horovodrun, the launcher, prints its own).
  assert not re.search(r"^\[\d+\]<std(out|err)>:Traceback", output, re.M), output[-5000:]
  assert not re.search(r"^\[\d+\]<stderr>:.*(OP_REQUIRES|RESOURCE_EXHAUSTED)", output, re.M), (
      output[-5000:])
  rank1 = [line for line in output.splitlines() if line.startswith("[1]") and "error: " in line]
  assert len(rank1) <= 1
  assert not [name for name in os.listdir(out) if "_temp" in name]


@pytest.mark.e2e
def test_truncated_newest_checkpoint_resumes_from_the_previous_one(data, tmp_path):
  out = tmp_path / "out"
  run_job(common_flags(data, out, do_train=True, num_train_steps=4), timeout=240)
  data_file = out / "model.ckpt-4.data-00000-of-00001"
  size = data_file.stat().st_size
  with open(data_file, "r+b") as f:
    f.truncate(size // 2)
  proc = run_job(common_flags(data, out, do_train=True, num_train_steps=6), timeout=240)
  assert "Traceback" not in proc.stderr
  notes = [line for line in proc.stderr.splitlines() if "is unreadable" in line]
  assert len(notes) == 1
  assert "%s: %d bytes, its index expects %d (truncated)" % (data_file, size // 2, size) in notes[0]
  assert "resuming from %s" % (out / "model.ckpt-2") in notes[0]
  restart = [line for line in read_dllog(out / "bert_dllog.json") if line["step"] == "RESTART"]
  assert restart == [dict(restart[0], data={"resumed_from_step": 2})]
  assert [line["step"] for line in _step_lines(out / "bert_dllog.json")] == [1, 2, 3, 4, 3, 4, 5,
                                                                             6]
  assert int(_read_all(tf.train.latest_checkpoint(str(out)))["global_step"]) == 6

  # A step without a checkpoint: exit 2, the steps there are listed.
  proc = run_job(common_flags(data, out, do_train=True, num_train_steps=8, resume_from_step=3),
                 check=False, timeout=240)
  assert proc.returncode == 2 and "Traceback" not in proc.stderr
  assert _error_lines(proc.stderr) == [
      "run_pretraining.py: error: --resume_from_step=3: %s has no checkpoint of step 3; its "
      "checkpoints are of steps 2, 4, 6" % out]


def _largest_weight(prefix):
  values = _read_all(prefix)
  return max(float(np.max(np.abs(v))) for name, v in values.items() if name.startswith("bert/"))


def _run_jobs_together(argument_lists, timeout=300):
  """Runs run_pretraining.py with each argument list at once; returns (returncode, stderr) of
  each, in order."""
  return [(code, err) for code, _, err in helpers.run_side_by_side(
      [[sys.executable, SCRIPT] + args for args in argument_lists], timeout)]


@pytest.mark.e2e
def test_divergence_names_the_checkpoint_before_it_and_the_advice_works(data, tmp_path):
  # fp16 and fp32 side by side. Warm-up 1: the first update has learning rate 0, the second
  # blows the weights up.
  precisions = {"fp16": {"manual_fp16": True}, "fp32": {}}
  outs = {name: tmp_path / name for name in precisions}
  diverged = dict(zip(precisions, _run_jobs_together([
      common_flags(data, outs[name], do_train=True, num_train_steps=6, save_checkpoints_steps=1,
                   learning_rate=1e6, **flags) for name, flags in precisions.items()])))
  advice = {}
  for name, (code, stderr) in diverged.items():
    out = outs[name]
    assert code == 1, (name, stderr[-4000:])
    lines = _error_lines(stderr)
    assert len(lines) == 1 and "Traceback" not in stderr, name
    flag = re.search(r"run the same command with (--resume_from_step=(\d+))", lines[0])
    assert flag, (name, lines[0])
    step = int(flag.group(2))
    named = str(out / ("model.ckpt-%d" % step))
    assert "resume from %s" % named in lines[0]
    # The named checkpoint holds sane weights, every newer one blown-up weights.
    assert _largest_weight(named) < 10, name
    newer = [p for p in tf.train.get_checkpoint_state(str(out)).all_model_checkpoint_paths
             if int(p.rsplit("-", 1)[1]) > step]
    assert newer and all(_largest_weight(p) > 1e3 for p in newer), name
    advice[name] = (flag.group(1), step)

  # The advice as printed, with a sane learning rate.
  followed = dict(zip(precisions, _run_jobs_together([
      common_flags(data, outs[name], do_train=True, num_train_steps=6, save_checkpoints_steps=1,
                   learning_rate=1e-3, **flags) + [advice[name][0]]
      for name, flags in precisions.items()])))
  for name, (code, stderr) in followed.items():
    out, step = outs[name], advice[name][1]
    assert code == 0 and "Traceback" not in stderr, (name, stderr[-4000:])
    log = read_dllog(out / "bert_dllog.json")
    restart = max(i for i, line in enumerate(log) if line["step"] == "RESTART")
    assert log[restart]["data"] == {"resumed_from_step": step}
    after = [line for line in log[restart:] if isinstance(line["step"], int)]
    assert [line["step"] for line in after] == list(range(step + 1, 7))
    assert all(math.isfinite(line["data"]["total_loss"]) for line in after)
    assert _largest_weight(tf.train.latest_checkpoint(str(out))) < 10
