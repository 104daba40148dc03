"""Pretraining records as numpy arrays, and packed records (docs/DATA.md, "Packed records").

  features = packed_records.parse_records(records, path, first_index)  # unpacked records, checked
  lengths, predictions = packed_records.sequence_sizes(features, path, first_index, limits)
  packed = packed_records.build_packs(features, lengths, predictions, packs, limits)
  writer.write(packed_records.encode(packed, crc))
  originals = packed_records.unpack_row(row, max_seq_length, max_predictions_per_seq)

A packed row holds k <= K sequences one after another: input_mask carries each token's sequence
number (1..k), positions its position in its own sequence, masked_lm_weights each prediction's
sequence number, next_sentence_positions each sequence's [CLS] row index; unpacking gives back
each sequence's record exactly (the release's features, padded with zeros). Input that the
packer cannot give back exactly (padding that is not zero, a mask that is not 1s then 0s, a
prediction outside its sequence, weights other than 1.0 then 0.0) is refused with
`PackingInputError`, one line naming the file and the record.
"""

import collections
import itertools

import numpy as np
import tensorflow as tf

from utils.core import errors
from utils.data import input_pipeline
from utils.data import record_encoder
from utils.data import record_layout
from utils.data import records


def _kinds(max_sequences_per_pack):
  """name -> "int64" or "float" of the features `input_pipeline.pretraining_feature_spec` gives
  (the one definition of both records), in its order."""
  spec = input_pipeline.pretraining_feature_spec(1, 1, max_sequences_per_pack)
  return collections.OrderedDict((name, "float" if feature.dtype == tf.float32 else "int64")
                                 for name, feature in spec.items())


# The unpacked record's features (docs/DESIGN.md section 3) and their kinds.
UNPACKED_KINDS = _kinds(0)
# The packed record's features and their kinds (lengths S for the token features and positions,
# P for masked_lm_*, K for next_sentence_*).
PACKED_KINDS = _kinds(1)
# Features that make a record packed.
PACKED_MARKERS = ("positions", "next_sentence_positions")
_TOKEN_FEATURES = ("input_ids", "input_mask", "segment_ids")
_PREDICTION_FEATURES = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")


def without_masks(kinds):
  """`kinds` (UNPACKED_KINDS or PACKED_KINDS) less the masked_lm_* features: the features of
  records written with --dynamic_masking, and of their packed rows."""
  return collections.OrderedDict((name, kind) for name, kind in kinds.items()
                                 if name not in _PREDICTION_FEATURES)


def has_masks(features):
  """Whether a dict of features (arrays, widths or values by name) holds the masked_lm_* ones."""
  return "masked_lm_weights" in features

# A pack's capacity: S tokens, K sequences, P predictions (P = W + K).
PackLimits = collections.namedtuple("PackLimits", ["max_seq_length", "max_sequences",
                                                   "max_predictions"])


class PackingInputError(errors.UsageError):
  """Input records the packer refuses: one line naming the file, the record and the problem."""


def _where(path, index):
  """"<file>: record <index>", the start of a message."""
  return "%s: record %d" % (path, index)


def _record_values(record, where, widths):
  """{name: list of values} of one serialised unpacked record, checked against `widths`.

  Raises:
    PackingInputError: see `parse_records`.
  """
  try:
    feature = tf.train.Example.FromString(record).features.feature
  except Exception as e:  # protobuf's DecodeError
    raise PackingInputError("%s: not a tf.train.Example (%s)" % (where, type(e).__name__))
  names = set(feature.keys())
  if names & set(PACKED_MARKERS):
    raise PackingInputError("%s: the input is already packed (it has %s); give unpacked records"
                            % (where, ", ".join(sorted(names & set(PACKED_MARKERS)))))
  kinds = UNPACKED_KINDS if names & set(_PREDICTION_FEATURES) else without_masks(UNPACKED_KINDS)
  if names != set(kinds):
    raise PackingInputError("%s: expected the features %s (or, without masks, %s), got %s"
                            % (where, ", ".join(UNPACKED_KINDS),
                               ", ".join(without_masks(UNPACKED_KINDS)), ", ".join(sorted(names))))
  if widths is not None and has_masks(widths) != has_masks(names):
    raise PackingInputError("%s: %s masks, but the first record %s: give records of one kind"
                            % (where, "has" if has_masks(names) else "has no",
                               "does not" if has_masks(names) else "does"))
  values = {}
  for name, kind in kinds.items():
    got = feature[name].WhichOneof("kind")
    if got != kind + "_list":
      raise PackingInputError("%s: feature %s must be a %s list, got %s"
                              % (where, name, kind, got or "an empty feature"))
    values[name] = getattr(feature[name], got).value
    if widths is not None and len(values[name]) != widths[name]:
      raise PackingInputError("%s: feature %s has %d values, expected %d (the width of the first "
                              "record)" % (where, name, len(values[name]), widths[name]))
  return values


def parse_records(records, path, first_index, widths=None):
  """Parses serialised unpacked records into arrays, checking their names, kinds and widths.

  Args:
    records: list of serialised `tf.train.Example`s.
    path: their file, for messages.
    first_index: the 0-based index of records[0] in its file.
    widths: dict name -> expected width; None: the first record's.

  Returns:
    dict name -> array [n, width]: int64 for the int features, float32 for masked_lm_weights;
    without the masked_lm_* features for records without masks (--dynamic_masking).

  Raises:
    PackingInputError: naming file and record: not an Example, packed, a feature missing or
      extra, of the wrong kind, or of another width than `widths`; with masks where the first
      record has none or the reverse.
  """
  columns = collections.defaultdict(list)
  for offset, record in enumerate(records):
    values = _record_values(record, _where(path, first_index + offset), widths)
    if widths is None:
      widths = {name: len(value) for name, value in values.items()}
    for name, value in values.items():
      columns[name].append(value)
  widths = widths or {name: 0 for name in UNPACKED_KINDS}
  columns = {name: columns[name] for name in widths}
  # One pass over the values (twice as fast as np.array of the protobuf lists).
  return {name: np.fromiter(itertools.chain.from_iterable(values),
                            np.float32 if UNPACKED_KINDS[name] == "float" else np.int64,
                            count=len(values) * widths[name]).reshape(len(values), widths[name])
          for name, values in columns.items()}


def record_widths(features):
  """dict name -> width of a parsed batch (`parse_records`)."""
  return {name: int(values.shape[1]) for name, values in features.items()}


def _first_bad(bad, path, first_index, message):
  """Raises PackingInputError for the first True of the bool [n] array `bad`."""
  if np.any(bad):
    index = int(np.flatnonzero(bad)[0])
    raise PackingInputError("%s: %s" % (_where(path, first_index + index), message(index)))


def sequence_sizes(features, path, first_index, limits):
  """Each record's length and predictions, after checking it can be packed and given back.

  Args:
    features: `parse_records`' arrays.
    path, first_index: for messages.
    limits: `PackLimits`; the unpacked width W of the predictions is P - K.

  Returns:
    (lengths int64 [n], predictions int64 [n]).

  Raises:
    PackingInputError: naming file and record and expected vs got.
  """
  mask = features["input_mask"]
  seq_width = mask.shape[1]
  lengths = (mask != 0).sum(axis=1)
  columns = np.arange(seq_width)[None, :]
  inside = columns < lengths[:, None]
  _first_bad(np.any(mask != inside, axis=1), path, first_index,
             lambda i: "input_mask must be 1s then 0s, got %s" % mask[i].tolist())
  _first_bad(lengths > limits.max_seq_length, path, first_index,
             lambda i: "a sequence of %d tokens is longer than --max_seq_length=%d"
             % (lengths[i], limits.max_seq_length))
  _first_bad(lengths < 1, path, first_index, lambda i: "a sequence of no tokens")
  for name in ("input_ids", "segment_ids"):
    _first_bad(np.any((features[name] != 0) & ~inside, axis=1), path, first_index,
               lambda i, name=name: "%s is not 0 after the sequence's %d tokens" % (name,
                                                                                    lengths[i]))
  if not has_masks(features):
    return lengths.astype(np.int64), np.zeros(len(lengths), np.int64)
  return lengths.astype(np.int64), _prediction_counts(features, path, first_index, limits,
                                                      lengths)


def _prediction_counts(features, path, first_index, limits, lengths):
  """Each record's predictions (int64 [n]), after checking them as `sequence_sizes` says."""
  weights = features["masked_lm_weights"]
  predictions = (weights != 0).sum(axis=1)
  real = np.arange(weights.shape[1])[None, :] < predictions[:, None]
  _first_bad(np.any(weights != real, axis=1), path, first_index,
             lambda i: "masked_lm_weights must be 1.0s then 0.0s, got %s" % weights[i].tolist())
  width = limits.max_predictions - limits.max_sequences
  _first_bad(predictions > width, path, first_index,
             lambda i: "%d predictions, more than --max_predictions_per_seq=%d"
             % (predictions[i], width))
  positions = features["masked_lm_positions"]
  _first_bad(np.any(real & ((positions < 0) | (positions >= lengths[:, None])), axis=1), path,
             first_index, lambda i: "a masked_lm_position outside the sequence's %d tokens: %s"
             % (lengths[i], positions[i][real[i]].tolist()))
  for name in ("masked_lm_positions", "masked_lm_ids"):
    _first_bad(np.any((features[name] != 0) & ~real, axis=1), path, first_index,
               lambda i, name=name: "%s is not 0 after the %d predictions" % (name,
                                                                             predictions[i]))
  return predictions.astype(np.int64)


def _scatter_index(pack_rows, slots, starts, counts):
  """Where each piece of each (pack, slot) goes: one entry per token (or prediction).

  Args:
    pack_rows, slots: int [m]: the pack and slot of each placed sequence.
    starts: int [m]: its first column in the pack.
    counts: int [m]: its tokens (or predictions).

  Returns:
    (rows, columns, slot of each, own index of each) int64 [sum(counts)].
  """
  total = int(counts.sum())
  own = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
  return (np.repeat(pack_rows, counts), np.repeat(starts, counts) + own,
          np.repeat(slots, counts), own)


def build_packs(features, lengths, predictions, packs, limits):
  """The packed records of `packs`.

  Args:
    features: `parse_records`' arrays of the sequences; lengths, predictions: `sequence_sizes`.
    packs: int [M, K'] (K' <= K) sequence indices, -1 for an empty slot, filled slots first.
    limits: `PackLimits` (S, K, P).

  Returns:
    dict name -> array [M, width] of PACKED_KINDS' features (int64; float32 for the weights);
    without masked_lm_* when `features` has none.

  Raises:
    AssertionError: when a pack overflows S, K or P, or has a gap (the packer's own bug).
  """
  packs = np.asarray(packs, np.int64)
  num_packs, width = packs.shape
  s, k, p = limits
  filled = packs >= 0
  safe = np.where(filled, packs, 0)
  pack_lengths = np.where(filled, lengths[safe], 0)
  pack_predictions = np.where(filled, predictions[safe], 0)
  assert width <= k and np.all(filled[:, :1]) and np.all(filled[:, :-1] >= filled[:, 1:])
  assert np.all(pack_lengths.sum(axis=1) <= s), "a pack longer than max_seq_length"
  assert np.all(pack_predictions.sum(axis=1) <= p), "a pack with more predictions than P"
  token_starts = np.cumsum(pack_lengths, axis=1) - pack_lengths
  prediction_starts = np.cumsum(pack_predictions, axis=1) - pack_predictions
  rows, slots = np.nonzero(filled)  # row-major: slot 1 first in each row
  sequences = packs[rows, slots]
  out = {name: np.zeros((num_packs, s), np.int64)
         for name in (PACKED_KINDS if has_masks(features) else without_masks(PACKED_KINDS))}
  r, c, slot, own = _scatter_index(rows, slots, token_starts[rows, slots], lengths[sequences])
  source = np.repeat(sequences, lengths[sequences])
  out["input_ids"][r, c] = features["input_ids"][source, own]
  out["segment_ids"][r, c] = features["segment_ids"][source, own]
  out["input_mask"][r, c] = slot + 1
  out["positions"][r, c] = own
  if has_masks(features):
    for name in _PREDICTION_FEATURES:
      out[name] = np.zeros((num_packs, p),
                           np.float32 if name == "masked_lm_weights" else np.int64)
    r, c, slot, own = _scatter_index(rows, slots, prediction_starts[rows, slots],
                                     predictions[sequences])
    source = np.repeat(sequences, predictions[sequences])
    out["masked_lm_positions"][r, c] = (features["masked_lm_positions"][source, own]
                                        + token_starts[r, slot])
    out["masked_lm_ids"][r, c] = features["masked_lm_ids"][source, own]
    out["masked_lm_weights"][r, c] = slot + 1
  out["next_sentence_positions"] = np.zeros((num_packs, k), np.int64)
  out["next_sentence_labels"] = np.zeros((num_packs, k), np.int64)
  out["next_sentence_weights"] = np.zeros((num_packs, k), np.float32)
  out["next_sentence_positions"][rows, slots] = token_starts[rows, slots]
  out["next_sentence_labels"][rows, slots] = features["next_sentence_labels"][sequences, 0]
  out["next_sentence_weights"][rows, slots] = 1.0
  return out


def encode(features, crc):
  """TFRecord bytes of records, the features in name order (`record_encoder`: as TF writes them).

  Args:
    features: dict name -> array [n, width]; float32 arrays are written as float features.
    crc: `record_encoder.Crc32c`.

  Returns:
    uint8 array.
  """
  columns = [record_encoder.Column(name, "float" if values.dtype == np.float32 else "int64",
                                   values)
             for name, values in sorted(features.items())]
  flat, row_lengths = record_encoder.serialize_examples(columns)
  return record_encoder.frame_records(crc, flat, row_lengths)


def unpack_row(row, max_seq_length, max_predictions_per_seq):
  """The unpacked records of one packed row.

  Args:
    row: dict name -> 1-D array of one packed record (PACKED_KINDS' features).
    max_seq_length: S of the unpacked records (their input width).
    max_predictions_per_seq: W of the unpacked records.

  Returns:
    list of k dicts name -> 1-D array (int64; float32 masked_lm_weights), the release's features:
    input_ids, input_mask (1/0), segment_ids padded to S; masked_lm_* padded to W (none when the
    row has none); weights 1.0/0.0; next_sentence_labels [1].
  """
  mask = np.asarray(row["input_mask"])
  out = []
  for slot in np.flatnonzero(np.asarray(row["next_sentence_weights"]) > 0):
    number = slot + 1
    start = int(row["next_sentence_positions"][slot])
    tokens = np.flatnonzero(mask == number)
    record = {name: np.zeros(max_seq_length, np.int64) for name in _TOKEN_FEATURES}
    record["input_ids"][:len(tokens)] = np.asarray(row["input_ids"])[tokens]
    record["segment_ids"][:len(tokens)] = np.asarray(row["segment_ids"])[tokens]
    record["input_mask"][:len(tokens)] = 1
    if has_masks(row):
      record.update(_unpacked_predictions(row, number, start, max_predictions_per_seq))
    record["next_sentence_labels"] = np.array([row["next_sentence_labels"][slot]], np.int64)
    out.append(record)
  return out


def _unpacked_predictions(row, number, start, max_predictions_per_seq):
  """The masked_lm_* features of sequence `number` of a packed row, starting at token `start`,
  padded to W = max_predictions_per_seq (dict name -> 1-D array)."""
  chosen = np.flatnonzero(np.asarray(row["masked_lm_weights"]) == number)
  record = {name: np.zeros(max_predictions_per_seq,
                           np.float32 if name == "masked_lm_weights" else np.int64)
            for name in _PREDICTION_FEATURES}
  record["masked_lm_positions"][:len(chosen)] = (np.asarray(row["masked_lm_positions"])[chosen]
                                                 - start)
  record["masked_lm_ids"][:len(chosen)] = np.asarray(row["masked_lm_ids"])[chosen]
  record["masked_lm_weights"][:len(chosen)] = 1.0
  return record


def read_features(path, first_index=0, count=None, widths=None, batch_records=4096):
  """Records [first_index, first_index + count) of an unpacked TFRecord file, parsed and checked.

  Args:
    path: the file.
    first_index, count: the records to read (count None: to the end).
    widths: as `parse_records`.
    batch_records: records parsed at a time (a batch's serialised records are held at once).

  Returns:
    `parse_records`' dict of arrays.

  Raises:
    PackingInputError: as `parse_records`, or for a file that cannot be read or is corrupt.
  """
  stop = None if count is None else first_index + count
  batches = []
  try:
    iterator = itertools.islice(records.read_records(path), first_index, stop)
    index = first_index
    while True:
      batch = list(itertools.islice(iterator, batch_records))
      if not batch:
        break
      parsed = parse_records(batch, path, index, widths)
      widths = widths or record_widths(parsed)
      batches.append(parsed)
      index += len(batch)
  except (tf.errors.OpError, OSError) as e:
    raise PackingInputError("%s: cannot read: %s" % (path, str(e).splitlines()[0]))
  if not batches:
    return parse_records([], path, first_index, widths)
  return {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}


def read_packed(path):
  """Every record of a packed TFRecord file.

  Returns:
    dict name -> array [n, width] of PACKED_KINDS' features (int64; float32 weights); without
    masked_lm_* for rows without masks.

  Raises:
    PackingInputError: naming file and record: not an Example, not a packed record (a feature
      missing or of the wrong kind), widths that differ from the first record's, masks where the
      first record has none or the reverse; or a file that cannot be read.
  """
  rows = collections.defaultdict(list)
  kinds = None
  try:
    for index, record in enumerate(records.read_records(path)):
      where = _where(path, index)
      try:
        feature = tf.train.Example.FromString(record).features.feature
      except Exception as e:  # protobuf's DecodeError
        raise PackingInputError("%s: not a tf.train.Example (%s)" % (where, type(e).__name__))
      if kinds is None:
        kinds = PACKED_KINDS if has_masks(feature) else without_masks(PACKED_KINDS)
      elif has_masks(feature) != has_masks(kinds):
        raise PackingInputError("%s: %s masks, but the first record %s" % (
            where, "has" if has_masks(feature) else "has no",
            "does not" if has_masks(feature) else "does"))
      for name, kind in kinds.items():
        if name not in feature or feature[name].WhichOneof("kind") != kind + "_list":
          raise PackingInputError("%s: not a packed record: no %s list %s" % (where, kind, name))
        values = getattr(feature[name], kind + "_list").value
        if rows[name] and len(values) != len(rows[name][0]):
          raise PackingInputError("%s: feature %s has %d values, expected %d (the width of the "
                                  "first record)" % (where, name, len(values),
                                                     len(rows[name][0])))
        rows[name].append(values)
  except (tf.errors.OpError, OSError) as e:
    raise PackingInputError("%s: cannot read: %s" % (path, str(e).splitlines()[0]))
  return {name: np.array(rows[name], np.float32 if kind == "float" else np.int64)
          .reshape(len(rows[name]), -1 if rows[name] else 0)
          for name, kind in (kinds or PACKED_KINDS).items()}


def unpack_features(packed, max_seq_length, max_predictions_per_seq, path="packed"):
  """The unpacked records of packed rows, row after row, slot after slot.

  Args:
    packed: `read_packed`'s arrays.
    max_seq_length, max_predictions_per_seq: the unpacked records' widths.
    path: the file, for messages.

  Returns:
    dict name -> array [sequences, width] of UNPACKED_KINDS' features.

  Raises:
    PackingInputError: naming the record, when its fields disagree
      (`record_layout.packed_row_problem`, the rules training checks) or a sequence has more
      tokens or predictions than the widths.
  """
  out = collections.defaultdict(list)
  for index in range(len(packed["input_ids"])):
    row = {name: values[index] for name, values in packed.items()}
    problem = record_layout.packed_row_problem(row)
    if problem:
      raise PackingInputError("%s: a packed row: %s" % (_where(path, index), problem))
    numbers = row["input_mask"][row["input_mask"] > 0]
    chosen = row["masked_lm_weights"][row["masked_lm_weights"] > 0] if has_masks(row) else []
    longest = max([np.count_nonzero(numbers == n) for n in np.unique(numbers)] + [0])
    most = max([np.count_nonzero(chosen == n) for n in np.unique(chosen)] + [0])
    if longest > max_seq_length or most > max_predictions_per_seq:
      raise PackingInputError(
          "%s: a sequence of %d tokens and %d predictions does not fit --max_seq_length=%d, "
          "--max_predictions_per_seq=%d" % (_where(path, index), longest, most, max_seq_length,
                                            max_predictions_per_seq))
    for record in unpack_row(row, max_seq_length, max_predictions_per_seq):
      for name, values in record.items():
        out[name].append(values)
  kinds = UNPACKED_KINDS if has_masks(packed) else without_masks(UNPACKED_KINDS)
  return {name: np.array(out[name], np.float32 if kind == "float" else np.int64)
          .reshape(len(out[name]), -1 if out[name] else 0)
          for name, kind in kinds.items()}
