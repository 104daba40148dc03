"""TF1 behaviour (`disable_v2_behavior`: ref variables, v1 control flow) trains like TF2 graph mode.

Resource variables get the XLA-fused update that writes the variables itself; ref variables
cannot be written from a compiled function, so they get the same compiled arithmetic and assign
ops. tests/workers/variable_kind_worker.py trains the same model from the same start on the same
batches in both conventions (separate processes: the convention is process-wide); every variable
the training creates must end bit for bit the same. The Horovod runs with ref variables are in
test_optimization_horovod.py, the whole pretraining job in test_run_pretraining.py.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.workers import variable_kind_worker

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(REPO_ROOT, "tests", "workers", "variable_kind_worker.py")
CONFIG_NAMES = [config[0] for config in variable_kind_worker.CONFIGS]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  out = tmp_path_factory.mktemp("variable_kinds")
  results = {}
  for kind, extra in (("ref", ["--tf1"]), ("resource", [])):
    path = out / (kind + ".npz")
    proc = subprocess.run([sys.executable, WORKER, "--out", str(path)] + extra, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    results[kind] = dict(np.load(path))
  return results


def _of(results, config):
  prefix = config + "/"
  return {key[len(prefix):]: value for key, value in results.items() if key.startswith(prefix)}


@pytest.mark.parametrize("config", CONFIG_NAMES)
def test_ref_and_resource_variables_give_the_same_training(runs, config):
  ref, resource = _of(runs["ref"], config), _of(runs["resource"], config)
  # The runs really used the two kinds (trainable variables and the global step).
  assert ref.pop("ref_variables").all()
  assert not resource.pop("ref_variables").any()
  assert sorted(ref) == sorted(resource)
  assert int(ref["global_step"]) == variable_kind_worker.NUM_UPDATES
  for name in ref:
    np.testing.assert_array_equal(ref[name], resource[name], err_msg=name)


@pytest.mark.parametrize("config", CONFIG_NAMES)
def test_the_comparison_is_not_vacuous(runs, config):
  values = _of(runs["ref"], config)
  _, _, num_accumulation_steps, manual_fp16 = dict(
      (c[0], c) for c in variable_kind_worker.CONFIGS)[config]
  # Every weight moved from its (deterministic) start and the moments are non-zero.
  assert not np.allclose(values["dense/bias"], 0.0)
  initial_kernel = np.random.RandomState(1).normal(size=(9, 3)).astype(np.float32)
  assert not np.allclose(values["dense/kernel"], initial_kernel)
  assert np.abs(values["emb/table/adam_v"]).max() > 0
  full_cycles = variable_kind_worker.NUM_UPDATES * num_accumulation_steps
  if manual_fp16:
    # Some updates overflowed and were skipped: the skip path (and the halving) ran.
    assert int(values["micro_steps"]) > full_cycles
  else:
    assert int(values["micro_steps"]) == full_cycles
