"""Fault drills, run as a user would: real processes killed, resumed, corrupted, doubled.

Each drill asserts what the user sees (exit code, message, files, log lines) and how long it took.
Tiny model, few steps, outer timeouts on every process.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest
import tensorflow as tf

from tests import helpers
from tests.test_create_pretraining_data import make_corpus
from tests.test_run_pretraining import REPO_ROOT
from tests.test_run_pretraining import SCRIPT
from tests.test_run_pretraining import checkpoint_values
from tests.test_run_pretraining import common_flags
from tests.test_run_pretraining import data  # noqa: F401  (the module's data fixture)
from tests.test_run_pretraining import read_dllog
from tests.test_run_pretraining import run_job
from tests.test_run_pretraining_deterministic import newest_readable_checkpoint
from tests.test_run_pretraining_launchers import _horovodrun
from tests.test_run_pretraining_launchers import _mpirun
from utils.data import vocabulary

pytestmark = pytest.mark.e2e


def _start(args, launcher=()):
  """Starts run_pretraining.py (under `launcher`) in its own session; returns the Popen."""
  return subprocess.Popen(list(launcher) + [sys.executable, SCRIPT] + list(args), cwd=REPO_ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)


def _wait_for(condition, process, what, timeout=240):
  """Polls `condition()` every 0.1 s while `process` runs; fails naming `what` on time-out."""
  deadline = time.time() + timeout
  while not condition():
    if process.poll() is not None:
      raise AssertionError("the job ended (exit %s) before %s:\n%s"
                           % (process.returncode, what,
                              process.stdout.read()[-4000:] if process.stdout else ""))
    assert time.time() < deadline, "timed out waiting for %s" % what
    time.sleep(0.1)


def _log_lines(path):
  return path.read_text().splitlines() if path.exists() else []


def _workers(launcher_pid):
  """The run_pretraining.py processes below the launcher."""
  return [p for p in psutil.Process(launcher_pid).children(recursive=True)
          if p.cmdline()[:2] == [sys.executable, SCRIPT]]


def _kill_rank1_and_time_the_end(launcher, rank_variable, log):
  """Waits for training, kill -9s rank 1.

  Returns:
    (launcher exit code, seconds from the kill to the launcher's end, the workers still running
    5 s after that end, the pid of the killed rank 1).
  """
  _wait_for(lambda: len(_log_lines(log)) >= 3, launcher, "three log lines")
  workers = _workers(launcher.pid)
  assert len(workers) == 2, workers
  victim = [p for p in workers if p.environ().get(rank_variable) == "1"]
  assert victim, "rank 1 not found (%s)" % rank_variable
  try:
    victim[0].send_signal(signal.SIGKILL)
    killed_at = time.time()
    code = launcher.wait(timeout=90)
    seconds = time.time() - killed_at
    # The launcher is gone (its children cannot be listed any more): the workers found above
    # must have gone with it.
    return code, seconds, _running_after(workers, seconds=5), victim[0].pid
  finally:
    _kill_all(workers)


def _kill_all(processes):
  """SIGKILLs those of `processes` (psutil) still running (test clean-up)."""
  for process in processes:
    try:
      process.kill()
    except psutil.NoSuchProcess:
      pass


def test_killed_worker_ends_a_horovodrun_job_quickly_with_one_line_naming_it(data, tmp_path):
  out = tmp_path / "out"
  launcher = _start(common_flags(data, out, do_train=True, horovod=True, num_train_steps=100000,
                                 save_checkpoints_steps=1), launcher=_horovodrun())
  try:
    code, seconds, alive, victim = _kill_rank1_and_time_the_end(launcher, "HOROVOD_RANK",
                                                                out / "bert_dllog.json")
    output = launcher.stdout.read()
    assert code != 0
    assert seconds < 20, "the job took %.1f s to end after a worker died" % seconds
    assert not alive, "workers still running after the launcher ended: %s" % alive
  finally:
    helpers.kill_session(launcher)
  # The surviving rank ends with one line naming the lost rank and what a rerun resumes from;
  # no traceback of ours, no native lines of the failed collective, and no promise of a
  # checkpoint (horovodrun's SIGTERM reaches rank 0 too, but the save needs rank 1).
  ours = [line for line in output.splitlines() if line.startswith(("[0]", "[1]"))]
  newest = int(tf.train.latest_checkpoint(str(out)).rsplit("-", 1)[1])
  errors_of_rank0 = [line for line in ours if "error" in line.lower()]
  assert errors_of_rank0 == [
      "[0]<stderr>:run_pretraining.py: error: rank 0 stopped: rank 1 (pid %d on %s) ended, and "
      "Horovod shut down with it (a line of that rank, if it printed one, says why); nothing was "
      "saved after checkpoint %d, which the same command resumes from"
      % (victim, socket.gethostname(), newest)], output[-6000:]
  for text in ("Traceback", "background loop", "OP_REQUIRES", "saving a checkpoint"):
    assert not [line for line in ours if text in line], (text, output[-6000:])


def test_killed_worker_ends_an_mpirun_job_quickly(data, tmp_path):
  out = tmp_path / "out"
  launcher = _start(common_flags(data, out, do_train=True, horovod=True, num_train_steps=100000,
                                 save_checkpoints_steps=1000), launcher=_mpirun())
  try:
    code, seconds, alive, _ = _kill_rank1_and_time_the_end(launcher, "OMPI_COMM_WORLD_RANK",
                                                        out / "bert_dllog.json")
    assert code != 0
    assert seconds < 20, "the job took %.1f s to end after a worker died" % seconds
    assert not alive, "workers still running after the launcher ended: %s" % alive
  finally:
    helpers.kill_session(launcher)


def _checkpoint_step(out):
  checkpoint = tf.train.latest_checkpoint(str(out))
  return int(checkpoint.rsplit("-", 1)[1]) if checkpoint else 0


def _complete_lines(path):
  """The lines of `path` that end with a newline."""
  text = path.read_text()
  return text.splitlines()[:text.count("\n")]


def test_kill_and_resume_keeps_log_and_checkpoints_and_continues(data, tmp_path):
  out = tmp_path / "out"
  log = out / "bert_dllog.json"
  args = common_flags(data, out, do_train=True, num_train_steps=120, save_checkpoints_steps=10,
                      display_loss_steps=1)
  job = _start(args)
  try:
    _wait_for(lambda: _checkpoint_step(out) >= 10, job, "the first checkpoint")
    job.send_signal(signal.SIGKILL)
    killed_at = time.time()
    job.wait(timeout=30)
    assert time.time() - killed_at < 5
  finally:
    helpers.kill_session(job)
  # A kill in the middle of a line's write leaves it cut short: the restart removes it.
  first_run = _complete_lines(log)
  # The newest checkpoint whose files are all written, which the index may not name yet (a kill
  # between the save and the index update): the restart resumes from it.
  resumed_from = newest_readable_checkpoint(out)
  assert resumed_from - _checkpoint_step(out) in (0, 10)
  first_steps = [json.loads(line[len("DLLL "):])["step"] for line in first_run]
  assert first_steps[:3] == [1, 2, 3] and resumed_from < 120
  started = time.time()
  proc = run_job(args, timeout=300)
  took = time.time() - started
  assert "from step %d to 120" % resumed_from in proc.stderr
  lines = _log_lines(log)
  # Every line of the killed run is still there, once, followed by the restart and the new run.
  assert lines[:len(first_run)] == first_run
  assert len(set(lines)) == len(lines)
  records = read_dllog(log)
  restart = records[len(first_run)]
  assert restart["step"] == "RESTART" and restart["data"] == {"resumed_from_step": resumed_from}
  second_steps = [r["step"] for r in records[len(first_run) + 1:] if r["step"] != []]
  assert second_steps[0] == resumed_from + 1 and second_steps[-1] == 120
  assert second_steps == sorted(set(second_steps))
  assert checkpoint_values(out)["global_step"] == 120
  assert took < 240


def test_second_job_on_one_output_dir_is_refused_naming_the_first(data, tmp_path):
  out = tmp_path / "out"
  log = out / "bert_dllog.json"
  args = common_flags(data, out, do_train=True, num_train_steps=100000,
                      save_checkpoints_steps=5)
  first = _start(args)
  try:
    _wait_for(lambda: _checkpoint_step(out) >= 5, first, "the first job's checkpoint")
    # The same command again: refused at once (a job that is let in trains on, and fails here).
    started = time.time()
    second = _start(args)
    try:
      output, _ = second.communicate(timeout=90)
    except subprocess.TimeoutExpired:
      raise AssertionError("the second job on %s was not refused: still running after 90 s"
                           % out) from None
    finally:
      helpers.kill_session(second)
    took = time.time() - started
    assert second.returncode == 2, output[-3000:]
    assert "in use by another job" in output and "pid %d " % first.pid in output
    assert str(out) in output and "Traceback" not in output
    assert took < 90
    assert first.poll() is None, "the first job stopped"
    # The refused job wrote nothing: no restart line in the first job's log.
    assert not [r for r in read_dllog(log) if r["step"] == "RESTART"]
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
  finally:
    helpers.kill_session(first)
  # The killed job's lock is stale: the next job on the directory takes it over and says so.
  step = _checkpoint_step(out)
  started = time.time()
  proc = run_job(common_flags(data, out, do_train=True, num_train_steps=step), timeout=120)
  assert "no longer running" in proc.stderr and "pid %d " % first.pid in proc.stderr
  assert "nothing to train" in proc.stderr
  assert time.time() - started < 90


def test_corrupt_record_names_the_file_and_record(data, tmp_path):
  bad_dir = tmp_path / "bad"
  bad_dir.mkdir()
  good = open(os.path.join(data["single_dir"], "only.tfrecord"), "rb").read()
  # Flip a byte in the middle of the file: the first record is intact (pre-flight passes), a
  # later record's CRC fails during training.
  corrupt = bytearray(good)
  corrupt[len(corrupt) // 2] ^= 0xFF
  (bad_dir / "broken.tfrecord").write_bytes(bytes(corrupt))
  started = time.time()
  proc = run_job(common_flags(data, tmp_path / "out", do_train=True, num_train_steps=50,
                              input_files_dir=bad_dir), check=False, timeout=180)
  assert proc.returncode != 0
  assert "broken.tfrecord: record " in proc.stderr, proc.stderr[-3000:]
  assert time.time() - started < 150


def _generator_forks(pid):
  """The generator's forked processes among the children of `pid`: its workers and its cleaner
  (they run its script; the log filter process of utils/runtime/cli.py, also a child, does
  not)."""
  return [child for child in psutil.Process(pid).children()
          if any("create_pretraining_data.py" in part for part in child.cmdline())]


def _running_after(processes, seconds):
  """Those of `processes` (psutil) still running after `seconds` (a zombie is dead: it is only
  waiting for its new parent to reap it)."""
  deadline = time.time() + seconds
  while True:
    running = []
    for process in processes:
      try:
        if process.status() != psutil.STATUS_ZOMBIE:
          running.append(process)
      except psutil.NoSuchProcess:
        pass
    if not running or time.time() > deadline:
      return running
    time.sleep(0.05)


def test_killed_generator_takes_its_workers_along_and_publishes_nothing(tmp_path):
  inputs = make_corpus(tmp_path, num_files=4, documents_per_file=400)
  vocab_file = str(tmp_path / "vocab.txt")
  vocabulary.build_vocab(inputs, 300, vocab_file, min_frequency=2)
  outputs = [str(tmp_path / ("out-%d.tfrecord" % i)) for i in range(4)]
  args = [sys.executable, "create_pretraining_data.py", "--input_file=%s" % ",".join(inputs),
          "--output_file=%s" % ",".join(outputs), "--vocab_file=%s" % vocab_file,
          "--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=200",
          "--num_workers=2"]
  parent = subprocess.Popen(args, cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
  workers = []
  try:
    _wait_for(lambda: len(_generator_forks(parent.pid)) == 3, parent,
              "two worker processes and the cleaner", timeout=60)
    workers = _generator_forks(parent.pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    # The kernel kills the workers as their parent dies (they are gone within milliseconds), and
    # the cleaner ends once it has removed their .partial files. Workers that outlive it finish
    # the file they are on and publish it: about 3 s per file with this corpus and dupe factor,
    # so 1 s tells the two apart.
    alive = _running_after(workers, seconds=1)
  finally:
    helpers.kill_session(parent)
    _kill_all(workers)  # survivors of a failed drill (kill_session spares the group of a dead parent)
  assert not alive, "workers still running 1 s after their parent was killed: %s" % alive
  time.sleep(1)  # anything a surviving worker would publish
  names = os.listdir(str(tmp_path))
  assert not [n for n in names if n.endswith(".tfrecord")], names  # no output looks finished
  assert not [n for n in names if n.endswith(".partial")], names  # nor half-written ones stay
  # A rerun starts clean: the whole set, no leftovers.
  started = time.time()
  proc = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  names = os.listdir(str(tmp_path))
  assert sorted(n for n in names if ".tfrecord" in n) == sorted(os.path.basename(o)
                                                                for o in outputs)
  assert time.time() - started < 240
