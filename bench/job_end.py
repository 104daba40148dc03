"""How long a pretraining job takes from its last update to its exit, at two commits side by
side: the end of a job is its final checkpoint, the input pipeline's and the session's close.

  PY=$(make -s python-path | tail -n1); make data
  $PY bench/job_end.py --before HEAD~1 --after HEAD --updates 200 --rounds 4

Each commit is checked out in a git worktree of its own under --work_dir. Each round runs the
same run_pretraining.py job (BERT-tiny, bert_configs/tiny.json, on the demo's records by default,
batch 16, --updates updates) once at each commit, alternating which goes first, and times from
the moment the job's throughput summary (the line its hooks log after the last update) appears
in its output to the process's exit. Reported per commit: those seconds (median, largest, how
many over --slow_seconds) and the jobs' whole wall time; the last line is one JSON object.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What the job's hooks log once its last update is done (utils/training/hooks.py).
SUMMARY_LINE = "Throughput Average"


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--before", required=True, help="a commit")
  parser.add_argument("--after", required=True, help="a commit")
  parser.add_argument("--input_files_dir",
                      default=os.path.join(REPO_ROOT, "data", "demo", "seq128", "train"))
  parser.add_argument("--updates", type=int, default=200)
  parser.add_argument("--rounds", type=int, default=4)
  parser.add_argument("--slow_seconds", type=float, default=2.0)
  parser.add_argument("--work_dir", default="/tmp/bench_job_end")
  args = parser.parse_args(argv)
  args.work_dir = os.path.abspath(args.work_dir)
  if args.updates < 1 or args.rounds < 1:
    parser.error("--updates and --rounds must be >= 1, got %d and %d"
                 % (args.updates, args.rounds))
  if not os.path.isdir(args.input_files_dir):
    parser.error("--input_files_dir=%s is not a directory (make data makes the demo's)"
                 % args.input_files_dir)
  return args


def job_argv(checkout, input_files_dir, output_dir, updates):
  """run_pretraining.py at `checkout` on BERT-tiny for `updates` updates."""
  return [sys.executable, os.path.join(checkout, "run_pretraining.py"),
          "--bert_config_file=%s" % os.path.join(checkout, "bert_configs", "tiny.json"),
          "--input_files_dir=%s" % input_files_dir, "--output_dir=%s" % output_dir,
          "--max_seq_length=128", "--max_predictions_per_seq=20", "--train_batch_size=16",
          "--num_train_steps=%d" % updates, "--num_warmup_steps=%d" % max(1, updates // 10),
          "--learning_rate=1e-3", "--save_checkpoints_steps=%d" % updates, "--do_train"]


def timed_job(argv, cwd, log_path):
  """(seconds from the summary line to the exit, the job's wall seconds); SystemExit naming the
  log when the job fails or logs no summary."""
  start = time.time()
  with open(log_path, "w") as log:
    proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    summary_at = None
    while proc.poll() is None:
      time.sleep(0.05)
      if summary_at is None:
        with open(log_path) as f:
          if SUMMARY_LINE in f.read():
            summary_at = time.time()
  end = time.time()
  if proc.returncode != 0 or summary_at is None:
    raise SystemExit("job_end.py: the job %s (exit %d): see %s"
                     % ("logged no summary" if summary_at is None else "failed",
                        proc.returncode, log_path))
  return end - summary_at, end - start


def summary(ends, walls, slow_seconds):
  """The figures of one commit's jobs."""
  return {"end_seconds": [round(e, 2) for e in ends],
          "end_median_s": round(statistics.median(ends), 2),
          "end_max_s": round(max(ends), 2),
          "ends_over_slow": sum(e > slow_seconds for e in ends),
          "wall_median_s": round(statistics.median(walls), 1)}


def checkout(commit, path):
  """A git worktree of `commit` at `path` (replacing one left there)."""
  subprocess.run(["git", "worktree", "remove", "--force", path], cwd=REPO_ROOT,
                 capture_output=True)
  shutil.rmtree(path, ignore_errors=True)
  subprocess.run(["git", "worktree", "add", "--detach", "--quiet", path, commit], cwd=REPO_ROOT,
                 check=True)
  return path


def main(argv=None):
  args = parse_args(argv)
  os.makedirs(args.work_dir, exist_ok=True)
  commits = {"before": args.before, "after": args.after}
  trees = {name: checkout(commit, os.path.join(args.work_dir, name))
           for name, commit in commits.items()}
  measured = {name: ([], []) for name in commits}
  try:
    for round_index in range(args.rounds):
      order = ("before", "after") if round_index % 2 == 0 else ("after", "before")
      for name in order:
        output_dir = os.path.join(args.work_dir, "out-%s-%d" % (name, round_index + 1))
        shutil.rmtree(output_dir, ignore_errors=True)
        end, wall = timed_job(job_argv(trees[name], args.input_files_dir, output_dir,
                                       args.updates), trees[name], output_dir + ".log")
        measured[name][0].append(end)
        measured[name][1].append(wall)
        print("round %d, %s (%s): %.2f s from the last update to the exit, %.1f s in all"
              % (round_index + 1, name, commits[name], end, wall), flush=True)
  finally:
    for path in trees.values():
      subprocess.run(["git", "worktree", "remove", "--force", path], cwd=REPO_ROOT,
                     capture_output=True)
  result = {"updates": args.updates, "rounds": args.rounds, "input_files_dir":
            args.input_files_dir, "slow_seconds": args.slow_seconds}
  for name in commits:
    result[name] = dict(commit=commits[name], **summary(*measured[name], args.slow_seconds))
    print("%s (%s): from the last update to the exit median %.2f s, largest %.2f s, %d of %d "
          "over %g s; jobs %.1f s" % (name, commits[name], result[name]["end_median_s"],
                                     result[name]["end_max_s"], result[name]["ends_over_slow"],
                                     args.rounds, args.slow_seconds,
                                     result[name]["wall_median_s"]))
  print(json.dumps(result))
  return result


if __name__ == "__main__":
  main()
