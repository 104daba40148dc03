"""Files by path: local paths through Python, "scheme://" paths (gs://, hdfs://, ...) through
`tf.io.gfile`. The one place that makes that choice; TensorFlow is imported only for a scheme://
path, so the data tools stay TensorFlow-free on local files.

  with paths.open_file("gs://bucket/vocab.txt") as f: ...
  files = paths.resolve_files(["data/train-*.tfrecord"], ["data/more"])
"""

import errno
import glob
import os

from utils.core import errors


def is_remote(path):
  """True for a "scheme://" path."""
  return "://" in path


def _gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.gfile


def open_file(path, mode="r"):
  """Opens `path`; text modes read and write UTF-8 with lines ending at "\\n" only.

  Args:
    path: local or scheme:// path.
    mode: "r", "w", "a", "rb", "wb", ...

  Returns:
    a file object.
  """
  if is_remote(path):
    return _gfile().GFile(path, mode)
  if "b" in mode:
    return open(path, mode)
  return open(path, mode, encoding="utf-8", newline="\n")


def is_file(path):
  """True when `path` exists and is not a directory."""
  if is_remote(path):
    return _gfile().exists(path) and not _gfile().isdir(path)
  return os.path.isfile(path)


def is_dir(path):
  """True when `path` is a directory."""
  return _gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def local_stamp(path):
  """(modification time in ns, size) of a local file, None for a scheme:// path."""
  if is_remote(path):
    return None
  status = os.stat(path)
  return status.st_mtime_ns, status.st_size


def rename(source, target):
  """Moves `source` to `target`, replacing it."""
  if is_remote(source):
    _gfile().rename(source, target, overwrite=True)
  else:
    os.replace(source, target)


def remove_if_exists(path):
  """Deletes the file `path` when it exists."""
  if is_remote(path):
    if _gfile().exists(path):
      _gfile().remove(path)
  elif os.path.exists(path):
    os.remove(path)


def glob_files(pattern):
  """The files (not directories) matching a glob pattern, sorted.

  Local patterns follow Python's `glob` (a wildcard does not match a leading "."); scheme://
  patterns follow `tf.io.gfile.glob`.

  Raises:
    errors.UsageError: a match is a symbolic link in a loop (`_refuse_link_loops`).
  """
  if is_remote(pattern):
    matches = _gfile().glob(pattern)
  else:
    matches = glob.glob(pattern)
  return _refuse_link_loops(sorted(path for path in matches if not is_dir(path)))


def _directory_files(directory):
  """The files of a directory, sorted, without hidden (".name") files and subdirectories."""
  names = _gfile().listdir(directory) if is_remote(directory) else os.listdir(directory)
  return _refuse_link_loops([path for path in (os.path.join(directory, name)
                                               for name in sorted(names)
                                               if not name.startswith("."))
                             if not is_dir(path)])


def _refuse_link_loops(files):
  """`files`, checked for local symbolic links that lead back to themselves.

  Such a link is neither a file nor a directory to `os.path`, so it used to be listed as a file,
  and the first reader to open it failed with "Too many levels of symbolic links", worded as a
  problem of that reader (a record that does not fit the model, a bad vocabulary).

  Args:
    files: paths from a listing or a glob.

  Returns:
    `files`, unchanged.

  Raises:
    errors.UsageError: naming the first link in a loop.
  """
  for path in files:
    if is_remote(path) or not os.path.islink(path):
      continue
    try:
      os.stat(path)
    except OSError as e:
      if e.errno == errno.ELOOP:
        raise errors.UsageError("%s: a symbolic link in a loop (too many levels of symbolic "
                                "links); remove or fix the link" % path)
  return files


def split_list(value):
  """The non-empty, stripped entries of a comma-separated flag value (None: [])."""
  return [entry.strip() for entry in (value or "").split(",") if entry.strip()]


def resolve_files(patterns=(), directories=()):
  """The files named by glob patterns and directories.

  Args:
    patterns: file names or glob patterns.
    directories: directories whose files are all taken (hidden files and subdirectories left
      out); an entry that is not a directory is taken as a file name or glob pattern.

  Returns:
    list of paths: the files of each pattern or directory sorted, patterns first, then
    directories, in the given order, each path once (first place kept); [] when nothing matches.

  Raises:
    errors.UsageError: a file found is a symbolic link in a loop, named.
  """
  files = []
  for pattern in patterns:
    files += glob_files(pattern)
  for directory in directories:
    files += _directory_files(directory) if is_dir(directory) else glob_files(directory)
  return list(dict.fromkeys(files))
