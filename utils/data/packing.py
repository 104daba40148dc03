"""Histogram packing of pretraining sequences: several sequences share one row of max_seq_length
tokens (docs/DATA.md, "Packed records").

The algorithm is shortest-pack-first histogram packing (SPFHP, Krell et al., arXiv 2107.02027):
best-fit decreasing run on the histogram of the sequences, not on the sequences one by one; and
a slot-aware variant of it, whose first phase fills the room of each sequence longer than half a
pack with one or two sequences of at most a third (`_fill_long_packs`); the one with fewer packs
is kept. The histogram's types are (length, predictions) pairs, longest first; each type goes, as
many of its sequences at once as there are open packs of one kind, into the open packs with the
least room left that still take it (tokens and predictions), else into new packs, each holding as
many of the type as fit (what placing them one by one into the best fit gives). A pack is
described by its "strategy", the tuple of the types it holds, so the work grows with the number
of distinct types and strategies, not with the number of sequences. The sequences are then dealt to the strategies
in input order (`assign_sequences`): the result depends only on the lengths and predictions.

Constraints of a pack (docs/DATA.md): at most `max_tokens` tokens, at most `max_sequences`
sequences and at most `max_predictions` predictions (their sum); a sequence that would overflow
any of them goes to another pack.
"""

import bisect
import collections
import itertools

import numpy as np

# One type of the histogram: (length in tokens, predictions).
SequenceType = collections.namedtuple("SequenceType", ["length", "predictions"])


def histogram(lengths, predictions):
  """The histogram of (length, predictions) pairs.

  Args:
    lengths: int [n], each sequence's tokens.
    predictions: int [n], each sequence's masked-LM predictions.

  Returns:
    dict SequenceType -> count, for the types that occur.
  """
  lengths = np.asarray(lengths, np.int64)
  predictions = np.asarray(predictions, np.int64)
  if len(lengths) == 0:
    return {}
  pairs, counts = np.unique(np.stack([lengths, predictions], axis=1), axis=0, return_counts=True)
  return {SequenceType(int(l), int(p)): int(c) for (l, p), c in zip(pairs, counts)}


def _used(strategy):
  """(tokens, predictions) a strategy's sequences take."""
  return (sum(t.length for t in strategy), sum(t.predictions for t in strategy))


def _best_fit(open_packs, item, max_tokens, max_predictions):
  """The open strategy with the least room left that takes `item`, or None.

  Args:
    open_packs: dict room left (tokens) -> dict strategy -> count of open packs.
    item: the `SequenceType` to place.
    max_tokens, max_predictions: a pack's capacity.

  Returns:
    (room, strategy) or None.
  """
  for room in range(item.length, max_tokens + 1):
    for strategy in open_packs.get(room, ()):
      if _used(strategy)[1] + item.predictions <= max_predictions:
        return room, strategy
  return None


def _add(open_packs, closed, strategy, count, max_tokens, max_sequences):
  """Records `count` packs of `strategy`: closed when full (sequences or tokens), else open."""
  room = max_tokens - _used(strategy)[0]
  if len(strategy) >= max_sequences or room == 0:
    closed[strategy] += count
  else:
    group = open_packs.setdefault(room, collections.OrderedDict())
    group[strategy] = group.get(strategy, 0) + count


def _check_fits(counts, max_tokens, max_sequences, max_predictions):
  """Raises ValueError for a capacity below 1 or a type that does not fit a pack alone."""
  if min(max_tokens, max_sequences) < 1 or max_predictions < 0:
    raise ValueError("pack capacities must be >= 1, got tokens %d, sequences %d, predictions %d"
                     % (max_tokens, max_sequences, max_predictions))
  for item in counts:
    if not (1 <= item.length <= max_tokens and 0 <= item.predictions <= max_predictions):
      raise ValueError("a sequence of %d tokens and %d predictions does not fit a pack of %d "
                       "tokens and %d predictions" % (item.length, item.predictions, max_tokens,
                                                      max_predictions))


def _best_fit_decreasing(counts, open_packs, closed, max_tokens, max_sequences, max_predictions):
  """Shortest-pack-first: each type, longest first, into the open packs with the least room that
  take it, else into new packs. Updates `open_packs` (room -> strategy -> count) and `closed`."""
  for item in sorted(counts, key=lambda t: (-t.length, -t.predictions)):
    left = counts[item]
    while left > 0:
      found = _best_fit(open_packs, item, max_tokens, max_predictions)
      if found is None:
        # No open pack takes it: new packs, each filled with as many of the type as it holds (a
        # copy placed one at a time would go to the pack the previous copy opened: the best fit).
        copies = min(max_sequences, max_tokens // item.length,
                     max_predictions // item.predictions if item.predictions else max_sequences)
        full, rest = divmod(left, copies)
        if full:
          _add(open_packs, closed, (item,) * copies, full, max_tokens, max_sequences)
        if rest:
          _add(open_packs, closed, (item,) * rest, 1, max_tokens, max_sequences)
        break
      room, strategy = found
      taken = min(left, open_packs[room][strategy])
      open_packs[room][strategy] -= taken
      if not open_packs[room][strategy]:
        del open_packs[room][strategy]
      _add(open_packs, closed, strategy + (item,), taken, max_tokens, max_sequences)
      left -= taken


def _best_partners(left, small, keys, room, prediction_room, partners):
  """The one or two available short types that fill `room` most; of equal fills, two rather than
  one (short sequences are the ones left over otherwise), then the longer first partner.

  Args:
    left: dict type -> sequences not yet packed.
    small: the short types with sequences left, longest first.
    keys: [-t.length for t in small] (ascending), to skip the types too long by bisection.
    room, prediction_room: what the pack has left.
    partners: 1 or 2.

  Returns:
    tuple of 1 or 2 types, or () when none fits.
  """
  best_total, best = 0, ()
  for index in range(bisect.bisect_left(keys, -room), len(small)):
    first = small[index]
    if 2 * first.length < best_total or (partners == 1 and best):
      break  # a second partner is never longer than the first: no better pair follows
    if first.predictions > prediction_room:
      continue
    found = (first,)
    start = max(index, bisect.bisect_left(keys, first.length - room))
    for second in itertools.islice(small, start, None) if partners > 1 else ():
      if (second.predictions <= prediction_room - first.predictions and
          left[second] > (second == first)):
        found = (first, second)
        break
    total = sum(t.length for t in found)
    if (total, len(found)) > (best_total, len(best)):  # as full, two short ones rather than one
      best_total, best = total, found
  return best


def _fill_long_packs(counts, max_tokens, max_sequences, max_predictions):
  """The slot-aware first phase: every sequence longer than half a pack opens its own pack (no two
  fit one), the packs with the most room first, and gets the one or two sequences of at most a
  third of a pack that fill its room most. Short sequences are spent where they fill room, not
  left to fill packs three at a time with room to spare (what best fit does when many are short
  and K is small).

  Returns:
    (open_packs, closed, the counts of the types left), as `_best_fit_decreasing` takes them.
  """
  open_packs, closed = {}, collections.Counter()
  left = dict(counts)
  small = sorted((t for t in counts if 3 * t.length <= max_tokens),
                 key=lambda t: (-t.length, -t.predictions))
  keys = [-t.length for t in small]
  partners = min(2, max_sequences - 1)
  for big in sorted((t for t in counts if 2 * t.length > max_tokens),
                    key=lambda t: (t.length, t.predictions)):
    number = left.pop(big)
    while number and partners:
      found = _best_partners(left, small, keys, max_tokens - big.length,
                             max_predictions - big.predictions, partners)
      if not found:
        break
      need = collections.Counter(found)
      taken = min([number] + [left[t] // n for t, n in need.items()])
      for t, n in need.items():
        left[t] -= n * taken
      if any(not left[t] for t in need):  # a type used up: out of the search
        small = [t for t in small if left[t]]
        keys = [-t.length for t in small]
      _add(open_packs, closed, (big,) + found, taken, max_tokens, max_sequences)
      number -= taken
    if number:
      _add(open_packs, closed, (big,), number, max_tokens, max_sequences)
  return open_packs, closed, {t: n for t, n in left.items() if n}


def pack_histogram(counts, max_tokens, max_sequences, max_predictions):
  """Shortest-pack-first histogram packing, and its slot-aware variant: the fewer packs.

  The variant runs `_fill_long_packs` before the best fit; which does better depends on the
  histogram (with K = 3 on the demo corpus at 512, the variant: 1.8% padding instead of 8.7%;
  at 128, plain best fit: 0.7% instead of 3.8%), so both run (each on the histogram, cheap).

  Args:
    counts: dict `SequenceType` -> number of sequences (`histogram`); every type must fit a pack
      alone (length <= max_tokens, predictions <= max_predictions).
    max_tokens: tokens a pack holds (max_seq_length).
    max_sequences: sequences a pack holds (K >= 1).
    max_predictions: predictions a pack holds (P).

  Returns:
    list of (strategy, count): strategy a tuple of `SequenceType`s; count the number of packs of
    it. Deterministic: it depends only on `counts` and the capacities.

  Raises:
    ValueError: for a type that does not fit a pack alone, or a capacity below 1.
  """
  _check_fits(counts, max_tokens, max_sequences, max_predictions)
  limits = (max_tokens, max_sequences, max_predictions)
  results = []
  for slot_aware in (False, True):
    if slot_aware:
      open_packs, closed, left = _fill_long_packs(counts, *limits)
    else:
      open_packs, closed, left = {}, collections.Counter(), dict(counts)
    _best_fit_decreasing(left, open_packs, closed, *limits)
    for group in open_packs.values():
      closed.update(group)
    results.append(closed)
  best = min(results, key=lambda packs: sum(packs.values()))  # the first of equals
  return sorted(best.items(), key=lambda entry: [(-t.length, -t.predictions) for t in entry[0]])


def assign_sequences(lengths, predictions, strategies, max_sequences):
  """Deals the sequences to the packs of `strategies`, each type's sequences in input order.

  Args:
    lengths, predictions: int [n], as given to `histogram`.
    strategies: what `pack_histogram` returned for their histogram.
    max_sequences: K, the width of the result.

  Returns:
    int64 [packs, K]: each pack's sequence indices in ascending (input) order, then -1.
  """
  lengths = np.asarray(lengths, np.int64)
  predictions = np.asarray(predictions, np.int64)
  order = np.lexsort((predictions, lengths))  # stable: input order within a type
  sorted_keys = np.stack([lengths[order], predictions[order]], axis=1)
  starts = {}
  if len(order):
    first = np.ones(len(order), bool)
    first[1:] = np.any(sorted_keys[1:] != sorted_keys[:-1], axis=1)
    for position in np.flatnonzero(first):
      starts[SequenceType(*map(int, sorted_keys[position]))] = int(position)
  num_packs = sum(count for _, count in strategies)
  packs = np.full((num_packs, max_sequences), -1, np.int64)
  row = 0
  for strategy, count in strategies:
    slots = collections.defaultdict(list)  # type -> its slots in the strategy
    for slot, item in enumerate(strategy):
      slots[item].append(slot)
    for item, columns in slots.items():  # the type's next sequences, pack after pack
      begin, end = starts[item], starts[item] + count * len(columns)
      packs[row:row + count, columns] = order[begin:end].reshape(count, len(columns))
      starts[item] = end
    row += count
  packs = np.where(packs < 0, np.iinfo(np.int64).max, packs)
  packs.sort(axis=1)
  return np.where(packs == np.iinfo(np.int64).max, -1, packs)


def pack_sequences(lengths, predictions, max_tokens, max_sequences, max_predictions, rng=None):
  """Packs sequences: the histogram, SPFHP, the sequences dealt, the packs shuffled.

  Args:
    lengths, predictions: int [n].
    max_tokens, max_sequences, max_predictions: a pack's capacity (`pack_histogram`).
    rng: np.random.Generator that shuffles the packs' order; None keeps the strategies' order.

  Returns:
    int64 [packs, K], as `assign_sequences`.
  """
  strategies = pack_histogram(histogram(lengths, predictions), max_tokens, max_sequences,
                              max_predictions)
  packs = assign_sequences(lengths, predictions, strategies, max_sequences)
  if rng is not None:
    packs = packs[rng.permutation(len(packs))]
  return packs
