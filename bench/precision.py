"""bf16 against fp32 and against the original release, side by side in one run: the whole job.

  PY=$(make -s python-path | tail -n1)
  $PY bench/precision.py --config base --batch 8 --steps 20 --warmup 5 --rounds 2

Each variant is a real training job on the same cached random TFRecords (bench/throughput.py's),
run in a fresh process for `--steps` updates, the variants interleaved round after round so that
drift of the machine falls on all of them alike:

* `original`: the original release's fp32 `run_pretraining.py` (PyPI bert-tensorflow, through
  tests/reference/original_bert.py; TPUEstimator on the CPU, AdamWeightDecay);
* `fp32`: ours, `run_pretraining.py` (LAMB);
* `bf16`: ours with `--bf16`;
* `rewrite`: ours in fp32 with the oneDNN bf16 graph rewrite on (ONEDNN_BF16_REWRITE=1);
* `bf16+rewrite`: both.

Speed is measured per update inside the job, the input pipeline, hooks and update included, from
what each job logs itself: ours its run log's per-update `throughput_train`, the original its
TPUEstimator's per-update "global_step/sec" line (x batch). A variant's figure is the median over
the updates after `--warmup`, in each round; the rounds' figures are reported and their median
taken. (Differences of whole-job wall times were tried first: a job's start-up varies by
several seconds, more than 10-20 updates' differences absorb.) Start-up: process start to the end
of the first update (ours: its first run-log line; the original: its first "global_step/sec"
line). Peak RSS of the job's process (os.wait4). MFU is taken against the fp32 and the bf16
matmul peak measured in the same run (bench/flops.py). Speed claims are the ratios inside one
run; absolute figures differ from machine to machine.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import flops  # noqa: E402
from bench import throughput  # noqa: E402

VARIANTS = ("original", "fp32", "bf16", "rewrite", "bf16+rewrite")
# The per-update line of the original's TPUEstimator (a step counter hook's log).
ORIGINAL_RATE = re.compile(r"global_step/sec: ([0-9.]+(?:[eE][-+]?[0-9]+)?)")
# absl's stamp at the start of a log line: "I1125 18:08:10.824156 ".
ABSL_STAMP = re.compile(r"[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(\.\d+) ")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python bench/precision.py", description=__doc__.split(
      "\n")[0])
  parser.add_argument("--config", default="base", help="bert_configs/<name>.json or a path")
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--predictions", type=int, default=20)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--steps", type=int, default=20, help="updates per job")
  parser.add_argument("--warmup", type=int, default=5,
                      help="first updates left out of the per-update median")
  parser.add_argument("--rounds", type=int, default=1)
  parser.add_argument("--variants", default="original,fp32,bf16",
                      help="comma separated, of: " + ", ".join(VARIANTS))
  parser.add_argument("--peak_runs", type=int, default=3)
  args = parser.parse_args(argv)
  args.variants = args.variants.split(",")
  unknown = [v for v in args.variants if v not in VARIANTS]
  if unknown:
    parser.error("--variants: unknown %s (expected some of %s)" % (unknown, ", ".join(VARIANTS)))
  if not 0 <= args.warmup < args.steps:
    parser.error("--warmup and --steps: expected 0 <= warmup < steps, got %d and %d"
                 % (args.warmup, args.steps))
  return args


def job_command(variant, args, config_path, data_dir, out_dir, steps):
  """(argv, extra environment) of one training job of `steps` updates; ours log every update
  to `out_dir`/bert_dllog.json."""
  common = ["--bert_config_file=%s" % config_path, "--output_dir=%s" % out_dir,
            "--train_batch_size=%d" % args.batch, "--max_seq_length=%d" % args.seq,
            "--max_predictions_per_seq=%d" % args.predictions,
            "--num_train_steps=%d" % steps, "--num_warmup_steps=1", "--learning_rate=1e-4",
            "--save_checkpoints_steps=%d" % (steps * 10)]
  if variant == "original":
    return ([sys.executable, "-m", "tests.reference.original_bert", "run_pretraining", "--",
             "--input_file=%s" % os.path.join(data_dir, "part-*.tfrecord"),
             "--do_train=true"] + common, {})
  argv = [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"),
          "--input_files_dir=%s" % data_dir, "--do_train", "--optimizer_type=lamb",
          "--display_loss_steps=1"] + common
  if variant.startswith("bf16"):
    argv.append("--bf16")
  env = {"ONEDNN_BF16_REWRITE": "1"} if variant.endswith("rewrite") else {}
  return argv, env


def run_job(argv, extra_env):
  """Runs one job; returns (start time.time(), its stderr lines, peak RSS in GB), or exits
  naming the job when it fails."""
  env = dict(os.environ, **extra_env)
  start = time.time()
  proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
  stderr = proc.stderr.read()
  _, status, usage = os.wait4(proc.pid, 0)
  proc.returncode = os.waitstatus_to_exitcode(status)
  if proc.returncode != 0:
    raise SystemExit("job failed (%d): %s\n%s" % (proc.returncode, " ".join(argv), stderr[-4000:]))
  return start, stderr.splitlines(), usage.ru_maxrss / 2**20


def original_updates(stderr_lines, batch, year):
  """(sequences/s of each update, time.time() of the first update's end) from the original's
  stderr: its absl-stamped "global_step/sec: X" lines, X x batch (TensorFlow also prints an
  unstamped "INFO:tensorflow:" copy of each, left out). absl's stamp has no year: `year`."""
  rates, first_end = [], None
  for line in stderr_lines:
    stamp, rate = ABSL_STAMP.match(line), ORIGINAL_RATE.search(line)
    if stamp and rate:
      rates.append(float(rate.group(1)) * batch)
      if first_end is None:
        month, day, hour, minute, second = (int(g) for g in stamp.groups()[:5])
        first_end = time.mktime((year, month, day, hour, minute, second, 0, 0, -1)) + float(
            stamp.group(6))
  return rates, first_end


def our_updates(out_dir):
  """(sequences/s of each update, time.time() of the first update's end) from our run log."""
  steps = throughput.logged_updates(os.path.join(out_dir, "bert_dllog.json"))
  return ([line["data"]["throughput_train"] for line in steps],
          float(steps[0]["timestamp"]) if steps else None)


def job_figures(variant, args, start, stderr_lines, out_dir):
  """(median seq/s over the updates after --warmup, start-up seconds) of one finished job."""
  if variant == "original":
    rates, first_end = original_updates(stderr_lines, args.batch, time.localtime(start).tm_year)
  else:
    rates, first_end = our_updates(out_dir)
  if len(rates) <= args.warmup or first_end is None:
    raise SystemExit("%s: %d per-update figures logged, expected more than --warmup %d"
                     % (variant, len(rates), args.warmup))
  return statistics.median(rates[args.warmup:]), first_end - start


def main(argv=None):
  args = parse_args(argv)
  from utils.runtime import cpu  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  config_path = flops.config_file(args.config)
  config = modeling.BertConfig.from_json_file(config_path)
  data_dir = throughput.cached_records(config.vocab_size, args.seq, args.predictions)
  peaks = {dtype: flops.measure_matmul_peak(args.peak_runs, dtype=dtype)
           for dtype in ("float32", "bfloat16")}
  flops_per_seq = flops.config_flops_per_sequence(config, args.seq, args.predictions)
  figures = {v: [] for v in args.variants}
  rss = {v: [] for v in args.variants}
  with tempfile.TemporaryDirectory(prefix="bench_precision_") as work:
    for round_index in range(args.rounds):
      for variant in args.variants:
        out_dir = os.path.join(work, "%s-%d" % (variant.replace("+", "_"), round_index))
        start, stderr_lines, peak_rss = run_job(*job_command(variant, args, config_path,
                                                             data_dir, out_dir, args.steps))
        seq_per_s, startup = job_figures(variant, args, start, stderr_lines, out_dir)
        figures[variant].append((seq_per_s, startup))
        rss[variant].append(peak_rss)
        print("round %d  %-13s %6.2f seq/s  start-up %5.1f s  %.2f GB" % (
            round_index + 1, variant, seq_per_s, startup, peak_rss), flush=True)
  result = {"config": args.config, "batch": args.batch, "seq": args.seq,
            "predictions": args.predictions, "steps": args.steps, "warmup": args.warmup,
            "rounds": args.rounds, "bf16_units": cpu.bf16_units(),
            "matmul_peak_gflops": {k: round(v / 1e9, 1) for k, v in peaks.items()},
            "model_flops_per_seq": flops_per_seq, "variants": {}}
  for variant in args.variants:
    seq_per_s = statistics.median(f[0] for f in figures[variant])
    result["variants"][variant] = {
        "seq_per_s": round(seq_per_s, 3),
        "seq_per_s_rounds": [round(f[0], 3) for f in figures[variant]],
        "startup_s": round(statistics.median(f[1] for f in figures[variant]), 1),
        "peak_rss_gb": round(max(rss[variant]), 2),
        "mfu_fp32_peak": round(flops.mfu(seq_per_s, flops_per_seq, peaks["float32"]), 4),
        "mfu_bf16_peak": round(flops.mfu(seq_per_s, flops_per_seq, peaks["bfloat16"]), 4),
    }
  print(json.dumps(result))
  print_table(result)
  return result


def print_table(result):
  variants = result["variants"]
  print("%s, batch %d, seq %d, %d predictions; matmul peak fp32 %.0f, bf16 %.0f GFLOP/s; "
        "bf16 units: %s" % (result["config"], result["batch"], result["seq"],
                            result["predictions"], result["matmul_peak_gflops"]["float32"],
                            result["matmul_peak_gflops"]["bfloat16"],
                            ", ".join(result["bf16_units"] or []) or "none"))
  print("| variant | seq/s (rounds) | x original | x ours fp32 | start-up s | peak RSS GB | "
        "MFU (fp32 peak) | MFU (bf16 peak) |")
  print("|---|---|---|---|---|---|---|---|")
  for name, v in variants.items():
    ratio = lambda other: ("%.2f" % (v["seq_per_s"] / variants[other]["seq_per_s"])
                           if other in variants else "")
    print("| %s | %.2f (%s) | %s | %s | %.1f | %.2f | %.1f%% | %.1f%% |" % (
        name, v["seq_per_s"], ", ".join("%.2f" % s for s in v["seq_per_s_rounds"]),
        ratio("original"), ratio("fp32"), v["startup_s"], v["peak_rss_gb"],
        100 * v["mfu_fp32_peak"], 100 * v["mfu_bf16_peak"]))


if __name__ == "__main__":
  main()
