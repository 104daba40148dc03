"""The downstream task of bench/quality_corpus.py: which part of the documentation a paragraph
comes from (`linux/networking`, `python/reference`, ...), from documents kept out of pretraining.

The task's documents are chosen per class before pretraining sees any text: a class's documents
in the order of a hash of their names, taken until the class has its dev and then its training
paragraphs; every paragraph of a document goes to one side (dev documents first), so dev
paragraphs come from documents the classifier never saw. Those documents are left out of the
pretraining corpus whole. The files are the demo task's (scripts/build_demo_task.py), read by
run_classifier.py's `stdlib` task:

  TASK_DIR/train.tsv, dev.tsv   header, then "label<TAB>paragraph" rows (training rows shuffled)
  TASK_DIR/labels.txt           the classes, one a line
"""

import collections
import dataclasses
import hashlib
import os
import random

# A paragraph is an example when it has this many words (a line of a list is too short to say
# where it comes from; a long one is cut by the classifier's sequence length anyway).
MIN_EXAMPLE_WORDS = 10
MAX_EXAMPLE_WORDS = 120
# The training rows are shuffled once (fixed seed), as the demo task's.
SHUFFLE_SEED = 12345


@dataclasses.dataclass(frozen=True)
class TaskSettings:
  """classes: the labels (a document's class: `<source>/<its top folder>`); the examples of each
  class on each side."""
  classes: tuple
  train_per_class: int
  dev_per_class: int


def document_order(name):
  """The key a class's documents are taken in: a hash of the document's name (stable, unsorted by
  folder)."""
  return hashlib.sha256(name.encode("utf-8")).hexdigest()


def examples(paragraphs):
  """The paragraphs of a document that are examples (MIN/MAX_EXAMPLE_WORDS)."""
  return [p for p in paragraphs if MIN_EXAMPLE_WORDS <= len(p.split()) <= MAX_EXAMPLE_WORDS]


def choose(documents, settings):
  """The task's documents and rows.

  Args:
    documents: {name: (class, paragraphs)} of every document.
    settings: `TaskSettings`.

  Returns:
    (task document names (set), train rows, dev rows); a row is (class, paragraph).

  Raises:
    ValueError: a class without enough paragraphs for its quota, named with what it has.
  """
  by_class = collections.defaultdict(list)
  for name, (label, _) in documents.items():
    by_class[label].append(name)
  chosen, train, dev = set(), [], []
  for label in settings.classes:
    rows = {"dev": [], "train": []}
    quota = {"dev": settings.dev_per_class, "train": settings.train_per_class}
    for name in sorted(by_class[label], key=document_order):
      side = "dev" if len(rows["dev"]) < quota["dev"] else "train"
      if len(rows[side]) >= quota[side]:
        break
      found = examples(documents[name][1])
      if found:
        chosen.add(name)
        rows[side].extend((label, p) for p in found[:quota[side] - len(rows[side])])
    if len(rows["dev"]) < quota["dev"] or len(rows["train"]) < quota["train"]:
      raise ValueError("task class %s: %d dev and %d training paragraphs found in its %d "
                       "documents, %d and %d wanted" % (label, len(rows["dev"]),
                                                        len(rows["train"]), len(by_class[label]),
                                                        quota["dev"], quota["train"]))
    dev.extend(rows["dev"])
    train.extend(rows["train"])
  random.Random(SHUFFLE_SEED).shuffle(train)
  return chosen, train, dev


def _write_tsv(path, rows):
  with open(path, "w", encoding="utf-8") as writer:
    writer.write("label\tparagraph\n")
    for label, text in rows:
      writer.write("%s\t%s\n" % (label, " ".join(text.split())))


def write(task_dir, settings, train, dev):
  """Writes train.tsv, dev.tsv and labels.txt under `task_dir`. Returns {class: examples}."""
  os.makedirs(task_dir, exist_ok=True)
  _write_tsv(os.path.join(task_dir, "train.tsv"), train)
  _write_tsv(os.path.join(task_dir, "dev.tsv"), dev)
  with open(os.path.join(task_dir, "labels.txt"), "w", encoding="utf-8") as writer:
    writer.write("".join(label + "\n" for label in settings.classes))
  return dict(collections.Counter(label for label, _ in train + dev))
