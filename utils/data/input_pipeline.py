"""The pretraining input pipeline: the record format, input file lists, per-worker sharding and the
Estimator `input_fn`, which draws the masks of records that hold none (`dynamic_masks`).

  plan = InputPlan(files, layout, is_training=True, num_workers=..., worker_index=..., ...)
  input_fn = input_fn_builder(plan, batch_size)   # input_fn(params) -> tf.data.Dataset

A pretraining record is a `tf.train.Example` with the seven features of the original BERT release
(see `pretraining_feature_spec`), so records written by the original generator and by ours are
interchangeable; records made with --dynamic_masking lack the three masked_lm_* features, and the
pipeline draws them from (seed, file, record, epoch) (`InputPlan.masking`).
"""

import collections
import os
import random

from absl import logging
import tensorflow as tf

from utils.core import paths
from utils.data import dynamic_masks
from utils.data import record_framing
from utils.data import record_layout

# Shuffle seed of the deterministic mode when none is given (the default --seed of the scripts).
DEFAULT_INPUT_SEED = 12345
# Training epochs: as many as the job asks for (the Estimator stops at --num_train_steps).
_EPOCHS_FOREVER = 2**62
# Every function this module hands to tf.data is traced as written, not through AutoGraph: none
# has Python control flow on tensors (`tf.cond` is explicit), and AutoGraph's source rewriting of
# them cost about 1.7 s of CPU at each start of a script (docs/TESTING.md).
_as_written = tf.autograph.experimental.do_not_convert


def pretraining_feature_spec(max_seq_length, max_predictions_per_seq, max_sequences_per_pack=0,
                             next_sentence_labels=True, masks=True):
  """The features of a pretraining record, as `tf.io.parse_example` takes them.

  Args:
    max_seq_length: tokens per record (row).
    max_predictions_per_seq: length of the masked_lm_* features (a packed row's prediction
      capacity for packed records).
    max_sequences_per_pack: 0 for the release's records; K > 0 for packed records of up to K
      sequences per row (docs/DATA.md, "Packed records").
    next_sentence_labels: the records must hold next_sentence_labels; False (a run without the
      next-sentence loss): they may lack it, and it is parsed as zeros then.
    masks: the records hold the masked_lm_* features; False: records without masks (made with
      --dynamic_masking), whose spec has none of them.

  Returns:
    dict name -> tf.io.FixedLenFeature: input_ids, input_mask, segment_ids int64
    [max_seq_length]; masked_lm_positions, masked_lm_ids int64 [max_predictions_per_seq];
    masked_lm_weights float32 [max_predictions_per_seq]; next_sentence_labels int64 [1]. Packed:
    next_sentence_labels int64 [K], and positions int64 [max_seq_length],
    next_sentence_positions int64 [K], next_sentence_weights float32 [K].
  """
  spec = {
      "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
  }
  if masks:
    spec.update({
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
    })
  labels = max(1, max_sequences_per_pack)
  spec["next_sentence_labels"] = tf.io.FixedLenFeature(
      [labels], tf.int64, default_value=None if next_sentence_labels else [0] * labels)
  if max_sequences_per_pack:
    spec.update({
        "positions": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "next_sentence_positions": tf.io.FixedLenFeature([max_sequences_per_pack], tf.int64),
        "next_sentence_weights": tf.io.FixedLenFeature([max_sequences_per_pack], tf.float32),
    })
  return spec


def resolve_input_files(input_files=None, input_files_dir=None, dir_flag="input_files_dir"):
  """Turns the input flags into a list of files.

  Args:
    input_files: comma-separated file names or glob patterns (the original's --input_file).
    input_files_dir: comma-separated directories whose files are all inputs (NVIDIA's
      --input_files_dir); hidden files (".name") and subdirectories are left out. An entry that
      is not a directory is taken as a file name or glob pattern.
    dir_flag: the flag `input_files_dir` came from, for the message.

  Returns:
    list of paths: the files of each pattern or directory sorted, patterns first, then
    directories, in the given order, each path once.

  Raises:
    ValueError: naming the patterns and directories when no file matches.
  """
  patterns = paths.split_list(input_files)
  directories = paths.split_list(input_files_dir)
  files = paths.resolve_files(patterns, directories)
  if not files:
    asked = ["--input_file=%s" % p for p in patterns]
    asked += ["--%s=%s" % (dir_flag, d) for d in directories]
    raise ValueError("no input file matches %s" % (", ".join(asked) or "(no input flag given)"))
  return files


def worker_files(input_files, num_workers, worker_index):
  """The files worker `worker_index` of `num_workers` reads (`shard_input_files`, which also says
  whether it shards them by record).

  Raises:
    ValueError: for an invalid worker index or count.
  """
  if num_workers < 1 or not 0 <= worker_index < num_workers:
    raise ValueError("worker_index must be in [0, num_workers), got worker_index=%r, "
                     "num_workers=%r" % (worker_index, num_workers))
  if len(input_files) >= num_workers:
    return list(input_files[worker_index::num_workers])
  return list(input_files)


def shard_input_files(input_files, num_workers, worker_index):
  """This worker's share of the input (docs/DESIGN.md section 7).

  With at least as many files as workers, worker w takes files w, w + W, w + 2W, ...; with fewer
  files, every worker reads all files and keeps every W-th record (a warning says so), so no worker
  starves and no record is read by two workers.

  Args:
    input_files: list of paths.
    num_workers: W >= 1.
    worker_index: w in [0, W).

  Returns:
    (files, by_record): the files this worker reads and whether it must shard them by record.

  Raises:
    ValueError: for an invalid worker index or count.
  """
  files = worker_files(input_files, num_workers, worker_index)
  if num_workers == 1 or len(input_files) >= num_workers:
    return files, False
  logging.warning("%d input files for %d workers: sharding by record (each worker reads every "
                  "file and keeps 1 record in %d); give at least as many files as workers to "
                  "shard by file", len(input_files), num_workers, num_workers)
  return list(input_files), True


# How an in-pipeline check's message starts (`records.name_bad_input` finds it in the error).
BAD_RECORD_PREFIX = "bad input record: "
# The features holding token ids (checked against the vocabulary).
TOKEN_ID_FEATURES = ("input_ids", "masked_lm_ids")


def _walked_file(path):
  """The body of `_indexed_records`' py_function: `path` once its record headers are walked.

  TF's reader dies (SIGSEGV) on a length field beyond the file whose CRC is right
  (`record_framing`); the walk refuses such a file first. A file that cannot be read, and one
  whose first bad record fails a CRC, are left to TF's reader: it refuses them itself (a
  DataLossError at that record, named after the failure by `records.name_bad_input`).

  Args:
    path: scalar eager tf.string tensor, the file.

  Returns:
    `path`.

  Raises:
    ValueError (the pipeline's InvalidArgumentError): "[bad input record: <file>: record <k> at
      byte offset <offset>: <problem>]", the file's first bad record, a length past the end.
  """
  name = os.fsdecode(path.numpy())
  try:
    bad = record_framing.walked_problem(name)
  except (tf.errors.OpError, OSError):
    return path
  if bad is not None and bad[2] not in record_framing.CRC_PROBLEMS:
    raise ValueError("[%s%s: record %d at byte offset %d: %s]" % ((BAD_RECORD_PREFIX, name) + bad))
  return path


@_as_written
def _indexed_records(path):
  """The records of one TFRecord file, each with its origin, its headers walked before TF's reader
  opens it (`_walked_file`: about 0.25 us a record, once an epoch).

  Args:
    path: scalar tf.string, the file.

  Returns:
    tf.data.Dataset of (record, path, index): scalar tf.string, tf.string and int64 (0-based
    position of the record in its file).
  """
  walked = tf.py_function(_walked_file, [path], tf.string)
  walked.set_shape([])
  return tf.data.TFRecordDataset(walked).enumerate().map(
      _as_written(lambda index, record: (record, path, index)))


def _check_token_ids(features, paths, indices, vocab_size):
  """An op that fails naming the file and record of the first out-of-vocabulary token id.

  On a GPU an embedding lookup of an id >= vocab_size returns zeros instead of failing: without
  this check such a batch would train silently on garbage.

  Args:
    features: the parsed batch, int64 TOKEN_ID_FEATURES of shape [batch, length] (those it holds:
      records without masks have no masked_lm_ids).
    paths: [batch] tf.string, the file of each record.
    indices: [batch] int64, each record's position in its file.
    vocab_size: int.

  Returns:
    a bool scalar to depend on: computing it raises InvalidArgumentError "... [bad input record:
    <file>: record <k>: token id <id> in <feature> is outside [0, vocab_size=<n>) ...]" when the
    batch holds such an id (input_ids checked first).
  """
  names = [name for name in TOKEN_ID_FEATURES if name in features]
  outside = {name: tf.logical_or(features[name] < 0, features[name] >= vocab_size)
             for name in names}

  def fail():
    """Builds the message of the first bad record (only run for a bad batch)."""
    messages = []
    for name in names:
      bad_rows = tf.reduce_any(outside[name], axis=1)
      row = tf.argmax(tf.cast(bad_rows, tf.int32))
      bad_id = tf.gather(features[name][row], tf.argmax(tf.cast(outside[name][row], tf.int32)))
      messages.append((tf.reduce_any(bad_rows), tf.strings.join([
          BAD_RECORD_PREFIX, paths[row], ": record ", tf.strings.as_string(indices[row]),
          ": token id ", tf.strings.as_string(bad_id), " in %s is outside [0, vocab_size=%d) "
          "(records made with another vocabulary?)" % (name, vocab_size)])))
    message = messages[-1][1]
    for bad, text in reversed(messages[:-1]):  # the first feature with a bad id
      message = tf.where(bad, text, message)
    with tf.control_dependencies([tf.debugging.Assert(False, [message])]):
      return tf.constant(False)

  any_outside = tf.reduce_any([tf.reduce_any(outside[name]) for name in names])
  # The message is built only for a bad batch: a good one costs the comparisons and a reduction.
  return tf.cond(any_outside, fail, lambda: tf.constant(True))


def _decode_batch(records, name_to_features, paths=None, indices=None, vocab_size=None):
  """Parses a batch of serialised examples; int64 features are cast to int32.

  Args:
    records: [batch] tf.string.
    name_to_features: `pretraining_feature_spec`.
    paths, indices: [batch], each record's file and position (`_indexed_records`).
    vocab_size: when given, every token id must be in [0, vocab_size) (`_check_token_ids`).
  """
  features = tf.io.parse_example(records, name_to_features)
  dependencies = []
  if vocab_size is not None:
    dependencies.append(_check_token_ids(features, paths, indices, vocab_size))
  with tf.control_dependencies(dependencies):
    return {name: (tf.cast(value, tf.int32) if value.dtype == tf.int64 else tf.identity(value))
            for name, value in features.items()}


def _epoch_seeds(seed, epoch):
  """Seeds of one epoch's shuffles: (file order [2] int64, record order int64), from seed, epoch.

  Each epoch's order is a function of (seed, epoch) alone, so any epoch can be rebuilt without
  replaying the ones before it.
  """
  epoch = tf.cast(epoch, tf.int64)
  seed = tf.constant(seed, tf.int64)
  return tf.stack([seed, epoch]), seed * 1000003 + epoch


def _records_in_order(files):
  """The records of `files`, file after file, each with its origin (`_indexed_records`)."""
  return tf.data.Dataset.from_tensor_slices(tf.constant(files)).flat_map(_indexed_records)


def _one_epoch(plan, files, by_record, seed, epoch):
  """Every record of this worker's shard once, in a shuffled order of epoch `epoch`.

  Args:
    plan: the `InputPlan` (its workers, threads, determinism and shuffle buffer).
    files, by_record: from `shard_input_files`.
    seed: int, the base seed of this worker's shuffles.
    epoch: int64 scalar Tensor, the epoch's index.

  Returns:
    finite tf.data.Dataset of (record, file, index in the file) (`_indexed_records`).
  """
  file_seed, record_seed = _epoch_seeds(seed, epoch)
  if by_record:
    # Every worker must see the files in the same order for the shards to partition the records.
    d = _records_in_order(files).shard(plan.num_workers, plan.worker_index)
  else:
    order = tf.random.experimental.stateless_shuffle(tf.constant(files), seed=file_seed)
    d = tf.data.Dataset.from_tensor_slices(order)
    cycle_length = max(1, min(plan.num_cpu_threads, len(files)))
    if plan.deterministic:  # sequential interleave: a fixed order by construction
      d = d.interleave(_indexed_records, cycle_length=cycle_length)
    else:
      d = d.interleave(_indexed_records, cycle_length=cycle_length,
                       num_parallel_calls=cycle_length, deterministic=False)
  return d.shuffle(buffer_size=plan.shuffle_buffer_size, seed=record_seed)


def _with_epoch(records, epoch):
  """The (record, file, index) elements of `records` with their epoch: (..., epoch int64)."""
  epoch = tf.cast(epoch, tf.int64)
  return records.map(_as_written(lambda record, path, index: (record, path, index, epoch)))


def _serialized_records(plan, files, by_record, seed):
  """The serialised records of this worker's shard, before batching.

  Training reads epoch after epoch, forever: each epoch reads every record of the shard once
  (files in a new order, interleaved `plan.num_cpu_threads` at a time when sharded by file;
  records shuffled in a buffer of `plan.shuffle_buffer_size`), and the next epoch starts only when
  it is done, so no record is read twice before every record was read once. Evaluation reads the
  files once, in order.

  Args:
    plan: the `InputPlan`.
    files, by_record: from `shard_input_files`.
    seed: int, base seed of this worker's shuffles (training).

  Returns:
    tf.data.Dataset of (record, file, index in the file) (`_indexed_records`), and with
    `plan.masking` the epoch (int64; 0 for evaluation) as a fourth element.
  """
  if not plan.is_training:
    d = _records_in_order(files)
    d = d.shard(plan.num_workers, plan.worker_index) if by_record else d
    return _with_epoch(d, 0) if plan.masking else d

  @_as_written
  def epoch_records(epoch):
    d = _one_epoch(plan, files, by_record, seed, epoch)
    return _with_epoch(d, epoch) if plan.masking else d

  # flat_map ends one epoch's dataset before it starts the next.
  return tf.data.Dataset.range(_EPOCHS_FOREVER).flat_map(epoch_records)


# What an input function reads, and how (`input_fn_builder` takes it and the batch size):
#   files: list of TFRecord files;
#   layout: their `record_layout.Layout`, decided once for the file set: tokens per row, the
#     masked_lm_* width, packed rows of up to `sequences_per_row` sequences or not;
#   is_training: training (shuffle, repeat) or evaluation (in order, once);
#   num_workers, worker_index: the workers sharing the input (Horovod size and rank);
#   deterministic: seeded shuffles, one thread, the same batches on every run;
#   seed: the job's shuffle seed (offset by `worker_index`); None: a random one, or
#     `DEFAULT_INPUT_SEED` when `deterministic`;
#   shuffle_buffer_size: records in the shuffle buffer (training);
#   skip_records: deterministic training only: records of this worker's stream already consumed
#     (a resumed run), dropped after the record shuffle, before batching, so the batches
#     continue exactly where the checkpoint left them (still read to reproduce the shuffle, but
#     neither parsed nor trained on);
#   vocab_size: when given, every batch is checked: a token id outside [0, vocab_size) fails the
#     input with an InvalidArgumentError naming the file and record ("bad input record: <file>:
#     record <k>: ..."; `records.name_bad_input` turns it into a usage error);
#   next_sentence_labels: False: records may lack next_sentence_labels
#     (`pretraining_feature_spec`);
#   num_cpu_threads: files read in parallel and parsing threads;
#   masking: for records without masks (`layout.dynamic_masks`, `layout.predictions` the width P
#     to draw), the `Masking` to draw them with; None for records with masks.
InputPlan = collections.namedtuple(
    "InputPlan", ["files", "layout", "is_training", "num_workers", "worker_index",
                  "deterministic", "seed", "shuffle_buffer_size", "skip_records", "vocab_size",
                  "next_sentence_labels", "num_cpu_threads", "masking"],
    defaults=[1, 0, False, None, 100, 0, None, True, 4, None])

# How the masks of records without masks are drawn: `dynamic_masks.MaskingOptions` and
# `dynamic_masks.MaskVocabulary`. Training draws from (the job's seed, never offset by the worker,
# file, record, epoch), evaluation from (DEFAULT_INPUT_SEED, file, record, 0): masks that depend on
# neither the worker count, the reading order nor a resume, and evaluation masks that are the same
# whatever the training flags.
Masking = collections.namedtuple("Masking", ["options", "vocabulary"])


def _feature_spec(layout, next_sentence_labels):
  """`pretraining_feature_spec` of the records of `layout`."""
  return pretraining_feature_spec(layout.seq_length, layout.predictions,
                                  record_layout.max_sequences_per_pack(layout),
                                  next_sentence_labels, masks=not layout.dynamic_masks)


def _with_noise(mask_seed, seq_length):
  """The map adding each record's mask noise: (record, file, index, epoch) -> (record, file,
  index, noise float32 [3, seq_length]) (`dynamic_masks.record_noise`)."""

  @_as_written
  def add_noise(record, path, index, epoch):
    noise = dynamic_masks.record_noise(
        dynamic_masks.record_seed(mask_seed, path, index, epoch), seq_length)
    return record, path, index, noise

  return add_noise


def without_autotuning(dataset):
  """`dataset` with tf.data's autotuning off: what every Estimator input function returns.

  Its threads, parallel calls and buffers are all set explicitly, so autotuning has nothing to
  tune; but its optimising thread sleeps between rounds (each sleep twice the last, up to 60 s),
  and closing the session at the end of training waited for that sleep to end: up to a minute
  between a job's last update and its exit (docs/DECISIONS.md, bench/job_end.py).

  Args:
    dataset: a tf.data.Dataset.

  Returns:
    the same dataset with `tf.data.Options().autotune.enabled` False.
  """
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


def _mapped(d, function, plan):
  """`d.map(function)`: one thread in deterministic mode, else parallel but handed on in order
  (an unordered map let a batch of the next epoch overtake the last of this one, reading a record
  twice in what should be one epoch)."""
  if plan.deterministic:  # sequential map: one thread
    return d.map(function)
  return d.map(function, num_parallel_calls=max(1, plan.num_cpu_threads), deterministic=True)


def _checked(plan):
  """`plan` with its files as a list and its seed decided; ValueError for a plan that cannot
  run."""
  files = list(plan.files)
  if not files:
    raise ValueError("input_fn_builder: no input files")
  if plan.skip_records and not (plan.deterministic and plan.is_training):
    raise ValueError("input_fn_builder: skip_records (%d) needs deterministic training: another "
                     "stream has no fixed position to resume at" % plan.skip_records)
  if plan.layout.dynamic_masks != (plan.masking is not None):
    raise ValueError("input_fn_builder: %s: %s" % (
        record_layout.describe(plan.layout),
        "the records hold their masks, a masking is for records without" if plan.masking
        else "records without masks need a masking to draw them"))
  if plan.layout.dynamic_masks and plan.layout.predictions < 1:
    raise ValueError("input_fn_builder: %s: the layout holds no prediction width to draw"
                     % record_layout.describe(plan.layout))
  seed = plan.seed
  if plan.deterministic and seed is None:
    seed = DEFAULT_INPUT_SEED
  if seed is None:  # a new order on every run
    seed = random.SystemRandom().randrange(2**31)
  return plan._replace(files=files, seed=seed)


def input_fn_builder(plan, batch_size):
  """Builds the `input_fn` of the Estimator / TPUEstimator.

  Training: this worker's shard (see `shard_input_files`) epoch after epoch, each epoch every record
  once before any record a second time (`_serialized_records`: files shuffled and read
  `num_cpu_threads` at a time, records shuffled, a new order each epoch), parsed and batched with
  drop_remainder=True (static batch shape; a batch may span two epochs), prefetched. Evaluation:
  the files in the given order, no shuffle, no repeat, every record once (the last batch may be
  smaller). Each file's record headers are walked before TF's reader opens it (`_walked_file`).
  Records without masks (`plan.masking`) get each its noise after `skip_records`, before
  batching, and their masks drawn after parsing (`dynamic_masks.draw_masks`: P =
  layout.predictions).

  Args:
    plan: the `InputPlan`: the files, their layout, and how to read them.
    batch_size: examples (rows, for packed records) per batch; `params["batch_size"]` overrides
      it when present (TPUEstimator).

  Returns:
    input_fn(params) -> tf.data.Dataset of dicts, with S = layout.seq_length and P =
    layout.predictions: input_ids, input_mask, segment_ids int32 [batch, S];
    masked_lm_positions, masked_lm_ids int32 and masked_lm_weights float32 [batch, P];
    next_sentence_labels int32 [batch, 1]. Packed (K = layout.sequences_per_row):
    next_sentence_labels and next_sentence_positions int32, next_sentence_weights float32
    [batch, K], positions int32 [batch, S].

  Raises:
    ValueError: for no files, skip_records outside deterministic training, records without
      masks without a masking (or a masking for records with masks).
  """
  plan = _checked(plan)
  shuffle_seed = plan.seed + plan.worker_index
  mask_seed = plan.seed if plan.is_training else DEFAULT_INPUT_SEED
  layout, masking = plan.layout, plan.masking

  def input_fn(params):
    """Returns the dataset; `params` may carry "batch_size" (TPUEstimator)."""
    size = params.get("batch_size", batch_size) if params else batch_size
    name_to_features = _feature_spec(plan.layout, plan.next_sentence_labels)
    files, by_record = shard_input_files(plan.files, plan.num_workers, plan.worker_index)
    d = _serialized_records(plan, files, by_record, shuffle_seed)
    if plan.skip_records:
      d = d.skip(plan.skip_records)
    if masking:  # each record's noise, for the records trained on only
      d = _mapped(d, _with_noise(mask_seed, layout.seq_length), plan)
    d = d.batch(size, drop_remainder=plan.is_training)

    @_as_written
    def decode(records, paths, indices, *noise):
      features = _decode_batch(records, name_to_features, paths, indices, plan.vocab_size)
      if not masking:
        return features
      return dynamic_masks.draw_masks(features, noise[0], masking.options, masking.vocabulary,
                                      layout.predictions, layout.packed)

    d = without_autotuning(_mapped(d, decode, plan).prefetch(2))
    if plan.deterministic:
      options = tf.data.Options()
      options.deterministic = True
      options.threading.private_threadpool_size = 1
      options.threading.max_intra_op_parallelism = 1
      d = d.with_options(options)
    return d

  return input_fn
