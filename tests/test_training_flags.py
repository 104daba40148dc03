"""utils/training/flags.py: the flags the three Estimator scripts share, defined once, each script
with its own defaults (whatever else a process imported first)."""

import subprocess
import sys

from absl import flags
import pytest

from tests import helpers
from utils.training import flags as job_flags

# The release's / NVIDIA's defaults of each script, written out here.
SCRIPT_DEFAULTS = {"run_pretraining": {"max_seq_length": 512, "optimizer_type": "lamb"},
                   "run_squad": {"max_seq_length": 384, "optimizer_type": "adam"},
                   "run_classifier": {"max_seq_length": 128, "optimizer_type": "adam"}}


@pytest.mark.e2e
@pytest.mark.parametrize("import_order", [
    ("run_pretraining", "run_squad", "run_classifier"),
    ("run_classifier", "run_squad", "run_pretraining"),
])
def test_each_script_gets_its_own_defaults_whatever_was_imported_first(import_order):
  """All three scripts in one process (as tests and notebooks import them): no flag is defined
  twice, and each script's main gives the flags its own defaults, a value given on the command line
  staying."""
  code = (
      "import importlib, sys\n"
      "from absl import flags\n"
      "from utils.training import flags as job_flags\n"
      "modules = [importlib.import_module(n) for n in %r]\n"
      "F = flags.FLAGS\n"
      "F(['prog', '--optimizer_type=lamb'])\n"
      "for module in modules:\n"
      "  job_flags.apply_script_defaults(F, module.DEFAULTS)\n"
      "  print(module.__name__, F.max_seq_length, F.optimizer_type)\n" % (import_order,))
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        cwd=helpers.REPO_ROOT, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = [line.split() for line in proc.stdout.splitlines()]
  assert [name for name, _, _ in lines] == list(import_order)
  for name, max_seq_length, optimizer_type in lines:
    assert int(max_seq_length) == SCRIPT_DEFAULTS[name]["max_seq_length"], name
    assert optimizer_type == "lamb", name  # given on the command line: kept


@pytest.mark.e2e
@pytest.mark.parametrize("script", sorted(SCRIPT_DEFAULTS))
def test_help_shows_the_scripts_defaults_and_the_shared_flags(script):
  proc = subprocess.run([sys.executable, script + ".py", "--helpshort"], capture_output=True,
                        text=True, cwd=helpers.REPO_ROOT, timeout=120)
  text = proc.stdout + proc.stderr
  for name, value in SCRIPT_DEFAULTS[script].items():
    block = text[text.index("--%s:" % name):]
    assert "(default: '%s')" % value in block[:block.index("(default")+30], (script, name)
  for shared in ("--[no]deterministic_run:", "--[no]horovod:", "--seed:", "--train_batch_size:"):
    assert shared in text, (script, shared)


def test_apply_script_defaults_keeps_a_given_value():
  values = flags.FlagValues()
  flags.DEFINE_integer("length", 128, "a length", flag_values=values)
  flags.DEFINE_integer("width", 1, "a width", flag_values=values)
  values(["prog", "--width=3"])
  job_flags.apply_script_defaults(values, {"length": 384, "width": 7})
  assert values.length == 384 and values.width == 3
