"""Speed and peak memory of create_pretraining_data.py: the original release's and ours.

Generates (once, cached in --work_dir) an English-like corpus of about 0.7 MB and 7 MB: sentences
drawn from a word-bigram model of the standard library's docstrings, 8 to 60 sentences per
document, in files of about 0.35 MB (a sharded corpus, as Wikipedia dumps are prepared); and an 8k
vocabulary trained on the 7 MB corpus. Then it runs both generators with seq 128, 20 predictions,
dupe_factor 5 on each corpus and reports, per run:

  instances/s after start-up: instances written / (exit time - time of the generator's first log
    line, which both write after their imports and before reading the input);
  peak RSS: the largest sum of the resident set sizes of the process and all its descendants,
    sampled every 20 ms (ours forks worker processes; shared pages are counted in each).

The median of --repeats runs is reported (peak RSS: the largest). Prints one JSON line, then a
table.

  PY=$(make -s python-path | tail -n1); $PY bench/create_data_speed.py
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

import psutil

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.join(REPO_ROOT, "scripts"))

import build_demo_data  # noqa: E402
from utils.data import vocabulary  # noqa: E402

FILE_BYTES = 350_000
SIZES = {"0.7MB": 700_000, "7MB": 7_000_000}
GENERATOR_FLAGS = ["--max_seq_length=128", "--max_predictions_per_seq=20", "--dupe_factor=5",
                   "--random_seed=12345", "--masked_lm_prob=0.15", "--short_seq_prob=0.1",
                   "--do_lower_case=True"]


def bigram_model():
  """(sentence-start words, word -> list of following words) from stdlib docstring sentences."""
  starts, following = [], {}
  for _, sentences in build_demo_data.stdlib_documents():
    for sentence in sentences:
      words = sentence.split()
      if len(words) < 3:
        continue
      starts.append(words[0])
      for word, next_word in zip(words, words[1:] + [None]):
        following.setdefault(word, []).append(next_word)
  return starts, following


def generate_sentence(rng, starts, following):
  """Walks the bigram model from a start word to a sentence end (3 to 40 words)."""
  words = [rng.choice(starts)]
  while len(words) < 40:
    next_word = rng.choice(following[words[-1]])
    if next_word is None:
      if len(words) >= 3:
        break
      next_word = rng.choice(starts)
    words.append(next_word)
  sentence = " ".join(words)
  return sentence if sentence[-1] in ".!?" else sentence + "."


def make_corpus(directory, total_bytes, seed):
  """Writes files of about FILE_BYTES each until `total_bytes`; returns their paths."""
  os.makedirs(directory, exist_ok=True)
  done = os.path.join(directory, ".complete")
  paths = [os.path.join(directory, "part-%03d.txt" % i)
           for i in range(max(1, round(total_bytes / FILE_BYTES)))]
  if os.path.exists(done):
    return paths
  rng = random.Random(seed)
  starts, following = bigram_model()
  for path in paths:
    written = 0
    documents = []
    while written < FILE_BYTES:
      sentences = [generate_sentence(rng, starts, following) for _ in range(rng.randint(8, 60))]
      document = "\n".join(sentences)
      documents.append(document)
      written += len(document.encode("utf-8")) + 2
    with open(path, "w", encoding="utf-8") as writer:
      writer.write("\n\n".join(documents) + "\n")
  open(done, "w").close()
  return paths


def tree_rss(process):
  """Sum of the RSS of `process` and its descendants, in bytes (0 once it has exited)."""
  total = 0
  try:
    processes = [process] + process.children(recursive=True)
  except psutil.Error:
    return 0
  for p in processes:
    try:
      total += p.memory_info().rss
    except psutil.Error:
      pass
  return total


def run(command, start_marker, count_pattern):
  """Runs a generator; returns instances, start-up and work seconds, rate and peak RSS (MB)."""
  launched = time.time()
  proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  process = psutil.Process(proc.pid)
  peak = [0]
  stop = threading.Event()

  def sample():
    while not stop.is_set():
      peak[0] = max(peak[0], tree_rss(process))
      stop.wait(0.02)

  sampler = threading.Thread(target=sample, daemon=True)
  sampler.start()
  started = None
  lines = []
  for line in proc.stderr:
    lines.append(line)
    if started is None and start_marker in line:
      started = time.time()
  proc.wait()
  finished = time.time()
  stop.set()
  sampler.join()
  log = "".join(lines)
  if proc.returncode != 0 or started is None:
    raise RuntimeError("%s failed (%d):\n%s" % (command[:4], proc.returncode, log[-3000:]))
  instances = int(re.findall(count_pattern, log)[-1])
  return {"instances": instances, "startup_s": round(started - launched, 2),
          "work_s": round(finished - started, 2),
          "instances_per_s": round(instances / (finished - started)),
          "peak_rss_mb": round(peak[0] / 2 ** 20)}


def run_original(inputs, vocab_file, output):
  command = [sys.executable, "-m", "tests.reference.original_bert", "create_pretraining_data",
             "--", "--input_file=%s" % ",".join(inputs), "--output_file=%s" % output,
             "--vocab_file=%s" % vocab_file] + GENERATOR_FLAGS
  return run(command, "*** Reading from input files ***", r"Wrote (\d+) total instances")


def run_ours(inputs, vocab_file, output_dir, num_workers):
  outputs = [os.path.join(output_dir, "ours-%03d.tfrecord" % i) for i in range(len(inputs))]
  command = [sys.executable, "create_pretraining_data.py", "--input_file=%s" % ",".join(inputs),
             "--output_file=%s" % ",".join(outputs), "--vocab_file=%s" % vocab_file]
  command += GENERATOR_FLAGS
  if num_workers:
    command.append("--num_workers=%d" % num_workers)
  return run(command, "create_pretraining_data: ", r"wrote (\d+) instances in total")


def summarise(runs):
  """Median rate and work time, largest peak RSS, instances of the first run."""
  return {"instances": runs[0]["instances"],
          "instances_per_s": round(statistics.median(r["instances_per_s"] for r in runs)),
          "work_s": round(statistics.median(r["work_s"] for r in runs), 2),
          "startup_s": round(statistics.median(r["startup_s"] for r in runs), 2),
          "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
          "runs": len(runs)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--work_dir", default=os.path.join(REPO_ROOT, "bench", "results",
                                                         "create_data"))
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--num_workers", type=int, default=0, help="ours; 0 = all cores")
  parser.add_argument("--skip_original", action="store_true")
  parser.add_argument("--corpora", default=",".join(SIZES),
                      help="comma-separated corpus sizes to run, of %s" % ", ".join(SIZES))
  args = parser.parse_args()
  names = args.corpora.split(",")
  unknown = [name for name in names if name not in SIZES]
  if unknown:
    parser.error("--corpora: unknown size(s) %s; expected some of %s"
                 % (", ".join(unknown), ", ".join(SIZES)))

  corpora = {name: make_corpus(os.path.join(args.work_dir, "corpus-" + name), SIZES[name],
                               seed=17) for name in names}
  # The vocabulary of the largest corpus run, built once per work directory and corpus.
  largest = max(names, key=SIZES.get)
  vocab_file = os.path.join(args.work_dir, "vocab-8k-%s.txt" % largest)
  if not os.path.exists(vocab_file):
    vocabulary.build_vocab(corpora[largest], 8192, vocab_file)
  output_dir = os.path.join(args.work_dir, "out")
  os.makedirs(output_dir, exist_ok=True)

  report = {"cores": psutil.cpu_count(), "vocab_size": 8192, "seq": 128, "predictions": 20,
            "dupe_factor": 5}
  for name, inputs in corpora.items():
    entry = {"text_mb": round(sum(os.path.getsize(p) for p in inputs) / 1e6, 2),
             "files": len(inputs)}
    if not args.skip_original:
      entry["original"] = summarise([
          run_original(inputs, vocab_file, os.path.join(output_dir, "original.tfrecord"))
          for _ in range(args.repeats)])
    entry["ours"] = summarise([run_ours(inputs, vocab_file, output_dir, args.num_workers)
                               for _ in range(args.repeats)])
    if "original" in entry:
      entry["speedup"] = round(entry["ours"]["instances_per_s"]
                               / entry["original"]["instances_per_s"], 1)
    report[name] = entry
  print(json.dumps(report, sort_keys=True))

  print("\n%-6s %-9s %6s %10s %10s %9s %12s %9s" % ("corpus", "generator", "files", "instances",
                                                    "inst/s", "work s", "peak RSS MB",
                                                    "start s"))
  for name in names:
    entry = report[name]
    for generator in ("original", "ours"):
      if generator in entry:
        r = entry[generator]
        print("%-6s %-9s %6d %10d %10d %9.2f %12d %9.2f" % (
            name, generator, entry["files"], r["instances"], r["instances_per_s"], r["work_s"],
            r["peak_rss_mb"], r["startup_s"]))
    if "speedup" in entry:
      print("%-6s speed-up (instances/s, ours / original): %.1fx" % (name, entry["speedup"]))


if __name__ == "__main__":
  main()
