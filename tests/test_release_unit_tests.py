"""The original BERT release's own unit tests pass on this project's modules.

The installed PyPI `bert-tensorflow` ships `modeling_test`, `optimization_test` and
`tokenization_test`. tests/reference/release_tests.py runs them, unchanged, in a subprocess with
`bert.modeling`, `bert.optimization` and `bert.tokenization` resolving to our modules, under the
release's TF1 convention (v2 behaviour disabled: ref variables, `Dimension` shapes). Every one of
the release's 13 tests must pass; the only skips allowed are tf.test.TestCase's own
`test_session` ("Not a test.").
"""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RELEASE_TESTS = (
    "modeling_test.BertModelTest.test_config_to_json_string",
    "modeling_test.BertModelTest.test_default",
    "optimization_test.OptimizationTest.test_adam",
    "tokenization_test.TokenizationTest.test_basic_tokenizer_lower",
    "tokenization_test.TokenizationTest.test_basic_tokenizer_no_lower",
    "tokenization_test.TokenizationTest.test_chinese",
    "tokenization_test.TokenizationTest.test_convert_tokens_to_ids",
    "tokenization_test.TokenizationTest.test_full_tokenizer",
    "tokenization_test.TokenizationTest.test_full_tokenizer_preserve_unused",
    "tokenization_test.TokenizationTest.test_is_control",
    "tokenization_test.TokenizationTest.test_is_punctuation",
    "tokenization_test.TokenizationTest.test_is_whitespace",
    "tokenization_test.TokenizationTest.test_wordpiece_tokenizer",
)


@pytest.fixture(scope="module")
def outcomes():
  proc = subprocess.run([sys.executable, "-m", "tests.reference.release_tests"], cwd=REPO_ROOT,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
  return {result["test"]: result for result in results}


def test_the_release_ships_exactly_these_tests(outcomes):
  skipped = {name for name, result in outcomes.items() if result["outcome"] == "skipped"}
  assert sorted(set(outcomes) - skipped) == sorted(RELEASE_TESTS)
  for name in skipped:
    assert name.endswith(".test_session"), name
    assert outcomes[name]["detail"] == "Not a test.", outcomes[name]


@pytest.mark.parametrize("name", RELEASE_TESTS)
def test_release_unit_test_passes(outcomes, name):
  assert name in outcomes, "the release's test %s did not run" % name
  result = outcomes[name]
  assert result["outcome"] == "passed", "%s %s:\n%s" % (name, result["outcome"], result["detail"])
