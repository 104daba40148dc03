"""utils/model/size.py: the parameter count against the real graph, the memory estimate by hand,
and the refusal of configurations too big for the machine (in process and by the script)."""

import json
import os
import time

import numpy as np
import pytest
import tensorflow as tf

import modeling
from tests import helpers
from tests import test_run_pretraining
from utils.core import errors
from utils.model import pretraining
from utils.model import size
from utils.training import job as job_lib

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 1 << 30
_tf1 = tf.compat.v1


def _config(name, **overrides):
  with open(os.path.join(REPO_ROOT, "bert_configs", name + ".json")) as f:
    values = json.load(f)
  values.update(overrides)
  return modeling.BertConfig.from_dict(values, source=name + ".json")


def test_bert_base_parameters_by_hand():
  # Every variable of the released BERT-base pretraining checkpoint, by shape.
  v, h, i, p, t = 30522, 768, 3072, 512, 2
  embeddings = [(v, h), (p, h), (t, h), (h,), (h,)]
  layer = [(h, h), (h,)] * 4 + [(h,), (h,)] + [(h, i), (i,), (i, h), (h,)] + [(h,), (h,)]
  pooler = [(h, h), (h,)]
  masked_lm = [(h, h), (h,), (h,), (h,), (v,)]
  next_sentence = [(2, h), (2,)]
  shapes = embeddings + layer * 12 + pooler + masked_lm + next_sentence
  by_hand = sum(int(np.prod(shape)) for shape in shapes)
  assert by_hand == 110106428  # the "110M" of the paper
  config = _config("base")
  assert size.parameter_count(config) == by_hand
  assert size.parameter_count(config, heads=False) == 109482240  # the encoder alone


@pytest.mark.parametrize("name", ["tiny", "base"])
def test_parameter_count_is_the_graphs_variable_count(name, graph):
  config = _config(name)
  batch, seq, predictions = 2, 8, 3
  features = {
      "input_ids": tf.zeros([batch, seq], tf.int32),
      "input_mask": tf.ones([batch, seq], tf.int32),
      "segment_ids": tf.zeros([batch, seq], tf.int32),
      "masked_lm_positions": tf.zeros([batch, predictions], tf.int32),
      "masked_lm_ids": tf.zeros([batch, predictions], tf.int32),
      "masked_lm_weights": tf.ones([batch, predictions], tf.float32),
      "next_sentence_labels": tf.zeros([batch, 1], tf.int32),
  }
  pretraining.build_pretraining_model(config, features, is_training=True)
  variables = _tf1.trainable_variables()
  assert len(variables) == 5 + 16 * config.num_hidden_layers + 2 + 5 + 2
  assert sum(v.shape.num_elements() for v in variables) == size.parameter_count(config)


# A small model whose every term is worked out by hand below.
SMALL = dict(vocab_size=20, hidden_size=8, num_hidden_layers=3, num_attention_heads=2,
             intermediate_size=12, max_position_embeddings=16, type_vocab_size=2)


def test_memory_estimate_by_hand():
  config = modeling.BertConfig(**SMALL)
  # Parameters: embeddings (20 + 16 + 2) x 8 + 16 = 320; a layer 4 x 72 + 32 + 108 + 104 = 532;
  # pooler 72; masked LM 72 + 16 + 20 = 108; next sentence 18.
  params = 320 + 3 * 532 + 72 + 108 + 18
  assert params == 2114
  # Activations at batch 2 x 4 tokens (8 tokens): a layer 8 x (11 x 8 + 2 x 12) + 3 x 2 x 2 x 16
  # = 896 + 192 = 1088 elements; 3 layers and the embeddings' 3 x 8 x 8 = 192.
  activations = 3 * 1088 + 192
  memory = size.estimate_memory(config, batch_size=2, seq_length=4, optimizer_slots=2)
  assert memory == size.Memory(weights=4 * params, gradients=4 * params, slots=8 * params,
                               accumulation=0, half_copies=0, activations=4 * activations)
  half = size.estimate_memory(config, 2, 4, half_precision=True, accumulation_steps=4,
                              optimizer_slots=2)
  assert half == size.Memory(weights=4 * params, gradients=4 * params, slots=8 * params,
                             accumulation=4 * params, half_copies=2 * params,
                             activations=2 * activations)
  evaluating = size.estimate_memory(config, 2, 4, training=False)
  assert evaluating == size.Memory(weights=4 * params, gradients=0, slots=0, accumulation=0,
                                   half_copies=0, activations=4 * (1088 + 192))
  # The masked-LM head, in fp32: 2 x 3 predictions, each 3 x 8 + 3 x 20 elements.
  with_head = size.estimate_memory(config, 2, 4, half_precision=True, predictions_per_seq=3,
                                   optimizer_slots=2)
  assert with_head.activations == 2 * activations + 4 * 6 * 84


def test_bert_base_estimate_is_of_the_known_order():
  # Batch 32 x 128 in fp32: 110M parameters x 16 bytes is 1.64 GiB of weights, gradients and
  # slots; the activations of 12 layers are a few GiB.
  memory = size.estimate_memory(_config("base"), 32, 128, optimizer_slots=2)
  assert sum(memory) - memory.activations == 16 * 110106428
  assert 2 * GIB < memory.activations < 6 * GIB


def test_ten_thousand_narrow_layers_fit_a_24_gib_machine():
  # Long graph building with a model that does fit (the graceful stop's test uses it).
  config = modeling.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=10000,
                               num_attention_heads=2, intermediate_size=64, type_vocab_size=2)
  memory = size.check_fits(config, 24 * GIB, "narrow.json", batch_size=2, seq_length=16,
                           optimizer_slots=2)
  assert sum(memory) < 3 * GIB


@pytest.mark.parametrize("overrides,named", [
    (dict(num_hidden_layers=10000), "num_hidden_layers=10000"),
    (dict(hidden_size=100000, num_attention_heads=10), "hidden_size=100000"),
    (dict(intermediate_size=10 ** 8), "intermediate_size=100000000"),
    (dict(vocab_size=2 ** 31 - 1), "vocab_size=2147483647"),
])
def test_too_big_names_the_key_the_estimate_and_the_machine(overrides, named):
  config = _config("base", **overrides)
  with pytest.raises(ValueError) as error:
    size.check_fits(config, 24 * GIB, "big.json", batch_size=4, seq_length=32, optimizer_slots=2)
  message = str(error.value)
  assert message.startswith("big.json: %s does not fit this machine" % named), message
  total = sum(size.estimate_memory(config, 4, 32, optimizer_slots=2))
  assert "needs about %.1f GB" % (total / GIB) in message or "e+" in message
  assert "this machine's 24.0 GB of memory" in message and "\n" not in message


def test_a_batch_too_big_names_the_main_sizes():
  with pytest.raises(ValueError, match="num_hidden_layers=12, hidden_size=768 does not fit"):
    size.check_fits(_config("base"), 24 * GIB, "base.json", batch_size=100000, seq_length=128,
                    optimizer_slots=2)


def _job(tmp_path, config_values, *args):
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(config_values))
  return helpers.job_config(["--bert_config_file=%s" % path, "--max_seq_length=128"]
                            + list(args)), path


@pytest.mark.parametrize("args,fits", [
    # BERT-large at batch 96 x 128 (24 GiB machine): training in fp32 needs 5.0 GiB of weights,
    # gradients and slots and 4 bytes x 24 layers x 96 x 128 x (11 x 1024 + 2 x 4096) plus
    # 4 x 24 x 3 x 96 x 16 x 128 x 128 bytes of activations (and the embeddings' 4 x 3 x 96 x 128
  # x 1024): 5.0 + 28.3 = 33.3 GiB.
    (["--do_train", "--train_batch_size=96"], False),
    # In bf16 the activations are half that (and the weights' copies add 0.6 GiB): 19.8 GiB.
    (["--do_train", "--train_batch_size=96", "--bf16"], True),
    # Evaluation keeps the weights and one layer's activations.
    (["--do_eval", "--eval_batch_size=96"], True),
    (["--do_train", "--train_batch_size=1"], True),
])
def test_flag_check_counts_the_jobs_batch_and_precision(tmp_path, args, fits):
  with open(os.path.join(REPO_ROOT, "bert_configs", "large.json")) as f:
    values = json.load(f)
  config, path = _job(tmp_path, values, *args)
  bert_config = modeling.BertConfig.from_json_file(str(path))
  if fits:
    job_lib.check_model_fits(config, bert_config, 24 * GIB)
  else:
    with pytest.raises(errors.UsageError, match=r"--bert_config_file: %s: \w+=\d+ does not fit "
                       r"this machine: the model needs about 33\.3 GB" % path):
      job_lib.check_model_fits(config, bert_config, 24 * GIB)


def test_load_bert_config_refuses_with_the_machines_memory(tmp_path):
  config, path = _job(tmp_path, dict(helpers.TINY_CONFIG, num_hidden_layers=10 ** 6,
                                     max_position_embeddings=512,
                                     hidden_size=1024, num_attention_heads=16), "--do_train")
  with pytest.raises(errors.UsageError, match="%s: num_hidden_layers=1000000 does not fit" % path):
    job_lib.load_bert_config(config)


# ---------------------------------------------------------------------------------------------
# The script: one line, exit 2, seconds after the start.


@pytest.mark.e2e
@pytest.mark.parametrize("overrides,message", [
    (dict(num_hidden_layers=10000), "num_hidden_layers=10000 does not fit this machine"),
    (dict(hidden_size=100000, num_attention_heads=10), "hidden_size=100000 does not fit"),
    (dict(hidden_size=100, num_attention_heads=3),
     "'hidden_size' (100) must be a multiple of 'num_attention_heads' (3)"),
])
def test_run_pretraining_refuses_a_model_that_cannot_be(tmp_path, overrides, message):
  with open(os.path.join(REPO_ROOT, "bert_configs", "base.json")) as f:
    values = dict(json.load(f), **overrides)
  config_path = tmp_path / "bert_config.json"
  config_path.write_text(json.dumps(values))
  (tmp_path / "records").mkdir()
  flags = test_run_pretraining.common_flags(
      {"config": config_path, "train_dir": tmp_path / "records"}, tmp_path / "out",
      do_train=True, num_train_steps=1)
  started = time.time()
  proc = test_run_pretraining.run_job(flags, timeout=120, check=False)
  assert proc.returncode == 2, proc.stderr[-3000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("run_pretraining.py: error: --bert_config_file: %s: " % config_path)
  assert message in last and "Traceback" not in proc.stderr
  if "does not fit" in message:
    assert "GB" in last and "of memory" in last
  assert time.time() - started < 60
  assert not (tmp_path / "out").exists()
