"""utils/core/paths.py: local files through Python (UTF-8, "\\n"-only lines, no TensorFlow), file
lists from patterns and directories in their documented order, and the pure logic of scheme://
paths, checked with a stand-in for tf.io.gfile (nothing remote is opened)."""

import os

import pytest

from utils.core import errors
from utils.core import paths


@pytest.fixture
def no_gfile(monkeypatch):
  """Fails the test if tf.io.gfile is asked for: local paths must not need TensorFlow."""
  def refuse():
    pytest.fail("tf.io.gfile used for a local path")
  monkeypatch.setattr(paths, "_gfile", refuse)


@pytest.mark.parametrize("path,remote", [
    ("gs://bucket/vocab.txt", True), ("hdfs://namenode/data", True), ("s3://b/k", True),
    ("data/train.tfrecord", False), ("/abs/dir/file", False), ("relative:colon", False),
    ("", False)])
def test_is_remote_is_true_for_scheme_paths_only(path, remote):
  assert paths.is_remote(path) is remote


def test_text_mode_is_utf8_and_splits_lines_at_newline_only(tmp_path, no_gfile):
  target = str(tmp_path / "t.txt")
  with paths.open_file(target, "w") as f:
    f.write("h\u00e9\nx\n")
  assert (tmp_path / "t.txt").read_bytes() == b"h\xc3\xa9\nx\n"
  # "\r" is a plain character: not a line end, not translated.
  (tmp_path / "crlf.txt").write_bytes("\u00fc\r\nb\rc\n".encode("utf-8"))
  with paths.open_file(str(tmp_path / "crlf.txt")) as f:
    assert f.readlines() == ["\u00fc\r\n", "b\rc\n"]
  with paths.open_file(target, "a") as f:
    f.write("y\n")
  with paths.open_file(target, "rb") as f:
    assert f.read() == b"h\xc3\xa9\nx\ny\n"


def test_is_file_and_is_dir_tell_files_directories_and_missing_paths_apart(tmp_path, no_gfile):
  (tmp_path / "f").write_text("x")
  (tmp_path / "d").mkdir()
  assert (paths.is_file(str(tmp_path / "f")), paths.is_dir(str(tmp_path / "f"))) == (True, False)
  assert (paths.is_file(str(tmp_path / "d")), paths.is_dir(str(tmp_path / "d"))) == (False, True)
  missing = str(tmp_path / "missing")
  assert (paths.is_file(missing), paths.is_dir(missing)) == (False, False)


def test_local_stamp_is_mtime_ns_and_size_and_none_for_a_remote_path(tmp_path, no_gfile):
  target = tmp_path / "f.bin"
  target.write_bytes(b"12345")
  mtime_ns = 1_600_000_000_123_456_789
  os.utime(target, ns=(mtime_ns, mtime_ns))
  assert paths.local_stamp(str(target)) == (mtime_ns, 5)
  assert paths.local_stamp("gs://bucket/f.bin") is None


def test_rename_replaces_the_target_and_remove_if_exists_tolerates_missing(tmp_path, no_gfile):
  source, target = tmp_path / "new", tmp_path / "old"
  source.write_text("new")
  target.write_text("old")
  paths.rename(str(source), str(target))
  assert os.listdir(tmp_path) == ["old"] and target.read_text() == "new"
  paths.remove_if_exists(str(target))
  assert os.listdir(tmp_path) == []
  paths.remove_if_exists(str(target))  # already gone: no error
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value,expected", [
    (None, []), ("", []), (" , ,", []), ("a", ["a"]), (" a , b,,c ,", ["a", "b", "c"])])
def test_split_list_keeps_non_empty_stripped_entries(value, expected):
  assert paths.split_list(value) == expected


def test_glob_files_sorted_without_directories_or_hidden_matches(tmp_path, no_gfile):
  for name in ("b-2.rec", "a-1.rec", ".h-0.rec", "c.txt"):
    (tmp_path / name).write_text(name)
  (tmp_path / "d-3.rec").mkdir()
  base = str(tmp_path)
  assert paths.glob_files(os.path.join(base, "*.rec")) == [
      os.path.join(base, "a-1.rec"), os.path.join(base, "b-2.rec")]
  assert paths.glob_files(os.path.join(base, "*.none")) == []


def test_resolve_files_orders_patterns_then_directories_each_path_once(tmp_path, no_gfile):
  data, more = tmp_path / "data", tmp_path / "more"
  data.mkdir()
  more.mkdir()
  for name in ("t-1", "t-0", "other"):
    (data / name).write_text(name)
  for name in ("z", "y", ".hidden"):
    (more / name).write_text(name)
  (more / "sub").mkdir()
  (more / "sub" / "inner").write_text("x")
  d, m = str(data), str(more)
  files = paths.resolve_files(
      [os.path.join(d, "t-*"), os.path.join(m, "z")],
      [m, d, os.path.join(d, "o*")])  # the last entry is not a directory: a pattern
  assert files == [os.path.join(d, "t-0"), os.path.join(d, "t-1"), os.path.join(m, "z"),
                   os.path.join(m, "y"), os.path.join(d, "other")]
  assert paths.resolve_files() == []
  assert paths.resolve_files([os.path.join(d, "nothing*")], [os.path.join(d, "none")]) == []


class _FakeGfile:
  """Stands in for tf.io.gfile over a listing held in memory: nothing remote is opened."""

  def __init__(self, files, directories):
    self.files, self.directories = set(files), set(directories)

  def isdir(self, path):
    return path in self.directories

  def exists(self, path):
    return path in self.files or path in self.directories

  def glob(self, pattern):
    prefix = pattern.rstrip("*")
    return [p for p in sorted(self.files | self.directories, reverse=True)
            if p.startswith(prefix)]

  def listdir(self, directory):
    return [p[len(directory) + 1:] for p in sorted(self.files | self.directories, reverse=True)
            if os.path.dirname(p) == directory]


def test_remote_paths_go_through_gfile_with_the_same_rules(monkeypatch):
  fake = _FakeGfile(files=["gs://b/d/2", "gs://b/d/1", "gs://b/d/.tmp", "gs://b/x-1"],
                    directories=["gs://b/d", "gs://b/d/sub", "gs://b/x-dir"])
  monkeypatch.setattr(paths, "_gfile", lambda: fake)
  assert paths.is_file("gs://b/d/1") and not paths.is_file("gs://b/d")
  assert paths.is_dir("gs://b/d") and not paths.is_dir("gs://b/x-1")
  assert paths.glob_files("gs://b/x*") == ["gs://b/x-1"]
  assert paths.resolve_files(["gs://b/x*"], ["gs://b/d"]) == [
      "gs://b/x-1", "gs://b/d/1", "gs://b/d/2"]


def test_a_symbolic_link_loop_is_named_as_such(tmp_path, no_gfile):
  # Before, the loop was listed as a file, and the record check that opened it worded the error
  # as a record that does not fit the model.
  (tmp_path / "part-0.tfrecord").write_bytes(b"x")
  os.symlink("self", str(tmp_path / "self"))
  with pytest.raises(errors.UsageError) as raised:
    paths.resolve_files(directories=[str(tmp_path)])
  assert str(raised.value).startswith(str(tmp_path / "self") + ": a symbolic link in a loop")
  # Two links leading to each other, met through a glob pattern.
  other = tmp_path / "pair"
  other.mkdir()
  os.symlink("b.tfrecord", str(other / "a.tfrecord"))
  os.symlink("a.tfrecord", str(other / "b.tfrecord"))
  with pytest.raises(errors.UsageError, match="a.tfrecord: a symbolic link in a loop"):
    paths.resolve_files([str(other / "*.tfrecord")])


def test_links_to_files_and_dangling_links_are_listed_as_before(tmp_path, no_gfile):
  (tmp_path / "real.tfrecord").write_bytes(b"x")
  os.symlink("real.tfrecord", str(tmp_path / "alias.tfrecord"))
  os.symlink("missing.tfrecord", str(tmp_path / "gone.tfrecord"))
  assert paths.resolve_files(directories=[str(tmp_path)]) == [
      str(tmp_path / name) for name in ("alias.tfrecord", "gone.tfrecord", "real.tfrecord")]
