"""Shared test set-up: repository on sys.path, quiet TensorFlow, graph mode, small helpers."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

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
