"""bf16 against fp32 and against the original release, side by side in one run: the whole job.

  PY=$(make -s python-path | tail -n1)
  $PY bench/precision.py --config base --batch 8 --short 4 --long 14 --rounds 2

Each variant is a real training job on the same cached random TFRecords (bench/throughput.py's),
run in a fresh process for `--short` and for `--long` updates, the variants interleaved round after
round so that drift of the machine falls on all of them alike:

* `original`: the original release's fp32 `run_pretraining.py` (PyPI bert-tensorflow, through
  tests/reference/original_bert.py; TPUEstimator on the CPU, AdamWeightDecay);
* `fp32`: ours, `run_pretraining.py` (LAMB);
* `bf16`: ours with `--bf16` (the bf16 graph);
* `rewrite`: ours in fp32 with the oneDNN bf16 graph rewrite on (ONEDNN_BF16_REWRITE=1);
* `bf16+rewrite`: both.

The same measure for every variant, the original included (which logs no per-update throughput):
steady sequences/s = batch x (long - short) / (wall(long) - wall(short)), the whole job (input
pipeline, hooks, the update) with start-up and the final checkpoint cancelled out; start-up =
wall(short) - short x the steady time per update (interpreter, imports, graph, session, first
update's compilation and the final save); peak RSS of the job's process (os.wait4). MFU is taken
against the fp32 and the bf16 matmul peak measured in the same run (bench/flops.py). Speed claims
are the ratios inside one run; absolute figures differ from machine to machine.
"""

import argparse
import json
import os
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


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python bench/precision.py", description=__doc__.split(
      "\n")[0])
  parser.add_argument("--config", default="base", help="bert_configs/<name>.json or a path")
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--predictions", type=int, default=20)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--short", type=int, default=4, help="updates of the short job")
  parser.add_argument("--long", type=int, default=14, help="updates of the long job")
  parser.add_argument("--rounds", type=int, default=1)
  parser.add_argument("--variants", default="original,fp32,bf16",
                      help="comma separated, of: " + ", ".join(VARIANTS))
  parser.add_argument("--peak_runs", type=int, default=3)
  args = parser.parse_args(argv)
  args.variants = args.variants.split(",")
  unknown = [v for v in args.variants if v not in VARIANTS]
  if unknown:
    parser.error("--variants: unknown %s (expected some of %s)" % (unknown, ", ".join(VARIANTS)))
  if not 0 < args.short < args.long:
    parser.error("--short and --long: expected 0 < short < long, got %d and %d"
                 % (args.short, args.long))
  return args


def job_command(variant, args, config_path, data_dir, out_dir, steps):
  """(argv, extra environment) of one training job of `steps` updates."""
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
          "--display_loss_steps=%d" % steps] + common
  if variant.startswith("bf16"):
    argv.append("--bf16")
  env = {"ONEDNN_BF16_REWRITE": "1"} if variant.endswith("rewrite") else {}
  return argv, env


def run_job(argv, extra_env):
  """(wall seconds, peak RSS in GB) of one job; exits naming the job when it fails."""
  env = dict(os.environ, **extra_env)
  start = time.perf_counter()
  proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
  stderr = proc.stderr.read()
  _, status, usage = os.wait4(proc.pid, 0)
  wall = time.perf_counter() - start
  proc.returncode = os.waitstatus_to_exitcode(status)
  if proc.returncode != 0:
    raise SystemExit("job failed (%d): %s\n%s" % (proc.returncode, " ".join(argv), stderr[-4000:]))
  return wall, usage.ru_maxrss / 2**20


def steady(short, long_, wall_short, wall_long, batch):
  """(sequences/s, seconds per update, start-up seconds) from the two jobs' wall times."""
  per_update = (wall_long - wall_short) / (long_ - short)
  return batch / per_update, per_update, wall_short - short * per_update


def main(argv=None):
  args = parse_args(argv)
  import gpu_environment  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  config_path = throughput.config_file(args.config)
  config = modeling.BertConfig.from_json_file(config_path)
  data_dir = throughput.cached_records(config.vocab_size, args.seq, args.predictions)
  peaks = {dtype: flops.measure_matmul_peak(args.peak_runs, dtype=dtype)
           for dtype in ("float32", "bfloat16")}
  flops_per_seq = flops.config_flops_per_sequence(config, args.seq, args.predictions)
  walls = {(v, s): [] for v in args.variants for s in (args.short, args.long)}
  rss = {v: [] for v in args.variants}
  with tempfile.TemporaryDirectory(prefix="bench_precision_") as work:
    for round_index in range(args.rounds):
      for steps in (args.short, args.long):
        for variant in args.variants:
          out_dir = os.path.join(work, "%s-%d-%d" % (variant.replace("+", "_"), steps,
                                                     round_index))
          wall, peak_rss = run_job(*job_command(variant, args, config_path, data_dir, out_dir,
                                                steps))
          walls[(variant, steps)].append(wall)
          rss[variant].append(peak_rss)
          print("round %d  %-13s %3d updates  %7.1f s  %.2f GB" % (
              round_index + 1, variant, steps, wall, peak_rss), flush=True)
  result = {"config": args.config, "batch": args.batch, "seq": args.seq,
            "predictions": args.predictions, "short": args.short, "long": args.long,
            "rounds": args.rounds, "bf16_units": gpu_environment.bf16_units(),
            "matmul_peak_gflops": {k: round(v / 1e9, 1) for k, v in peaks.items()},
            "model_flops_per_seq": flops_per_seq, "variants": {}}
  for variant in args.variants:
    per_round = [steady(args.short, args.long, ws, wl, args.batch) for ws, wl in
                 zip(walls[(variant, args.short)], walls[(variant, args.long)])]
    seq_per_s = statistics.median(r[0] for r in per_round)
    result["variants"][variant] = {
        "seq_per_s": round(seq_per_s, 3),
        "seq_per_s_rounds": [round(r[0], 3) for r in per_round],
        "startup_s": round(statistics.median(r[2] for r in per_round), 1),
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
