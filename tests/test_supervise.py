"""scripts/supervise.py end to end on this machine (docs/LONG_RUNS.md "Supervisor").

`horovodrun --gloo -np 2 -H localhost:2` under the supervisor; one rank is SIGKILLed mid-run:
the supervisor relaunches the same command, which resumes from the newest checkpoint and
finishes (its last checkpoint is of update num_train_steps). The deterministic run then gives
the losses of an uninterrupted run from the resumed update on, bit for bit. Bad input ends the
supervisor with status 2 before anything is launched; a job stopped by a signal (75) is not
relaunched.
"""

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
import tensorflow as tf

from tests import helpers
from tests import test_run_pretraining as job
from tests import test_run_pretraining_launchers as launchers
from tests import test_run_pretraining_deterministic as det
from tests import test_run_pretraining_graceful_stop as stop
from tests.test_run_pretraining_deterministic import data  # noqa: F401 (a fixture)
from utils.core import errors

pytestmark = pytest.mark.e2e

SUPERVISE = os.path.join(job.REPO_ROOT, "scripts", "supervise.py")
UPDATES = 40
SAVE_STEPS = 5
KILL_AFTER = 8  # an update logged after the checkpoint of update 5


def supervised(cmd, *flags):
  return [sys.executable, SUPERVISE, "--backoff_secs=1"] + list(flags) + ["--"] + cmd


def updates_of(entries):
  """[(step, total_loss)] of the update lines among run-log entries, in the order written."""
  return [(e["step"], e["data"]["total_loss"]) for e in entries
          if isinstance(e["step"], int) and "total_loss" in e["data"]]


def log_entries(path):
  """The run log's update lines: [(step, total_loss)] in the order written (both launches)."""
  return updates_of([json.loads(line[5:]) for line in path.read_text().splitlines()
                     if line.startswith("DLLL ")])


def training_ranks(root_pid):
  """{rank: psutil.Process} of the run_pretraining.py processes under `root_pid`."""
  ranks = {}
  for child in psutil.Process(root_pid).children(recursive=True):
    try:
      cmdline = child.cmdline()
      if any(arg.endswith("run_pretraining.py") for arg in cmdline) and \
          "horovodrun" not in " ".join(cmdline):
        rank = child.environ().get("HOROVOD_RANK")
        if rank is not None:
          ranks[int(rank)] = child
    except psutil.NoSuchProcess:
      pass
  return ranks


def wait_for_ranks(root_pid, proc, count=2, timeout=120):
  deadline = time.time() + timeout
  while time.time() < deadline:
    assert proc.poll() is None, "the supervisor ended before its ranks were found"
    ranks = training_ranks(root_pid)
    if len(ranks) == count:
      return ranks
    time.sleep(0.2)
  raise AssertionError("no %d training ranks under pid %d" % (count, root_pid))


@pytest.fixture(scope="module")
def killed_rank_run(data, tmp_path_factory):  # noqa: F811
  """The supervised 2-worker run whose rank 1 is SIGKILLed after update KILL_AFTER, and an
  uninterrupted run of the same command (run at the same time)."""
  root = tmp_path_factory.mktemp("supervise")
  out, reference = root / "out", root / "reference"
  launch = launchers._horovodrun(2)  # pylint: disable=protected-access
  cmd, ref_cmd = (det.command(data, str(directory), launch, num_train_steps=UPDATES,
                              save_checkpoints_steps=SAVE_STEPS, horovod=True)
                  for directory in (out, reference))
  output = root / "supervise.out"
  _, _, proc = det.start(supervised(cmd, "--max_restarts=2"), output)
  ref = det.start(ref_cmd, root / "reference.out")
  try:
    # pylint: disable=protected-access
    det._wait_for_step(out / "bert_dllog.json", proc, KILL_AFTER)
    victim = wait_for_ranks(proc.pid, proc)[1]
    killed_pid = victim.pid
    victim.send_signal(signal.SIGKILL)
    code = proc.wait(timeout=600)
    det.finish([ref], timeout=600)
  finally:
    helpers.kill_session(proc)
    helpers.kill_session(ref[2])
  return {"code": code, "output": output.read_text(), "out": out, "reference": reference,
          "killed_pid": killed_pid}


def test_killed_rank_is_relaunched_and_the_run_finishes(killed_rank_run):
  run = killed_rank_run
  assert run["code"] == 0, run["output"][-6000:]
  text = run["output"]
  assert "supervise.py: launch 1:" in text and "supervise.py: launch 2:" in text
  assert "supervise.py: launch 3:" not in text
  assert "restart 1 of 2 in 1 s, resuming from the newest checkpoint" in text
  assert "supervise.py: the job finished" in text
  assert int(tf.train.load_variable(tf.train.latest_checkpoint(str(run["out"])),
                                    "global_step")) == UPDATES


def test_resumed_run_continues_with_the_losses_of_an_uninterrupted_run(killed_rank_run):
  run = killed_rank_run
  assert run["code"] == 0, run["output"][-6000:]
  reference = dict(log_entries(run["reference"] / "bert_dllog.json"))
  assert sorted(reference) == list(range(1, UPDATES + 1))
  lines = [json.loads(line[5:]) for line in (run["out"] / "bert_dllog.json").read_text()
           .splitlines() if line.startswith("DLLL ")]
  restarts = [i for i, l in enumerate(lines) if l["step"] == "RESTART"]
  assert len(restarts) == 1, lines  # one relaunch, from a checkpoint after the first
  resumed_from = lines[restarts[0]]["data"]["resumed_from_step"]
  assert resumed_from >= SAVE_STEPS and resumed_from % SAVE_STEPS == 0
  supervised_log = updates_of(lines)
  assert [s for s, _ in updates_of(lines[restarts[0]:])] == list(range(resumed_from + 1,
                                                                         UPDATES + 1))
  # Deterministic run: every update, before the kill and after the relaunch, as the reference.
  for step, loss in supervised_log:
    assert loss == reference[step], (step, loss, reference[step])


def test_bad_input_exits_2_before_any_launch(tmp_path):
  marker = tmp_path / "launched"
  script = tmp_path / "job.py"
  script.write_text("open(%r, 'w').close()\n" % str(marker))
  cmd = ["horovodrun", "-np", "2", "-H", "localhost:2", sys.executable, str(script)]
  for flags, message in ((["--max_restarts=-1"], "--max_restarts=-1"),
                         (["--min_workers=3"], "--min_workers=3 is above")):
    proc = subprocess.run(supervised(cmd, *flags), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line
    assert message in proc.stderr
  assert not marker.exists()


def test_no_relaunch_after_a_graceful_stop_or_bad_input(tmp_path):
  counter = tmp_path / "count"
  for status in (75, 2):
    script = "echo x >> %s; exit %d" % (counter, status)
    proc = subprocess.run(supervised(["sh", "-c", script], "--max_restarts=3"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == status
  assert counter.read_text().split() == ["x", "x"]


def test_sigterm_to_the_supervisor_goes_to_the_job_and_ends_supervision(tmp_path):
  started = tmp_path / "started"
  counter = tmp_path / "count"
  # The job records its start, then waits; SIGTERM ends it (status 143).
  script = "echo x >> %s; touch %s; exec sleep 60" % (counter, started)
  proc = subprocess.Popen(supervised(["sh", "-c", script], "--max_restarts=3"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
  try:
    deadline = time.time() + 30
    while not started.exists() and time.time() < deadline:
      time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
  finally:
    helpers.kill_session(proc)
  assert proc.returncode == 143, err
  assert "not restarted" in err
  assert counter.read_text().split() == ["x"]


def start_supervised_jobs_under_either_launcher(data, tmp_path):  # noqa: F811
  """A supervised 2-worker job that trains until stopped, under horovodrun --gloo and under mpirun,
  both started at once.

  Returns:
    {launcher: (output dir, the launcher command, `det.start`'s (cmd, output file, Popen))}.
  """
  runs = {}
  # (mpirun yields while it waits: with 4 workers on the cores a polling rank starves the others.)
  for launcher, launch in (("horovodrun", det.LAUNCHERS["gloo"]()),
                           ("mpirun", det.LAUNCHERS["mpirun"]())):
    out = tmp_path / launcher
    cmd = det.command(data, str(out), launch, num_train_steps=100000,
                      save_checkpoints_steps=1000, horovod=True)
    runs[launcher] = (out, cmd, det.start(supervised(cmd, "--max_restarts=3"),
                                          tmp_path / (launcher + ".out")))
  return runs


def test_sigterm_to_the_supervisor_stops_the_job_gracefully_under_either_launcher(
    data, tmp_path):  # noqa: F811
  # Signalled themselves, horovodrun and mpirun SIGKILL the workers 5 s and 1 s after passing
  # SIGTERM on; the supervisor signals the workers instead, which stop at one update and save it.
  # A 2-worker job under each launcher, both at once.
  runs = {launcher: (out, started) for launcher, (out, _, started)
          in start_supervised_jobs_under_either_launcher(data, tmp_path).items()}
  codes = {}
  try:
    for launcher, (out, (_, _, proc)) in runs.items():
      det._wait_for_step(out / "bert_dllog.json", proc, 2)  # pylint: disable=protected-access
      proc.send_signal(signal.SIGTERM)
    for launcher, (_, (_, _, proc)) in runs.items():
      codes[launcher] = proc.wait(timeout=300)
  finally:
    for _, (_, (_, _, proc)) in runs.items():
      helpers.kill_session(proc)
  for launcher, (out, (_, output, _)) in runs.items():
    text = output.read_text()
    assert codes[launcher] == errors.STOP_EXIT_CODE, (launcher, text[-6000:])
    lines = [(name, int(step)) for name, step in re.findall(
        r"run_pretraining.py: stopped by (SIG\w+) at update (\d+); checkpoint written", text)]
    assert lines and all(line == ("SIGTERM", lines[0][1]) for line in lines), text[-6000:]
    update = lines[0][1]
    assert update >= 2, launcher
    assert stop.checkpoint_steps(out) == [update], launcher  # rank 0's, of the agreed update
    assert job.checkpoint_values(out)["micro_step"] == update * det.ACCUMULATION
    assert "supervise.py: launch 2:" not in text
    assert "status 75 (stopped, checkpoint written; run the same command to resume)" in text


def job_processes(out):
  """The live processes whose command line names the output directory `out` (launcher, workers)."""
  found = []
  for process in psutil.process_iter(["cmdline", "status"]):
    if process.info["status"] != psutil.STATUS_ZOMBIE and any(
        str(out) in arg for arg in process.info["cmdline"] or ()):
      found.append(process)
  return found


def lock_is_free(out):
  """Whether nothing holds the output directory's lock (an flock on `.output_dir.lock`)."""
  path = out / ".output_dir.lock"
  if not path.exists():
    return True
  with open(path, "a") as lock:
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      return False
    fcntl.flock(lock, fcntl.LOCK_UN)
    return True


def test_a_killed_supervisor_takes_its_job_with_it_under_either_launcher(data, tmp_path):  # noqa: F811
  # kill -9 of the supervisor (an operator, the out-of-memory killer, a scheduler without cgroups)
  # used to leave the launcher, re-parented to PID 1, and its workers training with nobody reading
  # their output and the output directory locked: the next supervisor got exit 2 "in use".
  runs = start_supervised_jobs_under_either_launcher(data, tmp_path)
  try:
    for launcher, (out, _, (_, _, proc)) in runs.items():
      det._wait_for_step(out / "bert_dllog.json", proc, 2)  # pylint: disable=protected-access
      assert len(job_processes(out)) >= 3, launcher  # the launcher and two workers
    killed = time.time()
    for _, (_, _, (_, _, proc)) in runs.items():
      proc.send_signal(signal.SIGKILL)
    left = {}
    for launcher, (out, _, _) in runs.items():
      deadline = killed + 30
      while job_processes(out) and time.time() < deadline:
        time.sleep(0.2)
      left[launcher] = [(p.pid, " ".join(p.cmdline()[:3])) for p in job_processes(out)]
    ended_after = time.time() - killed
  finally:
    for _, (out, _, (_, _, proc)) in runs.items():
      helpers.kill_session(proc)
      for process in job_processes(out):
        process.kill()
  assert left == {"horovodrun": [], "mpirun": []}, left
  for launcher, (out, _, _) in runs.items():
    assert lock_is_free(out), launcher
  # A supervisor started again on the same directory runs the job (here: resumes and stops at
  # once, as the first update is the last), instead of "in use" from an orphan's lock.
  out, cmd, _ = runs["horovodrun"]
  again = subprocess.run(supervised(cmd + ["--num_train_steps=1"], "--max_restarts=0"),
                         capture_output=True, text=True, timeout=300)
  assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-2000:]
  assert "in use" not in again.stderr
  print("supervisor killed: launchers and workers gone after %.1f s" % ended_after)


def test_processes_a_killed_launcher_leaves_behind_are_ended(tmp_path):
  # The "launcher" starts a worker that keeps its output open, then dies as if SIGKILLed: the
  # supervisor kills the orphan, then relaunches (the second launch finds the marker and exits 0).
  marker = tmp_path / "first"
  orphan_pid = tmp_path / "orphan.pid"
  script = ("if [ -e {m} ]; then exit 0; fi; touch {m}; sleep 120 & echo $! > {p}; kill -9 $$"
            .format(m=marker, p=orphan_pid))
  start = time.time()
  proc = subprocess.run(supervised(["sh", "-c", script], "--max_restarts=1"),
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  assert "killing what it left running" in proc.stdout
  assert "status 137" in proc.stderr
  pid = int(orphan_pid.read_text())
  assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
  assert time.time() - start < 30


def test_horovodruns_traceback_after_the_workers_line_is_shown_with_verbose_only(tmp_path):
  # A stand-in horovodrun ends as the real one does after a worker's error: the worker's line,
  # then its own traceback whose last lines name the worker's status (what the supervisor reads).
  worker = "[1]<stderr>:run_pretraining.py: error: bad input record: /d/part-1: record 3"
  traceback = ["Traceback (most recent call last):",
               '  File "/venv/bin/horovodrun", line 8, in <module>',
               "    sys.exit(run_commandline())",
               "RuntimeError: Horovod detected that one or more processes exited with non-zero "
               "status, thus causing the job to be terminated. The first process to do so was:",
               "Process name: 1", "Exit code: 2", ""]
  (tmp_path / "stderr.txt").write_text("\n".join([worker] + traceback))
  fake = tmp_path / "horovodrun"
  fake.write_text("#!/bin/sh\ncat %s >&2\nexit 1\n" % (tmp_path / "stderr.txt"))
  fake.chmod(0o755)
  for flags in ([], ["--verbose"]):
    proc = subprocess.run(supervised([str(fake), "-np", "2", "python", "job.py"], *flags),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr  # the worker's status, from the hidden lines
    assert "supervise.py: launch 2:" not in proc.stderr
    assert proc.stdout.splitlines()[0] == worker
    if flags:
      assert proc.stdout.splitlines() == [worker] + traceback[:-1]
    else:
      assert proc.stdout.splitlines() == [worker]
