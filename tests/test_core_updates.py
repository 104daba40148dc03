"""utils/core/updates.py: the one rule for what a session run tells about the optimizer update,
worked out by hand for each case."""

import ast

import pytest

from utils.core import graph_names
from utils.core import updates


def test_an_update_ends_where_the_graph_says_or_every_accumulation_th_run():
  # With the graph's flag, the flag decides, whatever the count.
  assert updates.ended_update({graph_names.UPDATE_STEP: True}, 1, 4)
  assert not updates.ended_update({graph_names.UPDATE_STEP: False}, 4, 4)
  # Without it, runs 4, 8, ... of accumulation 4; every run without accumulation.
  assert [updates.ended_update({}, run, 4) for run in range(1, 9)] == [
      False, False, False, True, False, False, False, True]
  assert all(updates.ended_update({"total_loss": 1.0}, run, 1) for run in range(1, 4))


def test_tracker_counts_runs_and_tells_applied_skipped_and_mid_accumulation_runs():
  tracker = updates.UpdateTracker(num_accumulation_steps=2)
  tracker.start(7)
  # Accumulation 2 from step 7: run 2 applies (7 -> 8), run 4 is skipped (the step stays 8),
  # run 6 applies (8 -> 9); the odd runs are mid-accumulation.
  steps = [7, 8, 8, 8, 8, 9]
  facts = [tracker.run_ended({graph_names.STEP_UPDATE: step, "total_loss": 1.0 + k})
           for k, step in enumerate(steps)]
  assert [f.micro_step for f in facts] == [1, 2, 3, 4, 5, 6]
  assert [f.ended_update for f in facts] == [False, True, False, True, False, True]
  assert [f.applied for f in facts] == [False, True, False, False, False, True]
  assert [f.step for f in facts] == steps
  assert facts[3].values == {graph_names.STEP_UPDATE: 8, "total_loss": 4.0}
  assert tracker.runs == 6 and tracker.initial_step == 7


def test_the_graph_flag_overrides_the_count_and_start_clears_the_session():
  tracker = updates.UpdateTracker(num_accumulation_steps=3)
  tracker.start(0)
  first = tracker.run_ended({graph_names.UPDATE_STEP: True, graph_names.STEP_UPDATE: 1})
  assert first.ended_update and first.applied and first.micro_step == 1
  # A new session from step 1: runs count from 1 again, and step 1 unchanged is a skip.
  tracker.start(1)
  again = tracker.run_ended({graph_names.UPDATE_STEP: True, graph_names.STEP_UPDATE: 1})
  assert again.micro_step == 1 and again.ended_update and not again.applied
  # Without a known start step the first update counts as applied, whatever its step.
  tracker.start(None)
  unknown = tracker.run_ended({graph_names.UPDATE_STEP: True, graph_names.STEP_UPDATE: 1})
  assert unknown.applied and tracker.initial_step is None


def test_a_graph_without_the_step_ends_updates_but_applies_none():
  tracker = updates.UpdateTracker()
  facts = tracker.run_ended({"total_loss": 2.5})
  assert facts.ended_update and facts.step is None and not facts.applied


@pytest.mark.parametrize("count", [0, -1, 1.5, True, None])
def test_bad_accumulation_counts_are_named(count):
  with pytest.raises(ValueError, match="num_accumulation_steps must be an integer >= 1"):
    updates.UpdateTracker(count)


def test_the_per_run_tensors_are_graph_names_and_the_module_needs_no_tensorflow():
  names = {value for key, value in vars(graph_names).items() if key.isupper()}
  assert set(updates.PER_RUN_TENSORS) <= names
  assert graph_names.TRAIN_OP not in updates.PER_RUN_TENSORS
  tree = ast.parse(open(updates.__file__).read())
  imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
              for alias in node.names]
  imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
  assert not [name for name in imported if name.split(".")[0] == "tensorflow"]
