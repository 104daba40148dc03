"""TF1 behaviour (`disable_v2_behavior`: ref variables, v1 control flow) trains like TF2 graph mode.

Resource variables get the XLA-fused update that writes the variables itself; ref variables
cannot be written from a compiled function, so they get the same compiled arithmetic and assign
ops. tests/workers/variable_kind_worker.py trains the same model from the same start on the same
batches in both conventions (separate processes: the convention is process-wide); every variable
the training creates must end bit for bit the same. The Horovod runs with ref variables are in
test_optimization_horovod.py. The whole pretraining job runs here too, from an entry that turns TF1
behaviour on before importing run_pretraining, as a TF1 code base would.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests import test_run_pretraining as test_run_pretraining_helpers
from tests.test_run_pretraining import data  # noqa: F401  (the job's small data set, a fixture)
from tests.workers import variable_kind_worker

pytestmark = pytest.mark.e2e

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


# ---------------------------------------------------------------------------------------------
# The whole pretraining job under TF1 behaviour

# What a TF1 code base does: TF1 behaviour first, then the job's own entry point.
TF1_ENTRY = (
    "import sys\n"
    "import tensorflow as tf\n"
    "tf.compat.v1.disable_v2_behavior()\n"
    "from absl import app\n"
    "import run_pretraining\n"
    "sys.argv = ['run_pretraining.py'] + sys.argv[1:]\n"
    "app.run(run_pretraining.main)\n")


def _run_tf1_job(args):
  proc = subprocess.run([sys.executable, "-c", TF1_ENTRY] + list(args), capture_output=True,
                        text=True, timeout=600, cwd=REPO_ROOT)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
  return proc


def _variable_op_types(model_dir):
  """{variable name: op type} of the training graph the job wrote to its event file
  (VariableV2: a ref variable, VarHandleOp: a resource variable)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for path in sorted(model_dir.glob("events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      if event.graph_def:
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(event.graph_def)
        return {node.name: node.op for node in graph_def.node
                if node.op in ("VariableV2", "VarHandleOp")}
  raise AssertionError("no graph in the event files of %s" % model_dir)


def test_pretraining_job_under_tf1_behaviour_trains_and_resumes(data, tmp_path):
  weights = test_run_pretraining_helpers._released_style_checkpoint(tmp_path, seed=5)
  out = tmp_path / "out"
  flags = test_run_pretraining_helpers.common_flags(
      data, out, do_train=True, num_train_steps=6, input_files_dir=data["same_dir"],
      learning_rate=2e-2, init_checkpoint=tmp_path / "bert_model.ckpt", deterministic_run=True)
  _run_tf1_job(flags)
  values = test_run_pretraining_helpers.checkpoint_values(out)
  assert values["global_step"] == 6
  # The job really ran with ref variables: the model's, the slots and the global step.
  op_types = _variable_op_types(out)
  for name in ("bert/embeddings/word_embeddings", "bert/embeddings/word_embeddings/adam_m",
               "global_step"):
    assert op_types[name] == "VariableV2", (name, op_types.get(name))
  # It started from the checkpoint (get_assignment_map_from_checkpoint on ref variables) and
  # moved away from it.
  moved = [name for name, value in weights.items() if not np.allclose(values[name], value)]
  assert moved
  # The same record every step: a finite loss that falls.
  lines = test_run_pretraining_helpers.read_dllog(out / "bert_dllog.json")
  losses = [l["data"]["total_loss"] for l in lines if l["step"] != []]
  assert len(losses) == 6 and np.all(np.isfinite(losses))
  assert losses[-1] < losses[0] - 0.5, losses

  # Resumable: two more updates from the step-6 checkpoint, again under TF1 behaviour.
  flags = test_run_pretraining_helpers.common_flags(
      data, out, do_train=True, num_train_steps=8, input_files_dir=data["same_dir"],
      learning_rate=2e-2, deterministic_run=True)
  proc = _run_tf1_job(flags)
  assert "from step 6 to 8" in proc.stderr
  resumed = test_run_pretraining_helpers.checkpoint_values(out)
  assert resumed["global_step"] == 8
  assert not np.allclose(resumed["bert/embeddings/word_embeddings"],
                         values["bert/embeddings/word_embeddings"])
