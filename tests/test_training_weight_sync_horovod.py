"""utils/training/weight_sync.py with real Horovod processes (`horovodrun --gloo`).

Two workers under an outer timeout start from different weights; they write what they saw to JSON
files and the expected weights are computed here with numpy. The single-process half is
tests/test_training_weight_sync.py.
"""

import os

import numpy as np
import pytest

from tests import helpers

pytestmark = pytest.mark.e2e

WEIGHT_SYNC_WORKER = os.path.join(helpers.REPO_ROOT, "tests", "workers", "weight_sync_check.py")
NUM_WORKERS = 2


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
  results = helpers.launch_horovod_workers(WEIGHT_SYNC_WORKER,
                                           {"scenarios": scenarios, "tf1": tf1}, tmp_path)
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
