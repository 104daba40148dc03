"""Masks drawn while training (utils/data/dynamic_masks.py): the TensorFlow masks equal the loop
reference of tests/numpy_masks.py for the same noise, their statistics over many rows match the
rules (rate, 80/10/10 split, whole words, packed rows), and the noise is a function of (seed, file
base name, record index, epoch).

Every graph runs through a tf.data map with an unknown batch size, as the input pipeline runs it.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests import numpy_masks
from utils.data import dynamic_masks as dm

_tf1 = tf.compat.v1

# The test vocabulary: special tokens away from ids 0..4 and "##" pieces between the words, so an
# id taken for granted or a wrong continuation table shows.
TOKENS = (["[PAD]", "[UNK]", "w0", "w1", "##a", "w2", "##b", "[MASK]", "w3", "##c", "w4", "w5",
           "[CLS]", "[SEP]", "##d", "w6", "##e", "w7"] + ["x%d" % i for i in range(10)]
          + ["##y%d" % i for i in range(6)])
CONTINUATION = tuple(token.startswith("##") for token in TOKENS)
VOCAB = dm.MaskVocabulary(vocab_size=len(TOKENS), mask_id=7, cls_id=12, sep_id=13,
                          continuation=CONTINUATION)
CLS, SEP, MASK = 12, 13, 7
WORD_IDS = [i for i, t in enumerate(TOKENS) if not t.startswith("[") and not t.startswith("##")]
PIECE_IDS = [i for i, t in enumerate(TOKENS) if t.startswith("##")]
CANDIDATE_IDS = [i for i in range(len(TOKENS)) if i not in (CLS, SEP)]


def write_vocab(path, tokens):
  path.write_text("".join(token + "\n" for token in tokens))
  return str(path)


# ---------------------------------------------------------------------------------------------
# Rows and running the graph
# ---------------------------------------------------------------------------------------------


def sequence_ids(rng, length, piece_rate):
  """One sequence of `length` tokens: [CLS] A [SEP] B [SEP], A and B of random word and "##" ids
  (a "##" piece may open A or B, as truncation leaves it); also [MASK] and [UNK] as text."""
  body = np.where(rng.random(length) < piece_rate, rng.choice(PIECE_IDS, length),
                  rng.choice(WORD_IDS + [MASK, 1], length))
  ids = [CLS] + body[:length - 3].tolist() + [SEP]
  split = int(rng.integers(2, length - 1))
  ids.insert(split, SEP)
  return ids


def make_rows(rng, batch, seq_length, lengths, piece_rate=0.4):
  """features (numpy int32) of `batch` rows; lengths(rng) -> the lengths of a row's sequences
  (one: unpacked; several: packed, input_mask numbering them 1..k)."""
  input_ids = np.zeros((batch, seq_length), np.int32)
  input_mask = np.zeros((batch, seq_length), np.int32)
  segment_ids = np.zeros((batch, seq_length), np.int32)
  for row in range(batch):
    start = 0
    for number, length in enumerate(lengths(rng), 1):
      ids = sequence_ids(rng, length, piece_rate)
      input_ids[row, start:start + length] = ids
      input_mask[row, start:start + length] = number
      second = ids.index(SEP) + 1
      segment_ids[row, start + second:start + length] = 1
      start += length
    assert start <= seq_length
  return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
          "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32)}


def run_masks_cases(cases, vocab=VOCAB):
  """dynamic_masks.draw_masks of each (features, noise, options, width, packed) of `cases`
  (numpy), each in a tf.data map (batch size unknown), all in one graph: [dict of arrays]."""
  with tf.Graph().as_default():
    batches = []
    for features, noise, options, width, packed in cases:
      dataset = tf.data.Dataset.from_tensor_slices((features, noise)).batch(len(noise)).map(
          lambda f, n, o=options, w=width, p=packed: dm.draw_masks(f, n, o, vocab, w, p))
      batches.append(_tf1.data.make_one_shot_iterator(dataset).get_next())
    with _tf1.Session() as session:
      return session.run(batches)


def run_masks(features, noise, options, width, packed):
  """`run_masks_cases` of one case."""
  return run_masks_cases([(features, noise, options, width, packed)])[0]


def record_noises(records, seq_length):
  """record_noise of each (seed, file name, index, epoch) of `records`, through a tf.data map per
  seed, in one graph: float32 [len(records), 3, seq_length]."""
  seeds = sorted({record[0] for record in records})
  with tf.Graph().as_default():
    batches = []
    for seed in seeds:
      names, indices, epochs = zip(*[record[1:] for record in records if record[0] == seed])
      dataset = tf.data.Dataset.from_tensor_slices(
          (list(names), np.array(indices, np.int64), np.array(epochs, np.int64))).map(
              lambda f, i, e, seed=seed: dm.record_noise(dm.record_seed(seed, f, i, e),
                                                         seq_length))
      batches.append(_tf1.data.make_one_shot_iterator(dataset.batch(len(names))).get_next())
    with _tf1.Session() as session:
      by_seed = dict(zip(seeds, [list(batch) for batch in session.run(batches)]))
  return np.stack([by_seed[record[0]].pop(0) for record in records])


def assert_cases_equal_numpy(cases):
  """Runs `cases` (`run_masks_cases`) and compares each output with tests/numpy_masks.py's."""
  outputs = run_masks_cases(cases)
  for (features, noise, options, width, packed), got in zip(cases, outputs):
    want = numpy_masks.draw_masks(features, noise, options, VOCAB, width, packed)
    assert sorted(got) == sorted(want)
    for name in want:
      np.testing.assert_array_equal(got[name], want[name], err_msg="%s %s" % (name, options))
      assert got[name].dtype == np.asarray(want[name]).dtype, name
  return outputs


def packed_lengths(rng):
  return rng.integers(4, 14, 3)


def unpacked_lengths(rng):
  return [int(rng.integers(4, 25))]


# ---------------------------------------------------------------------------------------------
# The same masks as the numpy reference
# ---------------------------------------------------------------------------------------------


def test_unpacked_rows_equal_the_numpy_reference():
  rng = np.random.default_rng(1)
  cases = []
  for whole_word in (False, True):
    for mask_token_only in (False, True):
      features = make_rows(rng, 64, 24, unpacked_lengths)
      noise = rng.random((64, 3, 24)).astype(np.float32)
      cases.append((features, noise, dm.MaskingOptions(0.2, 4, whole_word, mask_token_only), 4,
                    False))
  for (features, _, options, _, _), got in zip(cases, assert_cases_equal_numpy(cases)):
    # Not an empty agreement: most rows predict (a row of whole words may have none that
    # fits), and the split happens.
    assert (got["masked_lm_weights"].sum(axis=1) > 0).mean() > 0.9
    replaced = got["input_ids"][got["input_ids"] != features["input_ids"]]
    assert replaced.size and (replaced == MASK).all() == options.mask_token_only


def test_packed_rows_of_three_sequences_equal_the_numpy_reference():
  rng = np.random.default_rng(5)
  cases = [(make_rows(rng, 48, 40, packed_lengths), rng.random((48, 3, 40)).astype(np.float32),
            dm.MaskingOptions(0.25, 3, whole_word, False), 9, True)
           for whole_word in (False, True)]
  for got in assert_cases_equal_numpy(cases):
    assert set(got["masked_lm_weights"].ravel().tolist()) == {0.0, 1.0, 2.0, 3.0}


def test_ties_width_cuts_and_a_width_beyond_the_row_equal_the_numpy_reference():
  rng = np.random.default_rng(9)
  cases = []
  for whole_word in (False, True):
    # Noise of four values: many ties, broken by position. A width below the row's predictions:
    # the first ones by position are kept.
    noise = (np.floor(rng.random((64, 3, 40)) * 4) / 4).astype(np.float32)
    noise[:, 2] = rng.random((64, 40))
    cases.append((make_rows(rng, 64, 40, packed_lengths), noise,
                  dm.MaskingOptions(0.4, 5, whole_word, False), 4, True))
    # A width beyond the row's length.
    cases.append((make_rows(rng, 16, 6, lambda rng: [int(rng.integers(4, 7))]),
                  rng.random((16, 3, 6)).astype(np.float32),
                  dm.MaskingOptions(0.5, 8, whole_word, False), 8, False))
  outputs = assert_cases_equal_numpy(cases)
  for got in outputs[::2]:
    assert (got["masked_lm_weights"] > 0).sum(axis=1).max() == 4


# ---------------------------------------------------------------------------------------------
# Rules checked by hand
# ---------------------------------------------------------------------------------------------


def test_counts_round_half_to_even_per_sequence_of_a_packed_row():
  # Sequences of 9 and 5 tokens at a rate of 0.5: 4.5 -> 4 and 2.5 -> 2 predictions (half up
  # would predict 5 and 3; the candidates are 6 and 3).
  ids = [CLS, 2, 3, 5, SEP, 8, 10, 11, SEP, CLS, 2, 3, 5, SEP, 0, 0]
  features = {"input_ids": np.array([ids], np.int32),
              "input_mask": np.array([[1] * 9 + [2] * 5 + [0, 0]], np.int32),
              "segment_ids": np.zeros((1, 16), np.int32)}
  noise = np.full((1, 3, 16), 0.5, np.float32)
  noise[0, 0] = np.linspace(0.9, 0.0, 16)  # later positions first
  got = run_masks(features, noise, dm.MaskingOptions(0.5, 10, False, True), width=8, packed=True)
  # Sequence 1: candidates 1, 2, 3, 5, 6, 7 -> the last four; sequence 2: 10, 11, 12 -> 11, 12.
  np.testing.assert_array_equal(got["masked_lm_positions"], [[3, 5, 6, 7, 11, 12, 0, 0]])
  np.testing.assert_array_equal(got["masked_lm_ids"], [[5, 8, 10, 11, 3, 5, 0, 0]])
  np.testing.assert_array_equal(got["masked_lm_weights"], [[1, 1, 1, 1, 2, 2, 0, 0]])
  want_ids = np.array(ids)
  want_ids[[3, 5, 6, 7, 11, 12]] = MASK
  np.testing.assert_array_equal(got["input_ids"], [want_ids])


def test_a_piece_after_sep_is_its_own_word_and_a_word_that_does_not_fit_is_skipped():
  # [CLS] w0 ##a w1 [SEP] ##b w2 [SEP]: 8 tokens at 0.25 -> 2 predictions. Noise order: ##b
  # (position 5), then w0 ##a (1, 2), then w1 (3), then w2 (6). ##b is a word of one piece after
  # [SEP] (Google's loop would append it to w1 across [SEP] and take w0 ##a first); w0 ##a does
  # not fit then (1 + 2 > 2) and is skipped; w1 is taken.
  ids = [CLS, 2, 4, 3, SEP, 6, 5, SEP]
  features = {"input_ids": np.array([ids], np.int32), "input_mask": np.ones((1, 8), np.int32),
              "segment_ids": np.array([[0, 0, 0, 0, 0, 1, 1, 1]], np.int32)}
  noise = np.zeros((1, 3, 8), np.float32)
  noise[0, 0] = [0.9, 0.2, 0.0, 0.3, 0.9, 0.1, 0.4, 0.9]  # ##a's own noise does not count
  noise[0, 1] = [0.0, 0.0, 0.0, 0.95, 0.0, 0.85, 0.0, 0.0]  # w1: random id, ##b: itself
  noise[0, 2] = [0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0]
  got = run_masks(features, noise, dm.MaskingOptions(0.25, 5, True, False), width=3,
                  packed=False)
  np.testing.assert_array_equal(got["masked_lm_positions"], [[3, 5, 0]])
  np.testing.assert_array_equal(got["masked_lm_ids"], [[3, 6, 0]])
  np.testing.assert_array_equal(got["masked_lm_weights"], [[1.0, 1.0, 0.0]])
  # w1 becomes floor(0.5 * 34) = 17, ##b stays itself.
  np.testing.assert_array_equal(got["input_ids"], [[CLS, 2, 4, len(TOKENS) // 2, SEP, 6, 5, SEP]])


def test_other_features_pass_through_and_eval_options():
  rng = np.random.default_rng(3)
  features = make_rows(rng, 4, 16, lambda rng: [int(rng.integers(4, 17))])
  got = run_masks(features, rng.random((4, 3, 16)).astype(np.float32), dm.eval_options(3), 3,
                  False)
  for name in ("input_mask", "segment_ids", "next_sentence_labels"):
    np.testing.assert_array_equal(got[name], features[name])
  assert dm.eval_options(7) == dm.MaskingOptions(0.15, 7, False, False)


def test_input_ids_of_another_type_are_refused():
  with tf.Graph().as_default():
    features = {"input_ids": tf.zeros([2, 8], tf.int64), "input_mask": tf.ones([2, 8], tf.int32)}
    with pytest.raises(ValueError, match="int32"):
      dm.draw_masks(features, tf.zeros([2, 3, 8]), dm.eval_options(2), VOCAB, 2, False)


# ---------------------------------------------------------------------------------------------
# Statistics over many rows, noise from record_noise
# ---------------------------------------------------------------------------------------------


def wanted(length, prob, most):
  return min(most, max(1, round(length * prob)))


def bounds(count, p, sigmas=5.0):
  """A two-sided binomial range of `count` draws at probability `p`."""
  spread = sigmas * np.sqrt(count * p * (1 - p))
  return count * p - spread, count * p + spread


def test_token_level_statistics():
  rows, seq_length = 3000, 32
  rng = np.random.default_rng(11)
  template = make_rows(rng, 1, seq_length, lambda rng: [30])
  features = {name: np.repeat(value, rows, axis=0) for name, value in template.items()}
  noise = record_noises([(17, "data/train-0.tfrecord", i, 0) for i in range(rows)],
                        seq_length)
  got = run_masks(features, noise, dm.eval_options(20), 20, False)
  ids = features["input_ids"][0]
  candidates = [p for p in range(30) if ids[p] not in (CLS, SEP)]
  n = wanted(30, 0.15, 20)  # round(4.5) = 4
  weights = got["masked_lm_weights"]
  assert ((weights > 0).sum(axis=1) == n).all()
  positions = got["masked_lm_positions"][:, :n]
  assert (np.diff(positions, axis=1) > 0).all()
  assert set(positions.ravel().tolist()) <= set(candidates)  # never [CLS], [SEP], padding
  np.testing.assert_array_equal(got["masked_lm_ids"][:, :n], ids[positions])
  # Uniform over the candidates: each is chosen in n / 27 of the rows.
  chosen_counts = np.bincount(positions.ravel(), minlength=seq_length)[candidates]
  low, high = bounds(rows, n / len(candidates))
  assert low < chosen_counts.min() and chosen_counts.max() < high
  # Nothing else changes.
  untouched = np.ones(features["input_ids"].shape, bool)
  np.put_along_axis(untouched, positions, False, axis=1)
  np.testing.assert_array_equal(got["input_ids"][untouched], features["input_ids"][untouched])
  # 80% [MASK], 10% the token, 10% a random id of the whole vocabulary (which may be either).
  # Counted where the text held no [MASK] itself.
  text = ids[positions] != MASK
  original = ids[positions][text]
  out = np.take_along_axis(got["input_ids"], positions, axis=1)[text]
  total, size = out.size, len(TOKENS)
  for share, observed in ((0.8 + 0.1 / size, out == MASK),
                          (0.1 + 0.1 / size, out == original)):
    low, high = bounds(total, share)
    assert low < observed.sum() < high
  random_ids = out[(out != MASK) & (out != original)]
  assert set(random_ids.tolist()) == set(range(size)) - {MASK}


def test_whole_word_statistics_in_packed_rows():
  rows, seq_length = 1500, 48
  rng = np.random.default_rng(12)
  features = make_rows(rng, rows, seq_length, lambda rng: rng.integers(8, 17, 3), piece_rate=0.5)
  noise = record_noises([(17, "train-1.tfrecord", i, 3) for i in range(rows)], seq_length)
  options = dm.MaskingOptions(0.3, 6, True, False)
  got = run_masks(features, noise, options, width=18, packed=True)
  total_wanted = total_taken = 0
  for row in range(rows):
    ids, numbers = features["input_ids"][row], features["input_mask"][row]
    used = got["masked_lm_weights"][row] > 0
    chosen = set(got["masked_lm_positions"][row][used].tolist())
    # The predictions' weights are their sequence numbers.
    np.testing.assert_array_equal(got["masked_lm_weights"][row][used],
                                  numbers[sorted(chosen)])
    for number in range(1, 4):
      span = np.flatnonzero(numbers == number).tolist()
      words, word = [], None
      for p in span:
        if ids[p] in (CLS, SEP):
          word = None
        elif CONTINUATION[ids[p]] and word is not None:
          word.append(p)
        else:
          word = [p]
          words.append(word)
      n = wanted(len(span), 0.3, 6)
      taken = [w for w in words if chosen & set(w)]
      # Whole words only, inside the sequence, never more than n.
      assert all(set(w) <= chosen for w in taken)
      count = sum(len(w) for w in taken)
      assert count <= n and len(chosen & set(span)) == count
      # A word was skipped only because it did not fit.
      assert all(len(w) > n - count for w in words if w not in taken)
      total_wanted, total_taken = total_wanted + n, total_taken + count
  # Rarely short of n (only when every word left is too long).
  assert 0.9 * total_wanted < total_taken <= total_wanted
  assert len([p for p in got["masked_lm_positions"].ravel() if p]) == total_taken


# ---------------------------------------------------------------------------------------------
# The noise of a record
# ---------------------------------------------------------------------------------------------


def test_record_noise_is_a_function_of_seed_file_name_index_and_epoch():
  first = (5, "/data/a/part-00.tfrecord", 0, 2)
  # The same record again, and the same file in another directory or none.
  same = [first, (5, "gs://b/x/part-00.tfrecord", 0, 2), (5, "part-00.tfrecord", 0, 2)]
  # Another index, epoch, file or seed.
  others = [(5, "/data/a/part-00.tfrecord", 1, 2), (5, "/data/a/part-00.tfrecord", 7, 2),
            (5, "/data/a/part-00.tfrecord", 0, 3), (5, "/data/a/part-01.tfrecord", 0, 2),
            (6, "/data/a/part-00.tfrecord", 0, 2), (5, "/data/a/part-00.tfrecord", 1 << 24, 2)]
  noise = record_noises(same + others, 16)
  assert noise.shape == (9, 3, 16) and noise.dtype == np.float32
  assert noise.min() >= 0.0 and noise.max() < 1.0 and 0.35 < noise.mean() < 0.65
  for again in noise[1:3]:
    np.testing.assert_array_equal(again, noise[0])
  for other in noise[3:]:
    assert (other != noise[0]).mean() > 0.9
  # Built again in another graph: the same noise.
  np.testing.assert_array_equal(record_noises([first], 16)[0], noise[0])


def test_record_seeds_are_distinct_over_a_grid():
  with tf.Graph().as_default():
    seeds = [dm.record_seed(seed, name, index, epoch)
             for seed in (0, 1, 12345) for name in ("a", "b", "dir/a0", "a/0")
             for index in (0, 1, 2**38) for epoch in (0, 1, 2**23)]
    cut = dm.record_seed(1, "x", 5, 3)
    with _tf1.Session() as session:
      values, cut_value = session.run([seeds, cut])
  assert len({tuple(v) for v in values}) == len(values)
  assert cut_value[1] == (5 << 24) | 3


# ---------------------------------------------------------------------------------------------
# The vocabulary
# ---------------------------------------------------------------------------------------------


def test_mask_vocabulary_from_file(tmp_path):
  vocab = dm.MaskVocabulary.from_file(write_vocab(tmp_path / "vocab.txt", TOKENS))
  assert vocab == VOCAB


@pytest.mark.parametrize("missing", ["[MASK]", "[CLS]", "[SEP]"])
def test_mask_vocabulary_names_the_file_and_the_missing_token(tmp_path, missing):
  path = write_vocab(tmp_path / "vocab.txt", [t for t in TOKENS if t != missing])
  with pytest.raises(ValueError) as error:
    dm.MaskVocabulary.from_file(path)
  assert path in str(error.value) and missing in str(error.value)
  with pytest.raises(ValueError, match="not found: .*absent.txt"):
    dm.MaskVocabulary.from_file(str(tmp_path / "absent.txt"))
