"""The stop-signal state machine and watcher (utils/runtime/stop_signals.py), without TensorFlow:
real signals sent to this process, the exit injected."""

import os
import signal
import threading
import time

import pytest

from utils.runtime import output_lock
from utils.runtime import stop_signals


class FakeClock(object):
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_first_signal_asks_to_stop_and_a_second_to_exit():
  clock = FakeClock()
  state = stop_signals.StopState(clock)
  assert not state.stop_requested and state.signum is None and state.signal_name is None
  assert state.on_signal(signal.SIGUSR1) == stop_signals.STOP
  clock.now = 107.5
  assert state.on_signal(signal.SIGTERM) == stop_signals.EXIT_NOW
  assert state.on_signal(signal.SIGINT) == stop_signals.EXIT_NOW
  # The first signal is the one that stopped the job, at its time.
  assert state.stop_requested and state.signum == signal.SIGUSR1
  assert state.signal_name == "SIGUSR1" and state.received_at == 100.0
  assert state.signals_received == 3


def test_names_and_exit_codes():
  assert stop_signals.signal_name(15) == "SIGTERM"
  assert stop_signals.signal_name(2) == "SIGINT"
  assert stop_signals.signal_name(10) == "SIGUSR1"  # Linux numbering
  assert stop_signals.immediate_exit_code(signal.SIGTERM) == 143  # what a shell reports
  assert stop_signals.immediate_exit_code(signal.SIGINT) == 130


def test_stop_messages():
  assert stop_signals.stop_message("SIGTERM", 400, True) == (
      "stopped by SIGTERM at update 400; checkpoint written; run the same command to resume")
  assert "before the first update: nothing to save" in stop_signals.stop_message(
      "SIGINT", None, False)


def _wait(condition, timeout=5.0):
  deadline = time.time() + timeout
  while not condition():
    assert time.time() < deadline, "timed out"
    time.sleep(0.01)


@pytest.mark.parametrize("signum", stop_signals.STOP_SIGNALS)
def test_watcher_books_real_signals_and_restores_the_handlers(signum):
  before = {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS}
  exits, lines = [], []
  watcher = stop_signals.watch_signals(exit_at_once=exits.append, announce=lines.append)
  try:
    assert not watcher.stop_requested
    os.kill(os.getpid(), signum)
    _wait(lambda: watcher.stop_requested)
    assert watcher.signum == signum and exits == []
    assert "stopping after the update in flight" in lines[0]
    os.kill(os.getpid(), signum)
    _wait(lambda: exits)
    assert exits == [128 + signum] and "exiting at once (status %d)" % (128 + signum) in lines[1]
    assert "nothing saved" in lines[1]
  finally:
    watcher.close()
  assert {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS} == before
  assert signal.set_wakeup_fd(-1) == -1  # the wakeup fd was given back


def test_a_watcher_closed_for_a_process_already_ending_leaves_the_signals_ignored():
  """A worker ending on another rank's death still has its line to print when the launcher's
  SIGTERM comes: closed so, the watcher leaves the signals ignored, not at the default action
  (which ends the process at once, silently)."""
  before = {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS}
  exits, lines = [], []
  watcher = stop_signals.watch_signals(exit_at_once=exits.append, announce=lines.append)
  try:
    watcher.close(ignore_from_now=True)
    assert {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS} == {
        s: signal.SIG_IGN for s in stop_signals.STOP_SIGNALS}
    assert signal.set_wakeup_fd(-1) == -1  # the wakeup fd was given back
    for signum in stop_signals.STOP_SIGNALS:
      os.kill(os.getpid(), signum)  # ignored: this process goes on
    time.sleep(0.2)
    assert exits == [] and lines == [] and not watcher.stop_requested
  finally:
    watcher.close()
    for signum, handler in before.items():
      signal.signal(signum, handler)


def test_a_signal_after_the_stop_is_saved_ends_the_process_with_the_stops_line_and_status():
  """A launcher signals the other workers as soon as one exits with the stop's status: a worker
  whose stop is saved then ends as the stop ends it, not as a stop that saved nothing."""
  exits, lines = [], []
  watcher = stop_signals.watch_signals(exit_at_once=exits.append, announce=lines.append)
  try:
    os.kill(os.getpid(), signal.SIGUSR1)
    _wait(lambda: watcher.stop_requested)
    last_line = "prog.py: stopped by SIGUSR1 at update 7; checkpoint written; run it again"
    watcher.stop_saved(last_line, 75)
    assert exits == [] and len(lines) == 1  # nothing happens until a signal comes
    os.kill(os.getpid(), signal.SIGTERM)
    _wait(lambda: exits)
    assert exits == [75] and lines[1:] == [last_line]
  finally:
    watcher.close()


def test_second_signal_exits_from_the_reader_thread():
  """The exit comes from the watcher's thread, not from a Python handler (which runs in the main
  thread only once it is back from a long TensorFlow call)."""
  threads = []
  watcher = stop_signals.watch_signals(
      exit_at_once=lambda signum: threads.append(threading.current_thread()),
      announce=lambda line: None)
  try:
    os.kill(os.getpid(), signal.SIGTERM)
    _wait(lambda: watcher.stop_requested)
    os.kill(os.getpid(), signal.SIGTERM)
    _wait(lambda: threads)
    assert threads[0] is not threading.main_thread()
  finally:
    watcher.close()


@pytest.mark.parametrize("saved", [False, True])
def test_an_exit_at_once_runs_the_clean_ups_first_in_their_order(tmp_path, saved):
  """A second signal (status 143), or one once the stop is saved (its status, 75): both end the
  process without `atexit`, so the registered clean-ups run first, in the watcher's thread: here
  the real output-directory lock, whose file would otherwise stay behind."""
  lock = output_lock.lock_output_dir(str(tmp_path))
  lock_file = tmp_path / output_lock.LOCK_FILE_NAME
  events, threads = [], []
  watcher = stop_signals.watch_signals(exit_at_once=lambda status: events.append(("exit", status)),
                                       announce=lambda line: events.append(("line", line)))
  try:
    watcher.add_cleanup(lambda: threads.append(threading.current_thread()))
    watcher.add_cleanup(lambda: events.append(("first", lock_file.exists())))
    watcher.add_cleanup(lock.release)
    watcher.add_cleanup(lambda: events.append(("second", lock_file.exists())))
    os.kill(os.getpid(), signal.SIGTERM)
    _wait(lambda: watcher.stop_requested)
    assert [kind for kind, _ in events] == ["line"]  # the first signal cleans nothing
    if saved:
      watcher.stop_saved("prog.py: stopped by SIGTERM at update 3; checkpoint written", 75)
    os.kill(os.getpid(), signal.SIGTERM)
    _wait(lambda: any(kind == "exit" for kind, _ in events))
  finally:
    watcher.close()
    lock.release()
  status = 75 if saved else 128 + signal.SIGTERM
  assert [kind for kind, _ in events] == ["line", "line", "first", "second", "exit"]
  assert events[2:] == [("first", True), ("second", False), ("exit", status)]
  assert not lock.held and not lock_file.exists()
  assert threads and threads[0] is not threading.main_thread()


def test_a_failing_clean_up_is_reported_and_the_others_still_run():
  lines, done, exits = [], [], []

  def failing():
    raise OSError("device busy")

  watcher = stop_signals.SignalWatcher(stop_signals.StopState(), stop_signals.STOP_SIGNALS,
                                       exits.append, lines.append)
  watcher.add_cleanup(failing)
  watcher.add_cleanup(lambda: done.append(True))
  watcher.handle(signal.SIGINT)
  watcher.handle(signal.SIGINT)
  assert done == [True] and exits == [128 + signal.SIGINT]
  assert "clean-up before the exit failed: device busy" in lines


def test_a_clean_up_that_hangs_does_not_hold_the_exit_up():
  """A second signal means "now": a clean-up stuck (e.g. on a network file system) gets
  `cleanup_seconds`, then the process exits without it."""
  lines, exits, release = [], [], threading.Event()
  watcher = stop_signals.SignalWatcher(stop_signals.StopState(), stop_signals.STOP_SIGNALS,
                                       exits.append, lines.append, cleanup_seconds=0.2)
  watcher.add_cleanup(release.wait)
  try:
    watcher.handle(signal.SIGTERM)
    started = time.monotonic()
    watcher.handle(signal.SIGTERM)
    waited = time.monotonic() - started
  finally:
    release.set()
  assert exits == [128 + signal.SIGTERM]
  assert 0.2 <= waited < 5.0
  assert "clean-up before the exit still running after 0.2 s: exiting without it" in lines


def test_run_cleanups_without_actions_starts_no_thread():
  before = threading.active_count()
  assert stop_signals.run_cleanups((), 1.0, lambda line: None)
  assert threading.active_count() == before


def test_a_signal_and_the_first_update_are_ordered_one_way_or_the_other():
  before = stop_signals.StopState()
  assert before.on_signal(signal.SIGTERM) == stop_signals.STOP
  assert before.stopped_before_updates
  assert not before.begin_updates()  # the update must not begin: the stop came first
  assert before.stopped_before_updates
  after = stop_signals.StopState()
  assert after.begin_updates() and not after.stopped_before_updates
  assert after.on_signal(signal.SIGTERM) == stop_signals.STOP
  assert not after.stopped_before_updates  # the update in flight finishes
  assert after.on_signal(signal.SIGTERM) == stop_signals.EXIT_NOW


def _ending_watcher(events, **kwargs):
  """A watcher (not installed) whose exit, lines, record and clean-up append to `events`, ended
  before its updates as a script's is (`end_before_updates`)."""
  watcher = stop_signals.SignalWatcher(
      stop_signals.StopState(), stop_signals.STOP_SIGNALS,
      lambda status: events.append(("exit", status)), lambda line: events.append(("line", line)),
      **kwargs)
  watcher.add_cleanup(lambda: events.append(("cleanup", None)))
  watcher.end_before_updates(lambda name: "prog.py: stopped by %s before the first update" % name,
                             75, record=lambda name: events.append(("record", name)))
  return watcher


def test_a_signal_before_the_first_update_ends_the_process_at_once():
  """Graph building or session set-up may last minutes: the first signal then ends the process
  (record, clean-ups, one line, 75), without a "stopping after the update in flight" line."""
  events = []
  watcher = _ending_watcher(events)
  watcher.handle(signal.SIGUSR1)
  assert events == [("record", "SIGUSR1"), ("cleanup", None),
                    ("line", "prog.py: stopped by SIGUSR1 before the first update"), ("exit", 75)]
  assert watcher.ends_before_updates and watcher.wait_for_exit(0)
  assert not watcher.begin_updates()


def test_once_the_first_update_began_a_signal_lets_it_finish():
  events = []
  watcher = _ending_watcher(events)
  assert watcher.begin_updates()
  watcher.handle(signal.SIGTERM)
  assert [kind for kind, _ in events] == ["line"]
  assert "stopping after the update in flight" in events[0][1]
  assert watcher.stop_requested and not watcher.ends_before_updates
  assert not watcher.wait_for_exit(0)
  watcher.handle(signal.SIGTERM)
  assert events[-1] == ("exit", 128 + signal.SIGTERM)
  assert ("record", "SIGTERM") not in events


def test_without_an_ending_a_signal_before_the_updates_asks_for_a_stop():
  lines, exits = [], []
  watcher = stop_signals.SignalWatcher(stop_signals.StopState(), stop_signals.STOP_SIGNALS,
                                       exits.append, lines.append)
  watcher.handle(signal.SIGTERM)
  assert exits == [] and not watcher.ends_before_updates and watcher.stop_requested
  assert "stopping after the update in flight" in lines[0]


def test_an_ending_before_the_updates_whose_record_hangs_still_exits_in_time():
  events, release = [], threading.Event()
  watcher = stop_signals.SignalWatcher(
      stop_signals.StopState(), stop_signals.STOP_SIGNALS,
      lambda status: events.append(("exit", status)), lambda line: events.append(("line", line)),
      cleanup_seconds=0.2)
  watcher.end_before_updates(lambda name: "the end", 75, record=lambda name: release.wait())
  started = time.monotonic()
  try:
    watcher.handle(signal.SIGTERM)
  finally:
    release.set()
  assert time.monotonic() - started < 5.0
  assert events[-2:] == [("line", "the end"), ("exit", 75)]


def test_a_real_signal_before_the_first_update_exits_from_the_reader_thread():
  events, threads = [], []
  watcher = stop_signals.watch_signals(
      exit_at_once=lambda status: (events.append(status),
                                   threads.append(threading.current_thread())),
      announce=lambda line: None)
  try:
    watcher.end_before_updates(lambda name: name, 75)
    os.kill(os.getpid(), signal.SIGTERM)
    assert watcher.wait_for_exit(5.0)
  finally:
    watcher.close()
  assert events == [75] and threads[0] is not threading.main_thread()


def test_watch_signals_refuses_other_threads():
  errors = []

  def start():
    try:
      stop_signals.watch_signals()
    except ValueError as e:
      errors.append(str(e))

  thread = threading.Thread(target=start)
  thread.start()
  thread.join()
  assert errors and "main thread" in errors[0]

