"""The data generator's library: pretraining instances from tokenised text, sampled, masked and
serialised as TFRecords (docs/DESIGN.md section 3), one input file at a time
(`process_file`, which create_pretraining_data.py runs in its worker processes).

The sampling semantics are the original release's (create_pretraining_data.py's docstring lists
them); the work runs on token offsets in numpy, not on Python lists of strings. Each input file
has its own random streams (`file_random_generators`), so the output depends only on the input,
the options and the seed, not on how many processes share the files. TensorFlow is not imported.
"""

import bisect
import collections
import functools
import random

from absl import logging
import numpy as np

import tokenization
from utils.core import errors
from utils.core import paths
from utils.data import record_encoder

# Instances assembled, masked and serialised per numpy batch.
_BATCH_SIZE = 1024
# Feature order of the written tf.train.Example (as the original writes them).
FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                 "masked_lm_weights", "next_sentence_labels")

# The generator's options; dynamic_masking: the records hold the unmasked sequences and no
# masked_lm_* features (training draws the masks), and the masking options are not used.
GeneratorOptions = collections.namedtuple("GeneratorOptions", [
    "max_seq_length", "max_predictions_per_seq", "masked_lm_prob", "short_seq_prob",
    "dupe_factor", "do_whole_word_mask", "random_seed", "dynamic_masking"], defaults=[False])
# The features of a record without masks (--dynamic_masking), in FEATURE_NAMES order.
UNMASKED_FEATURE_NAMES = tuple(name for name in FEATURE_NAMES
                               if not name.startswith("masked_lm_"))


class InputDataError(errors.UsageError):
  """An input file's content cannot be used (not UTF-8, no text); the message names the file and
  the fix. A usage error (exit status 2), but of the data, not of a flag: the generator reports it
  without the hint to its flags."""


# A tokenised input file. tokens: int32 [num_tokens]; sentence_starts: int64 [num_sentences + 1]
# (sentence k is tokens[sentence_starts[k]:sentence_starts[k + 1]]); document_starts: int64
# [num_documents + 1] (document d is sentences document_starts[d] .. document_starts[d + 1] - 1).
Corpus = collections.namedtuple("Corpus", ["tokens", "sentence_starts", "document_starts"])


def read_corpus(input_file, tokenizer):
  """Reads and tokenises one input file.

  Lines are stripped; a blank line ends a document; lines without any token are dropped, and so
  are documents without any sentence (as the original).

  Args:
    input_file: path of a UTF-8 text file.
    tokenizer: `tokenization.FullTokenizer`.

  Returns:
    `Corpus`.

  Raises:
    InputDataError: naming the file and where, when it is not UTF-8 text.
  """
  text = _read_text(input_file)
  lines = []
  line_documents = []
  document = 0
  for line in text.split("\n"):
    line = line.strip()
    if line:
      lines.append(line)
      line_documents.append(document)
    else:
      document += 1
  del text
  ids, lengths = tokenizer.tokenize_lines_to_ids(lines)
  kept = lengths > 0
  sentence_lengths = lengths[kept]
  sentence_documents = np.asarray(line_documents, np.int64)[kept]
  sentence_starts = np.concatenate([[0], np.cumsum(sentence_lengths)]).astype(np.int64)
  new_document = np.flatnonzero(np.diff(sentence_documents) != 0) + 1
  num_sentences = len(sentence_lengths)
  document_starts = np.concatenate([[0], new_document, [num_sentences]]).astype(np.int64)
  if num_sentences == 0:
    document_starts = np.zeros([1], np.int64)
  return Corpus(tokens=ids, sentence_starts=sentence_starts, document_starts=document_starts)


def _read_text(path):
  """The whole text of a UTF-8 file; InputDataError naming the file, the offset and the line of
  the first byte that is not UTF-8."""
  with paths.open_file(path, "rb") as reader:
    data = reader.read()
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise InputDataError("%s: not UTF-8 text at byte offset %d (line %d): convert the file to "
                         "UTF-8" % (path, e.start, line)) from e


def truncation_counts(length_a, length_b, max_num_tokens):
  """How many tokens the original's truncation removes from each segment.

  The original removes one token at a time from the longer segment (B when they are equal) until
  the pair fits; this computes the totals directly.

  Returns:
    (removed_from_a, removed_from_b).
  """
  excess = length_a + length_b - max_num_tokens
  if excess <= 0:
    return 0, 0
  if length_a > length_b:
    removed_a, removed_b = min(excess, length_a - length_b), 0
  else:
    removed_a, removed_b = 0, min(excess, length_b - length_a)
  rest = excess - removed_a - removed_b
  return removed_a + rest // 2, removed_b + (rest + 1) // 2


def _random_end_cut(low, high, removed, rng):
  """Removes `removed` tokens from [low, high), each from the front or the back with p = 1/2."""
  if removed == 0:
    return low, high
  from_front = bin(rng.getrandbits(removed)).count("1")
  return low + from_front, high - (removed - from_front)


def sample_document_pairs(starts, document_starts, document_index, max_num_tokens, short_seq_prob,
                          rng, out):
  """Samples the (A, B) segment pairs of one document, as token offsets into the file's tokens.

  Args:
    starts: list, `Corpus.sentence_starts` of the file.
    document_starts: list, `Corpus.document_starts` of the file.
    document_index: the document to cut into pairs.
    max_num_tokens: max_seq_length - 3.
    short_seq_prob: probability of a shorter target length for this document.
    rng: `random.Random`.
    out: list; one tuple (a_start, a_end, b_start, b_end, is_random_next) is appended per pair.
  """
  num_documents = len(document_starts) - 1
  first, end = document_starts[document_index], document_starts[document_index + 1]
  target_seq_length = max_num_tokens
  if rng.random() < short_seq_prob:
    target_seq_length = rng.randint(2, max_num_tokens)
  chunk_first = first
  i = first
  while i < end:
    if i == end - 1 or starts[i + 1] - starts[chunk_first] >= target_seq_length:
      chunk_size = i + 1 - chunk_first
      a_sentences = 1 if chunk_size < 2 else rng.randint(1, chunk_size - 1)
      a_start, a_end = starts[chunk_first], starts[chunk_first + a_sentences]
      if chunk_size == 1 or rng.random() < 0.5:
        is_random_next = 1
        for _ in range(10):
          other = rng.randrange(num_documents)
          if other != document_index:
            break
        other_first, other_end = document_starts[other], document_starts[other + 1]
        start_sentence = rng.randrange(other_first, other_end)
        b_start = starts[start_sentence]
        # First sentence end at which B reaches its target length (at least one sentence).
        stop = bisect.bisect_left(starts, b_start + target_seq_length - (a_end - a_start),
                                  start_sentence + 1, other_end)
        b_end = starts[stop]
        i -= chunk_size - a_sentences  # the unused sentences start the next chunk
      else:
        is_random_next = 0
        b_start, b_end = a_end, starts[i + 1]
      removed_a, removed_b = truncation_counts(a_end - a_start, b_end - b_start, max_num_tokens)
      a_start, a_end = _random_end_cut(a_start, a_end, removed_a, rng)
      b_start, b_end = _random_end_cut(b_start, b_end, removed_b, rng)
      out.append((a_start, a_end, b_start, b_end, is_random_next))
      chunk_first = i + 1
    i += 1


def sample_pairs(corpus, options, rng):
  """All segment pairs of a file: `dupe_factor` passes over its documents.

  Returns:
    int64 [num_pairs, 5]: a_start, a_end, b_start, b_end (offsets into corpus.tokens),
    is_random_next.
  """
  starts = corpus.sentence_starts.tolist()
  document_starts = corpus.document_starts.tolist()
  pairs = []
  for _ in range(options.dupe_factor):
    for document_index in range(len(document_starts) - 1):
      sample_document_pairs(starts, document_starts, document_index, options.max_seq_length - 3,
                            options.short_seq_prob, rng, pairs)
  return np.asarray(pairs, np.int64).reshape([-1, 5])


def assemble_sequences(tokens, pairs, max_seq_length, cls_id, sep_id):
  """Builds `[CLS] A [SEP] B [SEP]` rows for a batch of pairs.

  Args:
    tokens: int32 [num_tokens], the file's tokens.
    pairs: int64 [n, 5] from `sample_pairs`.
    max_seq_length: row width L.
    cls_id, sep_id: ids of [CLS] and [SEP].

  Returns:
    (input_ids int64 [n, L], segment_ids int64 [n, L], lengths int64 [n] (real tokens),
     length_a int64 [n]).
  """
  a_start, a_end, b_start, b_end = (pairs[:, k:k + 1] for k in range(4))
  length_a = a_end - a_start
  length_b = b_end - b_start
  lengths = length_a + length_b + 3
  position = np.arange(max_seq_length, dtype=np.int64)[None, :]
  in_a = (position >= 1) & (position <= length_a)
  in_b = (position >= length_a + 2) & (position < lengths - 1)
  source = np.where(in_a, a_start + position - 1, b_start + position - length_a - 2)
  source = np.clip(source, 0, max(len(tokens) - 1, 0))
  input_ids = np.where(in_a | in_b, tokens[source], 0).astype(np.int64)
  input_ids[:, 0] = cls_id
  rows = np.arange(len(pairs))
  input_ids[rows, length_a[:, 0] + 1] = sep_id
  input_ids[rows, lengths[:, 0] - 1] = sep_id
  segment_ids = ((position >= length_a + 2) & (position < lengths)).astype(np.int64)
  return input_ids, segment_ids, lengths[:, 0], length_a[:, 0]


def num_to_predict(lengths, max_predictions_per_seq, masked_lm_prob):
  """min(max_predictions_per_seq, max(1, round(length * masked_lm_prob))), round half to even."""
  count = np.round(lengths.astype(np.float64) * masked_lm_prob).astype(np.int64)
  return np.minimum(max_predictions_per_seq, np.maximum(1, count))


def choose_masked_positions(lengths, length_a, max_predictions_per_seq, masked_lm_prob, rng):
  """Picks the positions to predict, uniformly among the tokens of A and B.

  Args:
    lengths: int64 [n] real tokens per row.
    length_a: int64 [n] tokens in segment A.
    max_predictions_per_seq: P.
    masked_lm_prob: fraction of tokens to predict.
    rng: `np.random.Generator`.

  Returns:
    int64 [n, P]: ascending positions, then padding with the value -1.
  """
  n = len(lengths)
  width = int(lengths.max()) if n else 0
  position = np.arange(width)[None, :]
  candidate = ((position >= 1) & (position < lengths[:, None] - 1)
               & (position != length_a[:, None] + 1))
  count = np.minimum(num_to_predict(lengths, max_predictions_per_seq, masked_lm_prob),
                     candidate.sum(axis=1))
  keys = np.where(candidate, rng.random((n, width)), 2.0)
  kth = min(max_predictions_per_seq, width) - 1
  smallest = np.argpartition(keys, kth, axis=1)[:, :kth + 1]
  order = np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1)
  chosen = np.take_along_axis(smallest, order, axis=1)
  chosen = np.where(np.arange(kth + 1)[None, :] < count[:, None], chosen, width)
  chosen = np.sort(chosen, axis=1)
  positions = np.full((n, max_predictions_per_seq), -1, np.int64)
  positions[:, :kth + 1] = np.where(chosen < width, chosen, -1)
  return positions


def choose_whole_word_positions(input_ids, lengths, length_a, is_continuation,
                                max_predictions_per_seq, masked_lm_prob, rng):
  """Like `choose_masked_positions`, but a word and its "##" pieces are chosen together.

  Words are taken in random order and skipped when they would exceed the count (the original's
  rule). A "##" piece belongs to the word before it only inside the same segment.

  Args:
    input_ids: int64 [n, L].
    lengths, length_a: int64 [n].
    is_continuation: bool [vocab_size], True for "##" pieces.
    max_predictions_per_seq, masked_lm_prob: as `choose_masked_positions`.
    rng: `random.Random`.

  Returns:
    int64 [n, P]: ascending positions, then -1 padding.
  """
  counts = num_to_predict(lengths, max_predictions_per_seq, masked_lm_prob).tolist()
  continuation = is_continuation[input_ids].tolist()
  positions = np.full((len(lengths), max_predictions_per_seq), -1, np.int64)
  for row, (length, first_sep, count) in enumerate(zip(lengths.tolist(), (length_a + 1).tolist(),
                                                        counts)):
    words = []
    for p in range(1, length - 1):
      if p == first_sep:
        continue
      if continuation[row][p] and words and words[-1][-1] == p - 1:
        words[-1].append(p)
      else:
        words.append([p])
    rng.shuffle(words)
    chosen = []
    for word in words:
      if len(chosen) >= count:
        break
      if len(chosen) + len(word) <= count:
        chosen.extend(word)
    chosen.sort()
    positions[row, :len(chosen)] = chosen
  return positions


def apply_masks(input_ids, positions, vocab_size, mask_id, rng):
  """Replaces the chosen tokens: 80% [MASK], 10% unchanged, 10% a uniformly random vocabulary id.

  Args:
    input_ids: int64 [n, L]; modified in place.
    positions: int64 [n, P] from `choose_*_positions` (-1 = padding).
    vocab_size: number of ids to draw the random replacements from.
    mask_id: id of [MASK].
    rng: `np.random.Generator`.

  Returns:
    (masked_lm_positions int64 [n, P], masked_lm_ids int64 [n, P], masked_lm_weights float32
     [n, P]), zero padded.
  """
  real = positions >= 0
  safe_positions = np.where(real, positions, 0)
  labels = np.take_along_axis(input_ids, safe_positions, axis=1)
  draw = rng.random(positions.shape)
  random_ids = rng.integers(0, vocab_size, size=positions.shape)
  replacement = np.where(draw < 0.8, mask_id, np.where(draw < 0.9, labels, random_ids))
  rows = np.broadcast_to(np.arange(len(positions))[:, None], positions.shape)
  input_ids[rows[real], positions[real]] = replacement[real]
  return (np.where(real, positions, 0), np.where(real, labels, 0), real.astype(np.float32))


def serialize_examples(features):
  """Serialises a batch of pretraining features as `tf.train.Example` protos (FEATURE_NAMES order).

  Args:
    features: dict name -> array with one row per example: the int features as int64
      [n, width], "masked_lm_weights" as float32 [n, width]; FEATURE_NAMES, or
      UNMASKED_FEATURE_NAMES for records without masks.

  Returns:
    (flat uint8, row_lengths int64 [n]): the serialised examples back to back
    (`utils/data/record_encoder.py`).
  """
  return record_encoder.serialize_examples([
      record_encoder.Column(name, "float" if name == "masked_lm_weights" else "int64",
                            features[name])
      for name in FEATURE_NAMES if name in features])


# ---------------------------------------------------------------------------------------------
# One input file -> one stream of records.
# ---------------------------------------------------------------------------------------------


def file_random_generators(random_seed, file_index):
  """The two random streams of an input file: (random.Random, np.random.Generator)."""
  python_seed, numpy_seed = np.random.SeedSequence([random_seed, file_index]).spawn(2)
  return (random.Random(int(python_seed.generate_state(1, np.uint64)[0])),
          np.random.Generator(np.random.PCG64(numpy_seed)))


def instances_to_records(corpus, pairs, tokenizer, options, py_rng, np_rng, crc):
  """Masks (unless options.dynamic_masking) and serialises pairs in batches; yields (TFRecord
  bytes, count) per batch. Without masks, neither random stream is drawn from."""
  vocab = tokenizer.vocab
  cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
  for begin in range(0, len(pairs), _BATCH_SIZE):
    batch = pairs[begin:begin + _BATCH_SIZE]
    input_ids, segment_ids, lengths, length_a = assemble_sequences(
        corpus.tokens, batch, options.max_seq_length, cls_id, sep_id)
    features = {
        "input_ids": input_ids,
        "input_mask": (np.arange(options.max_seq_length)[None, :]
                       < lengths[:, None]).astype(np.int64),
        "segment_ids": segment_ids,
        "next_sentence_labels": batch[:, 4:5],
    }
    if not options.dynamic_masking:
      features.update(_mask_batch(input_ids, lengths, length_a, tokenizer, options, py_rng,
                                  np_rng))
    flat, row_lengths = serialize_examples(features)
    yield record_encoder.frame_records(crc, flat, row_lengths), len(batch)


def _mask_batch(input_ids, lengths, length_a, tokenizer, options, py_rng, np_rng):
  """Chooses and applies the masks of a batch (`input_ids` int64 [n, L] modified in place).

  Returns:
    dict masked_lm_positions, masked_lm_ids (int64 [n, P]), masked_lm_weights (float32 [n, P]).
  """
  if options.do_whole_word_mask:
    positions = choose_whole_word_positions(
        input_ids, lengths, length_a, _continuation_table(tokenizer),
        options.max_predictions_per_seq, options.masked_lm_prob, py_rng)
  else:
    positions = choose_masked_positions(lengths, length_a, options.max_predictions_per_seq,
                                        options.masked_lm_prob, np_rng)
  masked = apply_masks(input_ids, positions, len(tokenizer.inv_vocab), tokenizer.vocab["[MASK]"],
                       np_rng)
  return dict(zip(("masked_lm_positions", "masked_lm_ids", "masked_lm_weights"), masked))


@functools.lru_cache(maxsize=4)
def _continuation_table(tokenizer):
  """bool [vocab_size]: True for the "##" pieces of the tokenizer's vocabulary."""
  is_continuation = np.zeros(len(tokenizer.inv_vocab), bool)
  for token, token_id in tokenizer.vocab.items():
    is_continuation[token_id] = token.startswith("##")
  return is_continuation


def _log_example(tokenizer, corpus, pair):
  """Logs the two segments of one pair (before masking), to see what the generator does."""
  tokens = corpus.tokens
  a = tokenizer.convert_ids_to_tokens(tokens[pair[0]:pair[1]].tolist())
  b = tokenizer.convert_ids_to_tokens(tokens[pair[2]:pair[3]].tolist())
  logging.info("example: [CLS] %s [SEP] %s [SEP] (is_random_next=%d)",
               " ".join(a), " ".join(b), pair[4])


@functools.lru_cache(maxsize=None)
def _crc32c():
  """The `Crc32c` of this process (its tables grow once)."""
  return record_encoder.Crc32c()


def cached_tokenizer(vocab_file, do_lower_case):
  """The tokenizer of this process for `vocab_file`, built again only when the file changes."""
  return _cached_tokenizer(vocab_file, do_lower_case, paths.local_stamp(vocab_file))


@functools.lru_cache(maxsize=4)
def _cached_tokenizer(vocab_file, do_lower_case, stamp):
  del stamp  # part of the cache key only
  return tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)


def warm_up(tokenizer, options):
  """Builds this process's tokenizer pipeline and CRC tables, which forked workers then inherit."""
  tokenizer.tokenize_lines_to_ids([])  # builds its pipeline
  id_bytes = len(record_encoder.varint(max(len(tokenizer.inv_vocab) - 1, 0)))
  position_bytes = len(record_encoder.varint(options.max_seq_length - 1))
  longest_record = (options.max_seq_length * (id_bytes + 2)
                    + options.max_predictions_per_seq * (position_bytes + id_bytes + 4) + 256)
  _crc32c().grow(longest_record)


def process_file(task):
  """Turns one input file into TFRecords.

  Args:
    task: (file_index, input_file, output_path, vocab_file, do_lower_case, options);
      `output_path` is a ".partial" name that the caller publishes when the whole set is written.

  Returns:
    (file_index, number of records written).
  """
  file_index, input_file, output_path, vocab_file, do_lower_case, options = task
  tokenizer = cached_tokenizer(vocab_file, do_lower_case)
  py_rng, np_rng = file_random_generators(options.random_seed, file_index)
  corpus = read_corpus(input_file, tokenizer)
  num_documents = len(corpus.document_starts) - 1
  if num_documents == 0:
    logging.warning("%s: no text (no line with a token); its output is empty", input_file)
  elif num_documents == 1:
    logging.warning("%s: a single document, so the random next sentences come from the same "
                    "document (use more documents per file)", input_file)
  pairs = sample_pairs(corpus, options, py_rng)
  pairs = pairs[np_rng.permutation(len(pairs))]
  if file_index == 0 and len(pairs):
    _log_example(tokenizer, corpus, pairs[0])
  crc = _crc32c()
  written = 0
  with paths.open_file(output_path, "wb") as writer:
    for framed, count in instances_to_records(corpus, pairs, tokenizer, options, py_rng, np_rng,
                                              crc):
      writer.write(framed.tobytes())
      written += count
  return file_index, written
