"""utils/data/record_encoder.py against TensorFlow: Example bytes, TFRecord framing, CRC-32C.

Every expectation comes from TensorFlow or from this file: `tf.train.Example.SerializeToString`
for the record bytes, `tf.io.TFRecordWriter` for the framing, `tf.data.TFRecordDataset` and
`tf.io.parse_single_example` for reading back, and a bit-by-bit CRC-32C written here (checked on
the published check values) for the checksums.
"""

import numpy as np
import pytest
import tensorflow as tf

from utils.data import record_encoder

_tf1 = tf.compat.v1

INT64_EDGES = [0, 1, 127, 128, 255, 16383, 16384, 2 ** 21, 2 ** 31 - 1, 2 ** 31, 2 ** 32,
               2 ** 35 + 7, 2 ** 56, 2 ** 62, 2 ** 63 - 1, -1, -2, -128, -129, -2 ** 31,
               -2 ** 32 - 3, -2 ** 63]
FLOAT_EDGES = [0.0, -0.0, 1.0, -1.5, 0.1, 3.4e38, -3.4e38, 1e-45, 1e-38, np.inf, -np.inf,
               65504.0, 2.0 ** -24]


def bitwise_crc32c(data):
  """CRC-32C of `data` one bit at a time (reflected polynomial 0x82F63B78, init and xor-out ~0)."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc ^= byte
    for _ in range(8):
      crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
  return crc ^ 0xFFFFFFFF


def masked_crc(crc):
  """TFRecord's masking of a CRC, written from its definition."""
  rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
  return (rotated + 0xA282EAD8) & 0xFFFFFFFF


def tf_example(row):
  """A `tf.train.Example` of {name: (kind, list of values)}."""
  feature = {}
  for name, (kind, values) in row.items():
    if kind == "int64":
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    elif kind == "float":
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    else:
      feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
  return tf.train.Example(features=tf.train.Features(feature=feature))


def split_records(flat, row_lengths):
  return [record.tobytes() for record in np.split(flat, np.cumsum(row_lengths)[:-1])]


def mixed_batch(rng, n):
  """Columns of every kind (sorted by name) and the same records as Python rows."""
  ints = rng.choice(INT64_EDGES, size=(n, 7)).astype(np.int64)
  ints[:, 0] = rng.randint(-2 ** 62, 2 ** 62, size=n, dtype=np.int64)
  floats = rng.choice(np.array(FLOAT_EDGES, np.float32), size=(n, 5))
  floats[:, 0] = rng.standard_normal(n).astype(np.float32)
  texts = []
  for i in range(n):
    texts.append([bytes(rng.randint(0, 256, size=int(length)).astype(np.uint8))
                  for length in rng.choice([0, 1, 5, 127, 128, 300], size=i % 4)])
  texts[0] = [u"caf\u00e9 \u4e2d\u6587".encode("utf-8"), b"", b"\x00\xff"]
  columns = [
      record_encoder.Column("a_ids", "int64", ints),
      record_encoder.Column("b_weights", "float", floats),
      record_encoder.Column("c_text", "bytes", texts),
      record_encoder.Column("d_no_ids", "int64", np.zeros((n, 0), np.int64)),
      record_encoder.Column("e_no_floats", "float", np.zeros((n, 0), np.float32)),
      record_encoder.Column("f_no_text", "bytes", [[] for _ in range(n)]),
      record_encoder.Column("g_small", "int64", rng.randint(0, 128, size=(n, 3))),
  ]
  rows = [{c.name: (c.kind, [bytes(v) for v in c.values[i]] if c.kind == "bytes"
                    else c.values[i].tolist()) for c in columns} for i in range(n)]
  return columns, rows


def test_records_equal_protobuf_serialization_for_every_feature_kind():
  columns, rows = mixed_batch(np.random.RandomState(0), 23)
  flat, row_lengths = record_encoder.serialize_examples(columns)
  ours = split_records(flat, row_lengths)
  assert len(ours) == len(rows)
  for record, row in zip(ours, rows):
    # protobuf writes a map in key order when asked to be deterministic; the columns are sorted.
    assert record == tf_example(row).SerializeToString(deterministic=True)
    assert tf.train.Example.FromString(record) == tf_example(row)


@pytest.mark.parametrize("kind,values", [
    ("int64", np.array([INT64_EDGES], np.int64)),
    ("int64", np.array([[-1]], np.int64)),
    ("int64", np.zeros((1, 0), np.int64)),
    ("float", np.array([FLOAT_EDGES], np.float32)),
    ("float", np.zeros((1, 0), np.float32)),
    ("bytes", [[b"x" * 200, b"", b"\x80"]]),
    ("bytes", [[]]),
])
def test_one_feature_of_each_kind_equals_protobuf(kind, values):
  flat, row_lengths = record_encoder.serialize_examples(
      [record_encoder.Column("feature", kind, values)])
  row_values = [bytes(v) for v in values[0]] if kind == "bytes" else values[0].tolist()
  expected = tf_example({"feature": (kind, row_values)}).SerializeToString()
  assert flat.tobytes() == expected and row_lengths.tolist() == [len(expected)]


def test_the_pretraining_features_in_the_generator_order_parse_back():
  # The data generator's columns are not sorted: compare parsed messages, not bytes.
  rng = np.random.RandomState(3)
  n = 37
  names = ["input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
           "masked_lm_weights", "next_sentence_labels"]
  values = [rng.randint(0, 120000, size=(n, 16)), rng.randint(0, 2, size=(n, 16)),
            rng.randint(0, 2, size=(n, 16)), rng.randint(0, 16, size=(n, 4)),
            rng.choice([0, 1, 127, 128, 16383, 16384, 2 ** 21, 2 ** 31 - 1], size=(n, 4)),
            rng.choice([0.0, 1.0, 0.5], size=(n, 4)).astype(np.float32),
            rng.randint(0, 2, size=(n, 1))]
  columns = [record_encoder.Column(name, "float" if name == "masked_lm_weights" else "int64", v)
             for name, v in zip(names, values)]
  flat, row_lengths = record_encoder.serialize_examples(columns)
  for i, record in enumerate(split_records(flat, row_lengths)):
    expected = tf_example({c.name: (c.kind, c.values[i].tolist()) for c in columns})
    assert tf.train.Example.FromString(record) == expected


def test_framing_equals_the_tensorflow_writer_and_reads_back(graph, tmp_path):
  columns, rows = mixed_batch(np.random.RandomState(1), 41)
  flat, row_lengths = record_encoder.serialize_examples(columns)
  ours = tmp_path / "ours.tfrecord"
  ours.write_bytes(record_encoder.frame_records(record_encoder.Crc32c(), flat,
                                                row_lengths).tobytes())
  theirs = tmp_path / "tf.tfrecord"
  with tf.io.TFRecordWriter(str(theirs)) as writer:
    for row in rows:
      writer.write(tf_example(row).SerializeToString(deterministic=True))
  assert ours.read_bytes() == theirs.read_bytes()

  spec = {"a_ids": tf.io.FixedLenFeature([7], tf.int64),
          "b_weights": tf.io.FixedLenFeature([5], tf.float32),
          "c_text": tf.io.VarLenFeature(tf.string),
          "d_no_ids": tf.io.FixedLenFeature([0], tf.int64),
          "e_no_floats": tf.io.VarLenFeature(tf.float32),
          "f_no_text": tf.io.VarLenFeature(tf.string),
          "g_small": tf.io.FixedLenFeature([3], tf.int64)}
  dataset = tf.data.TFRecordDataset(str(ours)).map(
      lambda record: tf.io.parse_single_example(record, spec))
  next_example = _tf1.data.make_one_shot_iterator(dataset).get_next()
  parsed = []
  with _tf1.Session() as session:
    while True:
      try:
        parsed.append(session.run(next_example))
      except tf.errors.OutOfRangeError:
        break
  assert len(parsed) == len(rows)
  for got, row in zip(parsed, rows):
    assert got["a_ids"].tolist() == row["a_ids"][1]
    np.testing.assert_array_equal(got["b_weights"], np.array(row["b_weights"][1], np.float32))
    assert got["c_text"].values.tolist() == row["c_text"][1]
    assert got["d_no_ids"].shape == (0,)
    assert got["e_no_floats"].values.size == 0 and got["f_no_text"].values.size == 0
    assert got["g_small"].tolist() == row["g_small"][1]


@pytest.mark.parametrize("offset", [3, 9, 14, 30, -2])
def test_a_corrupted_record_is_detected_by_the_tensorflow_reader(graph, tmp_path, offset):
  # Offsets: in the length, in the length's CRC, in the data (twice), in the data's CRC.
  columns, _ = mixed_batch(np.random.RandomState(2), 3)
  flat, row_lengths = record_encoder.serialize_examples(columns)
  data = bytearray(record_encoder.frame_records(record_encoder.Crc32c(), flat,
                                                row_lengths).tobytes())
  data[offset] ^= 0x01
  path = tmp_path / "corrupt.tfrecord"
  path.write_bytes(bytes(data))
  next_record = _tf1.data.make_one_shot_iterator(tf.data.TFRecordDataset(str(path))).get_next()
  with _tf1.Session() as session:
    with pytest.raises(tf.errors.DataLossError):
      for _ in range(len(row_lengths) + 1):
        session.run(next_record)


def test_crc32c_check_values_and_an_independent_implementation():
  # The CRC-32C check value (RFC 3720 B.4: "123456789" -> E3069283), 32 zero bytes -> 8A9136AA,
  # 32 0xFF bytes -> 62A8AB43, and the bit-by-bit CRC agrees with them.
  vectors = [(b"123456789", 0xE3069283), (b"\x00" * 32, 0x8A9136AA), (b"\xff" * 32, 0x62A8AB43),
             (bytes(range(32)), 0x46DD794E)]
  for data, expected in vectors:
    assert bitwise_crc32c(data) == expected
  rng = np.random.RandomState(4)
  messages = [data for data, _ in vectors] + [b"", b"a"] + [
      bytes(rng.randint(0, 256, size=length).astype(np.uint8))
      for length in [1, 2, 7, 8, 63, 64, 65, 255, 256, 1000, 4099]]
  flat = np.frombuffer(b"".join(messages), np.uint8)
  lengths = np.array([len(m) for m in messages], np.int64)
  crc = record_encoder.Crc32c()
  assert crc.checksums(flat, lengths).tolist() == [bitwise_crc32c(m) for m in messages]
  assert crc.masked(flat, lengths).tolist() == [masked_crc(bitwise_crc32c(m)) for m in messages]


def test_masked_crc_formula_on_hand_values():
  # ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2^32, worked out by hand for two values.
  assert masked_crc(0) == 0xA282EAD8
  assert masked_crc(0x00008000) == 0xA282EAD9  # bit 15 rotates to bit 0
  assert masked_crc(0xFFFFFFFF) == 0xA282EAD7  # all ones stay all ones; + constant wraps
  # The length field of a record of 1 byte, from its bytes.
  crc = record_encoder.Crc32c()
  length_bytes = np.frombuffer((1).to_bytes(8, "little"), np.uint8)
  assert crc.masked(length_bytes, np.array([8])).tolist() == [
      masked_crc(bitwise_crc32c((1).to_bytes(8, "little")))]


def test_varints_of_edge_values():
  # Hand-written protobuf varints: 300 = AC 02; -1 = ten bytes FF..FF 01.
  flat, lengths = record_encoder.encode_varints(np.array([[0, 1, 127, 128, 300, -1]], np.int64))
  assert flat.tobytes() == (b"\x00\x01\x7f\x80\x01\xac\x02" + b"\xff" * 9 + b"\x01")
  assert lengths.tolist() == [17]
  assert record_encoder.varint(300) == b"\xac\x02"
  with pytest.raises(ValueError, match="feature x: kind must be one of"):
    record_encoder.serialize_examples([record_encoder.Column("x", "string", [[b""]])])
