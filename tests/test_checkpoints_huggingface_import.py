"""The Hugging Face import of what transformers and PyTorch wrote, without a trained checkpoint
(test_checkpoints_huggingface.py has the export and the round trips of one).

Directories transformers saved itself (model.safetensors and pytorch_model.bin) import with
--from_huggingface and our graph gives transformers' outputs; a RoBERTa directory and a BERT
without pretraining heads are refused naming the problem (the heads can be initialised afresh);
the readers read what torch and safetensors wrote, and the pickle reader runs no code; an
interrupted staged directory leaves nothing; the release's GELU is transformers' gelu_new.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import modeling
from tests import helpers_hf
from tests.helpers_hf import hf_client
from tests.test_checkpoints_huggingface import CORPUS_LINES
from tests.test_checkpoints_huggingface import CONFIG
from tests.test_checkpoints_huggingface import VOCAB_SIZE
from tests.test_checkpoints_huggingface import assert_nothing_left
from tests.test_checkpoints_huggingface import assert_outputs_close
from tests.test_checkpoints_huggingface import assert_usage_error
from tests.test_checkpoints_huggingface import batch
from tests.test_checkpoints_huggingface import export_release
from tests.test_checkpoints_huggingface import hf_config_file
from tests.test_checkpoints_huggingface import our_outputs
from tests.test_checkpoints_huggingface import transformers_outputs
from utils.checkpoints import contents as ckpt
from utils.checkpoints import huggingface
from utils.checkpoints import safetensors
from utils.checkpoints import torch_pickle
from utils.core import errors
from utils.core import staging

pytestmark = pytest.mark.e2e

_tf1 = tf.compat.v1


@pytest.fixture(scope="module", autouse=True)
def _close_hf_client():
  yield
  hf_client.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """`helpers_hf.demo_corpus_and_vocabularies` of CORPUS_LINES sentences, VOCAB_SIZE tokens."""
  return helpers_hf.demo_corpus_and_vocabularies(tmp_path_factory.mktemp("hf"), CORPUS_LINES,
                                                 VOCAB_SIZE)


@pytest.mark.parametrize("pytorch_bin", [False, True])
def test_a_directory_transformers_wrote_imports_and_gives_transformers_outputs(
    corpus, tmp_path, pytorch_bin):
  made = tmp_path / "made"
  hf_client("save", "--config=%s" % hf_config_file(tmp_path / "config.json"),
            "--out_dir=%s" % made, "--seed=3", *(["--pytorch_bin"] if pytorch_bin else []))
  weights_file = "pytorch_model.bin" if pytorch_bin else "model.safetensors"
  assert weights_file in os.listdir(made)
  (made / "vocab.txt").write_bytes(corpus["vocab"][False].read_bytes())
  bundle = tmp_path / "bundle"
  proc = export_release("--from_huggingface=%s" % made, "--output_dir=%s" % bundle)
  assert os.path.join(str(made), weights_file) in proc.stdout
  assert "note:" not in proc.stdout
  features = batch(seed=4)
  theirs, _ = transformers_outputs(made, features, tmp_path)
  ours = our_outputs(modeling.BertConfig.from_json_file(str(bundle / "bert_config.json")),
                     str(bundle / "bert_model.ckpt"), features)
  assert_outputs_close(ours, theirs)
  # The same tensors as transformers reads, bit for bit (transposed kernels back in place).
  hf_client("dump", "--model_dir=%s" % made, "--out=%s" % (tmp_path / "made.npz"))
  made_tensors = dict(np.load(tmp_path / "made.npz"))
  ours_kernel = ckpt.read_tensors(str(bundle / "bert_model.ckpt"),
                                  ["bert/encoder/layer_1/intermediate/dense/kernel"])
  kernel = ours_kernel["bert/encoder/layer_1/intermediate/dense/kernel"]
  assert kernel.shape == (CONFIG["hidden_size"], CONFIG["intermediate_size"])
  assert made_tensors["bert.encoder.layer.1.intermediate.dense.weight"].tobytes() == (
      np.ascontiguousarray(kernel.T).tobytes())


def test_import_of_a_roberta_directory_is_refused(corpus, tmp_path):
  made = tmp_path / "roberta"
  config = tmp_path / "config.json"
  config.write_text(json.dumps(dict(model_type="roberta", vocab_size=VOCAB_SIZE, hidden_size=32,
                                    num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=64, max_position_embeddings=66)))
  hf_client("save", "--config=%s" % config, "--out_dir=%s" % made, "--class=RobertaForMaskedLM")
  out = tmp_path / "out"
  proc = export_release("--from_huggingface=%s" % made, "--output_dir=%s" % out, check=False)
  assert_usage_error(proc, "%s: model_type is 'roberta' (RobertaForMaskedLM), not 'bert'"
                     % (made / "config.json"))
  assert_nothing_left(out)


@pytest.mark.parametrize("model_class,missing,unexpected", [
    ("BertModel", "cls.predictions.bias, cls.predictions.transform", None),
    ("BertForSequenceClassification", "cls.predictions.bias", "classifier.bias, classifier.weight"),
])
def test_import_of_a_bert_without_pretraining_heads_names_them(
    corpus, tmp_path, model_class, missing, unexpected):
  made = tmp_path / "made"
  hf_client("save", "--config=%s" % hf_config_file(tmp_path / "config.json"),
            "--out_dir=%s" % made, "--class=%s" % model_class)
  (made / "vocab.txt").write_bytes(corpus["vocab"][False].read_bytes())
  out = tmp_path / "out"
  proc = export_release("--from_huggingface=%s" % made, "--output_dir=%s" % out, check=False)
  assert_usage_error(proc, "%s is not a BertForPreTraining" % (made / "model.safetensors"),
                     missing, "can be initialised afresh, as a new run would, with "
                     "--init_missing_heads")
  if unexpected:
    assert "unexpected weights %s" % unexpected in proc.stderr
  assert_nothing_left(out)
  # With --init_missing_heads: the encoder as transformers saved it, heads as a new run's.
  proc = export_release("--from_huggingface=%s" % made, "--output_dir=%s" % out,
                        "--init_missing_heads")
  assert "note: initialised afresh: cls/predictions/output_bias" in proc.stdout
  hf_client("dump", "--model_dir=%s" % made, "--out=%s" % (tmp_path / "made.npz"))
  made_tensors = dict(np.load(tmp_path / "made.npz"))
  prefix = str(out / "bert_model.ckpt")
  imported = ckpt.read_tensors(prefix, ckpt.checkpoint_shapes(prefix))
  assert len(imported) == 46
  word = [v for k, v in made_tensors.items() if k.endswith("embeddings.word_embeddings.weight")]
  assert word[0].tobytes() == imported["bert/embeddings/word_embeddings"].tobytes()
  assert not imported["cls/predictions/output_bias"].any()
  np.testing.assert_array_equal(imported["cls/predictions/transform/LayerNorm/gamma"], 1.0)


def test_readers_read_what_torch_and_safetensors_wrote(tmp_path):
  hf_client("formats", "--out_dir=%s" % tmp_path)
  reference = dict(np.load(tmp_path / "reference.npz"))
  from_torch = torch_pickle.read_state_dict(str(tmp_path / "t.bin"))
  from_safetensors, metadata = safetensors.read(str(tmp_path / "t.safetensors"))
  assert metadata == {"format": "pt"}
  assert list(from_torch) == list(reference)
  assert sorted(from_safetensors) == sorted(set(reference) - {"f32_shared"})
  for name, want in reference.items():
    # fp16 is kept as fp16 and bf16 widened to fp32, both exactly; the reference is fp32.
    for got in [from_torch[name]] + ([from_safetensors[name]] if name != "f32_shared" else []):
      assert got.shape == want.shape, name
      assert got.astype(want.dtype).tobytes() == want.tobytes(), name
  assert from_torch["f16"].dtype == np.float16 and from_torch["bf16"].dtype == np.float32
  # Our writer's file, read back by the safetensors package (through `dump`).
  written = tmp_path / "ours"
  written.mkdir()
  safetensors.write(str(written / "model.safetensors"), from_safetensors, {"format": "pt"})
  hf_client("dump", "--model_dir=%s" % written, "--out=%s" % (tmp_path / "back.npz"))
  back = dict(np.load(tmp_path / "back.npz"))
  assert sorted(back) == sorted(from_safetensors)
  for name, value in from_safetensors.items():
    assert back[name].dtype == value.dtype and back[name].tobytes() == value.tobytes(), name


class _RunsCode(object):
  def __reduce__(self):
    return (os.system, ("touch /tmp/should-not-exist",))


def test_pickle_reader_refuses_globals_outside_a_state_dict(tmp_path):
  import pickle  # pylint: disable=g-import-not-at-top
  import zipfile  # pylint: disable=g-import-not-at-top
  path = tmp_path / "pytorch_model.bin"
  with zipfile.ZipFile(path, "w") as archive:
    archive.writestr("archive/data.pkl", pickle.dumps({"w": _RunsCode()}, protocol=2))
  with pytest.raises(torch_pickle.FormatError, match=r"refers to (posix|os)\.system"):
    torch_pickle.read_state_dict(str(path))
  path.write_bytes(b"not a zip")
  with pytest.raises(torch_pickle.FormatError, match="not a zip archive"):
    torch_pickle.read_state_dict(str(path))


def test_staged_directory_leaves_nothing_after_an_error(tmp_path):
  out = tmp_path / "out"
  with pytest.raises(RuntimeError):
    with staging.staged_directory(str(out), "--output_dir") as tmp:
      open(os.path.join(tmp, "half.bin"), "wb").write(b"x" * 10)
      raise RuntimeError("disk full")
  assert os.listdir(tmp_path) == []
  with staging.staged_directory(str(out), "--output_dir") as tmp:
    open(os.path.join(tmp, "whole.bin"), "wb").write(b"x")
  assert os.listdir(tmp_path) == ["out"] and os.listdir(out) == ["whole.bin"]
  with pytest.raises(errors.UsageError, match="exists and is not empty"):
    with staging.staged_directory(str(out), "--output_dir"):
      pass


def test_the_release_gelu_is_transformers_gelu_new_not_gelu():
  """Formula check, independent of the code under test: the tanh GELU (ours) vs erf GELU."""
  import math  # pylint: disable=g-import-not-at-top
  x = np.linspace(-4, 4, 81)
  tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
  erf_form = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
  with tf.Graph().as_default(), _tf1.Session() as session:
    ours = session.run(modeling.gelu(tf.constant(x, tf.float64)))
  np.testing.assert_allclose(ours, tanh_form, rtol=0, atol=1e-12)
  assert np.abs(ours - erf_form).max() > 1e-4
  assert huggingface.hf_config(modeling.BertConfig(vocab_size=5))["hidden_act"] == "gelu_new"
