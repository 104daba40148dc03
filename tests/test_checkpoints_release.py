"""utils/checkpoints/release.py in-process: the release's weight names and shapes (written out by
hand), the bundle `export` writes from a small training checkpoint (weights only, bit-exact, fp32,
config and vocabulary), and its refusals, which write nothing."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import modeling
from tests import helpers
from utils.checkpoints import contents
from utils.checkpoints import release
from utils.core import errors

_tf1 = tf.compat.v1
CONFIG = dict(helpers.TINY_CONFIG, vocab_size=30, hidden_size=8, num_hidden_layers=1,
              intermediate_size=16, max_position_embeddings=16)
BUNDLE_FILES = ["bert_config.json", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index"]


def _release_shapes(vocab_size, hidden_size, num_hidden_layers, intermediate_size,
                    max_position_embeddings, type_vocab_size, **unused):
  """The weights of the original release's BertForPreTraining checkpoints, name -> shape."""
  v, h, i = vocab_size, hidden_size, intermediate_size
  shapes = {"bert/embeddings/word_embeddings": [v, h],
            "bert/embeddings/token_type_embeddings": [type_vocab_size, h],
            "bert/embeddings/position_embeddings": [max_position_embeddings, h],
            "bert/embeddings/LayerNorm/beta": [h], "bert/embeddings/LayerNorm/gamma": [h]}
  for layer in range(num_hidden_layers):
    prefix = "bert/encoder/layer_%d/" % layer
    for part in ("query", "key", "value"):
      shapes[prefix + "attention/self/%s/kernel" % part] = [h, h]
      shapes[prefix + "attention/self/%s/bias" % part] = [h]
    shapes.update({
        prefix + "attention/output/dense/kernel": [h, h],
        prefix + "attention/output/dense/bias": [h],
        prefix + "attention/output/LayerNorm/beta": [h],
        prefix + "attention/output/LayerNorm/gamma": [h],
        prefix + "intermediate/dense/kernel": [h, i], prefix + "intermediate/dense/bias": [i],
        prefix + "output/dense/kernel": [i, h], prefix + "output/dense/bias": [h],
        prefix + "output/LayerNorm/beta": [h], prefix + "output/LayerNorm/gamma": [h]})
  shapes.update({
      "bert/pooler/dense/kernel": [h, h], "bert/pooler/dense/bias": [h],
      "cls/predictions/transform/dense/kernel": [h, h],
      "cls/predictions/transform/dense/bias": [h],
      "cls/predictions/transform/LayerNorm/beta": [h],
      "cls/predictions/transform/LayerNorm/gamma": [h],
      "cls/predictions/output_bias": [v],
      "cls/seq_relationship/output_weights": [2, h], "cls/seq_relationship/output_bias": [2]})
  return shapes


WEIGHTS = _release_shapes(**CONFIG)


def _write_config(path, **overrides):
  with open(str(path), "w") as f:
    json.dump(dict(CONFIG, **overrides), f)
  return str(path)


def _write_vocab(path, tokens=30, blank_lines=0):
  with open(str(path), "w") as f:
    f.write("".join("tok%d\n" % i for i in range(tokens)) + "\n" * blank_lines)
  return str(path)


def _training_tensors(seed, dtype=np.float32, without=()):
  """A training checkpoint's tensors: weights, moments, accumulators, loss scale and step."""
  rng = np.random.RandomState(seed)
  tensors = {}
  for name, shape in WEIGHTS.items():
    if name in without:
      continue
    tensors[name] = rng.randn(*shape).astype(dtype)
    for suffix in ("/adam_m", "/adam_v", "/accum"):
      tensors[name + suffix] = rng.randn(*shape).astype(np.float32)
  tensors.update({"global_step": np.int64(seed), "local_step": np.int32(1),
                  "current_loss_scale": np.float32(2.0**15), "good_steps": np.int32(4),
                  "skipped_update_count": np.int32(1)})
  return tensors


def _read_all(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def _files_bytes(prefix):
  return sum(os.path.getsize(prefix + suffix) for suffix in (".index", ".data-00000-of-00001"))


def test_model_weight_shapes_are_the_release_names_of_the_encoder_and_both_heads():
  assert release.model_weight_shapes(modeling.BertConfig.from_dict(CONFIG)) == WEIGHTS
  assert len(WEIGHTS) == 5 + 16 + 2 + 5 + 2
  deeper = dict(CONFIG, num_hidden_layers=2, hidden_size=12, num_attention_heads=3)
  shapes = release.model_weight_shapes(modeling.BertConfig.from_dict(deeper))
  assert shapes == _release_shapes(**deeper) and len(shapes) == 46


def test_export_writes_the_newest_checkpoints_weights_only_with_config_and_vocab(tmp_path):
  run = tmp_path / "run"
  run.mkdir()
  prefixes = [str(run / ("model.ckpt-%d" % step)) for step in (1, 3)]
  for step, prefix in zip((1, 3), prefixes):
    contents.write_checkpoint(prefix, _training_tensors(step))
  _tf1.train.update_checkpoint_state(str(run), prefixes[-1], all_model_checkpoint_paths=prefixes)
  config = _write_config(tmp_path / "bert_config.json")
  vocab = _write_vocab(tmp_path / "vocab.txt", blank_lines=2)
  out = tmp_path / "out" / "bundle"

  result = release.export(str(run), config, str(out), vocab_file=vocab)

  bundle = str(out / "bert_model.ckpt")
  assert result == {"checkpoint": prefixes[-1], "bundle": bundle, "variables": len(WEIGHTS),
                    "size_before": _files_bytes(prefixes[-1]), "size_after": _files_bytes(bundle)}
  assert sorted(os.listdir(out)) == sorted(BUNDLE_FILES + ["vocab.txt"])
  written = _read_all(bundle)
  assert sorted(written) == sorted(WEIGHTS)
  newest = _training_tensors(3)
  for name in WEIGHTS:
    assert written[name].dtype == np.float32, name
    assert written[name].tobytes() == newest[name].tobytes(), name
  # The data file holds the weights' bytes and nothing else.
  weight_bytes = sum(4 * int(np.prod(shape)) for shape in WEIGHTS.values())
  assert os.path.getsize(bundle + ".data-00000-of-00001") == weight_bytes
  assert (out / "vocab.txt").read_bytes() == open(vocab, "rb").read()
  with open(str(out / "bert_config.json")) as f:
    written_config = json.load(f)
  assert {key: written_config[key] for key in CONFIG} == CONFIG
  assert modeling.BertConfig.from_json_file(str(out / "bert_config.json")).to_dict() == (
      modeling.BertConfig.from_json_file(config).to_dict())


def test_fp16_weights_are_widened_exactly_and_the_prefix_is_taken_as_given(tmp_path):
  prefix = str(tmp_path / "model.ckpt-5")
  tensors = _training_tensors(5, dtype=np.float16)
  contents.write_checkpoint(prefix, tensors)
  config = _write_config(tmp_path / "bert_config.json")
  checkpoint, bert_config, weights = release.load_model_weights(prefix, config)
  assert checkpoint == prefix and bert_config.vocab_size == 30 and bert_config.hidden_size == 8
  assert sorted(weights) == sorted(WEIGHTS)
  for name in WEIGHTS:
    assert weights[name].dtype == np.float32, name
    # Every float16 is a float32: numpy's widening, checked against the stored half bits too.
    np.testing.assert_array_equal(weights[name], tensors[name].astype(np.float32))
    assert weights[name].astype(np.float16).tobytes() == tensors[name].tobytes(), name
  result = release.export(prefix, config, str(tmp_path / "out"))
  assert result["variables"] == len(WEIGHTS)
  assert sorted(os.listdir(tmp_path / "out")) == BUNDLE_FILES  # no vocab.txt unless given
  written = _read_all(str(tmp_path / "out" / "bert_model.ckpt"))
  assert all(written[name].tobytes() == weights[name].tobytes() for name in WEIGHTS)


@pytest.mark.parametrize("problem", [
    "bundle exists", "no checkpoint", "directory without checkpoint", "config not JSON",
    "another vocabulary size", "missing layer", "truncated data", "vocab of another size",
    "vocab missing"])
def test_export_refuses_naming_the_problem_and_writes_nothing(tmp_path, problem):
  prefix = str(tmp_path / "model.ckpt-2")
  tensors = _training_tensors(2, without=(
      ["bert/encoder/layer_0/output/dense/kernel"] if problem == "missing layer" else []))
  contents.write_checkpoint(prefix, tensors)
  config = _write_config(tmp_path / "bert_config.json",
                         **({"vocab_size": 31} if problem == "another vocabulary size" else {}))
  vocab = None
  out = tmp_path / "out"
  checkpoint = prefix
  if problem == "bundle exists":
    out.mkdir()
    (out / "bert_model.ckpt.index").write_bytes(b"theirs")
    message = "%s already exists: choose an empty --output_dir" % (out / "bert_model.ckpt")
  elif problem == "no checkpoint":
    checkpoint = str(tmp_path / "model.ckpt-9")
    message = "%s is not a checkpoint: %s.index does not exist" % (checkpoint, checkpoint)
  elif problem == "directory without checkpoint":
    checkpoint = str(tmp_path)  # no `checkpoint` file naming one
    message = "%s holds no checkpoint" % checkpoint
  elif problem == "config not JSON":
    with open(config, "w") as f:
      f.write("{vocab_size: 30")
    message = "%s: not valid JSON" % config
  elif problem == "another vocabulary size":
    message = ("%s does not match the model of --bert_config_file=%s (2 difference(s)):\n  "
               "bert/embeddings/word_embeddings: checkpoint [30, 8], model [31, 8]\n  "
               "cls/predictions/output_bias: checkpoint [30], model [31]" % (prefix, config))
  elif problem == "missing layer":
    message = ("%s does not match the model of --bert_config_file=%s (1 difference(s)):\n  "
               "bert/encoder/layer_0/output/dense/kernel [16, 8]: not in the checkpoint"
               % (prefix, config))
  elif problem == "truncated data":
    data = prefix + ".data-00000-of-00001"
    with open(data, "r+b") as f:
      f.truncate(1000)
    needed = sum(np.asarray(value).nbytes for value in tensors.values())
    message = ("%s has 1000 bytes, its index lists %d bytes of tensors: the data file is "
               "truncated" % (data, needed))
  elif problem == "vocab of another size":
    vocab = _write_vocab(tmp_path / "vocab.txt", tokens=29, blank_lines=1)
    message = "--vocab_file=%s has 29 tokens but vocab_size is 30 in %s" % (vocab, config)
  else:
    vocab = str(tmp_path / "nowhere.txt")
    message = "--vocab_file=%s does not exist" % vocab
  before = sorted(os.listdir(tmp_path))
  with pytest.raises(errors.UsageError) as raised:
    release.export(checkpoint, config, str(out), vocab_file=vocab)
  assert str(raised.value).startswith(message)
  assert sorted(os.listdir(tmp_path)) == before
  if problem == "bundle exists":
    assert os.listdir(out) == ["bert_model.ckpt.index"]
    assert (out / "bert_model.ckpt.index").read_bytes() == b"theirs"


def test_check_vocab_counts_the_non_blank_lines(tmp_path):
  bert_config = modeling.BertConfig.from_dict(CONFIG)
  assert release.check_vocab(_write_vocab(tmp_path / "v30.txt", 30, blank_lines=3), bert_config,
                             "c.json") is None
  with pytest.raises(errors.UsageError, match=r"has 31 tokens but vocab_size is 30 in c\.json"):
    release.check_vocab(_write_vocab(tmp_path / "v31.txt", 31), bert_config, "c.json")


def test_write_bundle_writes_the_weights_bit_exactly_under_their_dtypes(tmp_path):
  bert_config = modeling.BertConfig.from_dict(CONFIG)
  weights = {"bert/a": np.array([[1.5, -0.0], [np.inf, 3.25]], np.float32),
             "bert/b": np.array([0.5, -2.0], np.float16)}
  vocab = _write_vocab(tmp_path / "v.txt")
  out = tmp_path / "out"
  out.mkdir()
  release.write_bundle(str(out), bert_config, weights, vocab)
  assert sorted(os.listdir(out)) == sorted(BUNDLE_FILES + ["vocab.txt"])
  written = _read_all(str(out / "bert_model.ckpt"))
  assert sorted(written) == ["bert/a", "bert/b"]
  for name, value in weights.items():
    assert written[name].dtype == value.dtype and written[name].tobytes() == value.tobytes()
  with open(str(out / "bert_config.json")) as f:
    assert {key: value for key, value in json.load(f).items() if key in CONFIG} == CONFIG
