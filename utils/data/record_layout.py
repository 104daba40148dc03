"""What kind of pretraining record a file holds, and the rules of a packed row.

Two layouts share the features of the original release (docs/DESIGN.md section 3): the release's
own, one sequence per record, and packed rows of up to K sequences with the attention kept inside
each (docs/DATA.md, "Packed records"; `pack_pretraining_data.py` writes them), recognised by
their extra features `positions` and `next_sentence_positions`. A job reads one layout: its first
record of every file says which (`layout_of`), and a packed row's fields must tell one story
(`packed_row_problem`), checked before any graph is built.
"""

import collections

import numpy as np

# Features only packed rows have.
PACKED_ONLY = ("positions", "next_sentence_positions", "next_sentence_weights")

# The layout of a file's records: packed or not; tokens per row; the masked_lm_* width
# (max_predictions_per_seq, or a packed row's prediction capacity; records without masks: 0 as
# read from a file, the width the input pipeline draws once the job has decided it); sequences
# per row (1 unpacked); whether the records hold no masks (the input pipeline draws them: records
# made with --dynamic_masking).
Layout = collections.namedtuple("Layout", ["packed", "seq_length", "predictions",
                                           "sequences_per_row", "dynamic_masks"],
                                defaults=[False])

# The layouts of a job's two file sets, each decided once from its files: training and
# evaluation (None for a set the job does not read). They agree on packing; their masks may
# differ (training records without masks beside evaluation records with fixed ones).
Layouts = collections.namedtuple("Layouts", ["train", "eval"])


def unpacked(seq_length, predictions):
  """The release's layout: one sequence of `seq_length` tokens per record, `predictions` masks."""
  return Layout(packed=False, seq_length=seq_length, predictions=predictions,
                sequences_per_row=1)


def max_sequences_per_pack(layout):
  """K for packed rows of up to K sequences, 0 for the release's records (the
  `max_sequences_per_pack` argument of the feature spec, the record checks and the logs)."""
  return layout.sequences_per_row if layout.packed else 0


def for_graph(layouts, is_training):
  """The `Layout` a graph reads: `layouts.train` when `is_training`, else `layouts.eval`; None
  (the release's records, one sequence each) when `layouts` is None."""
  if layouts is None:
    return None
  return layouts.train if is_training else layouts.eval


def _length(example, name):
  """The number of values of feature `name` of a tf.train.Example (0 when absent)."""
  if name not in example.features.feature:
    return 0
  feature = example.features.feature[name]
  kind = feature.WhichOneof("kind")
  return len(getattr(feature, kind).value) if kind else 0


def layout_of(example):
  """The `Layout` of a parsed `tf.train.Example` (its feature lengths; not checked here)."""
  features = example.features.feature
  packed = any(name in features for name in PACKED_ONLY)
  return Layout(packed=packed, seq_length=_length(example, "input_ids"),
                predictions=_length(example, "masked_lm_positions"),
                sequences_per_row=(_length(example, "next_sentence_positions") if packed else 1),
                dynamic_masks=("input_ids" in features and "masked_lm_positions" not in features))


def describe(layout):
  """A layout in words, for messages: "packed records (up to 3 sequences per row of 512 tokens,
  83 predictions)", "unpacked records (512 tokens, 80 predictions)", "unpacked records (128
  tokens, no masks)" or, once the job has chosen the width it draws, "unpacked records (128
  tokens, no masks: 20 predictions drawn)"."""
  if layout.dynamic_masks:
    predictions = "no masks"
    if layout.predictions:
      predictions += ": %d predictions drawn" % layout.predictions
  else:
    predictions = "%d predictions" % layout.predictions
  if layout.packed:
    return ("packed records (up to %d sequences per row of %d tokens, %s)"
            % (layout.sequences_per_row, layout.seq_length, predictions))
  return "unpacked records (%d tokens, %s)" % (layout.seq_length, predictions)


def _sequence_spans(sequence_numbers, capacity):
  """[(start, end)] of each sequence of a packed row, or a problem string.

  Sequence numbers must be 1, 1, ..., 2, ..., k, then only 0 (padding): consecutive blocks in
  increasing order from 1, at most `capacity` of them.
  """
  numbers = np.asarray(sequence_numbers, dtype=np.int64)
  if numbers.size and (numbers.min() < 0):
    return "input_mask holds %d; a packed row's input_mask holds sequence numbers 1..k and 0" % (
        numbers.min())
  real = int(np.count_nonzero(numbers))
  if np.count_nonzero(numbers[:real]) != real:
    return "input_mask has padding (0) before the last sequence's tokens"
  changes = np.flatnonzero(np.diff(numbers[:real])) + 1
  starts = np.concatenate([[0], changes]).astype(int) if real else np.zeros(0, int)
  ends = np.concatenate([changes, [real]]).astype(int) if real else np.zeros(0, int)
  expected = np.arange(1, len(starts) + 1)
  if not np.array_equal(numbers[starts], expected):
    return ("input_mask numbers its sequences %s, expected 1..k in order"
            % numbers[starts].tolist())
  if len(starts) > capacity:
    return ("the row holds %d sequences, more than its %d next-sentence slots (the pack "
            "overflows its capacity)" % (len(starts), capacity))
  return list(zip(starts.tolist(), ends.tolist()))


def packed_row_problem(values):
  """What is wrong with one packed row, or None.

  Args:
    values: dict feature name -> list of numbers: input_mask, positions,
      masked_lm_positions, masked_lm_weights (absent in rows without masks),
      next_sentence_positions, next_sentence_weights (lengths already checked against the
      layout).

  Returns:
    None, or a problem in words naming the feature.
  """
  capacity = len(values["next_sentence_positions"])
  spans = _sequence_spans(values["input_mask"], capacity)
  if isinstance(spans, str):
    return spans
  positions = np.asarray(values["positions"], dtype=np.int64)
  for number, (start, end) in enumerate(spans, 1):
    if not np.array_equal(positions[start:end], np.arange(end - start)):
      return ("positions of sequence %d (tokens %d..%d) do not count 0..%d"
              % (number, start, end - 1, end - start - 1))
  cls_positions = np.asarray(values["next_sentence_positions"], dtype=np.int64)
  starts = [start for start, _ in spans]
  if not np.array_equal(cls_positions[:len(spans)], starts):
    return ("next_sentence_positions is %s, expected each sequence's first token %s"
            % (cls_positions[:len(spans)].tolist(), starts))
  weights = np.asarray(values["next_sentence_weights"], dtype=np.float64)
  expected_weights = (np.arange(capacity) < len(spans)).astype(np.float64)
  if not np.array_equal(weights, expected_weights):
    return ("next_sentence_weights is %s, expected 1 for each of the row's %d sequences and 0 "
            "after" % (weights.tolist(), len(spans)))
  if "masked_lm_weights" not in values:  # a row without masks: the pipeline draws them
    return None
  return _predictions_problem(values, spans)


def _predictions_problem(values, spans):
  """None, or what is wrong with the masked predictions of a packed row of `spans`."""
  owners = np.asarray(values["masked_lm_weights"], dtype=np.float64)
  positions = np.asarray(values["masked_lm_positions"], dtype=np.int64)
  for index, (owner, position) in enumerate(zip(owners, positions)):
    if owner == 0:
      continue
    if owner != int(owner) or not 1 <= owner <= len(spans):
      return ("masked_lm_weights[%d] is %g; a packed row holds there the number of the "
              "prediction's sequence (1..%d) or 0" % (index, owner, len(spans)))
    start, end = spans[int(owner) - 1]
    if not start <= position < end:
      return ("masked_lm_positions[%d] is %d, outside its sequence %d (tokens %d..%d)"
              % (index, position, int(owner), start, end - 1))
  return None
