"""Builds the demo's fine-tuning task: which standard-library package a docstring sentence is from.

The sentences are those of the demo corpus (scripts/build_demo_data.py: the docstrings of the
standard library, read with `ast`), labelled with the package of their module, for a handful of
packages with many modules. Train and dev are split by module (every 4th module of a package is a
dev module), so dev sentences come from modules the classifier never saw; each package contributes
at most --max_per_package training sentences, so the classes are about balanced; the training rows
are shuffled.

  TASK_DIR/train.tsv, dev.tsv   header, then "package<TAB>sentence" rows
  TASK_DIR/labels.txt           the packages, one per line (the stdlib task's label list)

  python scripts/build_demo_task.py --task_dir=data/demo/stdlib_task
"""

import collections
import os
import random
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (REPO_ROOT, os.path.join(REPO_ROOT, "scripts")):
  if path not in sys.path:
    sys.path.insert(0, path)

from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

import build_demo_data  # noqa: E402
from utils.runtime import cli  # noqa: E402

PACKAGES = ("asyncio", "distutils", "email", "importlib", "lib2to3", "xml")
DEV_MODULE_EVERY = 4
# The training rows are shuffled once (fixed seed): the fine-tuning input only shuffles within a
# buffer of 100 records, and rows grouped by package would be learnt one package at a time.
SHUFFLE_SEED = 12345

flags.DEFINE_string("task_dir", "data/demo/stdlib_task", "Where to write the task.")
# Few per package: the demo compares a pretrained and a random start where labels are scarce.
flags.DEFINE_integer("max_per_package", 50, "Training sentences kept per package.")
FLAGS = flags.FLAGS


def split_by_module(documents, packages=PACKAGES, dev_every=DEV_MODULE_EVERY):
  """(train, dev) lists of (package, sentence) from (module path, sentences) documents.

  Args:
    documents: from `build_demo_data.stdlib_documents()`, paths relative to the library root.
    packages: the top-level packages kept (the labels).
    dev_every: every this-many-th module of a package (in path order) goes to dev.
  """
  modules = collections.defaultdict(list)
  for path, sentences in documents:
    package = path.split("/")[0] if "/" in path else None
    if package in packages:
      modules[package].append(sentences)
  train, dev = [], []
  for package in packages:
    for index, sentences in enumerate(modules[package]):
      rows = [(package, " ".join(sentence.split())) for sentence in sentences]
      (dev if index % dev_every == dev_every - 1 else train).extend(rows)
  return train, dev


def balance(rows, max_per_label):
  """The first `max_per_label` rows of every label, in order."""
  kept, counts = [], collections.Counter()
  for label, text in rows:
    if counts[label] < max_per_label:
      counts[label] += 1
      kept.append((label, text))
  return kept


def _write_tsv(path, rows):
  with open(path, "w", encoding="utf-8") as writer:
    writer.write("package\tsentence\n")
    for row in rows:
      writer.write("\t".join(row) + "\n")


def main(argv):
  del argv
  os.makedirs(FLAGS.task_dir, exist_ok=True)
  train, dev = split_by_module(build_demo_data.stdlib_documents())
  train = balance(train, FLAGS.max_per_package)
  random.Random(SHUFFLE_SEED).shuffle(train)
  _write_tsv(os.path.join(FLAGS.task_dir, "train.tsv"), train)
  _write_tsv(os.path.join(FLAGS.task_dir, "dev.tsv"), dev)
  with open(os.path.join(FLAGS.task_dir, "labels.txt"), "w") as writer:
    writer.write("\n".join(PACKAGES) + "\n")
  counts = collections.Counter(label for label, _ in dev)
  logging.info("stdlib task: %d train and %d dev sentences, %d packages; dev majority class %.1f%%",
               len(train), len(dev), len(PACKAGES), 100.0 * max(counts.values()) / len(dev))


if __name__ == "__main__":
  cli.run_main(main)
