"""The data generator's run over files: text files (one sentence a line, a blank line between
documents) to masked-LM / next-sentence TFRecords, `create_pretraining_data.py`'s work
(docs/DECISIONS.md, "Data"), and the checks of its options and vocabulary that
`prepare_corpus.py` shares.

  totals = generator.create_pretraining_data(input_files, output_files, vocab_file, options)

Each input file is one task of `utils/data/instances.py` (sampling, masking, records written
with `utils/data/record_encoder.py`), run in `utils/runtime/worker_pool.py`, input file i to
output i % len(outputs); the outputs are published whole (`utils/runtime/output_set.py`).
"""

import collections
import functools
import time

from absl import logging

import tokenization
from utils.core import paths
from utils.data import instances
from utils.runtime import output_set
from utils.runtime import worker_pool


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


def load_tokenizer(vocab_file, do_lower_case):
  """This process's `tokenization.FullTokenizer` (`instances.cached_tokenizer`), after checking the
  vocabulary has the special tokens.

  Raises:
    ValueError: naming the file when it is missing or lacks [UNK], [CLS], [SEP] or [MASK].
  """
  if not vocab_file:
    raise ValueError("--vocab_file is required")
  if not paths.is_file(vocab_file):
    raise ValueError("--vocab_file: vocabulary file not found: %s" % vocab_file)
  vocab = tokenization.load_vocab(vocab_file)
  tokenization.check_special_tokens(vocab, vocab_file)
  return instances.cached_tokenizer(vocab_file, do_lower_case)


def create_pretraining_data(input_files, output_files, vocab_file, options, do_lower_case=True,
                            num_workers=None):
  """Writes the pretraining records of `input_files`.

  Args:
    input_files: list of text files (see `resolve_input_files`).
    output_files: list of at most len(input_files) paths; input file i goes to output
      i % len(output_files), the input files of one output in input order.
    vocab_file: vocabulary with [UNK], [CLS], [SEP] and [MASK].
    options: `instances.GeneratorOptions`.
    do_lower_case: lower-case and strip accents (uncased models).
    num_workers: processes; default: all cores. The output does not depend on it.

  The outputs appear under their names only when the whole set is written: every file is written
  as "<name>.partial" (parts of a shared output as "<name>.part-NNNNN.partial"), and all are
  renamed at the end. A run that fails removes what it wrote, and the directories it created that
  stayed empty. A run killed outright (kill -9 included) has its ".partial" files and those
  directories removed by a cleaner process a moment later (`worker_pool.clean_up_if_killed`);
  whatever is left all the same (the cleaner killed too), the next run over the same outputs
  removes first, with the outputs of earlier runs, so it starts clean.

  Returns:
    dict output path -> number of records written.

  Raises:
    instances.InputDataError: naming the file and the fix (an input that is not UTF-8, no
      document in any input).
    ValueError: naming the problem (options, vocabulary, an output directory that cannot be
      created).
  """
  validate_options(options)
  tokenizer = load_tokenizer(vocab_file, do_lower_case)
  if not input_files:
    raise ValueError("no input files")
  instances.warm_up(tokenizer, options)
  num_workers = max(1, min(num_workers or worker_pool.default_num_workers(), len(input_files)))
  direct = len(output_files) == len(input_files)
  tasks = []
  parts = collections.OrderedDict((output, []) for output in output_files)  # in input order
  for index, path in enumerate(input_files):
    output = output_files[index % len(output_files)]
    target = output_set.partial_name(output if direct else "%s.part-%05d" % (output, index))
    tasks.append((index, path, target, vocab_file, do_lower_case, options))
    parts[output].append(target)
  new_directories = output_set.missing_directories(output_files)
  try:
    output_set.start_clean(output_files)
    with worker_pool.clean_up_if_killed(
        functools.partial(_clean_up_killed_run, tasks, output_files, new_directories)):
      counts = _write_outputs(tasks, parts, num_workers)
  except BaseException:
    # No empty directory of the run's own making is left behind (one that existed is kept).
    output_set.remove_empty_directories(new_directories)
    raise
  totals = collections.OrderedDict((output, 0) for output in output_files)
  for index, count in enumerate(counts):
    totals[output_files[index % len(output_files)]] += count
  return totals


def _write_outputs(tasks, parts, num_workers):
  """Runs the tasks, then publishes the outputs (a shared one concatenated from its parts).

  Args:
    tasks: the `instances.process_file` tasks, in input order.
    parts: ordered dict output path -> the ".partial" files of its tasks, in input order.
    num_workers: processes at a time.

  Returns:
    list: the number of records of each input file.

  Raises:
    instances.InputDataError: when no input file holds a document; or what a task raised. After
      any error, nothing written is left (published outputs included).
  """
  start = time.time()
  counts = [0] * len(tasks)
  done = 0
  try:
    for index, written in _run_tasks(tasks, num_workers):
      counts[index] = written
      done += 1
      elapsed = max(time.time() - start, 1e-9)
      logging.info("create_pretraining_data: %d/%d files, %d instances, %.0f instances/s",
                   done, len(tasks), sum(counts), sum(counts) / elapsed)
    if sum(counts) == 0:
      raise instances.InputDataError(
          "no documents in the input files %s: no line holds a token (only blank lines, spaces or "
          "control characters); give text with one sentence per line and a blank line between "
          "documents" % ", ".join(task[1] for task in tasks))
    for output, output_parts in parts.items():
      # An output shared by several input files is written in parts.
      if output_parts != [output_set.partial_name(output)]:
        output_set.concatenate(output_parts, output_set.partial_name(output))
    for output in parts:  # the whole set is written: publish it
      paths.rename(output_set.partial_name(output), output)
  except BaseException:
    # Leave nothing that could pass for a finished output.
    _remove_partial_files(tasks, list(parts))
    for output in parts:
      paths.remove_if_exists(output)
    raise
  return counts


def _remove_partial_files(tasks, output_files):
  """Removes the ".partial" files of a run: each task's and each output's."""
  for task in tasks:
    paths.remove_if_exists(task[2])
  for output in output_files:
    paths.remove_if_exists(output_set.partial_name(output))


def _clean_up_killed_run(tasks, output_files, new_directories):
  """What a run killed outright leaves, removed: its ".partial" files, then the directories it
  created if they stayed empty. Published outputs are kept (the run may have ended its work)."""
  _remove_partial_files(tasks, output_files)
  output_set.remove_empty_directories(new_directories)


def _run_tasks(tasks, num_workers):
  """Yields the results of `instances.process_file` over `tasks`, in completion order.

  With several workers, each task runs in its own forked process (at most `num_workers` at a
  time, `utils/runtime/worker_pool.py`), so a process that dies is known by its task, and each
  file starts with fresh memory; the tokenizer of each gets its share of the cores.

  Raises:
    instances.InputDataError, ValueError: a task's (bad input), raised again with its message,
      which names the input file.
    RuntimeError: naming the input file, when its worker fails otherwise or dies (killed, out of
      memory).
  """
  threads = max(1, worker_pool.default_num_workers() // num_workers)
  results = worker_pool.run_tasks(instances.process_file, tasks, num_workers,
                                  describe=lambda task: "input file %s" % task[1],
                                  passed_errors=(instances.InputDataError, ValueError),
                                  environ={"RAYON_NUM_THREADS": str(threads)})
  for _, result in results:
    yield result
