"""utils/runtime/output_lock.py: output directories created with a clear error, one job per
directory."""

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from utils.runtime import output_lock

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOLDER = ("import sys, time\n"
          "from utils.runtime import output_lock\n"
          "output_lock.lock_output_dir(sys.argv[1], command='holder job')\n"
          "print('locked', flush=True)\n"
          "time.sleep(120)\n")


def test_make_directory_creates_parents_and_names_a_file_in_the_way(tmp_path):
  output_lock.make_directory(str(tmp_path / "a" / "b"))
  assert (tmp_path / "a" / "b").is_dir()
  output_lock.make_directory(str(tmp_path / "a" / "b"))  # existing: nothing to do
  regular = tmp_path / "results.txt"
  regular.write_text("not a directory")
  with pytest.raises(ValueError, match="--out=.*results.txt/run: cannot create the directory: "
                                       ".*results.txt is a regular file"):
    output_lock.make_directory(str(regular / "run"), flag="--out")
  with pytest.raises(ValueError, match="results.txt"):
    output_lock.make_directory(str(regular))


def test_directory_problem_names_what_keeps_a_path_from_being_a_directory_creating_nothing(
    tmp_path):
  assert output_lock.directory_problem(str(tmp_path)) is None
  assert output_lock.directory_problem(str(tmp_path / "new" / "deeper")) is None
  regular = tmp_path / "results.txt"
  regular.write_text("not a directory")
  fifo = tmp_path / "pipe"
  os.mkfifo(fifo)
  for path, culprit, kind in [(regular, regular, "a regular file"),
                              (regular / "run" / "deeper", regular, "a regular file"),
                              (fifo / "run", fifo, "a special file")]:
    assert output_lock.directory_problem(str(path)) == "%s is %s, not a directory" % (culprit,
                                                                                      kind)
  assert output_lock.directory_problem("gs://bucket/run") is None  # its file system tells
  assert sorted(os.listdir(tmp_path)) == ["pipe", "results.txt"]


def _as_unprivileged_user(function):
  """function() in a forked child that runs as user and group nobody when this process is root
  (root may write into any directory), as this process otherwise; returns its result."""
  read_end, write_end = os.pipe()
  pid = os.fork()
  if pid == 0:  # the child: never returns to pytest
    status = 1
    try:
      if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
      os.write(write_end, json.dumps(function()).encode())
      status = 0
    finally:
      os._exit(status)  # pylint: disable=protected-access
  os.close(write_end)
  with os.fdopen(read_end) as reader:
    result = reader.read()
  _, status = os.waitpid(pid, 0)
  assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
  return json.loads(result)


NOBODY = 65534


def test_directory_problem_names_a_directory_that_is_not_writable():
  # Under a directory everyone may enter (pytest's own may be root's alone).
  root = tempfile.mkdtemp(prefix="output-lock-")
  try:
    os.chmod(root, 0o755)
    locked, open_dir = os.path.join(root, "locked"), os.path.join(root, "open")
    os.mkdir(locked, 0o555)
    os.mkdir(open_dir)
    os.chmod(locked, 0o555)
    os.chmod(open_dir, 0o777)
    problems = _as_unprivileged_user(lambda: [output_lock.directory_problem(path) for path in (
        locked, os.path.join(locked, "run"), open_dir, os.path.join(open_dir, "run"))])
    assert problems == ["%s is not writable" % locked] * 2 + [None, None]
  finally:
    shutil.rmtree(root)


def test_a_held_lock_refuses_a_second_holder_naming_the_first(tmp_path):
  lock = output_lock.lock_output_dir(str(tmp_path), command="first job")
  owner = json.loads((tmp_path / output_lock.LOCK_FILE_NAME).read_text())
  assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
  with pytest.raises(output_lock.OutputDirLocked) as raised:
    output_lock.lock_output_dir(str(tmp_path), command="second job")
  message = str(raised.value)
  assert str(tmp_path) in message and "pid %d" % os.getpid() in message
  assert socket.gethostname() in message and "first job" in message
  lock.release()
  assert not (tmp_path / output_lock.LOCK_FILE_NAME).exists()
  output_lock.lock_output_dir(str(tmp_path)).release()  # free again


@pytest.mark.e2e
def test_lock_of_a_killed_process_is_taken_over_with_a_warning(tmp_path, caplog):
  start = time.time()
  holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(output_lock.OutputDirLocked, match="pid %d .*holder job" % holder.pid):
      output_lock.lock_output_dir(str(tmp_path))
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
  finally:
    if holder.poll() is None:
      holder.kill()
  # The dead holder's file is still there; its flock went with the process.
  assert (tmp_path / output_lock.LOCK_FILE_NAME).exists()
  with caplog.at_level(logging.WARNING):
    lock = output_lock.lock_output_dir(str(tmp_path))
  assert any("no longer running" in r.getMessage() and "pid %d" % holder.pid in r.getMessage()
             for r in caplog.records)
  assert json.loads((tmp_path / output_lock.LOCK_FILE_NAME).read_text())["pid"] == os.getpid()
  lock.release()
  assert time.time() - start < 30


def test_remote_directories_get_an_inert_lock():
  lock = output_lock.lock_output_dir("gs://bucket/run")
  assert not lock.held
  lock.release()
