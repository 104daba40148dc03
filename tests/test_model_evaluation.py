"""utils/model/evaluation.py: held-out records read whole, the unigram baseline by hand, and the
checkpoints' masked-LM loss and accuracy and next-sentence accuracy against float64 numpy BERT."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tests import numpy_bert
from tests import test_data_record_framing
from tests import test_data_record_layout
from utils.model import evaluation
from utils.model import pretraining

_tf1 = tf.compat.v1
SEQ, PREDICTIONS = 16, 5


def _records(rng, count, vocab_size):
  batch = helpers.random_batch(rng, count, SEQ, vocab_size, PREDICTIONS)
  batch["next_sentence_labels"] = rng.randint(0, 2, size=(count, 1)).astype(np.int32)
  return batch


def _save_random_checkpoints(config, path_prefix, seeds):
  """One checkpoint per seed of the pretraining graph's variables, each drawn N(0, 0.1^2) (large
  enough that the predictions differ from token to token); returns the prefixes."""
  paths = []
  with tf.Graph().as_default():
    features = {name: _tf1.placeholder(tf.float32 if name == "masked_lm_weights" else tf.int32,
                                       [None, None]) for name in
                ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")}
    pretraining.build_pretraining_model(config, features, is_training=False)
    saver = _tf1.train.Saver()
    with _tf1.Session() as sess:
      for seed in seeds:
        rng = np.random.RandomState(seed)
        for variable in _tf1.global_variables():
          shape = variable.shape.as_list()
          variable.load(rng.normal(0, 0.1, size=shape).astype(np.float32), sess)
        paths.append(saver.save(sess, "%s-%d" % (path_prefix, seed)))
  return paths


def _numpy_metrics(config, checkpoint, records):
  reader = tf.train.load_checkpoint(checkpoint)
  weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
  _, layers, pooled = numpy_bert.encoder(
      weights, config.num_hidden_layers, config.num_attention_heads, records["input_ids"],
      records["input_mask"], records["segment_ids"])
  out = numpy_bert.pretraining_outputs(
      weights, layers[-1], pooled, records["masked_lm_positions"], records["masked_lm_ids"],
      records["masked_lm_weights"], records["next_sentence_labels"])
  ids = records["masked_lm_ids"].reshape(-1)
  real = records["masked_lm_weights"].reshape(-1).astype(np.float64)
  loss = np.sum(real * out["mlm_per_example"]) / np.sum(real)
  accuracy = np.sum(real * (np.argmax(out["mlm_log_probs"], -1) == ids)) / np.sum(real)
  nsp = np.mean(np.argmax(out["nsp_log_probs"], -1) == records["next_sentence_labels"][:, 0])
  return loss, accuracy, nsp, np.argmax(out["mlm_log_probs"], -1)


def test_records_are_read_whole_in_file_order(tmp_path):
  rng = np.random.RandomState(0)
  first, second = _records(rng, 3, 50), _records(rng, 2, 50)
  helpers.write_batch_records(tmp_path / "a.tfrecord", first)
  helpers.write_batch_records(tmp_path / "b.tfrecord", second)

  read = evaluation.read_pretraining_records(
      [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")], SEQ, PREDICTIONS)

  for name in first:
    np.testing.assert_array_equal(read[name], np.concatenate([first[name], second[name]]),
                                  err_msg=name)


def test_no_records_is_an_error_naming_the_file(tmp_path):
  helpers.write_batch_records(tmp_path / "empty.tfrecord", {"input_ids": np.zeros((0, SEQ))})
  with pytest.raises(ValueError, match="empty.tfrecord"):
    evaluation.read_pretraining_records([str(tmp_path / "empty.tfrecord")], SEQ, PREDICTIONS)


def test_a_length_past_the_end_with_its_crc_is_named_before_tensorflow_reads_it(tmp_path):
  # TF's reader died (SIGSEGV) on such a header; the walk names it first.
  path = tmp_path / "bad.tfrecord"
  offset, _ = test_data_record_framing.bad_length_file(path)
  with pytest.raises(ValueError) as raised:
    evaluation.read_pretraining_records([str(path)], SEQ, PREDICTIONS)
  assert str(raised.value) == "%s: record %d at byte offset %d: %s" % (
      path, len(test_data_record_framing.SIZES), offset, test_data_record_framing.HUGE_PROBLEM)


def test_packed_records_are_refused_by_name(tmp_path):
  path = tmp_path / "packed.tfrecord"
  with tf.io.TFRecordWriter(str(path)) as writer:
    writer.write(test_data_record_layout.example(test_data_record_layout.GOOD)
                 .SerializeToString())
  with pytest.raises(ValueError) as error:
    evaluation.read_pretraining_records([str(path)], 12, 6)
  assert str(error.value).startswith(
      "%s holds packed records (up to 3 sequences per row of 12 tokens, 6 predictions); the "
      "held-out evaluation reads unpacked records" % path)


def test_unigram_accuracy_by_hand_counts_only_real_predictions():
  # Real predictions: 5, 5, 7, 5, 9 -> the commonest, 5, is 3 of 5. Padding (id 0, weight 0) is
  # the commonest id overall and must not count.
  records = {"masked_lm_ids": np.array([[5, 5, 7, 0], [5, 9, 0, 0], [0, 0, 0, 0]]),
             "masked_lm_weights": np.array([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], float)}
  assert evaluation.unigram_accuracy(records) == pytest.approx(0.6)
  with pytest.raises(ValueError, match="no masked token"):
    evaluation.unigram_accuracy({"masked_lm_ids": np.ones((1, 2), int),
                                 "masked_lm_weights": np.zeros((1, 2))})


def test_checkpoints_are_scored_as_numpy_bert_scores_them(tmp_path):
  config = helpers.tiny_config(vocab_size=40, hidden_dropout_prob=0.5,
                               attention_probs_dropout_prob=0.5)
  records = _records(np.random.RandomState(1), 7, config.vocab_size)
  first, second = _save_random_checkpoints(config, str(tmp_path / "model.ckpt"), (1, 2))
  # 3 of the 4 real labels of each record become the first checkpoint's predictions: its accuracy
  # is then at least 0.75, the second's near chance.
  predicted = _numpy_metrics(config, first, records)[3].reshape(records["masked_lm_ids"].shape)
  records["masked_lm_ids"][:, :3] = predicted[:, :3]

  # Batches of 3 split the 7 records unevenly; the first checkpoint again after the second shows
  # that each restore replaces every weight.
  results = evaluation.evaluate_checkpoints(config, records, [first, second, first],
                                            batch_size=3)

  for result, checkpoint in zip(results, [first, second, first]):
    loss, accuracy, nsp, _ = _numpy_metrics(config, checkpoint, records)
    assert result["masked_lm_loss"] == pytest.approx(loss, rel=1e-5)
    assert result["masked_lm_accuracy"] == pytest.approx(accuracy, abs=1e-9)
    assert result["next_sentence_accuracy"] == pytest.approx(nsp, abs=1e-9)
    assert result["records"] == 7
  assert results[0]["masked_lm_accuracy"] >= 0.75 > 0.3 > results[1]["masked_lm_accuracy"]
  assert results[2] == results[0]


def test_fresh_weights_predict_about_uniformly():
  config = helpers.tiny_config(vocab_size=64)
  records = _records(np.random.RandomState(2), 4, config.vocab_size)
  fresh, = evaluation.evaluate_checkpoints(config, records, [None])
  # initializer_range 0.02: the logits are near 0, so the loss is near ln(vocab).
  assert fresh["masked_lm_loss"] == pytest.approx(math.log(64), abs=0.05)
