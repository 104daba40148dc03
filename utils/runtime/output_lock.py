"""Output directories: created (or checked) with a clear error, and locked by the job that
writes them.

Two jobs writing one directory interleave their checkpoints, events file and log into one set that
belongs to neither. The process that writes a directory therefore takes its lock first:

  lock = output_lock.lock_output_dir("/results/phase_1")   # OutputDirLocked if a job holds it
  ...                                                       # train, write
  lock.release()                                            # also released at exit

The lock is the file `<dir>/.output_dir.lock` holding the owner's host, pid, start time and
command line, plus an exclusive `flock` on it held for the owner's lifetime (NFS clients map it to
a POSIX lock). The kernel drops the `flock` when the owner dies however it dies (kill -9
included), so a lock file whose `flock` is free belongs to a dead process: it is taken over, with
a warning naming that process. Remote ("scheme://") directories are not locked (no file locks
there); `lock_output_dir` logs that and returns an inert lock.

`make_directory` creates a directory, or fails naming the flag and why (the regular file in the
way, the directory that is not writable); `directory_problem` tells the same without creating
anything, for a tool that checks its output directory before any work. No TensorFlow import at
module level: the data generator uses `make_directory` too.
"""

import atexit
import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time

from absl import logging

from utils.core import paths
from utils.runtime import disk_space

LOCK_FILE_NAME = ".output_dir.lock"


class OutputDirLocked(ValueError):
  """Another live process holds the lock of the directory (message names it)."""


def make_directory(path, flag="--output_dir"):
  """Creates directory `path` and its parents (nothing to do when it exists).

  Args:
    path: local path or "scheme://" URL.
    flag: the flag or name the path came from, for the message.

  Raises:
    ValueError: naming `flag` and `path`, when the directory cannot be created (a regular file
      on the way, no permission, ...).
  """
  try:
    if paths.is_remote(path):
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      tf.io.gfile.makedirs(path)
    else:
      os.makedirs(path, exist_ok=True)
  except Exception as e:  # OSError locally, tf.errors.OpError remotely: both mean "cannot"
    raise ValueError("%s=%s: cannot create the directory: %s"
                     % (flag, path, _reason(e, path)))
  if not paths.is_remote(path) and not os.path.isdir(path):
    raise ValueError("%s=%s: not a directory" % (flag, path))


def directory_problem(path):
  """Why `path` cannot be made a directory and written into, found without creating anything.

  Args:
    path: a directory to write, existing or not. A "scheme://" path is not checked (only its file
      system can tell, when it is written).

  Returns:
    None when it can be (it is a writable directory, or its nearest existing parent is one), else
    the reason, naming the culprit: "<path> is a regular file, not a directory" (the path itself
    or a parent on the way; "a special file" for a pipe or a device) or "<directory> is not
    writable".
  """
  if paths.is_remote(path):
    return None
  nearest = disk_space.existing_ancestor(path)
  if not os.path.isdir(nearest):
    return "%s is %s, not a directory" % (nearest, "a regular file" if os.path.isfile(nearest)
                                          else "a special file")
  if not os.access(nearest, os.W_OK | os.X_OK):
    return "%s is not writable" % nearest
  return None


def _reason(error, path):
  """A short reason for a failed directory creation: `directory_problem`'s, else the error's."""
  problem = directory_problem(path)
  if problem:
    return problem
  if isinstance(error, OSError) and error.strerror:
    return error.strerror
  return getattr(error, "message", str(error)).strip().splitlines()[0]


def describe_owner(owner):
  """`host` / `pid` / start / command of a lock file's content, readable."""
  if not owner:
    return "an unknown process (empty lock file)"
  started = owner.get("started")
  when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "?"
  return "pid %s on host %s, started %s: %s" % (owner.get("pid", "?"), owner.get("host", "?"),
                                                 when, owner.get("command", "?"))


class OutputDirLock(object):
  """The lock of one output directory, held by this process (see the module docstring)."""

  def __init__(self, directory, path=None, fd=None):
    self.directory = directory
    self.path = path  # None: an inert lock (remote directory)
    self._fd = fd
    # `release` may run in a signal watcher's thread (utils/runtime/stop_signals.py) as well as
    # at exit: one release only, or the second would close whatever file reuses the descriptor.
    self._releasing = threading.Lock()
    if fd is not None:
      atexit.register(self.release)

  @property
  def held(self):
    return self._fd is not None

  def release(self):
    """Removes the lock file and drops the lock (idempotent, from any thread)."""
    with self._releasing:
      if self._fd is None:
        return
      try:
        os.remove(self.path)  # while still holding the flock: no one can take a half-removed lock
      except OSError:
        pass
      os.close(self._fd)
      self._fd = None
    atexit.unregister(self.release)


def _read_owner(fd):
  """The JSON content of the lock file open as `fd`, {} when empty or unreadable."""
  os.lseek(fd, 0, os.SEEK_SET)
  data = b""
  while True:
    chunk = os.read(fd, 65536)
    if not chunk:
      break
    data += chunk
  try:
    owner = json.loads(data.decode("utf-8"))
  except ValueError:
    return {}
  return owner if isinstance(owner, dict) else {}


def _this_owner(command):
  return {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
          "command": command if command is not None else " ".join(sys.argv)}


def lock_output_dir(directory, command=None):
  """Takes the lock of `directory` (which must exist) for this process.

  Args:
    directory: the output directory.
    command: the command line recorded in the lock file; default: this process's argv.

  Returns:
    an `OutputDirLock` (released by `release()` or at exit; by the kernel when the process dies).

  Raises:
    OutputDirLocked: naming the directory and the live process that holds it.
    ValueError: when the lock file cannot be created.
  """
  if paths.is_remote(directory):
    logging.info("%s is not a local directory: not locked against a second job", directory)
    return OutputDirLock(directory)
  path = os.path.join(directory, LOCK_FILE_NAME)
  while True:
    try:
      fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
      raise ValueError("--output_dir=%s: cannot create the lock file %s: %s"
                       % (directory, path, e.strerror))
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      if e.errno not in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
        os.close(fd)
        raise
      owner = _read_owner(fd)
      os.close(fd)
      raise OutputDirLocked(
          "--output_dir=%s is in use by another job (%s). Two jobs writing one directory mix "
          "their checkpoints and logs: wait for it to end, stop it, or give another "
          "--output_dir. Lock file: %s" % (directory, describe_owner(owner), path))
    # The file may have been removed (released) between open and flock: then the lock is on an
    # unlinked file, so start again on the path's current file.
    try:
      same = os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
      same = False
    if same:
      break
    os.close(fd)
  previous = _read_owner(fd)
  if previous or os.fstat(fd).st_size:
    logging.warning("%s: taking over the lock of a process that is no longer running (%s)",
                    directory, describe_owner(previous))
  os.ftruncate(fd, 0)
  os.lseek(fd, 0, os.SEEK_SET)
  os.write(fd, (json.dumps(_this_owner(command), sort_keys=True) + "\n").encode("utf-8"))
  os.fsync(fd)
  return OutputDirLock(directory, path, fd)
