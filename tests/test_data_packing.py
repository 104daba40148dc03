"""utils/data/packing.py: shortest-pack-first histogram packing on hand-made histograms whose best
packings are worked out by hand, the capacities (tokens, sequences, predictions), and the dealing
of the sequences to the packs."""

import collections

import numpy as np
import pytest

from utils.data import packing

T = packing.SequenceType


def _pack_lengths(lengths, max_tokens, max_sequences, predictions=None, max_predictions=10**6):
  """The packs as a sorted list of sorted length tuples, and the packs of indices."""
  lengths = np.asarray(lengths)
  predictions = np.zeros_like(lengths) if predictions is None else np.asarray(predictions)
  packs = packing.pack_sequences(lengths, predictions, max_tokens, max_sequences, max_predictions)
  as_lengths = sorted(tuple(sorted(int(lengths[i]) for i in row if i >= 0)) for row in packs)
  return as_lengths, packs


def test_histogram_counts_each_length_and_predictions_pair():
  assert packing.histogram([5, 3, 5, 5], [1, 0, 1, 2]) == {T(3, 0): 1, T(5, 1): 2, T(5, 2): 1}
  assert packing.histogram([], []) == {}


def test_perfect_pairs_are_found():
  # 7+3, 6+4, 5+5 fill three packs of 10 exactly: the only packing into 3 packs.
  packs, _ = _pack_lengths([6, 4, 7, 3, 5, 5], 10, 3)
  assert packs == [(3, 7), (4, 6), (5, 5)]


def test_the_pack_with_the_least_room_is_filled_first():
  # 8 (room 2) and 6 (room 4) open; 2 fits both: shortest-pack-first puts it beside 8, so the 4
  # that follows still fits beside 6 (first fit into the emptier pack would need a third pack).
  packs, _ = _pack_lengths([6, 8, 2, 4], 10, 3)
  assert packs == [(2, 8), (4, 6)]


def test_a_pack_holds_at_most_max_sequences():
  assert _pack_lengths([2] * 6, 10, 2)[0] == [(2, 2)] * 3
  assert _pack_lengths([2] * 6, 10, 3)[0] == [(2, 2, 2)] * 2
  assert _pack_lengths([2] * 6, 10, 1)[0] == [(2,)] * 6


def test_a_pack_holds_at_most_max_predictions():
  # Three sequences of 3 tokens fit 10 tokens, but 2 + 2 + 2 predictions exceed 4: 2 and 1.
  packs, rows = _pack_lengths([3, 3, 3], 10, 3, predictions=[2, 2, 2], max_predictions=4)
  assert packs == [(3,), (3, 3)]
  # A lighter sequence of the same length still joins: 2 + 2 + 0 <= 4.
  packs, _ = _pack_lengths([3, 3, 3], 10, 3, predictions=[2, 0, 2], max_predictions=4)
  assert packs == [(3, 3, 3)]


def test_the_histogram_is_packed_by_counts_not_sequence_by_sequence():
  # A billion sequences of 5 tokens: half a billion packs of two, in one strategy.
  strategies = packing.pack_histogram({T(5, 1): 10**9}, 10, 3, 4)
  assert strategies == [((T(5, 1), T(5, 1)), 5 * 10**8)]
  # 3 * 333 + 1 sequences of 3: 333 packs of three and the last one alone.
  strategies = packing.pack_histogram({T(3, 0): 1000}, 10, 3, 0)
  assert sorted(strategies) == sorted([((T(3, 0),) * 3, 333), ((T(3, 0),), 1)])


def test_a_sequence_that_fits_no_pack_is_refused():
  with pytest.raises(ValueError, match="11 tokens and 0 predictions does not fit a pack of 10"):
    packing.pack_histogram({T(11, 0): 1}, 10, 3, 5)
  with pytest.raises(ValueError, match="4 tokens and 6 predictions does not fit"):
    packing.pack_histogram({T(4, 6): 1}, 10, 3, 5)
  with pytest.raises(ValueError, match="capacities must be >= 1"):
    packing.pack_histogram({}, 10, 0, 5)


def test_every_sequence_is_dealt_once_in_input_order_within_a_pack():
  rng = np.random.default_rng(3)
  lengths = rng.integers(1, 33, 500)
  predictions = rng.integers(0, 6, 500)
  packs = packing.pack_sequences(lengths, predictions, 32, 3, 8)
  dealt = packs[packs >= 0]
  assert sorted(dealt.tolist()) == list(range(500))
  for row in packs:
    real = [int(i) for i in row if i >= 0]
    assert real == sorted(real) and len(real) >= 1
    assert all(i < 0 for i in row[len(real):])  # filled slots first, no gap
    assert sum(lengths[real]) <= 32 and sum(predictions[real]) <= 8


def test_sequences_of_one_type_are_dealt_in_input_order():
  # Four sequences of 5 tokens: the first two form the first pack of the strategy, and so on.
  strategies = [((T(5, 0), T(5, 0)), 2)]
  packs = packing.assign_sequences([5, 5, 5, 5], [0, 0, 0, 0], strategies, 3)
  assert packs.tolist() == [[0, 1, -1], [2, 3, -1]]


def test_the_shuffle_depends_on_the_generator_only():
  rng = np.random.default_rng(0)
  lengths = rng.integers(1, 65, 300)
  predictions = np.zeros(300, np.int64)
  first = packing.pack_sequences(lengths, predictions, 64, 3, 3, np.random.default_rng(7))
  again = packing.pack_sequences(lengths, predictions, 64, 3, 3, np.random.default_rng(7))
  other = packing.pack_sequences(lengths, predictions, 64, 3, 3, np.random.default_rng(8))
  assert first.tolist() == again.tolist()
  assert first.tolist() != other.tolist()
  as_set = lambda packs: collections.Counter(map(tuple, packs.tolist()))  # noqa: E731
  assert as_set(first) == as_set(other)


def test_short_sequences_go_beside_long_ones_when_best_fit_would_strand_them():
  # Best fit alone: 8+4, 8+4, then 2+2+2 and 2: four packs. Three are enough: the two short
  # ones fill each 8's room, and the 4s pair up (the slot-aware phase finds it).
  packs, _ = _pack_lengths([8, 8, 4, 4, 2, 2, 2, 2], 12, 3)
  assert packs == [(2, 2, 8), (2, 2, 8), (4, 4)]
  # With room for one partner only (K = 2), 8+4 twice and 2+2 twice: both phases agree.
  assert _pack_lengths([8, 8, 4, 4, 2, 2, 2, 2], 12, 2)[0] == [(2, 2), (2, 2), (4, 8), (4, 8)]
