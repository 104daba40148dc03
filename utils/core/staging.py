"""An output directory written whole or not at all: built under a temporary name, then renamed.

  with staging.staged_directory(output_dir, "--output_dir") as tmp:
    ...write files into tmp...
  # output_dir now holds them; after an error nothing is left (neither tmp nor output_dir).

Local paths only (a rename of a directory is not atomic on object stores).
"""

import contextlib
import os
import shutil
import tempfile

from utils.core import errors
from utils.core import paths


def check_empty_or_missing(output_dir, flag):
  """Raises errors.UsageError unless `output_dir` is missing or an empty directory."""
  if paths.is_remote(output_dir):
    raise errors.UsageError("%s=%s: write to a local directory (a remote directory cannot be "
                            "renamed into place whole)" % (flag, output_dir))
  if os.path.lexists(output_dir):
    if not os.path.isdir(output_dir):
      raise errors.UsageError("%s=%s exists and is not a directory" % (flag, output_dir))
    if os.listdir(output_dir):
      raise errors.UsageError("%s=%s exists and is not empty (%d entries): choose a new or "
                              "empty directory" % (flag, output_dir, len(os.listdir(output_dir))))


@contextlib.contextmanager
def staged_directory(output_dir, flag):
  """Yields a temporary directory beside `output_dir` that becomes `output_dir` on success.

  Args:
    output_dir: the directory to create; it must be missing or empty.
    flag: the flag that named it, for messages ("--output_dir").

  Raises:
    errors.UsageError: when `output_dir` exists and is not empty (checked before anything is
      written).
  """
  check_empty_or_missing(output_dir, flag)
  output_dir = os.path.abspath(output_dir)
  parent = os.path.dirname(output_dir)
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(dir=parent, prefix=".%s.partial-" % os.path.basename(output_dir))
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would outlive the rename
  try:
    yield tmp
    check_empty_or_missing(output_dir, flag)
    if os.path.isdir(output_dir):
      os.rmdir(output_dir)
    os.rename(tmp, output_dir)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
