"""The records pre-flight (utils/check_records.py): which files it checks, one line per bad file in
the files' order, the summary, the exit codes; end to end, the real command.

The checks of one file (`records.check_record_file`) are tests/test_data_records_file_check.py's.
"""

import os

import pytest
import tensorflow as tf

from tests import helpers
from tests import test_data_record_framing as framing_tests
from utils import check_records
from utils.core import errors
from utils.data import records

# Data sizes of the records of every file here.
SIZES = (20, 500, 3, 90)


def _write(path, sizes=SIZES):
  """A TFRecord file of records of the given data sizes. Returns each record's byte offset, from
  the sizes alone (8-byte length, 4-byte CRC, data, 4-byte CRC), and the file's size last."""
  with tf.io.TFRecordWriter(str(path)) as writer:
    for size in sizes:
      writer.write(b"r" * size)
  offsets = [0]
  for size in sizes:
    offsets.append(offsets[-1] + 16 + size)
  return offsets


def _write_directory(directory):
  """a-good, b-flipped (a data byte of record 2), c-cut (mid-data of record 1), and a hidden file
  (not checked). Returns {name: path} and the lines the check must print for the bad ones."""
  directory.mkdir()
  files = {name: str(directory / ("%s.tfrecord" % name)) for name in ("a-good", "b-flipped",
                                                                        "c-cut")}
  offsets = _write(files["a-good"])
  _write(files["b-flipped"])
  data = bytearray(open(files["b-flipped"], "rb").read())
  data[offsets[2] + 12 + 1] ^= 1
  open(files["b-flipped"], "wb").write(bytes(data))
  _write(files["c-cut"])
  with open(files["c-cut"], "r+b") as handle:
    handle.truncate(offsets[1] + 12 + 100)
  (directory / ".hidden").write_bytes(b"not a record file")
  lines = [
      "check_records: error: %s: record 2 at byte offset %d: data CRC mismatch"
      % (files["b-flipped"], offsets[2]),
      "check_records: error: %s: record 1 at byte offset %d: truncated: 112 bytes left, fewer "
      "than the record's 516 (500 of data, 16 of framing)" % (files["c-cut"], offsets[1]),
  ]
  return files, lines, offsets


def test_list_files_takes_directories_files_and_globs_each_file_once(tmp_path):
  (tmp_path / "d").mkdir()
  (tmp_path / "d" / "sub").mkdir()
  for name in ("d/x.tfrecord", "d/y.tfrecord", "d/.hidden", "d/sub/z.tfrecord", "w.tfrecord"):
    (tmp_path / name).write_bytes(b"")
  got = check_records.list_files([str(tmp_path / "w.tfrecord"), str(tmp_path / "d" / "y*"),
                                  str(tmp_path / "d")])
  assert got == [str(tmp_path / name) for name in ("w.tfrecord", "d/y.tfrecord", "d/x.tfrecord")]


def test_list_files_names_every_path_without_a_file(tmp_path):
  (tmp_path / "empty").mkdir()
  (tmp_path / "a.tfrecord").write_bytes(b"")
  with pytest.raises(errors.UsageError) as raised:
    check_records.list_files([str(tmp_path / "*.nothing"), str(tmp_path / "a.tfrecord"),
                              str(tmp_path / "empty")])
  assert str(raised.value) == "no file matches %s, %s" % (tmp_path / "*.nothing",
                                                          tmp_path / "empty")


def test_directory_with_two_bad_files_gives_two_lines_a_summary_and_exit_2(tmp_path, capsys):
  files, lines, offsets = _write_directory(tmp_path / "data")
  assert check_records.main([str(tmp_path / "data"), "--num_workers=1"]) == 2
  out, err = capsys.readouterr()
  assert err.splitlines() == lines
  # Records: 4 good ones in a-good, the 2 before the bad one in b-flipped, 1 in c-cut.
  size = 2 * offsets[-1] + offsets[1] + 12 + 100
  assert out.startswith("check_records: 3 files, 7 records, %d bytes in " % size), out
  assert out.endswith(" MB/s), 2 bad\n"), out
  assert check_records.main([files["a-good"], "--num_workers=1"]) == 0
  out, err = capsys.readouterr()
  assert err == "" and out.startswith("check_records: 1 file, 4 records, %d bytes in "
                                      % offsets[-1]) and out.endswith(", 0 bad\n"), out


def test_a_pattern_without_a_file_is_one_line_and_exit_2(tmp_path, capsys):
  pattern = str(tmp_path / "part-*.tfrecord")
  assert check_records.main([pattern]) == 2
  out, err = capsys.readouterr()
  assert out == "" and err == "check_records: error: no file matches %s\n" % pattern


def test_bad_files_are_reported_in_the_files_order_as_soon_as_those_before_are_done(monkeypatch):
  # Results come back in the order the workers finish: here the last first.
  def finish_in_reverse(function, tasks, num_workers, describe, passed_errors):
    del num_workers, describe, passed_errors
    for index in reversed(range(len(tasks))):
      yield index, function(tasks[index])

  def check(path):
    return records.FileCheck(path, 1, 0, None if path == "good" else "bad")

  monkeypatch.setattr(check_records.worker_pool, "run_tasks", finish_in_reverse)
  monkeypatch.setattr(check_records.records, "check_record_file", check)
  monkeypatch.setattr(check_records, "_file_size", lambda path: 1)
  reported = []
  results = check_records.check_files(["bad1", "good", "bad2", "bad3"], 4,
                                      lambda result: reported.append(result.path))
  assert reported == ["bad1", "bad2", "bad3"]
  assert [result.path for result in results] == ["bad1", "good", "bad2", "bad3"]


def test_files_are_grouped_in_order_into_tasks_of_about_equal_bytes():
  group = check_records.group_files
  # As many tasks as workers, of consecutive files ...
  assert group([50] * 8, 2, task_bytes=1000) == [[0, 1, 2, 3], [4, 5, 6, 7]]
  assert group([50] * 8, 3, task_bytes=1000) == [[0, 1, 2], [3, 4], [5, 6, 7]]
  # ... more when every task still gets task_bytes (fewer forks, each worth its start) ...
  assert group([50] * 8, 2, task_bytes=100) == [[0, 1], [2, 3], [4, 5], [6, 7]]
  # ... a file never split, however large; no empty task; never more tasks than files.
  assert group([10, 1000, 10, 10], 4, task_bytes=100) == [[0], [1], [2, 3]]
  assert group([5, 5], 8) == [[0], [1]]
  assert group([0, 0, 0], 2) == [[0, 1, 2]]
  assert group([], 2) == []


@pytest.mark.e2e
def test_command_reports_the_bad_files_of_a_directory_and_a_missing_pattern(tmp_path):
  files, lines, _ = _write_directory(tmp_path / "data")
  proc = helpers.run_python(["-m", "utils.check_records", tmp_path / "data", "--num_workers=2"],
                            check=False)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert proc.stderr.splitlines() == lines
  assert proc.stdout.startswith("check_records: 3 files, 7 records, "), proc.stdout
  assert proc.stdout.count("\n") == 1 and proc.stdout.endswith(", 2 bad\n"), proc.stdout
  proc = helpers.run_python(["-m", "utils.check_records", files["a-good"],
                             tmp_path / "none" / "*.tfrecord"], check=False)
  assert (proc.returncode, proc.stdout) == (2, "")
  assert proc.stderr.splitlines() == ["check_records: error: no file matches %s"
                                      % (tmp_path / "none" / "*.tfrecord")]
  proc = helpers.run_python(["-m", "utils.check_records", files["a-good"]], check=False)
  assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr[-3000:]
  assert proc.stdout.startswith("check_records: 1 file, 4 records, %d bytes in "
                                % os.path.getsize(files["a-good"])), proc.stdout


@pytest.mark.e2e
def test_command_names_a_length_past_the_end_with_its_crc_in_one_line(tmp_path):
  # TensorFlow's reader died on it (SIGSEGV, exit 139, no output).
  path = tmp_path / "huge.tfrecord"
  offset, size = framing_tests.bad_length_file(path)
  proc = helpers.run_python(["-m", "utils.check_records", path], check=False, timeout=120)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert proc.stderr.splitlines() == ["check_records: error: %s: record 4 at byte offset %d: %s"
                                      % (path, offset, framing_tests.HUGE_PROBLEM)]
  assert proc.stdout.startswith("check_records: 1 file, 4 records, %d bytes in " % size)
  assert proc.stdout.endswith(", 1 bad\n"), proc.stdout
