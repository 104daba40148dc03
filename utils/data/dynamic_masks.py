"""Masks drawn while training: the masked-LM predictions of records that hold none (records made
with --dynamic_masking), drawn in the input pipeline anew for every (seed, record, epoch).

The rules are those of Google's create_pretraining_data.py, per sequence (each sequence of a
packed row on its own; docs/DATA.md, "Masks drawn while training"):
  - the candidates are the sequence's real tokens except [CLS] and [SEP];
  - n = min(max_predictions_per_seq, max(1, round(len * masked_lm_prob))) with len the sequence's
    real tokens ([CLS] and [SEP] included) and round half to even (Python 3's `round`, which is
    what the original's `int(round(...))` does under Python 3);
  - token level: the n candidates of the smallest noise[0] (ties: the lower position);
  - whole words: a word is a candidate that is not a "##" piece, or one right after a
    non-candidate ([CLS], [SEP]), followed by the "##" candidates after it; words are tried in
    order of the noise[0] of their first piece (ties: the lower position), each taken whole when
    it fits in what is left of n and skipped otherwise, until n are taken or the words run out;
  - each chosen token becomes [MASK] when noise[1] < 0.8 (always, with mask_token_only), stays
    itself when noise[1] < 0.9, else becomes floor(noise[2] * vocab_size) (the whole vocabulary,
    special tokens included, as in the original);
  - masked_lm_ids hold the original tokens.
The noise of a record is a stateless function of (seed, file base name, record index, epoch)
(`record_seed`, `record_noise`), so the masks do not depend on the worker count, the reading
order or a resume. `tests/numpy_masks.py` is the rules written as loops; the tests compare both.
"""

import collections

import tensorflow as tf

import tokenization

# What a masked token becomes: [MASK] when its noise[1] is below the first share, itself below
# the second, a random vocabulary id above (the original's 80/10/10).
MASK_TOKEN_BELOW = 0.8
KEEP_TOKEN_BELOW = 0.9
# The evaluation records' masking rate (fixed masks, as the generator writes them by default).
EVAL_MASKED_LM_PROB = 0.15
# record_seed's second word: the record index in the high bits, the epoch in the low ones.
EPOCH_BITS = 24
INDEX_BITS = 39
# The functions of this module are traced as written, not through AutoGraph (none has Python
# control flow on tensors), also when called from a function AutoGraph converts.
_as_written = tf.autograph.experimental.do_not_convert

# How masks are drawn: the fraction of each sequence's tokens to predict, at most
# max_predictions_per_seq of them; whole words or single tokens; mask_token_only: every chosen
# token becomes [MASK] (False: the 80/10/10 split of [MASK] / itself / a random id).
MaskingOptions = collections.namedtuple(
    "MaskingOptions",
    ["masked_lm_prob", "max_predictions_per_seq", "whole_word", "mask_token_only"])


def eval_options(max_predictions_per_seq):
  """The evaluation's masking: 15% of the tokens, at most `max_predictions_per_seq` per sequence,
  token level, 80/10/10 (what create_pretraining_data.py writes by default)."""
  return MaskingOptions(EVAL_MASKED_LM_PROB, max_predictions_per_seq, whole_word=False,
                        mask_token_only=False)


class MaskVocabulary(collections.namedtuple(
    "MaskVocabulary", ["vocab_size", "mask_id", "cls_id", "sep_id", "continuation"])):
  """What masking needs of a vocabulary: its size (random ids are drawn from [0, vocab_size)), the
  ids of [MASK], [CLS] and [SEP], and `continuation`, a tuple of vocab_size bools, True for the
  ids of "##" pieces."""
  __slots__ = ()

  @classmethod
  def from_file(cls, vocab_file):
    """The MaskVocabulary of a BERT vocab.txt (`tokenization.load_vocab`'s ids).

    Raises:
      ValueError: naming the file when it is missing or not UTF-8, or naming the file and the
        tokens when [MASK], [CLS] or [SEP] is absent.
    """
    vocab = tokenization.load_vocab(vocab_file)
    tokenization.check_special_tokens(vocab, vocab_file, required=("[CLS]", "[SEP]", "[MASK]"))
    # load_vocab's ids are 0..len-1 in the dict's order.
    continuation = tuple(token.startswith("##") for token in vocab)
    return cls(vocab_size=len(vocab), mask_id=vocab["[MASK]"], cls_id=vocab["[CLS]"],
               sep_id=vocab["[SEP]"], continuation=continuation)


@_as_written
def record_seed(seed, file_name, index, epoch):
  """The seed of one record's masks in one epoch.

  The first word is a 63-bit fingerprint (farmhash, `tf.strings.to_hash_bucket_fast`) of
  "<seed>/<base name of file_name>"; the second holds index << 24 | epoch. Distinct (seed, base
  name, index, epoch) give distinct seeds unless two (seed, base name) strings share a 63-bit
  fingerprint, or an index reaches 2**39 or an epoch 2**24 (they are taken modulo those).

  Args:
    seed: Python int, the job's seed (the same on every worker).
    file_name: scalar tf.string, the record's file; only its base name counts (after the last
      "/"), so the same files elsewhere give the same masks.
    index: int64 scalar, the record's position in its file.
    epoch: int64 scalar, the epoch.

  Returns:
    int64 Tensor [2], a seed for the stateless random ops.
  """
  base_name = tf.strings.regex_replace(file_name, "^.*/", "")
  key = tf.strings.to_hash_bucket_fast(tf.strings.join(["%d/" % seed, base_name]), 2**63 - 1)
  index = tf.bitwise.bitwise_and(tf.cast(index, tf.int64), 2**INDEX_BITS - 1)
  epoch = tf.bitwise.bitwise_and(tf.cast(epoch, tf.int64), 2**EPOCH_BITS - 1)
  counter = tf.bitwise.bitwise_or(tf.bitwise.left_shift(index, EPOCH_BITS), epoch)
  return tf.stack([key, counter])


@_as_written
def record_noise(seed_pair, seq_length):
  """The uniform noise a record's masks are drawn from, a function of `seed_pair` alone (Philox,
  whatever the device).

  Args:
    seed_pair: int64 [2], `record_seed`.
    seq_length: int, tokens per row.

  Returns:
    float32 Tensor [3, seq_length] in [0, 1): row 0 orders the candidates (words), row 1 picks
    [MASK] / itself / a random id, row 2 the random id.
  """
  return tf.random.stateless_uniform([3, seq_length], seed=seed_pair, dtype=tf.float32,
                                     alg="philox")


def _segment_totals(values, segments, num_segments):
  """For each position, the sum of `values` over the positions of its row with its segment.

  Args:
    values: int32 [batch, L].
    segments: int32 [batch, L] in [0, num_segments).
    num_segments: int.

  Returns:
    int32 [batch, L].
  """
  rows = tf.range(tf.shape(values)[0])[:, None]
  ids = rows * num_segments + segments
  totals = tf.math.unsorted_segment_sum(values, ids, tf.shape(values)[0] * num_segments)
  return tf.gather(totals, ids)


def _predictions_wanted(lengths, options):
  """n of each token's sequence: min(max_predictions_per_seq, max(1, round(len * prob))), round
  half to even in float64 as Python's `round`; int32 [batch, L] from lengths int32 [batch, L]."""
  wanted = tf.cast(tf.round(tf.cast(lengths, tf.float64) * options.masked_lm_prob), tf.int32)
  return tf.minimum(options.max_predictions_per_seq, tf.maximum(1, wanted))


def _word_starts(input_ids, sequence, candidate, vocab):
  """bool [batch, L]: the candidates that begin a word (not a "##" piece, or the first candidate
  after a non-candidate or at a sequence's start)."""
  continuation = tf.gather(tf.constant(vocab.continuation, tf.bool), input_ids)
  previous_candidate = tf.pad(candidate[:, :-1], [[0, 0], [1, 0]])
  previous_sequence = tf.pad(sequence[:, :-1], [[0, 0], [1, 0]])
  joins = continuation & previous_candidate & tf.equal(previous_sequence, sequence)
  return candidate & tf.logical_not(joins)


def _unit_order(noise_order, sequence, unit, seq_length):
  """The positions of the units (tokens or word starts) in the order they are tried.

  Args:
    noise_order: float32 [batch, L], noise[0].
    sequence: int32 [batch, L], each token's sequence number.
    unit: bool [batch, L].
    seq_length: L.

  Returns:
    (order int32 [batch, L], group int32 [batch, L]): order[b, q] is the position tried q-th:
    units by sequence number, then noise, then position; the other positions after them. group
    is the sequence number at each place of the order (L + 1 for the other positions).
  """
  by_noise = tf.argsort(noise_order, axis=1, stable=True)
  group = tf.where(unit, sequence, seq_length + 1)
  by_group = tf.argsort(tf.gather(group, by_noise, batch_dims=1), axis=1, stable=True)
  order = tf.gather(by_noise, by_group, batch_dims=1)
  return order, tf.gather(group, order, batch_dims=1)


def _first_n_tokens(group, wanted):
  """Token level: bool [batch, L], in the order of `_unit_order`: the first `wanted` units of each
  sequence (rank in its group < its n). group, wanted: int32 [batch, L] in that order."""
  group_start = tf.searchsorted(group, group, side="left", out_type=tf.int32)
  rank = tf.range(tf.shape(group)[1])[None, :] - group_start
  return rank < wanted


def _greedy_words(group, word_length, wanted):
  """Whole words: bool [batch, L], in the order of `_unit_order`: each word taken when it fits in
  what its sequence has left of n, else skipped (the original's rule).

  Args:
    group: int32 [batch, L], the sequence number at each place of the order.
    word_length: int32 [batch, L], pieces of the word starting there (0 for no word).
    wanted: int32 [batch, L], n of that sequence.
  """

  def step(state, place):
    current_group, taken, _ = state
    place_group, length, limit = place
    taken = tf.where(tf.equal(place_group, current_group), taken, 0)
    fits = (length > 0) & (taken + length <= limit)
    return place_group, taken + tf.where(fits, length, 0), fits

  time_major = [tf.transpose(t) for t in (group, word_length, wanted)]
  start = (tf.fill([tf.shape(group)[0]], -1), tf.zeros([tf.shape(group)[0]], tf.int32),
           tf.zeros([tf.shape(group)[0]], tf.bool))
  _, _, fits = tf.scan(step, tuple(time_major), initializer=start)
  return tf.transpose(fits)


def _chosen_tokens(candidate, sequence, noise_order, wanted, seq_length):
  """Token level: bool [batch, L], the n candidates of each sequence of the smallest noise."""
  order, group = _unit_order(noise_order, sequence, candidate, seq_length)
  taken = (_first_n_tokens(group, tf.gather(wanted, order, batch_dims=1))
           & tf.gather(candidate, order, batch_dims=1))
  return tf.gather(taken, tf.argsort(order, axis=1), batch_dims=1)  # back to positions


def _chosen_words(input_ids, candidate, sequence, noise_order, wanted, vocab, seq_length):
  """Whole words: bool [batch, L], the pieces of the words each sequence takes."""
  start = _word_starts(input_ids, sequence, candidate, vocab)
  word = tf.cumsum(tf.cast(start, tf.int32), axis=1)  # each candidate's word: 1, 2, ...
  length = tf.where(start, _segment_totals(tf.cast(candidate, tf.int32), word, seq_length + 1), 0)
  order, group = _unit_order(noise_order, sequence, start, seq_length)
  taken = _greedy_words(group, tf.gather(length, order, batch_dims=1),
                        tf.gather(wanted, order, batch_dims=1))
  taken_start = tf.gather(taken, tf.argsort(order, axis=1), batch_dims=1)  # back to positions
  return candidate & (_segment_totals(tf.cast(taken_start, tf.int32), word, seq_length + 1) > 0)


def _chosen_positions(input_ids, sequence, noise_order, options, vocab, seq_length):
  """bool [batch, L]: the positions to predict (the rules of the module's docstring)."""
  real = sequence > 0
  candidate = real & tf.not_equal(input_ids, vocab.cls_id) & tf.not_equal(input_ids, vocab.sep_id)
  lengths = _segment_totals(tf.cast(real, tf.int32), sequence, seq_length + 1)
  wanted = _predictions_wanted(lengths, options)
  if options.whole_word:
    return _chosen_words(input_ids, candidate, sequence, noise_order, wanted, vocab, seq_length)
  return _chosen_tokens(candidate, sequence, noise_order, wanted, seq_length)


def _replacements(input_ids, noise, options, vocab):
  """int32 [batch, L]: what each token becomes if chosen ([MASK] / itself / a random id),
  compared and multiplied exactly in float64."""
  mask = tf.fill(tf.shape(input_ids), tf.constant(vocab.mask_id, input_ids.dtype))
  if options.mask_token_only:
    return mask
  choice = tf.cast(noise[:, 1, :], tf.float64)
  random_ids = tf.cast(tf.floor(tf.cast(noise[:, 2, :], tf.float64) * vocab.vocab_size),
                       input_ids.dtype)
  return tf.where(choice < MASK_TOKEN_BELOW, mask,
                  tf.where(choice < KEEP_TOKEN_BELOW, input_ids, random_ids))


def _prediction_slots(input_ids, sequence, chosen, width, packed, seq_length):
  """The masked_lm_* features of the chosen positions (at most `width` of them per row).

  Returns:
    (positions int32, ids int32 (the original tokens), weights float32), each [batch, width]:
    the chosen positions in increasing order, then padding (0, 0, 0.0); the weight is 1.0, or
    packed the prediction's sequence number.
  """
  slots = min(width, seq_length)
  place = tf.range(seq_length)[None, :]
  _, first = tf.math.top_k(-tf.where(chosen, place, place + seq_length), k=slots, sorted=True)
  used = tf.range(slots)[None, :] < tf.reduce_sum(tf.cast(chosen, tf.int32), axis=1,
                                                  keepdims=True)
  positions = tf.where(used, first, 0)
  ids = tf.where(used, tf.gather(input_ids, first, batch_dims=1), 0)
  owner = tf.gather(sequence, first, batch_dims=1) if packed else tf.ones_like(first)
  weights = tf.where(used, tf.cast(owner, tf.float32), 0.0)
  padding = [[0, 0], [0, width - slots]]
  return tf.pad(positions, padding), tf.pad(ids, padding), tf.pad(weights, padding)


@_as_written
def draw_masks(features, noise, options, vocab, width, packed):
  """Masks a parsed batch of records that hold none.

  Args:
    features: dict of the parsed batch: input_ids, input_mask, segment_ids int32 [batch, L] (L
      static), any other features (passed through). input_mask is 1 for a real token, 0 for
      padding; in packed rows (`packed`) each token's sequence number 1..k
      (utils/data/record_layout.py).
    noise: float32 [batch, 3, L] in [0, 1), `record_noise` of each record.
    options: MaskingOptions.
    vocab: MaskVocabulary.
    width: int, P, the width of the masked_lm_* features. A row whose predictions exceed it keeps
      the first P by position (the others stay unmasked); unpacked P >= max_predictions_per_seq,
      packed min(L, round(L * masked_lm_prob) + K) never let that happen.
    packed: the rows are packed (the weights then hold sequence numbers).

  Returns:
    the features with input_ids masked and masked_lm_positions, masked_lm_ids (the original
    tokens) int32 [batch, P] and masked_lm_weights float32 [batch, P] added: the predictions by
    position, then padding slots (0, 0, 0.0); the weight is 1.0, or packed the prediction's
    sequence number (as packed records hold it).

  Raises:
    ValueError: when input_ids is not int32 of a static length.
  """
  input_ids = features["input_ids"]
  seq_length = tf.compat.dimension_value(input_ids.shape[-1])
  if input_ids.dtype != tf.int32 or seq_length is None:
    raise ValueError("draw_masks: input_ids must be int32 [batch, L] with L known, got %s %s"
                     % (input_ids.dtype.name, input_ids.shape))
  sequence = tf.cast(features["input_mask"], tf.int32)
  chosen = _chosen_positions(input_ids, sequence, noise[:, 0, :], options, vocab, seq_length)
  chosen &= tf.cumsum(tf.cast(chosen, tf.int32), axis=1) <= width
  positions, ids, weights = _prediction_slots(input_ids, sequence, chosen, width, packed,
                                              seq_length)
  masked = dict(features)
  masked["input_ids"] = tf.where(chosen, _replacements(input_ids, noise, options, vocab),
                                 input_ids)
  masked.update(masked_lm_positions=positions, masked_lm_ids=ids, masked_lm_weights=weights)
  return masked
