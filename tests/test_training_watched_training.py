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

from tests import helpers
from utils.runlog import dllogger_setup
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
