"""Builds the demo data from text every Python installation has: no download.

The corpus is the docstrings of the standard library's modules (read with `ast`, nothing is
imported), one document per module, one sentence per line. Then a WordPiece vocabulary is trained on
the training documents and TFRecords are written for max_seq_length 128 / 20 predictions:

  OUTPUT_DIR/corpus/train-NN.txt, corpus/eval-00.txt   every 20th module is held out for eval
  OUTPUT_DIR/vocab.txt                                  --vocab_size tokens, [PAD] [UNK] [CLS] ...
  OUTPUT_DIR/seq128/train/train-NN.tfrecord            --input_files_dir=OUTPUT_DIR/seq128/train
  OUTPUT_DIR/seq128/eval/eval-00.tfrecord               --eval_files_dir=OUTPUT_DIR/seq128/eval
  OUTPUT_DIR/bert_config.json                           BERT-tiny with the vocabulary's size
  OUTPUT_DIR/stats.json                                 sizes, counts, build time, fingerprint

The result depends only on the Python version (its standard library) and on this repository's code.
A second run with the same inputs finds stats.json up to date and does nothing.

  python scripts/build_demo_data.py --output_dir=data/demo
"""

import ast
import hashlib
import json
import os
import re
import shutil
import sys
import sysconfig
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
from utils.runtime import cli  # noqa: E402

from utils.data import instances  # noqa: E402
from utils.data import vocabulary  # noqa: E402
from utils.datafiles import generator  # noqa: E402

# Directories of the standard library that hold tests, bundled third-party code or demos.
_SKIPPED_DIRECTORIES = {"site-packages", "dist-packages", "test", "tests", "idle_test",
                        "__pycache__", "turtledemo", "ensurepip", "pydoc_data"}
# A sentence ends at ., ! or ? followed by whitespace and an upper-case letter, digit or quote.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[`])")
_WORD = re.compile(r"[A-Za-z]{2,}")
_HELD_OUT_EVERY = 20
_NUM_TRAIN_SHARDS = 4
# The model the demo trains: BERT-tiny, its vocabulary the demo's.
_TINY_CONFIG = "bert_configs/tiny.json"
# The code that decides the data's bytes: a change to any of them rebuilds it.
_CODE_FILES = ("scripts/build_demo_data.py", "tokenization.py", "utils/data/vocabulary.py",
               "utils/datafiles/generator.py", "utils/data/instances.py",
               "utils/data/record_encoder.py", _TINY_CONFIG)

FLAGS = flags.FLAGS


def stdlib_module_files():
  """The standard library's .py files (tests, demos and bundled packages left out), sorted."""
  root = sysconfig.get_paths()["stdlib"]
  files = []
  for directory, subdirectories, names in os.walk(root):
    subdirectories[:] = sorted(
        d for d in subdirectories
        if d not in _SKIPPED_DIRECTORIES and not d.startswith((".", "config-")))
    files += [os.path.join(directory, name) for name in sorted(names) if name.endswith(".py")]
  return sorted(files, key=lambda path: os.path.relpath(path, root))


def _docstrings(tree):
  """Docstrings of a module and of its classes and functions, in source order."""
  out = []

  def visit(node):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      docstring = ast.get_docstring(node, clean=True)
      if docstring:
        out.append(docstring)
    for child in ast.iter_child_nodes(node):
      if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        visit(child)

  visit(tree)
  return out


def docstring_sentences(docstring):
  """Prose sentences of a docstring: code, doctests, indented blocks and lists are dropped.

  Args:
    docstring: a cleaned docstring (common indentation removed).

  Returns:
    list of str, one sentence each, whitespace collapsed.
  """
  sentences = []
  for paragraph in re.split(r"\n\s*\n", docstring):
    lines = paragraph.split("\n")
    if any(line.startswith((" ", "\t", ">>>", "...", "-", "*", "+", "|", "=")) for line in lines):
      continue
    text = " ".join(line.strip() for line in lines)
    if len(_WORD.findall(text)) < 3:
      continue
    for sentence in _SENTENCE_END.split(text):
      sentence = sentence.strip()
      if len(_WORD.findall(sentence)) >= 2:
        sentences.append(sentence)
  return sentences


def stdlib_documents():
  """One document per standard-library module: (module path, list of sentences).

  Modules without at least two prose sentences are left out.
  """
  root = sysconfig.get_paths()["stdlib"]
  documents = []
  for path in stdlib_module_files():
    try:
      with open(path, "rb") as reader:
        tree = ast.parse(reader.read(), filename=path)
    except (SyntaxError, ValueError, UnicodeDecodeError):
      continue
    sentences = [s for docstring in _docstrings(tree) for s in docstring_sentences(docstring)]
    if len(sentences) >= 2:
      documents.append((os.path.relpath(path, root), sentences))
  return documents


def write_corpus(documents, paths):
  """Writes `documents` round-robin into `paths`: a sentence per line, blank line between them."""
  shards = [[] for _ in paths]
  for index, (_, sentences) in enumerate(documents):
    shards[index % len(paths)].append("\n".join(sentences))
  for path, shard in zip(paths, shards):
    with open(path, "w", encoding="utf-8") as writer:
      writer.write("\n\n".join(shard) + "\n")


def write_tiny_config(vocab_size, path):
  """Writes bert_configs/tiny.json with `vocab_size` (int) to `path`."""
  with open(os.path.join(REPO_ROOT, _TINY_CONFIG)) as reader:
    config = json.load(reader)
  config["vocab_size"] = vocab_size
  with open(path, "w") as writer:
    json.dump(config, writer, indent=2, sort_keys=True)
    writer.write("\n")


def fingerprint(settings):
  """Hash of what the data depends on: Python version, the building code, the settings."""
  digest = hashlib.sha256()
  digest.update(sys.version.encode())
  digest.update(json.dumps(settings, sort_keys=True).encode())
  for name in _CODE_FILES:
    with open(os.path.join(REPO_ROOT, name), "rb") as reader:
      digest.update(reader.read())
  return digest.hexdigest()


def up_to_date(output_dir, key):
  """True when stats.json has fingerprint `key` and every file it lists exists with its size."""
  stats_path = os.path.join(output_dir, "stats.json")
  try:
    with open(stats_path) as reader:
      stats = json.load(reader)
  except (OSError, ValueError):
    return False
  if stats.get("fingerprint") != key:
    return False
  return all(os.path.isfile(os.path.join(output_dir, name))
             and os.path.getsize(os.path.join(output_dir, name)) == size
             for name, size in stats.get("files", {}).items())


def make_directories(output_dir, max_seq_length):
  """Creates the corpus and record directories, the records of an earlier build removed.

  Returns:
    (corpus directory, training records directory, evaluation records directory).
  """
  corpus_dir = os.path.join(output_dir, "corpus")
  records_dir = os.path.join(output_dir, "seq%d" % max_seq_length)
  # Training and evaluation records in separate directories: a directory given as
  # --input_files_dir is read whole, so evaluation records next to the training ones would be
  # trained on. Records of an earlier build (or layout) go first.
  shutil.rmtree(records_dir, ignore_errors=True)
  train_dir = os.path.join(records_dir, "train")
  eval_dir = os.path.join(records_dir, "eval")
  for directory in (corpus_dir, train_dir, eval_dir):
    os.makedirs(directory, exist_ok=True)
  return corpus_dir, train_dir, eval_dir


def write_corpora(documents, corpus_dir):
  """Writes the training documents into _NUM_TRAIN_SHARDS files and every _HELD_OUT_EVERY-th
  document into the evaluation file.

  Returns:
    (training documents, held-out documents, training text files, evaluation text files).
  """
  train = [d for i, d in enumerate(documents) if i % _HELD_OUT_EVERY != _HELD_OUT_EVERY - 1]
  held_out = [d for i, d in enumerate(documents) if i % _HELD_OUT_EVERY == _HELD_OUT_EVERY - 1]
  train_text = [os.path.join(corpus_dir, "train-%02d.txt" % i) for i in range(_NUM_TRAIN_SHARDS)]
  eval_text = [os.path.join(corpus_dir, "eval-00.txt")]
  write_corpus(train, train_text)
  write_corpus(held_out, eval_text)
  return train, held_out, train_text, eval_text


def write_records(settings, train_text, eval_text, vocab_file, train_dir, eval_dir):
  """Writes the training records (`settings["dupe_factor"]` passes) and the evaluation records
  (one pass) with the generator of create_pretraining_data.py (`utils/datafiles/generator.py`).

  Returns:
    (training record files, evaluation record files, training counts, evaluation counts): the
    counts as `generator.create_pretraining_data` returns them.
  """
  options = instances.GeneratorOptions(
      max_seq_length=settings["max_seq_length"],
      max_predictions_per_seq=settings["max_predictions_per_seq"], masked_lm_prob=0.15,
      short_seq_prob=0.1, dupe_factor=settings["dupe_factor"], do_whole_word_mask=False,
      random_seed=settings["random_seed"])
  train_records = [os.path.join(train_dir, "train-%02d.tfrecord" % i)
                   for i in range(_NUM_TRAIN_SHARDS)]
  eval_records = [os.path.join(eval_dir, "eval-00.tfrecord")]
  train_counts = generator.create_pretraining_data(
      train_text, train_records, vocab_file, options)
  eval_counts = generator.create_pretraining_data(
      eval_text, eval_records, vocab_file, options._replace(dupe_factor=1))
  return train_records, eval_records, train_counts, eval_counts


def build(output_dir, settings):
  """Builds everything; returns the stats dict (also written to stats.json)."""
  start = time.time()
  stats_path = os.path.join(output_dir, "stats.json")
  if os.path.exists(stats_path):
    os.remove(stats_path)  # an interrupted build must not look finished
  corpus_dir, train_dir, eval_dir = make_directories(output_dir, settings["max_seq_length"])

  documents = stdlib_documents()
  train, held_out, train_text, eval_text = write_corpora(documents, corpus_dir)
  corpus_seconds = time.time() - start
  logging.info("corpus: %d modules (%d held out), %d sentences, %.2f MB in %.1f s",
               len(documents), len(held_out), sum(len(s) for _, s in documents),
               sum(os.path.getsize(p) for p in train_text + eval_text) / 1e6, corpus_seconds)

  vocab_file = os.path.join(output_dir, "vocab.txt")
  vocabulary.build_vocab(train_text, settings["vocab_size"], vocab_file, do_lower_case=True)
  vocab_seconds = time.time() - start - corpus_seconds
  config_file = os.path.join(output_dir, "bert_config.json")
  with open(vocab_file) as reader:
    write_tiny_config(sum(1 for _ in reader), config_file)

  train_records, eval_records, train_counts, eval_counts = write_records(
      settings, train_text, eval_text, vocab_file, train_dir, eval_dir)
  records_seconds = time.time() - start - corpus_seconds - vocab_seconds

  files = {os.path.relpath(p, output_dir): os.path.getsize(p)
           for p in train_text + eval_text + [vocab_file, config_file] + train_records
           + eval_records}
  stats = {
      "python": sys.version.split()[0],
      "modules": len(documents),
      "train_modules": len(train),
      "eval_modules": len(held_out),
      "sentences": sum(len(s) for _, s in documents),
      "corpus_bytes": {"train": sum(os.path.getsize(p) for p in train_text),
                       "eval": sum(os.path.getsize(p) for p in eval_text)},
      "vocab_size": settings["vocab_size"],
      "max_seq_length": settings["max_seq_length"],
      "max_predictions_per_seq": settings["max_predictions_per_seq"],
      "dupe_factor": {"train": settings["dupe_factor"], "eval": 1},
      "instances": {"train": sum(train_counts.values()), "eval": sum(eval_counts.values())},
      "train_files": [os.path.relpath(p, output_dir) for p in train_records],
      "eval_files": [os.path.relpath(p, output_dir) for p in eval_records],
      "seconds": {"corpus": round(corpus_seconds, 2), "vocab": round(vocab_seconds, 2),
                  "records": round(records_seconds, 2),
                  "total": round(time.time() - start, 2)},
      "files": files,
      "fingerprint": fingerprint(settings),
  }
  with open(stats_path, "w") as writer:
    json.dump(stats, writer, indent=2, sort_keys=True)
    writer.write("\n")
  return stats


def main(_):
  settings = {"vocab_size": FLAGS.vocab_size, "max_seq_length": FLAGS.max_seq_length,
              "max_predictions_per_seq": FLAGS.max_predictions_per_seq,
              "dupe_factor": FLAGS.dupe_factor, "random_seed": FLAGS.random_seed}
  if not FLAGS.force and up_to_date(FLAGS.output_dir, fingerprint(settings)):
    logging.info("demo data in %s is up to date", FLAGS.output_dir)
    return
  stats = build(FLAGS.output_dir, settings)
  logging.info("demo data in %s: %d + %d instances, %.2f MB of text, vocabulary of %d, %.1f s",
               FLAGS.output_dir, stats["instances"]["train"], stats["instances"]["eval"],
               (stats["corpus_bytes"]["train"] + stats["corpus_bytes"]["eval"]) / 1e6,
               stats["vocab_size"], stats["seconds"]["total"])


def define_flags():
  """Defines the command-line flags (only when run as a script: importing the module for its
  corpus, as bench/create_data_speed.py does, defines none)."""
  flags.DEFINE_string("output_dir", "data/demo", "Where to write the demo data.")
  flags.DEFINE_integer("vocab_size", 4096, "Tokens in the vocabulary.")
  flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length of the records.")
  flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked LM predictions per sequence.")
  flags.DEFINE_integer("dupe_factor", 5, "Passes over the training text (different masks).")
  flags.DEFINE_integer("random_seed", 12345, "Random seed of the records.")
  flags.DEFINE_bool("force", False, "Rebuild even when the data is up to date.")


if __name__ == "__main__":
  define_flags()
  cli.run_main(main)
