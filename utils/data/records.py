"""Checks of pretraining TFRecords: the integrity of whole files (`check_record_file`: every
record's framing and CRCs, the pre-flight of `python -m utils.check_records`), a pre-flight check of
every input file's first record against the model, and the scan that names the file and record
after the input pipeline failed on a bad one. All read the files through TensorFlow's native
record reader (CRC-checked, any file system TF knows), after `record_framing` has checked the
headers TF will meet: TF's reader dies (SIGSEGV) on a length past the end with a right CRC.

Why TensorFlow's reader for the integrity check (measured on one core of this 2-core Xeon, warm
page cache, 50 MB files, best of 5; records of 860 bytes, seq 128, and 2.9 KB, seq 512): it
checks both CRCs of a record in C++ and its sequential iterator reads 1.1 and 1.5 GB/s. Reading
the file whole and walking its framing in Python reads 1.1 GB/s for 860-byte records without any
CRC: the per-record Python loop alone costs what TF's whole check does, so a native CRC32C does
not help: with google-crc32c (its C build: 3.3 to 5.5 GB/s on one 50 MB buffer; not a
dependency, tried from a scratch directory) called twice per record that loop reads 0.4 and 0.6
GB/s, with zlib's CRC-32 standing in 0.35 and 0.6. `record_encoder`'s numpy CRC32C computes
0.14 GB/s; `tf.data.TFRecordDataset` reduced in batches 0.33. TF's random-access reader
(`tf_record_random_reader`, which returns each record's next offset) reads 5 to 15% slower than
its sequential iterator. So a file is read once with the iterator, the record lengths summed
without a Python statement per record (`sum(map(len, ...))`); only a file that fails is read
again with the random-access reader, for the index and offset of its first bad record, and that
record's header is parsed (`record_framing`) to tell a length CRC mismatch from a data CRC
mismatch and a truncation (TF reports each as "corrupted record at <offset>" or "truncated
record at <offset>").

Before the iterator, `record_framing.headers_fit` walks the length fields alone (no CRC: TF
checks each before it allocates; a tight loop of one unpack and one addition, 256 KB read at a
time), which TF's reader needs to be safe from a length past the end: 11 to 14 ms per 50 MB
file (3.5 to 4.5 GB/s; 0.25 us per 860-byte record). The whole check of such a file went from 49
to 69 ms with 860-byte records (1.0 to 0.7 GB/s) and from 34 to 46 ms with 2.9 KB records (1.5
to 1.1 GB/s), best of 7, the same files read alternately by both.
"""

import collections
import itertools
import os
import re
import threading

import numpy as np
import tensorflow as tf
# The sequential record reader behind `tf_record.tf_record_iterator`, without that function's
# deprecation warning: the fastest way through a whole file (module docstring).
from tensorflow.python.lib.io import _pywrap_record_io  # pylint: disable=g-direct-tensorflow-import

from utils.core import errors
from utils.data import record_framing
from utils.data import record_layout
from utils.data.input_pipeline import BAD_RECORD_PREFIX
from utils.data.input_pipeline import pretraining_feature_spec

# TFRecord framing of one record (`record_framing`).
RECORD_HEADER_BYTES = record_framing.RECORD_HEADER_BYTES
RECORD_FRAMING_BYTES = record_framing.RECORD_FRAMING_BYTES

# Records summed per C call by the integrity check (`_data_bytes`): about 1 MB of seq-128 records,
# a millisecond of reading.
CHUNK_RECORDS = 1024

# The integrity of one TFRecord file (`check_record_file`): its size in bytes, the number of good
# records before the first bad one (all of them in a good file) and the problem, None when good.
FileCheck = collections.namedtuple("FileCheck", ["path", "size", "records", "problem"])


def read_records(path, max_records=None):
  """Yields the serialised records of the TFRecord file `path` in order, CRC-checked, each header
  checked before TF's reader sees it (`record_framing.records_at`).

  Args:
    path: the file (local or any file system TF supports).
    max_records: at most this many (None: all).

  Raises:
    record_framing.RecordFramingError (a tf.errors.DataLossError): "record <k> at byte offset
      <offset>: <problem>" for a corrupt or truncated record, or a length beyond the file.
    tf.errors.OpError: for a file that cannot be read (NotFoundError, ...).
  """
  for _, _, record in itertools.islice(record_framing.records_at(path), max_records):
    yield record


def _data_bytes(iterator, chunk_records=CHUNK_RECORDS):
  """The summed lengths of the records `iterator` yields, read `chunk_records` at a time.

  A chunk is summed in C, holding the GIL; between chunks other threads get it: the check runs
  beside training (`BackgroundRecordCheck`), whose session runs wait for the GIL to return. One
  `sum` over a whole file held it for as long as the file took (0.6 s seen for a 183 MB file).
  """
  total = 0
  while True:
    lengths = list(map(len, itertools.islice(iterator, chunk_records)))
    if not lengths:
      return total
    total += sum(lengths)


def check_record_file(path):
  """Reads every record of a TFRecord file, checking its framing: each record's length against its
  CRC, its data against its CRC, and that the file ends with a whole record.

  Args:
    path: the file (local or any file system TF supports).

  Returns:
    `FileCheck(path, size, records, problem)`: problem is None for a good file, else "record <k> at
    byte offset <offset>: <what>" for the first bad record (k 0-based; what: "length CRC
    mismatch", "data CRC mismatch", "truncated: <n> bytes left, fewer than ..." or "its length
    field says <n> bytes, more than a record holds ..."), "the file has no records" for an empty
    file (the training job refuses it) or "cannot read: <reason>".
  """
  data_bytes = None
  try:
    size = tf.io.gfile.stat(path).length
    if size == 0:
      return FileCheck(path, 0, 0, "the file has no records")
    # TF's reader only after the walk of the headers: it would die allocating a length beyond
    # the file whose CRC is right (module docstring).
    if record_framing.headers_fit(path, size):
      # The data's bytes without a Python statement per record (module docstring); the records
      # are then counted from the size, each taking its data and 16 bytes of framing.
      data_bytes = _data_bytes(_pywrap_record_io.RecordIterator(path, ""))
  except tf.errors.DataLossError:
    pass
  except (tf.errors.OpError, OSError) as e:  # a file that cannot be opened or read
    return FileCheck(path, 0, 0, "cannot read: %s" % _error_text(e))
  if data_bytes is not None and (size - data_bytes) % RECORD_FRAMING_BYTES == 0:
    return FileCheck(path, size, (size - data_bytes) // RECORD_FRAMING_BYTES, None)
  # A length leads past the end (a record cut short, a bad length, part of a header at the end:
  # the walk), or a record failed its CRC (TF's pass).
  try:
    bad = record_framing.first_bad_record(path)
  except (tf.errors.OpError, OSError) as e:
    return FileCheck(path, size, 0, "cannot read: %s" % _error_text(e))
  if bad is None:  # changed since the first pass
    return FileCheck(path, size, 0, "read twice with different results (is it being written?)")
  index, offset, problem = bad
  return FileCheck(path, size, index, "record %d at byte offset %d: %s" % (index, offset, problem))


# The niceness the background check's thread takes (Linux: a thread is a task of its own): the
# training's threads come first on a busy machine.
BACKGROUND_NICENESS = 10


def _lower_this_threads_priority():
  """Lowers the calling thread's CPU priority by `BACKGROUND_NICENESS` where the OS allows it."""
  try:
    tid = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICENESS)
  except (AttributeError, OSError):
    pass


class BackgroundRecordCheck(object):
  """`check_record_file` on a list of files, one after another, in a daemon thread.

  A training job starts one on the files its worker reads: at the reader's 1 GB/s it is through
  them long before the input pipeline reaches a bad record, and the job stops on `problem` at an
  update boundary with a checkpoint of the good state (docs/LONG_RUNS.md), where the pipeline's
  own error would end it without one.

  Attributes:
    files: the files checked, in order.
  """

  def __init__(self, files, check_file=check_record_file):
    """Starts the thread.

    Args:
      files: TFRecord files.
      check_file: function path -> `FileCheck` (injected by tests).
    """
    self.files = list(files)
    self._check_file = check_file
    self._problem = None
    self._checked = 0
    self._closed = threading.Event()
    self._done = threading.Event()
    self._thread = threading.Thread(target=self._run, name="record-check", daemon=True)
    self._thread.start()

  def _run(self):
    _lower_this_threads_priority()
    try:
      for path in self.files:
        if self._closed.is_set():
          return
        result = self._check_file(path)
        if result.problem is not None:
          self._problem = "%s: %s" % (path, result.problem)
          return
        self._checked += 1
    finally:
      self._done.set()

  @property
  def problem(self):
    """"<file>: record <k> at byte offset <offset>: <what>" for the first bad file met, or None."""
    return self._problem

  @property
  def files_checked(self):
    """How many files were found good so far."""
    return self._checked

  def wait(self, timeout=None):
    """Waits until every file is checked or a bad one found; returns whether that happened."""
    return self._done.wait(timeout)

  def close(self):
    """Has the thread stop after the file it is reading (it is a daemon: it never holds an exit)."""
    self._closed.set()


def _error_text(error):
  return getattr(error, "message", str(error)).strip()


def _printable(name):
  """A feature name as a message shows it: itself, or quoted and escaped (a name is any text, and
  a message is one line)."""
  return name if name.isprintable() else repr(name)


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


class RecordDoesNotFitModel(ValueError):
  """A well-formed record whose shapes or token ids do not fit the model: a feature's length
  (max_seq_length, max_predictions_per_seq), a masked position past the sequence, a token id
  outside the vocabulary. The lengths and the vocabulary the model is built with are to be
  checked, not the file (a damaged or unreadable file raises a plain ValueError)."""


def check_example(example, path, max_seq_length, max_predictions_per_seq, vocab_size=None,
                  where="first record", max_sequences_per_pack=0, next_sentence_labels=True,
                  masks=True):
  """Raises ValueError naming `path` when a parsed example does not fit the model.

  Raises `RecordDoesNotFitModel` when its shapes or token ids are the model's problem.

  Args:
    example: `tf.train.Example`.
    path: file it came from (for the message).
    max_seq_length, max_predictions_per_seq: the expected feature lengths (for packed rows, the
      masked_lm_* width is their prediction capacity).
    vocab_size: when given, every input_ids / masked_lm_ids value must be in [0, vocab_size).
    where: which record it is (for the message).
    max_sequences_per_pack: 0 for unpacked records; K for packed rows of up to K sequences, whose
      fields must also agree with each other (`record_layout.packed_row_problem`).
    next_sentence_labels: False: the record may lack next_sentence_labels (a run without the
      next-sentence loss; `pretraining_feature_spec`).
    masks: False for records without masks (`record_layout.Layout.dynamic_masks`): the
      masked_lm_* features are then neither needed nor checked.
  """
  spec = pretraining_feature_spec(max_seq_length, max_predictions_per_seq,
                                  max_sequences_per_pack, next_sentence_labels, masks)
  expected = {name: ("float" if feature.dtype == tf.float32 else "int64", feature.shape[0])
              for name, feature in spec.items()}
  values = {}
  for name in sorted(expected):
    kind, length = expected[name]
    if name not in example.features.feature and spec[name].default_value is not None:
      continue
    if name not in example.features.feature:
      raise ValueError("%s: the %s has no feature %r (expected %s [%d]); features present: %s"
                       % (path, where, name, kind, length,
                          ", ".join(map(_printable, sorted(example.features.feature))) or "none"))
    got_kind, got = _feature_values(example.features.feature[name])
    if got_kind not in (kind, None):
      raise ValueError("%s: feature %r of the %s is %s, expected %s"
                       % (path, name, where, got_kind, kind))
    if len(got) != length:
      if name.startswith("masked_lm_"):
        source = (" (the packed rows' prediction capacity, %d)" % length if max_sequences_per_pack
                  else " (max_predictions_per_seq=%d)" % length)
      elif name.startswith("next_sentence_"):
        source = (" (the packed rows' sequences per row, %d)" % length if max_sequences_per_pack
                  else "")
      elif name != "next_sentence_labels":
        source = " (max_seq_length=%d)" % length
      else:
        source = ""
      raise RecordDoesNotFitModel("%s: feature %r of the %s has %d values, expected %d%s"
                                  % (path, name, where, len(got), length, source))
    values[name] = got
  positions = np.asarray(values.get("masked_lm_positions", []), dtype=np.int64)
  outside = positions[(positions < 0) | (positions >= max_seq_length)]
  if outside.size:
    raise RecordDoesNotFitModel("%s: masked_lm_positions of the %s has %d, outside [0, "
                                "max_seq_length=%d)" % (path, where, outside[0], max_seq_length))
  if max_sequences_per_pack:
    problem = record_layout.packed_row_problem(values)
    if problem:
      raise ValueError("%s: the %s, a packed row: %s" % (path, where, problem))
  if vocab_size is not None:
    for name in (name for name in ("input_ids", "masked_lm_ids") if name in values):
      ids = np.asarray(values[name])
      outside = ids[(ids < 0) | (ids >= vocab_size)]
      if outside.size:
        raise RecordDoesNotFitModel(
            "%s: token id %d in %s of the %s is outside [0, vocab_size=%d) (records made with "
            "another vocabulary?)" % (path, outside[0], name, where, vocab_size))


def _parsed(record, path, where):
  """A serialised record as a `tf.train.Example`, or a problem string."""
  try:
    return tf.train.Example.FromString(record)
  except Exception as e:  # protobuf's DecodeError
    return "%s: the %s is not a tf.train.Example: %s" % (path, where, e)


def _record_problem(record, path, where, max_seq_length, max_predictions_per_seq, vocab_size,
                    max_sequences_per_pack=0, next_sentence_labels=True, masks=True):
  """What is wrong with one serialised record, or None (see `check_example`)."""
  example = _parsed(record, path, where)
  if isinstance(example, str):
    return example
  try:
    check_example(example, path, max_seq_length, max_predictions_per_seq, vocab_size, where=where,
                  max_sequences_per_pack=max_sequences_per_pack,
                  next_sentence_labels=next_sentence_labels, masks=masks)
  except ValueError as e:
    return str(e)
  return None


def _first_example(path):
  """The first record of `path`, parsed; ValueError naming the file when there is none."""
  try:
    first = list(read_records(path, max_records=1))
  except tf.errors.OpError as e:
    raise ValueError("%s: cannot read the first record: %s" % (path, _error_text(e)))
  if not first:
    raise ValueError("%s: the file has no records" % path)
  example = _parsed(first[0], path, "first record")
  if isinstance(example, str):
    raise ValueError(example)
  return example


def check_input_files(input_files, max_seq_length, max_predictions_per_seq, vocab_size=None,
                      next_sentence_labels=True):
  """Pre-flight check: the first record of every input file fits the model, one layout for all.

  The first file's first record says whether the files hold packed rows and whether they hold
  masks (`record_layout`); a packed row's masked_lm_* width (its prediction capacity) and
  sequences per row are taken from it, its length must be `max_seq_length`. Records without
  masks have no masked_lm_* features to check.

  Args:
    input_files: list of TFRecord files.
    max_seq_length, max_predictions_per_seq: the lengths the model is built for.
    vocab_size: when given, token ids must be below it (the original trains to NaN otherwise).
    next_sentence_labels: False: records may lack next_sentence_labels (`check_example`).

  Returns:
    the files' `record_layout.Layout` (None for an empty list).

  Raises:
    ValueError: naming the file, when it cannot be read, has no record, its first record is not a
      tf.train.Example, lacks a feature, has a feature of the wrong type or length, a masked
      position outside the sequence, a token id outside the vocabulary or packed fields that
      disagree; naming two files when one holds packed rows and the other does not, or one
      holds masks and the other none.
  """
  layout = first_path = None
  for path in input_files:
    example = _first_example(path)
    found = record_layout.layout_of(example)
    if layout is None:
      layout, first_path = found, path
    elif found.packed != layout.packed:
      raise ValueError("%s holds %s but %s holds %s: one run reads one kind (pack every input "
                       "with pack_pretraining_data.py, or none)"
                       % (first_path, record_layout.describe(layout), path,
                          record_layout.describe(found)))
    elif found.dynamic_masks != layout.dynamic_masks:
      raise ValueError("%s holds %s but %s holds %s: the files of one set hold masks, or none "
                       "(make them with one --dynamic_masking setting)"
                       % (first_path, record_layout.describe(layout), path,
                          record_layout.describe(found)))
    predictions = layout.predictions if layout.packed else max_predictions_per_seq
    sequences = record_layout.max_sequences_per_pack(layout)
    check_example(example, path, max_seq_length, predictions, vocab_size,
                  max_sequences_per_pack=sequences, next_sentence_labels=next_sentence_labels,
                  masks=not layout.dynamic_masks)
  return layout


def find_bad_record(input_files, max_seq_length=None, max_predictions_per_seq=None,
                    vocab_size=None, max_sequences_per_pack=0, next_sentence_labels=True,
                    masks=True):
  """Scans TFRecord files for the first record that cannot be read or parsed.

  TF reports a corrupt record as "corrupted record at <byte offset>", without the file; call this
  after a `tf.errors.DataLossError` (or a parse error) to name it. Every record's CRC is checked;
  with `max_seq_length` and `max_predictions_per_seq`, every record is also parsed and checked as
  in `check_input_files`.

  Args:
    input_files: list of TFRecord files, scanned in order.
    max_seq_length, max_predictions_per_seq, vocab_size, max_sequences_per_pack,
      next_sentence_labels, masks: see `check_example`.

  Returns:
    None when every record is good, else a message "<file>: record <k> (0-based): <problem>", or
    for a record whose framing is bad "<file>: record <k> at byte offset <b>: <what>" (as
    `check_record_file` words it).
  """
  check = max_seq_length is not None and max_predictions_per_seq is not None
  for path in input_files:
    index = 0
    try:
      for record in read_records(path):
        problem = check and _record_problem(record, path, "record %d" % index, max_seq_length,
                                            max_predictions_per_seq, vocab_size,
                                            max_sequences_per_pack, next_sentence_labels, masks)
        if problem:
          return "%s: record %d: %s" % (path, index, problem)
        index += 1
    except record_framing.RecordFramingError as e:  # worded as `check_record_file` words it
      return "%s: %s" % (path, _error_text(e))
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
                   vocab_size=None, max_sequences_per_pack=0, next_sentence_labels=True,
                   masks=True):
  """The error to stop a job with after reading its input failed, with the bad file named.

  A problem the in-pipeline check named (an out-of-vocabulary token id) is taken from the error;
  any other (a corrupt or truncated record: TF names only its byte offset) is found by scanning
  `input_files` in order (`find_bad_record`).

  Args:
    error: the exception the input pipeline raised (typically `tf.errors.DataLossError`).
    input_files: the files the pipeline read.
    max_seq_length, max_predictions_per_seq, vocab_size, max_sequences_per_pack,
      next_sentence_labels, masks: see `find_bad_record`.

  Returns:
    an `errors.UsageError` "bad input record: <file>: record <k> (0-based): <problem>", caused by
    `error` (the one-line message of a usage error, exit status 2; the chained traceback with
    --verbose); `error` itself when no bad record is found.
  """
  problem = pipeline_problem(error)
  if problem is None:
    problem = find_bad_record(input_files, max_seq_length, max_predictions_per_seq, vocab_size,
                              max_sequences_per_pack, next_sentence_labels, masks)
  if problem is None:
    return error
  named = errors.UsageError(BAD_RECORD_PREFIX + problem)
  named.__cause__ = error
  return named
