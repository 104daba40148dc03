"""utils/runtime/hvd_utils.py without an initialised Horovod, output directories, and every utils
module importing and working with Horovod absent."""

import os
import subprocess
import sys

import pytest

from utils.runtime import hvd_utils

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_helpers_answer_as_a_single_process_before_init():
  assert hvd_utils.horovod_enabled() is False
  assert hvd_utils.hvd_size() == 1
  assert hvd_utils.hvd_rank() == 0
  assert hvd_utils.comm_local_rank() == 0
  assert hvd_utils.broadcast_global_variables_hook(0) is None
  with pytest.raises(RuntimeError, match="hvd_init"):
    hvd_utils.average_variables_op([])


SINGLE_PROCESS = r"""
import sys
import run_pretraining, run_squad, run_classifier
from utils.runtime import hvd_utils
assert (hvd_utils.hvd_size(), hvd_utils.hvd_rank(), hvd_utils.comm_local_size()) == (1, 0, 1)
assert not any(name == "horovod" or name.startswith("horovod.") for name in sys.modules), \
    sorted(name for name in sys.modules if name.startswith("horovod"))
print("horovod not loaded")
"""


def run_python(code):
  """Runs `code` in a fresh interpreter in the repository; returns its stdout (exit 0 asserted)."""
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                        text=True, timeout=180, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  return proc.stdout


@pytest.mark.e2e
def test_single_process_runs_never_load_horovod():
  assert "horovod not loaded" in run_python(SINGLE_PROCESS)


@pytest.mark.parametrize("rank,local_rank,node_local,expected_dir,saves", [
    (0, 0, False, "/out", True),
    (1, 1, False, "/out/worker_1", False),
    (2, 0, False, "/out/worker_2", False),   # first worker of the second node, shared disk
    (2, 0, True, "/out", True),              # ... with node-local output dirs
    (3, 1, True, "/out/worker_3", False),
    (0, 0, True, "/out", True),
])
def test_worker_output_dir_and_checkpoint_saving(rank, local_rank, node_local, expected_dir,
                                                 saves):
  assert hvd_utils.worker_output_dir("/out", rank, local_rank, node_local) == expected_dir
  assert hvd_utils.saves_checkpoints(rank, local_rank, node_local) is saves


def test_output_dir_rejects_bad_input():
  with pytest.raises(ValueError, match="output_dir"):
    hvd_utils.worker_output_dir("", 0, 0, False)
  with pytest.raises(ValueError, match="rank"):
    hvd_utils.worker_output_dir("/out", -1, 0, False)
  with pytest.raises(ValueError, match="local_rank"):
    hvd_utils.saves_checkpoints(1, "0", False)


WITHOUT_HOROVOD = r"""
import importlib, pkgutil, sys
sys.modules["horovod"] = None  # `import horovod...` now fails as if it were not installed
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
import utils
modules = [info.name for info in pkgutil.walk_packages(utils.__path__, "utils.")]
for name in modules:
  importlib.import_module(name)
assert len(modules) > 30, modules
from utils.runlog import dllogger_setup
from utils.runtime import hvd_utils, session_config
from utils.training import hooks, weight_sync
assert (hvd_utils.hvd_size(), hvd_utils.hvd_rank(), hvd_utils.comm_local_rank()) == (1, 0, 0)
assert hvd_utils.horovod_enabled() is False
assert hvd_utils.broadcast_global_variables_hook() is None
try:
  hvd_utils.hvd_init()
  raise AssertionError("hvd_init did not raise")
except ImportError as e:
  assert "Horovod is not installed" in str(e), e
config = session_config.build_session_config(use_horovod=False, environ={})
logger = dllogger_setup.RunLogger(None, backend="builtin", stdout=False)
hooks.TrainingLogHook(logger, hooks.UpdateSource(2), global_batch_size=8)
assert weight_sync.weight_sync_enabled(False, environ={}) is False
assert "horovod.tensorflow" not in sys.modules or sys.modules["horovod.tensorflow"] is None
print("works without horovod")
"""


@pytest.mark.e2e
def test_every_utils_module_works_without_horovod():
  assert "works without horovod" in run_python(WITHOUT_HOROVOD)


@pytest.mark.e2e
def test_horovod_without_a_launcher_warns_it_trains_one_worker():
  code = ("from utils.runtime import hvd_utils; hvd = hvd_utils.hvd_init(); "
          "print('size', hvd.size())")
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "size 1" in proc.stdout
  assert "Horovod runs 1 worker: started without horovodrun / mpirun" in proc.stderr


@pytest.mark.e2e
def test_gloo_built_answers_as_horovodrun_check_build():
  # In its own process: answering imports Horovod, which the tests above keep out of this one.
  code = "from utils.runtime import hvd_utils; print('gloo', hvd_utils.gloo_built())"
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
  check = subprocess.run([horovodrun, "--check-build"], capture_output=True, text=True,
                         timeout=120)
  assert ("gloo True" in proc.stdout) == ("[X] Gloo" in check.stdout), (proc.stdout, check.stdout)
  assert "gloo True" in proc.stdout  # the environment (scripts/env.sh) builds Horovod with Gloo


def test_gloo_built_is_false_without_horovod(monkeypatch):
  monkeypatch.setattr(hvd_utils, "_import_horovod", lambda: None)
  assert hvd_utils.gloo_built() is False
