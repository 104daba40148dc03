"""utils/runtime/worker_pool.py: results, errors named by their task, clean ends, death with the
parent, and the cleaner that cleans up after a parent killed outright.

The tasks are small functions of this file; what a worker did is read back from its result (its
pid, its environment) or from files it writes.
"""

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from utils.runtime import worker_pool

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# prctl(2): read the signal this process gets when its parent dies.
_PR_GET_PDEATHSIG = 2


def square_after_a_nap(task):
  """(task, task ** 2, pid) after a short sleep."""
  time.sleep(0.05)
  return task, task * task, os.getpid()


def last_first(task):
  """Task (i, directory) of 0..4 ends only after the parent has received task i + 1's result (the
  test marks each result it receives with a file `received-<i>`): 4 first, 0 last, whatever the
  load. A task gives up after 60 s, so a pool that held results back fails the test, not hangs it."""
  index, directory = task
  deadline = time.time() + 60
  while (index < 4 and time.time() < deadline
         and not os.path.exists(os.path.join(directory, "received-%d" % (index + 1)))):
    time.sleep(0.01)
  return index


def death_signal(task):
  """(task, the parent-death signal of this process, RAYON_NUM_THREADS here)."""
  value = ctypes.c_int(0)
  ctypes.CDLL(None, use_errno=True).prctl(_PR_GET_PDEATHSIG, ctypes.byref(value))
  return task, value.value, os.environ.get("RAYON_NUM_THREADS")


def fails_on_two(task):
  if task == 2:
    raise KeyError("no such key %d" % task)
  time.sleep(0.02)
  return task


def bad_input_on_one(task):
  if task == 1:
    raise ValueError("input %d is not UTF-8 text" % task)
  return task


def exits_on_three(task):
  if task == 3:
    os._exit(9)  # as if killed
  return task


# Children this process had before the test (a session fixture's servers, such as the test
# cluster's sshd when the suite runs as root): not the pool's, so not counted.
_children_before = set()


@pytest.fixture(autouse=True)
def _note_children_before():
  _children_before.clear()
  _children_before.update(_child_pids())
  yield


def children_alive():
  """Pids of this process's children started during the test that still run (not zombies)."""
  alive = []
  for pid in _child_pids():
    if pid not in _children_before and _state(pid) not in (None, "Z"):
      alive.append(pid)
  return alive


def _child_pids():
  try:
    with open("/proc/self/task/%d/children" % os.getpid()) as reader:
      return [int(pid) for pid in reader.read().split()]
  except OSError:
    return []


def _state(pid):
  """The state letter of process `pid` (R, S, Z, ...), None when it does not exist."""
  try:
    with open("/proc/%d/stat" % pid) as reader:
      return reader.read().rsplit(")", 1)[1].split()[0]
  except OSError:
    return None


@pytest.mark.parametrize("num_workers", [1, 2, 5])
def test_every_task_gives_its_result_with_its_index(num_workers):
  tasks = [0, 1, 2, 3, 4]
  results = list(worker_pool.run_tasks(square_after_a_nap, tasks, num_workers))
  assert sorted(index for index, _ in results) == [0, 1, 2, 3, 4]
  for index, (task, square, pid) in results:
    assert task == tasks[index] and square == tasks[index] ** 2
    assert (pid == os.getpid()) == (num_workers == 1)  # one worker: in this process
  if num_workers == 1:
    assert [index for index, _ in results] == tasks  # in order
  else:
    assert len({pid for _, (_, _, pid) in results}) == 5  # a process per task
  assert not children_alive()


def test_results_come_as_the_tasks_finish(tmp_path):
  tasks = [(index, str(tmp_path)) for index in range(5)]
  results = []
  for result in worker_pool.run_tasks(last_first, tasks, 5):
    results.append(result)
    (tmp_path / ("received-%d" % result[1])).touch()
  assert results == [(4, 4), (3, 3), (2, 2), (1, 1), (0, 0)]


def test_workers_get_the_environment_and_die_with_the_parent_signal():
  results = dict(worker_pool.run_tasks(death_signal, [0, 1], 2,
                                       environ={"RAYON_NUM_THREADS": "3"}))
  assert results == {0: (0, signal.SIGKILL, "3"), 1: (1, signal.SIGKILL, "3")}


def test_an_exception_in_a_worker_names_its_task_and_ends_the_others():
  with pytest.raises(RuntimeError, match=r"^task 2: KeyError: 'no such key 2'$"):
    list(worker_pool.run_tasks(fails_on_two, [0, 1, 2, 3, 4, 5], 2,
                               describe=lambda task: "task %d" % task))
  assert not children_alive()


def test_a_passed_error_keeps_its_type_and_message():
  with pytest.raises(ValueError, match=r"^input 1 is not UTF-8 text$"):
    list(worker_pool.run_tasks(bad_input_on_one, [0, 1, 2], 2))
  with pytest.raises(ValueError, match=r"^input 1 is not UTF-8 text$"):  # one worker: as raised
    list(worker_pool.run_tasks(bad_input_on_one, [0, 1, 2], 1))
  with pytest.raises(RuntimeError, match=r"^file 1: ValueError: input 1 is not UTF-8 text$"):
    list(worker_pool.run_tasks(bad_input_on_one, [0, 1, 2], 2, passed_errors=(),
                               describe=lambda task: "file %d" % task))


def test_a_worker_that_dies_is_named_with_its_exit_code():
  with pytest.raises(RuntimeError, match=r"the worker process of file 3 died \(exit code 9; "):
    list(worker_pool.run_tasks(exits_on_three, [0, 1, 2, 3], 3,
                               describe=lambda task: "file %d" % task))
  assert not children_alive()


def test_a_consumer_that_stops_early_leaves_no_worker_running():
  results = worker_pool.run_tasks(square_after_a_nap, [0, 1, 2, 3, 4], 3)
  next(results)
  assert children_alive()  # the others are still working
  results.close()
  assert not children_alive()


def signalled_by_itself(signum):
  """A task that sends `signum` to its own process, then returns it and how the process's
  handler for it is set."""
  os.kill(os.getpid(), signum)
  time.sleep(0.05)
  return signum, signal.getsignal(signum)


def test_workers_ignore_the_stop_signals_the_parent_decides():
  """A stop signal reaches a whole process group: a worker goes on (its parent ends it, by
  ending or by the pool's kill when it ends early), so that only the parent says what it means."""
  signums = [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1]
  results = dict(worker_pool.run_tasks(signalled_by_itself, signums, 3))
  assert results == {i: (signums[i], signal.SIG_IGN) for i in range(3)}
  # The consumer's early end kills the workers that ignore SIGTERM.
  results = worker_pool.run_tasks(square_after_a_nap, [0, 1, 2, 3, 4], 3)
  next(results)
  results.close()
  assert not children_alive()


def test_bad_worker_count():
  with pytest.raises(ValueError, match="num_workers must be >= 1, got 0"):
    list(worker_pool.run_tasks(square_after_a_nap, [1], 0))


_PARENT_PROGRAM = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, %(repo)r)
    from utils.runtime import worker_pool

    def sleeper(task):
      with open(os.path.join(%(directory)r, "worker-%%d.pid" %% task), "w") as writer:
        writer.write(str(os.getpid()))
      time.sleep(120)

    list(worker_pool.run_tasks(sleeper, [0, 1], 2))
    """)


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_workers_die_when_the_parent_is_killed(tmp_path):
  program = _PARENT_PROGRAM % {"repo": REPO_ROOT, "directory": str(tmp_path)}
  parent = subprocess.Popen([sys.executable, "-c", program])
  try:
    pid_files = [tmp_path / "worker-0.pid", tmp_path / "worker-1.pid"]
    deadline = time.time() + 60
    while not all(p.exists() and p.read_text() for p in pid_files):
      assert parent.poll() is None, "the parent ended early"
      assert time.time() < deadline, "the workers did not start"
      time.sleep(0.1)
    workers = [int(p.read_text()) for p in pid_files]
    assert all(_state(pid) not in (None, "Z") for pid in workers)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    deadline = time.time() + 30
    while any(_state(pid) not in (None, "Z") for pid in workers):
      assert time.time() < deadline, "workers outlived their parent: %s" % workers
      time.sleep(0.1)
  finally:
    if parent.poll() is None:
      parent.kill()
      parent.wait()


def test_a_cleaner_does_nothing_while_its_parent_lives_and_ends_with_the_block(tmp_path):
  marker = tmp_path / "cleaned"
  clean_up = lambda: marker.write_text("cleaned")  # noqa: E731
  with worker_pool.clean_up_if_killed(clean_up, poll_seconds=0.01):
    assert len(children_alive()) == 1  # the cleaner, waiting
    time.sleep(0.1)
  with pytest.raises(KeyError):
    with worker_pool.clean_up_if_killed(clean_up, poll_seconds=0.01):
      raise KeyError("the parent's own error: it cleans up itself")
  time.sleep(0.1)
  assert not marker.exists() and not children_alive()


_CLEANED_PARENT_PROGRAM = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, %(repo)r)
    from utils.runtime import worker_pool

    def clean_up():
      open(os.path.join(%(directory)r, "cleaned"), "w").close()

    with worker_pool.clean_up_if_killed(clean_up):
      open(os.path.join(%(directory)r, "started"), "w").close()
      time.sleep(120)
    """)


@pytest.mark.e2e
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kill", ["kill -9 of the parent", "SIGTERM to the process group"])
def test_a_cleaner_cleans_up_after_a_killed_parent_and_ends(tmp_path, kill):
  program = _CLEANED_PARENT_PROGRAM % {"repo": REPO_ROOT, "directory": str(tmp_path)}
  parent = subprocess.Popen([sys.executable, "-c", program], start_new_session=True)
  try:
    deadline = time.time() + 60
    while not (tmp_path / "started").exists():
      assert parent.poll() is None, "the parent ended early"
      assert time.time() < deadline, "the parent did not start"
      time.sleep(0.05)
    (cleaner,) = [int(pid) for pid in open("/proc/%d/task/%d/children"
                                           % (parent.pid, parent.pid)).read().split()]
    if kill == "kill -9 of the parent":
      parent.send_signal(signal.SIGKILL)
      assert parent.wait(timeout=30) == -signal.SIGKILL
    else:
      # As a scheduler stops a job: every process of the group gets it, the cleaner too, which
      # must outlive the parent to clean up after it.
      os.killpg(parent.pid, signal.SIGTERM)
      assert parent.wait(timeout=30) == -signal.SIGTERM
    deadline = time.time() + 10
    while not (tmp_path / "cleaned").exists() or _state(cleaner) not in (None, "Z"):
      assert time.time() < deadline, "10 s after the parent died: cleaned %s, cleaner %s" % (
          (tmp_path / "cleaned").exists(), _state(cleaner))
      time.sleep(0.05)
  finally:
    try:
      os.killpg(parent.pid, signal.SIGKILL)  # what is left, should the test fail
    except ProcessLookupError:
      pass
    parent.wait()


_SIGNALLED_AT_ONCE_PROGRAM = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, %(repo)r)
    from utils.runtime import worker_pool

    def clean_up():
      open(os.path.join(%(directory)r, "cleaned"), "w").close()

    with worker_pool.clean_up_if_killed(clean_up):
      os.killpg(0, signal.SIGTERM)  # the whole group, the cleaner just forked included
      time.sleep(120)
    """)


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_a_cleaner_signalled_as_it_starts_still_cleans_up(tmp_path):
  # The race a scheduler's SIGTERM can hit: the cleaner is forked but has not yet set its own
  # signal handling. Seen in a full suite run: the cleaner died with its parent, nothing cleaned.
  for attempt in range(5):
    directory = str(tmp_path / str(attempt))
    os.mkdir(directory)
    program = _SIGNALLED_AT_ONCE_PROGRAM % {"repo": REPO_ROOT, "directory": directory}
    parent = subprocess.Popen([sys.executable, "-c", program], start_new_session=True)
    try:
      assert parent.wait(timeout=60) == -signal.SIGTERM
      deadline = time.time() + 10
      while not os.path.exists(os.path.join(directory, "cleaned")):
        assert time.time() < deadline, "attempt %d: nothing cleaned 10 s after the parent died" % (
            attempt)
        time.sleep(0.05)
    finally:
      try:
        os.killpg(parent.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
