"""Signal-to-exit time of a graceful stop (docs/LONG_RUNS.md): how long run_pretraining.py takes
from SIGTERM (or --signal) to its exit, with the update in flight finished and its checkpoint
written.

  PY=$(make -s python-path | tail -n1)
  $PY bench/stop_time.py --config base --seq 128 --batch 8

It runs `run_pretraining.py --do_train` on cached random records (bench/throughput.py's) in a
fresh process, waits for update `--after` in the dllogger log, sends the signal at a random point of
the next update, and times the exit. Reported as one JSON line and a table: signal-to-exit seconds,
split (from the log's timestamps) into the rest of the update in flight and the checkpoint plus
the stop, the exit status (75 expected), the update the run stopped at and whether its checkpoint
is there, the median update time and the checkpoint's size. The target is below 30 s, the default
grace of Slurm (KillWait) and Kubernetes (terminationGracePeriodSeconds).
"""

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import throughput  # noqa: E402
from utils.runlog import dllogger_setup  # noqa: E402

TARGET_SECONDS = 30.0


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="base", help="bert_configs/ name or a path")
  parser.add_argument("--seq", type=int, default=128, help="max_seq_length")
  parser.add_argument("--predictions", type=int, default=20, help="max_predictions_per_seq")
  parser.add_argument("--batch", type=int, default=8, help="train_batch_size")
  parser.add_argument("--after", type=int, default=3, help="signal once this update is logged")
  parser.add_argument("--signal", default="SIGTERM", choices=["SIGTERM", "SIGINT", "SIGUSR1"])
  parser.add_argument("--repeats", type=int, default=1, help="runs (each a fresh process)")
  parser.add_argument("--timeout", type=float, default=900, help="seconds a run may take")
  args = parser.parse_args(argv)
  if args.after < 1 or args.repeats < 1:
    parser.error("--after and --repeats must be >= 1")
  return args


def _log_lines(path):
  """The parsed dllogger lines of `path` so far."""
  if not os.path.exists(path):
    return []
  with open(path) as reader:
    return [record for record in map(dllogger_setup.parse_log_line, reader) if record]


def _checkpoint_steps(directory):
  return sorted(int(name[len("model.ckpt-"):-len(".index")]) for name in os.listdir(directory)
                if name.startswith("model.ckpt-") and name.endswith(".index"))


def _checkpoint_bytes(directory, step):
  prefix = "model.ckpt-%d." % step
  return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)
             if name.startswith(prefix))


def one_run(args, config_path, data_dir, rng):
  """Starts a run, signals it after update `args.after`; returns its measurements (dict)."""
  work_dir = tempfile.mkdtemp(prefix="stop_time_")
  out = os.path.join(work_dir, "out")
  log_path = os.path.join(work_dir, "dllog.json")
  cmd = [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"),
         "--bert_config_file=%s" % config_path, "--input_files_dir=%s" % data_dir,
         "--output_dir=%s" % out, "--dllog_path=%s" % log_path, "--do_train",
         "--max_seq_length=%d" % args.seq, "--max_predictions_per_seq=%d" % args.predictions,
         "--train_batch_size=%d" % args.batch, "--num_train_steps=100000",
         "--num_warmup_steps=100", "--learning_rate=1e-4", "--display_loss_steps=1",
         "--save_checkpoints_steps=100000"]
  try:
    with open(os.path.join(work_dir, "output.txt"), "w") as sink:
      proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.time() + args.timeout
    while True:
      if proc.poll() is not None:
        raise SystemExit("the run ended before update %d:\n%s" % (
            args.after, open(os.path.join(work_dir, "output.txt")).read()[-4000:]))
      steps = [line for line in _log_lines(log_path) if isinstance(line["step"], int)]
      if steps and steps[-1]["step"] >= args.after:
        break
      if time.time() > deadline:
        proc.kill()
        raise SystemExit("update %d not logged in %d s" % (args.after, args.timeout))
      time.sleep(0.05)
    update_times = [args.batch / line["data"]["throughput_train"] for line in steps[1:]
                    if line["data"].get("throughput_train")]
    # Somewhere inside the next update: the in-flight update is part of what is measured.
    if update_times:
      time.sleep(rng.uniform(0, statistics.median(update_times)))
    sent = time.time()
    proc.send_signal(getattr(signal, args.signal))
    code = proc.wait(timeout=args.timeout)
    seconds = time.time() - sent
    lines = _log_lines(log_path)
    stops = [line for line in lines if line["step"] == "STOP"]
    stop_update = stops[-1]["data"]["update"] if stops else None
    # From the log's timestamps (seconds since the epoch): when the update in flight ended, when
    # the stop line was written (after the checkpoint).
    update_end = [float(line["timestamp"]) for line in lines
                  if line["step"] == stop_update and "timestamp" in line]
    in_flight_s = round(update_end[-1] - sent, 2) if update_end else None
    save_s = (round(float(stops[-1]["timestamp"]) - update_end[-1], 2)
              if update_end and "timestamp" in stops[-1] else None)
    saved = _checkpoint_steps(out) if os.path.isdir(out) else []
    return {"signal_to_exit_s": round(seconds, 2), "exit_code": code,
            "rest_of_update_s": in_flight_s, "checkpoint_and_stop_s": save_s,
            "stop_update": stop_update, "checkpoint_of_stop_update": stop_update in saved,
            "checkpoint_mb": (round(_checkpoint_bytes(out, stop_update) / 2**20, 1)
                              if stop_update in saved else None),
            "median_update_s": (round(statistics.median(update_times), 2) if update_times
                                else None)}
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)


def main(argv=None):
  args = parse_args(argv)
  config_path = throughput.config_file(args.config)
  with open(config_path) as reader:
    vocab_size = json.load(reader)["vocab_size"]
  data_dir = throughput.cached_records(vocab_size, args.seq, args.predictions)
  rng = random.Random(0)
  runs = [one_run(args, config_path, data_dir, rng) for _ in range(args.repeats)]
  worst = max(run["signal_to_exit_s"] for run in runs)
  result = {"bench": "stop_time", "config": args.config, "seq": args.seq, "batch": args.batch,
            "signal": args.signal, "cpus": os.cpu_count(),
            "load_avg_1min": round(os.getloadavg()[0], 2), "runs": runs,
            "worst_signal_to_exit_s": worst, "target_s": TARGET_SECONDS,
            "within_target": worst < TARGET_SECONDS}
  print(json.dumps(result))
  print("%-5s %-8s %-12s %-10s %-6s %-8s %-9s %-9s" % (
      "run", "exit s", "rest of upd", "ckpt+stop", "code", "update", "ckpt MB", "update s"))
  for index, run in enumerate(runs):
    print("%-5d %-8.2f %-12s %-10s %-6d %-8s %-9s %-9s" % (
        index, run["signal_to_exit_s"], run["rest_of_update_s"], run["checkpoint_and_stop_s"],
        run["exit_code"], run["stop_update"], run["checkpoint_mb"], run["median_update_s"]))
  return 0 if all(run["exit_code"] == 75 and run["checkpoint_of_stop_update"] for run in runs) \
      else 1


if __name__ == "__main__":
  sys.exit(main())
