"""scripts/build_demo_data.py: the demo's training and evaluation records never share a directory."""

import json
import os
import subprocess
import sys

import pytest

from utils.data.input_pipeline import resolve_input_files

pytestmark = pytest.mark.e2e

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_train_directory_holds_only_training_records(tmp_path):
  # An earlier build's layout: evaluation records next to the training ones.
  old = tmp_path / "seq128"
  old.mkdir()
  (old / "eval-00.tfrecord").write_bytes(b"old")
  proc = subprocess.run(
      [sys.executable, "scripts/build_demo_data.py", "--output_dir=%s" % tmp_path,
       "--vocab_size=512", "--dupe_factor=1", "--random_seed=1"],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  stats = json.loads((tmp_path / "stats.json").read_text())
  train = resolve_input_files(input_files_dir=str(tmp_path / "seq128" / "train"))
  evaluation = resolve_input_files(input_files_dir=str(tmp_path / "seq128" / "eval"))
  relative = lambda paths: [os.path.relpath(p, str(tmp_path)) for p in paths]  # noqa: E731
  assert relative(train) == stats["train_files"] and len(train) == 4
  assert relative(evaluation) == stats["eval_files"] == ["seq128/eval/eval-00.tfrecord"]
  assert not (old / "eval-00.tfrecord").exists()
  assert stats["instances"]["train"] > 0 and stats["instances"]["eval"] > 0
