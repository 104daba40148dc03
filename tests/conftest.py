"""Shared test set-up: repository on sys.path, quiet TensorFlow, graph mode, small helpers, and the
`e2e` marker's rule: a test that starts a process (a script, a launcher, a cluster, the original
release) is marked `e2e`, so `make test-fast` (`-m "not e2e"`) runs the in-process tests only."""

import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

import numpy.testing  # noqa: E402,F401  (its first import runs `lscpu`: done here, not in a test)
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.compat.v1.disable_eager_execution()


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
