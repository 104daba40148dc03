"""The TFRecord framing read here before TensorFlow's reader sees a file: a walk of the record
headers, and records read one by one with each header checked first.

TensorFlow's record readers (the sequential iterator, the random-access reader, tf.data's
TFRecordDataset) check a record's length against its CRC and then allocate that many bytes
before reading them: a length field whose CRC is right but whose value is absurd (2^50) kills
the process (SIGSEGV in the allocation), with no file named. Random damage fails the length CRC
and is refused cleanly; a length written wrongly with its CRC (a bad writer, a crafted file) is
not. So the record checks (records.py) and the pretraining input pipeline walk the headers first
(`headers_fit`), or check each header before TF reads its record (`records_at`).

The walk seeks from header to header and reads no record's data beyond the chunk a header is
read in (`WALK_CHUNK_BYTES`); it does not check the length CRCs: TF's reader checks each one
before it allocates, and stops at the first bad one, so it never follows a length the walk did
not see. Its cost (one core of this 2-core Xeon, warm page cache, 50 MB files): 14 ms per file,
0.25 us per 860-byte record (seq 128), 3.5 GB/s; records.py's docstring compares it with TF's.
"""

import struct

import numpy as np
import tensorflow as tf
# TF's random-access record reader: the C++ reader behind tf.data's TFRecordDataset, without a
# graph or session per file and without the deprecated tf_record_iterator's warning. The
# pre-flight check reads one record per file, so a graph and session per check would dominate
# (measured side by side: 8 ms per file through tf.data, 0.18 ms this way; docs/DECISIONS.md).
from tensorflow.python.lib.io import tf_record  # pylint: disable=g-direct-tensorflow-import

from utils.core import paths
from utils.data import record_encoder

# TFRecord framing of one record (little endian): uint64 length L, uint32 masked CRC32C of the 8
# length bytes, L bytes of data, uint32 masked CRC32C of the data.
RECORD_HEADER_BYTES = 12
RECORD_FRAMING_BYTES = 16
# The longest record's data a reader accepts: protobuf parses no message of 2 GiB or more, so a
# longer record cannot be a tf.train.Example; TF's reader would allocate it whole.
MAX_RECORD_BYTES = 2**31 - 1
# Bytes read at a time by the header walk: a header is read with the records that follow it in
# the same chunk, and a record longer than the chunk is skipped by a seek. Any length above
# MAX_RECORD_BYTES leaves its chunk, so the walk compares only a chunk's last length with it.
WALK_CHUNK_BYTES = 1 << 18

# The problems TF's reader refuses by itself (a DataLossError at the record): it checks the CRCs
# before it allocates and reads.
CRC_PROBLEMS = ("length CRC mismatch", "data CRC mismatch")

_LENGTH = struct.Struct("<Q")


class RecordFramingError(tf.errors.DataLossError):
  """A record whose framing is bad: "record <k> at byte offset <offset>: <problem>".

  Attributes:
    index: the record's 0-based index in its file.
    offset: the byte offset of its header.
    problem: what is wrong ("length CRC mismatch", "data CRC mismatch", "truncated: ...", "its
      length field says ...").
  """

  def __init__(self, index, offset, problem):
    super().__init__(None, None, "record %d at byte offset %d: %s" % (index, offset, problem))
    self.index, self.offset, self.problem = index, offset, problem

  def __reduce__(self):  # picklable, as TF's own errors are
    return RecordFramingError, (self.index, self.offset, self.problem)


def _bytes_left(left):
  return "%d byte%s left" % (left, "" if left == 1 else "s")


def header_problem(header, left):
  """What is wrong with a record's header, or None when it is whole, its length CRC right, and
  the record it announces fits in the file.

  Args:
    header: bytes, up to RECORD_HEADER_BYTES read at the record's offset.
    left: the file's bytes from that offset on.

  Returns:
    None, or "truncated: ..." (a partial header, or a record longer than the bytes left),
    "length CRC mismatch", or "its length field says <n> bytes, ..." (over MAX_RECORD_BYTES).
  """
  if len(header) < RECORD_HEADER_BYTES:
    return "truncated: %s, fewer than the %d-byte record header" % (
        _bytes_left(left), RECORD_HEADER_BYTES)
  length, length_crc = struct.unpack("<QI", header[:RECORD_HEADER_BYTES])
  expected_crc = record_encoder.Crc32c().masked(np.frombuffer(header[:8], np.uint8),
                                                np.array([8], np.int64))[0]
  if length_crc != expected_crc:
    return "length CRC mismatch"
  if length > MAX_RECORD_BYTES:
    return ("its length field says %d bytes, more than a record holds (at most %d); the file "
            "has %s" % (length, MAX_RECORD_BYTES, _bytes_left(left)))
  if left < length + RECORD_FRAMING_BYTES:
    return "truncated: %s, fewer than the record's %d (%d of data, %d of framing)" % (
        _bytes_left(left), length + RECORD_FRAMING_BYTES, length, RECORD_FRAMING_BYTES)
  return None


def _fits(header, left):
  """Whether `header` is whole and announces a record of at most MAX_RECORD_BYTES within `left`
  bytes (its CRC not checked)."""
  if len(header) < RECORD_HEADER_BYTES:
    return False
  (length,) = _LENGTH.unpack_from(header)
  return length <= MAX_RECORD_BYTES and length + RECORD_FRAMING_BYTES <= left


def headers_fit(path, size, chunk_bytes=WALK_CHUNK_BYTES):
  """Walks the record headers of a TFRecord file from its start, by their length fields.

  Args:
    path: the file (local or any file system TF supports).
    size: its size in bytes.
    chunk_bytes: bytes read at a time (at least RECORD_HEADER_BYTES; below MAX_RECORD_BYTES).

  Returns:
    True when the lengths lead from byte 0 exactly to `size`, each at most MAX_RECORD_BYTES: no
    header TF's reader can meet announces a record beyond the file. False otherwise: a length
    past the end (a truncated file or a bad length), over the bound, or a partial header at the
    end; `first_bad_record` then names the record.

  Raises:
    OSError or tf.errors.OpError: when the file cannot be read.
  """
  offset, length = 0, 0
  with paths.open_file(path, "rb") as handle:
    while offset < size:
      handle.seek(offset)
      chunk = handle.read(chunk_bytes)
      last = len(chunk) - RECORD_HEADER_BYTES
      if last < 0:  # a partial header, or the file shrank
        return False
      position = 0
      # The per-record loop: one unpack and one addition (the walk's whole cost).
      while position <= last:
        (length,) = _LENGTH.unpack_from(chunk, position)
        position += length + RECORD_FRAMING_BYTES
      if length > MAX_RECORD_BYTES:
        return False
      offset += position
  return offset == size


def records_at(path):
  """Yields (index, byte offset, record) of each record of a TFRecord file in order, CRC-checked.

  Each header is read and checked here before TF's random-access reader reads its record (and
  checks both CRCs), so no absurd length reaches TF's allocation.

  Args:
    path: the file (local or any file system TF supports).

  Raises:
    RecordFramingError: at the first bad record (a partial header at the end included).
    tf.errors.OpError: for a file that cannot be read (NotFoundError, ...).
  """
  try:
    reader = tf_record.tf_record_random_reader(path)
  except OSError as e:  # the wrapper reports a file it cannot open as an OSError
    raise tf.errors.NotFoundError(None, None, str(e))
  size = tf.io.gfile.stat(path).length
  offset, index = 0, 0
  with paths.open_file(path, "rb") as handle:
    while offset < size:
      handle.seek(offset)
      header = handle.read(RECORD_HEADER_BYTES)
      if not _fits(header, size - offset):
        raise RecordFramingError(index, offset, header_problem(header, size - offset))
      try:
        record, next_offset = reader.read(offset)
      except tf.errors.DataLossError:  # TF names the offset, not which check failed
        raise RecordFramingError(index, offset,
                                 header_problem(header, size - offset) or "data CRC mismatch")
      yield index, offset, record
      offset, index = next_offset, index + 1


def first_bad_record(path):
  """(index, byte offset, problem) of the first bad record of a TFRecord file, or None.

  One call of TF's random-access reader and one header read per record (`records_at`): slower
  than a walk and TF's sequential pass; for a file known to be bad.

  Raises:
    tf.errors.OpError or OSError: when the file cannot be read.
  """
  try:
    for _ in records_at(path):
      pass
  except RecordFramingError as e:
    return e.index, e.offset, e.problem
  return None


def walked_problem(path):
  """(index, byte offset, problem) of the first bad record of a TFRecord file, or None: the walk of
  its length fields (`headers_fit`) for a good file, `first_bad_record` only once the walk fails.

  Raises:
    tf.errors.OpError or OSError: when the file cannot be read.
  """
  if headers_fit(path, tf.io.gfile.stat(path).length):
    return None
  return first_bad_record(path)
