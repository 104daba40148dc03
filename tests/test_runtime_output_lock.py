"""utils/runtime/output_lock.py: output directories created with a clear error, one job per
directory."""

import json
import logging
import os
import signal
import socket
import subprocess
import sys
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
