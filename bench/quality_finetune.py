"""The fine-tuning of bench/quality.py: seeded runs of run_classifier.py from each final
pretraining checkpoint on the corpus's classification task (the `stdlib` task's format:
labels.txt, train.tsv and dev.tsv of "label<TAB>text" rows), several seeds per checkpoint, two
runs at a time, and the spread of their dev accuracies."""

import concurrent.futures
import os
import shutil
import statistics
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The fine-tuning settings: BERT-tiny's learning rate of the demo task (docs/FINETUNING.md), a few
# epochs over the task's thousands of paragraphs at the pretraining's sequence length.
EPOCHS = 3
FINETUNE_FLAGS = ("--max_seq_length=128", "--train_batch_size=32", "--eval_batch_size=64",
                  "--learning_rate=3e-4", "--warmup_proportion=0.1",
                  "--save_checkpoints_steps=100000", "--display_loss_steps=100")
# Outer limit: a fine-tuning run takes a minute or two on 2 cores.
FINETUNE_TIMEOUT_SECONDS = 3600


def task_examples(task_dir):
  """(training examples, dev examples) of the task in `task_dir`: the rows of its train.tsv and
  dev.tsv after their header."""
  counts = []
  for name in ("train.tsv", "dev.tsv"):
    with open(os.path.join(task_dir, name), encoding="utf-8") as f:
      counts.append(sum(1 for _ in f) - 1)
  return tuple(counts)


def finetune_command(task_dir, vocab_file, config_path, seed, init_checkpoint=None,
                     epochs=EPOCHS):
  """argv (without --output_dir) of one seeded fine-tuning run (FINETUNE_FLAGS, `epochs`
  epochs), one thread; from `init_checkpoint`, or random weights."""
  argv = [sys.executable, os.path.join(REPO_ROOT, "run_classifier.py")] + list(FINETUNE_FLAGS) + [
          "--task_name=stdlib",
          "--data_dir=%s" % task_dir, "--vocab_file=%s" % vocab_file,
          "--bert_config_file=%s" % config_path, "--do_train", "--do_eval",
          "--deterministic_run", "--seed=%d" % seed, "--intra_op_threads=1",
          "--inter_op_threads=1"]
  if init_checkpoint:
    argv.append("--init_checkpoint=%s" % init_checkpoint)
  return argv + ["--num_train_epochs=%d" % epochs]


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


def finetune_finals(finals, output_dir, task_dir, vocab_file, config_path, epochs, seeds):
  """Fine-tunes each final checkpoint of `finals` ({variant: [(job name, checkpoint prefix),
  ...]}) with fine-tuning seeds 1..`seeds` (the same for every checkpoint) on the task in
  `task_dir` (labels.txt, train.tsv, dev.tsv), two runs at a time, under <output_dir>/finetune
  (a run named <job name>_finetune<seed>).

  Returns:
    {variant: mean_and_spread of the dev accuracies of all its runs (values ordered by job, then
    fine-tuning seed), with "checkpoints": {job name: the mean over its fine-tuning seeds}}.
  """
  def run_name(job, seed):
    return "%s_finetune%d" % (job, seed)

  runs = {run_name(job, seed): finetune_command(task_dir, vocab_file, config_path, seed,
                                                checkpoint, epochs)
          for jobs in finals.values() for job, checkpoint in jobs
          for seed in range(1, seeds + 1)}
  accuracies = run_finetunes(runs, os.path.join(output_dir, "finetune"))
  result = {}
  for variant, jobs in finals.items():
    per_job = {job: [accuracies[run_name(job, seed)] for seed in range(1, seeds + 1)]
               for job, _ in jobs}
    result[variant] = mean_and_spread([a for values in per_job.values() for a in values])
    result[variant]["checkpoints"] = {job: round(statistics.mean(values), 4)
                                      for job, values in per_job.items()}
  return result
