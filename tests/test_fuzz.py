"""The fuzz targets (fuzz/): every target's seeds and saved regression inputs pass its reader, the
harness calls each kind of failure a finding, and `python -m fuzz.run` runs every target under
atheris for a short, fixed-seed pass and reports a native crash as a finding (docs/TESTING.md,
"Fuzzing")."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from fuzz import harness
from fuzz import run
from tests import helpers

TARGETS = harness.target_names()
# Readers of files from outside that must each have a target (docs/TESTING.md, "Fuzzing").
READERS = ("bert_config", "glue_tsv", "golden_losses", "pretraining_example", "run_log",
           "safetensors", "squad_json", "tfrecord", "torch_pickle", "vocabulary")
# Inputs per target in the suite's fixed-seed pass: enough to leave the seeds and mutate them.
SUITE_RUNS = 300
FUZZ_TIMEOUT_SECONDS = 900


def test_every_reader_has_a_target():
  assert set(READERS) <= set(TARGETS), sorted(set(READERS) - set(TARGETS))


@pytest.mark.parametrize("name", TARGETS)
def test_seeds_and_saved_regressions_pass(name):
  target = harness.load_target(name)
  assert target.name == name
  seeds = target.seeds()
  assert seeds and all(isinstance(seed, bytes) and len(seed) <= target.max_len for seed in seeds)
  for label, data in ([("seed %d" % i, s) for i, s in enumerate(seeds)]
                      + harness.regression_inputs(name)):
    assert harness.run_one(target, data) is None, (label, harness.run_one(target, data))


def _target(read):
  return harness.Target("control", read, (ValueError,), lambda: [b"x"], 64)


def _refuses(data):
  raise ValueError("a clean refusal")


def _crashes(data):
  return {}["missing"]


def _breaks_a_property(data):
  assert data == b"something else", "a value that is not in the file"


def _allocates(data):
  return np.ones(harness.memory_bound(data) // 8 + 1024)


def test_harness_passes_clean_returns_and_refusals():
  assert harness.run_one(_target(lambda data: None), b"abc") is None
  assert harness.run_one(_target(_refuses), b"abc") is None


@pytest.mark.parametrize("read,kind", [(_crashes, "exception"), (_breaks_a_property, "property"),
                                       (_allocates, "memory")])
def test_harness_reports_each_kind_of_finding(read, kind):
  finding = harness.run_one(_target(read), b"abc")
  assert finding is not None and finding.kind == kind, finding


def test_memory_bound_grows_with_the_input():
  assert harness.memory_bound(b"") == 32 << 20
  assert harness.memory_bound(b"x" * 1000) == (32 << 20) + 64 * 1000


@pytest.mark.e2e
def test_every_target_survives_a_fixed_seed_pass(tmp_path):
  result = helpers.run_python(
      ["-m", "fuzz.run", "--targets=all", "--runs=%d" % SUITE_RUNS, "--seed=1",
       "--out_dir=%s" % tmp_path], check=False, timeout=FUZZ_TIMEOUT_SECONDS)
  output = result.stdout + result.stderr
  assert result.returncode == 0, output[-6000:]
  for name in TARGETS:
    assert "%s: %d inputs in " % (name, SUITE_RUNS) in output, (name, output[-3000:])
  assert "FINDING" not in output


_CONTROL_TARGETS = {
    "native_crash": (
        "import ctypes\n"
        "from fuzz import harness\n"
        "def read(data):\n"
        "  if data[:1] == b'X':\n"
        "    ctypes.string_at(0)  # reads address 0: SIGSEGV\n"
        "TARGET = harness.Target('native_crash', read, (ValueError,), lambda: [b'X'], 16)\n"),
    "clean": (
        "from fuzz import harness\n"
        "def read(data):\n"
        "  if data[:1] == b'X':\n"
        "    raise ValueError('refused')\n"
        "TARGET = harness.Target('clean', read, (ValueError,), lambda: [b'X', b'Y'], 16)\n"),
}


def test_runner_fuzzes_each_target_alone_without_rereading_its_corpus(tmp_path):
  """A fixed-seed pass runs exactly --runs inputs: libFuzzer's rereading of the corpus folder
  (every second by default) would run inputs beyond them."""
  args = run.parse_args(["--targets=tfrecord", "--runs=300", "--seed=1",
                         "--out_dir=%s" % tmp_path])
  command, findings = run.fuzz_command("tfrecord", args)
  assert "-reload=0" in command and "-runs=300" in command and "-seed=1" in command
  assert command[command.index("fuzz.worker") + 2] == str(tmp_path / "corpus" / "tfrecord")
  assert findings == str(tmp_path / "findings" / "tfrecord")


@pytest.mark.e2e
def test_runner_reports_a_native_crash_as_a_finding(tmp_path):
  """A control: the runner sees a segmentation fault in a reader (what the hostile TFRecord did
  to TensorFlow's reader) as a finding, saves the input and exits 1; a clean target beside it
  still reports its inputs."""
  package = tmp_path / "fuzz"
  package.mkdir()
  for module in ("__init__.py", "harness.py", "worker.py", "run.py"):
    shutil.copy(os.path.join(harness.FUZZ_DIR, module), package / module)
  for name, source in _CONTROL_TARGETS.items():
    (package / ("target_%s.py" % name)).write_text(source)
  result = subprocess.run(
      [sys.executable, "-m", "fuzz.run", "--runs=50", "--seed=1", "--out_dir=%s" % (tmp_path / "out")],
      cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
      env=dict(os.environ, PYTHONPATH=str(tmp_path)))
  output = result.stdout + result.stderr
  assert result.returncode == 1, output[-3000:]
  assert "clean: 50 inputs in " in output and "clean: FINDING" not in output, output[-3000:]
  assert "native_crash: FINDING" in output, output[-3000:]
  saved = os.listdir(tmp_path / "out" / "findings" / "native_crash")
  assert len(saved) == 1 and saved[0].startswith("crash-"), saved
  with open(tmp_path / "out" / "findings" / "native_crash" / saved[0], "rb") as f:
    assert f.read()[:1] == b"X"
