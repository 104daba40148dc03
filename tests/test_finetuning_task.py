"""utils/finetuning/task.py: what both fine-tuning scripts share besides the job. The number of
updates and warmup as the release counts them, records written and read back as int32 features
(evaluation in order and once, training sharded per worker, repeated and shuffled), the tokenizer
of --vocab_file, the serving input, and the refusals of --export_dir before anything is written.
The fine-tuning flag checks are tests/test_finetuning_config.py's."""

import dataclasses
import os
import types

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from utils.core import errors
from utils.finetuning import config as finetuning_config
from utils.finetuning import task

_tf1 = tf.compat.v1
SEQ = 3


def tuning(**overrides):
  """A `FinetuningConfig` of the flags' defaults, with `overrides`."""
  values = finetuning_config.FinetuningConfig(
      do_lower_case=True, num_train_epochs=3.0, warmup_proportion=0.1,
      do_predict=False, predict_batch_size=8, export_dir=None)
  return dataclasses.replace(values, **overrides)


def write_numbered_records(path, n):
  """n records: input_ids [i, i+1, i+2] and label_id i."""
  return task.write_records(str(path), ({"input_ids": [i, i + 1, i + 2], "label_id": [i]}
                                        for i in range(n)))


SPEC = task.int_feature_spec(SEQ, ["input_ids"], ["label_id"])


def read_batches(input_fn, params=None, limit=None):
  """The batches of input_fn(params) as numpy dicts: all of them, or the first `limit`."""
  with tf.Graph().as_default():
    dataset = input_fn(params or {})
    batch = _tf1.data.make_one_shot_iterator(dataset).get_next()
    assert all(value.dtype == tf.int32 for value in batch.values())
    batches = []
    with _tf1.Session() as session:
      while limit is None or len(batches) < limit:
        try:
          batches.append(session.run(batch))
        except tf.errors.OutOfRangeError:
          break
  return batches


def test_training_steps_truncate_the_updates_and_warmup_as_the_release():
  f = tuning(num_train_epochs=3.0, warmup_proportion=0.1)
  assert task.training_steps(f, 1000, 32) == (93, 9)  # int(1000 / 32 * 3), int(93 * 0.1)
  # Truncated, not rounded: int(93 * 0.06) == 5; no warmup at 0.
  assert task.training_steps(tuning(warmup_proportion=0.06), 1000, 32) == (93, 5)
  assert task.training_steps(tuning(num_train_epochs=0.5, warmup_proportion=0.0),
                             640, 32) == (10, 0)
  with pytest.raises(errors.UsageError,
                     match=r"10 training examples make no update of global batch 32 in "
                           r"--num_train_epochs=3"):
    task.training_steps(f, 10, 32)  # int(0.9375) == 0


def test_training_and_prediction_input_run_without_autotuning(tmp_path):
  # As the pretraining input functions (input_pipeline.without_autotuning): with autotuning on,
  # closing the session waited for its thread's sleep, up to 60 s.
  path = str(tmp_path / "train.tf_record")
  write_numbered_records(path, 4)
  with tf.Graph().as_default():
    for input_fn in (task.input_fn_builder(path, SPEC, True, True, batch_size=2),
                     task.predict_input_fn(helpers.job_config(), path, SPEC, batch_size=2)):
      assert input_fn({}).options().autotune.enabled is False


def test_records_go_into_a_worker_directory_not_made_yet(tmp_path):
  # A Horovod worker that saves nothing has no directory of its own until it writes its task's
  # records there (rank 1's train.tf_record failed with NotFoundError).
  assert write_numbered_records(tmp_path / "worker_1" / "train.tf_record", 3) == 3
  streamed = task.RecordWriter(str(tmp_path / "worker_2" / "train.tf_record"),
                               lambda i: {"input_ids": [i, i + 1, i + 2], "label_id": [i]})
  for i in range(3):
    streamed.process_feature(i)
  streamed.close()
  assert ((tmp_path / "worker_2" / "train.tf_record").read_bytes()
          == (tmp_path / "worker_1" / "train.tf_record").read_bytes())


def test_records_read_back_once_in_order_for_evaluation(tmp_path):
  path = tmp_path / "eval.tf_record"
  assert write_numbered_records(path, 5) == 5
  # The streaming writer writes the same records.
  streamed = task.RecordWriter(str(tmp_path / "streamed.tf_record"),
                               lambda i: {"input_ids": [i, i + 1, i + 2], "label_id": [i]})
  for i in range(5):
    streamed.process_feature(i)
  streamed.close()
  assert streamed.num_features == 5
  assert (tmp_path / "streamed.tf_record").read_bytes() == path.read_bytes()

  batches = read_batches(task.predict_input_fn(helpers.job_config(), str(path), SPEC,
                                               batch_size=2))
  assert [b["label_id"].tolist() for b in batches] == [[0, 1], [2, 3], [4]]  # last one kept
  np.testing.assert_array_equal(batches[0]["input_ids"], [[0, 1, 2], [1, 2, 3]])
  # On a TPU the batch is params["batch_size"] and a partial batch is dropped.
  tpu = read_batches(task.predict_input_fn(helpers.job_config(["--use_tpu"]), str(path), SPEC,
                                           batch_size=2), params={"batch_size": 3})
  assert [b["label_id"].tolist() for b in tpu] == [[0, 1, 2]]


def test_training_records_are_this_workers_repeated_and_shuffled_unless_deterministic(tmp_path):
  path = str(tmp_path / "train.tf_record")
  write_numbered_records(path, 60)
  workers = types.SimpleNamespace(size=2, rank=1)
  config = helpers.job_config(["--train_batch_size=7", "--deterministic_run", "--seed=3"])
  labels = np.concatenate([b["label_id"] for b in read_batches(
      task.train_input_fn(config, path, SPEC, workers), limit=10)])
  # Records 1, 3, ..., 59 in file order, then again: repeated, full batches only.
  shard = list(range(1, 60, 2))
  assert labels.tolist() == (shard * 3)[:70]
  config = dataclasses.replace(config, deterministic_run=False)
  shuffled = np.concatenate([b["label_id"] for b in read_batches(
      task.train_input_fn(config, path, SPEC, workers), limit=30)])
  assert set(shuffled.tolist()) == set(shard)
  assert shuffled[:30].tolist() != shard  # the first epoch's order is not the file's


def test_load_tokenizer_honours_the_case_flag_and_names_a_bad_vocabulary(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nHello\n")
  lower = task.load_tokenizer(str(vocab), do_lower_case=True)
  cased = task.load_tokenizer(str(vocab), do_lower_case=False)
  assert lower.tokenize("Hello") == ["hello"] and cased.tokenize("Hello") == ["Hello"]
  missing = str(tmp_path / "missing.txt")
  with pytest.raises(errors.UsageError, match=r"^--vocab_file: .*missing\.txt"):
    task.load_tokenizer(missing, do_lower_case=True)


def test_serving_input_is_int32_sequences_plus_constant_zero_features(graph):
  receiver = task.serving_input_receiver_fn(SEQ, constant_features=("label_ids",))()
  assert sorted(receiver.receiver_tensors) == sorted(task.SERVING_INPUTS)
  for name in task.SERVING_INPUTS:
    tensor = receiver.receiver_tensors[name]
    assert tensor.dtype == tf.int32 and tensor.shape.as_list() == [None, SEQ], name
    assert receiver.features[name] is tensor, name
  assert sorted(receiver.features) == sorted(task.SERVING_INPUTS + ("label_ids",))
  with _tf1.Session(graph=graph) as session:
    labels = session.run(receiver.features["label_ids"],
                         {receiver.receiver_tensors["input_ids"]: np.ones([4, SEQ], np.int32)})
  assert labels.dtype == np.int32 and labels.tolist() == [0, 0, 0, 0]


def test_export_dir_is_refused_before_anything_is_written(tmp_path):
  task.check_export_dir(None)
  task.check_export_dir("")
  task.check_export_dir(str(tmp_path / "new"))
  full = tmp_path / "full"
  full.mkdir()
  (full / "saved_model.pb").write_bytes(b"")
  with pytest.raises(errors.UsageError, match=r"^--export_dir=\S+full exists and is not empty"):
    task.check_export_dir(str(full))
  # No checkpoint to export: refused naming the flag, and no directory appears.
  estimator = types.SimpleNamespace(model_dir=str(tmp_path / "model"))
  os.mkdir(estimator.model_dir)
  target = str(tmp_path / "export")
  with pytest.raises(errors.UsageError, match=r"^--export_dir: \S+model holds no checkpoint"):
    task.export_saved_model(estimator, target, SEQ)
  assert not os.path.exists(target) and not os.path.exists(str(tmp_path / "new"))


def test_a_vocabulary_larger_than_the_models_is_refused(tmp_path):
  # 7 tokens for a 6-row embedding table: "hello" (id 6) would look up a row the model lacks.
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhi\nhello\n")
  assert len(task.load_tokenizer(str(vocab), True, vocab_size=7).vocab) == 7
  with pytest.raises(errors.UsageError, match=r"^--vocab_file: .*vocab\.txt has 7 tokens, more "
                     r"than vocab_size=6 of --bert_config_file"):
    task.load_tokenizer(str(vocab), True, vocab_size=6)
