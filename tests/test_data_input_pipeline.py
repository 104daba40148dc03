"""run_pretraining's input pipeline: order, dtypes, shapes, worker shards, pre-flight checks,
corrupt records, and records written by the original create_pretraining_data.py.

Test records are written here with `tf.io.TFRecordWriter` and `tf.train.Example`; record r of a file
carries r's global number in input_ids[0], so where every record went can be checked exactly.
"""

import logging as std_logging
import os
import struct
import time

import numpy as np
import pytest
import tensorflow as tf

import create_pretraining_data as cpd
import run_pretraining
from tests import test_create_pretraining_data as data_tests
from tests import test_data_record_framing as framing_tests
from utils.core import errors
from utils.data import input_pipeline
from utils.data import instances
from utils.data import record_layout
from utils.data import records
from utils.data import vocabulary

_tf1 = tf.compat.v1
SEQ = 8
PRED = 3
LAYOUT = record_layout.unpacked(SEQ, PRED)


def plan(files, **kwargs):
  """The `input_pipeline.InputPlan` of test records (`LAYOUT`) in `files`."""
  return input_pipeline.InputPlan(files, LAYOUT, **kwargs)

# The original release's parsing spec (its input_pipeline.input_fn_builder), written out here.
ORIGINAL_SPEC = {
    "input_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
    "input_mask": tf.io.FixedLenFeature([SEQ], tf.int64),
    "segment_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
    "masked_lm_positions": tf.io.FixedLenFeature([PRED], tf.int64),
    "masked_lm_ids": tf.io.FixedLenFeature([PRED], tf.int64),
    "masked_lm_weights": tf.io.FixedLenFeature([PRED], tf.float32),
    "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
}


def record_values(number, seq=SEQ, pred=PRED):
  """Feature values of test record `number` (numpy, docs/DESIGN.md section 3 dtypes)."""
  return {
      "input_ids": np.array([number] + [(number * 7 + i) % 50 for i in range(1, seq)]),
      "input_mask": np.array([1] * (seq - 2) + [0, 0]),
      "segment_ids": np.array([0] * (seq // 2) + [1] * (seq - seq // 2)),
      "masked_lm_positions": np.arange(1, pred + 1),
      "masked_lm_ids": np.array([(number + i) % 50 for i in range(pred)]),
      "masked_lm_weights": np.array([1.0] * (pred - 1) + [0.25], np.float32),
      "next_sentence_labels": np.array([number % 2]),
  }


def make_example(values):
  feature = {}
  for name, value in values.items():
    if value.dtype.kind == "f":
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value.tolist()))
    else:
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value.tolist()))
  return tf.train.Example(features=tf.train.Features(feature=feature))


def write_records(path, numbers, **kwargs):
  with tf.io.TFRecordWriter(str(path)) as writer:
    for number in numbers:
      writer.write(make_example(record_values(number, **kwargs)).SerializeToString())
  return str(path)


def write_files(directory, records_per_file):
  """Files holding records 0, 1, 2, ... in order; returns the paths."""
  paths, start = [], 0
  for index, count in enumerate(records_per_file):
    paths.append(write_records(directory / ("part-%d.tfrecord" % index),
                               range(start, start + count)))
    start += count
  return paths


def run_dataset(input_fn, params=None, max_batches=None):
  """Every batch of the dataset (or the first `max_batches`), in a fresh graph."""
  with tf.Graph().as_default():
    dataset = input_fn(params or {})
    batch = _tf1.data.make_one_shot_iterator(dataset).get_next()
    structure = {name: (t.dtype, t.shape.as_list()) for name, t in batch.items()}
    batches = []
    with _tf1.Session() as sess:
      try:
        while max_batches is None or len(batches) < max_batches:
          batches.append(sess.run(batch))
      except tf.errors.OutOfRangeError:
        pass
  return batches, structure


def record_numbers(batches):
  return [int(n) for b in batches for n in b["input_ids"][:, 0]]


def test_eval_reads_every_record_in_order_with_spec_dtypes(tmp_path):
  files = write_files(tmp_path, [5, 7, 3])
  input_fn = input_pipeline.input_fn_builder(plan(files, is_training=False), 4)
  batches, structure = run_dataset(input_fn)
  assert record_numbers(batches) == list(range(15))
  assert [len(b["input_ids"]) for b in batches] == [4, 4, 4, 3]  # nothing dropped
  for name in ORIGINAL_SPEC:
    expected_dtype = tf.float32 if name == "masked_lm_weights" else tf.int32
    width = {"next_sentence_labels": 1}.get(name, SEQ if name in ("input_ids", "input_mask",
                                                                   "segment_ids") else PRED)
    assert structure[name] == (expected_dtype, [None, width]), name
  for b in batches:
    for row, number in enumerate(b["input_ids"][:, 0]):
      for name, value in record_values(int(number)).items():
        np.testing.assert_array_equal(b[name][row], value, err_msg=name)
  # params["batch_size"] (TPUEstimator) overrides batch_size.
  batches, _ = run_dataset(input_fn, params={"batch_size": 6})
  assert [len(b["input_ids"]) for b in batches] == [6, 6, 3]


def test_training_batches_have_static_shapes_and_repeat(tmp_path):
  files = write_files(tmp_path, [5, 7, 3])
  input_fn = input_pipeline.input_fn_builder(plan(files, is_training=True, num_cpu_threads=2), 4)
  batches, structure = run_dataset(input_fn, max_batches=12)
  assert structure["input_ids"] == (tf.int32, [4, SEQ])
  assert structure["masked_lm_weights"] == (tf.float32, [4, PRED])
  assert structure["next_sentence_labels"] == (tf.int32, [4, 1])
  seen = record_numbers(batches)
  # 48 records from 15: the data repeats; records are whole and shuffled. (Which records a random
  # sample covers is checked in the deterministic tests below.)
  assert len(seen) == 48 and set(seen) <= set(range(15))
  assert seen[:15] != list(range(15))
  for b in batches:
    for row, number in enumerate(b["input_ids"][:, 0]):
      np.testing.assert_array_equal(b["masked_lm_ids"][row], record_values(int(number))[
          "masked_lm_ids"])


def test_deterministic_mode_is_reproducible(tmp_path):
  files = write_files(tmp_path, [9, 9, 9, 9])
  build = lambda seed: input_pipeline.input_fn_builder(  # noqa: E731
      plan(files, is_training=True, deterministic=True, seed=seed), 5)
  first = record_numbers(run_dataset(build(3), max_batches=10)[0])
  again = record_numbers(run_dataset(build(3), max_batches=10)[0])
  other = record_numbers(run_dataset(build(4), max_batches=10)[0])
  assert first == again
  assert first != other


@pytest.mark.parametrize("kwargs", [dict(is_training=False), dict(is_training=True),
                                    dict(is_training=True, deterministic=True)],
                         ids=["eval", "training", "deterministic"])
def test_every_input_function_runs_without_autotuning(tmp_path, kwargs):
  # With tf.data's default (autotuning on), closing the session at a job's end waited for the
  # autotuning thread's sleep to end, up to 60 s (input_pipeline.without_autotuning).
  files = write_files(tmp_path, [3])
  with tf.Graph().as_default():
    assert tf.data.Dataset.range(1).options().autotune.enabled is not False  # the default
    dataset = input_pipeline.input_fn_builder(plan(files, **kwargs), 2)({})
    assert dataset.options().autotune.enabled is False


def _shards(files, num_workers, is_training, batches_per_worker=None):
  """Record numbers read by each worker."""
  out = []
  for worker in range(num_workers):
    input_fn = input_pipeline.input_fn_builder(plan(files, is_training=is_training,
        num_workers=num_workers, worker_index=worker, deterministic=is_training, seed=1), 2)
    out.append(record_numbers(run_dataset(input_fn, max_batches=batches_per_worker)[0]))
  return out


def test_worker_shards_by_file_are_disjoint_and_cover_everything(tmp_path):
  files = write_files(tmp_path, [4, 6, 5, 3, 2])  # 5 files, 2 workers: by file
  evaluation = _shards(files, 2, is_training=False)
  assert sorted(evaluation[0] + evaluation[1]) == list(range(20))
  # Worker 0 reads files 0, 2, 4 and worker 1 files 1, 3, in order.
  assert evaluation[0] == list(range(0, 4)) + list(range(10, 15)) + list(range(18, 20))
  assert evaluation[1] == list(range(4, 10)) + list(range(15, 18))
  training = _shards(files, 2, is_training=True, batches_per_worker=40)
  assert set(training[0]) == set(evaluation[0]) and set(training[1]) == set(evaluation[1])


def test_worker_shards_by_record_when_files_are_fewer(tmp_path, caplog):
  files = write_files(tmp_path, [7, 6])  # 2 files, 3 workers: by record, with a warning
  with caplog.at_level(std_logging.WARNING):
    evaluation = _shards(files, 3, is_training=False)
  assert "sharding by record" in caplog.text
  assert sorted(sum(evaluation, [])) == list(range(13))  # each record exactly once
  assert all(len(shard) in (4, 5) for shard in evaluation)  # nobody starves
  training = _shards(files, 3, is_training=True, batches_per_worker=30)
  for worker in range(3):
    assert set(training[worker]) == set(evaluation[worker])


def _file_of(number, sizes):
  """Index of the file that holds record `number` in `write_files(sizes)`."""
  return int(np.searchsorted(np.cumsum(sizes), number, side="right"))


@pytest.mark.parametrize("sizes,num_workers,deterministic", [
    ([7, 5, 9, 3], 1, False),   # more files than the interleave reads at a time
    ([7, 5, 9, 3], 1, True),
    ([7, 5, 9, 3, 4], 2, False),  # by file: worker 0 has 3 files, worker 1 has 2
    ([7, 6], 3, True),          # by record
])
def test_training_reads_every_record_once_per_epoch(tmp_path, sizes, num_workers, deterministic):
  # Repeating the file list and then shuffling it with a buffer the size of the list mixed epochs:
  # with 4 files most seeds left a file out of the first files read. Counted per file over each
  # epoch of each worker's shard, for several seeds.
  files = write_files(tmp_path, sizes)
  shards = _shards(files, num_workers, is_training=False)
  for worker in range(num_workers):
    shard = shards[worker]
    per_file = np.bincount([_file_of(n, sizes) for n in shard], minlength=len(sizes))
    for seed in (0, 1, 2):
      input_fn = input_pipeline.input_fn_builder(plan(files, is_training=True, num_cpu_threads=2,
          num_workers=num_workers, worker_index=worker, deterministic=deterministic, seed=seed,
          shuffle_buffer_size=4), 1)
      seen = record_numbers(run_dataset(input_fn, max_batches=3 * len(shard))[0])
      epochs = [seen[e * len(shard):(e + 1) * len(shard)] for e in range(3)]
      for epoch in epochs:
        counts = np.bincount([_file_of(n, sizes) for n in epoch], minlength=len(sizes))
        np.testing.assert_array_equal(counts, per_file)
        assert sorted(epoch) == sorted(shard)
      if deterministic:
        assert epochs[0] != epochs[1] != epochs[2], "the order must change every epoch"
      else:
        # Each epoch shuffles whatever order the parallel reads handed it, so two epochs can
        # coincide by chance: worker 1's 8 records with seed 2 can come in one order in epochs 0
        # and 1 (8 of the 56 orders each can take; about 1 run in 1,200 under load). All three
        # cannot: no seed's epochs 1 and 2 share a possible order (larger shards coincide rarer).
        assert len(set(map(tuple, epochs))) > 1, "the order must change across epochs"


def test_a_slow_parse_at_an_epoch_end_is_not_overtaken_by_the_next_epoch(tmp_path, monkeypatch):
  # The parse runs on several threads; if it handed batches on as they finished, a batch of the
  # next epoch would overtake the last one of this epoch while that one is slow to parse, and the
  # epoch would read a record twice (CI saw it once without the delay).
  files = write_files(tmp_path, [3, 2])
  parse = input_pipeline._decode_batch
  calls = []

  def slow_for_last_record_of_an_epoch(records, name_to_features, paths, indices, vocab_size):
    def wait(index):
      calls.append(int(index))
      if len(calls) == 5:  # batches are parsed in the order read: the last of the first epoch
        time.sleep(0.5)
      return index
    delayed = tf.py_function(wait, [indices[0]], tf.int64)
    with tf.control_dependencies([delayed]):
      records = tf.identity(records)
    return parse(records, name_to_features, paths, indices, vocab_size)

  monkeypatch.setattr(input_pipeline, "_decode_batch", slow_for_last_record_of_an_epoch)
  input_fn = input_pipeline.input_fn_builder(plan(files, is_training=True, num_cpu_threads=2,
      deterministic=False, seed=0, shuffle_buffer_size=8), 1)
  seen = record_numbers(run_dataset(input_fn, max_batches=5 * 4)[0])
  epochs = [seen[e * 5:(e + 1) * 5] for e in range(4)]
  for epoch in epochs:
    assert sorted(epoch) == list(range(5)), seen
  assert len(calls) > 5  # the next epoch's batches were being parsed during the delay


def test_resolve_input_files_globs_and_directories(tmp_path):
  (tmp_path / "a").mkdir()
  (tmp_path / "b").mkdir()
  for name in ("a/x-2.tfrecord", "a/x-1.tfrecord", "b/y.tfrecord", "b/.hidden"):
    (tmp_path / name).write_bytes(b"")
  (tmp_path / "b" / "sub").mkdir()
  files = input_pipeline.resolve_input_files(str(tmp_path / "a" / "x-*.tfrecord"),
                                              input_files_dir=str(tmp_path / "b"))
  assert files == [str(tmp_path / "a" / "x-1.tfrecord"), str(tmp_path / "a" / "x-2.tfrecord"),
                   str(tmp_path / "b" / "y.tfrecord")]
  with pytest.raises(ValueError, match=r"--input_file=.*none-\*.tfrecord, "
                                       r"--input_files_dir=.*empty"):
    input_pipeline.resolve_input_files(str(tmp_path / "none-*.tfrecord"),
                                        input_files_dir=str(tmp_path / "empty"))


def test_preflight_accepts_good_files(tmp_path):
  files = write_files(tmp_path, [2, 3])
  records.check_input_files(files, SEQ, PRED, vocab_size=50)


@pytest.mark.parametrize("case, message", [
    ("missing_feature", r"no feature 'masked_lm_weights'"),
    ("seq_length", r"'input_ids' .* has 10 values, expected 8 \(max_seq_length=8\)"),
    ("predictions", r"'masked_lm_ids' .* has 4 values, expected 3 \(max_predictions_per_seq=3\)"),
    ("vocab", r"token id 50 in input_ids .* outside \[0, vocab_size=50\)"),
    ("masked_vocab", r"token id 77 in masked_lm_ids"),
    ("float_ids", r"feature 'segment_ids' .* is float, expected int64"),
    ("position", r"masked_lm_positions .* has 8, outside \[0, max_seq_length=8\)"),
    ("empty", r"the file has no records"),
    ("not_example", r"not a tf.train.Example"),
])
def test_preflight_errors_name_the_file(tmp_path, case, message):
  good = write_files(tmp_path, [2])[0]
  bad = tmp_path / ("bad-%s.tfrecord" % case)
  values = record_values(3)
  if case == "missing_feature":
    del values["masked_lm_weights"]
  elif case == "seq_length":
    values = record_values(3, seq=10)
  elif case == "predictions":
    values = record_values(3, pred=4)
  elif case == "vocab":
    values["input_ids"][4] = 50
  elif case == "masked_vocab":
    values["masked_lm_ids"][0] = 77
  elif case == "float_ids":
    values["segment_ids"] = values["segment_ids"].astype(np.float32)
  elif case == "position":
    values["masked_lm_positions"][2] = SEQ
  with tf.io.TFRecordWriter(str(bad)) as writer:
    if case == "not_example":
      writer.write(b"\xff\xff\xff garbage")
    elif case != "empty":
      writer.write(make_example(values).SerializeToString())
  with pytest.raises(ValueError, match=message) as raised:
    records.check_input_files([good, str(bad)], SEQ, PRED, vocab_size=50)
  assert str(bad) in str(raised.value)


def test_preflight_message_is_one_line_when_a_feature_name_holds_a_newline(tmp_path):
  # Found by fuzzing (fuzz/regressions/pretraining_example/): the names present were listed raw.
  example = make_example(record_values(3))
  example.features.feature["masked_lm\nweights"].CopyFrom(
      example.features.feature.pop("masked_lm_weights"))
  path = tmp_path / "renamed.tfrecord"
  with tf.io.TFRecordWriter(str(path)) as writer:
    writer.write(example.SerializeToString())
  with pytest.raises(ValueError) as raised:
    records.check_input_files([str(path)], SEQ, PRED)
  assert str(raised.value) == (
      "%s: the first record has no feature 'masked_lm_weights' (expected float [3]); features "
      "present: input_ids, input_mask, 'masked_lm\\nweights', masked_lm_ids, masked_lm_positions, "
      "next_sentence_labels, segment_ids" % path)


def _record_starts(path):
  """Byte offsets of the records of a TFRecord file, from its framing (8-byte length, 4-byte CRC,
  data, 4-byte CRC)."""
  data, starts = open(path, "rb").read(), [0]
  while starts[-1] < len(data):
    (length,) = struct.unpack("<Q", data[starts[-1]:starts[-1] + 8])
    starts.append(starts[-1] + 16 + length)
  return starts[:-1]


def test_corrupt_record_is_named(tmp_path):
  files = write_files(tmp_path, [4, 6, 3])
  data = bytearray(open(files[1], "rb").read())
  record_length = len(data) // 6
  data[2 * record_length + 20] ^= 0xFF  # inside record 2 of the second file
  open(files[1], "wb").write(bytes(data))
  input_fn = input_pipeline.input_fn_builder(plan(files, is_training=False), 2)
  with pytest.raises(tf.errors.DataLossError) as raised:
    run_dataset(input_fn)
  # TF names the byte offset only; name_bad_input finds the file and the record.
  assert files[1] not in raised.value.message
  named = records.name_bad_input(raised.value, files)
  assert isinstance(named, errors.UsageError) and named.__cause__ is raised.value
  # Worded by the framing check, with the record's byte offset (read here from the framing).
  starts = _record_starts(files[1])
  assert starts[2] <= 2 * record_length + 20 - 12 < starts[3]  # the flipped byte is data
  assert str(named) == "bad input record: %s: record 2 at byte offset %d: data CRC mismatch" % (
      files[1], starts[2])
  assert records.find_bad_record([files[0], files[2]]) is None
  # A truncated file is found too, worded plainly (TF's own words: "truncated record at <offset>'
  # failed with Read less bytes than requested").
  truncated = tmp_path / "truncated.tfrecord"
  truncated.write_bytes(open(files[0], "rb").read()[:-7])
  starts = _record_starts(files[0])
  size = os.path.getsize(files[0])
  assert records.find_bad_record([files[0], str(truncated)]) == (
      "%s: record 3 at byte offset %d: truncated: %d bytes left, fewer than the record's %d (%d "
      "of data, 16 of framing)" % (truncated, starts[3], size - 7 - starts[3], size - starts[3],
                                   size - starts[3] - 16))
  # So is a file that ends inside a record's 12-byte header (too short to be read as a record).
  cut_header = tmp_path / "cut_header.tfrecord"
  cut_header.write_bytes(open(files[0], "rb").read() + b"\x05\x00\x00")
  problem = records.find_bad_record([str(cut_header)])
  assert problem.startswith("%s: record 4" % cut_header) and "truncated" in problem, problem
  # With the lengths given, records that do not fit the model are found as well.
  wrong = write_records(tmp_path / "wrong.tfrecord", [0, 1], seq=SEQ + 1)
  assert "record 0" in records.find_bad_record([wrong], SEQ, PRED)


def test_a_length_past_the_end_with_its_crc_is_named_by_the_preflight_and_the_pipeline(tmp_path):
  # TensorFlow's readers died (SIGSEGV) allocating such a length.
  good = write_files(tmp_path, [3])[0]
  huge = framing_tests.HUGE_PROBLEM
  first = tmp_path / "first.tfrecord"
  framing_tests.bad_length_file(first, before=())
  with pytest.raises(ValueError) as raised:
    records.check_input_files([good, str(first)], SEQ, PRED)
  assert str(raised.value) == ("%s: cannot read the first record: record 0 at byte offset 0: %s"
                               % (first, huge))
  # The fourth record's: the pre-flight passes; the pipeline walks the headers before it reads.
  later = tmp_path / "later.tfrecord"
  data = open(good, "rb").read()
  later.write_bytes(data + framing_tests.header(framing_tests.HUGE) + b"abcd")
  records.check_input_files([str(later)], SEQ, PRED)
  expected = "%s: record 3 at byte offset %d: %s" % (later, len(data), huge)
  for is_training in (False, True):
    input_fn = input_pipeline.input_fn_builder(plan([good, str(later)], is_training=is_training), 2)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
      run_dataset(input_fn, max_batches=20)
    assert records.pipeline_problem(raised.value) == expected
    assert str(records.name_bad_input(raised.value, [good, str(later)])) == (
        input_pipeline.BAD_RECORD_PREFIX + expected)


def _read_with_protobuf(path):
  """{name: np.array [records, width]} by protobuf parsing (independent of tf.data)."""
  rows = data_tests.read_examples([path])
  return {name: np.array([row[name] for row in rows]) for name in instances.FEATURE_NAMES}


@pytest.mark.e2e
def test_records_of_the_original_generator_read_identically(tmp_path):
  output, _ = data_tests.original_release_records(tmp_path, data_tests.MAX_SEQ_LENGTH,
                                                  data_tests.MAX_PREDICTIONS)
  expected = _read_with_protobuf(output)
  assert len(expected["input_ids"]) > 50
  records.check_input_files([output], data_tests.MAX_SEQ_LENGTH,
                                    data_tests.MAX_PREDICTIONS, vocab_size=300)
  layout = record_layout.unpacked(data_tests.MAX_SEQ_LENGTH, data_tests.MAX_PREDICTIONS)
  input_fn = input_pipeline.input_fn_builder(
      input_pipeline.InputPlan([output], layout, is_training=False), 16)
  batches, _ = run_dataset(input_fn)
  for name in instances.FEATURE_NAMES:
    got = np.concatenate([b[name] for b in batches])
    np.testing.assert_array_equal(got, expected[name], err_msg=name)
  # Both label values occur, so the comparison covers them.
  assert set(expected["next_sentence_labels"].ravel().tolist()) == {0, 1}


def test_our_records_parse_with_the_original_spec(tmp_path):
  inputs = data_tests.make_corpus(tmp_path, num_files=1, documents_per_file=10, seed=9)
  vocab_file = str(tmp_path / "vocab.txt")
  vocabulary.build_vocab(inputs, 200, vocab_file)
  output = str(tmp_path / "ours.tfrecord")
  cpd.create_pretraining_data(inputs, [output], vocab_file, instances.GeneratorOptions(
      max_seq_length=SEQ * 4, max_predictions_per_seq=PRED, masked_lm_prob=0.15,
      short_seq_prob=0.1, dupe_factor=1, do_whole_word_mask=False, random_seed=1))
  spec = dict(ORIGINAL_SPEC, input_ids=tf.io.FixedLenFeature([SEQ * 4], tf.int64),
              input_mask=tf.io.FixedLenFeature([SEQ * 4], tf.int64),
              segment_ids=tf.io.FixedLenFeature([SEQ * 4], tf.int64))
  expected = _read_with_protobuf(output)
  with tf.Graph().as_default():
    record = _tf1.placeholder(tf.string, [])
    parsed = tf.io.parse_single_example(record, spec)
    with _tf1.Session() as sess:
      rows = [sess.run(parsed, {record: r}) for r in _tf1.io.tf_record_iterator(output)]
  assert len(rows) == len(expected["input_ids"]) > 10
  for name in spec:
    np.testing.assert_array_equal(np.array([row[name] for row in rows]), expected[name],
                                  err_msg=name)
    assert rows[0][name].dtype == (np.float32 if name == "masked_lm_weights" else np.int64)


def test_directory_flags_also_take_file_patterns(tmp_path):
  directory = tmp_path / "mixed"
  directory.mkdir()
  for name in ("train-0.tfrecord", "train-1.tfrecord", "eval-0.tfrecord"):
    write_records(directory / name, [0])
  files = input_pipeline.resolve_input_files(
      input_files_dir=str(directory / "eval-*.tfrecord"), dir_flag="eval_files_dir")
  assert files == [str(directory / "eval-0.tfrecord")]
  with pytest.raises(ValueError, match=r"--eval_files_dir=.*nothing-\*"):
    input_pipeline.resolve_input_files(input_files_dir=str(directory / "nothing-*"),
                                        dir_flag="eval_files_dir")


def test_run_pretraining_re_exports_the_pipeline_under_the_release_names():
  # The release's interface (`run_pretraining.input_fn_builder`, ...) is these functions.
  assert run_pretraining.input_fn_builder is input_pipeline.input_fn_builder
  assert run_pretraining.resolve_input_files is input_pipeline.resolve_input_files
  for name in ("check_input_files", "find_bad_record", "name_bad_input"):
    assert getattr(run_pretraining, name) is getattr(records, name), name
