"""utils/data/packed_records.py: a packed row built from hand-made sequences (every feature
written out by hand), unpacking back to the originals, the encoded bytes against TensorFlow's
protobuf, and the refusals of input the packer cannot give back (file and record named)."""

import numpy as np
import pytest
import tensorflow as tf

from utils.data import packed_records
from utils.data import record_encoder

LIMITS = packed_records.PackLimits(max_seq_length=12, max_sequences=3, max_predictions=5)
S_IN, W = 8, 2  # the unpacked records' widths (W = P - K)


def _example(values):
  """Serialised tf.train.Example of dict name -> list (floats for masked_lm_weights)."""
  feature = {}
  for name, value in values.items():
    if name == "masked_lm_weights" or (value and isinstance(value[0], float)):
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value))
    else:
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value))
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _record(ids, segments, positions, labels, nsp):
  """An unpacked record's lists, padded to S_IN and W."""
  pad = lambda values, width: list(values) + [0] * (width - len(values))  # noqa: E731
  return {"input_ids": pad(ids, S_IN), "input_mask": pad([1] * len(ids), S_IN),
          "segment_ids": pad(segments, S_IN), "masked_lm_positions": pad(positions, W),
          "masked_lm_ids": pad(labels, W),
          "masked_lm_weights": [1.0] * len(positions) + [0.0] * (W - len(positions)),
          "next_sentence_labels": [nsp]}


SEQUENCES = [
    _record([101, 5, 6, 102, 7, 102], [0, 0, 0, 0, 1, 1], [2, 4], [60, 70], 1),
    _record([101, 8, 102, 9, 102], [0, 0, 0, 1, 1], [3], [90], 0),
    _record([101, 3, 102, 4], [0, 0, 0, 1], [], [], 1),
]


def _parsed(records=SEQUENCES, path="in.tfrecord"):
  """`parse_records` of hand-made records."""
  return packed_records.parse_records([_example(r) for r in records], path, 0)


def test_a_pack_of_two_sequences_written_out_by_hand():
  features = _parsed()
  lengths, predictions = packed_records.sequence_sizes(features, "in.tfrecord", 0, LIMITS)
  assert lengths.tolist() == [6, 5, 4] and predictions.tolist() == [2, 1, 0]
  packed = packed_records.build_packs(features, lengths, predictions, [[0, 1, -1], [2, -1, -1]],
                                      LIMITS)
  row = {name: values[0].tolist() for name, values in packed.items()}
  assert row == {
      "input_ids": [101, 5, 6, 102, 7, 102, 101, 8, 102, 9, 102, 0],
      "input_mask": [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 0],
      "segment_ids": [0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0],
      "positions": [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 0],
      "masked_lm_positions": [2, 4, 9, 0, 0],
      "masked_lm_ids": [60, 70, 90, 0, 0],
      "masked_lm_weights": [1.0, 1.0, 2.0, 0.0, 0.0],
      "next_sentence_positions": [0, 6, 0],
      "next_sentence_labels": [1, 0, 0],
      "next_sentence_weights": [1.0, 1.0, 0.0],
  }
  second = {name: values[1].tolist() for name, values in packed.items()}
  assert second["input_ids"] == [101, 3, 102, 4] + [0] * 8
  assert second["input_mask"] == [1] * 4 + [0] * 8
  assert second["masked_lm_weights"] == [0.0] * 5
  assert second["next_sentence_weights"] == [1.0, 0.0, 0.0]
  assert second["next_sentence_labels"] == [1, 0, 0]
  assert packed["masked_lm_weights"].dtype == np.float32
  assert packed["next_sentence_weights"].dtype == np.float32


def test_unpacking_gives_back_the_original_records():
  features = _parsed()
  lengths, predictions = packed_records.sequence_sizes(features, "in.tfrecord", 0, LIMITS)
  wide = packed_records.PackLimits(16, 3, 5)  # 6 + 5 + 4 tokens
  packed = packed_records.build_packs(features, lengths, predictions, [[0, 1, 2]], wide)
  row = {name: values[0] for name, values in packed.items()}
  unpacked = packed_records.unpack_row(row, S_IN, W)
  assert [{name: values.tolist() for name, values in record.items()}
          for record in unpacked] == SEQUENCES
  assert unpacked[0]["masked_lm_weights"].dtype == np.float32


def test_unpacking_refuses_a_row_whose_fields_disagree():
  features = _parsed()
  lengths, predictions = packed_records.sequence_sizes(features, "in.tfrecord", 0, LIMITS)
  packed = packed_records.build_packs(features, lengths, predictions, [[0, 1, -1], [2, -1, -1]],
                                      LIMITS)
  assert len(packed_records.unpack_features(packed, S_IN, W)["input_ids"]) == 3
  # Row 0's prediction 90 (at row position 9) said to be sequence 1's: outside its tokens 0..5.
  packed["masked_lm_weights"][0, 2] = 1.0
  with pytest.raises(packed_records.PackingInputError) as error:
    packed_records.unpack_features(packed, S_IN, W, path="p.tfrecord")
  assert str(error.value) == ("p.tfrecord: record 0: a packed row: masked_lm_positions[2] is 9, "
                              "outside its sequence 1 (tokens 0..5)")


def test_random_sequences_survive_packing_and_unpacking():
  rng = np.random.default_rng(5)
  limits = packed_records.PackLimits(32, 3, 7)
  records = []
  for _ in range(60):
    length = int(rng.integers(3, 17))
    count = int(rng.integers(0, min(5, length)))
    positions = sorted(rng.choice(np.arange(1, length), count, replace=False).tolist())
    records.append({
        "input_ids": rng.integers(1, 1000, length).tolist() + [0] * (16 - length),
        "input_mask": [1] * length + [0] * (16 - length),
        "segment_ids": rng.integers(0, 2, length).tolist() + [0] * (16 - length),
        "masked_lm_positions": positions + [0] * (4 - count),
        "masked_lm_ids": rng.integers(1, 1000, count).tolist() + [0] * (4 - count),
        "masked_lm_weights": [1.0] * count + [0.0] * (4 - count),
        "next_sentence_labels": [int(rng.integers(0, 2))]})
  features = packed_records.parse_records([_example(r) for r in records], "r", 0)
  lengths, predictions = packed_records.sequence_sizes(features, "r", 0, limits)
  order = rng.permutation(60)
  packs = np.array([row for row in order.reshape(20, 3)  # the triples that fit
                    if lengths[row].sum() <= 32 and predictions[row].sum() <= 7])
  packed = packed_records.build_packs(features, lengths, predictions, packs, limits)
  got = []
  for index in range(len(packs)):
    row = {name: values[index] for name, values in packed.items()}
    got += [{n: v.tolist() for n, v in r.items()} for r in packed_records.unpack_row(row, 16, 4)]
  assert got == [records[i] for i in packs.ravel()]
  assert len(got) > 10


def test_encoded_records_are_the_bytes_tensorflow_writes():
  features = _parsed()
  lengths, predictions = packed_records.sequence_sizes(features, "in.tfrecord", 0, LIMITS)
  packed = packed_records.build_packs(features, lengths, predictions, [[0, 1, -1]], LIMITS)
  framed = packed_records.encode(packed, record_encoder.Crc32c()).tobytes()
  expected = tf.train.Example(features=tf.train.Features(feature={
      name: (tf.train.Feature(float_list=tf.train.FloatList(value=values[0].tolist()))
             if values.dtype == np.float32 else
             tf.train.Feature(int64_list=tf.train.Int64List(value=values[0].tolist())))
      for name, values in packed.items()})).SerializeToString(deterministic=True)
  assert framed[12:-4] == expected
  assert int.from_bytes(framed[:8], "little") == len(expected)


def test_an_overflowing_pack_is_never_written():
  features = _parsed()
  lengths, predictions = packed_records.sequence_sizes(features, "in.tfrecord", 0, LIMITS)
  tight = packed_records.PackLimits(12, 3, 2)  # the first two hold 3 predictions
  with pytest.raises(AssertionError, match="more predictions than P"):
    packed_records.build_packs(features, lengths, predictions, [[0, 1, -1]], tight)
  with pytest.raises(AssertionError, match="longer than max_seq_length"):
    packed_records.build_packs(features, lengths, predictions, [[0, 1, 2]],
                               packed_records.PackLimits(12, 3, 5))
  with pytest.raises(AssertionError):  # a gap: slot 2 filled after an empty slot 1
    packed_records.build_packs(features, lengths, predictions, [[0, -1, 2]], LIMITS)


def _bad(record, index=1):
  """The message of the refusal of `record` as the second record of "bad.tfrecord"."""
  with pytest.raises(packed_records.PackingInputError) as raised:
    features = packed_records.parse_records([_example(SEQUENCES[0]), _example(record)],
                                            "bad.tfrecord", 0)
    packed_records.sequence_sizes(features, "bad.tfrecord", 0, LIMITS)
  message = str(raised.value)
  assert message.startswith("bad.tfrecord: record %d: " % index), message
  return message[len("bad.tfrecord: record %d: " % index):]


def test_input_that_cannot_be_given_back_is_refused_by_file_and_record():
  good = SEQUENCES[1]
  assert _bad(dict(good, positions=[0] * S_IN)) == (
      "the input is already packed (it has positions); give unpacked records")
  missing = dict(good)
  del missing["next_sentence_labels"]
  assert _bad(missing).startswith("expected the features input_ids, input_mask, ")
  assert _bad(dict(good, next_sentence_labels=[0.5])) == (
      "feature next_sentence_labels must be a int64 list, got float_list")
  assert _bad(dict(good, input_ids=[1] * 9)) == (
      "feature input_ids has 9 values, expected 8 (the width of the first record)")
  assert _bad(dict(good, input_mask=[1, 1, 0, 1, 1, 0, 0, 0])) == (
      "input_mask must be 1s then 0s, got [1, 1, 0, 1, 1, 0, 0, 0]")
  assert _bad(dict(good, input_ids=good["input_ids"][:5] + [7, 0, 0])) == (
      "input_ids is not 0 after the sequence's 5 tokens")
  assert _bad(dict(good, masked_lm_positions=[5, 0])) == (
      "a masked_lm_position outside the sequence's 5 tokens: [5]")
  assert _bad(dict(good, masked_lm_weights=[0.0, 1.0])) == (
      "masked_lm_weights must be 1.0s then 0.0s, got [0.0, 1.0]")
  assert _bad(dict(good, masked_lm_ids=[90, 4])) == (
      "masked_lm_ids is not 0 after the 1 predictions")
  with pytest.raises(packed_records.PackingInputError, match=r"^x: record 3: not a tf.train"):
    packed_records.parse_records([b"\xff\xff"], "x", 3)


def test_a_sequence_longer_than_the_pack_is_refused():
  features = _parsed()
  with pytest.raises(packed_records.PackingInputError) as raised:
    packed_records.sequence_sizes(features, "in.tfrecord", 10,
                                  packed_records.PackLimits(5, 3, 5))
  assert str(raised.value) == (
      "in.tfrecord: record 10: a sequence of 6 tokens is longer than --max_seq_length=5")
  with pytest.raises(packed_records.PackingInputError) as raised:
    packed_records.sequence_sizes(features, "in.tfrecord", 0, packed_records.PackLimits(12, 3, 4))
  assert str(raised.value) == (
      "in.tfrecord: record 0: 2 predictions, more than --max_predictions_per_seq=1")
