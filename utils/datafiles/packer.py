"""Pretraining records packed into rows of several sequences, and packed rows unpacked back: the
runs over files that `pack_pretraining_data.py` and `prepare_corpus.py --pack` share
(docs/DATA.md, "Packed records").

  result = packer.pack_files(input_files, output_files, max_seq_length=512)

The input's records are read in input order in chunks of at most `chunk_sequences` (chunks of
equal size, which may span files), and each chunk is packed on its own histogram of (length,
predictions) by shortest-pack-first histogram packing (`utils/data/packing.py`), so memory is
bounded by a chunk. Each output gets an equal contiguous share of every chunk's packs. A pack
holds at most max_seq_length tokens, max_sequences_per_pack sequences and
max_predictions_per_seq + max_sequences_per_pack predictions. The packs of a chunk are shuffled
with the random seed and the chunk's index; the output depends only on the input and the
arguments, not on the number of workers (chunks run in parallel, `utils/runtime/worker_pool.py`).

Outputs are written as ".partial" files and renamed when the whole set is written
(`utils/runtime/output_set.py`); a run that fails or is killed leaves no output under a final
name. TensorFlow is loaded with this module (the records' checks read through it).
"""

import collections
import functools
import time

from absl import logging
import numpy as np

from utils.core import paths
from utils.data import packed_records
from utils.data import packing
from utils.data import record_encoder
from utils.data import records
from utils.runtime import output_set
from utils.runtime import worker_pool

DEFAULT_MAX_SEQUENCES_PER_PACK = 3
# Bytes of parsed arrays a chunk may hold by default (`default_chunk_sequences`): a few hundred MB
# with the serialised records and the packed arrays beside them.
DEFAULT_CHUNK_BYTES = 128 << 20

# Packs serialised at a time.
WRITE_PACKS = 4096

# One chunk of the input: its index, its records as (file, first record, records) segments in
# input order, and the ".partial" file of each output its packs are written to.
Chunk = collections.namedtuple("Chunk", ["index", "segments", "targets"])
# What a chunk packed: sequences, packs, real tokens.
ChunkStats = collections.namedtuple("ChunkStats", ["sequences", "packs", "tokens"])


def default_chunk_sequences(widths):
  """Sequences per chunk such that their int64 arrays take about DEFAULT_CHUNK_BYTES."""
  per_sequence = 8 * sum(widths.values())
  return max(1024, DEFAULT_CHUNK_BYTES // per_sequence)


def first_record_widths(input_files):
  """The feature widths of the input, checked to agree between the files' first records, and the
  number of records of each file (its framing checked whole). Empty files are passed over.

  Returns:
    (widths dict name -> width, list of record counts).

  Raises:
    packed_records.PackingInputError: naming the file: unreadable or corrupt, not unpacked
      pretraining records, widths that differ from the first file's; or no record at all.
  """
  widths, reference, counts = None, None, []
  for path in input_files:
    check = records.check_record_file(path)
    counts.append(check.records)
    if check.problem == "the file has no records":
      logging.warning("pack_pretraining_data: %s holds no record", path)
      continue
    if check.problem:
      raise packed_records.PackingInputError("%s: %s" % (path, check.problem))
    got = packed_records.record_widths(packed_records.read_features(path, 0, 1))
    if widths is not None and set(got) != set(widths):
      raise packed_records.PackingInputError(
          "%s: record 0 %s masks, but %s %s: give records of one kind" % (
              path, "has" if packed_records.has_masks(got) else "has no", reference,
              "has" if packed_records.has_masks(widths) else "has none"))
    if widths is not None and got != widths:
      differ = [name for name in widths if widths[name] != got[name]]
      raise packed_records.PackingInputError(
          "%s: record 0: the widths of %s are %s, but %s in %s" % (
              path, ", ".join(differ), ", ".join(str(got[n]) for n in differ),
              ", ".join(str(widths[n]) for n in differ), reference))
    widths, reference = got, reference or path
  if widths is None:
    raise packed_records.PackingInputError("no record in the input files %s"
                                           % ", ".join(input_files))
  return widths, counts


def plan_chunks(input_files, counts, output_files, chunk_sequences):
  """The chunks of the input's records, taken in input order, and the ".partial" parts of every
  output.

  Args:
    input_files, counts: the files and their record counts.
    output_files: the outputs; each gets a share of every chunk's packs.
    chunk_sequences: records per chunk at most; the chunks are of equal size (+-1) and may span
      files.

  Returns:
    (list of Chunk, ordered dict output -> its parts in chunk order).
  """
  total = sum(counts)
  num_chunks = max(1, -(-total // chunk_sequences))
  bounds = [total * k // num_chunks for k in range(num_chunks + 1)]
  file_starts = np.cumsum([0] + list(counts))
  chunks = []
  for index, (begin, end) in enumerate(zip(bounds[:-1], bounds[1:])):
    segments = []
    for path, file_start, count in zip(input_files, file_starts[:-1], counts):
      first, stop = max(begin, file_start), min(end, file_start + count)
      if first < stop:
        segments.append((path, int(first - file_start), int(stop - first)))
    targets = tuple("%s.part-%05d.partial" % (output, index) for output in output_files)
    chunks.append(Chunk(index, tuple(segments), targets))
  parts = collections.OrderedDict(
      (output, [chunk.targets[i] for chunk in chunks]) for i, output in enumerate(output_files))
  return chunks, parts


def pack_chunk(chunk, widths, limits, random_seed):
  """Packs one chunk into its ".partial" files: its packs shuffled, then split into one
  contiguous share per output.

  Args:
    chunk: `Chunk`.
    widths: the input's feature widths.
    limits: `packed_records.PackLimits`.
    random_seed: with the chunk's index, seeds the shuffle of its packs.

  Returns:
    `ChunkStats`.

  Raises:
    packed_records.PackingInputError: naming the file and record of bad input.
  """
  pieces, sizes = [], []
  for path, first, count in chunk.segments:
    features = packed_records.read_features(path, first, count, widths)
    sizes.append(packed_records.sequence_sizes(features, path, first, limits))
    pieces.append(features)
  features = {name: np.concatenate([piece[name] for piece in pieces]) for name in widths}
  lengths = np.concatenate([size[0] for size in sizes])
  predictions = np.concatenate([size[1] for size in sizes])
  del pieces
  rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([random_seed, chunk.index])))
  packs = packing.pack_sequences(lengths, predictions, limits.max_seq_length,
                                 limits.max_sequences, limits.max_predictions, rng)
  crc = _crc32c()
  for target, share in zip(chunk.targets, np.array_split(packs, len(chunk.targets))):
    with paths.open_file(target, "wb") as writer:
      for begin in range(0, len(share), WRITE_PACKS):  # bounded serialisation buffers
        packed = packed_records.build_packs(features, lengths, predictions,
                                            share[begin:begin + WRITE_PACKS], limits)
        writer.write(packed_records.encode(packed, crc).tobytes())
  return ChunkStats(len(lengths), len(packs), int(lengths.sum()))


@functools.lru_cache(maxsize=None)
def _crc32c():
  """The `Crc32c` of this process (its tables grow once, forked workers inherit them)."""
  return record_encoder.Crc32c()


def pack_files(input_files, output_files, max_seq_length=None, max_sequences_per_pack=3,
               max_predictions_per_seq=None, random_seed=12345, chunk_sequences=None,
               num_workers=None):
  """Packs the records of `input_files` into `output_files`.

  Args:
    input_files: unpacked pretraining TFRecord files.
    output_files: the outputs, each receiving a share of every chunk's packs.
    max_seq_length: S of a pack; None: the input's.
    max_sequences_per_pack: K.
    max_predictions_per_seq: W; a pack holds W + K predictions; None: the input's width (0 for
      records without masks, whose packs hold no masked_lm_* features).
    random_seed: seeds each chunk's shuffle of its packs.
    chunk_sequences: records per chunk at most; None: `default_chunk_sequences`.
    num_workers: processes; None: all cores. The output does not depend on it.

  Returns:
    dict with "sequences", "packs", "tokens", "input_length" (the input's S), "limits".

  Raises:
    packed_records.PackingInputError: bad input, naming file and record.
    ValueError: bad arguments, naming the flag.
  """
  widths, counts = first_record_widths(input_files)
  if max_seq_length is None:
    max_seq_length = widths["input_ids"]
  masked = packed_records.has_masks(widths)
  if max_predictions_per_seq is not None and not masked:
    raise ValueError("--max_predictions_per_seq=%d: the input records hold no masks "
                     "(--dynamic_masking), so their packs hold no predictions; leave it out"
                     % max_predictions_per_seq)
  if max_predictions_per_seq is None:
    max_predictions_per_seq = widths["masked_lm_positions"] if masked else 0
  limits = packed_records.PackLimits(max_seq_length, max_sequences_per_pack,
                                     max_predictions_per_seq + max_sequences_per_pack)
  _check_arguments(limits, chunk_sequences, num_workers, masked)
  chunks, parts = plan_chunks(input_files, counts, output_files,
                              chunk_sequences or default_chunk_sequences(widths))
  num_workers = max(1, min(num_workers or worker_pool.default_num_workers(), len(chunks)))
  new_directories = output_set.missing_directories(output_files)
  _crc32c().grow(16 * limits.max_seq_length + 16 * limits.max_predictions + 1024)
  try:
    output_set.start_clean(output_files)
    with worker_pool.clean_up_if_killed(
        functools.partial(_remove_partial_files, chunks, output_files, new_directories)):
      stats = _run_and_publish(chunks, parts, widths, limits, random_seed, num_workers)
  except BaseException:
    _remove_partial_files(chunks, output_files, ())
    for output in output_files:
      paths.remove_if_exists(output)
    output_set.remove_empty_directories(new_directories)
    raise
  return dict(sequences=sum(s.sequences for s in stats), packs=sum(s.packs for s in stats),
              tokens=sum(s.tokens for s in stats), input_length=widths["input_ids"],
              limits=limits)


def _check_arguments(limits, chunk_sequences, num_workers, masked):
  """Raises ValueError naming the flag of an argument out of range (the predictions' only for
  `masked` input)."""
  checks = [("max_seq_length", limits.max_seq_length),
            ("max_sequences_per_pack", limits.max_sequences),
            ("max_predictions_per_seq", limits.max_predictions - limits.max_sequences if masked
             else None),
            ("chunk_sequences", chunk_sequences), ("num_workers", num_workers)]
  for name, value in checks:
    if value is not None and value < 1:
      raise ValueError("--%s must be >= 1, got %d" % (name, value))


def _run_and_publish(chunks, parts, widths, limits, random_seed, num_workers):
  """Packs every chunk, then concatenates each output's parts and renames the outputs.

  Returns:
    list of `ChunkStats` in chunk order.
  """
  start = time.time()
  stats = [None] * len(chunks)
  results = worker_pool.run_tasks(
      functools.partial(pack_chunk, widths=widths, limits=limits, random_seed=random_seed),
      chunks, num_workers, describe=_describe,
      passed_errors=(packed_records.PackingInputError, ValueError))
  for index, result in results:
    stats[index] = result
    done = [s for s in stats if s is not None]
    logging.info("pack_pretraining_data: %d/%d chunks, %d sequences, %.0f sequences/s", len(done),
                 len(chunks), sum(s.sequences for s in done),
                 sum(s.sequences for s in done) / max(time.time() - start, 1e-9))
  for output, output_parts in parts.items():
    output_set.concatenate(output_parts, output_set.partial_name(output))
  for output in parts:  # the whole set is written: publish it
    paths.rename(output_set.partial_name(output), output)
  return stats


def _describe(chunk):
  """A chunk's name in messages: its first file and record."""
  path, first, _ = chunk.segments[0]
  return "chunk %d (from %s record %d)" % (chunk.index, path, first)


def _remove_partial_files(chunks, output_files, new_directories):
  """Removes a run's ".partial" files (each chunk's and each output's), then the directories it
  created if they stayed empty."""
  for chunk in chunks:
    for target in chunk.targets:
      paths.remove_if_exists(target)
  for output in output_files:
    paths.remove_if_exists(output_set.partial_name(output))
  output_set.remove_empty_directories(new_directories)


def unpack_files(input_files, output_files, max_seq_length=None, max_predictions_per_seq=None):
  """Writes the unpacked records of packed files: input i to output i, in row and slot order.

  Args:
    input_files, output_files: lists of one length.
    max_seq_length, max_predictions_per_seq: the records' widths; None: the packed S, P - K.

  Returns:
    (packs, sequences) read and written.

  Raises:
    packed_records.PackingInputError: naming the file and record of input that is not packed.
    ValueError: for lists of different lengths.
  """
  if len(input_files) != len(output_files):
    raise ValueError("--unpack writes one output per input file: %d inputs, %d outputs"
                     % (len(input_files), len(output_files)))
  new_directories = output_set.missing_directories(output_files)
  packs = sequences = 0
  try:
    output_set.start_clean(output_files)
    for path, output in zip(input_files, output_files):
      packed = packed_records.read_packed(path)
      seq = packed["input_ids"].shape[1] if max_seq_length is None else max_seq_length
      width = max_predictions_per_seq
      if width is None:  # rows without masks: no predictions
        width = (packed["masked_lm_ids"].shape[1] - packed["next_sentence_weights"].shape[1]
                 if packed_records.has_masks(packed) else 0)
      features = packed_records.unpack_features(packed, seq, width, path)
      partial = output_set.partial_name(output)
      with paths.open_file(partial, "wb") as writer:
        writer.write(packed_records.encode(features, _crc32c()).tobytes())
      packs, sequences = packs + len(packed["input_ids"]), sequences + len(features["input_ids"])
    for output in output_files:
      paths.rename(output_set.partial_name(output), output)
  except BaseException:
    _remove_partial_files((), output_files, new_directories)
    for output in output_files:
      paths.remove_if_exists(output)
    raise
  return packs, sequences
