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
  * the sampling, masking and serialisation are library code (`utils/data/instances.py`); this
    script keeps the command line, the input and output file lists and the run over the files.

The sampling semantics are the original's: a target length of max_seq_length - 3, shorter (uniform
in [2, max]) with probability `short_seq_prob`; segment A is the first 1..n-1 sentences of a chunk,
B the rest (actual next) or, half of the time or when the chunk has one sentence, text from a random
other document (and the unused sentences are put back); the longer segment loses tokens from a
random end until the pair fits; num_to_predict = min(max_predictions_per_seq,
max(1, round(len(tokens) * masked_lm_prob))) positions, never [CLS] or [SEP], 80% -> [MASK],
10% unchanged, 10% a random vocabulary token; with `--do_whole_word_mask`, a word and its "##"
pieces are masked together.
"""

import collections
import functools
import os
import time

from absl import flags
from absl import logging

import tokenization
from utils.core import errors
from utils.core import paths
from utils.data import instances
from utils.data import record_encoder
from utils.runtime import output_set
from utils.runtime import worker_pool

# The record encoder and the worker pool, importable from here as before they had modules of
# their own; the generator's options (`instances`), which this script's flags fill.
Crc32c = record_encoder.Crc32c
frame_records = record_encoder.frame_records
encode_varints = record_encoder.encode_varints
concat_rows = record_encoder.concat_rows
default_num_workers = worker_pool.default_num_workers
GeneratorOptions = instances.GeneratorOptions

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
  num_workers = max(1, min(num_workers or default_num_workers(), len(input_files)))
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
  threads = max(1, default_num_workers() // num_workers)
  results = worker_pool.run_tasks(instances.process_file, tasks, num_workers,
                                  describe=lambda task: "input file %s" % task[1],
                                  passed_errors=(instances.InputDataError, ValueError),
                                  environ={"RAYON_NUM_THREADS": str(threads)})
  for _, result in results:
    yield result




def define_flags():
  """Defines the command-line flags (the original's, plus --num_workers)."""
  flags.DEFINE_string("input_file", None,
                      "Input raw text files: comma-separated file names or glob patterns.")
  flags.DEFINE_string("output_file", None,
                      "Output TFRecord files, comma-separated: one per input file, or fewer.")
  flags.DEFINE_string("vocab_file", None, "The vocabulary file the BERT model uses.")
  define_generator_flags()
  flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Maximum number of masked LM predictions per sequence.")
  flags.DEFINE_integer("num_workers", None,
                       "Processes working on input files in parallel (default: all cores).")
  flags.mark_flags_as_required(["input_file", "output_file", "vocab_file"])


def define_generator_flags():
  """Defines the flags of how records are sampled and masked, whatever their length: this
  script's and prepare_corpus.py's."""
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the text (True for uncased models, False for cased ones).")
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Mask whole words (a word and its ## pieces) rather than single pieces.")
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
  flags.DEFINE_integer("dupe_factor", 10,
                       "Number of passes over the input (each with different masks).")
  flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
  flags.DEFINE_float("short_seq_prob", 0.1,
                     "Probability of a sequence shorter than the maximum length.")


def main(argv):
  """Runs the generator on the parsed flags (`argv`: the program, then what the flags left).

  Returns:
    the exit status: None (0) or 2 for bad input data; bad flags raise errors.UsageError (2), a
    worker that died ends the process with status 1.
  """
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
  except instances.InputDataError as e:
    # The input's content, not a flag: one line naming the file and the fix, exit status 2,
    # without the hint to the flags that a usage error gets.
    errors.report(os.path.basename(argv[0]), str(e))
    return errors.USAGE_EXIT_CODE
  except ValueError as e:
    # Bad flags or the files they name: one line naming the problem (and cli's hint to the
    # flags), exit status 2.
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
