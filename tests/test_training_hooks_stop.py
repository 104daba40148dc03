"""StopOnSignalHook in one process (utils/training/hooks.py): the stop comes at an update
boundary after the signal, a signal before the first update raises, the step is read at the end;
a bad input record found by the background check stops it the same way. Fakes stand in for the
signals and the check."""

import signal

import pytest
import tensorflow as tf

from utils.core import graph_names
from utils.runtime import stop_signals
from utils.training import hooks

_tf1 = tf.compat.v1


class FakeWatcher(object):
  def __init__(self):
    self.signum = None

  @property
  def stop_requested(self):
    return self.signum is not None


class SignalAtRun(tf.estimator.SessionRunHook):
  """Sets the watcher's signal after session run number `run` (1-based)."""

  def __init__(self, watcher, run, signum=signal.SIGTERM):
    self._watcher, self._run, self._signum, self._runs = watcher, run, signum, 0

  def after_run(self, run_context, run_values):
    self._runs += 1
    if self._runs == self._run:
      self._watcher.signum = self._signum


def _train(hook_list, accumulation, max_runs=100):
  """Runs a counter graph: every `accumulation`-th run is an update (global step + 1).

  Returns:
    the session runs made.
  """
  with tf.Graph().as_default():
    global_step = _tf1.train.get_or_create_global_step()
    runs = _tf1.get_variable("runs", [], tf.int64, initializer=_tf1.zeros_initializer(),
                             trainable=False, use_resource=True)
    new_runs = runs.assign_add(1)
    update = tf.equal(new_runs % accumulation, 0, name=graph_names.UPDATE_STEP)
    with tf.control_dependencies([update]):
      train_op = tf.cond(update, lambda: global_step.assign_add(1),
                         lambda: tf.identity(global_step))
    made = 0
    with _tf1.train.MonitoredSession(hooks=hook_list) as session:
      while not session.should_stop() and made < max_runs:
        session.run(train_op)
        made += 1
    return made


@pytest.mark.parametrize("accumulation,signal_run,expected_runs", [
    (1, 3, 3),    # signalled after run 3: run 3 ended an update, stop there
    (4, 5, 8),    # signalled in the middle of update 2 (runs 5-8): finish it
    (4, 8, 8),    # signalled on the last micro-step of update 2
])
def test_stops_at_the_update_boundary(accumulation, signal_run, expected_runs):
  watcher = FakeWatcher()
  stop = hooks.StopOnSignalHook(watcher, hooks.UpdateSource(accumulation))
  made = _train([stop.updates, SignalAtRun(watcher, signal_run, signal.SIGUSR1), stop],
                accumulation)
  assert made == expected_runs
  assert stop.stopped and stop.stop_signal_name == "SIGUSR1"
  assert stop.stop_step == expected_runs // accumulation


class EndRecorder(tf.estimator.SessionRunHook):
  """Records, in `events`, that its `end()` ran."""

  def __init__(self, events, name):
    self._events, self._name = events, name

  def end(self, session):
    self._events.append(self._name)


def test_on_saved_gets_the_signal_and_the_step_after_the_hooks_before_it_ended():
  watcher, events = FakeWatcher(), []
  stop = hooks.StopOnSignalHook(watcher, hooks.UpdateSource(2), on_saved=lambda name, step:
                                events.append(("on_saved", name, step)))
  made = _train([stop.updates, SignalAtRun(watcher, 3), EndRecorder(events, "saver"), stop], 2)
  assert made == 4  # signalled in update 2 (runs 3-4)
  assert events == ["saver", ("on_saved", "SIGTERM", 2)]


def test_no_signal_no_stop():
  watcher, saved = FakeWatcher(), []
  stop = hooks.StopOnSignalHook(watcher, hooks.UpdateSource(2),
                                on_saved=lambda *args: saved.append(args))
  assert _train([stop.updates, stop], 2, max_runs=10) == 10
  assert not stop.stopped and stop.stop_step is None
  assert saved == []


def test_signal_before_the_first_update_raises():
  watcher = FakeWatcher()
  watcher.signum = signal.SIGTERM
  with pytest.raises(hooks.StoppedBeforeFirstUpdate):
    stop = hooks.StopOnSignalHook(watcher, hooks.UpdateSource(1))
    _train([stop.updates, stop], 1)


class FakeInputCheck(object):
  """A background record check's stand-in: `problem` is set by `ProblemAtRun`."""

  def __init__(self):
    self.problem = None


class ProblemAtRun(tf.estimator.SessionRunHook):
  """Has the input check name a bad record after session run number `run` (1-based)."""

  def __init__(self, check, run):
    self._check, self._run, self._runs = check, run, 0

  def after_run(self, run_context, run_values):
    self._runs += 1
    if self._runs == self._run:
      self._check.problem = "part-1.tfrecord: record 7 at byte offset 5600: data CRC mismatch"


@pytest.mark.parametrize("rank", [0, 3])
def test_a_bad_record_found_mid_update_stops_at_its_boundary_like_a_signal(rank):
  watcher, check, saved = FakeWatcher(), FakeInputCheck(), []
  requests = stop_signals.StopRequests(watcher, check, rank=rank)
  stop = hooks.StopOnSignalHook(requests, hooks.UpdateSource(4),
                                on_saved=lambda *args: saved.append(args))
  made = _train([stop.updates, ProblemAtRun(check, 6), stop], 4)
  assert made == 8  # found in update 2 (runs 5-8): that update is finished, then the stop
  assert stop.stopped and stop.stop_step == 2
  assert stop.stop_code == 1000 + rank and stop.input_problem_rank == rank
  assert stop.stop_signal_name is None
  assert saved == [(None, 2)]


def test_a_bad_record_wins_over_a_signal_and_neither_stops_an_undisturbed_run():
  watcher, check = FakeWatcher(), FakeInputCheck()
  requests = stop_signals.StopRequests(watcher, check, rank=1)
  assert not requests.stop_requested and requests.signum is None
  watcher.signum = signal.SIGTERM
  assert requests.stop_requested and requests.signum == signal.SIGTERM
  check.problem = "f: record 0 at byte offset 0: length CRC mismatch"
  # Resuming would meet the record again: the stop says so, whatever signal came too.
  assert requests.signum == stop_signals.INPUT_PROBLEM_CODE + 1
  assert stop_signals.input_problem_rank(requests.signum) == 1
  assert stop_signals.input_problem_rank(signal.SIGTERM) is None
  assert stop_signals.input_problem_rank(None) is None
  # Without a check: the signals alone.
  assert stop_signals.StopRequests(FakeWatcher()).input_problem is None
