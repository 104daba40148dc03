"""Peak memory of prepare_corpus.py, stage by stage, on a dump with one huge page: a paragraph of
--page_mb MB of words without any punctuation (no sentence end anywhere), among the ordinary
articles of a small synthetic dump (bench/synthetic_wiki.py).

Such a page is one paragraph and, for a sentence splitter, one sentence of millions of words: the
case that tests whether memory is bounded by design (docs/DATA.md, "Speed and memory") rather
than by the longest paragraph of the input. Each stage runs as its own process
(`prepare_corpus.py --stage=S`, one worker, `--skip_bad_documents`: a page over the reader's
bound, bad_input.MAX_DOCUMENT_BYTES, is read past and counted); its peak RSS is the largest
resident set size of the process and its descendants, sampled every 20 ms
(bench/prepare_corpus_speed.py's `timed_run`). Printed per stage: seconds and peak RSS, then
one JSON line. Run it at several page sizes to see whether the figure depends on the page's
size: over the bound (50, 10) and just under it (4.0).

  PY=$(make -s python-path | tail -n1); $PY bench/corpus_memory.py --page_mb=50
  $PY bench/corpus_memory.py --quick
"""

import argparse
import json
import os
import random
import re
import shutil
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from bench import prepare_corpus_speed  # noqa: E402
from bench import synthetic_wiki  # noqa: E402

STAGES = ("extract", "shard", "vocab", "records", "check")
_LONG_PAGE = """\
  <page>
    <title>A page without punctuation</title>
    <ns>0</ns>
    <id>999999</id>
    <revision>
      <id>999999</id>
      <timestamp>2024-01-01T00:00:00Z</timestamp>
      <contributor><ip>192.0.2.1</ip></contributor>
      <model>wikitext</model>
      <format>text/x-wiki</format>
      <text xml:space="preserve">"""


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--page_mb", type=float, default=50.0,
                      help="MB of the page's one paragraph without punctuation")
  parser.add_argument("--articles_mb", type=float, default=2.0,
                      help="MB of XML of ordinary synthetic articles around it")
  parser.add_argument("--vocab_size", type=int, default=8192)
  parser.add_argument("--phases", default="128:20,512:80")
  parser.add_argument("--work_dir", default=os.path.join(REPO_ROOT, "bench", "results",
                                                         "corpus_memory"))
  parser.add_argument("--quick", action="store_true",
                      help="the tests' run: a 0.3 MB page among 0.1 MB of articles, a "
                      "1000-token vocabulary, one phase")
  args = parser.parse_args(argv)
  if args.quick:
    args.page_mb, args.articles_mb, args.vocab_size, args.phases = 0.3, 0.1, 1000, "128:20"
  if args.page_mb <= 0 or args.articles_mb <= 0:
    parser.error("--page_mb and --articles_mb must be above 0")
  return args


def _words():
  """The lower-case words of the hand-labelled sample, letters only."""
  with open(synthetic_wiki.SAMPLE, encoding="utf-8") as reader:
    return sorted(set(re.findall(r"[a-z]+", reader.read().lower())))


def write_long_page_dump(path, page_bytes, articles_bytes, seed=17):
  """Writes a dump: ordinary synthetic articles, then one page whose text is `page_bytes` bytes
  of random words separated by single spaces (no punctuation, no newline).

  Returns:
    the number of words of the long page.
  """
  synthetic_wiki.write_dump(path, articles_bytes, synthetic_wiki.sample_model(), seed=seed)
  with open(path, encoding="utf-8") as reader:
    articles = reader.read()
  rng, words = random.Random(seed), _words()
  count = written = 0
  with open(path, "w", encoding="utf-8", newline="\n") as writer:
    writer.write(articles[:articles.rindex("</mediawiki>")] + _LONG_PAGE)
    while written < page_bytes:
      chunk = " ".join(rng.choice(words) for _ in range(10000)) + " "
      writer.write(chunk)
      written += len(chunk)
      count += 10000
    writer.write("</text>\n    </revision>\n  </page>\n</mediawiki>\n")
  return count


def run_stages(args, dump, out):
  """{stage: timed_run's figures (logs dropped)}, one process a stage, one worker."""
  base = [sys.executable, "prepare_corpus.py", "--input=%s" % dump, "--output_dir=%s" % out,
          "--num_shards=2", "--num_workers=1", "--eval_fraction=0", "--skip_bad_documents",
          "--vocab_size=%d" % args.vocab_size, "--phases=%s" % args.phases]
  results = {}
  for stage in STAGES:
    log = os.path.join(args.work_dir, "%s.log" % stage)
    result = prepare_corpus_speed.timed_run([base + ["--stage=" + stage]], log_path=log)
    del result["logs"]
    with open(log, encoding="utf-8") as reader:
      result["summary"] = [line.strip() for line in reader if "documents read" in line][-1]
    results[stage] = result
  return results


def main(argv=None):
  args = parse_args(argv)
  shutil.rmtree(args.work_dir, ignore_errors=True)
  os.makedirs(args.work_dir)
  dump = os.path.join(args.work_dir, "dump.xml")
  words = write_long_page_dump(dump, int(args.page_mb * 1e6), int(args.articles_mb * 1e6))
  results = run_stages(args, dump, os.path.join(args.work_dir, "out"))
  print("CPU: %s; a %.1f MB page of %d words without punctuation among %.1f MB of articles" % (
      prepare_corpus_speed.sentence_split.cpu_model(), args.page_mb, words, args.articles_mb))
  print("%-8s %9s %12s" % ("stage", "seconds", "peak RSS MB"))
  for stage, result in results.items():
    print("%-8s %9.1f %12d" % (stage, result["seconds"], result["peak_rss_mb"]))
  print(results["check"]["summary"])
  print(json.dumps(dict(page_mb=args.page_mb, page_words=words, articles_mb=args.articles_mb,
                        stages=results), sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
