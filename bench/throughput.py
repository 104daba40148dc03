"""Training throughput of the real run_pretraining.py: sequences/s, model-FLOP utilisation,
start-up time and peak memory.

  PY=$(make -s python-path | tail -n1)
  $PY bench/throughput.py --config base --seq 128 --batch 8 --steps 20

It generates (once, cached under bench/results/data/) TFRecords of the requested shape with random
token ids, runs `run_pretraining.py --do_train` on them in a fresh process (Estimator, the real
input pipeline, the logging hook), and reads the per-update `throughput_train` of its dllogger log.
Reported, as one JSON line and a table:

* sequences/s: median, min and max over the update steps after `--warmup` updates;
* model FLOPs per sequence (bench/flops.py) and the matmul peak measured in this run (best of
  several 4096^3 TF matmuls, before the training process starts; bf16 ones with --bf16 or
  --onednn_bf16_rewrite), hence MFU;
* seconds from the training process's start to the end of its first update step;
* the training process's peak RSS.

--bf16 trains with run_pretraining.py --bf16 (the bf16 graph); --onednn_bf16_rewrite trains the
fp32 graph with the oneDNN bf16 rewrite on (ONEDNN_BF16_REWRITE=1, utils/runtime/session_config.py).
Either reports whether this CPU has bf16 units (avx512_bf16 / amx_bf16 in /proc/cpuinfo): without
them TensorFlow emulates bf16 and the figures say nothing about bf16's speed (the output says so).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import flops  # noqa: E402
from utils.runlog import dllogger_setup  # noqa: E402

DATA_ROOT = os.path.join(REPO_ROOT, "bench", "results", "data")
RECORDS_PER_FILE = 512
NUM_FILES = 4


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="base",
                      help="name of a bert_configs/ file (tiny, small, base, ...) or a path")
  parser.add_argument("--seq", type=int, default=128, help="max_seq_length")
  parser.add_argument("--predictions", type=int, default=20, help="max_predictions_per_seq")
  parser.add_argument("--batch", type=int, default=8, help="train_batch_size")
  parser.add_argument("--steps", type=int, default=20, help="optimizer updates to run")
  parser.add_argument("--warmup", type=int, default=5,
                      help="first updates left out of the statistics")
  parser.add_argument("--accumulation", type=int, default=1, help="num_accumulation_steps")
  parser.add_argument("--optimizer", default="lamb", choices=["lamb", "adam"])
  parser.add_argument("--use_xla", action="store_true")
  parser.add_argument("--manual_fp16", action="store_true")
  parser.add_argument("--bf16", action="store_true", help="run_pretraining.py --bf16")
  parser.add_argument("--onednn_bf16_rewrite", action="store_true",
                      help="the fp32 graph with the oneDNN bf16 rewrite (ONEDNN_BF16_REWRITE=1)")
  parser.add_argument("--intra_op_threads", type=int, default=0)
  parser.add_argument("--inter_op_threads", type=int, default=0)
  parser.add_argument("--peak_runs", type=int, default=5,
                      help="4096^3 matmuls for the peak (best of); 0 skips it")
  parser.add_argument("--extra", default="", help="more run_pretraining.py flags, space separated")
  parser.add_argument("--keep_output", action="store_true", help="keep the run's output_dir")
  args = parser.parse_args(argv)
  if args.steps <= args.warmup:
    parser.error("--steps (%d) must exceed --warmup (%d)" % (args.steps, args.warmup))
  if sum((args.manual_fp16, args.bf16, args.onednn_bf16_rewrite)) > 1:
    parser.error("--manual_fp16, --bf16 and --onednn_bf16_rewrite: choose one")
  return args


def precision_name(args):
  """"fp32", "fp16", "bf16" (the bf16 graph) or "bf16-onednn-rewrite"."""
  if args.manual_fp16:
    return "fp16"
  if args.bf16:
    return "bf16"
  return "bf16-onednn-rewrite" if args.onednn_bf16_rewrite else "fp32"


def uses_bf16(args):
  return bool(args.bf16 or args.onednn_bf16_rewrite)


def bf16_hardware_note(units):
  """What the figures of a bf16 run mean on this CPU, from `cpu.bf16_units()`."""
  if units is None:
    return "CPU flags unreadable (no /proc/cpuinfo flags): bf16 units unknown"
  if units:
    return "this CPU has bf16 units (%s)" % ", ".join(units)
  return ("this CPU has no bf16 units (neither avx512_bf16 nor amx_bf16 in /proc/cpuinfo): "
          "TensorFlow emulates bf16, so these figures are correctness runs, not bf16's speed")


def cached_records(vocab_size, seq, predictions):
  """Directory of random pretraining TFRecords of this shape, written on first use."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  directory = os.path.join(DATA_ROOT, "v%d_s%d_p%d" % (vocab_size, seq, predictions))
  done = os.path.join(directory, ".complete")
  if os.path.exists(done):
    return directory
  os.makedirs(directory, exist_ok=True)
  rng = np.random.RandomState(seq * 1000 + predictions)
  for index in range(NUM_FILES):
    path = os.path.join(directory, "part-%02d.tfrecord" % index)
    with tf.io.TFRecordWriter(path) as writer:
      for _ in range(RECORDS_PER_FILE):
        writer.write(_random_example(tf, np, rng, vocab_size, seq, predictions))
  open(done, "w").close()
  return directory


def _random_example(tf, np, rng, vocab_size, seq, predictions):
  """One serialised example: [CLS] A [SEP] B [SEP] of random ids, padding, masked positions."""
  length = rng.randint(seq // 2, seq + 1)
  ids = np.zeros(seq, np.int64)
  ids[:length] = rng.randint(5, vocab_size, size=length)
  split = length // 2
  ids[0], ids[split], ids[length - 1] = 2, 3, 3
  mask = (np.arange(seq) < length).astype(np.int64)
  segments = ((np.arange(seq) > split) & (np.arange(seq) < length)).astype(np.int64)
  real = min(predictions, max(1, int(round(length * 0.15))))
  positions = np.zeros(predictions, np.int64)
  positions[:real] = np.sort(rng.choice(np.arange(1, length - 1), real, replace=False))
  labels = np.zeros(predictions, np.int64)
  labels[:real] = rng.randint(5, vocab_size, size=real)
  weights = np.zeros(predictions, np.float32)
  weights[:real] = 1.0

  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values.tolist()))

  feature = {
      "input_ids": ints(ids), "input_mask": ints(mask), "segment_ids": ints(segments),
      "masked_lm_positions": ints(positions), "masked_lm_ids": ints(labels),
      "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=weights)),
      "next_sentence_labels": ints(np.array([rng.randint(0, 2)])),
  }
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def run_training(args, config_path, data_dir, work_dir, launcher=(), extra_flags=()):
  """Runs run_pretraining.py; returns (per-update dllogger lines, start wall time, max RSS KiB).

  The start time is taken just before the process is created, so "first step" includes the
  interpreter start, imports, graph building and session creation.
  """
  log_path = os.path.join(work_dir, "dllog.json")
  cmd = list(launcher) + [
      sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"),
      "--bert_config_file=%s" % config_path, "--input_files_dir=%s" % data_dir,
      "--output_dir=%s" % os.path.join(work_dir, "out"), "--dllog_path=%s" % log_path,
      "--do_train", "--max_seq_length=%d" % args.seq,
      "--max_predictions_per_seq=%d" % args.predictions,
      "--train_batch_size=%d" % args.batch, "--num_accumulation_steps=%d" % args.accumulation,
      "--num_train_steps=%d" % args.steps, "--num_warmup_steps=%d" % max(1, args.steps // 10),
      "--optimizer_type=%s" % args.optimizer, "--learning_rate=1e-4",
      "--display_loss_steps=1", "--save_checkpoints_steps=%d" % (args.steps * 10),
      "--intra_op_threads=%d" % args.intra_op_threads,
      "--inter_op_threads=%d" % args.inter_op_threads,
  ] + (["--use_xla"] if args.use_xla else []) + (
      ["--manual_fp16"] if args.manual_fp16 else []) + (["--bf16"] if args.bf16 else []) + (
      list(extra_flags) + args.extra.split())
  env = dict(os.environ)
  if args.onednn_bf16_rewrite:
    env["ONEDNN_BF16_REWRITE"] = "1"
  before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  start = time.time()
  proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env=env)
  max_rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  if proc.returncode != 0:
    raise SystemExit("run_pretraining.py failed (%d):\n%s" % (proc.returncode, proc.stderr[-5000:]))
  steps = logged_updates(log_path)
  if max_rss_kib == before:
    max_rss_kib = None  # an earlier child had a larger peak: not measurable here
  return steps, start, max_rss_kib


def logged_updates(log_path):
  """The per-update lines (those with `throughput_train`) of run_pretraining.py's run log."""
  with open(log_path) as f:
    lines = [record for record in map(dllogger_setup.parse_log_line, f) if record]
  return [line for line in lines if line["step"] != [] and "throughput_train" in line["data"]]


def summarise(values):
  """(median, min, max) of `values`."""
  return statistics.median(values), min(values), max(values)


def steady_summary(steps, warmup):
  """(median, min, max) sequences/s of the logged updates after the first `warmup`."""
  return summarise([line["data"]["throughput_train"] for line in steps[warmup:]])


def main(argv=None):
  args = parse_args(argv)
  from utils.runtime import cpu  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  config_path = flops.config_file(args.config)
  config = modeling.BertConfig.from_json_file(config_path)
  data_dir = cached_records(config.vocab_size, args.seq, args.predictions)
  peak_dtype = "bfloat16" if uses_bf16(args) else "float32"
  peak = flops.measure_matmul_peak(args.peak_runs, dtype=peak_dtype) if args.peak_runs else None
  hardware_note = bf16_hardware_note(cpu.bf16_units()) if uses_bf16(args) else None

  with tempfile.TemporaryDirectory(prefix="bench_throughput_") as work_dir:
    steps, start, max_rss_kib = run_training(args, config_path, data_dir, work_dir)
    if args.keep_output:
      kept = os.path.join(REPO_ROOT, "bench", "results", "last_run")
      subprocess.run(["rm", "-rf", kept], check=True)
      subprocess.run(["cp", "-r", work_dir, kept], check=True)
  if len(steps) != args.steps:
    raise SystemExit("expected %d logged updates, got %d" % (args.steps, len(steps)))
  median, low, high = steady_summary(steps, args.warmup)
  first_step_end = float(steps[0]["timestamp"]) - start
  flops_per_seq = flops.config_flops_per_sequence(config, args.seq, args.predictions)
  result = {
      "config": args.config, "seq": args.seq, "predictions": args.predictions,
      "batch": args.batch, "accumulation": args.accumulation, "optimizer": args.optimizer,
      "use_xla": args.use_xla, "manual_fp16": args.manual_fp16,
      "precision": precision_name(args), "steps": args.steps,
      "warmup": args.warmup, "seq_per_s_median": round(median, 3),
      "seq_per_s_min": round(low, 3), "seq_per_s_max": round(high, 3),
      "model_flops_per_seq": flops_per_seq,
      "matmul_peak_gflops": round(peak / 1e9, 1) if peak else None,
      "matmul_peak_dtype": peak_dtype,
      "mfu": round(flops.mfu(median, flops_per_seq, peak), 4) if peak else None,
      "first_step_s": round(first_step_end, 2),
      "peak_rss_gb": round(max_rss_kib / 2**20, 3) if max_rss_kib else None,
      "bf16_hardware": hardware_note,
  }
  print(json.dumps(result))
  print_table(result)
  return result


def print_table(result):
  rows = [
      ("config / seq / batch", "%s / %d / %d (accumulation %d, %s%s%s)" % (
          result["config"], result["seq"], result["batch"], result["accumulation"],
          result["optimizer"], ", XLA" if result["use_xla"] else "",
          ", " + result["precision"] if result["precision"] != "fp32" else "")),
      ("sequences/s median (min-max)", "%.2f (%.2f-%.2f) over %d updates" % (
          result["seq_per_s_median"], result["seq_per_s_min"], result["seq_per_s_max"],
          result["steps"] - result["warmup"])),
      ("model FLOPs / sequence", "%.3f GFLOP" % (result["model_flops_per_seq"] / 1e9)),
      ("%s matmul peak" % result["matmul_peak_dtype"], "%s GFLOP/s"
       % result["matmul_peak_gflops"]),
      ("MFU", "%.1f%%" % (100 * result["mfu"]) if result["mfu"] is not None else "n/a"),
      ("start to end of first step", "%.2f s" % result["first_step_s"]),
      ("peak RSS", "%s GB" % result["peak_rss_gb"]),
  ]
  if result.get("bf16_hardware"):
    rows.append(("bf16 hardware", result["bf16_hardware"]))
  width = max(len(name) for name, _ in rows)
  for name, value in rows:
    print("%-*s  %s" % (width, name, value))


if __name__ == "__main__":
  main()
