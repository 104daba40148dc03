"""utils/training/watched_training.py's stop before the first update, in this process: a real
signal to this process, the exit injected. While the main thread sits in a blocking call (as in
TensorFlow's session set-up, where no Python handler of it runs), the watcher's thread writes the
run log's STOP line, releases --output_dir's lock, prints the one line and exits with 75. Once the
first update began, a signal lets it finish (the hook that says so raises for one that came
before). The hooks of a run come as one record, in the order they run.
"""

import json
import os
import signal

import pytest
import tensorflow as tf

from tests import helpers
from utils.core import errors
from utils.runlog import dllogger_setup
from utils.runtime import hvd_utils
from utils.runtime import output_lock
from utils.runtime import stop_signals
from utils.runtime import workers as workers_lib
from utils.training import hooks as hooks_lib
from utils.training import job as job_lib
from utils.training import watched_training

LINE = ("run_pretraining.py: stopped by SIGUSR1 before the first update: nothing to save; run "
        "the same command to resume")


def _job(out):
  """A `job.Job` of one worker in `out`: its real run log and lock (no Estimator)."""
  out.mkdir()
  lock = output_lock.lock_output_dir(str(out))
  log_path = str(out / "bert_dllog.json")
  run_logger = dllogger_setup.open_run_log(log_path, 0, 0, stdout=False)
  workers = workers_lib.Workers(hvd=None, rank=0, size=1, local_rank=0, local_size=1)
  return job_lib.Job(program="run_pretraining.py", config=helpers.job_config(), workers=workers,
                     plan=job_lib.Plan(0), output_dir=str(out), saves_checkpoints=True,
                     run_logger=run_logger, log_path=log_path, output_lock=lock)


def _stop_records(log_path):
  with open(log_path) as reader:
    records = [json.loads(line[5:]) for line in reader if line.startswith("DLLL ")]
  return [r["data"] for r in records if r.get("step") == dllogger_setup.STOP_STEP]


def test_a_signal_while_the_main_thread_is_blocked_before_the_first_update_ends_the_job(tmp_path):
  out = tmp_path / "out"
  job = _job(out)
  events, lines = [], []
  watcher = stop_signals.watch_signals(exit_at_once=events.append, announce=lines.append)
  try:
    watched_training.add_exit_cleanups(watcher, job)
    watched_training.end_before_updates(watcher, job)
    os.kill(os.getpid(), signal.SIGUSR1)
    # Blocked in C (a lock's wait) like a session set-up: only the watcher's thread acts.
    assert watcher.wait_for_exit(10.0)
  finally:
    watcher.close()
    job.output_lock.release()
    job.run_logger.close()
  assert events == [75] and lines == [LINE]
  assert not os.path.exists(out / output_lock.LOCK_FILE_NAME)
  assert [(r["signal"], r["update"], r["checkpoint_written"], r["exit_code"])
          for r in _stop_records(job.log_path)] == [("SIGUSR1", None, False, 75)]
  assert watcher.ends_before_updates and not watcher.begin_updates()


class _Watcher(object):
  """The watcher's state without signals: `handle` books one."""

  def __init__(self):
    self.state = stop_signals.StopState()

  def begin_updates(self):
    return self.state.begin_updates()

  @property
  def signum(self):
    return self.state.signum


def test_the_updates_begin_hook_refuses_an_update_after_an_early_signal():
  early = _Watcher()
  early.state.on_signal(signal.SIGTERM)
  with pytest.raises(hooks_lib.StoppedBeforeFirstUpdate):
    watched_training.UpdatesBeginHook(early).before_run(None)
  late = _Watcher()
  hook = watched_training.UpdatesBeginHook(late)
  hook.before_run(None)  # the first update begins
  assert late.state.on_signal(signal.SIGTERM) == stop_signals.STOP
  assert not late.state.stopped_before_updates
  hook.before_run(None)  # the next run: nothing more to say


def _training_raising(error):
  """A `_train_watched` that fails with `error` once the watcher is installed."""
  def train_watched(*unused_args):
    raise error
  return train_watched


@pytest.mark.parametrize("error, ignored", [
    (errors.StoppedByAnotherWorker("rank 0 stopped: rank 1 (pid 7 on nodeA) ended"), True),
    # A collective's error that `estimator.train` has not turned into the line's error yet.
    (tf.errors.UnknownError(None, None, "%s." % hvd_utils.SHUTDOWN_MESSAGE), True),
    (ValueError("a bug of ours"), False),
    (tf.errors.UnknownError(None, None, "some other failed op"), False),
])
def test_after_another_rank_ended_the_launchers_signal_cannot_end_the_process_silently(
    tmp_path, monkeypatch, error, ignored):
  """horovodrun sends the surviving ranks SIGTERM as soon as one rank died: a training that
  ended so leaves the stop signals ignored, so the line naming that rank is still printed
  (`errors.run_reporting_errors`); any other error gives the previous handlers back."""
  before = {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS}
  job = _job(tmp_path / "out")
  monkeypatch.setattr(watched_training, "_watched_hooks", lambda *unused_args: None)
  monkeypatch.setattr(watched_training, "_train_watched", _training_raising(error))
  try:
    with pytest.raises(type(error)) as raised:
      watched_training.train(job, input_fn=None)
    assert raised.value is error  # raised as it came
    after = {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS}
  finally:
    for signum, handler in before.items():
      signal.signal(signum, handler)
    job.output_lock.release()
    job.run_logger.close()
  assert after == ({s: signal.SIG_IGN for s in stop_signals.STOP_SIGNALS} if ignored else before)
