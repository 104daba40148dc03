"""GLUE / XNLI tab-separated files: the release's processors (`classifier_data`) reading one split.

The first byte of an input picks the task and the split (`CASES`); the rest is the file. For the
stdlib task, the part before the first record separator (0x1e) is its labels.txt. Checked: every
example's texts are fields of the file, a labelled split's labels are the task's, and each example
becomes features of the right length.
"""

import os
import tempfile

from fuzz import harness
from utils.core import errors
from utils.finetuning import classifier_data

CASES = tuple((task, split) for task in ("mrpc", "cola", "mnli", "xnli", "stdlib")
              for split in ("train", "dev", "test") if (task, split) != ("xnli", "test"))
MAX_SEQ_LENGTH = 16
_VOCAB = "[PAD] [UNK] [CLS] [SEP] [MASK] the movie was good bad film . , ##s ##e".split()
_LABELS_SEPARATOR = b"\x1e"


TOKENIZER = harness.tokenizer(_VOCAB)


def _write(path, content):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as writer:
    writer.write(content)


def _read_split(directory, task, split, content):
  """The examples and labels of `content` as `split` of `task`, read from files in `directory`."""
  if task == "stdlib":
    labels, _, content = content.rpartition(_LABELS_SEPARATOR)
    _write(os.path.join(directory, "labels.txt"), labels)
  processor = classifier_data.get_processor(task, directory if task == "stdlib" else None)
  _write(os.path.join(directory, getattr(processor, split + "_file")), content)
  examples = getattr(processor, "get_%s_examples" % split)(directory)
  return examples, processor.get_labels()


def read(data):
  """Reads `data[1:]` as the split of `CASES[data[0]]` and checks what comes back."""
  if not data:
    return
  task, split = CASES[data[0] % len(CASES)]
  with tempfile.TemporaryDirectory() as directory:
    examples, labels = _read_split(directory, task, split, data[1:])
  text = data[1:].decode("utf-8")
  # TensorFlow's text-mode file drops every carriage return (as the original release reads it).
  fields = set(text.replace("\r", "").replace("\t", "\n").split("\n"))
  for example in examples:
    for value in (example.text_a, example.text_b):
      assert value is None or value in fields, "text %r is not a field of the file" % (value,)
    assert example.label in labels, "label %r" % (example.label,)
    if split != "test" and example.label not in fields:
      assert task == "xnli" and example.label == "contradiction", "label %r" % (example.label,)
    feature = classifier_data.convert_single_example(example, labels, MAX_SEQ_LENGTH, TOKENIZER)
    assert len(feature.input_ids) == MAX_SEQ_LENGTH, "feature length"
    assert feature.label_id == labels.index(example.label)


def _tsv(rows):
  return "".join("\t".join(row) + "\n" for row in rows).encode("utf-8")


def seeds():
  """One file of every task and split, in the release's column layouts."""
  a, b = "the movie was good.", "the film was bad"
  rows = {
      "mrpc": [("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
               ("1", "1", "2", a, b), ("0", "3", "4", b, a)],
      "cola": [("src", "1", "", a), ("src", "0", "*", b)],
      "mnli": [("h",) * 12] + [(str(i), "p", "q", "g", "", "", "", "", a, b, "x", label)
                               for i, label in enumerate(("neutral", "entailment"))],
      "stdlib": [("label", "sentence"), ("json", a), ("os", b)],
  }
  found = []
  for index, (task, split) in enumerate(CASES):
    if task == "xnli":
      content = (_tsv([("premise", "hypo", "label"), (a, b, "contradictory"), (b, a, "neutral")])
                 if split == "train" else _tsv([("h",) * 8, ("zh", "neutral", "", "", "", "", a, b),
                                                 ("en", "entailment", "", "", "", "", b, a)]))
    elif task == "cola" and split == "test":
      content = _tsv([("index", "sentence"), ("0", a), ("1", b)])
    else:
      content = _tsv(rows[task])
    if task == "stdlib":
      content = b"json\nos\n" + _LABELS_SEPARATOR + content
    found.append(bytes([index]) + content)
  return found


TARGET = harness.Target("glue_tsv", read, (errors.UsageError,), seeds, 4096)
