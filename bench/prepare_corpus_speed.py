"""Speed and peak memory of prepare_corpus.py on a MediaWiki dump, stage by stage, beside NVIDIA's
route (WikiExtractor, one article a line, NLTK-style splitting, the original generator).

The dump is synthetic (bench/synthetic_wiki.py: generated text in the markup of encyclopedia
articles, redirects and other namespaces), --dump_mb MB of XML, cached in --work_dir. For each
--workers count, side by side in one run:

  ours    prepare_corpus.py one stage a process: --stage=extract, shard, vocab (trained,
          --vocab_size; or --vocab_file as given), records of seq 128 (--phases=128:20), records
          of seq 512 (--phases=512:80), check; --num_shards: the dump's MB / --shard_mb;
  NVIDIA  `python -m wikiextractor.WikiExtractor DUMP -b 100M --processes W -o DIR` (NVIDIA's
          flags), then bench/nvidia_wiki_route.py's `format` (one article a line) and `split`
          (punkt trained on the text itself standing in for NLTK's English model, which is a
          download: see that module; every article held in memory, then written in as many
          shards as ours), then the original release's create_pretraining_data.py (bert-tensorflow
          1.0.4, through tests.reference.original_bert as bench/create_data_speed.py runs it) per
          phase, W processes at once, each on every W-th shard, with ours's vocabulary.
Both routes' records use seq 128 / 20 predictions and seq 512 / 80, dupe factor 5 (NVIDIA's) and
the generator flags of bench/create_data_speed.py. Only WikiExtractor and the original generator
use W processes on NVIDIA's side: its formatting and splitting run in one, as NVIDIA's do.

Per step: seconds from its start line (the first log line after the imports: ours
"prepare_corpus: <stage>: ", the original's "*** Reading from input files ***", the last of its W
processes to print it; WikiExtractor's launch) to the exit of its last process; MB/s: MB of the
dump's XML (decompressed) over those seconds; peak RSS: the largest sum of the resident set sizes
of the step's processes and their descendants, sampled every 20 ms (pages shared by forked workers
count in each), and the largest single process. Overall: the dump's MB over the sum of a route's
steps. The CPU model and the load average at the start and end are printed.

Memory flat in the dump's size: ours again, with --memory_workers workers, on dumps of each of
--memory_sizes MB (the same --shard_mb, so the shards stay the same size and their number grows
with the dump, as NVIDIA's 256 shards do for Wikipedia), each stage's peak RSS side by side.

Prints the tables, then one JSON line.

  PY=$(make -s python-path | tail -n1); $PY bench/prepare_corpus_speed.py
  $PY bench/prepare_corpus_speed.py --dump_mb=8 --memory_sizes=4,16 --workers=1
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import psutil

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from bench import create_data_speed  # noqa: E402
from bench import nvidia_wiki_route  # noqa: E402
from bench import sentence_split  # noqa: E402
from bench import synthetic_wiki  # noqa: E402

# (name, --phases, --max_seq_length, --max_predictions_per_seq) of each phase's records.
PHASES = (("seq128", "128:20", 128, 20), ("seq512", "512:80", 512, 80))
OUR_STAGES = ("extract", "shard", "vocab", "records seq128", "records seq512", "check")
NVIDIA_STEPS = ("wikiextractor", "format", "split", "original seq128", "original seq512")
# What is compared: (row, our stages, NVIDIA's steps).
COMPARED = (("text: XML -> sentence shards", ("extract", "shard"),
             ("wikiextractor", "format", "split")),
            ("records seq128", ("records seq128",), ("original seq128",)),
            ("records seq512", ("records seq512",), ("original seq512",)),
            ("overall", OUR_STAGES, NVIDIA_STEPS))
# bench/create_data_speed.py's generator flags but the sequence length and predictions (dupe
# factor 5: NVIDIA's).
COMMON_FLAGS = [flag for flag in create_data_speed.GENERATOR_FLAGS
                if not flag.startswith(("--max_seq_length=", "--max_predictions_per_seq="))]
ORIGINAL_START = "*** Reading from input files ***"


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--dump_mb", type=float, default=32.0, help="MB of XML of the timed dump")
  parser.add_argument("--workers", default="1,2", help="--num_workers values, comma-separated")
  parser.add_argument("--memory_sizes", default="8,32",
                      help="dump sizes in MB (comma-separated) whose peak RSS is compared")
  parser.add_argument("--memory_workers", type=int, default=1, help="--num_workers of those")
  parser.add_argument("--shard_mb", type=float, default=4.0,
                      help="MB of XML per shard: --num_shards is the dump's MB / this (2 at least)")
  parser.add_argument("--vocab_size", type=int, default=30522, help="ours's trained vocabulary")
  parser.add_argument("--vocab_file", help="a vocabulary for both routes (no training)")
  parser.add_argument("--text_model", choices=("stdlib", "sample"), default="stdlib",
                      help="the dump's word model: the standard library's docstrings (as "
                      "bench/create_data_speed.py's), or bench/data/sentences_labelled.txt")
  parser.add_argument("--train_mb", type=float, default=1.0,
                      help="MB of the articles the punkt stand-in is trained on")
  parser.add_argument("--skip_nvidia", action="store_true", help="ours only")
  parser.add_argument("--skip_original", action="store_true",
                      help="NVIDIA's text steps without the original generator")
  parser.add_argument("--work_dir", default=os.path.join(REPO_ROOT, "bench", "results",
                                                         "prepare_corpus"))
  parser.add_argument("--quick", action="store_true",
                      help="the tests' run: a 0.2 MB dump (0.1 MB for memory) of the sample's "
                      "words, a 1000-token vocabulary, NVIDIA's route without the original "
                      "generator (its TensorFlow start-up alone takes seconds)")
  args = parser.parse_args(argv)
  if args.quick:
    args.dump_mb, args.memory_sizes, args.shard_mb, args.vocab_size = 0.2, "0.1,0.2", 0.1, 1000
    args.text_model, args.train_mb, args.skip_original = "sample", 0.05, True
  try:
    args.workers = [int(w) for w in args.workers.split(",")]
    args.memory_sizes = [float(s) for s in args.memory_sizes.split(",")]
  except ValueError as e:
    parser.error("--workers, --memory_sizes: %s" % e)
  if min(args.workers) < 1 or min(args.memory_sizes) <= 0 or args.dump_mb <= 0:
    parser.error("--workers must be positive, --dump_mb and --memory_sizes above 0")
  return args


def num_shards(args, dump_mb):
  """The shards of a dump of `dump_mb` MB: one per --shard_mb, 2 at least."""
  return max(2, int(round(dump_mb / args.shard_mb)))


def make_dump(args, size_mb, model):
  """The dump of `size_mb` MB (written once per work directory): (path, its counts)."""
  path = os.path.join(args.work_dir, "dump-%gMB-%s.xml" % (size_mb, args.text_model))
  done = path + ".json"
  if not os.path.exists(done):
    os.makedirs(args.work_dir, exist_ok=True)
    counts = synthetic_wiki.write_dump(path, int(size_mb * 1e6), model(), seed=17)
    with open(done, "w") as writer:
      json.dump(counts, writer)
  with open(done) as reader:
    return path, json.load(reader)


def process_rss(processes):
  """(sum, largest) of the RSS of `processes` and all their descendants, in bytes."""
  sizes = []
  for process in processes:
    try:
      tree = [process] + process.children(recursive=True)
    except psutil.Error:
      continue
    for member in tree:
      try:
        sizes.append(member.memory_info().rss)
      except psutil.Error:
        pass
  return sum(sizes), max(sizes, default=0)


def timed_run(commands, start_line=None, log_path=os.devnull):
  """Runs `commands` at once and times them.

  Args:
    commands: list of argument lists, run from the repository's root.
    start_line: text of the log line (stderr) after which a process's work starts; None: its
      launch.
    log_path: where their stdout and stderr are written (appended).

  Returns:
    dict: seconds (from the last process's start line to the last exit), startup_s (launch to that
    line), peak_rss_mb (largest sum over the processes' trees), largest_process_mb, logs (each
    process's stderr).

  Raises:
    RuntimeError: a process failed or never printed its start line (its log's end shown).
  """
  launched = time.time()
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  with open(log_path, "a") as log_file:
    procs = [subprocess.Popen(command, cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.PIPE,
                              text=True, env=env) for command in commands]
  watched = [psutil.Process(proc.pid) for proc in procs]
  starts, logs, peak = [None] * len(procs), [[] for _ in procs], [0, 0]

  def read(index):
    for line in procs[index].stderr:
      logs[index].append(line)
      if starts[index] is None and (start_line is None or start_line in line):
        starts[index] = time.time()

  readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(len(procs))]
  for reader in readers:
    reader.start()
  while any(proc.poll() is None for proc in procs):
    total, largest = process_rss(watched)
    peak[:] = max(peak[0], total), max(peak[1], largest)
    time.sleep(0.02)
  finished = time.time()
  for reader in readers:
    reader.join()
  log = "".join(line for lines in logs for line in lines)
  with open(log_path, "a") as log_file:
    log_file.write(log)
  failed = [c for c, p, s in zip(commands, procs, starts) if p.returncode != 0 or s is None]
  if failed:
    raise RuntimeError("%s failed:\n%s" % (" ".join(failed[0][:6]), log[-3000:]))
  started = launched if start_line is None else max(starts)
  return dict(seconds=round(finished - started, 3), startup_s=round(started - launched, 3),
              peak_rss_mb=round(peak[0] / 2 ** 20), largest_process_mb=round(peak[1] / 2 ** 20),
              logs=["".join(lines) for lines in logs])


def our_commands(args, dump, out, workers, shards):
  """[(stage, command)] of ours, one stage a process."""
  base = [sys.executable, "prepare_corpus.py", "--input=%s" % dump, "--output_dir=%s" % out,
          "--num_shards=%d" % shards, "--num_workers=%d" % workers] + COMMON_FLAGS
  base += ["--vocab_file=%s" % args.vocab_file] if args.vocab_file else [
      "--vocab_size=%d" % args.vocab_size]
  every_phase = "--phases=" + ",".join(phases for _, phases, _, _ in PHASES)
  commands = [(stage, base + [every_phase, "--stage=" + stage])
              for stage in ("extract", "shard", "vocab")]
  commands += [("records " + name, base + ["--phases=" + phases, "--stage=records"])
               for name, phases, _, _ in PHASES]
  return commands + [("check", base + [every_phase, "--stage=check"])]


def run_ours(args, dump, out, workers, shards):
  """{stage: timed_run's figures (records stages: "instances" of the train split)}, and the
  sentence text's bytes (OUT/text)."""
  shutil.rmtree(out, ignore_errors=True)
  os.makedirs(out)
  results = {}
  for stage, command in our_commands(args, dump, out, workers, shards):
    result = timed_run([command], "prepare_corpus: %s: " % stage.split()[0],
                       os.path.join(out, "log.txt"))
    if stage.startswith("records"):
      with open(os.path.join(out, "log.txt")) as reader:
        counts = re.findall(r"%s train (\d+)" % stage.split()[1], reader.read())
      result["instances"] = int(counts[-1]) if counts else 0
    results[stage] = result
  text_bytes = sum(os.path.getsize(os.path.join(root, name))
                   for root, _, names in os.walk(os.path.join(out, "text")) for name in names)
  return results, text_bytes


def original_commands(shard_files, vocab_file, output_dir, phase, workers):
  """The original generator on the shards, `workers` processes, each on every workers-th shard
  (bench/create_data_speed.py's way of running it)."""
  _, _, seq_length, predictions = phase
  commands = []
  for index in range(min(workers, len(shard_files))):
    commands.append([
        sys.executable, "-m", "tests.reference.original_bert", "create_pretraining_data", "--",
        "--input_file=%s" % ",".join(shard_files[index::workers]),
        "--output_file=%s" % os.path.join(output_dir, "%s-%d.tfrecord" % (phase[0], index)),
        "--vocab_file=%s" % vocab_file, "--max_seq_length=%d" % seq_length,
        "--max_predictions_per_seq=%d" % predictions] + COMMON_FLAGS)
  return commands


def original_instances(logs):
  """The instances the original generator's processes wrote, from their logs (each writes its
  count twice, in TensorFlow's line and in absl's: the last one is taken)."""
  return sum(int(re.findall(r"Wrote (\d+) total instances", log)[-1]) for log in logs)


def run_nvidia(args, dump, work, workers, shards, vocab_file):
  """{step: timed_run's figures} of NVIDIA's route (the original generator's steps: "instances"
  written)."""
  shutil.rmtree(work, ignore_errors=True)
  os.makedirs(work)
  log = os.path.join(work, "log.txt")
  route = [sys.executable, "-m", "bench.nvidia_wiki_route"]
  formatted, shard_dir = os.path.join(work, "formatted.txt"), os.path.join(work, "shards")
  results = {
      "wikiextractor": timed_run([[
          sys.executable, "-m", "wikiextractor.WikiExtractor", dump, "-b", "100M",
          "--processes", str(workers), "-o", os.path.join(work, "extracted")]], None, log),
      "format": timed_run([route + ["format", "--extracted=%s" % os.path.join(work, "extracted"),
                                    "--output=%s" % formatted]], nvidia_wiki_route.START_LINE,
                          log),
      "split": timed_run([route + ["split", "--input=%s" % formatted,
                                   "--output_dir=%s" % shard_dir, "--num_shards=%d" % shards,
                                   "--train_mb=%g" % args.train_mb]],
                         nvidia_wiki_route.START_LINE, log)}
  if args.skip_original:
    return results
  shard_files = sorted(os.path.join(shard_dir, name) for name in os.listdir(shard_dir))
  records = os.path.join(work, "records")
  os.makedirs(records)
  for phase in PHASES:
    result = timed_run(original_commands(shard_files, vocab_file, records, phase, workers),
                       ORIGINAL_START, log)
    result["instances"] = original_instances(result["logs"])
    results["original " + phase[0]] = result
  return results


def add_rates(results, dump_bytes):
  """Each step's MB/s of the dump's XML; the route's overall figures under "overall"."""
  for result in results.values():
    result.pop("logs", None)
    result["mb_per_s"] = round(dump_bytes / 1e6 / max(result["seconds"], 1e-9), 3)
  seconds = sum(result["seconds"] for result in results.values())
  results["overall"] = dict(seconds=round(seconds, 3),
                            mb_per_s=round(dump_bytes / 1e6 / max(seconds, 1e-9), 3),
                            peak_rss_mb=max(r["peak_rss_mb"] for r in results.values()))
  return results


def compared(report):
  """{workers: [(row, ours MB/s, NVIDIA's MB/s, ours / NVIDIA)]} of the rows both routes ran."""
  table = {}
  for workers, routes in report["runs"].items():
    rows = []
    for row, our_stages, nvidia_steps in COMPARED:
      nvidia = routes.get("nvidia", {})
      if not all(step in nvidia for step in nvidia_steps):
        continue
      rate = lambda results, steps: report["dump"]["bytes"] / 1e6 / sum(
          results[step]["seconds"] for step in steps)
      ours_rate, nvidia_rate = rate(routes["ours"], our_stages), rate(nvidia, nvidia_steps)
      rows.append((row, round(ours_rate, 3), round(nvidia_rate, 3),
                   round(ours_rate / nvidia_rate, 2)))
    table[workers] = rows
  return table


def peak_memory(results):
  """{stage: [peak RSS of its process tree, of its largest process] (MB)} of ours."""
  return {stage: [results[stage]["peak_rss_mb"], results[stage]["largest_process_mb"]]
          for stage in OUR_STAGES}


def stdlib_model():
  """bench/create_data_speed.py's bigram model of the standard library's docstrings, without
  the words that read as markup."""
  return synthetic_wiki.clean_model(create_data_speed.bigram_model())


def measure(args):
  """The report: dict of cpu, load averages, dump, runs ({workers: {"ours", "nvidia"}}),
  memory ({size MB: `peak_memory`}), text_fraction, compared."""
  model = synthetic_wiki.sample_model if args.text_model == "sample" else stdlib_model
  report = dict(cpu=sentence_split.cpu_model(), cores=psutil.cpu_count(),
                load_average_start=[round(x, 2) for x in os.getloadavg()])
  dump, counts = make_dump(args, args.dump_mb, model)
  report["dump"] = dict(counts, mb=args.dump_mb, shards=num_shards(args, args.dump_mb))
  report["runs"], memory = {}, {}
  for workers in args.workers:
    out = os.path.join(args.work_dir, "ours-w%d" % workers)
    ours, text_bytes = run_ours(args, dump, out, workers, report["dump"]["shards"])
    report["text_fraction"] = round(text_bytes / counts["bytes"], 3)
    routes = report["runs"][str(workers)] = dict(ours=add_rates(ours, counts["bytes"]))
    if workers == args.memory_workers:
      memory[args.dump_mb] = peak_memory(ours)
    if not args.skip_nvidia:
      vocab = args.vocab_file or os.path.join(out, "vocab.txt")
      routes["nvidia"] = add_rates(run_nvidia(
          args, dump, os.path.join(args.work_dir, "nvidia-w%d" % workers), workers,
          report["dump"]["shards"], vocab), counts["bytes"])
      shutil.rmtree(os.path.join(args.work_dir, "nvidia-w%d" % workers))
    shutil.rmtree(out)
  for size in args.memory_sizes:
    if size not in memory:
      path, _ = make_dump(args, size, model)
      out = os.path.join(args.work_dir, "ours-memory")
      ours, _ = run_ours(args, path, out, args.memory_workers, num_shards(args, size))
      memory[size] = peak_memory(ours)
      shutil.rmtree(out)
  report["memory"] = {"%g" % size: memory[size] for size in sorted(args.memory_sizes)}
  report["memory_workers"] = args.memory_workers
  report["compared"] = compared(report)
  report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
  return report


def print_tables(report):
  """The steps of each route at each worker count, the comparison, the memory."""
  dump = report["dump"]
  print("CPU: %s, %d cores; load average (1, 5, 15 min) %s at the start, %s at the end" % (
      report["cpu"], report["cores"], report["load_average_start"], report["load_average_end"]))
  print("dump: %.1f MB of XML, %d pages, %d articles, %d shards; its sentences %.0f%% of it" % (
      dump["bytes"] / 1e6, dump["pages"], dump["articles"], dump["shards"],
      100 * report.get("text_fraction", 0)))
  workers = list(report["runs"])
  print("\n%-7s %-16s " % ("route", "step") + " ".join(
      "%8s %8s %7s %7s" % ("w%s s" % w, "MB/s", "RSS MB", "start s") for w in workers))
  for route, steps in (("ours", OUR_STAGES), ("nvidia", NVIDIA_STEPS)):
    for step in steps + ("overall",):
      runs = [report["runs"][w].get(route, {}).get(step) for w in workers]
      if not any(runs):
        continue
      print("%-7s %-16s " % (route, step) + " ".join(
          "%8.2f %8.3f %7d %7s" % (r["seconds"], r["mb_per_s"], r["peak_rss_mb"],
                                   "%.2f" % r["startup_s"] if "startup_s" in r else "-")
          if r else "%33s" % "-" for r in runs))
  print()
  for w, routes in report["runs"].items():
    written = ["%s %s %d" % (route, step.split()[-1], result["instances"])
               for route, results in sorted(routes.items())
               for step, result in results.items() if "instances" in result]
    print("%s worker(s), training instances written: %s" % (w, ", ".join(written)))
  for w, rows in report["compared"].items():
    if rows:
      print("\n%d worker(s), MB of XML/s: %-28s %9s %9s %9s" % (int(w), "", "ours", "NVIDIA",
                                                             "ours/NV"))
      for row, ours, nvidia, ratio in rows:
        print("  %-46s %9.3f %9.3f %8.2fx" % (row, ours, nvidia, ratio))
  sizes = list(report["memory"])
  print("\npeak RSS MB of ours (%d worker), process tree / largest process, by dump size:"
        % report["memory_workers"])
  print("  %-16s " % "stage" + " ".join("%12s" % (s + " MB") for s in sizes))
  for stage in OUR_STAGES:
    print("  %-16s " % stage + " ".join(
        "%12s" % ("%d / %d" % tuple(report["memory"][s][stage])) for s in sizes))
  peaks = [max(tree for tree, _ in report["memory"][s].values()) for s in sizes]
  print("  the largest stage's process tree: %s MB for dumps of %s MB" % (
      " -> ".join(map(str, peaks)), " -> ".join(sizes)))


def main(argv=None):
  args = parse_args(argv)
  report = measure(args)
  print_tables(report)
  print(json.dumps(report, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
