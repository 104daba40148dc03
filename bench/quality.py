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
(scripts/build_demo_task.py; 300 labelled sentences, 30 epochs: FINETUNE_FLAGS) with --seeds seeds
each, and random weights with the same seeds.

Time to quality: the minutes each job takes to reach --target_loss (evaluation masked-LM loss;
default: the lowest loss every job reaches, rounded up to 0.05), interpolated linearly between
checkpoints. Prints the tables; with --figure draws evaluation loss against minutes. The last line
is one JSON object (budget_minutes, mlm_accuracy, unigram_accuracy, pretrained_dev_accuracy,
random_dev_accuracy, minutes_to_target_loss, and the rest).
"""

import argparse
import concurrent.futures
import glob
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import precision  # noqa: E402

# The fine-tuning settings: few labels (300 sentences, 50 per package), where pretrained features
# count most; 30 epochs of batch 32 are 281 updates (docs/FINETUNING.md).
FINETUNE_FLAGS = ("--max_seq_length=64", "--train_batch_size=32", "--eval_batch_size=64",
                  "--learning_rate=3e-4", "--num_train_epochs=30", "--warmup_proportion=0.1",
                  "--save_checkpoints_steps=100000", "--display_loss_steps=100")
MAX_SEQ_LENGTH = 128
MAX_PREDICTIONS = 20
BATCH = 64
# Checkpoints per job (the curve's points) and the fractions of the first job's updates whose
# checkpoints are fine-tuned; 0% is its random initial weights, which the fine-tuning runs from
# random weights stand for (no job saves a checkpoint before its first update).
CHECKPOINTS_PER_JOB = 20
FINETUNE_FRACTIONS = (0.25, 0.5, 1.0)
# Peak learning rates at batch 64: LAMB's the demo's (4e-3 per worker, 2 workers of 32);
# AdamWeightDecay's the 1e-3 of the demo's earlier optimizer comparison (docs/FINETUNING.md).
LEARNING_RATES = {"lamb": 8e-3, "adam": 1e-3}
WARMUP_FRACTION = 0.1
# Updates of a calibration job; the first third is left out of its rate (start-up effects).
CALIBRATION_UPDATES = 60
# A job the calibration misjudged is stopped this far past the budget.
OVERRUN_FACTOR = 1.15
CHECKPOINT_NAME = re.compile(r"^model\.ckpt-(\d+)\.index$")


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
                           "lamb_fp32, adam_fp32, original; the first is fine-tuned")
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
  known = ("best", "lamb_bf16", "lamb_fp32", "adam_fp32", "original")
  for variant in args.variants:
    if variant not in known:
      parser.error("--variants: unknown '%s' (expected one of %s)" % (variant, ", ".join(known)))
  if not args.variants:
    parser.error("--variants is empty")
  return args


def resolve_variants(names, bf16_units):
  """`names` with "best" replaced by lamb_bf16 when the CPU has bf16 units, else lamb_fp32."""
  best = "lamb_bf16" if bf16_units else "lamb_fp32"
  resolved = []
  for name in names:
    name = best if name == "best" else name
    if name not in resolved:
      resolved.append(name)
  return resolved


def job_command(variant, config_path, data_dir, out_dir, updates,
                checkpoints=CHECKPOINTS_PER_JOB):
  """argv of one pretraining job of `updates` updates, a checkpoint every 1/`checkpoints` of
  them."""
  optimizer = "adam" if variant in ("adam_fp32", "original") else "lamb"
  common = ["--bert_config_file=%s" % config_path, "--output_dir=%s" % out_dir,
            "--train_batch_size=%d" % BATCH, "--max_seq_length=%d" % MAX_SEQ_LENGTH,
            "--max_predictions_per_seq=%d" % MAX_PREDICTIONS,
            "--num_train_steps=%d" % updates,
            "--num_warmup_steps=%d" % max(1, int(updates * WARMUP_FRACTION)),
            "--learning_rate=%g" % LEARNING_RATES[optimizer],
            "--save_checkpoints_steps=%d" % max(1, updates // checkpoints)]
  train_dir = os.path.join(data_dir, "seq128", "train")
  if variant == "original":
    return [sys.executable, "-m", "tests.reference.original_bert", "run_pretraining", "--",
            "--input_file=%s" % os.path.join(train_dir, "*.tfrecord"), "--do_train=true"] + common
  argv = [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"),
          "--input_files_dir=%s" % train_dir, "--do_train", "--optimizer_type=%s" % optimizer,
          "--display_loss_steps=1", "--keep_checkpoint_max=%d" % (checkpoints + 2)]
  if variant == "lamb_bf16":
    argv.append("--bf16")
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


def calibrate(variant, config_path, data_dir, work_dir, updates, checkpoints):
  """(start-up seconds, updates per second) of `variant`: a job of `updates` updates saving
  `checkpoints` checkpoints, measured as bench/precision.py measures (the median per-update rate
  after the first third)."""
  out_dir = os.path.join(work_dir, "calibration_%s" % variant)
  argv = job_command(variant, config_path, data_dir, out_dir, updates, checkpoints)
  start, stderr_lines, _ = precision.run_job(argv, {})
  figures = argparse.Namespace(batch=BATCH, warmup=updates // 3)
  seq_per_s, startup = precision.job_figures(
      "original" if variant == "original" else "ours", figures, start, stderr_lines, out_dir)
  shutil.rmtree(out_dir, ignore_errors=True)
  return startup, seq_per_s / BATCH


def updates_in_budget(budget_seconds, startup_seconds, updates_per_second,
                      checkpoints=CHECKPOINTS_PER_JOB):
  """Updates that fit in the budget after the start-up, 5% left for checkpoints and the ends;
  at least one per checkpoint."""
  return max(checkpoints, int(0.95 * (budget_seconds - startup_seconds) * updates_per_second))


def run_budgeted_job(variant, config_path, data_dir, work_dir, budget_seconds, checkpoints,
                     calibration_updates):
  """Calibrates (a job of `calibration_updates`), then runs the job of `variant` for the budget
  with `checkpoints` checkpoints, keeping them.

  Returns:
    dict: variant, updates, startup_s (calibration's), updates_per_s, seconds (the job's wall
    time), stopped_at_limit, checkpoints {update: seconds since the job's start}, keep_dir.
  """
  startup, rate = calibrate(variant, config_path, data_dir, work_dir, calibration_updates,
                            checkpoints)
  updates = updates_in_budget(budget_seconds, startup, rate, checkpoints)
  job_dir = os.path.join(work_dir, variant)
  keep_dir = os.path.join(work_dir, variant + "_checkpoints")
  for path in (job_dir, keep_dir):
    shutil.rmtree(path, ignore_errors=True)
  argv = job_command(variant, config_path, data_dir, job_dir, updates, checkpoints)
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
  return {"variant": variant, "updates": updates, "startup_s": round(startup, 1),
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


def nearest_checkpoints(checkpoints, updates, fractions):
  """{fraction: the kept update nearest to fraction x updates}."""
  kept = sorted(checkpoints)
  return {f: min(kept, key=lambda u: abs(u - f * updates)) for f in fractions}


def finetune_command(task_dir, data_dir, config_path, seed, init_checkpoint=None, epochs=None):
  """argv (without --output_dir) of one seeded fine-tuning run (FINETUNE_FLAGS; `epochs`
  instead of theirs when given), one thread; from `init_checkpoint`, or random weights."""
  argv = [sys.executable, os.path.join(REPO_ROOT, "run_classifier.py")] + list(FINETUNE_FLAGS) + [
          "--task_name=stdlib",
          "--data_dir=%s" % task_dir, "--vocab_file=%s" % os.path.join(data_dir, "vocab.txt"),
          "--bert_config_file=%s" % config_path, "--do_train", "--do_eval",
          "--deterministic_run", "--seed=%d" % seed, "--intra_op_threads=1",
          "--inter_op_threads=1"]
  if init_checkpoint:
    argv.append("--init_checkpoint=%s" % init_checkpoint)
  if epochs is not None:
    argv.append("--num_train_epochs=%d" % epochs)
  return argv


def run_finetunes(runs, work_dir, parallel=2):
  """Runs the fine-tuning jobs {name: argv} two at a time (one thread each); {name: accuracy}."""
  from utils.training import job as job_lib  # pylint: disable=g-import-not-at-top

  def one(name):
    out_dir = os.path.join(work_dir, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    argv = runs[name] + ["--output_dir=%s" % out_dir]
    with open(out_dir + ".log", "w") as log:
      returncode = subprocess.call(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    if returncode != 0:
      raise SystemExit("fine-tuning %s failed (%d): see %s.log" % (name, returncode, out_dir))
    results = job_lib.read_eval_results(os.path.join(out_dir, "eval_results.txt"))
    if "eval_accuracy" not in results:
      raise SystemExit("%s/eval_results.txt has no eval_accuracy" % out_dir)
    return name, results["eval_accuracy"]

  os.makedirs(work_dir, exist_ok=True)
  with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
    return dict(pool.map(one, sorted(runs)))


def mean_and_spread(values):
  """{"mean", "min", "max", "values"} of a list of accuracies."""
  return {"mean": round(statistics.mean(values), 4), "min": round(min(values), 4),
          "max": round(max(values), 4), "values": [round(v, 4) for v in values]}


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


def finetune_starts(job, fractions):
  """({label: init checkpoint or None}, {fraction: update}) of the fine-tuning starts: "random",
  then "<p>%" for each fraction of the job's updates, its nearest kept checkpoint."""
  chosen = nearest_checkpoints(job["checkpoints"], job["updates"], fractions)
  starts = {"random": None}
  for fraction, update in chosen.items():
    starts["%d%%" % round(fraction * 100)] = os.path.join(job["keep_dir"], "model.ckpt-%d" % update)
  return starts, chosen


def figure(path, curves, target, budget_minutes):
  """Evaluation MLM loss against minutes, one curve per job, the target loss dashed."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(figsize=(7, 4.2))
  for variant, points in curves.items():
    axes.plot([m for m, _ in points], [l for _, l in points], marker=".", label=variant)
  axes.axhline(target, linestyle="--", color="grey", label="target %.2f" % target)
  axes.set_xlabel("minutes since the job's start (start-up included)")
  axes.set_ylabel("evaluation masked-LM loss")
  axes.set_xlim(0, budget_minutes * 1.05)
  # The first minute's fall from ln(vocab) would flatten the part where the jobs differ.
  lowest = min(l for points in curves.values() for _, l in points)
  axes.set_ylim(min(lowest, target) - 0.05, max(target + 0.8, lowest + 0.8))
  axes.set_title("BERT-tiny on the demo corpus, %g-minute budget, 2 cores" % budget_minutes)
  axes.legend()
  axes.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv=None):
  args = parse_args(argv)
  import modeling  # pylint: disable=g-import-not-at-top
  from bench import convergence  # pylint: disable=g-import-not-at-top
  from utils.model import evaluation  # pylint: disable=g-import-not-at-top
  from utils.runtime import cpu  # pylint: disable=g-import-not-at-top
  bf16_units = cpu.bf16_units()
  variants = resolve_variants(args.variants, bf16_units)
  os.makedirs(args.output_dir, exist_ok=True)
  config_path = os.path.join(args.output_dir, "bert_config.json")
  convergence.demo_config(args.data_dir, config_path)
  config = modeling.BertConfig.from_json_file(config_path)
  eval_files = sorted(glob.glob(os.path.join(args.data_dir, "seq128", "eval", "*.tfrecord")))
  if not eval_files:
    raise SystemExit("no evaluation records under %s/seq128/eval: run make data" % args.data_dir)
  records = evaluation.read_pretraining_records(eval_files, MAX_SEQ_LENGTH, MAX_PREDICTIONS)
  unigram = evaluation.unigram_accuracy(records)

  budget_seconds = args.budget_minutes * 60
  jobs = [run_budgeted_job(v, config_path, args.data_dir, args.output_dir, budget_seconds,
                           args.checkpoints_per_job, args.calibration_updates)
          for v in variants]
  evaluations, initial = evaluate_jobs(jobs, config, records)
  curves = {job["variant"]: curve(job, evaluations[job["variant"]]) for job in jobs}
  target = args.target_loss if args.target_loss is not None else default_target(curves)
  to_target = {v: minutes_to_loss(points, target) for v, points in curves.items()}

  first = jobs[0]
  starts, chosen = finetune_starts(first, FINETUNE_FRACTIONS)
  task_dir = os.path.join(args.output_dir, "stdlib_task")
  subprocess.check_call([sys.executable, os.path.join(REPO_ROOT, "scripts", "build_demo_task.py"),
                         "--task_dir=%s" % task_dir], cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
  runs = {"%s_seed%d" % (label, seed): finetune_command(task_dir, args.data_dir, config_path,
                                                         seed, init, args.finetune_epochs)
          for label, init in starts.items() for seed in range(1, args.seeds + 1)}
  accuracies = run_finetunes(runs, os.path.join(args.output_dir, "finetune"))
  dev = {label: mean_and_spread([accuracies["%s_seed%d" % (label, s)]
                                 for s in range(1, args.seeds + 1)]) for label in starts}

  rows = [{"fraction": 0.0, "update": 0, "minutes": 0.0, **_rounded(initial),
           "dev_accuracy": dev["random"]}]
  for fraction, update in sorted(chosen.items()):
    rows.append({"fraction": fraction, "update": update,
                 "minutes": round(first["checkpoints"][update] / 60, 2),
                 **_rounded(evaluations[first["variant"]][update]),
                 "dev_accuracy": dev["%d%%" % round(fraction * 100)]})
  if args.figure:
    figure(args.figure, curves, target, args.budget_minutes)
  last = rows[-1]
  result = {
      "budget_minutes": args.budget_minutes, "variant": first["variant"],
      "bf16_units": bf16_units, "cpu": cpu.cpu_model_name() or "unknown",
      "mlm_accuracy": last["masked_lm_accuracy"], "mlm_loss": last["masked_lm_loss"],
      "next_sentence_accuracy": last["next_sentence_accuracy"],
      "unigram_accuracy": round(unigram, 4),
      "pretrained_dev_accuracy": last["dev_accuracy"]["mean"],
      "random_dev_accuracy": dev["random"]["mean"],
      "checkpoints": rows, "seeds": args.seeds, "target_loss": target,
      "minutes_to_target_loss": {v: None if m is None else round(m, 2)
                                 for v, m in to_target.items()},
      "jobs": [{k: v for k, v in job.items() if k not in ("checkpoints", "keep_dir")}
               for job in jobs],
      "curves": {v: [[round(m, 2), round(l, 4)] for m, l in points]
                 for v, points in curves.items()},
  }
  print_tables(result)
  if args.result_json:
    with open(args.result_json, "w") as f:
      f.write(json.dumps(result, indent=1) + "\n")
  print(json.dumps(result))
  return result


def _rounded(metrics):
  return {key: round(metrics[key], 4) for key in
          ("masked_lm_loss", "masked_lm_accuracy", "next_sentence_accuracy")}


def print_tables(result):
  """The checkpoints' table and the time-to-target table, in Markdown."""
  print("\n%s, %g-minute budget (unigram baseline accuracy %.4f)\n" % (
      result["variant"], result["budget_minutes"], result["unigram_accuracy"]))
  print("| checkpoint | update | minutes | eval MLM loss | MLM accuracy | NSP accuracy | "
        "dev accuracy, mean (min-max) over %d seeds |" % result["seeds"])
  print("|---|---|---|---|---|---|---|")
  for row in result["checkpoints"]:
    d = row["dev_accuracy"]
    print("| %d%% | %d | %.1f | %.3f | %.3f | %.3f | %.3f (%.3f-%.3f) |" % (
        round(row["fraction"] * 100), row["update"], row["minutes"], row["masked_lm_loss"],
        row["masked_lm_accuracy"], row["next_sentence_accuracy"], d["mean"], d["min"], d["max"]))
  print("| random weights | | | | | | %.3f |" % result["random_dev_accuracy"])
  print("\nMinutes to an evaluation MLM loss of %.2f:\n" % result["target_loss"])
  print("| job | updates | updates/s | minutes to target | x original |")
  print("|---|---|---|---|---|")
  minutes = result["minutes_to_target_loss"]
  for job in result["jobs"]:
    m = minutes[job["variant"]]
    base = minutes.get("original")
    print("| %s | %d | %.2f | %s | %s |" % (
        job["variant"], job["updates"], job["updates_per_s"],
        "not reached" if m is None else "%.1f" % m,
        "%.2f" % (base / m) if m and base else ""))
  print()


if __name__ == "__main__":
  main()
