"""Time to quality: how soon each code's pretraining reaches the loss the original release ends
at, on a corpus no job reads twice.

  PY=$(make -s python-path | tail -n1)
  $PY bench/quality.py --output_dir=/tmp/quality --figure=/tmp/quality/curves.png \\
      --result_json=/tmp/quality/result.json

The corpus: bench/quality_corpus.py's (docs/DATA.md, "The quality corpus": the prose of Debian's
Python, Linux and LLVM documentation, one copy of its training split at seq 128, the held-out
split by document with fixed 15% masks, a classification task from documents pretraining never
reads), built once with fixed masks and once without (the same vocabulary), and cached. BERT-tiny
(bert_configs/tiny.json with the corpus's vocabulary), batch 64, sequence 128, one process per
job, one job after the other. The variants (bench/quality_plan.py):

* `original`: the original release's `run_pretraining.py` (PyPI bert-tensorflow, through
  tests/reference/original_bert.py; fp32, AdamWeightDecay 1e-3 with 30% warmup, its rate and
  warmup tuned on this corpus), the full budget B, 3 repeats;
* `today`: ours as a user runs it today: LAMB 8e-3 (NVIDIA's recipe), packed rows, the precision
  `--precision=auto` picks, fixed masks, dropout 0.1, the next-sentence loss, the recipe
  schedule; B/2, 3 repeats;
* `fast`: today with the budget recipes' levers: records without masks, masks drawn anew each
  epoch at their 30% (MosaicBERT's; the fixed records' 15% stays the evaluation's rate), no
  pretraining dropout, no next-sentence loss, Adam's beta2 0.98; LAMB's own schedule ending at
  the job's end (their linear decay to zero ended higher and flatter here); B/2, 3 repeats (its
  schedule must outlast the minutes it needs to reach the target);
* one ablation per lever, `fast` with that lever as today has it (a 15% masking rate among
  them), and one with linear decay to zero (6% warmup) in place of LAMB's schedule; B/2, one
  each.

The repeats run in rounds: every variant's first, then every variant's second, and so on.

Each job's schedule ends at its own budget: a short calibration job of the same cost (its first
third left out) measures start-up and updates/s first, then each finished job's checkpoint times
give the rate the next job of its cost is planned at; 5% is left for checkpoints and the ends.
Each job saves 20 checkpoints, kept with the time each was written (seconds since the job's
start, the start-up included); then, in one process and one graph, every checkpoint is scored on
the same 2,000 held-out sequences (fixed 15% masks) spread evenly over the held-out split
(--eval_sequences; 0: all of them): masked-LM loss and accuracy.

The target is the original's final evaluation masked-LM loss, the median of its repeats; minutes
to it are interpolated between checkpoints at the first crossing; the speed-up is the original's
median over a variant's (and the extreme ratios of one repeat to another). A repeat that never
reaches the target ran its whole budget without it: it ranks after every repeat that did, in the
median and at the range's open end (bench/quality_report.py). A curve "still falls"
when a least-squares line through its last quarter drops by at least 1% of the loss. The final
checkpoints of original, today and fast are fine-tuned on the corpus's classification task, each
with the same 3 seeds (bench/quality_finetune.py): dev accuracy, mean and range over the 9 runs
of a variant, and each checkpoint's mean.

The plan. No job trains a sequence twice: each reads at most 90% of its training split (the
output gives each job's sequences and fraction; the plan exits naming a job that would read more).
The whole comparison fits in 100 minutes on 2 cores: the jobs take 3 B + 3 B/2 + 3 B/2 + 6 B/2 =
9 B, and B is the largest budget (at most 30 minutes) for which the jobs, the calibrations (as
measured), the evaluations (about 1.7 s per 1,000 held-out sequences and checkpoint) and the 27
fine-tuning runs (about 50 s each, two at a time) are estimated at 100 minutes, and at which
the original still reads under 90% of the corpus. The plan is printed with its estimated minutes
before the first job; --budget_minutes fixes B instead.

--quick: the corpus's small build (bench/data/quality_corpus), one repeat each, 2 checkpoints and
2 or 3 updates per job (no calibration), two jobs at a time, one fine-tuning epoch and 2 seeds:
the same code in a minute or two, for the tests; its figures mean nothing.

An exploration (a learning rate, a lever's setting) runs the same code on changed variants:
`--set fast.learning_rate=0.016` (any field of bench/quality_plan.py's Variant; repeatable) and
`--repeats 1`; the output's variant_settings records what ran.

The last line is one JSON object: curves ({job: [[minutes, loss], ...]}, a job named
<variant>_seed<n>), accuracy_curves, target_loss, minutes_to_target_loss ({job: minutes}),
updates_to_target_loss ({job: updates}: free of the box's drift, they compare jobs of one cost),
variants (per variant: its budget, minutes and updates to target, final loss and accuracy,
median and range),
speedup (fast's) and speedups (every variant's), still_falling (per job), final_dev_accuracy,
ablations, jobs (updates, the rate they were planned from, sequences read, fraction of the split),
corpus, plan, variant_settings, cpu.
"""

import argparse
import concurrent.futures
import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import precision  # noqa: E402
from bench import quality_checkpoints  # noqa: E402
from bench import quality_finetune  # noqa: E402
from bench import quality_packed  # noqa: E402
from bench import quality_plan  # noqa: E402
from bench import quality_report  # noqa: E402

# Held-out sequences each checkpoint is scored on: the 301 checkpoints of the comparison on all of
# the corpus's 6,887 would take about an hour of the 100 minutes (bench/quality_plan.py's estimate).
EVAL_SEQUENCES = 2000
# Updates of a calibration job; the first third is left out of its rate (start-up effects).
CALIBRATION_UPDATES = 60
# A job the calibration misjudged is stopped this far past its budget: OVERRUN_FACTOR x budget +
# the slack (--quick: its jobs are mostly start-up, which a loaded box can stretch to minutes).
OVERRUN_FACTOR = 1.15
OVERRUN_SLACK_SECONDS = 60
QUICK_OVERRUN_SLACK_SECONDS = 600


# --quick: the original's budget in minutes at a nominal 1 update/s and no start-up (3 updates for
# the original, 192 of the small corpus's 252 training sequences; 2, the fewest, for the others),
# 2 checkpoints per job, one fine-tuning epoch.
QUICK_BUDGET_MINUTES = 0.06
QUICK_RATE = quality_plan.Rate(startup_s=0.0, updates_per_s=1.0)
QUICK_CHECKPOINTS = 2
# Two fine-tuning seeds a checkpoint, not 3: the spread over seeds is computed all the same.
QUICK_FINETUNE_SEEDS = 2


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python bench/quality.py",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--output_dir", required=True,
                      help="jobs, checkpoints, packed records, fine-tuning runs")
  parser.add_argument("--quick", action="store_true",
                      help="the tiny corpus and a few updates per job, for the tests")
  parser.add_argument("--budget_minutes", type=float, default=None,
                      help="the original's budget B, in (0, 30] (default: planned)")
  parser.add_argument("--variants", default=",".join(v.name for v in quality_plan.variants()),
                      help="comma-separated subset of the variants (default: all)")
  parser.add_argument("--eval_sequences", type=int, default=EVAL_SEQUENCES,
                      help="held-out sequences every checkpoint is scored on, spread evenly over "
                           "the held-out split (0: all of them)")
  parser.add_argument("--calibration_updates", type=int, default=CALIBRATION_UPDATES,
                      help="updates of each calibration job (its first third is left out)")
  parser.add_argument("--set", action="append", default=[], dest="settings",
                      metavar="VARIANT.FIELD=VALUE",
                      help="changes one field of a variant (bench/quality_plan.py's Variant), "
                           "e.g. fast.learning_rate=0.016; repeatable")
  parser.add_argument("--repeats", type=int, default=None,
                      help="repeats of every variant (default: 3 for original, today and fast, "
                           "1 for each ablation)")
  parser.add_argument("--figure", default=None, help="PNG: evaluation loss against minutes")
  parser.add_argument("--result_json", default=None,
                      help="also write the last line's JSON object to this file")
  args = parser.parse_args(argv)
  if args.budget_minutes is not None and not 0 < args.budget_minutes <= 30:
    parser.error("--budget_minutes must be in (0, 30], got %g" % args.budget_minutes)
  if args.eval_sequences < 0:
    parser.error("--eval_sequences must be >= 0 (0: all), got %d" % args.eval_sequences)
  if args.calibration_updates < 6:
    parser.error("--calibration_updates must be >= 6 (its first third is left out of the rate), "
                 "got %d" % args.calibration_updates)
  known = {v.name: v for v in quality_plan.variants()}
  names = [v.strip() for v in args.variants.split(",") if v.strip()]
  for name in names:
    if name not in known:
      parser.error("--variants: unknown '%s' (expected some of %s)" % (name, ", ".join(known)))
  if "original" not in names:
    parser.error("--variants must include original (its final loss is the target)")
  if args.repeats is not None and args.repeats < 1:
    parser.error("--repeats must be >= 1, got %d" % args.repeats)
  try:
    args.variants = quality_plan.with_settings([known[name] for name in known if name in names],
                                               args.settings, 1 if args.quick else args.repeats)
  except ValueError as error:
    parser.error(str(error))
  return args


@dataclasses.dataclass(frozen=True)
class QualityData:
  """The corpus a comparison reads: vocab_file; train_files (fixed 15% masks) and
  dynamic_train_files (without masks; empty when there are none); eval_files (held-out, fixed
  masks); task_dir (the classification task); text_mb (its text, for the record)."""
  vocab_file: str
  train_files: tuple
  dynamic_train_files: tuple
  eval_files: tuple
  task_dir: str
  text_mb: float


def corpus_data(quick):
  """The quality corpus (bench/quality_corpus.py; its small one with `quick`), found in its cache
  or built, with fixed masks and without: a QualityData. Exits when the two builds' vocabularies
  differ (every job is scored on the same held-out records)."""
  from bench import quality_corpus  # pylint: disable=g-import-not-at-top
  settings = quality_corpus.QUICK_SETTINGS if quick else quality_corpus.Settings()
  fixed = quality_corpus.build(settings)
  dynamic = quality_corpus.build(dataclasses.replace(settings, dynamic_masking=True))
  with open(fixed.vocab_file, "rb") as a, open(dynamic.vocab_file, "rb") as b:
    if a.read() != b.read():
      raise SystemExit("the corpus's two builds have different vocabularies: %s and %s"
                       % (fixed.vocab_file, dynamic.vocab_file))
  print(fixed.figures(), flush=True)

  def files(directory):
    return tuple(sorted(glob.glob(os.path.join(directory, "*.tfrecord"))))

  return QualityData(fixed.vocab_file, files(fixed.train_record_dir),
                     files(dynamic.train_record_dir), files(fixed.eval_record_dir),
                     fixed.task_dir, round(fixed.text_bytes / 1e6, 2))


def records_of(variants, data, output_dir):
  """{variant name: quality_plan.Records} of the training records each of `variants` reads: the
  fixed or dynamic files of `data` (QualityData), packed once under `output_dir` for a packed
  variant. Exits naming a variant whose records the corpus lacks."""
  plain = {}
  for dynamic, files in ((False, data.train_files), (True, data.dynamic_train_files)):
    if files and any(v.dynamic_masks == dynamic for v in variants):
      plain[dynamic] = quality_plan.Records(os.path.dirname(files[0]), files,
                                            quality_packed.count_records(files))
  chosen, packed = {}, {}
  for variant in variants:
    if variant.dynamic_masks not in plain:
      raise SystemExit("%s: the corpus has no training records %s masks" % (
          variant.name, "without" if variant.dynamic_masks else "with"))
    records = plain[variant.dynamic_masks]
    if variant.packed:
      key = variant.dynamic_masks
      if key not in packed:
        packed[key] = quality_packed.prepare(list(records.files), output_dir,
                                             "packed_dynamic" if key else "packed_train")
      records = packed[key]
    chosen[variant.name] = records
  return chosen


def calibrate(variant, records, config_path, vocab_file, work_dir, updates):
  """quality_plan.Rate of `variant` on `records`: a job of `updates` updates, measured as
  bench/precision.py measures (the median per-update rate after the first third)."""
  out_dir = os.path.join(work_dir, "calibration_%s" % variant.name)
  argv = quality_plan.job_command(variant, records, config_path, vocab_file, out_dir, updates,
                                  checkpoints=1)
  start, stderr_lines, _ = precision.run_job(argv, {})
  figures = argparse.Namespace(batch=quality_plan.BATCH, warmup=updates // 3)
  seq_per_s, startup = precision.job_figures(variant.program, figures, start, stderr_lines,
                                             out_dir)
  shutil.rmtree(out_dir, ignore_errors=True)
  # The original's log counts updates of BATCH sequences; ours counts a packed row's sequences.
  per_update = (quality_plan.BATCH if variant.program == "original"
                else records.sequences_per_update())
  return quality_plan.Rate(startup, seq_per_s / per_update)


def calibrate_all(variants, records, config_path, vocab_file, work_dir, updates):
  """({variant name: Rate}, minutes the calibrations took): one calibration per cost key."""
  start, by_key, rates = time.time(), {}, {}
  for variant in variants:
    key = variant.cost_key()
    if key not in by_key:
      by_key[key] = calibrate(variant, records[variant.name], config_path, vocab_file, work_dir,
                              updates)
      print("%s: start-up %.1f s, %.2f updates/s" % (variant.name, by_key[key].startup_s,
                                                     by_key[key].updates_per_s), flush=True)
    rates[variant.name] = by_key[key]
  return rates, (time.time() - start) / 60.0


def make_plan(args, variants, records, rates, calibration_minutes, eval_sequences,
              finetune_run_seconds, checkpoints):
  """The plan (dict): the original's budget B and why, each variant's budget, updates, sequences
  per update and fraction of its split, and the estimated minutes (`finetune_run_seconds`: one
  fine-tuning run's estimate) and the fine-tuning seeds of each final checkpoint."""
  finetune_seeds = QUICK_FINETUNE_SEEDS if args.quick else quality_plan.FINETUNE_SEEDS
  if args.quick:
    budget, reason = QUICK_BUDGET_MINUTES, "--quick"
  elif args.budget_minutes is not None:
    budget, reason = args.budget_minutes, "--budget_minutes"
  else:
    by_time = quality_plan.longest_budget(variants, eval_sequences, calibration_minutes,
                                          finetune_run_seconds, checkpoints=checkpoints,
                                          finetune_seeds=finetune_seeds)
    by_pass = quality_plan.pass_bound_minutes(rates["original"], records["original"])
    budget = min(by_time, by_pass)
    reason = ("%g-minute bound" % quality_plan.TOTAL_MINUTES if by_time <= by_pass
              else "the original reads %g of the corpus" % quality_plan.PASS_LIMIT)
  jobs = {}
  for variant in variants:
    updates = quality_plan.job_updates(variant, budget, rates[variant.name], checkpoints)
    jobs[variant.name] = {
        "budget_minutes": round(variant.budget_fraction * budget, 3), "seeds": variant.seeds,
        "updates": updates,
        "sequences_per_update": round(records[variant.name].sequences_per_update(), 2),
        "pass_fraction": round(quality_plan.pass_fraction(updates, records[variant.name]), 4),
        "updates_per_s": round(rates[variant.name].updates_per_s, 3),
        "startup_s": round(rates[variant.name].startup_s, 1)}
  return {"budget_minutes": round(budget, 3), "budget_reason": reason, "jobs": jobs,
          "checkpoints_per_job": checkpoints, "finetune_seeds": finetune_seeds,
          "overrun_slack_s": QUICK_OVERRUN_SLACK_SECONDS if args.quick else OVERRUN_SLACK_SECONDS,
          "estimated_minutes": quality_plan.estimated_minutes(
              budget, variants, eval_sequences, calibration_minutes, finetune_run_seconds,
              checkpoints, finetune_seeds=finetune_seeds)}


def run_job(variant, seed, records, config_path, vocab_file, work_dir, plan, replanned=None):
  """Runs one repeat of `variant` as `plan` says, keeping its checkpoints with their times;
  `replanned`: (updates, the job whose rate they come from) instead of the plan's updates.

  Returns:
    dict: name (<variant>_seed<seed>), variant, seed, updates, planned_from (the calibration or
    a job), sequences_read, pass_fraction, seconds (its wall time), stopped_at_limit, checkpoints
    {update: seconds since its start}, keep_dir.
  """
  name = "%s_seed%d" % (variant.name, seed)
  planned = dict(plan["jobs"][variant.name])
  planned_from = "calibration"
  if replanned is not None:
    planned["updates"], planned_from = replanned
  job_dir = os.path.join(work_dir, name)
  keep_dir = os.path.join(work_dir, name + "_checkpoints")
  for path in (job_dir, keep_dir):
    shutil.rmtree(path, ignore_errors=True)
  argv = quality_plan.job_command(variant, records, config_path, vocab_file, job_dir,
                                  planned["updates"], plan["checkpoints_per_job"])
  print("%s: %d updates in %.2f minutes (the rate of %s)" % (
      name, planned["updates"], planned["budget_minutes"], planned_from), flush=True)
  log_path = os.path.join(work_dir, name + ".log")
  start = time.time()
  keeper = quality_checkpoints.CheckpointKeeper(job_dir, keep_dir, start)
  keeper.start()
  with open(log_path, "w") as log:
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
      returncode = proc.wait(timeout=planned["budget_minutes"] * 60 * OVERRUN_FACTOR
                             + plan["overrun_slack_s"])
      stopped = False
    except subprocess.TimeoutExpired:
      proc.kill()
      returncode = proc.wait()
      stopped = True
  seconds = time.time() - start
  keeper.stop()
  if returncode != 0 and not stopped:
    with open(log_path) as f:
      tail = f.read()[-4000:]
    raise SystemExit("%s: the job failed (%d): %s\n%s" % (name, returncode, " ".join(argv), tail))
  if not keeper.kept:
    raise SystemExit("%s: the job kept no checkpoint: see %s" % (name, log_path))
  final = max(keeper.kept)
  return {"name": name, "variant": variant.name, "seed": seed, "updates": final,
          "planned_from": planned_from,
          "sequences_read": int(round(final * records.sequences_per_update())),
          "pass_fraction": round(quality_plan.pass_fraction(final, records), 4),
          "seconds": round(seconds, 1), "stopped_at_limit": stopped,
          "checkpoints": dict(sorted(keeper.kept.items())), "keep_dir": keep_dir}


def run_all(variants, records, config_path, vocab_file, work_dir, plan, parallel):
  """Every repeat of every variant, `parallel` at a time; the jobs' dicts in order. The repeats
  run in rounds, each variant's first, then each one's second, and so on, so that a slow spell
  of the box does not fall on one variant's repeats alone (run variant by variant, the third
  full run's original ran 17-30% under its calibrated rate, fast 4-8%; in rounds, the fourth's
  original 4-7%, fast 16-19%: rounds spread the drift, they do not even it out). One
  after the other (`parallel` 1), a job's updates come from the rate the last finished job of
  its cost ran at (quality_plan.measured_rate), the calibration's only until one has."""
  runs = [(v, seed) for seed in range(1, max(v.seeds for v in variants) + 1)
          for v in variants if seed <= v.seeds]
  if parallel == 1:
    jobs, measured = [], {}
    for variant, seed in runs:
      replanned = None
      if variant.cost_key() in measured:
        source, rate = measured[variant.cost_key()]
        replanned = (quality_plan.replanned_updates(
            variant, plan["budget_minutes"], rate, records[variant.name],
            plan["checkpoints_per_job"]), source)
      jobs.append(run_job(variant, seed, records[variant.name], config_path, vocab_file,
                          work_dir, plan, replanned))
      rate = quality_plan.measured_rate(jobs[-1]["checkpoints"])
      if rate is not None:
        measured[variant.cost_key()] = (jobs[-1]["name"], rate)
    return jobs
  with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
    return list(pool.map(lambda run: run_job(run[0], run[1], records[run[0].name], config_path,
                                             vocab_file, work_dir, plan), runs))


def evaluation_subset(eval_records, count):
  """`count` of the held-out `eval_records` (dict name -> array [records, ...]) spread evenly
  over them, first and last included, in order (every one when they are fewer or `count` is 0):
  every checkpoint of every job is scored on the same ones."""
  total = len(eval_records["input_ids"])
  if not count or total <= count:
    return eval_records
  import numpy as np  # pylint: disable=g-import-not-at-top
  chosen = np.round(np.linspace(0, total - 1, count)).astype(np.int64)
  return {name: values[chosen] for name, values in eval_records.items()}


def evaluate_jobs(jobs, config, eval_records):
  """({job name: [(minutes, update, metrics)] in time order}, the random initial weights'
  metrics): every kept checkpoint after the first update (the original also saves its initial
  weights) scored on `eval_records` in one graph."""
  from utils.model import evaluation  # pylint: disable=g-import-not-at-top
  points = [(job["name"], seconds / 60.0, u,
             os.path.join(job["keep_dir"], "model.ckpt-%d" % u))
            for job in jobs for u, seconds in sorted(job["checkpoints"].items()) if u > 0]
  metrics = evaluation.evaluate_checkpoints(config, eval_records,
                                            [path for _, _, _, path in points] + [None])
  result = {job["name"]: [] for job in jobs}
  metrics = [{key: float(value) for key, value in values.items()} for values in metrics]
  for (name, minutes, update, _), values in zip(points, metrics):
    result[name].append((minutes, update, values))
  return result, metrics[-1]


def main(argv=None):
  args = parse_args(argv)
  import modeling  # pylint: disable=g-import-not-at-top
  from bench import convergence  # pylint: disable=g-import-not-at-top
  from utils.model import evaluation  # pylint: disable=g-import-not-at-top
  from utils.runtime import cpu  # pylint: disable=g-import-not-at-top
  os.makedirs(args.output_dir, exist_ok=True)
  data = corpus_data(args.quick)
  config_path = os.path.join(args.output_dir, "bert_config.json")
  convergence.tiny_config(data.vocab_file, config_path)
  variants = args.variants
  records = records_of(variants, data, args.output_dir)
  eval_records = evaluation.read_pretraining_records(
      list(data.eval_files), quality_plan.MAX_SEQ_LENGTH, quality_plan.MAX_PREDICTIONS)
  held_out = len(eval_records["input_ids"])
  eval_records = evaluation_subset(eval_records, args.eval_sequences)
  eval_sequences = len(eval_records["input_ids"])
  if args.quick:
    rates, calibration_minutes = {v.name: QUICK_RATE for v in variants}, 0.0
    checkpoints = QUICK_CHECKPOINTS
  else:
    rates, calibration_minutes = calibrate_all(variants, records, config_path, data.vocab_file,
                                               args.output_dir, args.calibration_updates)
    checkpoints = quality_plan.CHECKPOINTS_PER_JOB
  epochs = 1 if args.quick else quality_finetune.EPOCHS
  finetune_run_seconds = quality_plan.finetune_seconds(
      *quality_finetune.task_examples(data.task_dir), epochs)
  plan = make_plan(args, variants, records, rates, calibration_minutes, eval_sequences,
                   finetune_run_seconds, checkpoints)
  quality_report.print_plan(plan)
  quality_plan.check_single_pass({name: (job["updates"], records[name])
                                  for name, job in plan["jobs"].items()})
  jobs = run_all(variants, records, config_path, data.vocab_file, args.output_dir, plan,
                 parallel=2 if args.quick else 1)
  evaluations, initial = evaluate_jobs(jobs, modeling.BertConfig.from_json_file(config_path),
                                       eval_records)
  result = quality_report.summarize(variants, jobs, evaluations, plan)
  finals = {v.name: [(job["name"], os.path.join(job["keep_dir"], "model.ckpt-%d" % job["updates"]))
                     for job in jobs if job["variant"] == v.name]
            for v in variants if v.lever is None}
  result["final_dev_accuracy"] = quality_finetune.finetune_finals(
      finals, args.output_dir, data.task_dir, data.vocab_file, config_path, epochs,
      seeds=plan["finetune_seeds"])
  result.update({
      "initial_loss": round(initial["masked_lm_loss"], 4),
      "jobs": [{k: v for k, v in job.items() if k not in ("checkpoints", "keep_dir")}
               for job in jobs],
      "corpus": {"text_mb": data.text_mb, "held_out_sequences": held_out,
                 "eval_sequences": eval_sequences,
                 "training_sequences": {name: r.sequences for name, r in records.items()}},
      "plan": plan, "variant_settings": {v.name: dataclasses.asdict(v) for v in variants},
      "quick": args.quick, "cpu": cpu.cpu_model_name() or "unknown",
      "bf16_units": cpu.bf16_units()})
  if args.figure:
    quality_report.figure(args.figure, result["curves"], result["target_loss"],
                          "BERT-tiny, B = %g minutes, 2 cores" % plan["budget_minutes"])
  quality_report.print_tables(result)
  if args.result_json:
    with open(args.result_json, "w") as f:
      f.write(json.dumps(result, indent=1) + "\n")
  print(json.dumps(result))
  return result


if __name__ == "__main__":
  main()
