"""bench/quality.py's jobs: the checkpoints each job keeps with their times, the calibration's
rate, and the re-plan of a job from the rate the last finished job of its cost ran at (the plan's
arithmetic and the report: tests/test_bench_quality.py).
"""

import dataclasses
import os

import pytest

from bench import quality
from bench import quality_checkpoints
from bench import quality_plan


def _variant(name):
  return {v.name: v for v in quality_plan.variants()}[name]


def test_quality_keeps_every_checkpoint_with_the_time_it_was_written(tmp_path):
  job_dir, keep_dir = tmp_path / "job", tmp_path / "kept"
  job_dir.mkdir()
  keeper = quality_checkpoints.CheckpointKeeper(str(job_dir), str(keep_dir), start=1000.0,
                                                poll_seconds=60)
  for update, written in ((100, 1030.0), (200, 1090.5)):
    (job_dir / ("model.ckpt-%d.data-00000-of-00001" % update)).write_text("data %d" % update)
    index = job_dir / ("model.ckpt-%d.index" % update)
    index.write_text("index %d" % update)
    os.utime(index, (written, written))
  # Data without its index yet: a checkpoint still being written, not kept.
  (job_dir / "model.ckpt-300.data-00000-of-00001").write_text("partial")
  keeper.start()  # polls once more when stopped, and every poll_seconds before
  keeper.poll()
  # The job deletes its old checkpoints (the original release keeps 5): the kept links stay.
  for path in job_dir.glob("model.ckpt-100.*"):
    path.unlink()
  keeper.stop()
  assert keeper.kept == {100: 30.0, 200: 90.5}
  assert (keep_dir / "model.ckpt-100.data-00000-of-00001").read_text() == "data 100"
  assert sorted(p.name for p in keep_dir.iterdir()) == [
      "model.ckpt-100.data-00000-of-00001", "model.ckpt-100.index",
      "model.ckpt-200.data-00000-of-00001", "model.ckpt-200.index"]


def test_quality_calibration_counts_updates_not_rows(monkeypatch, tmp_path):
  packed = quality_plan.Records(str(tmp_path / "packed_train"), (), 17891, 14460)
  seen = []

  def run_job(argv, env):
    seen.append(argv)
    return 1000.0, [], 0.5

  def job_figures(kind, figures, start, lines, out_dir):
    seen.append((kind, figures.batch, figures.warmup))
    return 100.0, 7.5

  monkeypatch.setattr(quality.precision, "run_job", run_job)
  monkeypatch.setattr(quality.precision, "job_figures", job_figures)
  # Ours logs sequences/s, a packed row's sequences counted: 52 rows of 1.2373 an update.
  rate = quality.calibrate(_variant("today"), packed, "c.json", "v.txt", str(tmp_path), 9)
  assert rate == quality_plan.Rate(7.5, pytest.approx(100.0 * 14460 / (52 * 17891)))
  assert "--train_batch_size=52" in seen[0] and "--num_train_steps=9" in seen[0]
  assert seen[1] == ("ours", 64, 3)
  # The original logs updates/s x its batch of 64.
  plain = quality_plan.Records("/d", ("/d/a",), 17891)
  assert quality.calibrate(_variant("original"), plain, "c.json", "v.txt", str(tmp_path),
                           9).updates_per_s == 100.0 / 64
  assert seen[3][0] == "original"
  # One calibration per cost: the schedule and beta2 ablations share fast's.
  calls = []
  monkeypatch.setattr(quality, "calibrate",
                      lambda v, *rest: calls.append(v.name) or quality_plan.Rate(1.0, 2.0))
  variants = quality_plan.variants()
  rates, _ = quality.calibrate_all(variants, {v.name: plain for v in variants}, "c", "v", "/w", 9)
  # The masking rate sets the masked-LM head's width (39 predictions at 30%, 20 at 15%): a cost.
  assert calls == ["original", "today", "fast", "fast_fixed_masks", "fast_mask_rate_15",
                   "fast_dropout", "fast_next_sentence"]
  assert rates["fast_beta2"] == rates["fast"] and len(rates) == len(variants)


def test_quality_a_finished_jobs_rate_plans_the_next_job_of_its_cost(monkeypatch):
  # Checkpoints at updates 50..500 written 30 s + update / 2.5 s after the start: 2.5 updates/s
  # and 30 s of start-up; the initial weights' checkpoint (update 0) is not a rate's point.
  kept = {0: 2.0}
  kept.update({u: 30.0 + u / 2.5 for u in range(50, 501, 50)})
  assert quality_plan.measured_rate(kept) == quality_plan.Rate(
      pytest.approx(30.0), pytest.approx(2.5))
  assert quality_plan.measured_rate({0: 1.0, 50: 20.0}) is None
  assert quality_plan.measured_rate({50: 20.0, 100: 20.0}) is None
  # B = 10 minutes at that rate: 0.95 x (600 - 30) x 2.5 = 1353 updates; 100,000 sequences
  # bound it at 90%: 1406.25 updates; 20,000 sequences at 281 (of 64 each).
  rate = quality_plan.Rate(30.0, 2.5)
  big = quality_plan.Records("/d", (), 100000)
  assert quality_plan.replanned_updates(_variant("original"), 10.0, rate, big) == 1353
  small = quality_plan.Records("/d", (), 20000)
  assert quality_plan.replanned_updates(_variant("original"), 10.0, rate, small) == 281
  # One after the other: each repeat after the first runs the updates of the rate the last job
  # of its cost measured; fast_beta2 shares fast's cost, fast_mask_rate_15 has its own.
  variants = quality_plan.with_settings(
      [_variant(n) for n in ("original", "fast", "fast_beta2", "fast_mask_rate_15")], repeats=2)
  plan = {"budget_minutes": 10.0, "checkpoints_per_job": 20,
          "jobs": {v.name: {"updates": 999} for v in variants}}
  speed = {"original": 2.5, "fast": 5.0, "fast_beta2": 4.0, "fast_mask_rate_15": 3.0}
  started = []

  def run_job(variant, seed, records, config_path, vocab_file, work_dir, plan_, replanned=None):
    started.append((variant.name, seed, replanned))
    return {"name": "%s_seed%d" % (variant.name, seed),
            "checkpoints": {u: 10.0 + u / speed[variant.name] for u in (100, 200)}}

  monkeypatch.setattr(quality, "run_job", run_job)
  jobs = quality.run_all(variants, {v.name: big for v in variants}, "c", "v", "/w", plan, 1)
  # In rounds: every variant's first repeat, then every variant's second.
  assert [job["name"] for job in jobs] == [n + s for s in ("_seed1", "_seed2") for n in speed]
  at = lambda variant, per_s: quality_plan.job_updates(variant, 10.0, quality_plan.Rate(
      10.0, per_s))
  assert started == [
      ("original", 1, None), ("fast", 1, None),
      ("fast_beta2", 1, (at(variants[2], 5.0), "fast_seed1")),
      ("fast_mask_rate_15", 1, None),
      ("original", 2, (at(variants[0], 2.5), "original_seed1")),
      ("fast", 2, (at(variants[1], 4.0), "fast_beta2_seed1")),
      ("fast_beta2", 2, (at(variants[2], 5.0), "fast_seed2")),
      ("fast_mask_rate_15", 2, (at(variants[3], 3.0), "fast_mask_rate_15_seed1"))]
  # Variants with fewer repeats drop out of the later rounds.
  started.clear()
  quality.run_all([variants[0], dataclasses.replace(variants[1], seeds=1)],
                  {v.name: big for v in variants}, "c", "v", "/w", plan, 1)
  assert [(name, seed) for name, seed, _ in started] == [("original", 1), ("fast", 1),
                                                          ("original", 2)]
