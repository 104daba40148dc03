"""Graceful stop on a signal: the state of a process asked to stop, without TensorFlow.

Schedulers ask a job to stop before they kill it: Slurm sends SIGTERM (or the signal of
`--signal`, e.g. SIGUSR1) and kills after KillWait, Kubernetes sends SIGTERM and kills after
terminationGracePeriodSeconds, a terminal sends SIGINT on Ctrl-C. `watch_signals` installs a
watcher for those signals:

  watcher = stop_signals.watch_signals()       # main thread
  ...training loop: if watcher.stop_requested: finish the update, save, stop...
  watcher.close()                              # the previous handlers come back

The first signal only asks for a stop (the training hook finishes the update in flight, saves a
checkpoint and ends the run, docs/LONG_RUNS.md). A second signal while the stop is under way ends
the process at once with status 128 + the signal's number, the shell's convention for "killed by
that signal". Once the stop is saved (its checkpoint written and every worker met after it:
`SignalWatcher.stop_saved`), a further signal still ends the process at once, but with the stop's
own last line and status: nothing is lost by then, and launchers send exactly such a signal to
the other workers as soon as the first one exits with the stop's status. The signals are read by
a thread from Python's wakeup file descriptor, so the second one acts at once even while the main
thread is inside a long TensorFlow call (a Python signal handler would run only after that call
returns).

Such an exit skips `atexit` handlers and `finally` blocks (the main thread cannot be unwound from
inside TensorFlow), so the caller registers what must not be left behind with
`SignalWatcher.add_cleanup`: the watcher's thread runs those actions just before the exit, for
at most CLEANUP_SECONDS in all.

Before the job's first update has begun (`SignalWatcher.begin_updates`: flag checks, graph
building, session set-up, which may take minutes for a large model and sit in C++ for long),
there is no update in flight to finish and nothing new to save. A caller that says how such a stop
ends (`SignalWatcher.end_before_updates`) has the first signal then end the process at once from
the watcher's thread: its record (the run log's STOP line), the clean-up actions, its one line,
its status (the graceful stop's 75), without waiting for the main thread.

`StopState` is the state machine alone (no signals, no threads), for tests and for the watcher.

A command whose work can be dropped at any point and redone needs no update boundary:
`utils/runtime/stop_at_once.py`.
"""

import os
import re
import signal
import threading
import time

# The signals that ask for a graceful stop: the schedulers' (SIGTERM), Slurm's
# `--signal=USR1@<seconds>` convention (SIGUSR1) and Ctrl-C (SIGINT).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)

# What `StopState.on_signal` asks its caller to do.
STOP = "stop"            # the first signal: finish the update in flight, save, stop
EXIT_NOW = "exit_now"    # a second signal during the stop: exit at once

# How long the clean-up actions may take before an exit at once goes ahead without them: a second
# signal means "now", and a scheduler kills soon after it (a stuck network file system must not
# keep the process alive).
CLEANUP_SECONDS = 2.0


def signal_name(signum):
  """"SIGTERM" for signal.SIGTERM (the number as "signal <n>" when it has no name)."""
  try:
    return signal.Signals(signum).name
  except ValueError:
    return "signal %d" % signum


def immediate_exit_code(signum):
  """The exit status of a process ended at once by `signum`: 128 + its number (the shell's)."""
  return 128 + int(signum)


class StopState(object):
  """Whether a stop was asked for, by which signal and when.

  States: running -> stopping (first signal) -> a second signal: EXIT_NOW. Thread-safe: the
  watcher's thread writes, the training loop reads. Whether the first signal came before the
  updates began (`begin_updates`) is decided under the same lock, so a signal and the first
  update's start are ordered one way or the other.
  """

  def __init__(self, clock=time.monotonic):
    """Args: clock: function returning seconds (injected by tests)."""
    self._clock = clock
    self._lock = threading.Lock()
    self._signum = None
    self._received_at = None
    self._signals = 0
    self._updates_begun = False
    self._before_updates = False

  def begin_updates(self):
    """Says the first update is about to begin: from then on a first signal lets it finish.

    Returns:
      True when no signal came before (the update may begin); False when one did (the stop is
      one before the first update: `stopped_before_updates`).
    """
    with self._lock:
      if self._signum is not None:
        return False
      self._updates_begun = True
      return True

  @property
  def stopped_before_updates(self):
    """True when the first signal came before `begin_updates`."""
    with self._lock:
      return self._before_updates

  def on_signal(self, signum):
    """Books signal `signum`.

    Returns:
      STOP for the first signal, EXIT_NOW for any later one.
    """
    with self._lock:
      self._signals += 1
      if self._signum is None:
        self._signum = int(signum)
        self._received_at = self._clock()
        self._before_updates = not self._updates_begun
        return STOP
      return EXIT_NOW

  @property
  def stop_requested(self):
    """True once a signal arrived."""
    with self._lock:
      return self._signum is not None

  @property
  def signum(self):
    """The number of the first signal, or None."""
    with self._lock:
      return self._signum

  @property
  def signal_name(self):
    """The name of the first signal ("SIGTERM"), or None."""
    signum = self.signum
    return None if signum is None else signal_name(signum)

  @property
  def received_at(self):
    """The clock's time of the first signal, or None."""
    with self._lock:
      return self._received_at

  @property
  def signals_received(self):
    """How many signals arrived."""
    with self._lock:
      return self._signals


def _say(message):
  """Writes one line to stderr (the watcher's thread: no logging locks held by the main one)."""
  try:
    os.write(2, ("%s\n" % message).encode("utf-8", "replace"))
  except OSError:
    pass


def _exit_at_once(status):
  """Ends the process now with `status`, without unwinding (another thread may run TF)."""
  os._exit(status)  # pylint: disable=protected-access


def run_cleanups(actions, timeout, announce):
  """Runs `actions` one after the other, in a thread of their own, waiting at most `timeout`.

  An action that raises is reported and the next one runs: the exit that follows must happen
  whatever fails. The thread is a daemon, so one still running does not delay the exit.

  Args:
    actions: functions () -> None.
    timeout: seconds to wait for all of them.
    announce: function message -> None, told of an action that failed or did not end in time.

  Returns:
    True when every action returned (raising or not) within `timeout`.
  """
  if not actions:
    return True

  def run_all():
    for action in actions:
      try:
        action()
      except Exception as e:  # pylint: disable=broad-except  (reported; the exit goes on)
        announce("clean-up before the exit failed: %s" % (str(e) or type(e).__name__))

  thread = threading.Thread(target=run_all, name="stop-signals-cleanup", daemon=True)
  thread.start()
  thread.join(timeout)
  if thread.is_alive():
    announce("clean-up before the exit still running after %g s: exiting without it" % timeout)
    return False
  return True


class SignalWatcher(object):
  """Installed handlers for STOP_SIGNALS, a wakeup pipe and the thread that reads it.

  Use `watch_signals` to make one. Attributes mirror the `StopState` (stop_requested, signum,
  signal_name, received_at).
  """

  def __init__(self, state, signals, exit_at_once, announce, cleanup_seconds=CLEANUP_SECONDS):
    self.state = state
    self._signals = tuple(signals)
    self._exit_at_once = exit_at_once
    self._announce = announce
    self._cleanup_seconds = cleanup_seconds
    self._cleanups = ()  # replaced whole by `add_cleanup`: the reader thread sees one tuple
    self._previous_handlers = {}
    self._previous_wakeup_fd = -1
    self._saved_stop = None  # (last line, exit status) once the stop is saved
    self._before_updates_end = None  # (ending line, exit status, record), `end_before_updates`
    self._exited = threading.Event()  # set after `exit_at_once` returns (tests inject one)
    self._read_fd, self._write_fd = os.pipe()
    os.set_blocking(self._write_fd, False)
    self._thread = threading.Thread(target=self._read_signals, name="stop-signals", daemon=True)
    self._closed = False

  def _install(self):
    """Installs the handlers and the wakeup fd (main thread only); starts the reader thread."""
    self._thread.start()
    for signum in self._signals:
      self._previous_handlers[signum] = signal.signal(signum, _python_level_handler)
    self._previous_wakeup_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)

  def _read_signals(self):
    """The thread: every byte of the wakeup pipe is a signal number."""
    while True:
      try:
        data = os.read(self._read_fd, 64)
      except OSError:
        return
      if not data:
        return
      for signum in data:
        if signum not in self._signals:
          continue
        self.handle(signum)

  def stop_saved(self, last_line, exit_status):
    """Says the stop is saved: its checkpoint is written and every worker has met after it.

    From then on a signal ends the process at once as the stop would have ended it: it prints
    `last_line` and exits with `exit_status`, instead of the "nothing saved" exit.

    Args:
      last_line: the line the process ends with, e.g. "run_pretraining.py: stopped by SIGTERM at
        update 400; checkpoint written; run the same command to resume".
      exit_status: its exit status (`errors.STOP_EXIT_CODE`).
    """
    self._saved_stop = (last_line, exit_status)  # one assignment: the reader thread sees both

  def end_before_updates(self, ending_line, exit_status, record=None):
    """Has a first signal before `begin_updates` end the process at once, from this thread.

    Before the first update there is nothing to finish and nothing new to save, and the main
    thread may be building a graph for minutes or sit in TensorFlow's C++ (session set-up,
    restore), where no Python code of it runs: the watcher's thread does the whole ending. It
    calls `record(signal name)` (e.g. the run log's STOP line), then the clean-up actions
    (`add_cleanup`), all within the clean-up time, prints `ending_line(signal name)` and exits
    with `exit_status`. Without this call, such a signal asks for a stop like any other.

    Args:
      ending_line: function signal name -> the line the process ends with.
      exit_status: its exit status (`errors.STOP_EXIT_CODE`).
      record: None, or a function signal name -> None, run first (same rules as a clean-up).
    """
    self._before_updates_end = (ending_line, exit_status, record)  # one assignment: see above

  def begin_updates(self):
    """Says the first update is about to begin (main thread, right before its session run).

    Returns:
      True: no signal came before; from now on a first signal lets the update in flight finish.
      False: a signal came before; when `end_before_updates` was called, the watcher's thread
      is ending the process (`wait_for_exit`).
    """
    return self.state.begin_updates()

  @property
  def ends_before_updates(self):
    """True when the watcher's thread ends (or has ended) the process for a signal that came
    before the first update: the main thread must then write nothing more."""
    return self._before_updates_end is not None and self.state.stopped_before_updates

  def wait_for_exit(self, timeout=None):
    """Blocks the calling thread while the watcher's thread ends the process (`timeout` seconds
    at most, None: no limit). Returns True once `exit_at_once` has returned (injected ones)."""
    return self._exited.wait(timeout)

  def add_cleanup(self, action):
    """Registers an action to run just before the watcher ends the process at once.

    The actions run in the order they were added, in a thread of the watcher's, while the main
    thread may still be inside TensorFlow (e.g. writing the checkpoint the action removes): each
    must be quick and must not take locks the main thread may hold (logging's included). One that
    fails is reported and skipped; all of them get CLEANUP_SECONDS (`watch_signals`), then the
    exit goes ahead.

    Args:
      action: function () -> None.
    """
    self._cleanups = self._cleanups + (action,)

  def _exit_now(self, status, first=(), last_line=None):
    """Runs the actions `first` and the clean-up actions, prints `last_line` (if any), then ends
    the process with `status`."""
    run_cleanups(tuple(first) + self._cleanups, self._cleanup_seconds, self._announce)
    if last_line is not None:
      self._announce(last_line)
    self._exit_at_once(status)
    self._exited.set()

  def _end_before_updates(self, name):
    """The ending of a signal `name` before the first update (`end_before_updates`)."""
    ending_line, exit_status, record = self._before_updates_end
    first = () if record is None else (lambda: record(name),)
    try:
      line = ending_line(name)
    except Exception:  # pylint: disable=broad-except  (the exit must happen whatever fails)
      line = stop_message(name, None, False)
    self._exit_now(exit_status, first, line)

  def handle(self, signum):
    """Acts on `signum` as the watcher does: the first asks for a stop (or, before the first
    update, ends the process: `end_before_updates`), a second exits now (with the stop's own line
    and status once the stop is saved), after the clean-up actions."""
    action = self.state.on_signal(signum)
    name = signal_name(signum)
    if action == STOP and self.ends_before_updates:
      self._end_before_updates(name)
      return
    if action == STOP:
      # No promise of a checkpoint: the save needs every rank, and a launcher sends this signal
      # too when another rank has died. The line the run ends with says what was saved.
      self._announce("%s received: stopping after the update in flight (send it again to exit "
                     "at once)" % name)
      return
    saved_stop = self._saved_stop
    if saved_stop is not None:
      last_line, exit_status = saved_stop
      self._announce(last_line)
      self._exit_now(exit_status)
      return
    self._announce("%s received again during the stop: exiting at once (status %d), nothing "
                   "saved" % (name, immediate_exit_code(signum)))
    self._exit_now(immediate_exit_code(signum))

  @property
  def stop_requested(self):
    return self.state.stop_requested

  @property
  def signum(self):
    return self.state.signum

  @property
  def signal_name(self):
    return self.state.signal_name

  @property
  def received_at(self):
    return self.state.received_at

  def close(self, ignore_from_now=False):
    """Restores the previous handlers and wakeup fd; ends the thread (main thread only).

    Args:
      ignore_from_now: leave the signals ignored instead, for a process ending on an error whose
        line is yet to be printed while a launcher signals it (the default action ends it
        silently); the launcher's SIGKILL still ends one whose exit hangs.
    """
    if self._closed:
      return
    self._closed = True
    signal.set_wakeup_fd(self._previous_wakeup_fd)
    for signum, handler in self._previous_handlers.items():
      handler = signal.SIG_IGN if ignore_from_now else handler
      signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    os.close(self._write_fd)  # the reader sees the end of the pipe
    self._thread.join(timeout=5)
    os.close(self._read_fd)

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc_info):
    self.close()


def _python_level_handler(signum, frame):
  """Python's handler for the stop signals: nothing (the watcher's thread acts on the wakeup
  byte the interpreter writes). Installing it replaces the default action (termination) and
  Python's KeyboardInterrupt on SIGINT."""
  del signum, frame  # unused


def watch_signals(signals=STOP_SIGNALS, clock=time.monotonic, exit_at_once=_exit_at_once,
                  announce=_say, cleanup_seconds=CLEANUP_SECONDS):
  """Installs a `SignalWatcher` for `signals` (from the main thread).

  Args:
    signals: the signals that ask for a stop.
    clock: see `StopState`.
    exit_at_once: function exit status -> None that ends the process (tests inject one that
      records).
    announce: function message -> None, for the lines the watcher prints (stderr by default).
    cleanup_seconds: how long the clean-up actions (`SignalWatcher.add_cleanup`) may take before
      an exit at once.

  Returns:
    the installed `SignalWatcher`; `close()` restores what was there.

  Raises:
    ValueError: when not called from the main thread (Python's rule for signal handlers).
  """
  if threading.current_thread() is not threading.main_thread():
    raise ValueError("stop signals can only be watched from the main thread")
  watcher = SignalWatcher(StopState(clock), signals, exit_at_once, announce, cleanup_seconds)
  watcher._install()  # pylint: disable=protected-access
  return watcher


# A `stop_message` line (the process then exits STOP_EXIT_CODE), found in a launcher's output.
STOP_MESSAGE = re.compile(r"stopped by SIG\w+ (at update \d+;|before the first update:) ")


def stop_message(signal_name_value, update, checkpoint_written):
  """The line a job stopped by a signal ends with (log and stderr).

  Args:
    signal_name_value: e.g. "SIGTERM".
    update: the global step the job stopped at, or None before its first update.
    checkpoint_written: a checkpoint of that update is on disk.

  Returns:
    e.g. "stopped by SIGTERM at update 400; checkpoint written; run the same command to resume".
  """
  if update is None:
    return ("stopped by %s before the first update: nothing to save; run the same command to "
            "resume" % signal_name_value)
  return "stopped by %s at update %d; %s; run the same command to resume" % (
      signal_name_value, update,
      "checkpoint written" if checkpoint_written else "no checkpoint written by this worker")


# A stop for a bad input record (`StopRequests`) is combined over the workers as this code plus
# the finding worker's rank: above every signal number, so the maximum over the workers says a bad
# record (and whose) even when another worker got a signal: the data must be fixed either way.
INPUT_PROBLEM_CODE = 1000


def input_problem_rank(code):
  """The rank that found a bad input record, for a stop `code` that says so; None for a signal."""
  return None if code is None or code < INPUT_PROBLEM_CODE else code - INPUT_PROBLEM_CODE


class StopRequests(object):
  """What the training stop hook reads (`stop_requested`, `signum`): a signal to this process or a
  bad input record found by its background check.

  `signum` is the stop's code: the signal's number, or `INPUT_PROBLEM_CODE + rank` once the
  check found a problem (that wins over a signal: a resumed run would meet the record again).
  """

  def __init__(self, watcher, input_check=None, rank=0):
    """Args:
      watcher: the `SignalWatcher` (or anything with `stop_requested` and `signum`).
      input_check: None, or anything with `problem` (None while none is found), e.g.
        `utils.data.records.BackgroundRecordCheck`.
      rank: this worker's rank.
    """
    self._watcher = watcher
    self._input_check = input_check
    self._rank = int(rank)

  @property
  def input_problem(self):
    """The input check's problem ("<file>: record <k> at byte offset <b>: <what>"), or None."""
    return None if self._input_check is None else self._input_check.problem

  @property
  def stop_requested(self):
    return self.input_problem is not None or self._watcher.stop_requested

  @property
  def signum(self):
    if self.input_problem is not None:
      return INPUT_PROBLEM_CODE + self._rank
    return self._watcher.signum

