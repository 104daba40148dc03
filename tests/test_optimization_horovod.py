"""The training step under Horovod, with real processes (horovodrun --gloo, 2 workers).

2 workers x batch B must give the same weights as 1 process x batch 2B for both allreduce modes
and with accumulation; an inf gradient on one worker must leave both workers unchanged and halve
both loss scales; the fp16 allreduce path must run. All of it with resource variables and again
under TF1 behaviour (ref variables).
"""

import os
import sys

import numpy as np
import pytest

from tests import helpers

pytestmark = pytest.mark.e2e

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(REPO_ROOT, "tests", "workers", "optimizer_worker.py")
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
CONFIGS = ["n1_per_step", "n1_post", "n2_per_step", "n2_post", "n2_per_step_tiny",
           "n2_post_tiny", "bf16_n1_per_step", "bf16_n2_post_tiny"]
# 2 workers x batch B against 1 process x batch 2B: fp32 differs by the order of float sums only.
# In bf16 each worker's weight gradient (a bf16 matmul over its rows) is rounded to bf16 before
# the fp32 average, the single process' over all rows: <= u = 2^-8 relative per gradient element
# and update; over 3 updates of a learning rate 0.05 that moves weights of O(1) by ~0.1, the
# weights differ by <= ~3 x 2^-8 x 0.1 ~ 1e-3 of their size: rtol 2^-8, atol 2^-10 stated.
TOLERANCES = {"fp32": dict(rtol=1e-5, atol=1e-6), "bf16": dict(rtol=2.0 ** -8, atol=2.0 ** -10)}
VARIABLES = ["emb/table", "dense/kernel", "dense/bias"]


def _run_together(commands, timeout):
  """Runs the commands at once (the one-process reference beside the Horovod job); each must
  exit 0."""
  for code, out, err in helpers.run_side_by_side(commands, timeout):
    assert code == 0, out[-4000:] + err[-4000:]


# "resource": graph mode as elsewhere; "ref": TF1 behaviour (ref variables, v1 control flow).
@pytest.fixture(scope="module", params=["resource", "ref"])
def results(tmp_path_factory, request):
  out = tmp_path_factory.mktemp("optimizer_horovod_" + request.param)
  tf1 = ["--tf1"] if request.param == "ref" else []
  _run_together([
      [sys.executable, WORKER, "--out", str(out), "--global_workers", "2"] + tf1,
      [HOROVODRUN, "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, WORKER,
       "--out", str(out), "--horovod"] + tf1], timeout=300)
  loaded = {name: dict(np.load(out / (name + ".npz"))) for name in ("single", "rank0", "rank1")}
  for name, values in loaded.items():
    for config in CONFIGS:
      kinds = values[config + "/ref_variables"]
      assert kinds.all() if request.param == "ref" else not kinds.any(), (name, config)
  return loaded


@pytest.mark.parametrize("config", CONFIGS)
def test_two_workers_equal_one_process_with_double_batch(results, config):
  single, rank0, rank1 = results["single"], results["rank0"], results["rank1"]
  assert int(rank0["size"]) == 2
  for var in VARIABLES:
    key = "%s/%s" % (config, var)
    np.testing.assert_array_equal(rank0[key], rank1[key], err_msg=key)
    np.testing.assert_allclose(rank0[key], single[key], err_msg=key,
                               **TOLERANCES["bf16" if config.startswith("bf16") else "fp32"])
  assert rank0[config + "/global_step"] == single[config + "/global_step"] == 3


def test_bf16_configurations_compute_in_bf16_and_allreduce_fp32(results):
  for config in CONFIGS:
    bf16 = config.startswith("bf16")
    # The model's forward and backward matmuls run in bf16; the gradients are allreduced in fp32
    # (Horovod's MPI/Gloo allreduce has no bf16 type).
    assert ("bfloat16" in list(results["rank0"][config + "/matmul_dtypes"])) == bf16, config
    assert list(results["rank0"][config + "/allreduce_dtypes"]) == ["float32"], config


def test_training_moved_the_weights(results):
  # Guards the equivalence test against a run where nothing was applied anywhere.
  initial_bias = np.zeros(3)
  for config in CONFIGS:
    assert not np.allclose(results["single"][config + "/dense/bias"], initial_bias)


@pytest.mark.parametrize("tag", ["inf_per_step", "inf_post"])
def test_inf_on_one_worker_skips_the_update_everywhere(results, tag):
  for rank in ("rank0", "rank1"):
    changed, steps, scales = results[rank][tag + "/history"].T
    assert list(changed) == [1.0, 0.0, 1.0], rank
    assert list(steps) == [1.0, 1.0, 2.0], rank
    assert list(scales) == [1024.0, 512.0, 512.0], rank
  for var in VARIABLES:
    key = "%s/%s" % (tag, var)
    np.testing.assert_array_equal(results["rank0"][key], results["rank1"][key])


def test_fp16_training_allreduces_in_fp16(results):
  for tag in ("inf_per_step", "inf_post"):
    assert list(results["rank0"][tag + "/allreduce_dtypes"]) == ["float16"]
