"""Masked-LM / next-sentence TFRecords from raw text: the original's flags and format, faster.

Input: text files with one sentence per line and a blank line between documents. Output:
`tf.train.Example` records (docs/DESIGN.md section 3, the original release's features).

  python create_pretraining_data.py --input_file='corpus/*.txt' --output_file=OUT \\
      --vocab_file=vocab.txt --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=5

How it differs from the original (docs/DECISIONS.md, "Data"):
  * one task per input file, each in its own process, `--num_workers` at a time
    (`utils/runtime/worker_pool.py`): memory is bounded by one file, not the corpus. The random
    "next sentence" comes from another document of the same file.
  * `--output_file` lists one file per input file (input i -> output i), or fewer files, which then
    receive the input files round-robin, each input file's records contiguous.
  * the output depends only on the input, the flags and `--random_seed` (each file has its own
    random stream), not on `--num_workers`.
  * tokenisation runs in Rust (`tokenization.py`), sampling in Python on token offsets, masking,
    serialisation and TFRecord framing (CRC32C included) vectorised in numpy
    (`utils/data/record_encoder.py`). TensorFlow is not imported (except for "scheme://" paths).

The sampling semantics are the original's: a target length of max_seq_length - 3, shorter (uniform
in [2, max]) with probability `short_seq_prob`; segment A is the first 1..n-1 sentences of a chunk,
B the rest (actual next) or, half of the time or when the chunk has one sentence, text from a random
other document (and the unused sentences are put back); the longer segment loses tokens from a
random end until the pair fits; num_to_predict = min(max_predictions_per_seq,
max(1, round(len(tokens) * masked_lm_prob))) positions, never [CLS] or [SEP], 80% -> [MASK],
10% unchanged, 10% a random vocabulary token; with `--do_whole_word_mask`, a word and its "##"
pieces are masked together.
"""

import bisect
import collections
import functools
import glob
import os
import random
import shutil
import time

from absl import flags
from absl import logging
import numpy as np

import tokenization
from utils.core import errors
from utils.core import paths
from utils.data import record_encoder
from utils.runtime import output_lock
from utils.runtime import worker_pool

# The record encoder and the worker pool, importable from here as before they had modules of
# their own.
Crc32c = record_encoder.Crc32c
frame_records = record_encoder.frame_records
encode_varints = record_encoder.encode_varints
concat_rows = record_encoder.concat_rows
default_num_workers = worker_pool.default_num_workers

# Instances assembled, masked and serialised per numpy batch.
_BATCH_SIZE = 1024
# Feature order of the written tf.train.Example (as the original writes them).
FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                 "masked_lm_weights", "next_sentence_labels")

GeneratorOptions = collections.namedtuple("GeneratorOptions", [
    "max_seq_length", "max_predictions_per_seq", "masked_lm_prob", "short_seq_prob",
    "dupe_factor", "do_whole_word_mask", "random_seed"])

# A tokenised input file. tokens: int32 [num_tokens]; sentence_starts: int64 [num_sentences + 1]
# (sentence k is tokens[sentence_starts[k]:sentence_starts[k + 1]]); document_starts: int64
# [num_documents + 1] (document d is sentences document_starts[d] .. document_starts[d + 1] - 1).
Corpus = collections.namedtuple("Corpus", ["tokens", "sentence_starts", "document_starts"])


def validate_options(options):
  """Raises ValueError naming the flag when a generator option is out of range."""
  checks = [
      ("max_seq_length", options.max_seq_length >= 5, "an integer >= 5 ([CLS] A [SEP] B [SEP])"),
      ("max_predictions_per_seq", options.max_predictions_per_seq >= 1, "an integer >= 1"),
      ("max_predictions_per_seq", options.max_predictions_per_seq <= options.max_seq_length,
       "at most --max_seq_length"),
      ("masked_lm_prob", 0.0 < options.masked_lm_prob <= 1.0, "in (0, 1]"),
      ("short_seq_prob", 0.0 <= options.short_seq_prob <= 1.0, "in [0, 1]"),
      ("dupe_factor", options.dupe_factor >= 1, "an integer >= 1"),
      ("random_seed", options.random_seed >= 0, "an integer >= 0"),
  ]
  for name, ok, expected in checks:
    if not ok:
      raise ValueError("--%s must be %s, got %r" % (name, expected, getattr(options, name)))


def resolve_input_files(input_file):
  """Expands the comma-separated globs of `--input_file`.

  Args:
    input_file: str, comma-separated file names or glob patterns.

  Returns:
    list of paths: each pattern's matches sorted, patterns in the given order, duplicates dropped.

  Raises:
    ValueError: naming the patterns when nothing matches.
  """
  patterns = paths.split_list(input_file)
  files = paths.resolve_files(patterns)
  if not files:
    raise ValueError("--input_file: no file matches %s" % (", ".join(patterns) or "(empty)"))
  return files


def resolve_output_files(output_file, num_input_files):
  """Splits `--output_file` and checks there are not more outputs than input files.

  Returns:
    list of output paths; input file i is written to output i % len(list).

  Raises:
    ValueError: naming the flag when it is empty or lists more files than there are inputs.
  """
  outputs = paths.split_list(output_file)
  if not outputs:
    raise ValueError("--output_file is required")
  if len(set(outputs)) != len(outputs):
    raise ValueError("--output_file lists a file twice: %s" % output_file)
  if len(outputs) > num_input_files:
    raise ValueError("--output_file lists %d files but only %d input files matched: give at most "
                     "one output file per input file" % (len(outputs), num_input_files))
  return outputs


def load_tokenizer(vocab_file, do_lower_case):
  """This process's `tokenization.FullTokenizer` (`_tokenizer`), after checking the vocabulary has
  the special tokens.

  Raises:
    ValueError: naming the file when it is missing or lacks [UNK], [CLS], [SEP] or [MASK].
  """
  if not vocab_file:
    raise ValueError("--vocab_file is required")
  if not paths.is_file(vocab_file):
    raise ValueError("--vocab_file: vocabulary file not found: %s" % vocab_file)
  vocab = tokenization.load_vocab(vocab_file)
  tokenization.check_special_tokens(vocab, vocab_file)
  return _tokenizer(vocab_file, do_lower_case)


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
    ValueError: naming the file when it is not UTF-8 text.
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
  """The whole text of a UTF-8 file; ValueError naming the file when it is not UTF-8."""
  try:
    with paths.open_file(path, "rb") as reader:
      data = reader.read()
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError("input file %s is not UTF-8 text: %s" % (path, e))


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
      [n, width], "masked_lm_weights" as float32 [n, width].

  Returns:
    (flat uint8, row_lengths int64 [n]): the serialised examples back to back
    (`utils/data/record_encoder.py`).
  """
  return record_encoder.serialize_examples([
      record_encoder.Column(name, "float" if name == "masked_lm_weights" else "int64",
                            features[name])
      for name in FEATURE_NAMES])


# ---------------------------------------------------------------------------------------------
# One input file -> one stream of records.
# ---------------------------------------------------------------------------------------------


def file_random_generators(random_seed, file_index):
  """The two random streams of an input file: (random.Random, np.random.Generator)."""
  python_seed, numpy_seed = np.random.SeedSequence([random_seed, file_index]).spawn(2)
  return (random.Random(int(python_seed.generate_state(1, np.uint64)[0])),
          np.random.Generator(np.random.PCG64(numpy_seed)))


def instances_to_records(corpus, pairs, tokenizer, options, py_rng, np_rng, crc):
  """Masks and serialises pairs in batches; yields (TFRecord bytes, count) per batch."""
  vocab = tokenizer.vocab
  cls_id, sep_id, mask_id = vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]
  is_continuation = None
  if options.do_whole_word_mask:
    is_continuation = np.zeros(len(tokenizer.inv_vocab), bool)
    for token, token_id in vocab.items():
      is_continuation[token_id] = token.startswith("##")
  for begin in range(0, len(pairs), _BATCH_SIZE):
    batch = pairs[begin:begin + _BATCH_SIZE]
    input_ids, segment_ids, lengths, length_a = assemble_sequences(
        corpus.tokens, batch, options.max_seq_length, cls_id, sep_id)
    if options.do_whole_word_mask:
      positions = choose_whole_word_positions(
          input_ids, lengths, length_a, is_continuation, options.max_predictions_per_seq,
          options.masked_lm_prob, py_rng)
    else:
      positions = choose_masked_positions(lengths, length_a, options.max_predictions_per_seq,
                                          options.masked_lm_prob, np_rng)
    masked_positions, masked_ids, masked_weights = apply_masks(
        input_ids, positions, len(tokenizer.inv_vocab), mask_id, np_rng)
    features = {
        "input_ids": input_ids,
        "input_mask": (np.arange(options.max_seq_length)[None, :]
                       < lengths[:, None]).astype(np.int64),
        "segment_ids": segment_ids,
        "masked_lm_positions": masked_positions,
        "masked_lm_ids": masked_ids,
        "masked_lm_weights": masked_weights,
        "next_sentence_labels": batch[:, 4:5],
    }
    flat, row_lengths = serialize_examples(features)
    yield frame_records(crc, flat, row_lengths), len(batch)


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
  return Crc32c()


def _tokenizer(vocab_file, do_lower_case):
  """The tokenizer of this process for `vocab_file`, built again only when the file changes."""
  return _cached_tokenizer(vocab_file, do_lower_case, paths.local_stamp(vocab_file))


@functools.lru_cache(maxsize=4)
def _cached_tokenizer(vocab_file, do_lower_case, stamp):
  del stamp  # part of the cache key only
  return tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)


def _warm_up(tokenizer, options):
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
  tokenizer = _tokenizer(vocab_file, do_lower_case)
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





def create_pretraining_data(input_files, output_files, vocab_file, options, do_lower_case=True,
                            num_workers=None):
  """Writes the pretraining records of `input_files`.

  Args:
    input_files: list of text files (see `resolve_input_files`).
    output_files: list of at most len(input_files) paths; input file i goes to output
      i % len(output_files), the input files of one output in input order.
    vocab_file: vocabulary with [UNK], [CLS], [SEP] and [MASK].
    options: `GeneratorOptions`.
    do_lower_case: lower-case and strip accents (uncased models).
    num_workers: processes; default: all cores. The output does not depend on it.

  The outputs appear under their names only when the whole set is written: every file is written
  as "<name>.partial" (parts of a shared output as "<name>.part-NNNNN.partial"), and all are
  renamed at the end. A run that fails removes what it wrote; a run killed outright leaves only
  ".partial" files, which the next run over the same outputs removes first, with the outputs of
  earlier runs, so it starts clean.

  Returns:
    dict output path -> number of records written.

  Raises:
    ValueError: naming the problem (options, vocabulary, an input without any text, an output
      directory that cannot be created).
  """
  validate_options(options)
  tokenizer = load_tokenizer(vocab_file, do_lower_case)
  if not input_files:
    raise ValueError("no input files")
  _warm_up(tokenizer, options)
  num_workers = max(1, min(num_workers or default_num_workers(), len(input_files)))
  direct = len(output_files) == len(input_files)
  tasks = []
  parts = collections.OrderedDict((output, []) for output in output_files)  # in input order
  for index, path in enumerate(input_files):
    output = output_files[index % len(output_files)]
    target = _partial(output if direct else "%s.part-%05d" % (output, index))
    tasks.append((index, path, target, vocab_file, do_lower_case, options))
    parts[output].append(target)
  _start_clean(output_files)

  start = time.time()
  counts = [0] * len(input_files)
  done = 0
  try:
    for index, written in _run_tasks(tasks, num_workers):
      counts[index] = written
      done += 1
      elapsed = max(time.time() - start, 1e-9)
      logging.info("create_pretraining_data: %d/%d files, %d instances, %.0f instances/s",
                   done, len(input_files), sum(counts), sum(counts) / elapsed)
    if sum(counts) == 0:
      raise ValueError("empty corpus: no line of %s has a token" % ", ".join(input_files))
    if not direct:
      for output, output_parts in parts.items():
        _concatenate(output_parts, _partial(output))
    for output in output_files:  # the whole set is written: publish it
      paths.rename(_partial(output), output)
  except BaseException:
    # Leave nothing that could pass for a finished output.
    for task in tasks:
      paths.remove_if_exists(task[2])
    for output in output_files:
      paths.remove_if_exists(_partial(output))
      paths.remove_if_exists(output)
    raise
  totals = collections.OrderedDict((output, 0) for output in output_files)
  for index, count in enumerate(counts):
    totals[output_files[index % len(output_files)]] += count
  return totals


def _partial(path):
  """The name `path` is written under until the whole output set is complete."""
  return path + ".partial"


def _start_clean(output_files):
  """Creates the outputs' directories and removes what an earlier run left under their names.

  Raises:
    ValueError: naming --output_file when a directory cannot be created.
  """
  leftovers = []
  for output in output_files:
    directory = os.path.dirname(output)
    if directory:
      output_lock.make_directory(directory, flag="--output_file")
    if paths.is_remote(output):
      candidates = [output, _partial(output)]
    else:
      candidates = [output] + sorted(glob.glob(glob.escape(output) + ".partial")
                                     + glob.glob(glob.escape(output) + ".part-*"))
    for path in candidates:
      if path != output and (paths.is_remote(path) or os.path.exists(path)):
        leftovers.append(path)
      paths.remove_if_exists(path)
  if leftovers:
    logging.warning("removed the leftovers of an interrupted run: %s", ", ".join(leftovers))


def _run_tasks(tasks, num_workers):
  """Yields the results of `process_file` over `tasks`, in completion order.

  With several workers, each task runs in its own forked process (at most `num_workers` at a
  time, `utils/runtime/worker_pool.py`), so a process that dies is known by its task, and each
  file starts with fresh memory; the tokenizer of each gets its share of the cores.

  Raises:
    ValueError: a task's ValueError (bad input), re-raised with the input file named.
    RuntimeError: naming the input file, when its worker fails otherwise or dies (killed, out of
      memory).
  """
  threads = max(1, default_num_workers() // num_workers)
  results = worker_pool.run_tasks(process_file, tasks, num_workers,
                                  describe=lambda task: "input file %s" % task[1],
                                  passed_errors=(ValueError,),
                                  environ={"RAYON_NUM_THREADS": str(threads)})
  for _, result in results:
    yield result


def _concatenate(parts, output):
  """Concatenates the TFRecord files `parts` into `output` and removes them."""
  with paths.open_file(output, "wb") as writer:
    for part in parts:
      with paths.open_file(part, "rb") as reader:
        shutil.copyfileobj(reader, writer, 1 << 20)
  for part in parts:
    paths.remove_if_exists(part)


def define_flags():
  """Defines the command-line flags (the original's, plus --num_workers)."""
  flags.DEFINE_string("input_file", None,
                      "Input raw text files: comma-separated file names or glob patterns.")
  flags.DEFINE_string("output_file", None,
                      "Output TFRecord files, comma-separated: one per input file, or fewer.")
  flags.DEFINE_string("vocab_file", None, "The vocabulary file the BERT model uses.")
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the text (True for uncased models, False for cased ones).")
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Mask whole words (a word and its ## pieces) rather than single pieces.")
  flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Maximum number of masked LM predictions per sequence.")
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
  flags.DEFINE_integer("dupe_factor", 10,
                       "Number of passes over the input (each with different masks).")
  flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
  flags.DEFINE_float("short_seq_prob", 0.1,
                     "Probability of a sequence shorter than the maximum length.")
  flags.DEFINE_integer("num_workers", None,
                       "Processes working on input files in parallel (default: all cores).")
  flags.mark_flags_as_required(["input_file", "output_file", "vocab_file"])


def main(_):
  flag_values = flags.FLAGS
  options = GeneratorOptions(
      max_seq_length=flag_values.max_seq_length,
      max_predictions_per_seq=flag_values.max_predictions_per_seq,
      masked_lm_prob=flag_values.masked_lm_prob, short_seq_prob=flag_values.short_seq_prob,
      dupe_factor=flag_values.dupe_factor, do_whole_word_mask=flag_values.do_whole_word_mask,
      random_seed=flag_values.random_seed)
  try:
    if flag_values.num_workers is not None and flag_values.num_workers < 1:
      raise ValueError("--num_workers must be >= 1, got %d" % flag_values.num_workers)
    validate_options(options)
    load_tokenizer(flag_values.vocab_file, flag_values.do_lower_case)
    input_files = resolve_input_files(flag_values.input_file)
    output_files = resolve_output_files(flag_values.output_file, len(input_files))
    logging.info("create_pretraining_data: %d input files -> %d output files, %d workers",
                 len(input_files), len(output_files),
                 min(flag_values.num_workers or default_num_workers(), len(input_files)))
    totals = create_pretraining_data(input_files, output_files, flag_values.vocab_file, options,
                                     do_lower_case=flag_values.do_lower_case,
                                     num_workers=flag_values.num_workers)
  except ValueError as e:
    # Bad flags or input: one line naming the problem, exit status 2.
    raise errors.UsageError(str(e))
  except RuntimeError as e:
    # A dead worker: one line naming its file, exit status 1.
    raise SystemExit("create_pretraining_data: error: %s" % e)
  for output, count in totals.items():
    logging.info("wrote %d instances to %s", count, output)
  logging.info("wrote %d instances in total", sum(totals.values()))


if __name__ == "__main__":
  # Imported by the script only: it defines --verbose. pylint: disable=g-import-not-at-top
  from utils.runtime import cli
  define_flags()
  cli.run_main(main)
