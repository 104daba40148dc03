"""Records without masks (`--dynamic_masking`) against today's records: bytes on disk and
preparation time of create_pretraining_data.py on the same text.

The text and vocabulary are `bench/create_data_speed.py`'s (an English-like corpus drawn from a
word-bigram model of the standard library's docstrings, files of 0.35 MB; an 8k vocabulary;
cached in --work_dir, shared with that benchmark). Ours runs with seq 128, 20 predictions, three
ways, one after the other within each repeat:

  dupe10   fixed masks, --dupe_factor=10 (the original release's default, MLPerf's)
  dupe5    fixed masks, --dupe_factor=5 (NVIDIA's phase 1 and 2)
  dynamic  --dynamic_masking: no masks, one copy of the text (its default --dupe_factor)

and reports per way: instances, bytes of the records on disk, seconds of the whole command
(launch to exit, start-up included) and after start-up (`create_data_speed.run`), peak RSS; the
ratios of the fixed-mask ways to the dynamic one. The median of --repeats (peak RSS: the largest).
Prints one JSON line, then a table.

  PY=$(make -s python-path | tail -n1); $PY bench/unmasked_records.py
"""

import argparse
import json
import os
import statistics
import sys

import psutil

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from bench import create_data_speed  # noqa: E402
from utils.data import vocabulary  # noqa: E402

# The ways of preparing the records: name -> flags beside create_data_speed's common ones.
WAYS = {"dupe10": ["--dupe_factor=10"], "dupe5": ["--dupe_factor=5"],
        "dynamic": ["--dynamic_masking"]}
COMMON_FLAGS = ["--max_seq_length=128", "--random_seed=12345", "--short_seq_prob=0.1",
                "--do_lower_case=True"]
# The masking flags of the fixed-mask ways (create_pretraining_data.py refuses them with
# --dynamic_masking: the records hold no masks).
MASKING_FLAGS = ["--max_predictions_per_seq=20", "--masked_lm_prob=0.15"]
VOCAB_SIZE = 8192


def run_way(way, inputs, vocab_file, output_dir, num_workers):
  """One run of create_pretraining_data.py; `create_data_speed.run`'s figures and the records'
  bytes on disk."""
  directory = os.path.join(output_dir, way)
  os.makedirs(directory, exist_ok=True)
  outputs = [os.path.join(directory, "part-%03d.tfrecord" % i) for i in range(len(inputs))]
  command = [sys.executable, "create_pretraining_data.py", "--input_file=%s" % ",".join(inputs),
             "--output_file=%s" % ",".join(outputs), "--vocab_file=%s" % vocab_file]
  command += COMMON_FLAGS + WAYS[way] + ([] if way == "dynamic" else MASKING_FLAGS)
  if num_workers:
    command.append("--num_workers=%d" % num_workers)
  result = create_data_speed.run(command, "create_pretraining_data: ",
                                 r"wrote (\d+) instances in total")
  result["bytes"] = sum(os.path.getsize(path) for path in outputs)
  result["total_s"] = round(result["startup_s"] + result["work_s"], 2)
  return result


def summarise(runs):
  """Medians of the times, the largest peak RSS, the instances and bytes of the first run."""
  return {"instances": runs[0]["instances"], "bytes": runs[0]["bytes"],
          "total_s": round(statistics.median(r["total_s"] for r in runs), 2),
          "work_s": round(statistics.median(r["work_s"] for r in runs), 2),
          "peak_rss_mb": max(r["peak_rss_mb"] for r in runs), "runs": len(runs)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--work_dir", default=os.path.join(REPO_ROOT, "bench", "results",
                                                         "create_data"))
  parser.add_argument("--corpus", default="7MB", choices=sorted(create_data_speed.SIZES))
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--num_workers", type=int, default=0, help="0 = all cores")
  parser.add_argument("--quick", action="store_true",
                      help="the 0.7 MB corpus, one repeat (what the tests run)")
  args = parser.parse_args()
  if args.quick:
    args.corpus, args.repeats = "0.7MB", 1
  if args.repeats < 1:
    parser.error("--repeats must be >= 1, got %d" % args.repeats)

  inputs = create_data_speed.make_corpus(os.path.join(args.work_dir, "corpus-" + args.corpus),
                                         create_data_speed.SIZES[args.corpus], seed=17)
  vocab_file = os.path.join(args.work_dir, "vocab-8k-%s.txt" % args.corpus)
  if not os.path.exists(vocab_file):
    vocabulary.build_vocab(inputs, VOCAB_SIZE, vocab_file)
  output_dir = os.path.join(args.work_dir, "out-unmasked")
  runs = {way: [] for way in WAYS}
  for _ in range(args.repeats):  # the ways side by side in each repeat
    for way in WAYS:
      runs[way].append(run_way(way, inputs, vocab_file, output_dir, args.num_workers))
  report = {"cores": psutil.cpu_count(), "vocab_size": VOCAB_SIZE, "seq": 128, "predictions": 20,
            "corpus": args.corpus, "files": len(inputs),
            "text_mb": round(sum(os.path.getsize(p) for p in inputs) / 1e6, 2)}
  for way in WAYS:
    report[way] = summarise(runs[way])
  dynamic = report["dynamic"]
  for way in ("dupe10", "dupe5"):
    report[way]["bytes_vs_dynamic"] = round(report[way]["bytes"] / dynamic["bytes"], 2)
    report[way]["total_s_vs_dynamic"] = round(report[way]["total_s"] / dynamic["total_s"], 2)
  print(json.dumps(report, sort_keys=True))

  print("\n%-8s %10s %10s %9s %9s %9s %12s" % ("records", "instances", "MB", "total s", "work s",
                                               "x bytes", "x total s"))
  for way in WAYS:
    r = report[way]
    print("%-8s %10d %10.1f %9.2f %9.2f %9s %12s" % (
        way, r["instances"], r["bytes"] / 1e6, r["total_s"], r["work_s"],
        r.get("bytes_vs_dynamic", "1"), r.get("total_s_vs_dynamic", "1")))


if __name__ == "__main__":
  main()
