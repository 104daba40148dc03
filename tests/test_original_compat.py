"""A checkpoint written by the original BERT code gives the original's numbers in our graph.

The original release (PyPI `bert-tensorflow`) runs in a subprocess (tests/reference), builds its
model and heads, randomises and saves the weights, and dumps outputs, losses and gradients. Our
graph then loads that checkpoint through `get_assignment_map_from_checkpoint` and must reproduce
all of them to 1e-5.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import modeling
import run_pretraining
from tests import helpers

pytestmark = pytest.mark.e2e

_tf1 = tf.compat.v1
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_original(args, timeout=300):
  """Runs tests/reference/original_bert.py with `args`; raises with its output on failure."""
  proc = subprocess.run([sys.executable, "-m", "tests.reference.original_bert"] + args,
                        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)
  if proc.returncode != 0:
    raise AssertionError("original BERT failed (%d):\n%s\n%s"
                         % (proc.returncode, proc.stdout[-3000:], proc.stderr[-5000:]))
  return proc


def test_original_checkpoint_reproduces_outputs_losses_and_gradients(tmp_path):
  config = helpers.tiny_config(vocab_size=120, hidden_size=48, num_hidden_layers=3,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=32, type_vocab_size=2)
  config_path = tmp_path / "bert_config.json"
  config_path.write_text(config.to_json_string())
  batch = helpers.random_batch(np.random.RandomState(11), 3, 16, config.vocab_size, 5)
  np.savez(tmp_path / "batch.npz", **batch)
  run_original(["model", "--config", str(config_path), "--batch", str(tmp_path / "batch.npz"),
                "--out", str(tmp_path), "--seed", "12"])
  reference = dict(np.load(tmp_path / "outputs.npz"))
  ckpt = str(tmp_path / "bert_model.ckpt")

  with tf.Graph().as_default():
    loaded_config = modeling.BertConfig.from_json_file(str(config_path))
    built = run_pretraining.build_pretraining_model(
        loaded_config, helpers.constant_features(batch), is_training=False)
    tvars = _tf1.trainable_variables()
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(tvars, ckpt)
    # Every one of our variables is in the original checkpoint, under the same name.
    assert sorted(assignment_map) == sorted(v.op.name for v in tvars)
    _tf1.train.init_from_checkpoint(ckpt, assignment_map)
    grads = tf.gradients(built["total_loss"], tvars)
    model = built["model"]
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      ours = sess.run({
          "sequence_output": model.get_sequence_output(),
          "pooled_output": model.get_pooled_output(),
          "embedding_output": model.get_embedding_output(),
          "mlm_loss": built["mlm_loss"],
          "mlm_per_example_loss": built["mlm_per_example_loss"],
          "nsp_loss": built["nsp_loss"],
          "nsp_per_example_loss": built["nsp_per_example_loss"],
          "total_loss": built["total_loss"],
      })
      grad_values = sess.run(grads)

  for key, value in ours.items():
    np.testing.assert_allclose(value, reference[key], atol=1e-5, err_msg=key)
  assert len(tvars) == len([k for k in reference if k.startswith("grad/")])
  for var, grad in zip(tvars, grad_values):
    expected = reference["grad/" + var.op.name]
    np.testing.assert_allclose(np.asarray(grad), expected, atol=1e-5, err_msg=var.op.name)
  # The comparison is not vacuous: the losses are far from zero and the gradients are not.
  assert reference["total_loss"] > 1.0
  assert max(np.abs(reference["grad/" + v.op.name]).max() for v in tvars) > 1e-2



def test_original_checkpoint_evaluates_to_the_originals_losses(tmp_path):
  config = helpers.tiny_config(vocab_size=120, hidden_size=48, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=32, type_vocab_size=2)
  config_path = tmp_path / "bert_config.json"
  config_path.write_text(config.to_json_string())
  rng = np.random.RandomState(21)
  # The original's checkpoint: its own model code, random weights, saved as bert_model.ckpt.
  np.savez(tmp_path / "batch.npz", **helpers.random_batch(rng, 2, 16, config.vocab_size, 4))
  ckpt_dir = tmp_path / "released"
  ckpt_dir.mkdir()
  run_original(["model", "--config", str(config_path), "--batch", str(tmp_path / "batch.npz"),
                "--out", str(ckpt_dir), "--seed", "22"])
  data_dir = tmp_path / "eval"
  data_dir.mkdir()
  records = data_dir / "eval.tfrecord"
  helpers.write_batch_records(records, helpers.random_batch(rng, 12, 16, config.vocab_size, 4))
  checkpoint = str(ckpt_dir / "bert_model.ckpt")
  common = ["--bert_config_file=%s" % config_path, "--init_checkpoint=%s" % checkpoint,
            "--max_seq_length=16", "--max_predictions_per_seq=4", "--do_eval",
            "--eval_batch_size=4", "--max_eval_steps=3"]

  # The original run_pretraining.py (TPUEstimator on the CPU) evaluates every record once.
  run_original(["run_pretraining", "--", "--input_file=%s" % records,
                "--output_dir=%s" % (tmp_path / "original"), "--use_tpu=False"] + common)
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"),
       "--eval_files_dir=%s" % data_dir, "--output_dir=%s" % (tmp_path / "ours")] + common,
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-5000:]

  original = helpers.read_eval_results(tmp_path / "original" / "eval_results.txt")
  ours = helpers.read_eval_results(tmp_path / "ours" / "eval_results.txt")
  for key in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
              "next_sentence_loss", "loss"):
    np.testing.assert_allclose(ours[key], original[key], atol=1e-5, err_msg=key)
  assert original["masked_lm_loss"] > 1.0  # random weights: a real, non-trivial loss
