"""TFRecord framing: the integrity check of a whole file (`records.check_record_file`, behind
`python -m utils.check_records` and the background check beside training), the first-record read
of the pre-flight (`records.read_records`) and the scan that names a bad record
(`records.find_bad_record`).

Checked against the file's framing parsed here (a CRC32C of its own, byte by byte): a good file's
record count and size are the file's; a bad file's first bad record is named by its index, byte
offset and the failed check; the first record read is the file's first record's data. TensorFlow's
reader died (SIGSEGV) on a length past the end of the file with a right CRC; the fuzzer's process
sees such a crash as a finding.
"""

import struct

import numpy as np

from fuzz import harness
from utils.data import instances
from utils.data import record_encoder
from utils.data import record_framing
from utils.data import records


def _crc_table():
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    table.append(crc)
  return table


_CRC_TABLE = _crc_table()


def masked_crc32c(data):
  """TFRecord's masked CRC32C of `data` (bytes): the CRC rotated right by 15, plus 0xa282ead8."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  crc ^= 0xFFFFFFFF
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def parse_framing(data):
  """The records of a TFRecord file's bytes, by the format alone.

  Returns:
    (records: list of the good records' data before the first bad one, bad: None or (byte
    offset, kind) with kind "truncated", "length CRC mismatch", "too long" or "data CRC
    mismatch").
  """
  found, offset = [], 0
  while offset < len(data):
    if len(data) - offset < 12:
      return found, (offset, "truncated")
    length, length_crc = struct.unpack_from("<QI", data, offset)
    if masked_crc32c(data[offset:offset + 8]) != length_crc:
      return found, (offset, "length CRC mismatch")
    if length > 2**31 - 1:
      return found, (offset, "too long")
    if offset + 16 + length > len(data):
      return found, (offset, "truncated")
    body = data[offset + 12:offset + 12 + length]
    (data_crc,) = struct.unpack_from("<I", data, offset + 12 + length)
    if masked_crc32c(body) != data_crc:
      return found, (offset, "data CRC mismatch")
    found.append(body)
    offset += 16 + length
  return found, None


# How the check words each kind of problem (the start of its text).
_WORDS = {"truncated": "truncated: ", "length CRC mismatch": "length CRC mismatch",
          "too long": "its length field says ", "data CRC mismatch": "data CRC mismatch"}


def _lengths_fit(data):
  """Whether the length fields alone lead from byte 0 to the end, each at most 2^31 - 1."""
  offset = 0
  while offset + 12 <= len(data):
    (length,) = struct.unpack_from("<Q", data, offset)
    if length > 2**31 - 1:
      return False
    offset += 16 + length
  return offset == len(data)


def _check_file(path, data, found, bad):
  """Asserts that `check_record_file` reports what the framing parsed here says."""
  check = records.check_record_file(path)
  assert check.path == path and check.size == len(data), "size %r" % (check,)
  if not data:
    assert check.problem == "the file has no records", check.problem
  elif bad is None:
    assert check.problem is None and check.records == len(found), "good file: %r" % (check,)
  else:
    prefix = "record %d at byte offset %d: %s" % (len(found), bad[0], _WORDS[bad[1]])
    assert check.problem is not None and check.problem.startswith(prefix), (
        "expected %r, got %r" % (prefix, check.problem))
    assert check.records == len(found), "records %r" % (check,)
  return check


def read(data):
  """Checks the file `data` as check_records, the pre-flight and the scan read it."""
  found, bad = parse_framing(data)
  with harness.input_file(data, "part-0.tfrecord") as path:
    check = _check_file(path, data, found, bad)
    for chunk_bytes in (12, 29):  # chunks end inside headers and records
      walked = record_framing.headers_fit(path, len(data), chunk_bytes=chunk_bytes)
      assert walked == _lengths_fit(data), "walk of %d-byte chunks: %r" % (chunk_bytes, walked)
    try:
      first = list(records.read_records(path, max_records=1))
    except record_framing.RecordFramingError as e:
      assert not found and bad is not None and e.offset == 0, "first record refused: %s" % e
    else:
      assert first == found[:1], "first record %r" % (first[:1],)
    scanned = records.find_bad_record([path])
    expected = None if check.problem is None else "%s: %s" % (path, check.problem)
    if not data:
      expected = None  # no record, none bad
    assert scanned == expected, "scan %r, check %r" % (scanned, expected)


def _frame(pieces):
  flat = np.frombuffer(b"".join(pieces), np.uint8)
  lengths = np.array([len(piece) for piece in pieces], np.int64)
  return record_encoder.frame_records(record_encoder.Crc32c(), flat, lengths).tobytes()


def _examples(count, seq=16, pred=3):
  """`count` pretraining examples written by the data generator's serialiser."""
  rng = np.random.RandomState(count)
  features = {name: rng.randint(0, 100, size=(count, seq)).astype(np.int64)
              for name in ("input_ids", "input_mask", "segment_ids")}
  for name in ("masked_lm_positions", "masked_lm_ids"):
    features[name] = rng.randint(0, seq, size=(count, pred)).astype(np.int64)
  features["masked_lm_weights"] = rng.rand(count, pred).astype(np.float32)
  features["next_sentence_labels"] = rng.randint(0, 2, size=(count, 1)).astype(np.int64)
  flat, lengths = instances.serialize_examples(features)
  ends = np.cumsum(lengths)
  return [flat[end - length:end].tobytes() for end, length in zip(ends, lengths)]


def seeds():
  """Framed examples (good; a data byte flipped; cut short; a 2^50 length with its CRC after
  them), records of 0 to 300 bytes, and an empty file."""
  good = _frame(_examples(3))
  flipped = bytearray(good)
  flipped[len(good) // 2] ^= 0x20
  huge = struct.pack("<Q", 2**50)
  bad_length = good + huge + struct.pack("<I", masked_crc32c(huge)) + b"abcd"
  sizes = _frame([bytes(i % 251 for i in range(size)) for size in (0, 7, 300)])
  return [good, bytes(flipped), good[:-9], bad_length, sizes, b""]


TARGET = harness.Target("tfrecord", read, (), seeds, 8192)
