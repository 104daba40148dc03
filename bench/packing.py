"""Packed against unpacked pretraining, the whole job side by side: sequences/s of the real
run_pretraining.py on the demo corpus.

  PY=$(make -s python-path | tail -n1); make data
  $PY bench/packing.py --seq 512 --batch 4 --steps 8 --warmup 2 --rounds 3
  $PY bench/packing.py --seq 128 --batch 16 --steps 12 --warmup 3 --rounds 3 --bf16

The records: the demo corpus's training text (data/demo/corpus/train-*.txt) through
create_pretraining_data.py at --seq (seq 128: 20 predictions, the demo's own records
data/demo/seq128/train; seq 512: 80 predictions, --dupe_factor=1), then the same records through
pack_pretraining_data.py (cached under bench/results/data/packing/). Each round runs
run_pretraining.py (BERT-base by default, the same flags, --train_batch_size rows) once on the
unpacked and once on the packed records, one after the other, alternating which goes first; the
figure of a run is the median over its updates after --warmup of the log's `throughput_train`
(sequences/s: the unpacked sequences a packed update trained, over its time) and of
`rows_per_sec`. The result is the median over the rounds of each, and the ratio of the medians;
the last line is one JSON object.

A run's few timed updates hold a sample of the packed rows, whose sequences per row vary, so the
measured ratio is also given over the whole data: packed rows/s x the data's sequences per row
(the packer's count) against unpacked sequences/s (`speedup_over_the_data`).
"""

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import flops  # noqa: E402
from bench import throughput  # noqa: E402

DATA_ROOT = os.path.join(REPO_ROOT, "bench", "results", "data", "packing")
DEMO = os.path.join(REPO_ROOT, "data", "demo")
PREDICTIONS = {128: 20, 512: 80}


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="base", help="a bert_configs/ name or a path")
  parser.add_argument("--seq", type=int, default=512, choices=sorted(PREDICTIONS))
  parser.add_argument("--batch", type=int, default=4, help="train_batch_size (rows)")
  parser.add_argument("--steps", type=int, default=8, help="optimizer updates per run")
  parser.add_argument("--warmup", type=int, default=2, help="updates left out of each figure")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--bf16", action="store_true", help="run_pretraining.py --bf16")
  parser.add_argument("--work_dir", default="/tmp/bench_packing")
  return parser.parse_args(argv)


def _run(cmd):
  """Runs a data command; returns its stdout (SystemExit with its output when it fails)."""
  proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
  if proc.returncode != 0:
    raise SystemExit("failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd),
                                              (proc.stdout + proc.stderr)[-4000:]))
  return proc.stdout


def unpacked_records(seq):
  """The directory of the demo corpus's unpacked training records at `seq` (made once)."""
  if seq == 128:
    return os.path.join(DEMO, "seq128", "train")
  out_dir = os.path.join(DATA_ROOT, "seq%d" % seq, "unpacked")
  if not glob.glob(os.path.join(out_dir, "*.tfrecord")):
    os.makedirs(out_dir, exist_ok=True)
    inputs = sorted(glob.glob(os.path.join(DEMO, "corpus", "train-*.txt")))
    outputs = [os.path.join(out_dir, os.path.basename(p)[:-4] + ".tfrecord") for p in inputs]
    _run([sys.executable, "create_pretraining_data.py", "--input_file=" + ",".join(inputs),
          "--output_file=" + ",".join(outputs), "--vocab_file=" + os.path.join(DEMO, "vocab.txt"),
          "--max_seq_length=%d" % seq, "--max_predictions_per_seq=%d" % PREDICTIONS[seq],
          "--dupe_factor=1"])
  return out_dir


def packed_records(seq, unpacked_dir):
  """The directory of the same records packed (made once); (directory, the packer's last line)."""
  out_dir = os.path.join(DATA_ROOT, "seq%d" % seq, "packed")
  summary = os.path.join(out_dir, "..", "packer_summary.txt")
  if not glob.glob(os.path.join(out_dir, "*.tfrecord")):
    output = _run([sys.executable, "pack_pretraining_data.py",
                   "--input_file=" + os.path.join(unpacked_dir, "*.tfrecord"),
                   "--output_dir=" + out_dir])
    with open(summary, "w") as writer:
      writer.write(output.strip().splitlines()[-1])
  with open(summary) as reader:
    return out_dir, reader.read().strip()


def sequences_per_row(packer_line):
  """The data's sequences per packed row, from the packer's last line ("packed N sequences into
  M packs ...")."""
  match = re.match(r"packed (\d+) sequences into (\d+) packs", packer_line)
  if not match:
    raise SystemExit("not the packer's last line: %r" % packer_line)
  return int(match.group(1)) / int(match.group(2))


def run_figures(args, config_path, data_dir, work_dir):
  """(sequences/s, rows/s) of one run: medians over its updates after the warmup."""
  options = throughput.parse_args([
      "--seq=%d" % args.seq, "--predictions=%d" % PREDICTIONS[args.seq],
      "--batch=%d" % args.batch, "--steps=%d" % args.steps, "--warmup=%d" % args.warmup]
      + (["--bf16"] if args.bf16 else []))
  lines = throughput.run_training(options, config_path, data_dir, work_dir)[0]
  steady = [line for line in lines if line["step"] > args.warmup]
  if not steady:
    raise SystemExit("no update after the warmup in %s" % work_dir)
  sequences = statistics.median(line["data"]["throughput_train"] for line in steady)
  rows = statistics.median(line["data"].get("rows_per_sec", line["data"]["throughput_train"])
                           for line in steady)
  return sequences, rows


def main(argv=None):
  args = parse_args(argv)
  config_path = flops.config_file(args.config)
  unpacked_dir = unpacked_records(args.seq)
  packed_dir, packer_line = packed_records(args.seq, unpacked_dir)
  print("packer: %s" % packer_line, flush=True)
  inputs = {"unpacked": unpacked_dir, "packed": packed_dir}
  figures = {"unpacked": [], "packed": []}
  for round_index in range(args.rounds):
    order = ["unpacked", "packed"] if round_index % 2 == 0 else ["packed", "unpacked"]
    for name in order:
      work_dir = os.path.join(args.work_dir, "round%d-%s" % (round_index, name))
      shutil.rmtree(work_dir, ignore_errors=True)
      os.makedirs(work_dir)
      sequences, rows = run_figures(args, config_path, inputs[name], work_dir)
      figures[name].append((sequences, rows))
      print("round %d %-8s %8.3f sequences/s %8.3f rows/s" % (round_index + 1, name, sequences,
                                                              rows), flush=True)
  medians = {name: (statistics.median(s for s, _ in values),
                    statistics.median(r for _, r in values)) for name, values in figures.items()}
  result = {
      "cpu": cpu_name(),
      "config": args.config, "seq": args.seq, "batch_rows": args.batch,
      "precision": "bf16" if args.bf16 else "fp32", "rounds": args.rounds,
      "packer": packer_line,
      "unpacked_sequences_per_sec": medians["unpacked"][0],
      "packed_sequences_per_sec": medians["packed"][0],
      "unpacked_rows_per_sec": medians["unpacked"][1],
      "packed_rows_per_sec": medians["packed"][1],
      "speedup_sequences_per_sec": medians["packed"][0] / medians["unpacked"][0],
      "data_sequences_per_row": sequences_per_row(packer_line),
      "speedup_over_the_data": (medians["packed"][1] * sequences_per_row(packer_line)
                                / medians["unpacked"][0]),
      "every_round": figures,
  }
  print("%s, %s seq %d, %d rows per batch: packed %.3f sequences/s, unpacked %.3f: %.2fx; "
        "over the data (%.3f sequences per row): %.2fx"
        % (result["cpu"], result["precision"], args.seq, args.batch,
           result["packed_sequences_per_sec"], result["unpacked_sequences_per_sec"],
           result["speedup_sequences_per_sec"], result["data_sequences_per_row"],
           result["speedup_over_the_data"]))
  print(json.dumps(result))
  return 0


def cpu_name():
  """The CPU's model name from /proc/cpuinfo."""
  with open("/proc/cpuinfo") as reader:
    for line in reader:
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  return "unknown CPU"


if __name__ == "__main__":
  sys.exit(main())
