"""--deterministic_run end to end: bit-identical per-step losses run after run (fp32 and fp16, with
accumulation, one process, horovodrun --gloo and mpirun), dropout on, and exact resume after a kill.

The losses are compared with the golden-loss tool (utils/regression.py) at tolerance 0. Runs of the
same configuration start together (two processes at a time) to keep the wall time down.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tests import test_run_pretraining as job
from utils import regression

UPDATES = 50
ACCUMULATION = 2


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("deterministic")
  configs = {}
  for name, prob in (("dropout", 0.1), ("no_dropout", 0.0)):
    path = root / ("%s.json" % name)
    path.write_text(json.dumps(dict(job.CONFIG, hidden_act="gelu", hidden_dropout_prob=prob,
                                    attention_probs_dropout_prob=prob, initializer_range=0.02)))
    configs[name] = str(path)
  train_dir = root / "train"
  train_dir.mkdir()
  rng = np.random.RandomState(5)
  # Two files (one per Horovod worker), 24 distinct records each.
  for index in range(2):
    helpers.write_batch_records(train_dir / ("part-%d.tfrecord" % index),
                                helpers.random_batch(rng, 24, job.SEQ, job.CONFIG["vocab_size"],
                                                     job.PRED))
  return {"root": root, "configs": configs, "train_dir": str(train_dir)}


def command(data, out, launcher=(), config="dropout", **overrides):
  """The deterministic training command (the same for every run of a configuration)."""
  values = {"bert_config_file": data["configs"][config], "input_files_dir": data["train_dir"],
            "output_dir": out, "max_seq_length": job.SEQ, "max_predictions_per_seq": job.PRED,
            "train_batch_size": 2, "num_accumulation_steps": ACCUMULATION,
            "learning_rate": 1e-3, "num_warmup_steps": 5, "num_train_steps": UPDATES,
            "save_checkpoints_steps": 5, "display_loss_steps": 1, "do_train": True,
            "deterministic_run": True}
  values.update(overrides)
  return (list(launcher) + [sys.executable, job.SCRIPT]
          + ["--%s=%s" % (k, v) for k, v in values.items() if v is not None])


def run_together(commands, timeout=600):
  """Runs the commands at the same time; raises with the output of any that fails."""
  procs = [subprocess.Popen(c, cwd=job.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True) for c in commands]
  try:
    for cmd, proc in zip(commands, procs):
      out, err = proc.communicate(timeout=timeout)
      assert proc.returncode == 0, "exit %d: %s\n%s\n%s" % (
          proc.returncode, " ".join(cmd), out[-3000:], err[-6000:])
  finally:
    for proc in procs:
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)


def assert_same_losses(golden_log, new_log, cmd, tmp_path):
  """The two logs' per-step values are identical floats (the golden-loss tool, tolerance 0)."""
  golden = tmp_path / "golden.json"
  assert regression.main(["record", "--log", str(golden_log), "--output", str(golden),
                          "--command", " ".join(cmd)]) == 0
  entries = json.loads(golden.read_text())["entries"]
  assert len(entries) >= UPDATES
  assert all("total_loss" in e and "learning_rate" in e for e in entries)
  assert regression.main(["compare", "--golden", str(golden), "--log", str(new_log),
                          "--tolerance", "0"]) == 0
  return entries


def two_runs(data, tmp_path, launcher=(), **overrides):
  """Runs the same command twice (output dirs a, b); returns (golden entries, dir a)."""
  a, b = tmp_path / "a", tmp_path / "b"
  run_together([command(data, a, launcher, **overrides), command(data, b, launcher, **overrides)])
  entries = assert_same_losses(a / "bert_dllog.json", b / "bert_dllog.json",
                               command(data, "OUT", launcher, **overrides), tmp_path)
  return entries, a


def test_fp32_one_process_bit_identical_with_dropout_on(data, tmp_path):
  entries, a = two_runs(data, tmp_path)
  values = job.checkpoint_values(a)
  # The counter and the weights of a checkpoint belong to the same micro-step.
  assert values["global_step"] == UPDATES
  assert values["micro_step"] == UPDATES * ACCUMULATION
  # Dropout is on: the same run with dropout probabilities 0 has another first loss (same
  # initial weights and batches); another seed (other weights, batches, masks) too.
  off, other = tmp_path / "off", tmp_path / "seed"
  run_together([command(data, off, config="no_dropout", num_train_steps=1),
                command(data, other, seed=7, num_train_steps=1)])
  first_off = job.read_dllog(off / "bert_dllog.json")[0]["data"]["total_loss"]
  assert abs(first_off - entries[0]["total_loss"]) > 1e-4
  assert job.read_dllog(other / "bert_dllog.json")[0]["data"]["total_loss"] != \
      entries[0]["total_loss"]


def _fp16(**overrides):
  # A start scale that overflows: the first updates are skipped (the global step stays) while the
  # scale comes down, so micro-steps and updates part ways.
  return dict(manual_fp16=True, init_loss_scale=2**32, **overrides)


def test_fp16_one_process_bit_identical(data, tmp_path):
  entries, a = two_runs(data, tmp_path, **_fp16())
  values = job.checkpoint_values(a)
  skipped = int(values["skipped_update_count"])
  assert skipped > 0  # 2^32 overflows fp16: the first updates are skipped, each halving the scale
  # Only applied updates have step lines; the scale each one's loss used is 2^32 halved once per
  # update skipped before it, and never rises again within the run.
  scales = [e["loss_scaler"] for e in entries]
  exponents = [32 - np.log2(scale) for scale in scales]
  assert all(k == int(k) and 1 <= k <= skipped for k in exponents), scales
  assert exponents == sorted(exponents)
  assert values["global_step"] == UPDATES
  # Skipped updates consumed micro-steps too: the counter says how many ran.
  assert values["micro_step"] == (UPDATES + skipped) * ACCUMULATION


def test_horovodrun_gloo_two_workers_bit_identical(data, tmp_path):
  two_runs(data, tmp_path, launcher=job._horovodrun(), horovod=True)  # pylint: disable=protected-access


def test_mpirun_two_workers_fp16_bit_identical(data, tmp_path):
  two_runs(data, tmp_path, launcher=job._mpirun(), horovod=True,  # pylint: disable=protected-access
           **_fp16(allreduce_post_accumulation=True))


def _wait_for_step(log, proc, step, timeout=300):
  """Waits until the run log has a line of `step` or more."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    assert proc.poll() is None, "the run ended before it was killed"
    if log.exists():
      steps = [r["step"] for r in map(json.loads, (l[5:] for l in log.read_text().splitlines()
                                                   if l.startswith("DLLL ")))]
      if any(isinstance(s, int) and s >= step for s in steps):
        return
    time.sleep(0.05)
  raise AssertionError("step %d never logged" % step)


def test_killed_run_resumes_exactly(data, tmp_path):
  # fp16 with accumulation: weights, LAMB slots, accumulators, loss scale, the micro-step (dropout
  # keys) and the input position must all come back for the losses to continue unchanged.
  overrides = _fp16()
  full, killed = tmp_path / "full", tmp_path / "killed"
  killed_cmd = command(data, killed, **overrides)
  uninterrupted = subprocess.Popen(command(data, full, **overrides), cwd=job.REPO_ROOT,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
  proc = subprocess.Popen(killed_cmd, cwd=job.REPO_ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)
  try:
    _wait_for_step(killed / "bert_dllog.json", proc, 12)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert uninterrupted.wait(timeout=600) == 0
  finally:
    for p in (proc, uninterrupted):
      if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
  restart_step = job.checkpoint_values(killed)["global_step"]
  assert 10 <= restart_step < UPDATES
  resumed = job.run_job(killed_cmd[2:])
  assert "the input continues after" in resumed.stderr
  full_entries = regression.log_entries(str(full / "bert_dllog.json"))
  # The killed run's log holds both runs (appended at the restart), and reads as one history: the
  # lines the first run logged after its checkpoint give way to the resumed run's.
  log_text = (killed / "bert_dllog.json").read_text()
  assert '"resumed_from_step": %d' % restart_step in log_text
  resumed_entries = regression.log_entries(str(killed / "bert_dllog.json"))
  assert [e["step"] for e in resumed_entries] == [e["step"] for e in full_entries]
  assert regression.differences(full_entries, resumed_entries, tolerance=0) == []
  final_full, final_resumed = job.checkpoint_values(full), job.checkpoint_values(killed)
  assert set(final_full) == set(final_resumed)
  for name, value in final_full.items():
    np.testing.assert_array_equal(final_resumed[name], value, err_msg=name)


def test_deterministic_resume_refuses_a_checkpoint_without_the_counter(data, tmp_path):
  out = tmp_path / "out"
  with tf.Graph().as_default():  # what a run without --deterministic_run saves: no micro_step
    step = tf.compat.v1.train.get_or_create_global_step()
    with tf.compat.v1.Session() as sess:
      sess.run(step.initializer)
      tf.compat.v1.train.Saver().save(sess, str(out / "model.ckpt"), global_step=step)
  proc = job.run_job(command(data, out)[2:], check=False, timeout=120)
  assert proc.returncode == 2
  assert "written without --deterministic_run" in proc.stderr
