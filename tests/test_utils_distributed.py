"""utils/ with real Horovod processes: weight sync and the session config (`horovodrun --gloo`).

Each test launches two workers under an outer timeout; the workers write what they saw to JSON
files and the expected values are computed here.
"""

import json
import os
import sys
import subprocess

import numpy as np
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
WEIGHT_SYNC_WORKER = os.path.join(REPO_ROOT, "tests", "workers", "weight_sync_check.py")
SESSION_CONFIG_WORKER = os.path.join(REPO_ROOT, "tests", "workers", "session_config_check.py")
NUM_WORKERS = 2


def launch(worker, inputs, tmp_path):
  """Runs `worker` on 2 processes with horovodrun --gloo; returns the per-rank JSON results.

  `tmp_path` is a fresh directory (a pathlib.Path) for the inputs and outputs.
  """
  inputs_path = tmp_path / "inputs.json"
  inputs_path.write_text(json.dumps(inputs))
  out_dir = tmp_path / "out"
  out_dir.mkdir()
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("TF_DISABLE_SCOPED_ALLOCATOR", None)
  env.pop("FORCE_WEIGHT_SYNC", None)
  proc = subprocess.run(
      [HOROVODRUN, "-np", str(NUM_WORKERS), "-H", "localhost:%d" % NUM_WORKERS, "--gloo",
       sys.executable, worker, str(inputs_path), str(out_dir)],
      capture_output=True, text=True, timeout=180, cwd=REPO_ROOT, env=env)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  results = []
  for rank in range(NUM_WORKERS):
    with open(out_dir / ("rank_%d.json" % rank)) as f:
      results.append(json.load(f))
    assert results[rank]["rank"] == rank and results[rank]["size"] == NUM_WORKERS
  return results


def weight_sync_scenario(rng, num_accumulation_steps, iterations):
  """Different starting weights and increments per rank (no broadcast)."""
  shapes = {"bias": [3], "kernel": [2, 2]}
  return {
      "num_accumulation_steps": num_accumulation_steps,
      "iterations": iterations,
      "initial": {name: [rng.normal(size=shape).tolist() for _ in range(NUM_WORKERS)]
                  for name, shape in shapes.items()},
      "increment": {name: [rng.normal(size=shape).tolist() for _ in range(NUM_WORKERS)]
                    for name, shape in shapes.items()},
      "local_only": [10.0 * (rank + 1) for rank in range(NUM_WORKERS)],
  }


def expected_weights(scenario):
  """Per rank and iteration: the weights just before and just after the train op.

  Sync on iterations N, 2N, ... (1-based) before the train op: every rank then holds the mean of
  all ranks' weights; the train op adds each rank's own increment.
  """
  n = scenario["num_accumulation_steps"]
  weights = [{name: np.array(values[rank]) for name, values in scenario["initial"].items()}
             for rank in range(NUM_WORKERS)]
  before = [[] for _ in range(NUM_WORKERS)]
  after = [[] for _ in range(NUM_WORKERS)]
  for iteration in range(1, scenario["iterations"] + 1):
    if iteration % n == 0:
      mean = {name: np.mean([w[name] for w in weights], axis=0) for name in weights[0]}
      weights = [dict(mean) for _ in range(NUM_WORKERS)]
    for rank in range(NUM_WORKERS):
      before[rank].append(dict(weights[rank]))
      weights[rank] = {name: value + np.array(scenario["increment"][name][rank])
                       for name, value in weights[rank].items()}
      after[rank].append(dict(weights[rank]))
  return before, after


def assert_weights(got, expected):
  assert len(got) == len(expected)
  for got_step, expected_step in zip(got, expected):
    assert sorted(got_step) == sorted(expected_step)
    for name in expected_step:
      np.testing.assert_allclose(got_step[name], expected_step[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tf1", [False, True], ids=["resource", "ref"])
def test_weight_sync_averages_weights_before_the_train_op(tmp_path, tf1):
  rng = np.random.RandomState(7)
  scenarios = [weight_sync_scenario(rng, num_accumulation_steps=1, iterations=3),
               weight_sync_scenario(rng, num_accumulation_steps=3, iterations=7)]
  results = launch(WEIGHT_SYNC_WORKER, {"scenarios": scenarios, "tf1": tf1}, tmp_path)
  for rank in range(NUM_WORKERS):
    for scenario in results[rank]["scenarios"]:
      assert scenario["ref_variables"] == [tf1] * len(scenario["ref_variables"])

  for index, scenario in enumerate(scenarios):
    got = [results[rank]["scenarios"][index] for rank in range(NUM_WORKERS)]
    expected_before, expected_after = expected_weights(scenario)
    for rank in range(NUM_WORKERS):
      assert_weights(got[rank]["before"], expected_before[rank])
      assert_weights(got[rank]["after"], expected_after[rank])
      assert got[rank]["sync_count"] == scenario["iterations"] // scenario["num_accumulation_steps"]
      # Non-trainable variables are not averaged.
      assert got[rank]["local_only"] == scenario["local_only"][rank] + scenario["iterations"]

  # Scenario 1 (sync every iteration): different starting weights, identical after the first sync
  # and equal to the numpy average of the starting weights.
  first = [results[rank]["scenarios"][0]["before"][0] for rank in range(NUM_WORKERS)]
  for name, per_rank in scenarios[0]["initial"].items():
    assert not np.allclose(per_rank[0], per_rank[1])
    np.testing.assert_array_equal(first[0][name], first[1][name])
    np.testing.assert_allclose(first[0][name], np.mean(per_rank, axis=0), rtol=1e-6)
  # Scenario 2 (every 3 iterations): weights differ on iterations 1, 2, 4, 5, 7 and agree on 3, 6.
  second = [results[rank]["scenarios"][1]["before"] for rank in range(NUM_WORKERS)]
  agree = [np.allclose(second[0][i]["kernel"], second[1][i]["kernel"]) for i in range(7)]
  assert agree == [False, False, True, False, False, True, False]


SESSION_CONFIG_INPUTS = {str(rank): {"a": [rank + 1.0, 2.0 * rank, -1.0, 0.5 * rank],
                                    "b": [3.0 - rank, rank * rank + 1.0, 7.0]}
                         for rank in range(NUM_WORKERS)}


@pytest.fixture(scope="module")
def session_config_results(tmp_path_factory):
  """One 2-worker run of the session-config worker, shared by the tests below."""
  return launch(SESSION_CONFIG_WORKER, SESSION_CONFIG_INPUTS,
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
