"""bench/quality.py's quick run (its variants on the small corpus, tiny budgets), its JSON checked
against its own curves: the target, minutes to it, the still-falling rule, the single pass, the
speed-ups and the ablation table. (Speed itself is measured by bench/, never asserted in tests.)
"""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bench import quality
from bench import quality_corpus
from bench import quality_plan
from tests import helpers

# The quick run: the seeded variants and the two ablations whose jobs differ from fast's in more
# than a number (fixed-mask records; the next-sentence head on records without masks). The other
# ablations' commands are fast's with other numbers, which run_pretraining.py's flag checks take
# (tests/test_bench_quality.py): a job each here would add start-ups, not code.
QUICK_VARIANTS = ["original", "today", "fast", "fast_fixed_masks", "fast_next_sentence"]


def _check_minutes_to_target(result, name, points):
  """minutes_to_target_loss[name]: interpolated where `points` first reach the target."""
  minutes = result["minutes_to_target_loss"][name]
  reached = [i for i, (_, loss) in enumerate(points) if loss <= result["target_loss"]]
  if not reached:
    assert minutes is None
  elif reached[0] == 0:
    assert minutes == pytest.approx(points[0][0], abs=1e-3)
  else:
    (m0, l0), (m1, l1) = points[reached[0] - 1], points[reached[0]]
    assert minutes == pytest.approx(m0 + (l0 - result["target_loss"]) / (l0 - l1) * (m1 - m0),
                                    abs=2e-3)


def _check_still_falling(result, name, points):
  """still_falling[name]: a least-squares line over the last quarter (at least 2 points)."""
  tail = points[-max(2, -(-len(points) // 4)):]
  slope, intercept = np.polyfit([m for m, _ in tail], [l for _, l in tail], 1)
  drop = -slope * (tail[-1][0] - tail[0][0]) / (slope * tail[0][0] + intercept)
  assert result["still_falling"][name] == {"falling": bool(drop >= 0.01),
                                           "drop": pytest.approx(drop, abs=1e-3)}


def _check_single_pass_and_plan(result):
  """Each job read under one pass of its split, as many sequences as its updates hold; the plan's
  estimate is the sum of its parts."""
  plan = result["plan"]
  for job in result["jobs"]:
    records = result["corpus"]["training_sequences"][job["variant"]]
    per_update = plan["jobs"][job["variant"]]["sequences_per_update"]
    assert job["updates"] == plan["jobs"][job["variant"]]["updates"]
    assert job["sequences_read"] == pytest.approx(job["updates"] * per_update, abs=1)
    assert job["pass_fraction"] == pytest.approx(job["sequences_read"] / records, abs=1e-3)
    assert job["pass_fraction"] < 1
  assert plan["estimated_minutes"]["total"] == pytest.approx(
      sum(v for k, v in plan["estimated_minutes"].items() if k != "total"), abs=0.2)


def _check_speedups_and_ablations(result, curves):
  """The speed-ups and the ablation table from the minutes and losses of the curves."""
  minutes = {v: result["minutes_to_target_loss"][v + "_seed1"] for v in QUICK_VARIANTS}
  for variant in QUICK_VARIANTS[1:]:
    got = result["speedups"][variant]
    if minutes[variant] is None or minutes["original"] is None:
      assert got is None
    else:
      assert got["median"] == pytest.approx(minutes["original"] / minutes[variant], abs=0.011)
      assert got["min"] == got["median"] == got["max"]
  ablations = [v for v in QUICK_VARIANTS if v.startswith("fast_")]
  assert [row["variant"] for row in result["ablations"]] == (ablations if "fast" in QUICK_VARIANTS
                                                            else [])
  for row in result["ablations"]:
    loss = curves[row["variant"] + "_seed1"][-1][1]
    assert row["final_loss_vs_fast"] == pytest.approx(loss - curves["fast_seed1"][-1][1],
                                                      abs=2e-4)


def _check_corpus_counts(result, cache):
  """The small corpus's counts, as prepare_corpus.py gave them (cached: no second build)."""
  for dynamic in (False, True):
    corpus = quality_corpus.build(dataclasses.replace(quality_corpus.QUICK_SETTINGS,
                                                      dynamic_masking=dynamic), root=str(cache))
    for variant in QUICK_VARIANTS:
      if result["variant_settings"][variant]["dynamic_masks"] == dynamic:
        assert result["corpus"]["training_sequences"][variant] == corpus.train_sequences
  assert result["corpus"]["eval_sequences"] == corpus.eval_sequences and result["cpu"]
  assert result["variant_settings"]["today"]["packed"] is True


@pytest.mark.e2e
def test_quality_quick_run_reports_what_its_own_curves_say(tmp_path):
  result_path = tmp_path / "quality.json"
  cache = tmp_path / "corpus_cache"
  proc = subprocess.run(
      [sys.executable, "bench/quality.py", "--quick", "--output_dir=%s" % (tmp_path / "out"),
       "--variants=%s" % ",".join(QUICK_VARIANTS),
       "--result_json=%s" % result_path, "--figure=%s" % (tmp_path / "quality.png")],
      capture_output=True, text=True, cwd=helpers.REPO_ROOT, timeout=900,
      env=dict(os.environ, BERT_QUALITY_CORPUS_ROOT=str(cache)))
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert result == json.loads(result_path.read_text())
  assert (tmp_path / "quality.png").stat().st_size > 0
  assert sorted(result["curves"]) == sorted(v + "_seed1" for v in QUICK_VARIANTS)
  curves = {name: [tuple(p) for p in points] for name, points in result["curves"].items()}
  for name, points in curves.items():
    assert len(points) >= quality.QUICK_CHECKPOINTS  # one every updates // 2: 3 of 3 updates
    assert [m for m, _ in points] == sorted(m for m, _ in points)
  # The target is the original's final loss, which it reaches at its end; the rest follows
  # from the curves.
  assert result["target_loss"] == curves["original_seed1"][-1][1]
  assert result["minutes_to_target_loss"]["original_seed1"] == pytest.approx(
      curves["original_seed1"][-1][0], abs=1e-3)
  original_job, = [job for job in result["jobs"] if job["name"] == "original_seed1"]
  assert result["updates_to_target_loss"]["original_seed1"] == original_job["updates"]
  for name, points in curves.items():
    _check_minutes_to_target(result, name, points)
    _check_still_falling(result, name, points)
  _check_single_pass_and_plan(result)
  # Fine-tuned: the seeded variants' final checkpoints, not the ablations'.
  seeded = [v for v in QUICK_VARIANTS if "_" not in v]
  assert sorted(result["final_dev_accuracy"]) == sorted(seeded)
  # Each final checkpoint (one repeat here) fine-tuned with QUICK_FINETUNE_SEEDS seeds.
  assert result["plan"]["finetune_seeds"] == quality.QUICK_FINETUNE_SEEDS == 2
  for variant, dev in result["final_dev_accuracy"].items():
    assert dev["min"] <= dev["mean"] <= dev["max"] and len(dev["values"]) == 2
    assert dev["checkpoints"] == {variant + "_seed1": pytest.approx(dev["mean"], abs=1e-4)}
    assert all(os.path.exists(tmp_path / "out" / "finetune" / (
        "%s_seed1_finetune%d" % (variant, seed)) / "eval_results.txt") for seed in (1, 2))
  _check_speedups_and_ablations(result, curves)
  _check_corpus_counts(result, cache)
