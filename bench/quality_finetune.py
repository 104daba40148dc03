"""The fine-tuning of bench/quality.py: seeded runs of run_classifier.py on the demo's `stdlib`
task (scripts/build_demo_task.py) from chosen pretraining checkpoints or random weights, two at a
time, and the spread of their dev accuracies over the seeds."""

import concurrent.futures
import os
import shutil
import statistics
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The fine-tuning settings: few labels (300 sentences, 50 per package), where pretrained features
# count most; 30 epochs of batch 32 are 281 updates (docs/FINETUNING.md).
FINETUNE_FLAGS = ("--max_seq_length=64", "--train_batch_size=32", "--eval_batch_size=64",
                  "--learning_rate=3e-4", "--num_train_epochs=30", "--warmup_proportion=0.1",
                  "--save_checkpoints_steps=100000", "--display_loss_steps=100")
# The fractions of the first job's updates whose checkpoints are fine-tuned; 0% is its random
# initial weights, which the fine-tuning runs from random weights stand for (no job saves a
# checkpoint before its first update).
FINETUNE_FRACTIONS = (0.25, 0.5, 1.0)
# Outer limits: a fine-tuning run takes minutes on 2 cores; building the task, seconds.
FINETUNE_TIMEOUT_SECONDS = 3600
TASK_TIMEOUT_SECONDS = 600


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
  from utils.training import estimator as estimator_lib  # pylint: disable=g-import-not-at-top

  def one(name):
    out_dir = os.path.join(work_dir, name)
    shutil.rmtree(out_dir, ignore_errors=True)
    argv = runs[name] + ["--output_dir=%s" % out_dir]
    with open(out_dir + ".log", "w") as log:
      returncode = subprocess.call(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   timeout=FINETUNE_TIMEOUT_SECONDS)
    if returncode != 0:
      raise SystemExit("fine-tuning %s failed (%d): see %s.log" % (name, returncode, out_dir))
    results = estimator_lib.read_eval_results(os.path.join(out_dir, "eval_results.txt"))
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


def finetune_starts(job, fractions):
  """({label: init checkpoint or None}, {fraction: update}) of the fine-tuning starts: "random",
  then "<p>%" for each fraction of the job's updates, its nearest kept checkpoint."""
  chosen = nearest_checkpoints(job["checkpoints"], job["updates"], fractions)
  starts = {"random": None}
  for fraction, update in chosen.items():
    starts["%d%%" % round(fraction * 100)] = os.path.join(job["keep_dir"], "model.ckpt-%d" % update)
  return starts, chosen


def finetune_plan(jobs, fractions, compare_finals):
  """The fine-tuning starts of `jobs` (the run's job dicts, the first fine-tuned at `fractions`)
  and, when `compare_finals`, every job's final (newest kept) checkpoint too, each start once.

  Returns:
    (starts {label: init checkpoint or None}, chosen {fraction: update of the first job},
    finals {variant: label of its final checkpoint's start}; {} unless `compare_finals`).
  """
  starts, chosen = finetune_starts(jobs[0], fractions)
  finals = {}
  for job in jobs if compare_finals else ():
    path = os.path.join(job["keep_dir"], "model.ckpt-%d" % max(job["checkpoints"]))
    label = next((name for name, init in starts.items() if init == path),
                 "final_" + job["variant"])
    starts[label] = path
    finals[job["variant"]] = label
  return starts, chosen, finals


def finetune_all(starts, output_dir, data_dir, config_path, seeds, epochs=None):
  """Fine-tunes from every start {label: init checkpoint or None} with seeds 1..`seeds` (and
  `epochs` when given) on the demo task, built from `data_dir` under `output_dir`.

  Returns:
    {label: mean_and_spread of its accuracies over the seeds}.
  """
  task_dir = os.path.join(output_dir, "stdlib_task")
  subprocess.run([sys.executable, os.path.join(REPO_ROOT, "scripts", "build_demo_task.py"),
                  "--task_dir=%s" % task_dir], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                 check=True, timeout=TASK_TIMEOUT_SECONDS)
  seeds = range(1, seeds + 1)
  runs = {"%s_seed%d" % (label, seed): finetune_command(task_dir, data_dir, config_path, seed,
                                                         init, epochs)
          for label, init in starts.items() for seed in seeds}
  accuracies = run_finetunes(runs, os.path.join(output_dir, "finetune"))
  return {label: mean_and_spread([accuracies["%s_seed%d" % (label, s)] for s in seeds])
          for label in starts}
