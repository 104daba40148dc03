"""Fuzz target: the packer's reader of unpacked records (`packed_records.read_features` and
`sequence_sizes`), then packing (`packing.pack_sequences`, `build_packs`) and unpacking.

The input is a whole TFRecord file. Properties: a file the reader takes holds, record by record,
the values it returned (parsed here with protobuf); the sizes it returns are each record's
tokens and predictions; every pack fits S = the input's length, K = 3 and P = W + 3; and
unpacking the packed rows gives back exactly the records read, each once.
"""

import collections

import numpy as np
import tensorflow as tf

from fuzz import harness
from utils.data import packed_records
from utils.data import packing
from utils.data import record_encoder

K = 3


def _protobuf_rows(path):
  """The file's records parsed here: list of dict name -> list of values."""
  rows = []
  for record in tf.compat.v1.io.tf_record_iterator(path):
    feature = tf.train.Example.FromString(record).features.feature
    rows.append({name: list(getattr(feature[name], kind + "_list").value)
                 for name, kind in packed_records.UNPACKED_KINDS.items()})
  return rows


def _check_round_trip(features, lengths, predictions, limits):
  """Asserts packing then unpacking gives back every record once."""
  packs = packing.pack_sequences(lengths, predictions, limits.max_seq_length, K,
                                 limits.max_predictions, np.random.default_rng(0))
  assert sorted(packs[packs >= 0].tolist()) == list(range(len(lengths)))
  packed = packed_records.build_packs(features, lengths, predictions, packs, limits)
  assert np.all((packed["input_mask"] > 0).sum(axis=1) <= limits.max_seq_length)
  widths = packed_records.record_widths(features)
  key = lambda record: tuple((n, tuple(np.asarray(v).tolist())) for n, v in sorted(record.items()))
  got = collections.Counter()
  for index in range(len(packs)):
    row = {name: values[index] for name, values in packed.items()}
    got.update(key(r) for r in packed_records.unpack_row(row, widths["input_ids"],
                                                           widths["masked_lm_positions"]))
  expected = collections.Counter(
      key({name: values[i] for name, values in features.items()}) for i in range(len(lengths)))
  assert got == expected


def read(data):
  """Reads `data` as an unpacked record file, packs it and checks the properties."""
  with harness.input_file(data, "records.tfrecord") as path:
    features = packed_records.read_features(path)
    rows = _protobuf_rows(path)
    assert len(rows) == len(features["input_ids"])
    for name, values in features.items():
      assert [list(map(float, r[name])) for r in rows] == values.astype(float).tolist(), name
    if not rows:
      return
    widths = packed_records.record_widths(features)
    limits = packed_records.PackLimits(widths["input_ids"], K,
                                       widths["masked_lm_positions"] + K)
    lengths, predictions = packed_records.sequence_sizes(features, path, 0, limits)
    assert lengths.tolist() == [sum(r["input_mask"]) for r in rows]
    assert predictions.tolist() == [sum(1 for w in r["masked_lm_weights"] if w) for r in rows]
    _check_round_trip(features, lengths, predictions, limits)


def _file(records):
  """TFRecord bytes of unpacked records given as dicts of lists."""
  features = {name: np.array([r[name] for r in records],
                             np.float32 if kind == "float" else np.int64)
              for name, kind in packed_records.UNPACKED_KINDS.items()}
  return packed_records.encode(features, record_encoder.Crc32c()).tobytes()


def seeds():
  """Small files of sequences of several lengths (seq 8 and 16), full and short."""
  rng = np.random.default_rng(1)
  found = []
  for seq, width, count in ((8, 2, 5), (16, 3, 12)):
    records = []
    for _ in range(count):
      length = int(rng.integers(3, seq + 1))
      chosen = int(rng.integers(0, min(width, length) + 1))
      records.append({
          "input_ids": rng.integers(1, 300, length).tolist() + [0] * (seq - length),
          "input_mask": [1] * length + [0] * (seq - length),
          "segment_ids": [0] * (length // 2) + [1] * (length - length // 2) + [0] * (seq - length),
          "masked_lm_positions": sorted(rng.choice(length, chosen, replace=False).tolist())
                                 + [0] * (width - chosen),
          "masked_lm_ids": rng.integers(1, 300, chosen).tolist() + [0] * (width - chosen),
          "masked_lm_weights": [1.0] * chosen + [0.0] * (width - chosen),
          "next_sentence_labels": [int(rng.integers(0, 2))]})
    found.append(_file(records))
  return found


TARGET = harness.Target("packing_input", read, (packed_records.PackingInputError,), seeds,
                        max_len=4096)
