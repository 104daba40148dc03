"""The time-to-quality benchmark (bench/quality.py and its plan, packed, fine-tuning and report
modules): the jobs each variant runs, the plan's arithmetic, minutes to a target, the still-falling
rule, the speed-up (the quick run: tests/test_bench_quality_quick.py).

(Speed itself is measured by bench/, never asserted in tests.)
"""

import dataclasses
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from bench import quality
from bench import quality_finetune
from bench import quality_packed
from bench import quality_plan
from bench import quality_report
from tests import helpers
from utils.core import errors


def test_quality_minutes_to_a_loss_interpolate_between_checkpoints_by_hand():
  points = [(1.0, 6.0), (2.0, 5.0), (3.0, 4.0)]
  assert quality_report.first_reached(points, 4.5) == pytest.approx(2.5)
  assert quality_report.first_reached(points, 6.5) == 1.0  # already below at the first point
  assert quality_report.first_reached(points, 3.9) is None
  # The first crossing counts, not a later one: 5 -> 4.4 crosses 4.5 at 1 + 0.5 / 0.6.
  bumpy = [(1.0, 5.0), (2.0, 4.4), (3.0, 4.6), (4.0, 4.0)]
  assert quality_report.first_reached(bumpy, 4.5) == pytest.approx(1 + 0.5 / 0.6)


def test_quality_still_falling_is_a_least_squares_line_over_the_last_quarter():
  rng = np.random.RandomState(3)
  minutes = np.linspace(0.5, 10, 20)
  loss = 6 + 2 * np.exp(-minutes / 2) + rng.normal(0, 0.01, 20)
  points = list(zip(minutes.tolist(), loss.tolist()))
  tail_x, tail_y = minutes[-5:], loss[-5:]  # ceil(20 / 4) points
  slope, intercept = np.polyfit(tail_x, tail_y, 1)
  first, last = slope * tail_x[0] + intercept, slope * tail_x[-1] + intercept
  assert quality_report.last_quarter_drop(points) == pytest.approx((first - last) / first)
  # Here the tail drops by about 0.5%: not still falling at the 1% rule.
  assert 0.001 < (first - last) / first < 0.01
  assert quality_report.still_falling(points)["falling"] is False
  steep = [(m, 8.0 - 0.1 * m) for m in range(1, 9)]  # 8 points: the last 2, 7.3 -> 7.2
  assert quality_report.still_falling(steep) == {"falling": True, "drop": round(0.1 / 7.3, 4)}
  assert quality_report.last_quarter_drop([(1, 5.0), (2, 5.1)]) == pytest.approx(-0.02)


def test_quality_speedup_and_spreads_by_hand():
  assert quality_report.speedup([10.0, 12.0, 11.0], [2.0, 3.0, 2.5]) == {
      "median": round(11.0 / 2.5, 2), "min": round(10.0 / 3.0, 2), "max": 6.0}
  # A repeat that never reached the target (None) ran its whole budget: it ranks after every
  # repeat that did. The original's three: 10, 12, never: median 12, and the ratio's upper end
  # is open (that repeat's minutes are unknown).
  assert quality_report.speedup([10.0, None, 12.0], [2.0, 3.0, 2.5]) == {
      "median": 4.8, "min": round(10.0 / 3.0, 2), "max": None}
  # One of ours never reached it: median 2.5 of (2, 2.5, never), the lower end open.
  assert quality_report.speedup([10.0, 12.0, 11.0], [2.0, None, 2.5]) == {
      "median": 4.4, "min": None, "max": 6.0}
  # Half or more never reached it: no median, no speed-up.
  assert quality_report.speedup([10.0, None, 12.0], [None, 4.0]) is None
  assert quality_report.speedup([10.0], [None]) is None
  assert quality_report.spread([3.0, None, 1.0, 2.0]) == {
      "median": 2.5, "min": 1.0, "max": None, "values": [3.0, None, 1.0, 2.0]}
  # The second full run's original (docs/PERFORMANCE.md): 6.40, 6.96 and one 0.0005 short.
  assert quality_report.spread([6.40, 6.96, None])["median"] == 6.96
  assert quality_report.spread([1.0, None, None]) == {
      "median": None, "min": 1.0, "max": None, "values": [1.0, None, None]}
  assert quality_report.spread([None])["median"] is None


def _variant(name):
  return {v.name: v for v in quality_plan.variants()}[name]


def _argv(name, records=None, updates=400, checkpoints=20):
  records = records or quality_plan.Records("/d", ("/d/a.tfrecord", "/d/b.tfrecord"), 100000)
  return quality_plan.job_command(_variant(name), records, "c.json", "v.txt", "/out", updates,
                                  checkpoints)


def _only_in(a, b):
  return sorted(set(a) - set(b))


def test_quality_each_ablation_is_fast_with_one_choice_undone():
  fast = _argv("fast")
  assert _only_in(_argv("fast_dropout"), fast) == []
  assert _only_in(fast, _argv("fast_dropout")) == ["--pretraining_dropout=0"]
  assert _only_in(_argv("fast_next_sentence"), fast) == []
  assert _only_in(fast, _argv("fast_next_sentence")) == ["--nonext_sentence_loss"]
  assert _only_in(fast, _argv("fast_beta2")) == ["--adam_beta2=0.98"]
  # fast keeps LAMB's own schedule (10% warmup); its ablation decays linearly to zero instead.
  assert _only_in(fast, _argv("fast_linear_schedule")) == ["--num_warmup_steps=40"]
  assert _only_in(_argv("fast_linear_schedule"), fast) == ["--lr_schedule=linear",
                                                            "--warmup_fraction=0.06"]
  # fast masks 30% of 128: ceil(38.4) = 39 predictions; 15%: room for 20, as the fixed records.
  assert _only_in(_argv("fast_mask_rate_15"), fast) == ["--masked_lm_prob=0.15",
                                                         "--max_predictions_per_seq=20"]
  assert _only_in(fast, _argv("fast_mask_rate_15")) == ["--masked_lm_prob=0.3",
                                                         "--max_predictions_per_seq=39"]
  # Fixed masks: the records' own 15% (20 predictions), no rate and no vocabulary to draw from.
  assert _only_in(fast, _argv("fast_fixed_masks")) == ["--masked_lm_prob=0.3",
                                                        "--max_predictions_per_seq=39",
                                                        "--vocab_file=v.txt"]
  assert _only_in(_argv("fast_fixed_masks"), fast) == ["--max_predictions_per_seq=20"]
  # fast is today with every lever (its masked-LM head 39 wide where the fixed records' is 20);
  # today is ours as a user runs it (LAMB, auto precision).
  today = _argv("today")
  assert _only_in(today, fast) == ["--max_predictions_per_seq=20"]
  for flag in ("--optimizer_type=lamb", "--precision=auto", "--learning_rate=0.008",
               "--train_batch_size=64", "--save_checkpoints_steps=20", "--num_train_steps=400",
               "--keep_checkpoint_max=22"):
    assert flag in today and flag in fast
  assert [v.name for v in quality_plan.variants() if v.lever] == list(quality_plan.ABLATIONS)
  assert [(v.budget_fraction, v.seeds) for v in quality_plan.variants()[:3]] == [
      (1.0, 3), (0.5, 3), (0.5, 3)]


def test_quality_every_job_of_ours_passes_run_pretrainings_flag_checks():
  # The checks run_pretraining.py makes before it reads a file: what the quick run's jobs show for
  # the variants it runs, for all of them (packed and not), without a start-up each.
  import run_pretraining  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  from utils.training import job_config  # pylint: disable=g-import-not-at-top
  packed = quality_plan.Records("/p", ("/p/a",), 17891, 14460)
  for variant in quality_plan.variants():
    if variant.program != "ours":
      continue
    records = packed if variant.packed else quality_plan.Records("/d", ("/d/a",), 100000)
    argv = quality_plan.job_command(variant, records, "c.json", "v.txt", "/out", 400)
    assert argv[1].endswith("run_pretraining.py"), argv
    with helpers.parsed_flags(run_pretraining.PROGRAM, argv[2:], run_pretraining.DEFAULTS):
      run_pretraining.check_flags(flags.FLAGS, job_config.JobConfig.from_flags(flags.FLAGS))
  # The check refuses what a bad plan would give it.
  bad = _argv("fast_linear_schedule") + ["--num_warmup_steps=10"]
  with helpers.parsed_flags(run_pretraining.PROGRAM, bad[2:], run_pretraining.DEFAULTS):
    with pytest.raises(errors.UsageError, match="exclude each other"):
      run_pretraining.check_flags(flags.FLAGS, job_config.JobConfig.from_flags(flags.FLAGS))


def test_quality_original_runs_the_release_with_its_optimizer():
  original = _argv("original")
  assert original[1:5] == ["-m", "tests.reference.original_bert", "run_pretraining", "--"]
  assert "--input_file=/d/a.tfrecord,/d/b.tfrecord" in original
  # Its rate and warmup tuned on the corpus (quality_plan.ORIGINAL): 1e-3, 30% of 400 updates.
  for flag in ("--train_batch_size=64", "--num_train_steps=400", "--num_warmup_steps=120",
               "--save_checkpoints_steps=20", "--learning_rate=0.001", "--bert_config_file=c.json",
               "--max_predictions_per_seq=20", "--do_train=true"):
    assert flag in original
  assert not [a for a in original if "optimizer" in a or "precision" in a or "bf16" in a]


def test_quality_packed_records_keep_the_batch_in_sequences_by_hand():
  # The demo's records: 17891 sequences in 14460 rows, 1.2373 a row; 64 / 1.2373 = 51.73 -> 52.
  demo = quality_plan.Records("/p", (), 17891, 14460)
  assert demo.rows_per_update() == 52
  assert demo.sequences_per_update() == pytest.approx(52 * 17891 / 14460)
  assert quality_plan.Records("/d", (), 17891).sequences_per_update() == 64.0
  # 1.28 a row: exactly 50 rows; 1.5 a row: 42.67 -> 43; never an empty batch.
  assert quality_plan.Records("/p", (), 128, 100).rows_per_update() == 50
  assert quality_plan.Records("/p", (), 3, 2).rows_per_update() == 43
  assert quality_plan.Records("/p", (), 10**6, 1).rows_per_update() == 1
  argv = _argv("today", demo)
  assert "--train_batch_size=52" in argv and "--enable_packed_data_mode" in argv
  assert "--input_files_dir=/p" in argv


def test_quality_plan_budgets_and_single_pass_by_hand():
  # 600 s, 20 s of start-up, 2 updates/s: 0.95 x 580 x 2 = 1102; at least one per checkpoint.
  assert quality_plan.updates_in_budget(600, 20, 2.0) == 1102
  assert quality_plan.updates_in_budget(10, 20, 2.0, checkpoints=4) == 4
  rate = quality_plan.Rate(startup_s=20.0, updates_per_s=2.0)
  # B = 10 minutes: today's half is 300 s, 0.95 x 280 x 2 = 532 updates.
  assert quality_plan.job_updates(_variant("today"), 10.0, rate) == 532
  records = quality_plan.Records("/d", (), 100000)
  # 90% of 100,000 sequences at 64 an update: 1406.25 updates, / (0.95 x 2) s + 20 s.
  bound = quality_plan.pass_bound_minutes(rate, records)
  assert bound == pytest.approx((0.9 * 100000 / 64 / 1.9 + 20) / 60)
  updates = quality_plan.updates_in_budget(bound * 60, 20, 2.0)
  assert quality_plan.pass_fraction(updates, records) == pytest.approx(0.9, abs=64 / 100000.)
  quality_plan.check_single_pass({"original": (1562, records)})  # 99,968 sequences: one pass
  with pytest.raises(SystemExit, match=r"fast: 1563 updates read 100032 sequences, 1.00 passes"):
    quality_plan.check_single_pass({"original": (1000, records), "fast": (1563, records)})


def test_quality_plan_fits_the_total_and_counts_every_part():
  variants = quality_plan.variants()
  # Jobs: 3 x 1 + 3 x 1/2 + 3 x 1/2 + 6 x 1/2 = 9 B; 15 jobs x 20 checkpoints + the initial
  # weights, 2,000 sequences each; 9 checkpoints x 3 fine-tuning seeds = 27 runs two at a time
  # (14 rounds of 120 s).
  minutes = quality_plan.estimated_minutes(10.0, variants, 2000, 4.0, 120.0)
  evaluation = 301 * 2 * quality_plan.EVAL_SECONDS_PER_1000 / 60
  assert minutes == {"jobs": 90.0, "evaluation": round(evaluation, 1), "fine_tuning": 28.0,
                     "calibration": 4.0, "total": round(90.0 + evaluation + 28 + 4, 1)}
  assert quality_plan.estimated_minutes(10.0, variants, 2000, 4.0, 120.0, finetune_seeds=1)[
      "fine_tuning"] == 10.0  # 9 runs: 5 rounds
  budget = quality_plan.longest_budget(variants, 2000, 4.0, 120.0)
  assert quality_plan.estimated_minutes(budget, variants, 2000, 4.0, 120.0)["total"] == (
      pytest.approx(100.0, abs=0.1))
  assert quality_plan.longest_budget(variants, 2000, 4.0, 120.0, total=1000) == 30.0
  # 13 s start-up, 3 epochs of 1,700 at 170/s, 580 at 580/s.
  assert quality_plan.finetune_seconds(1700, 580, 3) == pytest.approx(13 + 30 + 1)


def test_quality_plan_takes_the_tighter_of_the_time_and_the_pass_bound():
  variants = quality_plan.variants()
  rates = {v.name: quality_plan.Rate(20.0, 2.0) for v in variants}

  def plan(sequences, argv=()):
    records = {v.name: quality_plan.Records("/d", (), sequences) for v in variants}
    args = quality.parse_args(["--output_dir=/o"] + list(argv))
    return quality.make_plan(args, variants, records, rates, 4.0, 2000, 120.0, 20)

  by_time = quality_plan.longest_budget(variants, 2000, 4.0, 120.0)
  large = plan(10**7)
  assert (large["budget_minutes"], large["budget_reason"]) == (round(by_time, 3),
                                                               "100-minute bound")
  assert large["estimated_minutes"]["total"] == pytest.approx(100, abs=0.2)
  # 40,000 sequences: the original may read 36,000, 562.5 updates at 1.9 a second after 20 s.
  small = plan(40000)
  assert small["budget_minutes"] == pytest.approx((36000 / 64 / 1.9 + 20) / 60, abs=1e-3)
  assert small["budget_minutes"] < by_time
  assert small["budget_reason"] == "the original reads 0.9 of the corpus"
  assert small["jobs"]["original"]["pass_fraction"] == pytest.approx(0.9, abs=64 / 40000.)
  assert small["jobs"]["fast"]["updates"] == quality_plan.updates_in_budget(
      small["budget_minutes"] * 60 / 2, 20, 2.0)
  fixed = plan(50000, ["--budget_minutes=5"])
  assert (fixed["budget_minutes"], fixed["budget_reason"]) == (5.0, "--budget_minutes")
  assert fixed["jobs"]["today"] == {"budget_minutes": 2.5, "seeds": 3, "updates": 247,
                                    "sequences_per_update": 64.0, "pass_fraction": 0.3162,
                                    "updates_per_s": 2.0, "startup_s": 20.0}


def test_quality_scores_every_checkpoint_on_the_same_evenly_spread_subset():
  records = {"input_ids": np.arange(10)[:, None] * np.ones((1, 3), np.int64),
             "masked_lm_weights": np.arange(10, dtype=np.float32)[:, None]}
  subset = quality.evaluation_subset(records, 4)
  # Indices 0, 3, 6, 9: linspace(0, 9, 4) = 0, 3, 6, 9.
  assert subset["input_ids"][:, 0].tolist() == [0, 3, 6, 9]
  assert subset["masked_lm_weights"][:, 0].tolist() == [0.0, 3.0, 6.0, 9.0]
  assert quality.evaluation_subset(records, 0) is records  # 0: all of them
  assert quality.evaluation_subset(records, 10) is records
  five = quality.evaluation_subset(records, 5)["input_ids"][:, 0].tolist()
  assert five == [0, 2, 4, 7, 9]  # 0, 2.25, 4.5, 6.75, 9 rounded half to even
  assert quality.parse_args(["--output_dir=/o"]).eval_sequences == 2000
  with pytest.raises(SystemExit):
    quality.parse_args(["--output_dir=/o", "--eval_sequences=-1"])


def test_quality_arguments():
  args = quality.parse_args(["--output_dir=/o", "--variants=fast, original,today"])
  assert [v.name for v in args.variants] == ["original", "today", "fast"]  # the plan's order
  assert [v.seeds for v in args.variants] == [3, 3, 3]
  quick = quality.parse_args(["--output_dir=/o", "--quick"])
  assert [v.name for v in quick.variants] == [v.name for v in quality_plan.variants()]
  assert {v.seeds for v in quick.variants} == {1}
  for bad in (["--budget_minutes=31"], ["--budget_minutes=0"], ["--variants=today,lamb_fp64"],
              ["--variants=today,fast"], ["--calibration_updates=5"]):
    with pytest.raises(SystemExit) as exit_info:
      quality.parse_args(["--output_dir=/o"] + bad)
    assert exit_info.value.code == 2


def test_quality_set_and_repeats_change_only_what_they_name():
  args = quality.parse_args(["--output_dir=/o", "--variants=original,fast,fast_beta2",
                             "--set", "fast.learning_rate=0.016", "--set=fast.beta2=none",
                             "--set", "original.learning_rate=1e-3", "--set=fast.packed=false",
                             "--repeats=2"])
  original, fast, ablation = args.variants
  assert (original.learning_rate, fast.learning_rate, fast.beta2, fast.packed) == (
      1e-3, 0.016, None, False)
  assert [v.seeds for v in args.variants] == [2, 2, 2]
  # Everything else as the plan has it; the ablation is not fast's copy.
  assert dataclasses.replace(fast, learning_rate=8e-3, beta2=0.98, packed=True,
                             seeds=3) == quality_plan.FAST
  assert ablation == dataclasses.replace(quality_plan.variants()[-1], seeds=2)
  argv = quality_plan.job_command(fast, quality_plan.Records("/r", ("/r/a",), 640), "c.json",
                                  "v.txt", "/out", 100)
  assert "--learning_rate=0.016" in argv and not [a for a in argv if "beta2" in a]
  assert "--enable_packed_data_mode" not in argv
  for bad, says in [("fast.learning_rate", "expected <variant>.<field>=<value>"),
                    ("today.dropout=0", "with a variant of original, fast, fast_beta2"),
                    ("fast.name=x", "fast has no field 'name'"),
                    ("original.optimizer=lamb", "expected one of learning_rate, "
                                                "warmup_fraction, seeds"),
                    ("fast.optimizer=sgd", "must be one of adam, lamb, got 'sgd'"),
                    ("fast.packed=yes", "must be true or false, got 'yes'"),
                    ("fast.seeds=0", "must be an integer >= 1, got '0'"),
                    ("fast.dropout=-0.1", "must be a number >= 0 or none, got '-0.1'"),
                    ("fast.learning_rate=none", "must be a number >= 0, got 'none'")]:
    with pytest.raises(ValueError, match=re.escape(says)):
      quality_plan.with_settings(quality.parse_args(
          ["--output_dir=/o", "--variants=original,fast,fast_beta2"]).variants, [bad])
  for bad in (["--set=fast.seeds=x"], ["--repeats=0"]):
    with pytest.raises(SystemExit) as exit_info:
      quality.parse_args(["--output_dir=/o"] + bad)
    assert exit_info.value.code == 2


def _write_records(path, count):
  with tf.io.TFRecordWriter(str(path)) as writer:
    for i in range(count):
      writer.write(b"record %d" % i)


def test_quality_packed_data_is_packed_once_and_remade_when_stale(monkeypatch, tmp_path):
  inputs = tmp_path / "train"
  inputs.mkdir()
  files = [str(inputs / "a.tfrecord"), str(inputs / "b.tfrecord")]
  _write_records(files[0], 5)
  _write_records(files[1], 4)
  calls = []

  def run_packer(input_files, train_dir):  # 2 rows a file, as the packer names its outputs
    calls.append(train_dir)
    os.makedirs(train_dir)
    outputs = [os.path.join(train_dir, os.path.basename(p)) for p in input_files]
    for path in outputs:
      _write_records(path, 2)
    return outputs

  monkeypatch.setattr(quality_packed, "run_packer", run_packer)
  out = tmp_path / "out"
  first = quality_packed.prepare(files, str(out))
  assert (first.train_dir, first.sequences, first.rows) == (str(out / "packed_train"), 9, 4)
  assert quality_packed.prepare(files, str(out)) == first and len(calls) == 1  # reused
  (out / "packed_train" / "b.tfrecord.partial").write_bytes(b"")  # an interrupted packing
  assert quality_packed.prepare(files, str(out)) == first and len(calls) == 2
  assert not (out / "packed_train" / "b.tfrecord.partial").exists()
  _write_records(files[1], 6)  # the inputs changed: packed again and counted again
  assert quality_packed.prepare(files, str(out)).sequences == 11 and len(calls) == 3
  os.remove(str(out / "packed_train" / "a.tfrecord"))  # an output gone
  assert quality_packed.prepare(files, str(out)).rows == 4 and len(calls) == 4
  other = quality_packed.prepare(files, str(out), "packed_dynamic")  # another name: its own
  assert other.train_dir == str(out / "packed_dynamic") and len(calls) == 5
  assert sorted(os.listdir(str(out))) == ["packed_dynamic", "packed_dynamic.json", "packed_train",
                                          "packed_train.json"]


def test_quality_each_variant_reads_its_records_packed_once(monkeypatch):
  data = quality.QualityData("v.txt", ("/c/train/a.tfrecord", "/c/train/b.tfrecord"),
                             ("/u/train/a.tfrecord",), ("/c/eval/a.tfrecord",), "/task", 40.0)
  monkeypatch.setattr(quality_packed, "count_records", lambda files: 1000 * len(files))
  packed = []

  def prepare(files, output_dir, name):
    packed.append((files, name))
    return quality_plan.Records(output_dir + "/" + name, (), 1000 * len(files), 800)

  monkeypatch.setattr(quality_packed, "prepare", prepare)
  variants = quality_plan.variants()
  records = quality.records_of(variants, data, "/out")
  assert records["original"] == quality_plan.Records("/c/train", data.train_files, 2000)
  assert records["today"] == records["fast_fixed_masks"] == quality_plan.Records(
      "/out/packed_train", (), 2000, 800)
  assert records["fast"] == records["fast_beta2"] == quality_plan.Records(
      "/out/packed_dynamic", (), 1000, 800)
  assert packed == [(list(data.train_files), "packed_train"),
                    (list(data.dynamic_train_files), "packed_dynamic")]
  without = dataclasses.replace(data, dynamic_train_files=())
  with pytest.raises(SystemExit, match="fast: the corpus has no training records without masks"):
    quality.records_of(variants, without, "/out")
  assert sorted(quality.records_of(variants[:2], without, "/out")) == ["original", "today"]


def _metrics(loss):
  return {"masked_lm_loss": loss, "masked_lm_accuracy": 1.0 / loss}


def test_quality_summary_targets_the_originals_median_final_loss():
  variants = [dataclasses.replace(_variant("original"), seeds=3),
              dataclasses.replace(_variant("fast"), seeds=2), _variant("fast_beta2")]
  losses = {"original_seed1": [7.0, 6.0, 5.0], "original_seed2": [7.0, 6.2, 5.2],
            "original_seed3": [7.0, 5.8, 4.8], "fast_seed1": [6.0, 5.0, 4.5],
            "fast_seed2": [6.0, 5.4, 4.9], "fast_beta2_seed1": [6.0, 5.5, 5.1]}
  minutes = {"original": [1.0, 2.0, 4.0], "fast": [0.5, 1.0, 1.5], "fast_beta2": [0.5, 1.0, 1.5]}
  # The update of the checkpoint each point scores.
  updates = {"original": [100, 200, 400], "fast": [50, 100, 150], "fast_beta2": [50, 100, 150]}
  jobs = [{"name": name, "variant": name.rsplit("_seed", 1)[0]} for name in losses]
  evaluations = {name: [(m, u, _metrics(l)) for m, u, l in zip(
      minutes[name.rsplit("_seed", 1)[0]], updates[name.rsplit("_seed", 1)[0]], series)]
                 for name, series in losses.items()}
  plan = {"jobs": {"original": {"budget_minutes": 4.0}, "fast": {"budget_minutes": 1.0},
                   "fast_beta2": {"budget_minutes": 1.0}}}
  result = quality_report.summarize(variants, jobs, evaluations, plan)
  assert result["target_loss"] == 5.0  # the median of 5.0, 5.2 and 4.8
  # original_seed1 reaches 5.0 at its end; seed2 never; seed3 between 6.2 -> 4.8 ... 5.8 -> 4.8.
  assert result["minutes_to_target_loss"]["original_seed1"] == 4.0
  assert result["minutes_to_target_loss"]["original_seed2"] is None
  assert result["minutes_to_target_loss"]["original_seed3"] == pytest.approx(2 + 2 * 0.8 / 1.0,
                                                                             abs=1e-3)
  assert result["minutes_to_target_loss"]["fast_seed1"] == 1.0
  assert result["minutes_to_target_loss"]["fast_seed2"] == pytest.approx(1 + 0.5 * 0.4 / 0.5)
  assert result["minutes_to_target_loss"]["fast_beta2_seed1"] is None
  # The same crossings in updates: seed3 at 200 + 0.8 x 200, fast_seed2 at 100 + 0.8 x 50.
  assert result["updates_to_target_loss"] == {
      "original_seed1": 400, "original_seed2": None, "original_seed3": pytest.approx(360),
      "fast_seed1": 100, "fast_seed2": pytest.approx(140), "fast_beta2_seed1": None}
  assert result["variants"]["fast"]["updates_to_target"]["median"] == pytest.approx(120)
  assert result["variants"]["original"]["updates_to_target"]["max"] is None
  fast = result["variants"]["fast"]
  assert fast["final_loss"] == {"median": 4.7, "min": 4.5, "max": 4.9, "values": [4.5, 4.9]}
  # The original's 3.6, 4.0 and never (median 4.0, the range's end open); fast's 1.0 and 1.4
  # (median 1.2).
  assert result["variants"]["original"]["minutes_to_target"]["median"] == 4.0
  assert result["speedup"] == {"median": round(4.0 / 1.2, 2), "min": round(3.6 / 1.4, 2),
                               "max": None}
  assert result["speedups"]["fast_beta2"] is None
  assert result["ablations"] == [{"variant": "fast_beta2", "lever": "beta2 0.98",
                                  "minutes_to_target": None, "minutes_vs_fast": None,
                                  "final_loss": 5.1, "final_loss_vs_fast": 0.4}]
  assert result["still_falling"]["original_seed1"] == {"falling": True, "drop": 0.1667}
  assert result["curves"]["fast_seed2"] == [[0.5, 6.0], [1.0, 5.4], [1.5, 4.9]]


def test_quality_finals_are_fine_tuned_with_every_seed_each(monkeypatch, tmp_path):
  task = tmp_path / "task"
  task.mkdir()
  (task / "train.tsv").write_text("label\ttext\na\tx\nb\ty\na\tz\n")
  (task / "dev.tsv").write_text("label\ttext\na\tw\n")
  assert quality_finetune.task_examples(str(task)) == (3, 1)
  seen = {}
  accuracies = {"original_seed1_finetune1": 0.5, "original_seed1_finetune2": 0.6,
                "original_seed2_finetune1": 0.7, "original_seed2_finetune2": 0.8,
                "fast_seed1_finetune1": 0.9, "fast_seed1_finetune2": 0.3}

  def run_finetunes(runs, work_dir):
    seen.update(runs)
    return {name: accuracies[name] for name in runs}

  monkeypatch.setattr(quality_finetune, "run_finetunes", run_finetunes)
  result = quality_finetune.finetune_finals(
      {"original": [("original_seed1", "/k/o1"), ("original_seed2", "/k/o2")],
       "fast": [("fast_seed1", "/k/f1")]}, str(tmp_path),
      str(task), "v.txt", "c.json", epochs=2, seeds=2)
  assert sorted(seen) == sorted(accuracies)
  # The mean and range over all of a variant's runs; each checkpoint's mean over its seeds.
  assert result["original"] == {"mean": 0.65, "min": 0.5, "max": 0.8,
                                "values": [0.5, 0.6, 0.7, 0.8],
                                "checkpoints": {"original_seed1": 0.55, "original_seed2": 0.75}}
  assert result["fast"]["mean"] == 0.6 and result["fast"]["checkpoints"] == {"fast_seed1": 0.6}
  # Each run starts from its job's checkpoint, with its own fine-tuning seed: the same seeds
  # for every checkpoint.
  assert "--init_checkpoint=/k/o2" in seen["original_seed2_finetune1"]
  assert "--seed=2" in seen["original_seed1_finetune2"] and "--seed=1" in seen[
      "original_seed2_finetune1"]
  assert "--seed=2" in seen["fast_seed1_finetune2"]
  assert seen["fast_seed1_finetune1"][-1] == "--num_train_epochs=2"


def test_quality_tables_print_the_variants_and_the_ablations(capsys):
  spread = {"median": 2.0, "min": 1.5, "max": 2.5}
  # One of the original's repeats never reached the target: its range and fast's ratio open.
  open_spread = {"median": 8.2, "min": 8.0, "max": None}
  final = {"median": 4.9, "min": 4.8, "max": 5.0}
  result = {"target_loss": 5.0, "speedups": {"fast": {"median": 4.1, "min": 3.2, "max": None}},
            "final_dev_accuracy": {"fast": {"mean": 0.6, "min": 0.55, "max": 0.65}},
            "variants": {"original": {"budget_minutes": 9.0, "minutes_to_target": open_spread,
                                      "updates_to_target": {"median": None},
                                      "final_loss": final},
                         "fast": {"budget_minutes": 2.5, "minutes_to_target": spread,
                                  "updates_to_target": {"median": 612.4},
                                  "final_loss": final}},
            "ablations": [{"variant": "fast_dropout", "lever": "no pretraining dropout",
                           "minutes_to_target": 2.4, "minutes_vs_fast": 0.4,
                           "final_loss": 4.95, "final_loss_vs_fast": 0.05}],
            "still_falling": {"fast_seed1": {"falling": False, "drop": 0.002}}}
  quality_report.print_tables(result)
  lines = capsys.readouterr().out.splitlines()
  assert ("| fast | 2.50 | 2.00 (1.50-2.50) | 4.10 (3.20-open) | 612 | 4.900 (4.800-5.000) | "
          "0.600 (0.550-0.650) |") in lines
  assert ("| original | 9.00 | 8.20 (8.00-not reached) |  | not reached | 4.900 (4.800-5.000) "
          "|  |" in lines)
  assert "| no pretraining dropout | fast_dropout | 2.40 | +0.40 | 4.950 | +0.050 |" in lines
  assert ("Curves still falling in their last quarter (>= 1% of the loss): 0 of 1; not: "
          "fast_seed1") in lines
