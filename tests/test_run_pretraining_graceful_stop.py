"""Graceful stop end to end (docs/LONG_RUNS.md).

A signal (SIGTERM, SIGINT, SIGUSR1) to the training process, to one Horovod rank or to the
launcher ends the job at one update boundary shared by every worker, with a checkpoint of that
update, the message "stopped by <signal> at update N; checkpoint written; run the same command to
resume" and exit status 75; the same command then continues with the losses of an uninterrupted
deterministic run. A second signal exits at once (128 + its number), or, once the stop is saved,
as the stop ends (its line, 75), leaving neither a save's `_temp` files nor the output
directory's lock; one before the first update saves nothing. Checkpoints by time
(--save_checkpoints_secs) are tests/test_run_pretraining_checkpoints_by_time.py's.

The runs use the tiny deterministic configuration of
tests/test_run_pretraining_deterministic.py (one with a large vocabulary where a save must be
caught in flight); each waits for a logged update before it is signalled.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from scripts import supervisor
from tests import helpers
from tests import test_run_pretraining_deterministic as det
from tests import test_run_pretraining as job
from tests import test_run_pretraining_launchers as launchers
from utils.core import errors
from utils.runlog import golden
from utils.runtime import output_lock
from utils.training import watched_training

# Long enough that a signal sent after update FIRST_LOGGED lands well before the end.
UPDATES = 300
FIRST_LOGGED = 3
# The length of the runs that are only stopped (no uninterrupted run to compare with).
LONG = 100000
STOP_LINE = re.compile(r"stopped by (SIG\w+) at update (\d+); checkpoint written; run the same "
                       r"command to resume")
# The vocabulary of the "big_save" configuration: its embedding and the optimizer's moments make
# a checkpoint of about 140 MB, whose write (about 0.1 s here) can be caught in flight.
BIG_SAVE_VOCAB = 500000
# The "deep" configuration: narrow, but so many layers that building its graph takes minutes.
DEEP = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=10000)
# The line a run stopped before its first update ends with.
BEFORE_FIRST_UPDATE = ("run_pretraining.py: stopped by SIGTERM before the first update: nothing "
                       "to save; run the same command to resume")

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("stop")
  path = root / "config.json"
  values = dict(det.CONFIG, hidden_act="gelu", hidden_dropout_prob=0.1,
                attention_probs_dropout_prob=0.1, initializer_range=0.02)
  path.write_text(json.dumps(values))
  big_save = root / "big_save.json"
  big_save.write_text(json.dumps(dict(values, vocab_size=BIG_SAVE_VOCAB)))
  deep = root / "deep.json"
  deep.write_text(json.dumps(dict(values, **DEEP)))
  train_dir = root / "train"
  train_dir.mkdir()
  rng = np.random.RandomState(7)
  for index in range(2):
    helpers.write_batch_records(
        train_dir / ("part-%d.tfrecord" % index),
        helpers.random_batch(rng, 24, det.SEQ, det.CONFIG["vocab_size"], det.PRED))
  return {"root": root, "configs": {"dropout": str(path), "big_save": str(big_save),
                                    "deep": str(deep)},
          "train_dir": str(train_dir)}


def command(data, out, launcher=(), **overrides):
  """The deterministic command; checkpoints only at the end or the stop (1000 > UPDATES)."""
  values = dict(num_train_steps=UPDATES, save_checkpoints_steps=1000)
  values.update(overrides)
  return det.command(data, out, launcher, **values)


def wait_for_update(log, proc, step=FIRST_LOGGED, timeout=300):
  """Waits until the run log of `proc` has a line of update `step` or later."""
  det._wait_for_step(log, proc, step, timeout)  # pylint: disable=protected-access


def wait_for_text(path, text, proc, timeout=300):
  """Waits until the file `path` (a run's output) holds `text`."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    assert proc.poll() is None, "the run ended before %r" % text
    if path.exists() and text in path.read_text():
      return
    time.sleep(0.02)
  raise AssertionError("%r never appeared in %s" % (text, path))


def wait_for_save_in_flight(out, proc, timeout=300):
  """Waits until the output directory `out` holds a checkpoint save in flight (polled every
  millisecond: the save lasts about 0.1 s); returns its `model.ckpt-N_temp` name."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    assert proc.poll() is None, "the run ended before a save was seen in flight"
    temp = [name for name in os.listdir(out) if name.endswith("_temp")]
    if temp:
      return temp[0]
    time.sleep(0.001)
  raise AssertionError("no save seen in flight in %s" % out)


def wait_for_stop_record(out, proc, timeout=300):
  """Waits until the run log in `out` has its STOP line: the stop is saved (the line is logged
  right after `SignalWatcher.stop_saved`)."""
  log = out / "bert_dllog.json"
  deadline = time.time() + timeout
  while not log.exists() or not stop_records(log):
    assert proc.poll() is None, "the run ended before its STOP line was seen"
    assert time.time() < deadline, "no STOP line in %s" % log
    time.sleep(0.002)


def finish(started, timeout=400):
  """Waits for a run started with `det.start`; returns (exit status, its output)."""
  _, output, proc = started
  try:
    code = proc.wait(timeout=timeout)
  finally:
    helpers.kill_session(proc)
  return code, output.read_text()


def stop_lines(text):
  """The (signal, update) of every stop message in `text`."""
  return [(name, int(step)) for name, step in STOP_LINE.findall(text)]


def checkpoint_steps(directory):
  """The global steps of the checkpoints in `directory` (index files), sorted."""
  return sorted(int(name[len("model.ckpt-"):-len(".index")]) for name in os.listdir(directory)
                if name.startswith("model.ckpt-") and name.endswith(".index"))


def stop_records(log):
  """The data of the STOP lines of a run log."""
  records = [json.loads(line[5:]) for line in log.read_text().splitlines()
             if line.startswith("DLLL ")]
  return [r["data"] for r in records if r.get("step") == "STOP"]


def assert_stopped(code, output, out, signal_name, signalled_after=FIRST_LOGGED, updates=UPDATES):
  """Exit 75, one stop message (a one-process run's output: the line it ends with, not also a log
  line of the same words), a checkpoint of that update (the only one), a STOP log line.

  Returns:
    the update the run stopped at.
  """
  assert code == errors.STOP_EXIT_CODE, "exit %d\n%s" % (code, output[-6000:])
  lines = stop_lines(output)
  assert lines and all(line == lines[0] for line in lines), output[-4000:]
  # Besides the run log's STOP record (printed as a DLL line), the message once.
  assert len([l for l in output.splitlines() if STOP_LINE.search(l)
              and not l.startswith("DLL ")]) == 1, output[-4000:]
  name, update = lines[0]
  assert name == signal_name
  assert signalled_after <= update < updates
  assert checkpoint_steps(out) == [update]
  assert job.checkpoint_values(out)["global_step"] == update
  records = stop_records(out / "bert_dllog.json")
  assert [(r["signal"], r["update"], r["checkpoint_written"], r["exit_code"]) for r in records] \
      == [(signal_name, update, True, 75)]
  assert "Traceback" not in output
  return update


def test_sigterm_stops_with_a_checkpoint_and_the_same_command_resumes_exactly(data, tmp_path):
  full, stopped = tmp_path / "full", tmp_path / "stopped"
  reference = det.start(command(data, full), tmp_path / "full.out")
  run = det.start(command(data, stopped), tmp_path / "stopped.out")
  try:
    wait_for_update(stopped / "bert_dllog.json", run[2])
    run[2].send_signal(signal.SIGTERM)
    code, output = finish(run)
    update = assert_stopped(code, output, stopped, "SIGTERM")
    # The micro-step counter (input position, dropout keys) was saved with the weights.
    assert job.checkpoint_values(stopped)["micro_step"] == update * det.ACCUMULATION
    resumed = det.start(command(data, stopped), tmp_path / "resumed.out")
    det.finish([reference, resumed])
  finally:
    for _, _, proc in (reference, run):
      helpers.kill_session(proc)
  assert "the input continues after" in (tmp_path / "resumed.out").read_text()
  full_entries = golden.log_entries(str(full / "bert_dllog.json"))
  resumed_entries = golden.log_entries(str(stopped / "bert_dllog.json"))
  assert [e["step"] for e in resumed_entries] == [e["step"] for e in full_entries]
  assert golden.differences(full_entries, resumed_entries, tolerance=0) == []
  final_full, final_resumed = job.checkpoint_values(full), job.checkpoint_values(stopped)
  assert set(final_full) == set(final_resumed)
  for name, value in final_full.items():
    np.testing.assert_array_equal(final_resumed[name], value, err_msg=name)


def test_sigint_and_sigusr1_stop_the_same_way(data, tmp_path):
  runs = {}
  for signum in (signal.SIGINT, signal.SIGUSR1):
    out = tmp_path / signal.Signals(signum).name
    runs[signum] = (out, det.start(command(data, out, num_train_steps=LONG),
                                   tmp_path / ("%s.out" % out.name)))
  try:
    for signum, (out, run) in runs.items():
      wait_for_update(out / "bert_dllog.json", run[2])
      run[2].send_signal(signum)
    for signum, (out, run) in runs.items():
      code, output = finish(run)
      assert_stopped(code, output, out, signal.Signals(signum).name, updates=LONG)
      assert "KeyboardInterrupt" not in output
  finally:
    for _, (_, run) in runs.items():
      helpers.kill_session(run[2])


def test_a_second_signal_exits_at_once(data, tmp_path):
  # Updates of 50 micro-steps: the second signal lands while the first update is finishing (two
  # signals sent back to back would merge into one pending signal).
  out = tmp_path / "out"
  run = det.start(command(data, out, num_accumulation_steps=50), tmp_path / "out.out")
  wait_for_update(out / "bert_dllog.json", run[2], 1)
  run[2].send_signal(signal.SIGTERM)
  wait_for_text(tmp_path / "out.out", "SIGTERM received: stopping", run[2])
  run[2].send_signal(signal.SIGTERM)
  code, output = finish(run, timeout=60)
  assert code == 128 + signal.SIGTERM, output[-4000:]
  assert "SIGTERM received again during the stop: exiting at once (status 143)" in output
  assert not stop_lines(output) and stop_records(out / "bert_dllog.json") == []
  assert checkpoint_steps(out) == []


def test_a_second_signal_during_the_stop_save_leaves_no_temp_files_and_no_lock(data, tmp_path):
  """The exit at once skips `atexit` and `finally`: the watcher's clean-ups remove the save's
  `model.ckpt-N_temp/` (while TensorFlow is still writing it) and the output directory's lock,
  which stayed until a rerun removed them."""
  out = tmp_path / "out"
  run = det.start(command(data, out, num_train_steps=LONG, config="big_save"),
                  tmp_path / "out.out")
  try:
    wait_for_update(out / "bert_dllog.json", run[2], 1)
    run[2].send_signal(signal.SIGTERM)  # the stop: the update in flight, then a checkpoint of it
    temp = wait_for_save_in_flight(out, run[2])
    run[2].send_signal(signal.SIGTERM)
    code, output = finish(run, timeout=120)
  finally:
    helpers.kill_session(run[2])
  assert code == 128 + signal.SIGTERM, output[-4000:]
  assert "SIGTERM received again during the stop: exiting at once (status 143)" in output
  assert "clean-up before the exit" not in output, output[-4000:]  # none failed or hung
  names = sorted(os.listdir(out))
  assert temp not in names and not [name for name in names if "_temp" in name], names
  assert output_lock.LOCK_FILE_NAME not in names, names
  # The signal caught the save in flight: no file of its checkpoint was completed.
  assert not [name for name in names if name.startswith("model.ckpt-")], names
  assert stop_records(out / "bert_dllog.json") == []


def test_a_second_signal_after_the_stop_is_saved_leaves_no_lock(data, tmp_path):
  """Once the stop is saved (its STOP line is logged: about 0.1 s after the first signal in this
  tiny run, which ends about 0.3 s later) a second signal ends the run as the stop does, 75, by
  the same exit at once: it left the lock behind."""
  out = tmp_path / "out"
  run = det.start(command(data, out, num_train_steps=LONG), tmp_path / "out.out")
  try:
    wait_for_update(out / "bert_dllog.json", run[2])
    run[2].send_signal(signal.SIGTERM)
    wait_for_stop_record(out, run[2])
    run[2].send_signal(signal.SIGTERM)
    code, output = finish(run, timeout=60)
  finally:
    helpers.kill_session(run[2])
  assert code == errors.STOP_EXIT_CODE, output[-4000:]
  last_lines = [line for line in output.splitlines() if line.startswith("run_pretraining.py: ")]
  assert len(last_lines) == 1 and stop_lines(last_lines[0]), output[-4000:]
  update = stop_lines(last_lines[0])[0][1]
  names = os.listdir(out)
  assert output_lock.LOCK_FILE_NAME not in names, names
  assert checkpoint_steps(out) == [update]
  assert not [name for name in names if "_temp" in name], names


def test_removing_a_save_in_flight_keeps_every_complete_checkpoint(tmp_path):
  """Only the `_temp` files go: not the indexed checkpoint, nor a complete one the index does not
  name yet (a save between its files and the index update: the next run resumes from it)."""
  out = tmp_path / "out"
  out.mkdir()
  complete = ["model.ckpt-4.index", "model.ckpt-4.data-00000-of-00001",
              "model.ckpt-6.index", "model.ckpt-6.data-00000-of-00001", "checkpoint"]
  for name in complete:
    (out / name).write_text("x")
  (out / "model.ckpt-8_temp").mkdir()
  (out / "model.ckpt-8_temp" / "part-00000-of-00001.data-00000-of-00001.tempstate1").write_text("x")
  removed = watched_training.remove_save_in_flight(str(out))
  assert [os.path.basename(path) for path in removed] == ["model.ckpt-8_temp"]
  assert sorted(os.listdir(out)) == sorted(complete)
  assert watched_training.remove_save_in_flight(str(out)) == []  # nothing in flight: nothing to do


def test_a_signal_after_the_stop_is_saved_ends_the_run_as_the_stop_does(data, tmp_path):
  # What a launcher does to the other workers once the first has exited with 75: a signal after
  # the stop's checkpoint and STOP line, while the process is still ending.
  out = tmp_path / "out"
  run = det.start(command(data, out), tmp_path / "out.out")
  wait_for_update(out / "bert_dllog.json", run[2])
  run[2].send_signal(signal.SIGTERM)
  deadline = time.time() + 120
  while not (out / "bert_dllog.json").exists() or not stop_records(out / "bert_dllog.json"):
    assert run[2].poll() is None and time.time() < deadline, (tmp_path / "out.out").read_text()
    time.sleep(0.002)
  signalled_while_running = run[2].poll() is None
  run[2].send_signal(signal.SIGTERM)
  code, output = finish(run, timeout=60)
  assert signalled_while_running  # else this test saw nothing
  # Ended by the watcher (75), or by the signal's default once the watcher was gone, after the
  # line (the interpreter's exit): never "nothing saved", never without its line.
  assert code in (errors.STOP_EXIT_CODE, -signal.SIGTERM), output[-4000:]
  assert "nothing saved" not in output, output[-4000:]
  last_lines = [line for line in output.splitlines() if line.startswith("run_pretraining.py: ")]
  assert len(last_lines) == 1 and stop_lines(last_lines[0]), output[-4000:]
  update = stop_lines(last_lines[0])[0][1]
  assert checkpoint_steps(out) == [update]
  assert [r["update"] for r in stop_records(out / "bert_dllog.json")] == [update]


def test_a_signal_before_the_first_update_saves_nothing(data, tmp_path):
  out = tmp_path / "out"
  run = det.start(command(data, out), tmp_path / "out.out")
  # Logged once the watcher is installed, before the graph is built.
  wait_for_text(tmp_path / "out.out", "Running training from step 0", run[2])
  run[2].send_signal(signal.SIGTERM)
  code, output = finish(run)
  assert code == errors.STOP_EXIT_CODE, output[-4000:]
  assert ("stopped by SIGTERM before the first update: nothing to save; run the same command to "
          "resume") in output
  assert checkpoint_steps(out) == []
  assert [r["update"] for r in stop_records(out / "bert_dllog.json")] == [None]
  assert "Traceback" not in output


def test_a_signal_during_graph_building_ends_the_run_within_5_s(data, tmp_path):
  """A stop is honoured at any moment: 3 s into the graph building of 10,000 layers (minutes of
  work), a SIGTERM ends the run within 5 s with exit 75 and the one line; it was ignored until
  the first update. Nothing is left half-written: no checkpoint, no lock, the run log's STOP
  line."""
  out = tmp_path / "out"
  run = det.start(command(data, out, config="deep"), tmp_path / "out.out")
  try:
    wait_for_text(tmp_path / "out.out", "Running training from step 0", run[2])
    time.sleep(3.0)
    assert run[2].poll() is None
    run[2].send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    try:
      code = run[2].wait(timeout=30)
    except subprocess.TimeoutExpired:
      code = None
    took = time.monotonic() - signalled
  finally:
    helpers.kill_session(run[2])
  output = (tmp_path / "out.out").read_text()
  assert code == errors.STOP_EXIT_CODE and took < 5.0, (code, took, output[-3000:])
  last_lines = [line for line in output.splitlines() if line.startswith("run_pretraining.py: ")]
  assert last_lines == [BEFORE_FIRST_UPDATE], output[-3000:]
  assert "stopping after the update in flight" not in output and "Traceback" not in output
  names = os.listdir(out)
  assert output_lock.LOCK_FILE_NAME not in names, names
  assert checkpoint_steps(out) == [] and not [name for name in names if "_temp" in name], names
  assert [(r["update"], r["exit_code"]) for r in stop_records(out / "bert_dllog.json")] \
      == [(None, errors.STOP_EXIT_CODE)]


# ---------------------------------------------------------------------------------------------
# Horovod: one rank signalled, or the launcher.

def _rank_pids(launcher_pid):
  """{rank: pid} of the run_pretraining.py processes under the launcher."""
  import psutil  # pylint: disable=g-import-not-at-top  (Horovod's launcher needs it)
  ranks = {}
  for proc in psutil.Process(launcher_pid).children(recursive=True):
    try:
      if any(arg.endswith("run_pretraining.py") for arg in proc.cmdline()):
        env = proc.environ()
        rank = env.get("HOROVOD_RANK", env.get("OMPI_COMM_WORLD_RANK"))
        if rank is not None:
          ranks[int(rank)] = proc.pid
    except psutil.Error:
      continue
  return ranks


def _signal_and_check(data, tmp_path, launcher, target, signum=signal.SIGTERM, reporting=2):
  """Starts a 2-worker run under `launcher`, sends `signum` to `target` ("rank0", "rank1" or
  "launcher") once an update is logged; checks the workers stopped at the same update with one
  checkpoint, rank 0's, and that at least `reporting` of them said so."""
  out = tmp_path / "out"
  run = det.start(command(data, out, launcher, horovod=True), tmp_path / "out.out")
  try:
    wait_for_update(out / "bert_dllog.json", run[2])
    if target == "launcher":
      os.kill(run[2].pid, signum)
    else:
      os.kill(_rank_pids(run[2].pid)[int(target[-1])], signum)
    code, output = finish(run)
  finally:
    helpers.kill_session(run[2])
  # Each worker ends with the stop line (the launcher prefixes the worker's output).
  lines = [(name, int(step)) for name, step in re.findall(
      r"run_pretraining.py: stopped by (SIG\w+) at update (\d+); checkpoint written", output)]
  assert reporting <= len(lines) <= 2 and all(line == lines[0] for line in lines), \
      "exit %d\n%s" % (code, output[-6000:])
  name, update = lines[0]
  # The launchers forward SIGTERM and SIGINT as SIGTERM, SIGUSR1 as it is.
  assert name == ("SIGUSR1" if signum == signal.SIGUSR1 else "SIGTERM")
  assert FIRST_LOGGED <= update < UPDATES
  assert checkpoint_steps(out) == [update]
  assert not os.path.exists(out / "worker_1") or checkpoint_steps(out / "worker_1") == []
  assert job.checkpoint_values(out)["micro_step"] == update * det.ACCUMULATION
  stop_updates = [r["update"] for r in stop_records(out / "bert_dllog.json")]
  assert stop_updates == [update] or (len(lines) < 2 and stop_updates == [])
  return code, output, lines


@pytest.mark.parametrize("target", ["rank1", "launcher"])
def test_horovodrun_stops_every_rank_at_the_same_update(data, tmp_path, target):
  launcher = launchers._horovodrun()  # pylint: disable=protected-access
  # horovodrun --gloo sends SIGTERM to every worker on SIGTERM or SIGINT, and SIGKILL 5 s later
  # (GRACEFUL_TERMINATION_TIME_S): on a loaded machine rank 0 may still be exiting then, after its
  # checkpoint (the workers meet after it) and before its own stop line.
  code, output, lines = _signal_and_check(data, tmp_path, launcher, target,
                                          reporting=1 if target == "launcher" else 2)
  # What horovodrun's thread of each worker read as its status ("Process N exit with ..." for
  # all but 0), and horovodrun's own (1 naming the first non-zero one, else 0).
  statuses = [int(s) for s in re.findall(r"Process \d exit with status code (\d+)\.", output)]
  assert code == (1 if statuses else 0), "exit %d\n%s" % (code, output[-6000:])
  if target == "rank1":
    # The first worker to exit is read right (75); horovodrun then ends the other.
    assert "Exit code: 75" in output, output[-6000:]
  else:
    # horovodrun, signalled itself, ends each worker's shell and reaps it in two threads: the
    # loser reads 0 whatever the worker's status was (Horovod 0.28.1; docs/LONG_RUNS.md). Only
    # a worker that did not get to its stop line is killed (137).
    assert set(statuses) <= ({75, 137} if len(lines) < 2 else {75}), output[-6000:]
  # Whatever horovodrun exits with, the supervisor reads a graceful stop from its output.
  assert supervisor.effective_exit_code(code, output.splitlines()) in (
      (errors.STOP_EXIT_CODE, 137) if len(lines) < 2 else (errors.STOP_EXIT_CODE,))


# Under mpirun (Open MPI 4.1) the workers are signalled directly: mpirun itself answers SIGTERM and
# SIGINT with SIGTERM to the workers and SIGKILL odls_base_sigkill_timeout (1 s) later, and the
# SIGUSR1 it forwards did not reach the workers' handler with Horovod's MPI controller
# (docs/LONG_RUNS.md).
@pytest.mark.parametrize("target,signum", [("rank0", signal.SIGTERM), ("rank1", signal.SIGUSR1)])
def test_mpirun_stops_every_rank_at_the_same_update(data, tmp_path, target, signum):
  launcher = launchers._mpirun()  # pylint: disable=protected-access
  code, _, _ = _signal_and_check(data, tmp_path, launcher, target, signum)
  assert code == errors.STOP_EXIT_CODE  # mpirun exits with the first failed worker's status


if __name__ == "__main__":
  sys.exit(pytest.main([__file__, "-v"]))
