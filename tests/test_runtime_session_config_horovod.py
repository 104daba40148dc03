"""utils/runtime/session_config.py with real Horovod processes (`horovodrun --gloo`).

Two workers under an outer timeout run two allreduces under the session config; they write what
they saw to JSON files and the expected values are computed here. The fields of the ConfigProto
are tested in tests/test_runtime_session_config.py.
"""

import os

import numpy as np
import pytest

from tests import helpers

pytestmark = pytest.mark.e2e

SESSION_CONFIG_WORKER = os.path.join(helpers.REPO_ROOT, "tests", "workers",
                                     "session_config_check.py")
NUM_WORKERS = 2


SESSION_CONFIG_INPUTS = {str(rank): {"a": [rank + 1.0, 2.0 * rank, -1.0, 0.5 * rank],
                                    "b": [3.0 - rank, rank * rank + 1.0, 7.0]}
                         for rank in range(NUM_WORKERS)}


@pytest.fixture(scope="module")
def session_config_results(tmp_path_factory):
  """One 2-worker run of the session-config worker, shared by the tests below."""
  return helpers.launch_horovod_workers(SESSION_CONFIG_WORKER, SESSION_CONFIG_INPUTS,
                tmp_path_factory.mktemp("session_config"))


def test_session_config_runs_two_horovod_allreduces(session_config_results):
  inputs = SESSION_CONFIG_INPUTS
  results = session_config_results
  a = np.array([inputs[str(r)]["a"] for r in range(NUM_WORKERS)])
  b = np.array([inputs[str(r)]["b"] for r in range(NUM_WORKERS)])
  expected_averaged_plus_1 = (2.0 * a).mean(axis=0) + 1.0
  expected_summed_times_2 = (3.0 * b).sum(axis=0) * 2.0
  for result in results:
    default = result["default"]
    assert "error" not in default, default
    np.testing.assert_allclose(default["averaged_plus_1"], expected_averaged_plus_1, rtol=1e-6)
    np.testing.assert_allclose(default["summed_times_2"], expected_summed_times_2, rtol=1e-6)
    assert default["op_types"].count("HorovodAllreduce") == 2
    assert not [op for op in default["op_types"] if "ScopedAllocator" in op]


def test_scoped_allocator_is_rejected_by_horovods_allreduce_kernel(session_config_results):
  """Why the scoped allocator is opt-in (docs/DECISIONS.md): with it, Grappler rewrites the two
  allreduces into one over a shared buffer, and Horovod 0.28.1's kernel, which allocates its own
  output, refuses to run. When a Horovod release supports it, this test fails: then make it the
  default again (docs/DESIGN.md section 7)."""
  for result in session_config_results:
    outcome = result["scoped_allocator"]
    assert "error" in outcome, outcome
    assert "input forwarding required" in outcome["error"]
    assert "scoped_allocator" in outcome["error"]  # the rewritten node
