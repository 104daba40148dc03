"""Signal-to-exit time of a graceful stop (docs/LONG_RUNS.md): how long run_pretraining.py takes
from SIGTERM (or --signal) to its exit, with the update in flight finished and its checkpoint
written; alone, under horovodrun, or under scripts/supervise.py, on a quiet or a busy machine.

  PY=$(make -s python-path | tail -n1)
  $PY bench/stop_time.py --config base --seq 128 --batch 8
  $PY bench/stop_time.py --config tiny --launcher supervisor --load --repeats 3
  $PY bench/stop_time.py --config tiny --launcher supervisor --load --signal SIGKILL

It runs `run_pretraining.py --do_train` on cached random records (bench/throughput.py's) in a
fresh process (`--launcher one`), as 2 workers of `horovodrun --gloo` (`horovodrun`), or as those
under `scripts/supervise.py` (`supervisor`); waits for update `--after` in the dllogger log, sends
the signal to the process it started (the script, horovodrun or the supervisor: what a scheduler
signals) at a random point of the next update, and times the exit. `--load` keeps every core busy
meanwhile (one `while True` process per core, nice 0). `--signal SIGKILL` (a supervisor killed by
the out-of-memory killer or a scheduler) times until no process of the job is left. Reported as one
JSON line and a table: signal-to-exit seconds (to the end of the process signalled, and of the
last process of the job), split (from the log's timestamps) into the rest of the update in flight
and the checkpoint plus the stop, the exit status (75 expected: the launcher's status, 1 under
horovodrun, with "Exit code: 75"), the update the run stopped at and whether its checkpoint is
there, the median update time and the checkpoint's size. The target is below 30 s, the default
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

import psutil

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import flops  # noqa: E402
from bench import throughput  # noqa: E402
from utils.runlog import dllogger_setup  # noqa: E402

TARGET_SECONDS = 30.0
LAUNCHERS = ("one", "horovodrun", "supervisor")
# The status the process signalled ends with after a graceful stop, by launcher (horovodrun exits
# 1 whatever its workers' status, and names it: "Exit code: 75").
STOP_STATUS = {"one": 75, "horovodrun": 1, "supervisor": 75}
# Workers under horovodrun and the supervisor.
WORKERS = 2
# A busy loop of the load, ended by the bench (and by itself after an hour, should the bench die).
_BUSY_LOOP = "import time\nend = time.time() + 3600\nwhile time.time() < end: pass"


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="base", help="bert_configs/ name or a path")
  parser.add_argument("--seq", type=int, default=128, help="max_seq_length")
  parser.add_argument("--predictions", type=int, default=20, help="max_predictions_per_seq")
  parser.add_argument("--batch", type=int, default=8, help="train_batch_size")
  parser.add_argument("--after", type=int, default=3, help="signal once this update is logged")
  parser.add_argument("--signal", default="SIGTERM",
                      choices=["SIGTERM", "SIGINT", "SIGUSR1", "SIGKILL"])
  parser.add_argument("--launcher", default="one", choices=LAUNCHERS,
                      help="one process, %d workers of horovodrun --gloo, or those under "
                           "scripts/supervise.py (default one)" % WORKERS)
  parser.add_argument("--load", type=int, nargs="?", const=os.cpu_count() or 1, default=0,
                      help="busy-loop processes running meanwhile (no value: one per core)")
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


def _command(args, config_path, data_dir, out, log_path):
  """The command line of a run under `args.launcher`."""
  cmd = [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"),
         "--bert_config_file=%s" % config_path, "--input_files_dir=%s" % data_dir,
         "--output_dir=%s" % out, "--dllog_path=%s" % log_path, "--do_train",
         "--max_seq_length=%d" % args.seq, "--max_predictions_per_seq=%d" % args.predictions,
         "--train_batch_size=%d" % args.batch, "--num_train_steps=100000",
         "--num_warmup_steps=100", "--learning_rate=1e-4", "--display_loss_steps=1",
         "--save_checkpoints_steps=100000"]
  if args.launcher == "one":
    return cmd
  horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
  cmd = [horovodrun, "-np", str(WORKERS), "-H", "localhost:%d" % WORKERS, "--gloo"] + cmd + [
      "--horovod"]
  if args.launcher == "horovodrun":
    return cmd
  return [sys.executable, os.path.join(REPO_ROOT, "scripts", "supervise.py"),
          "--max_restarts=0", "--"] + cmd


def _job_processes(out):
  """The live processes whose command line names the output directory `out` (the script, the
  launcher, the supervisor and horovodrun's shells)."""
  found = []
  for process in psutil.process_iter(["cmdline", "status"]):
    if process.info["status"] != psutil.STATUS_ZOMBIE and any(
        out in arg for arg in process.info["cmdline"] or ()):
      found.append(process)
  return found


def _wait_for_update(args, proc, log_path, output_path):
  """Waits until update `args.after` is logged; returns the update lines so far."""
  deadline = time.time() + args.timeout
  while True:
    if proc.poll() is not None:
      raise SystemExit("the run ended before update %d:\n%s" % (
          args.after, open(output_path).read()[-4000:]))
    steps = [line for line in _log_lines(log_path) if isinstance(line["step"], int)]
    if steps and steps[-1]["step"] >= args.after:
      return steps
    if time.time() > deadline:
      raise SystemExit("update %d not logged in %d s" % (args.after, args.timeout))
    time.sleep(0.05)


def _wait_for_the_end(proc, out, timeout):
  """(code, seconds to the signalled process's end, seconds to the last job process's end),
  timed from now."""
  start = time.time()
  code = proc.wait(timeout=timeout)
  exited = time.time() - start
  while _job_processes(out) and time.time() - start < timeout:
    time.sleep(0.05)
  if _job_processes(out):
    raise SystemExit("processes of the job still running %d s after the signal" % timeout)
  return code, exited, time.time() - start


def _stop_figures(log_path, sent, out):
  """What the run log and the output directory say of the stop (dict)."""
  lines = _log_lines(log_path)
  stops = [line for line in lines if line["step"] == "STOP"]
  stop_update = stops[-1]["data"]["update"] if stops else None
  # From the log's timestamps (seconds since the epoch): when the update in flight ended, when
  # the stop line was written (after the checkpoint).
  update_end = [float(line["timestamp"]) for line in lines
                if line["step"] == stop_update and "timestamp" in line]
  saved = _checkpoint_steps(out) if os.path.isdir(out) else []
  return {"rest_of_update_s": round(update_end[-1] - sent, 2) if update_end else None,
          "checkpoint_and_stop_s": (round(float(stops[-1]["timestamp"]) - update_end[-1], 2)
                                    if update_end and "timestamp" in stops[-1] else None),
          "stop_update": stop_update, "checkpoint_of_stop_update": stop_update in saved,
          "checkpoint_mb": (round(_checkpoint_bytes(out, stop_update) / 2**20, 1)
                            if stop_update in saved else None)}


def one_run(args, config_path, data_dir, rng):
  """Starts a run, signals it after update `args.after`; returns its measurements (dict)."""
  work_dir = tempfile.mkdtemp(prefix="stop_time_")
  out = os.path.join(work_dir, "out")
  log_path = os.path.join(work_dir, "dllog.json")
  output_path = os.path.join(work_dir, "output.txt")
  proc = None
  try:
    with open(output_path, "w") as sink:
      proc = subprocess.Popen(_command(args, config_path, data_dir, out, log_path),
                              cwd=REPO_ROOT, stdout=sink, stderr=subprocess.STDOUT,
                              start_new_session=True)
    steps = _wait_for_update(args, proc, log_path, output_path)
    update_times = [args.batch * (WORKERS if args.launcher != "one" else 1)
                    / line["data"]["throughput_train"] for line in steps[1:]
                    if line["data"].get("throughput_train")]
    # Somewhere inside the next update: the in-flight update is part of what is measured.
    if update_times:
      time.sleep(rng.uniform(0, statistics.median(update_times)))
    sent = time.time()
    proc.send_signal(getattr(signal, args.signal))
    code, exited, job_ended = _wait_for_the_end(proc, out, args.timeout)
    result = {"signal_to_exit_s": round(exited, 2), "signal_to_job_end_s": round(job_ended, 2),
              "exit_code": code,
              "median_update_s": (round(statistics.median(update_times), 2) if update_times
                                  else None)}
    result.update(_stop_figures(log_path, sent, out))
    return result
  finally:
    for process in _job_processes(out) + ([psutil.Process(proc.pid)]
                                          if proc and proc.poll() is None else []):
      try:
        process.kill()
      except psutil.NoSuchProcess:
        pass
    shutil.rmtree(work_dir, ignore_errors=True)


def start_load(count):
  """`count` busy-loop processes at the default priority (nice 0); returns their Popen objects."""
  return [subprocess.Popen([sys.executable, "-c", _BUSY_LOOP]) for _ in range(count)]


def _succeeded(args, run):
  """Whether a run ended as a graceful stop does under its launcher (a SIGKILL: by the kill)."""
  if args.signal == "SIGKILL":
    return run["exit_code"] == -signal.SIGKILL
  return run["exit_code"] == STOP_STATUS[args.launcher] and run["checkpoint_of_stop_update"]


def main(argv=None):
  args = parse_args(argv)
  config_path = flops.config_file(args.config)
  with open(config_path) as reader:
    vocab_size = json.load(reader)["vocab_size"]
  data_dir = throughput.cached_records(vocab_size, args.seq, args.predictions)
  rng = random.Random(0)
  load = start_load(args.load)
  try:
    runs = [one_run(args, config_path, data_dir, rng) for _ in range(args.repeats)]
    load_avg = round(os.getloadavg()[0], 2)
  finally:
    for process in load:
      process.kill()
      process.wait()
  worst = max(max(run["signal_to_exit_s"], run["signal_to_job_end_s"]) for run in runs)
  result = {"bench": "stop_time", "config": args.config, "seq": args.seq, "batch": args.batch,
            "signal": args.signal, "launcher": args.launcher, "load_processes": args.load,
            "cpus": os.cpu_count(), "load_avg_1min": load_avg, "runs": runs,
            "worst_signal_to_exit_s": worst, "target_s": TARGET_SECONDS,
            "within_target": worst < TARGET_SECONDS}
  print(json.dumps(result))
  print("%-5s %-8s %-8s %-12s %-10s %-6s %-8s %-9s %-9s" % (
      "run", "exit s", "job s", "rest of upd", "ckpt+stop", "code", "update", "ckpt MB",
      "update s"))
  for index, run in enumerate(runs):
    print("%-5d %-8.2f %-8.2f %-12s %-10s %-6d %-8s %-9s %-9s" % (
        index, run["signal_to_exit_s"], run["signal_to_job_end_s"], run["rest_of_update_s"],
        run["checkpoint_and_stop_s"], run["exit_code"], run["stop_update"],
        run["checkpoint_mb"], run["median_update_s"]))
  return 0 if all(_succeeded(args, run) for run in runs) else 1


if __name__ == "__main__":
  sys.exit(main())
