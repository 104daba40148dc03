"""Time to quality: what pretraining on the demo corpus buys within a wall-clock budget, and how
soon each code gets there.

  PY=$(make -s python-path | tail -n1); make data
  $PY bench/quality.py --output_dir=/tmp/quality --budget_minutes=10 \\
      --figure=docs/quality_curves.png --result_json=docs/quality.json

Three pretraining jobs on the demo data (data/demo: its training records; BERT-tiny with the demo
vocabulary), one after the other, each for the same wall-clock budget, one process each, batch 64:

* `lamb_bf16`: ours, LAMB as NVIDIA's recipe, `--bf16` (on a CPU without bf16 units `lamb_fp32`:
  there bf16 is emulated and slower);
* `adam_fp32`: ours, fp32, AdamWeightDecay (the release's optimizer and settings);
* `original`: the original release's `run_pretraining.py` (PyPI bert-tensorflow, through
  tests/reference/original_bert.py; fp32, AdamWeightDecay).

Before each job a short calibration job of the same command measures its start-up and updates/s, so
that its learning-rate schedule (warmup, then linear decay) ends at the end of the budget. Each job
saves a checkpoint every 1/20 of its updates (--checkpoints_per_job); every checkpoint is kept with
the time it was written (seconds since the job's start, the start-up included). Then, in one process
and one graph, every checkpoint is evaluated on the held-out records (data/demo/seq128/eval):
masked-LM loss and accuracy, next-sentence accuracy; the unigram baseline is the accuracy of always
predicting the commonest masked token of those records. The first job's checkpoints at 25, 50 and
100% of its updates (0%: its random initial weights) are fine-tuned on the demo's `stdlib` task
(scripts/build_demo_task.py; 300 labelled sentences, 30 epochs: bench/quality_finetune.py) with
--seeds seeds each, and random weights with the same seeds.

Packed sequences (docs/DATA.md, "Packed records"): `lamb_bf16_packed` and `lamb_fp32_packed` are
their twins' jobs on the same training records packed by pack_pretraining_data.py into
<output_dir>/packed_train (made once, reused when complete), `best_packed` the packed `best`; a
packed update trains round(64 / sequences per row) rows, about 64 sequences, with the same
learning rate and warmup fraction (bench/quality_packed.py); its calibration's updates/s is the
log's sequences/s over those sequences per update. The comparison:

  $PY bench/quality.py --output_dir=/tmp/quality-packed --variants=best,best_packed

When any job is packed, each job's final checkpoint is also fine-tuned with the same seeds
(`final_dev_accuracy`), so that packed and unpacked compare within the seeds' spread. The held-out
evaluation reads the unpacked evaluation records for every job.

Time to quality: the minutes each job takes to reach --target_loss (evaluation masked-LM loss;
default: the lowest loss every job reaches, rounded up to 0.05), interpolated linearly between
checkpoints. Prints the tables; with --figure draws evaluation loss against minutes. The last line
is one JSON object (budget_minutes, mlm_accuracy, unigram_accuracy, pretrained_dev_accuracy,
random_dev_accuracy, minutes_to_target_loss, final_dev_accuracy with a packed job, and the rest).
"""

import argparse
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import precision  # noqa: E402
from bench import quality_finetune  # noqa: E402
from bench import quality_packed  # noqa: E402
from bench import quality_report  # noqa: E402

MAX_SEQ_LENGTH = 128
MAX_PREDICTIONS = 20
BATCH = 64
# Checkpoints per job (the curve's points).
CHECKPOINTS_PER_JOB = 20
# Peak learning rates at batch 64: LAMB's the demo's (4e-3 per worker, 2 workers of 32);
# AdamWeightDecay's the 1e-3 of the demo's earlier optimizer comparison (docs/FINETUNING.md).
LEARNING_RATES = {"lamb": 8e-3, "adam": 1e-3}
WARMUP_FRACTION = 0.1
# Updates of a calibration job; the first third is left out of its rate (start-up effects).
CALIBRATION_UPDATES = 60
# A job the calibration misjudged is stopped this far past the budget.
OVERRUN_FACTOR = 1.15
CHECKPOINT_NAME = re.compile(r"^model\.ckpt-(\d+)\.index$")
VARIANTS = ("best", "lamb_bf16", "lamb_fp32", "adam_fp32", "original", "best_packed",
            "lamb_bf16_packed", "lamb_fp32_packed")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python bench/quality.py",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--output_dir", required=True, help="jobs, checkpoints, fine-tuning runs")
  parser.add_argument("--data_dir", default=os.path.join(REPO_ROOT, "data", "demo"),
                      help="the demo data (make data)")
  parser.add_argument("--budget_minutes", type=float, default=10.0,
                      help="wall-clock minutes of each pretraining job (at most 30)")
  parser.add_argument("--variants", default="best,adam_fp32,original",
                      help="comma-separated: best (lamb_bf16 or lamb_fp32 by CPU), lamb_bf16, "
                           "lamb_fp32, adam_fp32, original, and the packed best_packed, "
                           "lamb_bf16_packed, lamb_fp32_packed; the first is fine-tuned")
  parser.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per start")
  parser.add_argument("--target_loss", type=float, default=None,
                      help="evaluation MLM loss whose time is reported (default: the lowest "
                           "every job reaches, rounded up to 0.05)")
  parser.add_argument("--finetune_epochs", type=int, default=None,
                      help="fine-tuning epochs (default 30)")
  parser.add_argument("--checkpoints_per_job", type=int, default=CHECKPOINTS_PER_JOB,
                      help="checkpoints each job saves (the curve's points; also its fewest "
                           "updates)")
  parser.add_argument("--calibration_updates", type=int, default=CALIBRATION_UPDATES,
                      help="updates of each calibration job (its first third is left out of "
                           "the rate)")
  parser.add_argument("--figure", default=None, help="PNG: evaluation loss against minutes")
  parser.add_argument("--result_json", default=None,
                      help="also write the last line's JSON object to this file")
  args = parser.parse_args(argv)
  if not 0 < args.budget_minutes <= 30:
    parser.error("--budget_minutes must be in (0, 30], got %g" % args.budget_minutes)
  if args.seeds < 1:
    parser.error("--seeds must be >= 1, got %d" % args.seeds)
  if args.checkpoints_per_job < 3:
    parser.error("--checkpoints_per_job must be >= 3 (25, 50 and 100%% are fine-tuned), got %d"
                 % args.checkpoints_per_job)
  if args.calibration_updates < 6:
    parser.error("--calibration_updates must be >= 6 (its first third is left out of the rate), "
                 "got %d" % args.calibration_updates)
  args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
  for variant in args.variants:
    if variant not in VARIANTS:
      parser.error("--variants: unknown '%s' (expected one of %s)" % (variant, ", ".join(VARIANTS)))
  if not args.variants:
    parser.error("--variants is empty")
  return args


def resolve_variants(names, best_precision):
  """`names` (list of --variants) with "best" replaced by lamb_<best_precision> ("fp32" or "bf16":
  what `bf16_probe.auto_precision` measured to be faster here, `best_precision_here`), and
  "best_packed" by the same name + "_packed"; each once, in order. Returns the list."""
  best = "lamb_" + best_precision
  aliases = {"best": best, "best_packed": best + quality_packed.SUFFIX}
  resolved = []
  for name in names:
    name = aliases.get(name, name)
    if name not in resolved:
      resolved.append(name)
  return resolved


def best_precision_here(config_path):
  """The `bf16_probe.PrecisionChoice` of "best": the model's products at this benchmark's batch
  timed in fp32 and bf16 here (cached per machine)."""
  import modeling  # pylint: disable=g-import-not-at-top
  from utils.runtime import bf16_probe  # pylint: disable=g-import-not-at-top
  shapes = bf16_probe.model_shapes(modeling.BertConfig.from_json_file(config_path), BATCH,
                                   MAX_SEQ_LENGTH)
  return bf16_probe.auto_precision(shapes)


def job_command(variant, config_path, data_dir, out_dir, updates,
                checkpoints=CHECKPOINTS_PER_JOB, packed=None):
  """argv of one pretraining job of `updates` updates, a checkpoint every 1/`checkpoints` of
  them. A packed variant runs its twin's job on `packed` (quality_packed.PackedData, required
  then): its directory, rows_per_batch rows an update."""
  batch, train_dir = BATCH, os.path.join(data_dir, "seq128", "train")
  packed_rows = quality_packed.is_packed(variant)
  if packed_rows:
    if packed is None:
      raise ValueError("%s: a packed variant needs the packed data" % variant)
    batch, train_dir = quality_packed.rows_per_batch(BATCH, packed), packed.train_dir
  variant = quality_packed.twin(variant)
  optimizer = "adam" if variant in ("adam_fp32", "original") else "lamb"
  common = ["--bert_config_file=%s" % config_path, "--output_dir=%s" % out_dir,
            "--train_batch_size=%d" % batch, "--max_seq_length=%d" % MAX_SEQ_LENGTH,
            "--max_predictions_per_seq=%d" % MAX_PREDICTIONS,
            "--num_train_steps=%d" % updates,
            "--num_warmup_steps=%d" % max(1, int(updates * WARMUP_FRACTION)),
            "--learning_rate=%g" % LEARNING_RATES[optimizer],
            "--save_checkpoints_steps=%d" % max(1, updates // checkpoints)]
  if variant == "original":
    return [sys.executable, "-m", "tests.reference.original_bert", "run_pretraining", "--",
            "--input_file=%s" % os.path.join(train_dir, "*.tfrecord"), "--do_train=true"] + common
  argv = [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"),
          "--input_files_dir=%s" % train_dir, "--do_train", "--optimizer_type=%s" % optimizer,
          "--display_loss_steps=1", "--keep_checkpoint_max=%d" % (checkpoints + 2)]
  if variant == "lamb_bf16":
    argv.append("--bf16")
  if packed_rows:
    argv.append("--enable_packed_data_mode")  # the job refuses records that are not packed
  return argv + common


class CheckpointKeeper(object):
  """Hard-links every checkpoint a job writes into `keep_dir` as it appears, with the time it was
  written: the original release keeps only its last 5.

  Use: keeper = CheckpointKeeper(job_dir, keep_dir, start); keeper.start(); ...; keeper.stop();
  keeper.kept: {update: seconds since `start` when its index file was written}.
  """

  def __init__(self, job_dir, keep_dir, start, poll_seconds=0.5):
    self._job_dir, self._keep_dir, self._start = job_dir, keep_dir, start
    self._poll_seconds = poll_seconds
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self.kept = {}

  def start(self):
    os.makedirs(self._keep_dir, exist_ok=True)
    self._thread.start()

  def stop(self):
    self._stop.set()
    self._thread.join()
    self.poll()

  def _run(self):
    while not self._stop.wait(self._poll_seconds):
      self.poll()

  def poll(self):
    """Keeps the checkpoints whose index file is there (TensorFlow writes it after the data)."""
    names = os.listdir(self._job_dir) if os.path.isdir(self._job_dir) else []
    for name in names:
      match = CHECKPOINT_NAME.match(name)
      if not match or int(match.group(1)) in self.kept:
        continue
      update = int(match.group(1))
      prefix = os.path.join(self._job_dir, "model.ckpt-%d" % update)
      try:
        written = os.stat(prefix + ".index").st_mtime
        for path in glob.glob(prefix + ".*"):
          if ".tempstate" in path:
            continue
          target = os.path.join(self._keep_dir, os.path.basename(path))
          if not os.path.exists(target):
            os.link(path, target)
      except FileNotFoundError:  # deleted between the listing and the link: the next poll
        continue
      self.kept[update] = written - self._start


def sequences_per_update(variant, packed=None):
  """Sequences an update of `variant` trains: BATCH; a packed variant's rows x the sequences per
  row of `packed` (quality_packed.PackedData)."""
  return quality_packed.sequences_per_update(
      BATCH, packed if quality_packed.is_packed(variant) else None)


def update_rate(sequences_per_second, variant, packed=None):
  """The updates per second of `variant` measured at `sequences_per_second` (the run log's
  throughput_train, which counts a packed row's sequences): over its sequences per update."""
  return sequences_per_second / sequences_per_update(variant, packed)


def calibrate(variant, config_path, data_dir, work_dir, updates, checkpoints, packed=None):
  """(start-up seconds, updates per second) of `variant`: a job of `updates` updates saving
  `checkpoints` checkpoints, measured as bench/precision.py measures (the median per-update rate
  after the first third); `packed`: the packed data of a packed variant."""
  out_dir = os.path.join(work_dir, "calibration_%s" % variant)
  argv = job_command(variant, config_path, data_dir, out_dir, updates, checkpoints, packed)
  start, stderr_lines, _ = precision.run_job(argv, {})
  figures = argparse.Namespace(batch=BATCH, warmup=updates // 3)
  seq_per_s, startup = precision.job_figures(
      "original" if variant == "original" else "ours", figures, start, stderr_lines, out_dir)
  shutil.rmtree(out_dir, ignore_errors=True)
  return startup, update_rate(seq_per_s, variant, packed)


def updates_in_budget(budget_seconds, startup_seconds, updates_per_second,
                      checkpoints=CHECKPOINTS_PER_JOB):
  """Updates that fit in the budget after the start-up, 5% left for checkpoints and the ends;
  at least one per checkpoint."""
  return max(checkpoints, int(0.95 * (budget_seconds - startup_seconds) * updates_per_second))


def run_budgeted_job(variant, config_path, data_dir, work_dir, budget_seconds, checkpoints,
                     calibration_updates, packed=None):
  """Calibrates (a job of `calibration_updates`), then runs the job of `variant` for the budget
  with `checkpoints` checkpoints, keeping them; `packed`: the packed data of a packed variant.

  Returns:
    dict: variant, updates, rows_per_update, sequences_per_update, startup_s (calibration's),
    updates_per_s, seconds (the job's wall time), stopped_at_limit, checkpoints {update: seconds
    since the job's start}, keep_dir.
  """
  startup, rate = calibrate(variant, config_path, data_dir, work_dir, calibration_updates,
                            checkpoints, packed)
  updates = updates_in_budget(budget_seconds, startup, rate, checkpoints)
  job_dir = os.path.join(work_dir, variant)
  keep_dir = os.path.join(work_dir, variant + "_checkpoints")
  for path in (job_dir, keep_dir):
    shutil.rmtree(path, ignore_errors=True)
  argv = job_command(variant, config_path, data_dir, job_dir, updates, checkpoints, packed)
  print("%s: start-up %.1f s, %.2f updates/s: %d updates in %.1f minutes" % (
      variant, startup, rate, updates, budget_seconds / 60), flush=True)
  log_path = os.path.join(work_dir, variant + ".log")
  start = time.time()
  keeper = CheckpointKeeper(job_dir, keep_dir, start)
  keeper.start()
  with open(log_path, "w") as log:
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
      returncode = proc.wait(timeout=budget_seconds * OVERRUN_FACTOR + 60)
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
    raise SystemExit("%s: the job failed (%d): %s\n%s" % (variant, returncode, " ".join(argv),
                                                          tail))
  if not keeper.kept:
    raise SystemExit("%s: the job kept no checkpoint: see %s" % (variant, log_path))
  rows = (quality_packed.rows_per_batch(BATCH, packed) if quality_packed.is_packed(variant)
          else BATCH)
  return {"variant": variant, "updates": updates, "rows_per_update": rows,
          "sequences_per_update": round(sequences_per_update(variant, packed), 2),
          "startup_s": round(startup, 1),
          "updates_per_s": round(rate, 3), "seconds": round(seconds, 1),
          "stopped_at_limit": stopped, "checkpoints": dict(sorted(keeper.kept.items())),
          "keep_dir": keep_dir}


def minutes_to_loss(points, target):
  """Minutes at which the curve `points` [(minutes, loss), ...] (in time order) first reaches
  `target`, linear between points; None when it never does."""
  previous = None
  for minutes, loss in points:
    if loss <= target:
      if previous is None or previous[1] == loss:
        return minutes
      fraction = (previous[1] - target) / (previous[1] - loss)
      return previous[0] + fraction * (minutes - previous[0])
    previous = (minutes, loss)
  return None


def default_target(curves):
  """The lowest evaluation loss every curve reaches, rounded up to 0.05."""
  reached = max(min(loss for _, loss in points) for points in curves.values())
  return math.ceil(reached * 20 - 1e-9) / 20


def curve(job, evaluations):
  """[(minutes since the job's start, evaluation MLM loss)] of a job's checkpoints, in order."""
  return [(job["checkpoints"][u] / 60.0, evaluations[u]["masked_lm_loss"])
          for u in sorted(job["checkpoints"])]


def evaluate_jobs(jobs, config, records):
  """{variant: {update: metrics}} of every kept checkpoint, in one graph."""
  from utils.model import evaluation  # pylint: disable=g-import-not-at-top
  paths = [(job["variant"], u, os.path.join(job["keep_dir"], "model.ckpt-%d" % u))
           for job in jobs for u in sorted(job["checkpoints"])]
  metrics = evaluation.evaluate_checkpoints(config, records, [p for _, _, p in paths] + [None])
  result = {job["variant"]: {} for job in jobs}
  for (variant, update, _), values in zip(paths, metrics):
    result[variant][update] = values
  return result, metrics[-1]


def checkpoint_rows(first, chosen, initial, evaluations, dev):
  """The first job's table: its random initial weights (`initial` metrics), then each chosen
  {fraction: update} with its evaluation and dev accuracy (`dev` {label: spread}); a list."""
  rows = [{"fraction": 0.0, "update": 0, "minutes": 0.0, **_rounded(initial),
           "dev_accuracy": dev["random"]}]
  for fraction, update in sorted(chosen.items()):
    rows.append({"fraction": fraction, "update": update,
                 "minutes": round(first["checkpoints"][update] / 60, 2),
                 **_rounded(evaluations[first["variant"]][update]),
                 "dev_accuracy": dev["%d%%" % round(fraction * 100)]})
  return rows


def job_summary(job, evaluations):
  """What the result says of one job (dict): its figures, final update and its evaluation loss,
  without the checkpoint paths."""
  summary = {k: v for k, v in job.items() if k not in ("checkpoints", "keep_dir")}
  summary["final_update"] = max(job["checkpoints"])
  summary["final_mlm_loss"] = round(evaluations[job["variant"]][summary["final_update"]][
      "masked_lm_loss"], 4)
  return summary


def load_eval_records(data_dir):
  """The unpacked held-out records of `data_dir` (seq128/eval), read for `evaluation`."""
  from utils.model import evaluation  # pylint: disable=g-import-not-at-top
  eval_files = sorted(glob.glob(os.path.join(data_dir, "seq128", "eval", "*.tfrecord")))
  if not eval_files:
    raise SystemExit("no evaluation records under %s/seq128/eval: run make data" % data_dir)
  return evaluation.read_pretraining_records(eval_files, MAX_SEQ_LENGTH, MAX_PREDICTIONS)


def packed_data(variants, data_dir, output_dir):
  """The packed training records (quality_packed.PackedData) when a variant is packed, else
  None; says how they pack."""
  if not any(map(quality_packed.is_packed, variants)):
    return None
  train_files = sorted(glob.glob(os.path.join(data_dir, "seq128", "train", "*.tfrecord")))
  if not train_files:
    raise SystemExit("no training records under %s/seq128/train: run make data" % data_dir)
  packed = quality_packed.prepare(train_files, output_dir)
  print("packed: %d sequences in %d rows (%.3f per row): %d rows an update" % (
      packed.sequences, packed.rows, quality_packed.sequences_per_row(packed),
      quality_packed.rows_per_batch(BATCH, packed)), flush=True)
  return packed


def main(argv=None):
  args = parse_args(argv)
  import modeling  # pylint: disable=g-import-not-at-top
  from bench import convergence  # pylint: disable=g-import-not-at-top
  from utils.model import evaluation  # pylint: disable=g-import-not-at-top
  from utils.runtime import cpu  # pylint: disable=g-import-not-at-top
  bf16_units = cpu.bf16_units()
  os.makedirs(args.output_dir, exist_ok=True)
  config_path = os.path.join(args.output_dir, "bert_config.json")
  convergence.demo_config(args.data_dir, config_path)
  best = best_precision_here(config_path)
  if {"best", "best_packed"} & set(args.variants):
    print("best: lamb_%s (%s)" % (best.precision, best.reason), flush=True)
  variants = resolve_variants(args.variants, best.precision)
  config = modeling.BertConfig.from_json_file(config_path)
  records = load_eval_records(args.data_dir)
  unigram = evaluation.unigram_accuracy(records)
  packed = packed_data(variants, args.data_dir, args.output_dir)

  budget_seconds = args.budget_minutes * 60
  jobs = [run_budgeted_job(v, config_path, args.data_dir, args.output_dir, budget_seconds,
                           args.checkpoints_per_job, args.calibration_updates, packed)
          for v in variants]
  evaluations, initial = evaluate_jobs(jobs, config, records)
  curves = {job["variant"]: curve(job, evaluations[job["variant"]]) for job in jobs}
  target = args.target_loss if args.target_loss is not None else default_target(curves)
  to_target = {v: minutes_to_loss(points, target) for v, points in curves.items()}

  starts, chosen, finals = quality_finetune.finetune_plan(
      jobs, quality_finetune.FINETUNE_FRACTIONS, packed is not None)
  dev = quality_finetune.finetune_all(starts, args.output_dir, args.data_dir, config_path,
                                      args.seeds, args.finetune_epochs)
  rows = checkpoint_rows(jobs[0], chosen, initial, evaluations, dev)
  if args.figure:
    quality_report.figure(args.figure, curves, target, args.budget_minutes)
  last = rows[-1]
  result = {
      "budget_minutes": args.budget_minutes, "variant": jobs[0]["variant"],
      "bf16_units": bf16_units, "cpu": cpu.cpu_model_name() or "unknown",
      "best_precision": best._asdict(),
      "mlm_accuracy": last["masked_lm_accuracy"], "mlm_loss": last["masked_lm_loss"],
      "next_sentence_accuracy": last["next_sentence_accuracy"],
      "unigram_accuracy": round(unigram, 4),
      "pretrained_dev_accuracy": last["dev_accuracy"]["mean"],
      "random_dev_accuracy": dev["random"]["mean"],
      "checkpoints": rows, "seeds": args.seeds, "target_loss": target,
      "minutes_to_target_loss": {v: None if m is None else round(m, 2)
                                 for v, m in to_target.items()},
      "jobs": [job_summary(job, evaluations) for job in jobs],
      "curves": {v: [[round(m, 2), round(l, 4)] for m, l in points]
                 for v, points in curves.items()},
  }
  if finals:
    result["final_dev_accuracy"] = {v: dev[label] for v, label in finals.items()}
  if packed is not None:
    result["packed"] = {"sequences": packed.sequences, "rows": packed.rows,
                        "sequences_per_row": round(quality_packed.sequences_per_row(packed), 4)}
  quality_report.print_tables(result)
  if args.result_json:
    with open(args.result_json, "w") as f:
      f.write(json.dumps(result, indent=1) + "\n")
  print(json.dumps(result))
  return result


def _rounded(metrics):
  """The three evaluation metrics of `metrics` (dict), rounded to 4 digits."""
  return {key: round(metrics[key], 4) for key in
          ("masked_lm_loss", "masked_lm_accuracy", "next_sentence_accuracy")}


if __name__ == "__main__":
  main()
