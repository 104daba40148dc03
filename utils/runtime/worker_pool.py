"""A pool of forked worker processes, one process per task, that die with their parent.

  for index, result in worker_pool.run_tasks(function, tasks, num_workers,
                                             describe=lambda task: "input file %s" % task[1]):
    ...

Each task runs `function(task)` in a process of its own (forked, at most `num_workers` at a time),
so a process that dies is known by its task and every task starts with the parent's memory, not
with what earlier tasks left behind. Results come back in the order the tasks finish, each with
its task's index. A worker asks the kernel to kill it when the parent dies (Linux `prctl`), so a
parent killed outright (kill -9) leaves no worker running on. A worker ignores the stop signals
(SIGINT, SIGTERM, SIGUSR1), which reach a whole process group or job at once: the parent decides
(it ends, and its workers with it, or it stops them itself: `run_tasks` kills the workers still
running when it ends early, however it ends). With one worker the tasks run in this process, one
after the other, and their errors propagate unchanged.

Errors, with several workers (the pool stops at the first and ends the other workers):
  * an exception of `passed_errors` (bad input; its message names the input) is raised again in
    the parent with the same message, as the first of those classes it is an instance of;
  * any other exception becomes a RuntimeError "<task>: <type>: <message>";
  * a worker that ends without a result (killed, out of memory, os._exit) becomes a RuntimeError
    naming its task and exit code.

The function and the tasks reach the workers by fork, not by pickling: a function defined at run
time (a test's stand-in) runs in the workers as it is. Results go back through a pipe and must
pickle. Linux only: "fork" and `prctl` (elsewhere workers outlive a parent killed outright).

What the tasks wrote for the parent to finish is the parent's to remove; should the parent die
outright, a process of `clean_up_if_killed` does it for it:

  with worker_pool.clean_up_if_killed(remove_partial_files):
    for index, result in worker_pool.run_tasks(...): ...
"""

import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import signal
import time

# prctl(2) option: the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1
try:
  # Looked up at import, not after a fork (no dynamic loading between fork and exec).
  _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
  _prctl = None
# Seconds between two looks of a cleaner process (`clean_up_if_killed`) at its parent.
PARENT_POLL_SECONDS = 0.1


def default_num_workers():
  """The number of cores this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def die_with_parent(parent_pid, signum=signal.SIGKILL):
  """Has the kernel send `signum` to this (forked) process when its parent dies, even by kill -9.

  Also fit for `subprocess.Popen`'s `preexec_fn` (it loads nothing between fork and exec). The
  signal comes when the parent's thread that forked ends: fork from a thread that lives as long as
  the parent (the main one).

  Args:
    parent_pid: the pid of the parent, read before the fork; when the parent has already died
      (this process was re-parented), this process exits at once with status 1.
    signum: the signal (SIGKILL: ends at once; SIGTERM lets a launcher end what it started).

  Returns:
    True when the death signal is set, False where prctl is missing (not Linux).
  """
  if _prctl is None:
    return False
  _prctl(_PR_SET_PDEATHSIG, int(signum))
  if os.getppid() != parent_pid:  # the parent died before prctl took effect
    os._exit(1)  # pylint: disable=protected-access
  return True


def _run_in_child(function, task, describe, passed_errors, connection, environ, parent_pid):
  """Body of a worker process (`_start_deaf`): runs `function(task)` and sends its result or
  error."""
  _ignore_stop_signals()
  die_with_parent(parent_pid)
  os.environ.update(environ)
  try:
    connection.send(("ok", function(task)))
  except passed_errors as e:  # bad input: raised again in the parent
    kind = next(k for k, error_class in enumerate(passed_errors) if isinstance(e, error_class))
    connection.send(("passed", kind, str(e)))
  except Exception as e:  # reported to the parent, which stops the run
    connection.send(("error", None, "%s: %s: %s" % (describe(task), type(e).__name__, e)))
  finally:
    connection.close()


def run_tasks(function, tasks, num_workers, describe=str, passed_errors=(ValueError,),
              environ=None):
  """Yields (task index, function(task)) for every task, in the order the tasks finish.

  Args:
    function: called with one task; returns a picklable result. Looked up by the caller, so the
      workers run whatever it is when `run_tasks` is called.
    tasks: sequence of tasks.
    num_workers: processes at a time (>= 1); 1 runs the tasks here, in order.
    describe: task -> its name in error messages (e.g. "input file a.txt").
    passed_errors: exception classes a worker's error is raised again as, with its message: as
      the first of them it is an instance of (each must take one message argument).
    environ: dict of environment variables set in each worker process (e.g. its share of the
      threads); not applied with one worker.

  Raises:
    an exception of `passed_errors`, re-raised from a worker.
    RuntimeError: naming the task, when its worker fails otherwise or dies.
    ValueError: for num_workers < 1.
  """
  if num_workers < 1:
    raise ValueError("num_workers must be >= 1, got %r" % (num_workers,))
  if num_workers == 1:
    for index, task in enumerate(tasks):
      yield index, function(task)
    return
  context = multiprocessing.get_context("fork")
  passed_errors = tuple(passed_errors)
  environ = dict(environ or {})
  pending = list(reversed(list(enumerate(tasks))))
  running = {}  # process sentinel -> (process, receiving connection, index, task)
  try:
    while pending or running:
      while pending and len(running) < num_workers:
        index, task = pending.pop()
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(
            target=_run_in_child,
            args=(function, task, describe, passed_errors, sender, environ, os.getpid()),
            daemon=True)
        _start_deaf(process)
        sender.close()
        running[process.sentinel] = (process, receiver, index, task)
      for sentinel in multiprocessing.connection.wait(list(running)):
        process, receiver, index, task = running.pop(sentinel)
        try:
          message = receiver.recv() if receiver.poll() else None
        except EOFError:  # the process ended without sending anything
          message = None
        receiver.close()
        process.join()
        if message is None:
          raise RuntimeError("the worker process of %s died (exit code %s; killed? out of "
                             "memory?)" % (describe(task), process.exitcode))
        if message[0] == "passed":
          raise passed_errors[message[1]](message[2])
        if message[0] == "error":
          raise RuntimeError(message[2])
        yield index, message[1]
  finally:
    for process, receiver, _, _ in running.values():
      process.kill()  # it ignores SIGTERM
      process.join()
      receiver.close()


# The signals the workers and the cleaner ignore: they reach a whole process group or job at once,
# and the parent decides what they mean (utils/runtime/stop_signals.py).
_CHILDREN_IGNORE = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


def _start_deaf(process):
  """Starts a forked `process` whose body begins with `_ignore_stop_signals()`.

  The signals are blocked across the fork, so that the child is born with them blocked and none
  can end it (or run the parent's handler in it) before it ignores them (seen: a SIGTERM to the
  group just after a cleaner was forked killed it, nothing was cleaned). Here they stay pending
  and act once unblocked, as before.
  """
  blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _CHILDREN_IGNORE)
  try:
    process.start()
  finally:
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _ignore_stop_signals():
  """In a child started by `_start_deaf`: ignores the stop signals (one already pending is
  discarded), then unblocks them."""
  for signum in _CHILDREN_IGNORE:
    signal.signal(signum, signal.SIG_IGN)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, _CHILDREN_IGNORE)


@contextlib.contextmanager
def clean_up_if_killed(clean_up, poll_seconds=PARENT_POLL_SECONDS):
  """Context: should this process die inside the block, however it dies (kill -9 included),
  `clean_up()` runs right after, in a forked process.

  The workers cannot do it: the kernel kills them with their parent (`die_with_parent`), and the
  worker of a finished task is gone while its output waits for the parent. The cleaner process
  polls its parent's pid every `poll_seconds`; it ignores the stop signals, which reach a whole
  process group or job at once and must not end it before the process it cleans up after. It is
  killed when the block ends, however it ends (the parent cleans up after its own errors).

  Args:
    clean_up: called without arguments in the cleaner (e.g. removes partial outputs); it sees this
      process's memory as it was when the block started.
    poll_seconds: seconds between two looks at the parent.

  Yields:
    None.
  """
  context = multiprocessing.get_context("fork")
  cleaner = context.Process(target=_clean_up_after_parent,
                            args=(clean_up, os.getpid(), poll_seconds), daemon=True)
  _start_deaf(cleaner)
  try:
    yield
  finally:
    cleaner.kill()
    cleaner.join()


def _clean_up_after_parent(clean_up, parent_pid, poll_seconds):
  """Body of the cleaner process: runs `clean_up()` once the process `parent_pid` has died (this
  process was re-parented)."""
  _ignore_stop_signals()
  while os.getppid() == parent_pid:
    time.sleep(poll_seconds)
  clean_up()
