"""The TFRecord framing read before TensorFlow's reader (utils/data/record_framing.py): the header
walk and the records read one by one with each header checked, on hand-built headers whose length
goes past the file with a right CRC (TF's reader died on them with SIGSEGV).

The CRCs of the hand-built headers come from a bitwise CRC32C written here (`masked_crc32c`),
checked against the standard check value; the other tests' files import `bad_length_file`.
"""

import struct

import pytest
import tensorflow as tf

from utils.data import record_framing

# A length no file holds: TF's reader allocated it and died. What the checks say of it, with the
# 4 bytes `bad_length_file` writes after it.
HUGE = 2**50
HUGE_PROBLEM = ("its length field says 1125899906842624 bytes, more than a record holds (at most "
                "2147483647); the file has 16 bytes left")
# Data sizes of the good records of every file here: all different, so a wrong offset shows.
SIZES = (30, 0, 200, 5)


def crc32c(data):
  """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`, one bit at a time."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc ^= byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
  return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
  """TFRecord's masked CRC: the CRC rotated right by 15 bits plus 0xa282ead8, mod 2^32."""
  crc = crc32c(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def header(length, crc_right=True):
  """The 12-byte header of a record of `length` data bytes; its length CRC off by one if not
  `crc_right`."""
  length_bytes = struct.pack("<Q", length)
  return length_bytes + struct.pack("<I", masked_crc32c(length_bytes) ^ (0 if crc_right else 1))


def record(data):
  """One whole record of `data` (bytes), framed by hand."""
  return header(len(data)) + data + struct.pack("<I", masked_crc32c(data))


def bad_length_file(path, before=SIZES, length=HUGE, crc_right=True, tail=b"abcd"):
  """Writes records of the data sizes `before`, then a header saying `length` and `tail`.

  Returns:
    (the bad header's byte offset, the file's size).
  """
  data = b"".join(record(bytes((i * 7 + j) % 251 for j in range(size)))
                  for i, size in enumerate(before))
  with open(str(path), "wb") as handle:
    handle.write(data + header(length, crc_right) + tail)
  return len(data), len(data) + 12 + len(tail)


def test_the_crc_here_is_crc32c_and_frames_as_tensorflows_writer(tmp_path):
  assert crc32c(b"123456789") == 0xE3069283  # CRC-32C's standard check value
  path = tmp_path / "tf.tfrecord"
  with tf.io.TFRecordWriter(str(path)) as writer:
    for data in (b"", b"x" * 300):
      writer.write(data)
  assert path.read_bytes() == record(b"") + record(b"x" * 300)


@pytest.mark.parametrize("chunk_bytes", [12, 13, 40, 1 << 20])
def test_walk_follows_the_lengths_to_the_end_of_a_good_file(tmp_path, chunk_bytes):
  path = str(tmp_path / "good.tfrecord")
  offset, _ = bad_length_file(path, tail=b"")
  # The file without the bad header: the lengths end exactly at its end.
  with open(path, "r+b") as handle:
    handle.truncate(offset)
  assert record_framing.headers_fit(path, offset, chunk_bytes=chunk_bytes)
  assert record_framing.first_bad_record(path) is None
  assert [(index, at, len(data)) for index, at, data in record_framing.records_at(path)] == [
      (0, 0, 30), (1, 46, 0), (2, 62, 200), (3, 278, 5)]


@pytest.mark.parametrize("chunk_bytes", [12, 13, 40, 1 << 20])
@pytest.mark.parametrize("before, length, tail", [
    (SIZES, HUGE, b"abcd"),     # the defect: 2^50 with its CRC
    ((), HUGE, b""),            # the first header, nothing after it
    (SIZES, 2**64 - 1, b""),    # the largest length field
    (SIZES, 10, b"x" * 10),     # 10 bytes of data but no data CRC: a truncated last record
])
def test_walk_refuses_a_length_past_the_end(tmp_path, chunk_bytes, before, length, tail):
  path = str(tmp_path / "bad.tfrecord")
  _, size = bad_length_file(path, before, length, tail=tail)
  assert not record_framing.headers_fit(path, size, chunk_bytes=chunk_bytes)


def test_walk_refuses_a_partial_header_at_the_end(tmp_path):
  path = str(tmp_path / "cut.tfrecord")
  offset, _ = bad_length_file(path, tail=b"")
  with open(path, "r+b") as handle:
    handle.truncate(offset + 11)
  assert not record_framing.headers_fit(path, offset + 11, chunk_bytes=40)


def test_walk_refuses_a_length_over_the_bound_inside_the_file(tmp_path, monkeypatch):
  # A record of 300 bytes with the bound at 100 (a file over 2 GiB otherwise): the walk refuses
  # it though it fits, and the message says the bound.
  monkeypatch.setattr(record_framing, "MAX_RECORD_BYTES", 100)
  path = str(tmp_path / "long.tfrecord")
  with open(path, "wb") as handle:
    handle.write(record(b"a" * 20) + record(b"b" * 300))
  assert not record_framing.headers_fit(path, 36 + 316, chunk_bytes=64)
  assert record_framing.first_bad_record(path) == (
      1, 36, "its length field says 300 bytes, more than a record holds (at most 100); the file "
             "has 316 bytes left")


def test_records_at_names_the_huge_length_before_tensorflow_reads_it(tmp_path):
  path = str(tmp_path / "bad.tfrecord")
  offset, size = bad_length_file(path)
  assert (offset, size) == (299, 315)
  seen = []
  with pytest.raises(record_framing.RecordFramingError) as raised:
    for index, at, data in record_framing.records_at(path):
      seen.append((index, at, len(data)))
  assert seen == [(0, 0, 30), (1, 46, 0), (2, 62, 200), (3, 278, 5)]
  expected = HUGE_PROBLEM
  assert (raised.value.index, raised.value.offset, raised.value.problem) == (4, 299, expected)
  assert raised.value.message == "record 4 at byte offset 299: " + expected
  assert isinstance(raised.value, tf.errors.DataLossError)
  assert record_framing.first_bad_record(path) == (4, 299, expected)


@pytest.mark.parametrize("length, crc_right, tail, problem", [
    # The same length with a wrong CRC: damage, as TF's reader reports it.
    (HUGE, False, b"abcd", "length CRC mismatch"),
    # A length within the bound but past the end, its CRC right: a file cut short.
    (1000, True, b"abcd", "truncated: 16 bytes left, fewer than the record's 1016 (1000 of data, "
                          "16 of framing)"),
    (HUGE, True, b"", "its length field says 1125899906842624 bytes, more than a record holds "
                      "(at most 2147483647); the file has 12 bytes left"),
])
def test_first_bad_record_tells_damage_truncation_and_a_huge_length_apart(
    tmp_path, length, crc_right, tail, problem):
  path = str(tmp_path / "bad.tfrecord")
  offset, _ = bad_length_file(path, (7,), length, crc_right, tail)
  assert offset == 23
  assert record_framing.first_bad_record(path) == (1, 23, problem)


def test_a_huge_first_length_is_named_and_a_missing_file_is_tensorflows_error(tmp_path):
  path = str(tmp_path / "first.tfrecord")
  bad_length_file(path, before=())
  with pytest.raises(record_framing.RecordFramingError, match=r"^record 0 at byte offset 0: its "
                     r"length field says 1125899906842624 bytes"):
    next(record_framing.records_at(path))
  with pytest.raises(tf.errors.NotFoundError):
    next(record_framing.records_at(str(tmp_path / "missing.tfrecord")))


def test_walked_problem_is_none_for_a_good_file_and_names_a_huge_length(tmp_path):
  good = tmp_path / "good.tfrecord"
  good.write_bytes(b"".join(record(bytes(size)) for size in SIZES))
  assert record_framing.walked_problem(str(good)) is None
  offset, _ = bad_length_file(tmp_path / "bad.tfrecord")
  assert record_framing.walked_problem(str(tmp_path / "bad.tfrecord")) == (
      len(SIZES), offset, HUGE_PROBLEM)
