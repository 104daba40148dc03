"""Shared test set-up: repository on sys.path, quiet TensorFlow, graph mode, small helpers, and the
`e2e` marker's rule: a test that starts a process (a script, a launcher, a cluster, the original
release) is marked `e2e`, so `make test-fast` (`-m "not e2e"`) runs the in-process tests only."""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The bf16 probe's cache (utils/runtime/bf16_probe.py) of this test run, never the user's: the
# scripts the tests start inherit it, so a test can read the ratio a script measured. The process
# that made its folder (pytest's own; its xdist workers inherit the variable) removes it at exit.
if "BERT_PRECISION_CACHE" not in os.environ:
  _PROBE_CACHE_DIR = tempfile.mkdtemp(prefix="bf16_probe_")
  atexit.register(shutil.rmtree, _PROBE_CACHE_DIR, ignore_errors=True)
  os.environ["BERT_PRECISION_CACHE"] = os.path.join(_PROBE_CACHE_DIR, "bf16_probe.json")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

import numpy.testing  # noqa: E402,F401  (its first import runs `lscpu`: done here, not in a test)
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_eager_execution()


# Test modules in the order they start, slowest first (seconds each took in one `make test` on a
# 2-core Intel Xeon with AMX, docs/TESTING.md); the others follow in their usual order. With
# pytest-xdist's two workers (`make test`) the longest ones then overlap with everything else
# instead of ending the run alone.
SLOWEST_FIRST = (
    # The 2-host cluster's modules, Slurm's included: one group, one worker (188 s before Slurm's
    # modules, which took 266 s and 55 s alone, half of it waiting for Slurm's timers).
    "tests/cluster",
    # 151 s before docs/FINETUNING.md's bench/quality.py block (177 s) gave way to
    # tests/test_bench_quality_quick.py's quick run.
    "tests/test_doc_commands.py",
    "tests/test_run_pretraining_deterministic.py",  # 188 s
    "tests/test_bench_quality_quick.py",  # 60 s alone: the quick run of five variants
    # 169 s with the launchers' tests (about 50 s of it: test_run_pretraining_launchers.py).
    "tests/test_run_pretraining.py",
    # 115 s with the time-based checkpoints' tests (about 20 s of it:
    # test_run_pretraining_checkpoints_by_time.py).
    "tests/test_run_pretraining_graceful_stop.py",
    # 96 s with test_checkpoints_huggingface_import.py's tests (about 20 s of it).
    "tests/test_checkpoints_huggingface.py",
    "tests/test_run_finetuning.py",  # 93 s
    "tests/test_fault_drills.py",  # 75 s
    "tests/test_run_pretraining_recovery.py",  # 71 s
    "tests/test_supervise.py",  # 64 s
    "tests/test_demo.py",  # 61 s
    "tests/test_checkpoints.py",  # 58 s
    "tests/test_run_pretraining_launchers.py",  # about 50 s (see test_run_pretraining.py)
)


def test_group(nodeid):
  """The unit a test is scheduled in: its module, or "tests/cluster" for the cluster's tests (they
  share one cluster, which one worker builds). A module stays on one worker, so its module-scoped
  fixtures (trained checkpoints, data) are built once."""
  path = nodeid.split("::")[0]
  return "tests/cluster" if path.startswith("tests/cluster/") else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """pytest-xdist's scheduler for `-n N` (`make test`): whole groups (`test_group`) to a worker,
  in the order of the collection (`pytest_collection_modifyitems`), not the largest first."""
  from xdist.scheduler import LoadScopeScheduling  # pylint: disable=import-outside-toplevel

  class GroupScheduling(LoadScopeScheduling):

    def _split_scope(self, nodeid):
      return test_group(nodeid)

  config.option.loadscopereorder = False
  return GroupScheduling(config, log)


def pytest_collection_modifyitems(items):
  """Orders the tests slowest group first."""
  rank = {group: index for index, group in enumerate(SLOWEST_FIRST)}
  position = {}
  for index, item in enumerate(items):
    position.setdefault(test_group(item.nodeid), index)
  items.sort(key=lambda item: (rank.get(test_group(item.nodeid), len(rank)),
                               position[test_group(item.nodeid)]))


@pytest.fixture
def graph():
  """A fresh default graph for the test."""
  g = tf.Graph()
  with g.as_default():
    yield g


def pytest_terminal_summary(terminalreporter):
  """Always prints the skip count (pytest only mentions skips when there are some)."""
  skipped = len(terminalreporter.stats.get("skipped", []))
  terminalreporter.write_line(f"skipped tests: {skipped}")


class _UnmarkedProcessStart(subprocess.Popen):
  """subprocess.Popen for a test not marked `e2e`: refuses to start the process."""

  def __init__(self, args, *unused_args, **unused_kwargs):  # pylint: disable=super-init-not-called
    command = args if isinstance(args, str) else " ".join(map(str, args))
    raise RuntimeError("this test starts a process (%s): mark it @pytest.mark.e2e "
                       "(tests/conftest.py)" % command[:200])

  def __del__(self):
    pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
  """Fixtures of an unmarked test may not start processes either (module-scoped ones included)."""
  with _processes_allowed(item.get_closest_marker("e2e") is not None):
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
  with _processes_allowed(item.get_closest_marker("e2e") is not None):
    yield


class _processes_allowed:  # pylint: disable=invalid-name
  """Context: subprocess.Popen works as usual when `allowed`, else raises."""

  def __init__(self, allowed):
    self._allowed = allowed
    self._saved = None

  def __enter__(self):
    if not self._allowed:
      self._saved = subprocess.Popen
      subprocess.Popen = _UnmarkedProcessStart

  def __exit__(self, *exc_info):
    if self._saved is not None:
      subprocess.Popen = self._saved
