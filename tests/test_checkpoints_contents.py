"""The checkpoint data checks of `utils/checkpoints/contents.py`, and `python -m
utils.export_release`, which calls them, on a damaged or missing checkpoint: one line naming the
file, exit status 2, nothing written, no TensorFlow start-up lines before it."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import modeling
from tests import helpers
from utils.checkpoints import contents
from utils.checkpoints import release

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = dict(helpers.TINY_CONFIG, vocab_size=30, hidden_size=8, num_hidden_layers=1,
              intermediate_size=16, max_position_embeddings=16)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  """A release-shaped checkpoint of CONFIG's model (random fp32 weights) and its config file."""
  root = tmp_path_factory.mktemp("export")
  config_path = str(root / "bert_config.json")
  with open(config_path, "w") as writer:
    json.dump(CONFIG, writer)
  shapes = release.model_weight_shapes(modeling.BertConfig.from_dict(CONFIG))
  rng = np.random.RandomState(0)
  weights = {name: rng.randn(*shape).astype(np.float32) for name, shape in shapes.items()}
  prefix = str(root / "model.ckpt-7")
  contents.write_checkpoint(prefix, weights)
  return {"root": root, "prefix": prefix, "config": config_path,
          "bytes": sum(value.nbytes for value in weights.values())}


def _copy(checkpoint, name, change_data):
  """A copy of the checkpoint under `name`, its data file's bytes passed through `change_data`."""
  prefix = str(checkpoint["root"] / name)
  for suffix in (".index", ".data-00000-of-00001"):
    data = open(checkpoint["prefix"] + suffix, "rb").read()
    open(prefix + suffix, "wb").write(change_data(data) if suffix != ".index" else data)
  return prefix


def test_intact_data_file_passes_and_a_truncated_one_is_named(checkpoint):
  # The data file holds exactly the weights' bytes (numpy's count).
  assert contents.check_data_files(checkpoint["prefix"]) == checkpoint["bytes"]
  cut = _copy(checkpoint, "cut.ckpt-7", lambda data: data[:len(data) // 3])
  with pytest.raises(ValueError) as raised:
    contents.check_data_files(cut)
  assert str(raised.value) == (
      "%s.data-00000-of-00001 has %d bytes, its index lists %d bytes of tensors: the data file "
      "is truncated" % (cut, checkpoint["bytes"] // 3, checkpoint["bytes"]))


def test_corrupt_value_is_named_with_the_file_and_the_tensor(checkpoint):
  def flip(data):
    data = bytearray(data)
    data[len(data) // 2] ^= 0xFF
    return bytes(data)

  corrupt = _copy(checkpoint, "corrupt.ckpt-7", flip)
  contents.check_data_files(corrupt)  # the size is right ...
  names = sorted(contents.checkpoint_shapes(corrupt))
  with pytest.raises(ValueError) as raised:  # ... one tensor's checksum is not
    contents.read_tensors(corrupt, names)
  assert str(raised.value).startswith("%s.data-00000-of-00001: cannot read '" % corrupt)


def _export(*args, env=None):
  return subprocess.run([sys.executable, "-m", "utils.export_release"] + list(args),
                        capture_output=True, text=True, timeout=180, cwd=REPO_ROOT, env=env)


@pytest.mark.e2e
def test_export_of_a_truncated_or_missing_checkpoint_is_one_line(checkpoint, tmp_path):
  cut = _copy(checkpoint, "short.ckpt-7", lambda data: data[:1000])
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  for prefix, expected in (
      (cut, "export_release: error: %s.data-00000-of-00001 has 1000 bytes, its index lists %d "
       "bytes of tensors: the data file is truncated" % (cut, checkpoint["bytes"])),
      (str(tmp_path / "missing"), "export_release: error: %s is not a checkpoint: %s.index does "
       "not exist" % (tmp_path / "missing", tmp_path / "missing"))):
    out = tmp_path / "bundle"
    proc = _export("--checkpoint=" + prefix, "--bert_config_file=" + checkpoint["config"],
                   "--output_dir=%s" % out, env=env)
    assert proc.returncode == 2, proc.stderr
    # The one line and nothing before it (no TensorFlow start-up lines, no traceback).
    assert proc.stderr.splitlines() == [expected], proc.stderr
    assert not out.exists()
