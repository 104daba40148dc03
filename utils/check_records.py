"""Checks every record of TFRecord files before a long job: `--help` for the flags.

  python -m utils.check_records /data/seq128/train '/data/seq512/*.tfrecord' [--num_workers=N]

Each PATH is a directory (its files, as --input_files_dir takes them: hidden files and
subdirectories left out), a file or a glob pattern. Every record of every file is read, its
length checked against the length's CRC and its data against the data's CRC, and a file must end
with a whole record (`records.check_record_file`). The files are read in parallel by
`--num_workers` processes (`worker_pool`), each task a group of consecutive files of about equal
bytes (`group_files`). One line on stderr per bad file, naming its first bad record, in the order
the files are listed:

  check_records: error: /data/part-3.tfrecord: record 1204 at byte offset 2087252: data CRC mismatch

then a summary on stdout (files, records, bytes, seconds, MB/s, bad files). Exit code 0 when every
file is good, 2 when one is bad and for a usage error (a PATH that matches no file is named).
docs/DATA.md gives its speed.
"""

import argparse
import sys
import time

# Before TensorFlow loads: its native start-up INFO lines are left out unless TF_CPP_MIN_LOG_LEVEL
# is set (`utils/runtime/cli.py`).
from utils.runtime import cli  # pylint: disable=g-bad-import-order
import tensorflow as tf
from utils.core import errors
from utils.core import paths
from utils.data import records
from utils.runtime import worker_pool

PROGRAM = "check_records"
# Least bytes of a worker process's task (a group of files): forking a process that has
# TensorFlow loaded took 20 to 27 ms here, the time to check about 25 MB, so a process for each
# small file would spend as long starting as checking.
TASK_BYTES = 512 * 2**20


def list_files(patterns):
  """The files to check, in order, each once.

  Args:
    patterns: directories, files or glob patterns, listed as --input_files_dir lists its entries
      (`paths.resolve_files`).

  Returns:
    list of paths.

  Raises:
    errors.UsageError: naming every pattern that gives no file.
  """
  files, empty = [], []
  for pattern in patterns:
    found = paths.resolve_files(directories=[pattern])
    if not found:
      empty.append(pattern)
    files += found
  errors.require(not empty, "no file matches %s", ", ".join(empty))
  return list(dict.fromkeys(files))


def group_files(sizes, num_workers, task_bytes=TASK_BYTES):
  """Consecutive files grouped into the worker processes' tasks, of about equal bytes each.

  Args:
    sizes: the files' sizes in bytes, in order.
    num_workers: worker processes.
    task_bytes: least bytes of a task, unless that leaves a worker without one.

  Returns:
    list of lists of file indices: consecutive, in order, none empty; at least
    min(num_workers, files) groups, more when the bytes allow `task_bytes` each.
  """
  total = sum(sizes)
  count = max(1, min(len(sizes), max(num_workers, total // task_bytes)))
  groups = [[] for _ in range(count)]
  done = 0
  for index, size in enumerate(sizes):
    # The group that holds the file's middle byte: a file is never split, and each group gets
    # about total / count bytes.
    groups[min(count - 1, (done + size // 2) * count // max(total, 1))].append(index)
    done += size
  return [group for group in groups if group]


def _file_size(path):
  """The size of a file in bytes; 0 when it cannot be read (its check then says why)."""
  try:
    return tf.io.gfile.stat(path).length
  except tf.errors.OpError:
    return 0


def _describe_group(group):
  return "file %s" % group[0] if len(group) == 1 else "files %s to %s" % (group[0], group[-1])


def _check_group(group):
  """A worker process's task: `records.check_record_file` of each file of a group, in order."""
  return [records.check_record_file(path) for path in group]


def check_files(files, num_workers, report):
  """Checks every file in worker processes; reports each bad one in the files' order.

  Args:
    files: list of TFRecord files.
    num_workers: worker processes at a time (1: every file in this process).
    report: called with the `records.FileCheck` of each bad file, as soon as every file before it
      is checked (so the lines come in the files' order, while the check goes on).

  Returns:
    list of `records.FileCheck`, in the order of `files`.
  """
  groups = [[files[index] for index in group]
            for group in group_files([_file_size(path) for path in files], num_workers)]
  results = [None] * len(groups)
  reported = 0
  # No error is passed back as the worker raised it: `check_record_file` reports bad data in its
  # result, so any error is a failure of the worker, one line naming its files (`_run`).
  for index, checks in worker_pool.run_tasks(
      _check_group, groups, max(1, min(num_workers, len(groups))), describe=_describe_group,
      passed_errors=()):
    results[index] = checks
    while reported < len(groups) and results[reported] is not None:
      for check in results[reported]:
        if check.problem is not None:
          report(check)
      reported += 1
  return [check for checks in results for check in checks]


def _count(number, noun):
  return "%d %s%s" % (number, noun, "" if number == 1 else "s")


def summary(results, seconds):
  """The summary line: files, records, bytes, seconds, MB/s (10^6 bytes) and bad files."""
  size = sum(result.size for result in results)
  return "%s: %s, %s, %s in %.2f s (%.0f MB/s), %d bad" % (
      PROGRAM, _count(len(results), "file"),
      _count(sum(result.records for result in results), "record"), _count(size, "byte"),
      seconds, size / 1e6 / max(seconds, 1e-9),
      sum(result.problem is not None for result in results))


def _run(args):
  files = list_files(args.paths)
  start = time.perf_counter()
  try:
    results = check_files(files, args.num_workers,
                          lambda result: errors.report(PROGRAM, "%s: %s" % (result.path,
                                                                            result.problem)))
  except RuntimeError as e:  # a worker failed or died (killed, out of memory): named by its files
    errors.report(PROGRAM, str(e))
    return errors.FAILURE_EXIT_CODE
  print(summary(results, time.perf_counter() - start), flush=True)
  if any(result.problem is not None for result in results):
    return errors.USAGE_EXIT_CODE
  return 0


def _positive_int(value):
  try:
    number = int(value)
  except ValueError:
    number = 0
  if number < 1:
    raise argparse.ArgumentTypeError("expected a whole number >= 1, got %r" % value)
  return number


def main(argv=None):
  parser = argparse.ArgumentParser(
      prog="python -m utils.check_records", allow_abbrev=False,
      description="Read every record of TFRecord files and check its framing: the length's CRC, "
                  "the data's CRC, no truncated record at the end. One line on stderr per bad "
                  "file (its first bad record's index and byte offset, and what is wrong), a "
                  "summary on stdout; exit code 0 when all are good, 2 otherwise.")
  parser.add_argument("paths", nargs="+", metavar="PATH",
                      help="a directory (its files, hidden ones and subdirectories left out), a "
                           "file or a glob pattern (quoted)")
  parser.add_argument("--num_workers", type=_positive_int,
                      default=worker_pool.default_num_workers(),
                      help="processes reading the files, each a group of files at a time "
                           "(default: the cores, %(default)s)")
  args = parser.parse_args(argv)
  # TensorFlow's Python warnings are not the command's output.
  cli.configure_python_logging(verbose=False)
  return errors.run_reporting_errors(PROGRAM, _run, args)


if __name__ == "__main__":
  sys.exit(main())
