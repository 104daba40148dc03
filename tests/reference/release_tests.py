"""Runs the original BERT release's own unit tests against this project's modules.

The PyPI `bert-tensorflow` package ships `modeling_test`, `optimization_test` and
`tokenization_test`; each does `from bert import X`. Here `bert.modeling`, `bert.optimization` and
`bert.tokenization` are made to resolve to this repository's `modeling`, `optimization` and
`tokenization` before the test modules are imported, so the release's test code runs unchanged on
our code, under the release's convention: TF1 behaviour (`disable_v2_behavior`: ref variables,
`Dimension` shapes, graph mode) and `tensorflow.contrib.layers` from tf-slim.

  python -m tests.reference.release_tests [MODULE ...]
      runs the named test modules (default: all three) and prints one JSON line per test,
      {"test": "<module>.<Class>.<method>", "outcome": "passed"|"failed"|"error"|"skipped",
      "detail": "..."}, then exits 0 (the caller judges the outcomes).
"""

import importlib
import json
import os
import sys
import unittest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from tests.reference import original_bert  # noqa: E402

RELEASE_TEST_MODULES = ("modeling_test", "optimization_test", "tokenization_test")
# The release's modules that its tests import, and ours that stand in for them.
REDIRECTED_MODULES = ("modeling", "optimization", "tokenization")


def redirect_release_imports():
  """Makes `from bert import X` give this repository's module X for every REDIRECTED_MODULES."""
  import bert  # pylint: disable=g-import-not-at-top
  for name in REDIRECTED_MODULES:
    module = importlib.import_module(name)
    sys.modules["bert." + name] = module
    setattr(bert, name, module)


class _JsonLinesResult(unittest.TestResult):
  """Collects one outcome per test."""

  def __init__(self):
    super().__init__()
    self.outcomes = []

  def _record(self, test, outcome, detail=""):
    self.outcomes.append({"test": test.id().replace("bert.", "", 1), "outcome": outcome,
                          "detail": detail})

  def addSuccess(self, test):
    self._record(test, "passed")

  def addFailure(self, test, err):
    self._record(test, "failed", self._exc_info_to_string(err, test))

  def addError(self, test, err):
    self._record(test, "error", self._exc_info_to_string(err, test))

  def addSkip(self, test, reason):
    self._record(test, "skipped", reason)


def run(module_names):
  """Imports the release's test modules (after the redirection) and runs them.

  Returns:
    list of dicts {"test", "outcome", "detail"}, one per test.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  original_bert.install_contrib()
  tf.compat.v1.disable_v2_behavior()
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  redirect_release_imports()
  suite = unittest.TestSuite()
  for name in module_names:
    module = importlib.import_module("bert." + name)
    suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(module))
  # As tf.test.main would: the tests read absl flags (test_tmpdir, preserve_unused_tokens).
  flags.FLAGS(sys.argv[:1])
  result = _JsonLinesResult()
  suite.run(result)
  return result.outcomes


def main(argv):
  names = argv[1:] or list(RELEASE_TEST_MODULES)
  unknown = [name for name in names if name not in RELEASE_TEST_MODULES]
  if unknown:
    sys.stderr.write("unknown release test module(s) %s; expected some of %s\n"
                     % (", ".join(unknown), ", ".join(RELEASE_TEST_MODULES)))
    return 2
  for outcome in run(names):
    print(json.dumps(outcome))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
