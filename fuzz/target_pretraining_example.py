"""A pretraining record's `tf.train.Example` checked against the model: the pre-flight of every
input file's first record (`records.check_input_files`, `check_example`) and the scan that names a
bad record (`records.find_bad_record`).

The input is one record's data, framed here into a TFRecord file (right CRCs) so that the check of
the Example itself is what is fuzzed. Checked: the pre-flight refuses the record exactly when the
Example, parsed here with protobuf and checked here feature by feature, does not fit the model
(seq 8, 3 predictions, a vocabulary of 50), its message naming the file; the scan agrees; and a
record the pre-flight passes parses with the input pipeline's spec into the Example's own values.
"""


import numpy as np
import tensorflow as tf

from fuzz import harness
from utils.data import input_pipeline
from utils.data import instances
from utils.data import record_encoder
from utils.data import records

SEQ, PRED, VOCAB = 8, 3, 50
# Each feature's kind (the `Feature` oneof) and length.
_EXPECTED = {"input_ids": ("int64_list", SEQ), "input_mask": ("int64_list", SEQ),
             "segment_ids": ("int64_list", SEQ), "masked_lm_positions": ("int64_list", PRED),
             "masked_lm_ids": ("int64_list", PRED), "masked_lm_weights": ("float_list", PRED),
             "next_sentence_labels": ("int64_list", 1)}


def _values(feature):
  kind = feature.WhichOneof("kind")
  return kind, (list(getattr(feature, kind).value) if kind else [])


def fits(data):
  """Whether the record `data` is an Example the model takes, checked here; with its values."""
  try:
    example = tf.train.Example.FromString(data)
  except Exception:  # pylint: disable=broad-except
    return False, None
  values = {}
  for name, (kind, length) in _EXPECTED.items():
    if name not in example.features.feature:
      return False, None
    got_kind, got = _values(example.features.feature[name])
    if got_kind not in (kind, None) or len(got) != length:
      return False, None
    values[name] = got
  if not all(0 <= p < SEQ for p in values["masked_lm_positions"]):
    return False, None
  if not all(0 <= i < VOCAB for i in values["input_ids"] + values["masked_lm_ids"]):
    return False, None
  return True, values


def _framed(data):
  flat = np.frombuffer(data, np.uint8)
  return record_encoder.frame_records(record_encoder.Crc32c(), flat,
                                      np.array([len(data)], np.int64)).tobytes()


# (session, input placeholder, parsed features) of the pipeline's spec, built once (a graph of its
# own: the caller may run eagerly or not).
_PARSER = []


def _parse(data):
  """The features TF's parser takes from the serialised Example `data` with the pipeline's spec."""
  if not _PARSER:
    graph = tf.Graph()
    with graph.as_default():
      serialized = tf.compat.v1.placeholder(tf.string, [])
      parsed = tf.io.parse_single_example(
          serialized, input_pipeline.pretraining_feature_spec(SEQ, PRED))
    _PARSER.extend([tf.compat.v1.Session(graph=graph), serialized, parsed])
  session, serialized, parsed = _PARSER
  return session.run(parsed, {serialized: data})


def _check_parsed(data, values):
  """Asserts that the pipeline's spec parses `data` into `values`."""
  parsed = _parse(data)
  for name, expected in values.items():
    got = parsed[name].tolist()
    same = np.array_equal(np.asarray(got, np.float64), np.asarray(expected, np.float64),
                          equal_nan=True)
    assert same, "%s parsed as %r, the Example holds %r" % (name, got, expected)


def read(data):
  """The pre-flight and the scan of a file holding the one record `data`."""
  ok, values = fits(data)
  with harness.input_file(_framed(data), "part-0.tfrecord") as path:
    try:
      records.check_input_files([path], SEQ, PRED, vocab_size=VOCAB)
    except ValueError as e:
      assert not ok, "a fitting record refused: %s" % e
      assert str(e).startswith(path + ": ") and "\n" not in str(e), "message %r" % str(e)
    else:
      assert ok, "a record that does not fit passed"
      _check_parsed(data, values)
    scanned = records.find_bad_record([path], SEQ, PRED, VOCAB)
    assert (scanned is None) == ok, "scan %r, fits %r" % (scanned, ok)
    assert scanned is None or scanned.startswith(path + ": record 0"), scanned


def seeds():
  """Examples of the data generator's serialiser: fitting ones, an id outside the vocabulary, a
  position outside the sequence, a sequence too long."""
  rng = np.random.RandomState(0)

  def example(seq=SEQ, high=VOCAB, position=None):
    features = {name: rng.randint(0, 2, size=(1, seq)).astype(np.int64)
                for name in ("input_mask", "segment_ids")}
    features["input_ids"] = rng.randint(0, high, size=(1, seq)).astype(np.int64)
    features["masked_lm_positions"] = np.array([[1, 2, position or 3]], np.int64)
    features["masked_lm_ids"] = rng.randint(0, VOCAB, size=(1, PRED)).astype(np.int64)
    features["masked_lm_weights"] = np.array([[1.0, 1.0, 0.0]], np.float32)
    features["next_sentence_labels"] = np.array([[1]], np.int64)
    flat, _ = instances.serialize_examples(features)
    return flat.tobytes()

  return [example(), example(), example(high=VOCAB + 20), example(position=SEQ),
          example(seq=SEQ + 2), b""]


TARGET = harness.Target("pretraining_example", read, (), seeds, 2048)
