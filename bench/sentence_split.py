"""Sentence segmenters on a hand-labelled sample: how often they are right, and how fast.

The candidates are pysbd, syntok and blingfire (each when installed; a missing one is reported as
"not installed") and a naive regex baseline: a split after ".", "!" or "?" and a space before a
capital, a digit, a quote or a bracket. `utils/corpus/sentences.py` uses the one chosen here
(docs/DECISIONS.md, section Data).

The sample, `bench/data/sentences_labelled.txt`, is original encyclopedia-style prose split by
hand: one paragraph a block, blocks separated by a blank line, one sentence a line. A segmenter is
given each block's lines joined by single spaces. It is dense with the hard cases (abbreviations,
initials, decimals, times, ellipses, quotations, brackets, sentences starting with a digit or a
lower-case word, URLs, e-mail addresses, Greek, Cyrillic and CJK words), so its figures are lower
than those of ordinary text. The truth follows the meaning: a closing quote or bracket belongs to
the sentence it closes (`... paint."`, `(... in 1840.)`), a citation mark to the sentence before
it (`wooden.[1]`), `"Why?" she asked.` is one sentence, an abbreviation ending a sentence ends it
(`... at 4 p.m.`), and text after an ellipsis continues the sentence unless it starts a new one
with a capital.

Figures per candidate:
  exact: sample sentences the segmenter returns exactly (both ends right, no split inside);
  precision / recall of the boundaries inside a paragraph, each boundary taken as an offset among
    the paragraph's non-space characters (a segmenter's own spacing does not count);
  kept: paragraphs whose non-space characters the sentences give back in order (and, on the demo
    corpus, the paragraphs they do not: "demo lost");
  MB/s: megabytes (UTF-8) of paragraphs split per CPU second of this process (time.process_time:
    one core; other load on a shared machine is not counted), on the sample repeated to
    --speed_mb, on one paragraph of --long_kb of the sample's text (a one-document-per-line input
    gives a whole article as one paragraph: a time that grows faster than the length shows here)
    and on the demo corpus's documents (data/demo/corpus/*.txt, a document's lines joined;
    `make data`) when it is there; a candidate stops after --max_seconds of CPU;
  core-h 20GB: core-hours to split a Wikipedia dump's ~20 GB of text at the sample's rate.
Prints the table, then one JSON line. --show_errors lists each candidate's wrong sentences;
--disagree=A,B draws boundaries of the demo corpus that only one of two candidates has, to judge
by hand whether the sample's ranking holds on other text.

  PY=$(make -s python-path | tail -n1); $PY bench/sentence_split.py [--show_errors]
  $PY bench/sentence_split.py --disagree=pysbd,sentences.py --count=40 --seed=7
"""

import argparse
import glob
import importlib.metadata
import json
import os
import random
import re
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
SAMPLE = os.path.join(REPO_ROOT, "bench", "data", "sentences_labelled.txt")
DEMO_CORPUS = os.path.join(REPO_ROOT, "data", "demo", "corpus")
WIKIPEDIA_BYTES = 20e9

_NAIVE_BOUNDARY = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


def naive_regex():
  """The baseline's split function: text -> list of sentences."""
  return lambda text: [s for s in _NAIVE_BOUNDARY.split(text.strip()) if s]


def pysbd_split():
  """pysbd's English rules, text kept as written (clean=False): text -> list of sentences."""
  import pysbd
  segmenter = pysbd.Segmenter(language="en", clean=False)
  return lambda text: [s.strip() for s in segmenter.segment(text) if s.strip()]


def syntok_split():
  """syntok's segmenter: text -> list of sentences."""
  from syntok import segmenter

  def split(text):
    # Sentences as slices of the input between their first and last token's offsets.
    return [text[sentence[0].offset:sentence[-1].offset + len(sentence[-1].value)]
            for paragraph in segmenter.analyze(text) for sentence in paragraph]
  return split


def blingfire_split():
  """blingfire's sentence breaker alone: text -> list of sentences."""
  import blingfire
  return lambda text: [s for s in blingfire.text_to_sentences(text).split("\n") if s.strip()]


def project_split():
  """utils/corpus/sentences.py: the chosen segmenter with its repairs."""
  from utils.corpus import sentences
  return sentences.split_sentences


# (name, the package whose version is reported or None, a function returning the split function).
CANDIDATES = (("pysbd", "pysbd", pysbd_split), ("syntok", "syntok", syntok_split),
              ("blingfire", "blingfire", blingfire_split), ("naive regex", None, naive_regex),
              ("sentences.py", "blingfire", project_split))


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--sample", default=SAMPLE, help="the hand-labelled sample")
  parser.add_argument("--speed_mb", type=float, default=5.0,
                      help="megabytes of the repeated sample to split for the speed figure")
  parser.add_argument("--max_seconds", type=float, default=30.0,
                      help="CPU seconds at most per candidate and speed input")
  parser.add_argument("--long_kb", type=float, default=100.0,
                      help="kilobytes of the one long paragraph timed for the `MB/s <N>kB` figure")
  parser.add_argument("--no_demo", action="store_true", help="no speed figure on the demo corpus")
  parser.add_argument("--show_errors", action="store_true",
                      help="print each candidate's wrong sentences: the truth and its output")
  parser.add_argument("--disagree", metavar="A,B",
                      help="also print --count random boundaries of the demo corpus that one of "
                      "candidates A and B has and the other has not, to judge by hand")
  parser.add_argument("--count", type=int, default=40, help="boundaries --disagree prints")
  parser.add_argument("--seed", type=int, default=7, help="of --disagree's random draw")
  parser.add_argument("--quick", action="store_true",
                      help="the tests' run: speed on 20 kB of the sample and a 5 kB paragraph, "
                      "no demo corpus")
  args = parser.parse_args(argv)
  names = [name for name, _, _ in CANDIDATES]
  if args.disagree and (len(args.disagree.split(",")) != 2
                        or not set(args.disagree.split(",")) <= set(names)):
    parser.error("--disagree: two of %s, comma-separated" % ", ".join(names))
  if args.quick:
    args.speed_mb, args.long_kb, args.max_seconds, args.no_demo = 0.02, 5.0, 1.0, True
  return args


def read_labelled(path):
  """The sample: a list of paragraphs, each the list of its sentences (blank-line blocks)."""
  with open(path, encoding="utf-8") as reader:
    blocks = reader.read().split("\n\n")
  return [[line.strip() for line in block.splitlines() if line.strip()]
          for block in blocks if block.strip()]


def read_demo_paragraphs(directory):
  """The demo corpus's documents (one sentence a line, blank line between documents), each
  joined into one paragraph; [] when the corpus is not there."""
  paragraphs = []
  for path in sorted(glob.glob(os.path.join(directory, "*.txt"))):
    with open(path, encoding="utf-8") as reader:
      paragraphs += [" ".join(block.split("\n")).strip() for block in reader.read().split("\n\n")
                     if block.strip()]
  return paragraphs


def spans(sentences):
  """Sentences -> their (start, end) offsets among the non-space characters of their text."""
  result, start = [], 0
  for sentence in sentences:
    end = start + len("".join(sentence.split()))
    result.append((start, end))
    start = end
  return result


def score_paragraph(truth, predicted):
  """One paragraph's counts: exact sentences, true / predicted / shared inner boundaries, and
  whether the prediction keeps the paragraph's non-space characters (1 or 0)."""
  true_spans, predicted_spans = spans(truth), spans(predicted)
  true_bounds = {end for _, end in true_spans[:-1]}
  predicted_bounds = {end for _, end in predicted_spans[:-1]}
  kept = "".join("".join(truth).split()) == "".join("".join(predicted).split())
  return {"exact": len(set(true_spans) & set(predicted_spans)), "true_bounds": len(true_bounds),
          "predicted_bounds": len(predicted_bounds),
          "shared_bounds": len(true_bounds & predicted_bounds), "kept": int(kept)}


def accuracy(split, paragraphs):
  """The sample's figures for one split function, and its wrong sentences [(truth, output)]."""
  totals = dict.fromkeys(("exact", "true_bounds", "predicted_bounds", "shared_bounds", "kept"), 0)
  errors = []
  for truth in paragraphs:
    predicted = split(" ".join(truth))
    counts = score_paragraph(truth, predicted)
    for key in totals:
      totals[key] += counts[key]
    predicted_spans = spans(predicted)
    for sentence, (start, end) in zip(truth, spans(truth)):
      if (start, end) not in predicted_spans:
        # The output's sentences that overlap the true one.
        errors.append((sentence, [piece for piece, (a, b) in zip(predicted, predicted_spans)
                                  if a < end and b > start]))
  sentences = sum(len(truth) for truth in paragraphs)
  return {"sentences": sentences, "exact": totals["exact"], "wrong": sentences - totals["exact"],
          "precision": totals["shared_bounds"] / max(1, totals["predicted_bounds"]),
          "recall": totals["shared_bounds"] / max(1, totals["true_bounds"]),
          "kept": totals["kept"], "paragraphs": len(paragraphs)}, errors


def speed(split, paragraphs, max_seconds):
  """MB (UTF-8) split per CPU second, over `paragraphs` or as many as `max_seconds` allow."""
  done_bytes = 0
  start = time.process_time()
  for paragraph in paragraphs:
    split(paragraph)
    done_bytes += len(paragraph.encode("utf-8"))
    if time.process_time() - start >= max_seconds:
      break
  return done_bytes / 1e6 / max(time.process_time() - start, 1e-9)


def text_lost(split, paragraphs):
  """How many of `paragraphs` the split does not give back (their non-space characters in
  order)."""
  return sum("".join(paragraph.split()) != "".join("".join(split(paragraph)).split())
             for paragraph in paragraphs)


def repeated(paragraphs, num_bytes):
  """The paragraphs repeated in order until they hold at least `num_bytes` bytes (UTF-8)."""
  size = sum(len(p.encode("utf-8")) for p in paragraphs)
  return paragraphs * max(1, -(-int(num_bytes) // size))


def long_paragraph(paragraphs, num_chars):
  """One paragraph: the paragraphs joined, repeated and cut at a space before `num_chars`."""
  text = " ".join(repeated(paragraphs, num_chars))
  return text[:text.rfind(" ", 0, int(num_chars))]


def speed_inputs(args, paragraphs):
  """{input name: its paragraphs} for the speed figures."""
  inputs = {"sample": repeated(paragraphs, args.speed_mb * 1e6),
            "%dkB" % args.long_kb: [long_paragraph(paragraphs, args.long_kb * 1e3)]}
  demo = [] if args.no_demo else read_demo_paragraphs(DEMO_CORPUS)
  if demo:
    inputs["demo"] = demo
  return inputs


def load(package, factory):
  """(split function or None, "package version", "-" without a package, or "not installed")."""
  try:
    split = factory()
    version = "%s %s" % (package, importlib.metadata.version(package)) if package else "-"
  except (ImportError, importlib.metadata.PackageNotFoundError):
    return None, "not installed"
  return split, version


def cpu_model():
  """The CPU's model name, family and model number from /proc/cpuinfo ("unknown" elsewhere)."""
  fields = {}
  try:
    with open("/proc/cpuinfo") as reader:
      for line in reader:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
        if not line.strip():
          break
  except OSError:
    pass
  if "model name" not in fields:
    return "unknown"
  return "%s (family %s, model %s)" % (fields["model name"], fields.get("cpu family", "?"),
                                       fields.get("model", "?"))


def measure(args):
  """{candidate name: its figures, or {"version": "not installed"}}, {name: wrong sentences}."""
  labelled = read_labelled(args.sample)
  inputs = speed_inputs(args, [" ".join(p) for p in labelled])
  results, errors = {}, {}
  for name, package, factory in CANDIDATES:
    split, version = load(package, factory)
    if split is None:
      results[name] = {"version": version}
      continue
    figures, errors[name] = accuracy(split, labelled)
    figures["version"] = version
    figures["mb_per_s"] = {input_name: speed(split, texts, args.max_seconds)
                           for input_name, texts in inputs.items()}
    if "demo" in inputs:
      figures["demo_paragraphs_lost"] = text_lost(split, inputs["demo"])
    figures["core_hours_20gb"] = WIKIPEDIA_BYTES / 1e6 / figures["mb_per_s"]["sample"] / 3600
    results[name] = figures
  return results, errors, list(inputs)


def print_table(results, input_names):
  """One row a candidate: accuracy on the sample, MB/s per speed input, core-hours for 20 GB."""
  rates = ["MB/s " + name for name in input_names]
  print("%-12s %-16s %7s %9s %6s %5s " % ("candidate", "version", "exact", "precision", "recall",
                                          "kept")
        + " ".join("%11s" % rate for rate in rates) + " %9s %11s" % ("demo lost", "core-h 20GB"))
  for name, r in results.items():
    if "exact" not in r:
      print("%-12s %-16s" % (name, r["version"]))
      continue
    print("%-12s %-16s %7s %9.3f %6.3f %5s " % (
        name, r["version"], "%d/%d" % (r["exact"], r["sentences"]), r["precision"], r["recall"],
        "%d/%d" % (r["kept"], r["paragraphs"]))
          + " ".join("%11.3f" % r["mb_per_s"][input_name] for input_name in input_names)
          + " %9s %11.1f" % (r.get("demo_paragraphs_lost", "-"), r["core_hours_20gb"]))


def disagreements(splits, paragraphs, count, seed):
  """`count` random boundaries (seeded) that one of two split functions puts in a paragraph and
  the other does not: [(index of the split that has it, the text before it, the text after)]."""
  found = []
  for paragraph in paragraphs:
    bounds = [{end for _, end in spans(split(paragraph))[:-1]} for split in splits]
    # Non-space offset -> position in the paragraph, just after that many non-space characters.
    positions = [i + 1 for i, char in enumerate(paragraph) if not char.isspace()]
    for offset in sorted(bounds[0] ^ bounds[1]):
      at = positions[offset - 1]
      found.append((0 if offset in bounds[0] else 1, paragraph[max(0, at - 70):at],
                    paragraph[at:at + 50]))
  return random.Random(seed).sample(found, min(count, len(found))), len(found)


def print_disagreements(args):
  """The --disagree listing: where two candidates differ on the demo corpus."""
  names = args.disagree.split(",")
  factories = {name: (package, factory) for name, package, factory in CANDIDATES}
  splits = [load(*factories[name])[0] for name in names]
  demo = read_demo_paragraphs(DEMO_CORPUS)
  if None in splits or not demo:
    raise SystemExit("--disagree: needs both candidates installed and the demo corpus (make data)")
  sample, total = disagreements(splits, demo, args.count, args.seed)
  print("\n%d boundaries of the demo corpus are one candidate's only; %d at random (seed %d), "
        "whose boundary:" % (total, len(sample), args.seed))
  for which, before, after in sample:
    print("%-12s %s || %s" % (names[which], before, after))


def main(argv=None):
  args = parse_args(argv)
  results, errors, input_names = measure(args)
  print("CPU: %s; one core (CPU seconds of this process)" % cpu_model())
  print_table(results, input_names)
  for name, wrong in errors.items() if args.show_errors else ():
    print("\n%s: %d sentences wrong" % (name, len(wrong)))
    for sentence, output in wrong:
      print("  truth:  %s\n  output: %s" % (sentence, " | ".join(output)))
  if args.disagree:
    print_disagreements(args)
  print(json.dumps({"cpu": cpu_model(), "results": results}, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
