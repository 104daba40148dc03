"""utils/core/staging.py: an output directory appears whole, with the usual permissions, or not
at all; a directory that is not empty, a file or a remote path is refused before anything is
written."""

import os
import stat

import pytest

from utils.core import errors
from utils.core import staging


def test_the_directory_appears_whole_only_when_the_block_ends(tmp_path):
  out = tmp_path / "parent" / "bundle"
  with staging.staged_directory(str(out), "--output_dir") as tmp:
    assert not out.exists()
    assert os.path.dirname(tmp) == str(out.parent)
    with open(os.path.join(tmp, "a.txt"), "w") as f:
      f.write("a")
  assert sorted(os.listdir(out)) == ["a.txt"]
  assert os.listdir(out.parent) == ["bundle"]  # nothing partial left beside it
  umask = os.umask(0)
  os.umask(umask)
  assert stat.S_IMODE(os.stat(out).st_mode) == 0o777 & ~umask


def test_an_empty_directory_is_replaced(tmp_path):
  out = tmp_path / "bundle"
  out.mkdir()
  with staging.staged_directory(str(out), "--output_dir") as tmp:
    open(os.path.join(tmp, "b.txt"), "w").close()
  assert os.listdir(out) == ["b.txt"]


def test_an_error_leaves_nothing(tmp_path):
  out = tmp_path / "bundle"
  with pytest.raises(RuntimeError, match="half way"):
    with staging.staged_directory(str(out), "--output_dir") as tmp:
      open(os.path.join(tmp, "c.txt"), "w").close()
      raise RuntimeError("half way")
  assert os.listdir(tmp_path) == []


def test_a_directory_filled_meanwhile_is_not_overwritten(tmp_path):
  out = tmp_path / "bundle"
  with pytest.raises(errors.UsageError, match="exists and is not empty"):
    with staging.staged_directory(str(out), "--output_dir") as tmp:
      open(os.path.join(tmp, "mine.txt"), "w").close()
      out.mkdir()
      (out / "theirs.txt").write_text("kept")
  assert os.listdir(tmp_path) == ["bundle"] and os.listdir(out) == ["theirs.txt"]


@pytest.mark.parametrize("kind,message", [
    ("not empty", r"--export_dir=\S+ exists and is not empty \(1 entries\)"),
    ("a file", r"--export_dir=\S+ exists and is not a directory"),
    ("remote", r"--export_dir=gs://bucket/x: write to a local directory")])
def test_refused_before_anything_is_written(tmp_path, kind, message):
  target = str(tmp_path / "x")
  if kind == "not empty":
    os.mkdir(target)
    open(os.path.join(target, "old"), "w").close()
  elif kind == "a file":
    open(target, "w").close()
  else:
    target = "gs://bucket/x"
  before = sorted(os.listdir(tmp_path))
  with pytest.raises(errors.UsageError, match=message):
    with staging.staged_directory(target, "--export_dir"):
      pytest.fail("the block ran")
  assert sorted(os.listdir(tmp_path)) == before
