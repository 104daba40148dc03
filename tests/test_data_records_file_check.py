"""utils/data/records.py's checks of whole files, without training: the integrity check of one
file (`check_record_file`, behind `python -m utils.check_records`: every record's length CRC, data
CRC and a whole last record, the first bad record named by index and byte offset) and the
background check beside training (`BackgroundRecordCheck`), which stops at the first bad file. A
length field past the end of the file with a right CRC is named by both (training meets it in
test_data_records.py). The training pre-flight (run_pretraining.py's first-record check) adds its
hint to the flags only to the errors the flags explain: shapes and token ids, not a damaged file.
"""

import os
import threading
import types

import pytest
import tensorflow as tf

import run_pretraining
from tests import helpers
from tests import test_data_record_framing as framing_tests
from tests import test_data_records as data_records_tests
from tests.test_data_records import _batch
from utils.core import errors
from utils.data import records

HINT = ("(check --max_seq_length / --max_predictions_per_seq and the vocabulary of "
        "--bert_config_file)")


# Record sizes of the integrity check's files: all different, so a wrong offset or index shows.
SIZES = (40, 0, 7, 300, 1, 64)


def _write_sized_records(path, sizes=SIZES):
  """A TFRecord file of records of the given data sizes (TensorFlow's writer). Returns the byte
  offset of each record, from the sizes alone: 8-byte length, 4-byte CRC, data, 4-byte CRC."""
  with tf.io.TFRecordWriter(str(path)) as writer:
    for index, size in enumerate(sizes):
      writer.write(bytes((index * 31 + i) % 256 for i in range(size)))
  offsets = [0]
  for size in sizes:
    offsets.append(offsets[-1] + 8 + 4 + size + 4)
  assert os.path.getsize(path) == offsets[-1]
  return offsets


def _flip_byte(path, position):
  data = bytearray(open(path, "rb").read())
  data[position] ^= 0x10
  open(path, "wb").write(bytes(data))


def _truncate(path, size):
  with open(path, "r+b") as handle:
    handle.truncate(size)


def test_check_record_file_counts_the_records_of_a_good_file(tmp_path):
  path = str(tmp_path / "good.tfrecord")
  offsets = _write_sized_records(path)
  assert records.check_record_file(path) == records.FileCheck(path, offsets[-1], len(SIZES), None)
  # The generator's records (pretraining examples) too.
  helpers.write_batch_records(path, _batch(0, 7))
  assert records.check_record_file(path) == records.FileCheck(
      path, os.path.getsize(path), 7, None)


# (bytes into record k where a byte is flipped, the problem). Record 1 has no data: its data CRC
# follows its header, at 12.
@pytest.mark.parametrize("index, into, problem", [
    (0, 12 + 39, "data CRC mismatch"),  # the last data byte
    (3, 12 + 150, "data CRC mismatch"),
    (3, 12 + 300 + 2, "data CRC mismatch"),  # the data's CRC itself
    (1, 12 + 1, "data CRC mismatch"),
    (len(SIZES) - 1, 12, "data CRC mismatch"),
    (0, 0, "length CRC mismatch"),  # the length's lowest byte
    (3, 6, "length CRC mismatch"),  # a high byte: the length would be huge
    (4, 9, "length CRC mismatch"),  # the length's CRC itself
])
def test_check_record_file_names_the_first_bad_record_its_offset_and_the_check(
    tmp_path, index, into, problem):
  path = str(tmp_path / "bad.tfrecord")
  offsets = _write_sized_records(path)
  _flip_byte(path, offsets[index] + into)
  expected = "record %d at byte offset %d: %s" % (index, offsets[index], problem)
  assert records.check_record_file(path) == records.FileCheck(path, offsets[-1], index, expected)


def test_check_record_file_names_the_first_of_two_bad_records(tmp_path):
  path = str(tmp_path / "bad.tfrecord")
  offsets = _write_sized_records(path)
  _flip_byte(path, offsets[4] + 3)
  _flip_byte(path, offsets[2] + 12 + 5)
  assert records.check_record_file(path).problem == (
      "record 2 at byte offset %d: data CRC mismatch" % offsets[2])


@pytest.mark.parametrize("index, kept, problem", [
    # Mid-data, and with the header whole but none of the data.
    (3, 12 + 100, "truncated: 112 bytes left, fewer than the record's 316 (300 of data, 16 of "
                  "framing)"),
    (3, 12, "truncated: 12 bytes left, fewer than the record's 316 (300 of data, 16 of framing)"),
    # The data whole, its CRC cut.
    (5, 12 + 64 + 3, "truncated: 79 bytes left, fewer than the record's 80 (64 of data, 16 of "
                     "framing)"),
    # Mid-header: TF's sequential reader takes it for the end of the file.
    (3, 5, "truncated: 5 bytes left, fewer than the 12-byte record header"),
    (5, 1, "truncated: 1 byte left, fewer than the 12-byte record header"),
    (2, 11, "truncated: 11 bytes left, fewer than the 12-byte record header"),
])
def test_check_record_file_names_a_truncated_record(tmp_path, index, kept, problem):
  path = str(tmp_path / "cut.tfrecord")
  offsets = _write_sized_records(path)
  _truncate(path, offsets[index] + kept)
  expected = "record %d at byte offset %d: %s" % (index, offsets[index], problem)
  assert records.check_record_file(path) == records.FileCheck(
      path, offsets[index] + kept, index, expected)


def test_check_record_file_refuses_an_empty_or_missing_file(tmp_path):
  empty = tmp_path / "empty.tfrecord"
  empty.write_bytes(b"")
  assert records.check_record_file(str(empty)) == records.FileCheck(
      str(empty), 0, 0, "the file has no records")
  missing = str(tmp_path / "missing.tfrecord")
  check = records.check_record_file(missing)
  assert check.problem.startswith("cannot read: ") and missing in check.problem


def test_background_check_finds_the_first_bad_file_and_stops_there(tmp_path):
  paths = [str(tmp_path / ("part-%d.tfrecord" % i)) for i in range(4)]
  offsets = [_write_sized_records(path) for path in paths]
  _flip_byte(paths[2], offsets[2][3] + 12 + 7)
  _flip_byte(paths[3], offsets[3][0])  # also bad, but after the first bad one
  check = records.BackgroundRecordCheck(paths)
  assert check.wait(30)
  assert check.problem == "%s: record 3 at byte offset %d: data CRC mismatch" % (
      paths[2], offsets[2][3])
  assert check.files_checked == 2


def test_a_length_past_the_end_with_its_crc_is_named_by_the_file_checks(tmp_path):
  good = str(tmp_path / "a-good.tfrecord")
  _write_sized_records(good)
  bad = str(tmp_path / "b-huge.tfrecord")
  offset, size = framing_tests.bad_length_file(bad)
  problem = "record 4 at byte offset %d: %s" % (offset, framing_tests.HUGE_PROBLEM)
  assert records.check_record_file(bad) == records.FileCheck(bad, size, 4, problem)
  check = records.BackgroundRecordCheck([good, bad])
  assert check.wait(30)
  assert (check.problem, check.files_checked) == ("%s: %s" % (bad, problem), 1)
  assert records.find_bad_record([good, bad]) == "%s: %s" % (bad, problem)
  framing_tests.bad_length_file(bad, before=())  # the first record's
  assert records.check_record_file(bad).problem == (
      "record 0 at byte offset 0: " + framing_tests.HUGE_PROBLEM)


def test_background_check_of_good_files_finds_nothing(tmp_path):
  paths = [str(tmp_path / ("part-%d.tfrecord" % i)) for i in range(3)]
  for path in paths:
    _write_sized_records(path)
  check = records.BackgroundRecordCheck(paths)
  assert check.wait(30)
  assert check.problem is None and check.files_checked == 3


def test_background_check_closed_stops_after_the_file_it_reads():
  started, release, seen = threading.Event(), threading.Event(), []

  def slow_check(path):
    seen.append(path)
    started.set()
    release.wait(10)
    return records.FileCheck(path, 1, 1, None)

  check = records.BackgroundRecordCheck(["a", "b", "c"], check_file=slow_check)
  assert started.wait(10)
  check.close()
  release.set()
  assert check.wait(10)
  assert seen == ["a"] and check.problem is None


@pytest.mark.parametrize("count", [0, 1, 3, 7, 9])
def test_record_lengths_are_summed_across_chunks(count):
  # Chunks of 3: none, part of one, exactly one, several with a rest, exactly three.
  lengths = [(index * 37) % 11 for index in range(count)]
  assert records._data_bytes(iter([b"x" * n for n in lengths]), chunk_records=3) == sum(lengths)


def _preflight(paths, max_seq_length=data_records_tests.SEQ,
               max_predictions_per_seq=data_records_tests.PRED,
               vocab_size=data_records_tests.VOCAB):
  """run_pretraining.py's pre-flight of training files `paths`; returns its UsageError's text."""
  f = types.SimpleNamespace(
      do_train=True, do_eval=False, eval_files_dir=None, input_file=",".join(paths),
      input_files_dir=None, max_seq_length=max_seq_length,
      max_predictions_per_seq=max_predictions_per_seq, enable_packed_data_mode=None,
      avg_seq_per_pack=None, next_sentence_loss=True)
  with pytest.raises(errors.UsageError) as raised:
    run_pretraining._resolve_inputs(f, vocab_size)  # pylint: disable=protected-access
  return str(raised.value)


def test_the_preflight_hints_at_the_flags_only_for_shapes_and_token_ids(tmp_path):
  paths = data_records_tests._write_data(tmp_path / "data", rows=(4,))  # ids < VOCAB
  # A damaged file: its first record's length field is absurd (with a right CRC).
  damaged = str(tmp_path / "damaged.tfrecord")
  framing_tests.bad_length_file(damaged, before=())
  message = _preflight([paths[0], damaged])
  assert message.startswith("%s: cannot read the first record: " % damaged), message
  assert "record 0 at byte offset 0" in message and HINT not in message
  empty = tmp_path / "empty.tfrecord"
  empty.write_bytes(b"")
  assert _preflight([str(empty)]) == "%s: the file has no records" % empty
  # The model's lengths and vocabulary: the hint names what to check.
  assert _preflight(paths, max_seq_length=32) == (
      "%s: feature 'input_ids' of the first record has 16 values, expected 32 "
      "(max_seq_length=32) %s" % (paths[0], HINT))
  assert _preflight(paths, max_predictions_per_seq=5).endswith(
      "expected 5 (max_predictions_per_seq=5) " + HINT)
  message = _preflight(paths, vocab_size=2)
  assert "is outside [0, vocab_size=2)" in message and message.endswith(HINT)
