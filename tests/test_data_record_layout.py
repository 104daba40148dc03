"""utils/data/record_layout.py: the layout of a file's records and the rules of a packed row,
on rows written out by hand."""

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from utils.data import record_layout

# A row of 12 tokens holding 2 sequences of 5 and 4 tokens, 3 slots, 6 prediction slots.
GOOD = {
    "input_ids": [2, 7, 8, 3, 3, 2, 9, 3, 3, 0, 0, 0],
    "input_mask": [1, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0],
    "segment_ids": [0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0],
    "positions": [0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 0, 0],
    "masked_lm_positions": [1, 2, 6, 0, 0, 0],
    "masked_lm_ids": [5, 6, 4, 0, 0, 0],
    "masked_lm_weights": [1.0, 1.0, 2.0, 0.0, 0.0, 0.0],
    "next_sentence_positions": [0, 5, 0],
    "next_sentence_labels": [0, 1, 0],
    "next_sentence_weights": [1.0, 1.0, 0.0],
}


def changed(**values):
  row = dict(GOOD)
  row.update(values)
  return row


def test_a_good_row_has_no_problem():
  assert record_layout.packed_row_problem(GOOD) is None


@pytest.mark.parametrize("row,message", [
    (changed(input_mask=[1, 1, 1, 1, 1, 2, 2, 0, 2, 0, 0, 0]),
     "input_mask has padding (0) before the last sequence's tokens"),
    (changed(input_mask=[2, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0]),
     "input_mask numbers its sequences [2, 1], expected 1..k in order"),
    (changed(input_mask=[1, 1, 1, 1, 1, 3, 3, 3, 3, 0, 0, 0]),
     "input_mask numbers its sequences [1, 3], expected 1..k in order"),
    (changed(input_mask=[1, 1, 2, 2, 3, 3, 4, 4, 4, 0, 0, 0],
             positions=[0, 1, 0, 1, 0, 1, 0, 1, 2, 0, 0, 0]),
     "the row holds 4 sequences, more than its 3 next-sentence slots"),
    (changed(positions=[0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0]),
     "positions of sequence 2 (tokens 5..8) do not count 0..3"),
    (changed(next_sentence_positions=[0, 4, 0]),
     "next_sentence_positions is [0, 4], expected each sequence's first token [0, 5]"),
    (changed(next_sentence_weights=[1.0, 1.0, 1.0]),
     "next_sentence_weights is [1.0, 1.0, 1.0], expected 1 for each of the row's 2 sequences"),
    (changed(masked_lm_weights=[1.0, 1.0, 1.0, 0.0, 0.0, 0.0]),
     "masked_lm_positions[2] is 6, outside its sequence 1 (tokens 0..4)"),
    (changed(masked_lm_weights=[1.0, 1.0, 3.0, 0.0, 0.0, 0.0]),
     "masked_lm_weights[2] is 3; a packed row holds there the number of the prediction's "
     "sequence (1..2) or 0"),
    (changed(masked_lm_weights=[1.0, 0.5, 2.0, 0.0, 0.0, 0.0]),
     "masked_lm_weights[1] is 0.5"),
    (changed(input_mask=[1, 1, 1, 1, 1, 2, 2, 2, -1, 0, 0, 0]),
     "input_mask holds -1"),
])
def test_each_rule_names_what_disagrees(row, message):
  problem = record_layout.packed_row_problem(row)
  assert problem is not None and message in problem, problem


def example(row):
  return helpers.example_from_arrays({k: np.asarray(v) for k, v in row.items()})


def test_layout_of_packed_and_unpacked_records():
  packed = record_layout.layout_of(example(GOOD))
  assert packed == record_layout.Layout(True, 12, 6, 3)
  assert record_layout.describe(packed) == (
      "packed records (up to 3 sequences per row of 12 tokens, 6 predictions)")
  batch = helpers.random_batch(np.random.RandomState(0), 1, 16, 30, 4)
  unpacked = record_layout.layout_of(example({k: v[0] for k, v in batch.items()}))
  assert unpacked == record_layout.Layout(False, 16, 4, 1)
  assert record_layout.describe(unpacked) == "unpacked records (16 tokens, 4 predictions)"
  # An empty Example is neither: no tokens, no predictions.
  assert record_layout.layout_of(tf.train.Example()) == record_layout.Layout(False, 0, 0, 1)


def test_layout_of_records_without_masks():
  batch = helpers.random_batch(np.random.RandomState(0), 1, 16, 30, 4)
  values = {k: v[0] for k, v in batch.items() if not k.startswith("masked_lm_")}
  layout = record_layout.layout_of(example(values))
  assert layout == record_layout.Layout(False, 16, 0, 1, dynamic_masks=True)
  assert record_layout.describe(layout) == "unpacked records (16 tokens, no masks)"
  packed = {k: v for k, v in GOOD.items() if not k.startswith("masked_lm_")}
  layout = record_layout.layout_of(example(packed))
  assert layout == record_layout.Layout(True, 12, 0, 3, dynamic_masks=True)
  assert record_layout.describe(layout) == (
      "packed records (up to 3 sequences per row of 12 tokens, no masks)")
