"""utils/runtime/disk_space.py: a full disk recognised in every shape it is reported in, the
free space of a local directory, and byte counts as people read them."""

import errno
import os

import tensorflow as tf

from utils.runtime import disk_space


def test_disk_full_is_recognised_in_every_shape():
  assert disk_space.is_disk_full(OSError(errno.ENOSPC, "No space left on device", "/x/log"))
  assert disk_space.is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
  tf_error = tf.errors.ResourceExhaustedError(
      None, None, "/d/model.ckpt-4_temp/part-00000; No space left on device")
  assert disk_space.is_disk_full(tf_error)
  try:
    try:
      raise OSError(errno.ENOSPC, "No space left on device")
    except OSError as inner:
      raise RuntimeError("wrapped") from inner
  except RuntimeError as outer:
    assert disk_space.is_disk_full(outer)
  # Out of memory, a missing file, a permission problem: not a full disk.
  assert not disk_space.is_disk_full(tf.errors.ResourceExhaustedError(None, None, "OOM when "
                                                                       "allocating tensor"))
  assert not disk_space.is_disk_full(OSError(errno.ENOENT, "No such file or directory"))
  assert not disk_space.is_disk_full(PermissionError(errno.EACCES, "Permission denied"))
  assert disk_space.failed_path(OSError(errno.ENOSPC, "No space", "/x/log.json")) == "/x/log.json"


def test_free_bytes_matches_statvfs_and_skips_remote_paths(tmp_path):
  stat = os.statvfs(str(tmp_path))
  free = disk_space.free_bytes(str(tmp_path / "not" / "yet"))
  # Other processes write to the same disk meanwhile: within 64 MB.
  assert abs(free - stat.f_bavail * stat.f_frsize) < 64 * 2**20
  assert disk_space.free_bytes("gs://bucket/run") is None
  assert disk_space.format_bytes(3426080) == "3.43 MB"
  assert disk_space.format_bytes(512) == "512 B"


def test_is_local_tells_scheme_paths_apart(tmp_path):
  assert disk_space.is_local(str(tmp_path)) and disk_space.is_local("relative/dir")
  assert not disk_space.is_local("gs://bucket/run") and not disk_space.is_local("hdfs://nn/x")


def test_existing_ancestor_is_the_nearest_directory_that_exists(tmp_path):
  assert disk_space.existing_ancestor(str(tmp_path)) == str(tmp_path)
  assert disk_space.existing_ancestor(str(tmp_path / "a" / "b" / "c")) == str(tmp_path)
  (tmp_path / "a").mkdir()
  assert disk_space.existing_ancestor(str(tmp_path / "a" / "b")) == str(tmp_path / "a")


def test_format_bytes_uses_decimal_units_with_three_digits():
  assert [disk_space.format_bytes(n) for n in (999, 1000, 12100, 2 * 10**9, 7.5e12)] == [
      "999 B", "1 kB", "12.1 kB", "2 GB", "7.5 TB"]
