"""Sentence (pair) classification data: the original release's GLUE / XNLI processors and features.

Every processor reads tab-separated files (no quoting) and gives `InputExample`s with the guids,
texts and labels of the original's run_classifier.py, so both scripts build the same records:

  task   files (in --data_dir)                               columns (0-based)          labels
  mrpc   train.tsv, dev.tsv, test.tsv (header skipped)       3, 4 -> texts; 0 -> label  0 1
  cola   train.tsv, dev.tsv (no header), test.tsv (header)   3 -> text; 1 -> label      0 1
  mnli   train.tsv, dev_matched.tsv, test_matched.tsv        8, 9 -> texts; last label  contradiction
                                                                                        entailment
                                                                                        neutral
  xnli   multinli/multinli.train.zh.tsv, xnli.dev.tsv        see XnliProcessor          as mnli
  stdlib train.tsv, dev.tsv, test.tsv (header skipped)       1 -> text; 0 -> label      labels.txt

Test examples get the first label (their labels are unknown). A feature is
`[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]` (the longer text losing its last token until the pair
fits), zero-padded to max_seq_length, with segment 0 for a and 1 for b.

A file that is missing or not UTF-8 text, a row with too few columns, a label not among the task's
and an empty labels.txt are refused with one `errors.UsageError` naming the file (and the line or
byte offset); the scripts print it as one line and exit 2.
"""

import collections
import csv
import os

import tensorflow as tf

import tokenization
from utils.core import errors


class InputExample(object):
  """One example: guid (str), text_a, optional text_b, label (str, None for unlabelled data)."""

  def __init__(self, guid, text_a, text_b=None, label=None):
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label


class PaddingInputExample(object):
  """A placeholder that pads a data set to a whole number of batches (TPU): all-zero features,
  is_real_example 0, so metrics leave it out."""


class InputFeatures(object):
  """The model's view of one example: input_ids, input_mask, segment_ids (max_seq_length ints),
  label_id, is_real_example."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


def read_tsv(input_file):
  """Rows of a tab-separated file without quoting, each a list of str.

  Args:
    input_file: the file (UTF-8 text; TensorFlow's text mode drops every carriage return, as in
      the original).

  Returns:
    list of rows, one per line, each a list of str.

  Raises:
    errors.UsageError: naming the file when it does not exist, is not UTF-8 (the byte offset) or
      has a line csv refuses (its number; a field over csv's size limit).
  """
  if not tf.io.gfile.exists(input_file):
    raise errors.UsageError("data file %s does not exist" % input_file)
  with tf.io.gfile.GFile(input_file, "r") as reader:
    rows = csv.reader(reader, delimiter="\t", quotechar=None)
    try:
      return list(rows)
    except csv.Error as e:
      raise errors.UsageError("%s: line %d: %s" % (input_file, rows.line_num, e))
    except UnicodeDecodeError:
      pass
  raise errors.UsageError("%s: not UTF-8 text: %s" % (input_file, _first_bad_byte(input_file)))


def _first_bad_byte(input_file):
  """"byte <b> (0x..) at offset <n>": the first byte of `input_file` that is not UTF-8."""
  with tf.io.gfile.GFile(input_file, "rb") as reader:
    content = reader.read()
  try:
    content.decode("utf-8")
  except UnicodeDecodeError as e:
    return "byte %d (0x%02x) at offset %d" % (content[e.start], content[e.start], e.start)
  return "the file changed while it was read"


class DataProcessor(object):
  """A data set: its train, dev and test examples and its labels.

  A subclass names its files (`train_file`, `dev_file`, `test_file`), its label list, and how a
  row becomes an example (`_example`)."""

  train_file = "train.tsv"
  dev_file = "dev.tsv"
  test_file = "test.tsv"
  labels = ()
  has_header = True

  def get_train_examples(self, data_dir):
    """The training examples of `data_dir`."""
    return self._read_examples(data_dir, self.train_file, "train")

  def get_dev_examples(self, data_dir):
    """The development examples of `data_dir`."""
    return self._read_examples(data_dir, self.dev_file, "dev")

  def get_test_examples(self, data_dir):
    """The unlabelled test examples of `data_dir` (label: the first label)."""
    return self._read_examples(data_dir, self.test_file, "test")

  def get_labels(self):
    """The label strings, in label-id order."""
    return list(self.labels)

  @classmethod
  def _read_tsv(cls, input_file, quotechar=None):  # pylint: disable=unused-argument
    """The original's name for `read_tsv`."""
    return read_tsv(input_file)

  def _read(self, data_dir, name):
    return read_tsv(os.path.join(data_dir, name))

  def _read_examples(self, data_dir, name, set_type):
    path = os.path.join(data_dir, name)
    return self._create_examples(read_tsv(path), set_type, source=path)

  def _skips_first_row(self, set_type):  # pylint: disable=unused-argument
    return self.has_header

  def _create_examples(self, rows, set_type, source="data"):
    """The examples of a file's rows, each row checked.

    Args:
      rows: the rows of the file (`read_tsv`), header included.
      set_type: "train", "dev" (or "dev_matched") or "test".
      source: the file, for messages.

    Returns:
      list of InputExample.

    Raises:
      errors.UsageError: "<source>: line <n>: ..." for a row with fewer columns than the task reads
        (expected and found), or, outside the test set, a label not among the task's labels.
    """
    examples = []
    labels = None if set_type == "test" else self.get_labels()
    for index, row in enumerate(rows):
      if index == 0 and self._skips_first_row(set_type):
        continue
      wanted = self._min_columns(set_type)
      if len(row) < wanted:
        raise errors.UsageError("%s: line %d: %d tab-separated column(s), the %s task's %s rows "
                                "have at least %d" % (source, index + 1, len(row),
                                                      self.task_name(), set_type, wanted))
      example = self._example(row, index, set_type)
      if example is None:
        continue
      if labels is not None and example.label not in labels:
        raise errors.UsageError("%s: line %d: label %r is not one of the task's labels: %s"
                                % (source, index + 1, example.label, ", ".join(labels)))
      examples.append(example)
    return examples

  def task_name(self):
    """The task's name in PROCESSORS (for messages)."""
    return next((name for name, kind in PROCESSORS.items() if kind is type(self)),
                type(self).__name__)

  def _min_columns(self, set_type):
    """Columns a row of `set_type` needs (the last column `_example` reads, plus one)."""
    raise NotImplementedError()

  def _example(self, row, index, set_type):
    raise NotImplementedError()

  def _label(self, row, column, set_type):
    return self.get_labels()[0] if set_type == "test" else tokenization.convert_to_unicode(
        row[column])


class MrpcProcessor(DataProcessor):
  """Microsoft Research Paraphrase Corpus (GLUE): is sentence b a paraphrase of a?"""

  labels = ("0", "1")

  def _min_columns(self, set_type):
    return 5

  def _example(self, row, index, set_type):
    return InputExample("%s-%s" % (set_type, index), tokenization.convert_to_unicode(row[3]),
                        tokenization.convert_to_unicode(row[4]), self._label(row, 0, set_type))


class ColaProcessor(DataProcessor):
  """Corpus of Linguistic Acceptability (GLUE): is the sentence grammatical? Only the test file
  has a header row; its text is in column 1."""

  labels = ("0", "1")

  def _skips_first_row(self, set_type):
    return set_type == "test"

  def _min_columns(self, set_type):
    return 2 if set_type == "test" else 4

  def _example(self, row, index, set_type):
    text = row[1] if set_type == "test" else row[3]
    return InputExample("%s-%s" % (set_type, index), tokenization.convert_to_unicode(text),
                        None, self._label(row, 1, set_type))


class MnliProcessor(DataProcessor):
  """Multi-Genre NLI (GLUE), matched dev and test sets; the guid carries the row's own id."""

  dev_file = "dev_matched.tsv"
  test_file = "test_matched.tsv"
  labels = ("contradiction", "entailment", "neutral")

  def get_dev_examples(self, data_dir):
    return self._read_examples(data_dir, self.dev_file, "dev_matched")

  def _min_columns(self, set_type):
    # The label is the last column: a test row (no label) has the 10 text columns only.
    return 10 if set_type == "test" else 11

  def _example(self, row, index, set_type):
    return InputExample("%s-%s" % (set_type, tokenization.convert_to_unicode(row[0])),
                        tokenization.convert_to_unicode(row[8]),
                        tokenization.convert_to_unicode(row[9]), self._label(row, -1, set_type))


class XnliProcessor(DataProcessor):
  """Cross-lingual NLI, Chinese: trains on the translated MultiNLI file (columns premise,
  hypothesis, label; "contradictory" means contradiction) and evaluates on the `zh` rows of
  xnli.dev.tsv (columns 0 language, 1 label, 6 and 7 texts)."""

  language = "zh"
  train_file = os.path.join("multinli", "multinli.train.%s.tsv" % language)
  dev_file = "xnli.dev.tsv"
  labels = ("contradiction", "entailment", "neutral")

  def get_test_examples(self, data_dir):
    raise ValueError("the xnli task has no test set (the original defines none)")

  def _min_columns(self, set_type):
    return 3 if set_type == "train" else 8

  def _example(self, row, index, set_type):
    if set_type == "train":
      label = tokenization.convert_to_unicode(row[2])
      return InputExample("train-%d" % index, tokenization.convert_to_unicode(row[0]),
                          tokenization.convert_to_unicode(row[1]),
                          "contradiction" if label == "contradictory" else label)
    if tokenization.convert_to_unicode(row[0]) != self.language:
      return None
    return InputExample("dev-%d" % index, tokenization.convert_to_unicode(row[6]),
                        tokenization.convert_to_unicode(row[7]),
                        tokenization.convert_to_unicode(row[1]))


class StdlibProcessor(DataProcessor):
  """The demo's task: which standard-library package a docstring sentence comes from.

  Rows are (package, sentence) after a header; the labels are the lines of labels.txt in the
  data directory, so `get_labels` needs the directory first (`with_data_dir`)."""

  labels_file = "labels.txt"

  def __init__(self, data_dir=None):
    self._labels = None
    if data_dir:
      self.with_data_dir(data_dir)

  def with_data_dir(self, data_dir):
    """Reads the labels of `data_dir`; returns self.

    Raises:
      errors.UsageError: naming labels.txt when it is unreadable or holds no label.
    """
    path = os.path.join(data_dir, self.labels_file)
    self._labels = [row[0] for row in read_tsv(path) if row]
    if not self._labels:
      raise errors.UsageError("%s: no label (expected one label a line)" % path)
    return self

  def get_labels(self):
    if self._labels is None:
      raise ValueError("the stdlib task reads its labels from %s in --data_dir"
                       % self.labels_file)
    return list(self._labels)

  def _min_columns(self, set_type):
    return 2

  def _example(self, row, index, set_type):
    return InputExample("%s-%d" % (set_type, index), tokenization.convert_to_unicode(row[1]),
                        None, self._label(row, 0, set_type))


PROCESSORS = collections.OrderedDict([
    ("cola", ColaProcessor), ("mnli", MnliProcessor), ("mrpc", MrpcProcessor),
    ("xnli", XnliProcessor), ("stdlib", StdlibProcessor)])


def get_processor(task_name, data_dir=None):
  """The processor of `task_name` (case-insensitive).

  Raises:
    ValueError: naming the task and the known tasks.
  """
  name = (task_name or "").lower()
  if name not in PROCESSORS:
    raise ValueError("unknown task %r (expected one of: %s)"
                     % (task_name, ", ".join(PROCESSORS)))
  processor = PROCESSORS[name]()
  if isinstance(processor, StdlibProcessor) and data_dir:
    processor.with_data_dir(data_dir)
  return processor


def truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Shortens the pair in place, one token at a time from the end of the longer list (b on ties),
  until their total length is at most `max_length`."""
  while len(tokens_a) + len(tokens_b) > max_length:
    (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def convert_single_example(example, label_list, max_seq_length, tokenizer):
  """The features of one example.

  Args:
    example: InputExample or PaddingInputExample.
    label_list: labels in id order.
    max_seq_length: tokens per feature.
    tokenizer: a `tokenization.FullTokenizer`.

  Returns:
    InputFeatures.

  Raises:
    ValueError: for a label not in `label_list` (naming the example).
  """
  if isinstance(example, PaddingInputExample):
    zeros = [0] * max_seq_length
    return InputFeatures(zeros, list(zeros), list(zeros), 0, is_real_example=False)
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
  if tokens_b:
    truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
  else:
    tokens_a = tokens_a[:max_seq_length - 2]
  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  input_ids = list(tokenizer.convert_tokens_to_ids(tokens))
  padding = [0] * (max_seq_length - len(input_ids))
  if example.label not in label_list:
    raise ValueError("example %s: label %r is not one of %s"
                     % (example.guid, example.label, ", ".join(label_list)))
  return InputFeatures(input_ids + padding, [1] * len(input_ids) + padding,
                       segment_ids + padding, label_list.index(example.label))


def feature_record(feature):
  """The TFRecord features of an InputFeatures: dict name -> list of ints (release's names)."""
  return collections.OrderedDict([
      ("input_ids", feature.input_ids),
      ("input_mask", feature.input_mask),
      ("segment_ids", feature.segment_ids),
      ("label_ids", [feature.label_id]),
      ("is_real_example", [int(feature.is_real_example)]),
  ])
