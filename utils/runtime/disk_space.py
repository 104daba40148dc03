"""Free space on the disk of an output directory, and recognising a write that found none.

  free = disk_space.free_bytes(output_dir)            # None for a `scheme://` path
  if disk_space.is_disk_full(error): ...              # ENOSPC / EDQUOT anywhere in the chain

A full disk surfaces in several shapes: an `OSError` with errno ENOSPC (the run log, a JSON
record), a TensorFlow `ResourceExhaustedError` or `UnknownError` whose message holds the
operating system's "No space left on device" (a checkpoint write, whose message also carries
TensorFlow's out-of-memory hint, wrong for a disk), or either of these as the cause or context
of another error. `is_disk_full` looks at every error of the chain.
"""

import errno
import os

from utils.core import paths

# Operating-system messages of a write that found no space (ENOSPC, EDQUOT).
DISK_FULL_MESSAGES = ("No space left on device", "Disk quota exceeded")
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def is_local(path):
  """Whether `path` is a local file-system path (not `gs://`, `hdfs://`, ...)."""
  return not paths.is_remote(str(path))


def existing_ancestor(path):
  """`path` itself when it exists, else its nearest existing parent directory."""
  path = os.path.abspath(path)
  while not os.path.exists(path):
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  return path


def free_bytes(path):
  """Bytes an unprivileged writer can still write on the file system of `path`.

  Args:
    path: a file or directory; when it does not exist yet, its nearest existing parent is asked.

  Returns:
    int, or None for a non-local path (`scheme://`) or a file system that cannot be asked.
  """
  if not is_local(path):
    return None
  try:
    stat = os.statvfs(existing_ancestor(path))
  except OSError:
    return None
  return stat.f_bavail * stat.f_frsize


def error_chain(error):
  """`error`, then its __cause__ / __context__ chain (each error once)."""
  seen = []
  while error is not None and all(error is not e for e in seen):
    seen.append(error)
    error = error.__cause__ or error.__context__
  return seen


def is_disk_full(error):
  """Whether `error` (or an error it was raised from) is a write that found no space.

  Args:
    error: an exception.

  Returns:
    bool: an OSError with errno ENOSPC / EDQUOT, or any error whose message holds the operating
    system's message for them.
  """
  for e in error_chain(error):
    if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
      return True
    message = getattr(e, "message", None) or str(e)
    if any(text in message for text in DISK_FULL_MESSAGES):
      return True
  return False


def failed_path(error):
  """The file a disk-full `error` names (`OSError.filename`), or None."""
  for e in error_chain(error):
    if isinstance(e, OSError) and e.filename:
      return os.fsdecode(e.filename)
  return None


def format_bytes(num_bytes):
  """'3.43 MB' / '12.1 kB' / '512 B' (decimal units, as `df -H` prints them)."""
  for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
    if num_bytes >= scale:
      return "%.3g %s" % (num_bytes / scale, unit)
  return "%d B" % num_bytes
