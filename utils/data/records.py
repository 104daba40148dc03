"""Checks of pretraining TFRecords: a pre-flight check of every input file's first record, and the
scan that names the file and record after the input pipeline failed on a bad one. Both read the
files through TensorFlow's native record reader (CRC-checked, any file system TF knows) and judge
each record with the same check.
"""

import re

import numpy as np
import tensorflow as tf
# TF's random-access record reader: the C++ reader behind tf.data's TFRecordDataset, without a
# graph or session per file and without the deprecated tf_record_iterator's warning. The
# pre-flight check reads one record per file, so a graph and session per check would dominate
# (measured side by side: 8 ms per file through tf.data, 0.18 ms this way; docs/DECISIONS.md).
from tensorflow.python.lib.io import tf_record  # pylint: disable=g-direct-tensorflow-import

from utils.core import errors
from utils.data.input_pipeline import BAD_RECORD_PREFIX
from utils.data.input_pipeline import pretraining_feature_spec


def read_records(path, max_records=None):
  """Yields the serialised records of the TFRecord file `path` in order, CRC-checked.

  Args:
    path: the file (local or any file system TF supports).
    max_records: at most this many (None: all).

  Raises:
    tf.errors.OpError: for a file that cannot be read (NotFoundError, ...) or a corrupt or
      truncated record (DataLossError).
  """
  try:
    reader = tf_record.tf_record_random_reader(path)
  except OSError as e:  # the wrapper reports a file it cannot open as an OSError
    raise tf.errors.NotFoundError(None, None, str(e))
  offset, count = 0, 0
  while max_records is None or count < max_records:
    try:
      record, offset = reader.read(offset)
    except IndexError:  # no whole record header at `offset`: the end, or a truncated header
      size = tf.io.gfile.stat(path).length
      if offset < size:
        raise tf.errors.DataLossError(None, None, "truncated record at %d: %d bytes left, fewer "
                                      "than a record header" % (offset, size - offset))
      return
    count += 1
    yield record


def _error_text(error):
  return getattr(error, "message", str(error)).strip()


def _feature_values(feature):
  """(kind, values) of a tf.train.Feature: kind "int64", "float", "bytes" or None when empty."""
  kind = feature.WhichOneof("kind")
  if kind == "int64_list":
    return "int64", list(feature.int64_list.value)
  if kind == "float_list":
    return "float", list(feature.float_list.value)
  if kind == "bytes_list":
    return "bytes", list(feature.bytes_list.value)
  return None, []


def check_example(example, path, max_seq_length, max_predictions_per_seq, vocab_size=None,
                  where="first record"):
  """Raises ValueError naming `path` when a parsed example does not fit the model.

  Args:
    example: `tf.train.Example`.
    path: file it came from (for the message).
    max_seq_length, max_predictions_per_seq: the expected feature lengths.
    vocab_size: when given, every input_ids / masked_lm_ids value must be in [0, vocab_size).
    where: which record it is (for the message).
  """
  expected = {name: ("float" if spec.dtype == tf.float32 else "int64", spec.shape[0])
              for name, spec in pretraining_feature_spec(
                  max_seq_length, max_predictions_per_seq).items()}
  values = {}
  for name in sorted(expected):
    kind, length = expected[name]
    if name not in example.features.feature:
      raise ValueError("%s: the %s has no feature %r (expected %s [%d]); features present: %s"
                       % (path, where, name, kind, length,
                          ", ".join(sorted(example.features.feature)) or "none"))
    got_kind, got = _feature_values(example.features.feature[name])
    if got_kind not in (kind, None):
      raise ValueError("%s: feature %r of the %s is %s, expected %s"
                       % (path, name, where, got_kind, kind))
    if len(got) != length:
      if name.startswith("masked_lm_"):
        source = " (max_predictions_per_seq=%d)" % length
      elif name != "next_sentence_labels":
        source = " (max_seq_length=%d)" % length
      else:
        source = ""
      raise ValueError("%s: feature %r of the %s has %d values, expected %d%s"
                       % (path, name, where, len(got), length, source))
    values[name] = got
  positions = np.asarray(values["masked_lm_positions"])
  outside = positions[(positions < 0) | (positions >= max_seq_length)]
  if outside.size:
    raise ValueError("%s: masked_lm_positions of the %s has %d, outside [0, max_seq_length=%d)"
                     % (path, where, outside[0], max_seq_length))
  if vocab_size is not None:
    for name in ("input_ids", "masked_lm_ids"):
      ids = np.asarray(values[name])
      outside = ids[(ids < 0) | (ids >= vocab_size)]
      if outside.size:
        raise ValueError("%s: token id %d in %s of the %s is outside [0, vocab_size=%d) (records "
                         "made with another vocabulary?)"
                         % (path, outside[0], name, where, vocab_size))


def _record_problem(record, path, where, max_seq_length, max_predictions_per_seq, vocab_size):
  """What is wrong with one serialised record, or None (see `check_example`)."""
  try:
    example = tf.train.Example.FromString(record)
  except Exception as e:  # protobuf's DecodeError
    return "%s: the %s is not a tf.train.Example: %s" % (path, where, e)
  try:
    check_example(example, path, max_seq_length, max_predictions_per_seq, vocab_size, where=where)
  except ValueError as e:
    return str(e)
  return None


def check_input_files(input_files, max_seq_length, max_predictions_per_seq, vocab_size=None):
  """Pre-flight check: the first record of every input file fits the model.

  Args:
    input_files: list of TFRecord files.
    max_seq_length, max_predictions_per_seq: the lengths the model is built for.
    vocab_size: when given, token ids must be below it (the original trains to NaN otherwise).

  Raises:
    ValueError: naming the file, when it cannot be read, has no record, its first record is not a
      tf.train.Example, lacks a feature, has a feature of the wrong type or length, a masked
      position outside the sequence, or a token id outside the vocabulary.
  """
  for path in input_files:
    try:
      first = list(read_records(path, max_records=1))
    except tf.errors.OpError as e:
      raise ValueError("%s: cannot read the first record: %s" % (path, _error_text(e)))
    if not first:
      raise ValueError("%s: the file has no records" % path)
    problem = _record_problem(first[0], path, "first record", max_seq_length,
                              max_predictions_per_seq, vocab_size)
    if problem is not None:
      raise ValueError(problem)


def find_bad_record(input_files, max_seq_length=None, max_predictions_per_seq=None,
                    vocab_size=None):
  """Scans TFRecord files for the first record that cannot be read or parsed.

  TF reports a corrupt record as "corrupted record at <byte offset>", without the file; call this
  after a `tf.errors.DataLossError` (or a parse error) to name it. Every record's CRC is checked;
  with `max_seq_length` and `max_predictions_per_seq`, every record is also parsed and checked as
  in `check_input_files`.

  Args:
    input_files: list of TFRecord files, scanned in order.
    max_seq_length, max_predictions_per_seq, vocab_size: see `check_example`.

  Returns:
    None when every record is good, else a message "<file>: record <k> (0-based): <problem>".
  """
  check = max_seq_length is not None and max_predictions_per_seq is not None
  for path in input_files:
    index = 0
    try:
      for record in read_records(path):
        problem = check and _record_problem(record, path, "record %d" % index, max_seq_length,
                                            max_predictions_per_seq, vocab_size)
        if problem:
          return "%s: record %d: %s" % (path, index, problem)
        index += 1
    except tf.errors.OpError as e:
      return "%s: record %d: %s" % (path, index, _error_text(e))
  return None


def pipeline_problem(error):
  """The problem an in-pipeline check named in `error` ("<file>: record <k>: ..."), or None.

  The check (`input_pipeline._check_token_ids`) fails with an InvalidArgumentError whose text
  holds "assertion failed: [bad input record: <file>: record <k>: ...]".
  """
  match = re.search(r"\[%s([^\n]*)\]" % re.escape(BAD_RECORD_PREFIX), _error_text(error))
  return match.group(1) if match else None


def name_bad_input(error, input_files, max_seq_length=None, max_predictions_per_seq=None,
                   vocab_size=None):
  """The error to stop a job with after reading its input failed, with the bad file named.

  A problem the in-pipeline check named (an out-of-vocabulary token id) is taken from the error;
  any other (a corrupt or truncated record: TF names only its byte offset) is found by scanning
  `input_files` in order (`find_bad_record`).

  Args:
    error: the exception the input pipeline raised (typically `tf.errors.DataLossError`).
    input_files: the files the pipeline read.
    max_seq_length, max_predictions_per_seq, vocab_size: see `find_bad_record`.

  Returns:
    an `errors.UsageError` "bad input record: <file>: record <k> (0-based): <problem>", caused by
    `error` (the one-line message of a usage error, exit status 2; the chained traceback with
    --verbose); `error` itself when no bad record is found.
  """
  problem = pipeline_problem(error)
  if problem is None:
    problem = find_bad_record(input_files, max_seq_length, max_predictions_per_seq, vocab_size)
  if problem is None:
    return error
  named = errors.UsageError(BAD_RECORD_PREFIX + problem)
  named.__cause__ = error
  return named
