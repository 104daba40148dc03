"""Checkpoints by time end to end (docs/LONG_RUNS.md): --save_checkpoints_secs saves every N
seconds of training, never by steps; its bad values are usage errors; the Estimator's RunConfig
and the job's saver hook both get the seconds; the two-phase launcher saves by time unless given
steps. The runs and their records are test_run_pretraining_graceful_stop.py's.
"""

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import run_pretraining
from tests import helpers
from tests import test_run_pretraining_deterministic as det
from tests import test_run_pretraining_launchers as launchers
from tests.test_run_pretraining_graceful_stop import checkpoint_steps
from tests.test_run_pretraining_graceful_stop import data  # noqa: F401  (the module's data fixture)
from tests.test_run_pretraining_graceful_stop import finish
from tests.test_run_pretraining_graceful_stop import wait_for_update
from utils.core import errors

pytestmark = pytest.mark.e2e


# ---------------------------------------------------------------------------------------------
# --save_checkpoints_secs

def test_checkpoints_by_time(data, tmp_path):
  out = tmp_path / "out"
  cmd = det.command(data, out, num_train_steps=100000, save_checkpoints_steps=None,
                    save_checkpoints_secs=2, deterministic_run=None, display_loss_steps=50)
  run = det.start(cmd, tmp_path / "out.out")
  try:
    wait_for_update(out / "bert_dllog.json", run[2], 1)
    seen = {}  # checkpoint step -> when it was first seen
    deadline = time.time() + 120
    while len(seen) < 3 and time.time() < deadline:
      assert run[2].poll() is None, (tmp_path / "out.out").read_text()[-4000:]
      for step in checkpoint_steps(out):
        seen.setdefault(step, time.time())
      time.sleep(0.05)
    run[2].send_signal(signal.SIGTERM)
    finish(run)
  finally:
    helpers.kill_session(run[2])
  assert len(seen) >= 3, seen
  times = sorted(seen.values())
  gaps = np.diff(times)
  # Every 2 s of training (a save itself takes a moment): never by steps (1000 is the default).
  assert all(1.0 < gap < 8.0 for gap in gaps), gaps
  steps = sorted(seen)
  assert steps[0] < 1000


@pytest.mark.parametrize("flags,message", [
    (dict(save_checkpoints_secs=60, save_checkpoints_steps=5),
     "--save_checkpoints_secs and --save_checkpoints_steps exclude each other: give one"),
    (dict(save_checkpoints_secs=0, save_checkpoints_steps=None),
     "--save_checkpoints_secs must be >= 1 second, got 0"),
    (dict(save_checkpoints_secs=-5, save_checkpoints_steps=None),
     "--save_checkpoints_secs must be >= 1 second, got -5"),
])
def test_save_checkpoints_secs_bad_values(data, tmp_path, flags, message):
  out = tmp_path / "out"
  args = det.command(data, out, **flags)[2:]  # the flags, after python and the script
  status, stderr = helpers.run_script_in_process(run_pretraining, args)
  assert status == errors.USAGE_EXIT_CODE, stderr[-3000:]
  assert stderr.strip().splitlines()[-1] == "run_pretraining.py: error: %s" % message
  assert not out.exists()


def test_run_config_gets_the_seconds(tmp_path):
  """The Estimator's RunConfig saves by time, and the saver hook the job adds does too."""
  from utils.runtime import workers as workers_lib  # pylint: disable=g-import-not-at-top
  from utils.training import checkpoint_saver  # pylint: disable=g-import-not-at-top
  from utils.training import estimator as estimator_lib  # pylint: disable=g-import-not-at-top
  from utils.training import hooks as hooks_lib  # pylint: disable=g-import-not-at-top
  from utils.training import watched_training  # pylint: disable=g-import-not-at-top
  workers = workers_lib.Workers(size=1, rank=0, local_rank=0, local_size=1, hvd=None)
  config = helpers.job_config(["--save_checkpoints_secs=7", "--keep_checkpoint_max=3"])
  estimator = estimator_lib.build_estimator(config, workers, lambda features, labels, mode: None,
                                            str(tmp_path / "model"), True)
  assert estimator.config.save_checkpoints_secs == 7
  assert estimator.config.save_checkpoints_steps is None
  hooks = watched_training.training_hooks(config, workers.size, hooks_lib.UpdateSource(),
                                          str(tmp_path / "model")).in_order()
  assert isinstance(hooks[0], hooks_lib.UpdateSource)  # first: the others read it
  (saver,) = [h for h in hooks if isinstance(h, checkpoint_saver.PeriodicCheckpointSaverHook)]
  timer = saver._timer  # pylint: disable=protected-access
  assert timer._every_secs == 7 and timer._every_steps is None  # pylint: disable=protected-access


def _launcher_commands(*options):
  """The phase-1 command the two-phase launcher prints with --dry_run, or its error."""
  proc = subprocess.run(["bash", launchers.LAUNCHER, "--dry_run", "--python", sys.executable,
                         "--launcher", "none", "--phase1_data", "/d/128", "--phases", "1"]
                        + list(options), capture_output=True, text=True, timeout=60)
  return proc.returncode, [line[2:].split() for line in proc.stderr.splitlines()
                           if line.startswith("+ ")], proc.stderr


def test_two_phase_launcher_saves_by_time_unless_given_steps():
  code, (command_,), _ = _launcher_commands()
  assert code == 0 and "--save_checkpoints_secs=900" in command_
  assert not any(arg.startswith("--save_checkpoints_steps") for arg in command_)
  code, (command_,), _ = _launcher_commands("--save_checkpoints_secs", "120")
  assert "--save_checkpoints_secs=120" in command_
  code, (command_,), _ = _launcher_commands("--save_checkpoints_steps", "50")
  assert "--save_checkpoints_steps=50" in command_
  assert not any(arg.startswith("--save_checkpoints_secs") for arg in command_)
  code, commands, stderr = _launcher_commands("--save_checkpoints_steps", "50",
                                              "--save_checkpoints_secs=60")
  assert code == 2 and not commands
  assert "--save_checkpoints_secs and --save_checkpoints_steps exclude each other" in stderr
