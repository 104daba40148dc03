"""SavedModels for serving: run_classifier.py / run_squad.py --export_dir and the encoder of
`python -m utils.export_release --format=saved_model`.

Each SavedModel is loaded in a fresh process (`tests/saved_model_run.py`: `tf.saved_model.load`,
its `serving_default` signature) and gives what the job computed: the classifier's probabilities
its Estimator wrote to test_results.tsv, SQuAD's start and end logits (those of our graph restored
from the same checkpoint, and those of the Estimator's n-best spans) and the encoder's outputs of
our graph restored from the same checkpoint (fp32, to 1e-5). The documented `saved_model_cli run`
line runs on the encoder.
"""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import modeling
import run_squad
from tests import finetuning_data
from tests import helpers
from utils.checkpoints import contents as ckpt
from utils.checkpoints import release

pytestmark = pytest.mark.e2e

_tf1 = tf.compat.v1
REPO_ROOT = helpers.REPO_ROOT
RUNNER = os.path.join(REPO_ROOT, "tests", "saved_model_run.py")
SEQ = 48
TOLERANCE = 1e-5
SQUAD = dict(max_seq_length=SEQ, doc_stride=16, max_query_length=12, n_best_size=10,
             max_answer_length=10)


# This module's processes (`python=` saved_model_cli).
run = helpers.run_python


def flag_list(values):
  return ["--%s=%s" % item for item in values.items()]


def serve(saved_model, inputs, tmp_path):
  """The SavedModel's serving_default outputs on `inputs`, computed in a fresh process."""
  np.savez(tmp_path / "in.npz", **inputs)
  run([RUNNER, "--dir=%s" % saved_model, "--inputs=%s" % (tmp_path / "in.npz"),
       "--out=%s" % (tmp_path / "out.npz")])
  return dict(np.load(tmp_path / "out.npz"))


def saved_model_cli_run(saved_model, features, row, tmp_path):
  """`saved_model_cli run --inputs` (docs/HANDOFF.md's line) on row `row` of `features`, given as
  .npy files of shape [1, seq_length]; returns dict output name -> array."""
  inputs = []
  for name in ("input_ids", "input_mask", "segment_ids"):
    np.save(tmp_path / (name + ".npy"), features[name][row:row + 1])
    inputs.append("%s=%s" % (name, tmp_path / (name + ".npy")))
  cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  out = tmp_path / "cli"
  run(["run", "--dir", str(saved_model), "--tag_set", "serve", "--signature_def",
       "serving_default", "--inputs", ";".join(inputs), "--outdir", str(out)], python=cli)
  return {name[:-len(".npy")]: np.load(out / name) for name in os.listdir(out)}


def read_records(path, names, seq_length):
  """The int features `names` of every record of a TFRecord file, as int32 [records, seq]."""
  rows = {name: [] for name in names}
  for record in tf.compat.v1.io.tf_record_iterator(str(path)):
    feature = tf.train.Example.FromString(record).features.feature
    for name in names:
      rows[name].append(list(feature[name].int64_list.value))
  arrays = {name: np.array(values, np.int32) for name, values in rows.items()}
  assert all(a.shape[1] == seq_length for a in arrays.values())
  return arrays


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("saved_model")
  vocab = str(root / "vocab.txt")
  vocab_size = finetuning_data.write_vocab(vocab)
  config = str(root / "bert_config.json")
  finetuning_data.write_bert_config(config, vocab_size, max_position_embeddings=64)
  finetuning_data.write_squad(str(root / "squad.json"), False, repeat=2)
  finetuning_data.write_glue(str(root / "mrpc"), "mrpc", finetuning_data.rng(5), n_train=16,
                             n_dev=12)
  # Random weights well away from the initialiser's (whose outputs are nearly constant).
  checkpoint = str(root / "random" / "model.ckpt")
  with tf.Graph().as_default():
    bert_config = modeling.BertConfig.from_json_file(config)
    ids = tf.zeros([2, SEQ], tf.int32)
    modeling.BertModel(bert_config, False, ids, ids, ids)
    with _tf1.Session() as session:
      session.run(_tf1.global_variables_initializer())
      helpers.randomize_variables(session, _tf1.global_variables(), np.random.RandomState(0),
                                  scale=0.2)
      _tf1.train.Saver().save(session, checkpoint)
  return {"root": root, "vocab": vocab, "config": config, "squad": str(root / "squad.json"),
          "mrpc": str(root / "mrpc"), "checkpoint": checkpoint}


def test_classifier_saved_model_gives_the_estimators_probabilities(files, tmp_path):
  out, export = tmp_path / "out", tmp_path / "serving"
  run(["run_classifier.py"] + flag_list(dict(
      task_name="MRPC", data_dir=files["mrpc"], vocab_file=files["vocab"],
      bert_config_file=files["config"], init_checkpoint=files["checkpoint"], output_dir=out,
      do_train=True, do_predict=True, max_seq_length=32, train_batch_size=8, num_train_epochs=1,
      learning_rate=1e-3,
      predict_batch_size=5, export_dir=export)))
  assert sorted(os.listdir(export)) == ["saved_model.pb", "variables"]
  features = read_records(out / "predict.tf_record", ("input_ids", "input_mask", "segment_ids"),
                          32)
  served = serve(export, features, tmp_path)
  assert sorted(served) == ["probabilities"]
  estimator = np.loadtxt(out / "test_results.tsv")
  assert served["probabilities"].shape == estimator.shape == (len(features["input_ids"]), 2)
  np.testing.assert_allclose(served["probabilities"], estimator, rtol=0, atol=TOLERANCE)
  assert np.ptp(estimator[:, 0]) > 100 * TOLERANCE  # not a constant answer
  cli = saved_model_cli_run(export, features, 1, tmp_path)
  np.testing.assert_allclose(cli["probabilities"], estimator[1:2], rtol=0, atol=TOLERANCE)


def squad_logits(bert_config, checkpoint, features):
  """run_squad.create_model, restored from `checkpoint`, on `features`: (start, end) logits."""
  with tf.Graph().as_default():
    inputs = {name: tf.constant(value) for name, value in features.items()}
    start, end = run_squad.create_model(bert_config, False, inputs["input_ids"],
                                        inputs["input_mask"], inputs["segment_ids"], False)
    with _tf1.Session() as session:
      _tf1.train.Saver([v for v in _tf1.global_variables()]).restore(session, checkpoint)
      return session.run([start, end])


def test_squad_saved_model_gives_the_models_and_the_estimators_start_and_end_logits(files,
                                                                                  tmp_path):
  out, export = tmp_path / "out", tmp_path / "serving"
  run(["run_squad.py"] + flag_list(dict(
      SQUAD, vocab_file=files["vocab"], bert_config_file=files["config"],
      init_checkpoint=files["checkpoint"], output_dir=out,
      train_file=files["squad"], predict_file=files["squad"], do_train=True, do_predict=True,
      train_batch_size=8, num_train_epochs=1, learning_rate=1e-3, predict_batch_size=4,
      export_dir=export)))
  features = read_records(out / "eval.tf_record", ("input_ids", "input_mask", "segment_ids"), SEQ)
  served = serve(export, features, tmp_path)
  assert sorted(served) == ["end_logits", "start_logits"]
  start, end = squad_logits(modeling.BertConfig.from_json_file(files["config"]),
                            tf.train.latest_checkpoint(str(out)), features)
  np.testing.assert_allclose(served["start_logits"], start, rtol=0, atol=TOLERANCE)
  np.testing.assert_allclose(served["end_logits"], end, rtol=0, atol=TOLERANCE)
  assert np.ptp(start) > 100 * TOLERANCE
  cli = saved_model_cli_run(export, features, 2, tmp_path)
  np.testing.assert_allclose(cli["start_logits"], start[2:3], rtol=0, atol=TOLERANCE)
  np.testing.assert_allclose(cli["end_logits"], end[2:3], rtol=0, atol=TOLERANCE)
  # The Estimator's own predictions: each n-best span's start and end logits are one feature's
  # served logits at two of its positions.
  nbest = json.loads((out / "nbest_predictions.json").read_text())
  spans = [(e["start_logit"], e["end_logit"]) for entries in nbest.values() for e in entries
           if e["text"] not in ("", "empty")]
  assert len(spans) >= len(nbest)
  for start_logit, end_logit in spans:
    assert any(np.min(np.abs(served["start_logits"][f] - start_logit)) <= TOLERANCE
               and np.min(np.abs(served["end_logits"][f] - end_logit)) <= TOLERANCE
               for f in range(len(features["input_ids"]))), (start_logit, end_logit)


def encoder_outputs(bert_config, checkpoint, features):
  with tf.Graph().as_default():
    inputs = {name: tf.constant(value) for name, value in features.items()}
    model = modeling.BertModel(bert_config, False, inputs["input_ids"], inputs["input_mask"],
                               inputs["segment_ids"])
    with _tf1.Session() as session:
      _tf1.train.Saver().restore(session, checkpoint)
      return session.run({"sequence_output": model.get_sequence_output(),
                          "pooled_output": model.get_pooled_output()})


def test_encoder_saved_model_of_the_export_command(files, tmp_path):
  bert_config = modeling.BertConfig.from_json_file(files["config"])
  rng = np.random.RandomState(0)
  weights = {name: rng.normal(0, 0.1, shape).astype(np.float32)
             for name, shape in release.model_weight_shapes(bert_config).items()}
  checkpoint = str(tmp_path / "model.ckpt")
  ckpt.write_checkpoint(checkpoint, weights)
  export = tmp_path / "encoder"
  proc = run(["-m", "utils.export_release", "--format=saved_model",
              "--checkpoint=%s" % checkpoint, "--bert_config_file=%s" % files["config"],
              "--output_dir=%s" % export])
  assert "exported the encoder" in proc.stdout
  # The command's own lines only: TensorFlow's deprecation warnings of the SavedModel builder
  # stay behind --verbose.
  assert proc.stderr == "", proc.stderr[-3000:]
  batch = helpers.random_batch(rng, 3, 20, bert_config.vocab_size, 2)
  features = {name: batch[name] for name in ("input_ids", "input_mask", "segment_ids")}
  served = serve(export, features, tmp_path)
  ours = encoder_outputs(bert_config, checkpoint, features)
  assert sorted(served) == ["pooled_output", "sequence_output"]
  for name in ours:
    np.testing.assert_allclose(served[name], ours[name], rtol=0, atol=TOLERANCE, err_msg=name)
  # The documented command line, on one sequence of another length (the signature takes any).
  cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  run(["run", "--dir", str(export), "--tag_set", "serve", "--signature_def", "serving_default",
       "--input_exprs", "input_ids=[[2,7,9,3]];input_mask=[[1,1,1,1]];segment_ids=[[0,0,0,0]]",
       "--outdir", str(tmp_path / "cli")], python=cli)
  one = {"input_ids": np.array([[2, 7, 9, 3]], np.int32),
         "input_mask": np.ones([1, 4], np.int32), "segment_ids": np.zeros([1, 4], np.int32)}
  ours = encoder_outputs(bert_config, checkpoint, one)
  for name in ours:
    np.testing.assert_allclose(np.load(tmp_path / "cli" / (name + ".npy")), ours[name], rtol=0,
                               atol=TOLERANCE, err_msg=name)
  # Refused: an output directory that is not empty.
  again = run(["-m", "utils.export_release", "--format=saved_model",
               "--checkpoint=%s" % checkpoint, "--bert_config_file=%s" % files["config"],
               "--output_dir=%s" % export], check=False)
  assert again.returncode == 2 and "exists and is not empty" in again.stderr
  assert "Traceback" not in again.stderr


def test_export_dir_that_is_not_empty_is_refused_before_training(files, tmp_path):
  export = tmp_path / "serving"
  export.mkdir()
  (export / "old.pb").write_text("x")
  proc = run(["run_classifier.py"] + flag_list(dict(
      task_name="MRPC", data_dir=files["mrpc"], vocab_file=files["vocab"],
      bert_config_file=files["config"], output_dir=tmp_path / "out", do_train=True,
      max_seq_length=32, export_dir=export)), check=False)
  assert proc.returncode == 2
  assert "--export_dir=%s exists and is not empty" % export in proc.stderr
  assert "Traceback" not in proc.stderr
  assert not (tmp_path / "out").exists() or not [
      n for n in os.listdir(tmp_path / "out") if n.startswith("model.ckpt")]
