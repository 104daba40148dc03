"""The Hugging Face export and import, checked by transformers and PyTorch themselves.

A tiny BERT is trained two steps (fp16 LAMB with accumulation 2: a checkpoint with every kind of
optimizer state) and exported with `python -m utils.export_release --format=huggingface`. In the
second environment (`scripts/env_hf.sh`, tests/hf/hf_client.py) transformers' BertForPreTraining
loads it with no missing or unexpected key and gives our TF graph's sequence output, pooled
output, MLM and NSP logits on the same batch; BertTokenizerFast gives tokenization.py's ids on the
demo corpus (cased and uncased). A directory written by transformers itself imports with
--from_huggingface and starts pretraining and fine-tuning; the round trips are bit for bit; bad
input exits 2 naming the file and leaves nothing behind. What needs no trained checkpoint (the
import of transformers' own directories, the readers): test_checkpoints_huggingface_import.py.
"""

import json
import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

import modeling
import tokenization
from tests import finetuning_data
from tests import helpers
from tests import helpers_hf
from tests.helpers_hf import hf_client
from utils.checkpoints import contents as ckpt
from utils.checkpoints import safetensors
from utils.core import errors
from utils.model import pretraining

pytestmark = pytest.mark.e2e

_tf1 = tf.compat.v1
REPO_ROOT = helpers.REPO_ROOT
SCRIPT = os.path.join(REPO_ROOT, "run_pretraining.py")
SEQ, PRED = 32, 5
VOCAB_SIZE = 400
CONFIG = dict(helpers.TINY_CONFIG, vocab_size=VOCAB_SIZE)
# Our graph and transformers' on the same fp32 weights and batch.
TOLERANCE = 1e-4
CORPUS_LINES = 400


# This module's processes (`python=` the transformers environment's interpreter).
run = helpers.run_python


@pytest.fixture(scope="module", autouse=True)
def _close_hf_client():
  yield
  hf_client.close()


def export_release(*args, check=True):
  return run(["-m", "utils.export_release"] + list(args), check=check)


def assert_usage_error(proc, *fragments):
  assert proc.returncode == errors.USAGE_EXIT_CODE, proc.stderr
  assert "Traceback" not in proc.stderr, proc.stderr
  assert proc.stderr.startswith("export_release: error: "), proc.stderr
  for fragment in fragments:
    assert fragment in proc.stderr, (fragment, proc.stderr)


def assert_nothing_left(output_dir):
  """`output_dir` was not created and no partial directory is beside it."""
  parent = os.path.dirname(str(output_dir))
  assert not os.path.exists(str(output_dir))
  assert not [n for n in os.listdir(parent) if ".partial-" in n], os.listdir(parent)


# ---------------------------------------------------------------------------------------------
# Fixtures: a corpus and vocabularies, a trained checkpoint, its export

@pytest.fixture(scope="module")
def root(tmp_path_factory):
  return tmp_path_factory.mktemp("hf")


@pytest.fixture(scope="module")
def corpus(root):
  """`helpers_hf.demo_corpus_and_vocabularies` of CORPUS_LINES sentences, VOCAB_SIZE tokens."""
  return helpers_hf.demo_corpus_and_vocabularies(root, CORPUS_LINES, VOCAB_SIZE)


def train_two_updates_command(root, name, **overrides):
  """The command that trains CONFIG two updates into root/name (records and config shared under
  root), and what it will write (config, checkpoint, directory). By default fp16 LAMB with
  accumulation 2: every kind of optimizer state (slots, accumulators, loss scale)."""
  train_dir = root / "train"
  if not train_dir.exists():
    train_dir.mkdir()
    helpers.write_batch_records(train_dir / "part-0.tfrecord", helpers.random_batch(
        np.random.RandomState(0), 16, SEQ, VOCAB_SIZE, PRED))
  config = root / "bert_config.json"
  config.write_text(json.dumps(CONFIG))
  out = root / name
  flags = dict(bert_config_file=config, input_files_dir=train_dir, output_dir=out,
               max_seq_length=SEQ, max_predictions_per_seq=PRED, train_batch_size=4,
               learning_rate=1e-2, num_warmup_steps=1, save_checkpoints_steps=2, do_train=True,
               num_train_steps=2, optimizer_type="lamb", manual_fp16=True,
               num_accumulation_steps=2,
               # The same weights every time (as the original release's checkpoint below, --seed
               # 3): `assert_outputs_close` requires the outputs to vary across the batch by over
               # 100x its tolerance (0.01), and the NSP logits of a model two updates from its
               # initialisation span what the draw gives: 0.0057 in a run that failed on it,
               # 0.030 with this seed.
               deterministic_run=True)
  flags.update(overrides)
  command = [SCRIPT] + ["--%s=%s" % item for item in flags.items() if item[1] is not None]
  return command, {"config": str(config), "checkpoint": str(out / "model.ckpt-2"), "dir": out}


def run_together(commands, timeout=300):
  """Runs python commands at once (`helpers.run_side_by_side`); each must exit 0. Returns their
  stderr, in order."""
  results = helpers.run_side_by_side([[sys.executable] + list(args) for args in commands],
                                     timeout)
  for args, (code, out, err) in zip(commands, results):
    assert code == 0, "exit %d: %s\n%s\n%s" % (code, args[:3], out[-3000:], err[-5000:])
  return [err for _, _, err in results]


@pytest.fixture(scope="module")
def trained(root, corpus):
  command, result = train_two_updates_command(root, "run")
  run(command)
  return result


@pytest.fixture(scope="module")
def hf_dir(root, trained, corpus):
  out = root / "hf"
  proc = export_release("--format=huggingface", "--checkpoint=%s" % trained["dir"],
                        "--bert_config_file=%s" % trained["config"],
                        "--vocab_file=%s" % corpus["vocab"][False], "--output_dir=%s" % out)
  assert "exported 46 tensors" in proc.stdout
  return out


def batch(seed=1, batch_size=3):
  return helpers.random_batch(np.random.RandomState(seed), batch_size, SEQ, VOCAB_SIZE, PRED)


def our_outputs(bert_config, checkpoint, features):
  """Our TF graph, restored from `checkpoint`: sequence and pooled outputs, MLM logits at every
  position [batch, seq, vocab] and NSP logits [batch, 2], fp32, no dropout."""
  batch_size, seq_length = features["input_ids"].shape
  every_position = np.tile(np.arange(seq_length, dtype=np.int32), [batch_size, 1])
  with tf.Graph().as_default() as graph:
    placeholders = ckpt.placeholder_features(seq_length, seq_length, batch_size)
    built = pretraining.build_pretraining_model(bert_config, placeholders, is_training=False)
    mlm_logits = graph.get_tensor_by_name("cls/predictions/BiasAdd:0")
    nsp_logits = graph.get_tensor_by_name("cls/seq_relationship/BiasAdd:0")
    feed = {placeholders["input_ids"]: features["input_ids"],
            placeholders["input_mask"]: features["input_mask"],
            placeholders["segment_ids"]: features["segment_ids"],
            placeholders["masked_lm_positions"]: every_position,
            placeholders["masked_lm_ids"]: np.zeros_like(every_position),
            placeholders["masked_lm_weights"]: np.ones(every_position.shape, np.float32),
            placeholders["next_sentence_labels"]: np.zeros([batch_size, 1], np.int32)}
    with _tf1.Session() as session:
      _tf1.train.Saver().restore(session, checkpoint)
      values = session.run({"sequence_output": built["model"].get_sequence_output(),
                            "pooled_output": built["model"].get_pooled_output(),
                            "mlm_logits": mlm_logits, "nsp_logits": nsp_logits}, feed)
  values["mlm_logits"] = values["mlm_logits"].reshape(batch_size, seq_length, -1)
  return values


def transformers_outputs(model_dir, features, tmp_path):
  np.savez(tmp_path / "batch.npz", **features)
  info = json.loads(hf_client("forward", "--model_dir=%s" % model_dir,
                              "--batch=%s" % (tmp_path / "batch.npz"),
                              "--out=%s" % (tmp_path / "out.npz")).strip().splitlines()[-1])
  return dict(np.load(tmp_path / "out.npz")), info


def assert_transformers_gives_our_outputs(model_dir, source, tmp_path, seed=1):
  """transformers loads `model_dir` with every weight (none missing, unexpected or mismatched)
  and gives our graph's outputs from `source`'s checkpoint on the same batch."""
  features = batch(seed=seed)
  theirs, info = transformers_outputs(model_dir, features, tmp_path)
  assert info == {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [],
                  "error_msgs": []}, info
  ours = our_outputs(modeling.BertConfig.from_json_file(source["config"]),
                     source["checkpoint"], features)
  assert_outputs_close(ours, theirs)


def assert_outputs_close(ours, theirs):
  for key in ("sequence_output", "pooled_output", "mlm_logits", "nsp_logits"):
    assert ours[key].shape == theirs[key].shape, key
    np.testing.assert_allclose(ours[key], theirs[key], rtol=0, atol=TOLERANCE, err_msg=key)
    # Not trivially close: the outputs vary well beyond the tolerance.
    assert np.ptp(theirs[key]) > 100 * TOLERANCE, key


# ---------------------------------------------------------------------------------------------
# Export, checked by transformers

def test_transformers_loads_the_export_with_every_weight_and_gives_our_outputs(
    trained, hf_dir, tmp_path):
  assert sorted(os.listdir(hf_dir)) == sorted([
      "config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
      "special_tokens_map.json"])
  assert_transformers_gives_our_outputs(hf_dir, trained, tmp_path)


def test_export_config_and_tensors(trained, hf_dir):
  config = json.loads((hf_dir / "config.json").read_text())
  assert config["architectures"] == ["BertForPreTraining"]
  assert config["model_type"] == "bert"
  assert config["layer_norm_eps"] == 1e-12
  # The release's GELU is the tanh approximation: transformers' "gelu_new", not its erf "gelu".
  assert config["hidden_act"] == "gelu_new"
  for key, value in CONFIG.items():
    if key != "hidden_act":
      assert config[key] == value, key
  tensors, metadata = safetensors.read(str(hf_dir / "model.safetensors"))
  assert metadata == {"format": "pt"}
  trained_values = ckpt.read_tensors(trained["checkpoint"], ["bert/pooler/dense/kernel",
                                                             "cls/predictions/output_bias"])
  # PyTorch's Linear stores [out, in]: the kernel transposed; fp32, the values as trained.
  pooler = tensors["bert.pooler.dense.weight"]
  assert pooler.dtype == np.float32
  assert pooler.tobytes() == np.ascontiguousarray(
      trained_values["bert/pooler/dense/kernel"].T).tobytes()
  assert tensors["cls.predictions.bias"].tobytes() == (
      trained_values["cls/predictions/output_bias"].tobytes())
  # Tied to the word embeddings: no decoder is stored.
  assert not [name for name in tensors if "decoder" in name]


@pytest.mark.parametrize("cased", [False, True])
def test_transformers_tokenizer_gives_tokenization_py_ids_on_the_demo_corpus(
    corpus, trained, tmp_path, cased):
  out = tmp_path / "hf"
  proc = export_release("--format=huggingface", "--checkpoint=%s" % trained["checkpoint"],
                        "--bert_config_file=%s" % trained["config"],
                        "--vocab_file=%s" % corpus["vocab"][cased], "--output_dir=%s" % out,
                        "--do_lower_case=%s" % (not cased))
  assert "warning" not in proc.stderr  # each vocabulary with its own casing
  hf_client("tokenize", "--model_dir=%s" % out, "--text=%s" % corpus["text"],
            "--out=%s" % (tmp_path / "ids.json"))
  theirs = json.loads((tmp_path / "ids.json").read_text())
  assert theirs["class"] in ("BertTokenizerFast", "BertTokenizer")
  tokenizer = tokenization.FullTokenizer(str(corpus["vocab"][cased]), do_lower_case=not cased)
  ours = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)) for line in corpus["lines"]]
  assert len(theirs["ids"]) == len(ours) == CORPUS_LINES + 4
  assert theirs["ids"] == ours
  # The casing matters on this text: the two vocabularies' tokenizers differ.
  assert sum(len(ids) for ids in ours) > 5 * CORPUS_LINES


def test_a_cased_vocabulary_exported_with_lower_casing_is_warned_about(corpus, trained, tmp_path):
  cased_vocab = corpus["vocab"][True]
  upper = [t for t in cased_vocab.read_text(encoding="utf-8").split("\n")
           if t and t[0] != "[" and any(c.isupper() for c in t)]
  assert len(upper) > 10  # the corpus has upper case ("HTTPServer", sentence starts)
  proc = export_release("--format=huggingface", "--checkpoint=%s" % trained["checkpoint"],
                        "--bert_config_file=%s" % trained["config"],
                        "--vocab_file=%s" % cased_vocab, "--output_dir=%s" % (tmp_path / "hf"))
  assert proc.stderr.count("warning") == 1, proc.stderr
  assert ("%s has %d tokens with upper-case letters" % (cased_vocab, len(upper))) in proc.stderr
  assert "--do_lower_case=false" in proc.stderr
  # The export is still written (a warning, not a refusal): the user may want it so.
  assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["do_lower_case"]


# ---------------------------------------------------------------------------------------------
# Import and round trips

def test_ours_to_transformers_to_ours_is_bit_exact(trained, hf_dir, corpus, tmp_path):
  out = tmp_path / "bundle"
  proc = export_release("--from_huggingface=%s" % hf_dir, "--output_dir=%s" % out)
  assert "imported 46 weights" in proc.stdout and "do_lower_case=True" in proc.stdout
  imported = ckpt.read_tensors(str(out / "bert_model.ckpt"),
                               ckpt.checkpoint_shapes(str(out / "bert_model.ckpt")))
  weights = {n: s for n, s in ckpt.checkpoint_shapes(trained["checkpoint"]).items()
             if ckpt.variable_role(n) == ckpt.ROLE_WEIGHT}
  original = ckpt.read_tensors(trained["checkpoint"], weights)
  assert sorted(imported) == sorted(original)
  for name, value in original.items():
    assert imported[name].dtype == np.float32
    assert imported[name].tobytes() == value.tobytes(), name
  assert json.loads((out / "bert_config.json").read_text()) == CONFIG
  assert (out / "vocab.txt").read_text() == corpus["vocab"][False].read_text()


def test_transformers_to_ours_to_transformers_is_bit_exact(hf_dir, corpus, tmp_path):
  bundle = tmp_path / "bundle"
  export_release("--from_huggingface=%s" % hf_dir, "--output_dir=%s" % bundle)
  again = tmp_path / "again"
  export_release("--format=huggingface", "--checkpoint=%s" % (bundle / "bert_model.ckpt"),
                 "--bert_config_file=%s" % (bundle / "bert_config.json"),
                 "--vocab_file=%s" % (bundle / "vocab.txt"), "--output_dir=%s" % again)
  for directory, name in ((hf_dir, "first.npz"), (again, "second.npz")):
    hf_client("dump", "--model_dir=%s" % directory, "--out=%s" % (tmp_path / name))
  first, second = (dict(np.load(tmp_path / name)) for name in ("first.npz", "second.npz"))
  assert sorted(first) == sorted(second) and len(first) == 46
  for name in first:
    assert first[name].dtype == second[name].dtype == np.float32
    assert first[name].tobytes() == second[name].tobytes(), name
  for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
    assert (hf_dir / name).read_bytes() == (again / name).read_bytes(), name


@pytest.fixture(scope="module")
def checkpoint_kinds(root, trained):
  """Checkpoints of other kinds than `trained`'s, made at once: "fp32 adam" (an fp32 AdamWeightDecay
  run), "bf16 lamb" (a --bf16 run) and "original release" (written by the original release's own
  code, tests/reference: its BertModel and pretraining heads with random weights)."""
  del trained  # made first: it writes the shared records and config
  fp32_adam, fp32_adam_result = train_two_updates_command(
      root, "fp32_adam", manual_fp16=None, optimizer_type="adam", num_accumulation_steps=1)
  bf16, bf16_result = train_two_updates_command(root, "bf16_lamb", manual_fp16=None, bf16=True)
  original = root / "original"
  original.mkdir()
  np.savez(original / "batch.npz", **batch())
  (original / "bert_config.json").write_text(json.dumps(CONFIG))
  run_together([fp32_adam, bf16, [
      "-m", "tests.reference.original_bert", "model",
      "--config", str(original / "bert_config.json"), "--batch", str(original / "batch.npz"),
      "--out", str(original), "--seed", "3"]])
  return {"fp32 adam": fp32_adam_result, "bf16 lamb": bf16_result,
          "original release": {"config": str(original / "bert_config.json"),
                               "checkpoint": str(original / "bert_model.ckpt")}}


@pytest.mark.parametrize("kind", ["fp32 adam", "bf16 lamb", "original release"])
def test_every_kind_of_checkpoint_exports_to_what_transformers_loads(
    checkpoint_kinds, corpus, tmp_path, kind):
  source = checkpoint_kinds[kind]
  out = tmp_path / "hf"
  proc = export_release("--format=huggingface", "--checkpoint=%s" % source["checkpoint"],
                        "--bert_config_file=%s" % source["config"],
                        "--vocab_file=%s" % corpus["vocab"][False], "--output_dir=%s" % out)
  assert "exported 46 tensors" in proc.stdout
  assert_transformers_gives_our_outputs(out, source, tmp_path, seed=5)


def test_a_release_format_bundle_exports_to_the_same_tensors(trained, hf_dir, corpus, tmp_path):
  """A weights-only checkpoint in the original release's layout (bert_model.ckpt) exports to
  the same model.safetensors as the training checkpoint it came from."""
  bundle = tmp_path / "release"
  export_release("--checkpoint=%s" % trained["checkpoint"],
                 "--bert_config_file=%s" % trained["config"], "--output_dir=%s" % bundle)
  out = tmp_path / "hf"
  export_release("--format=huggingface", "--checkpoint=%s" % (bundle / "bert_model.ckpt"),
                 "--bert_config_file=%s" % (bundle / "bert_config.json"),
                 "--vocab_file=%s" % corpus["vocab"][False], "--output_dir=%s" % out)
  assert (out / "model.safetensors").read_bytes() == (hf_dir / "model.safetensors").read_bytes()


def hf_config_file(path, **overrides):
  values = dict(CONFIG, hidden_act="gelu_new", layer_norm_eps=1e-12)
  values.update(overrides)
  path.write_text(json.dumps(values))
  return path


def test_an_imported_directory_starts_pretraining_and_fine_tuning(root, trained, corpus,
                                                                   tmp_path):
  made = tmp_path / "made"
  hf_client("save", "--config=%s" % hf_config_file(tmp_path / "config.json"),
            "--out_dir=%s" % made, "--seed=5")
  (made / "vocab.txt").write_bytes(corpus["vocab"][False].read_bytes())
  bundle = tmp_path / "bundle"
  export_release("--from_huggingface=%s" % made, "--output_dir=%s" % bundle)
  init = str(bundle / "bert_model.ckpt")
  weights = ckpt.read_tensors(init, ckpt.checkpoint_shapes(init))
  # Pretraining from it: one update at learning rate 0 (warm-up 1) leaves every weight as imported.
  out = tmp_path / "pretraining"
  flags = dict(bert_config_file=bundle / "bert_config.json", input_files_dir=root / "train",
               output_dir=out, init_checkpoint=init, max_seq_length=SEQ,
               max_predictions_per_seq=PRED, train_batch_size=4, learning_rate=1e-2,
               num_warmup_steps=1, num_train_steps=1, do_train=True)
  # Fine-tuning from it (at the same time): run_classifier.py initialises every encoder and
  # pooler variable.
  data_dir = tmp_path / "mrpc"
  finetuning_data.write_glue(str(data_dir), "mrpc", finetuning_data.rng(2), n_train=8, n_dev=4)
  _, stderr = run_together([
      [SCRIPT] + ["--%s=%s" % item for item in flags.items()],
      ["run_classifier.py", "--task_name=mrpc", "--data_dir=%s" % data_dir,
       "--vocab_file=%s" % (bundle / "vocab.txt"),
       "--bert_config_file=%s" % (bundle / "bert_config.json"),
       "--init_checkpoint=%s" % init, "--output_dir=%s" % (tmp_path / "classifier"),
       "--max_seq_length=%d" % SEQ, "--train_batch_size=4", "--num_train_epochs=1",
       "--do_train", "--verbose", "--verbose_logging"]])
  after = ckpt.read_tensors(tf.train.latest_checkpoint(str(out)), list(weights))
  assert len(weights) == 46
  for name, value in weights.items():
    assert after[name].tobytes() == value.tobytes(), name
  initialised = {re.search(r"name = (\S+):0", line).group(1)
                 for line in stderr.splitlines() if "*INIT_FROM_CKPT*" in line}
  assert initialised == {name for name in weights if name.startswith("bert/")}, stderr[-3000:]


# ---------------------------------------------------------------------------------------------
# Bad input: exit 2, the file and the problem named, nothing left behind

def test_export_into_a_non_empty_directory_is_refused(trained, corpus, tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "keep.txt").write_text("mine")
  proc = export_release("--format=huggingface", "--checkpoint=%s" % trained["checkpoint"],
                        "--bert_config_file=%s" % trained["config"],
                        "--vocab_file=%s" % corpus["vocab"][False], "--output_dir=%s" % out,
                        check=False)
  assert_usage_error(proc, "--output_dir=%s exists and is not empty" % out)
  assert os.listdir(out) == ["keep.txt"]
  assert not [n for n in os.listdir(tmp_path) if ".partial-" in n]


def test_export_of_a_checkpoint_of_another_model_is_refused(trained, corpus, tmp_path):
  wide = tmp_path / "wide.json"
  wide.write_text(json.dumps(dict(CONFIG, hidden_size=64)))
  out = tmp_path / "out"
  proc = export_release("--format=huggingface", "--checkpoint=%s" % trained["checkpoint"],
                        "--bert_config_file=%s" % wide, "--vocab_file=%s" % corpus["vocab"][False],
                        "--output_dir=%s" % out, check=False)
  assert_usage_error(proc, trained["checkpoint"], "does not match the model of "
                     "--bert_config_file=%s" % wide,
                     "bert/embeddings/word_embeddings: checkpoint [%d, 32], model [%d, 64]"
                     % (VOCAB_SIZE, VOCAB_SIZE))
  assert_nothing_left(out)


def test_export_of_a_truncated_checkpoint_is_refused(trained, corpus, tmp_path):
  prefix = tmp_path / "model.ckpt-2"
  for suffix in (".index", ".data-00000-of-00001"):
    data = open(trained["checkpoint"] + suffix, "rb").read()
    (tmp_path / ("model.ckpt-2" + suffix)).write_bytes(
        data[:len(data) // 2] if suffix.startswith(".data") else data)
  out = tmp_path / "out"
  proc = export_release("--format=huggingface", "--checkpoint=%s" % prefix,
                        "--bert_config_file=%s" % trained["config"],
                        "--vocab_file=%s" % corpus["vocab"][False], "--output_dir=%s" % out,
                        check=False)
  assert_usage_error(proc, str(prefix), "the data file is truncated")
  assert_nothing_left(out)


def test_import_of_a_truncated_safetensors_file_is_refused(hf_dir, tmp_path):
  damaged = tmp_path / "damaged"
  damaged.mkdir()
  for name in os.listdir(hf_dir):
    data = (hf_dir / name).read_bytes()
    (damaged / name).write_bytes(data[:len(data) - 100] if name == "model.safetensors" else data)
  out = tmp_path / "out"
  proc = export_release("--from_huggingface=%s" % damaged, "--output_dir=%s" % out, check=False)
  assert_usage_error(proc, "%s is unreadable: truncated" % (damaged / "model.safetensors"))
  assert_nothing_left(out)
