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
  * `--dynamic_masking` writes the records without masks (input_ids unmasked, no masked_lm_*
    features: run_pretraining.py draws them) and one copy of the text unless --dupe_factor is
    given (docs/DATA.md, "Records without masks").
  * the sampling, masking and serialisation are library code (`utils/data/instances.py`), and so
    is the run over the files (`utils/datafiles/generator.py`) and the generator's flags
    (`utils/datafiles/generator_flags.py`, shared with prepare_corpus.py); this script keeps the
    command line and the input and output file lists.

The sampling semantics are the original's: a target length of max_seq_length - 3, shorter (uniform
in [2, max]) with probability `short_seq_prob`; segment A is the first 1..n-1 sentences of a chunk,
B the rest (actual next) or, half of the time or when the chunk has one sentence, text from a random
other document (and the unused sentences are put back); the longer segment loses tokens from a
random end until the pair fits; num_to_predict = min(max_predictions_per_seq,
max(1, round(len(tokens) * masked_lm_prob))) positions, never [CLS] or [SEP], 80% -> [MASK],
10% unchanged, 10% a random vocabulary token; with `--do_whole_word_mask`, a word and its "##"
pieces are masked together.
"""

import os

from absl import flags
from absl import logging

from utils.core import errors
from utils.core import paths
from utils.data import instances
from utils.data import record_encoder
from utils.datafiles import generator
from utils.datafiles import generator_flags
from utils.runtime import worker_pool

# The record encoder, the worker pool and the generator's run over files, importable from here
# as before they had modules of their own; the generator's options (`instances`), which this
# script's flags fill.
Crc32c = record_encoder.Crc32c
frame_records = record_encoder.frame_records
encode_varints = record_encoder.encode_varints
concat_rows = record_encoder.concat_rows
default_num_workers = worker_pool.default_num_workers
GeneratorOptions = instances.GeneratorOptions
validate_options = generator.validate_options
load_tokenizer = generator.load_tokenizer
create_pretraining_data = generator.create_pretraining_data


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


# The flags that say how masks are made: no use when the records hold none.
MASKING_FLAGS = ("masked_lm_prob", "max_predictions_per_seq", "do_whole_word_mask")


def check_masking_flags(flag_values):
  """Raises ValueError naming the masking flags given with --dynamic_masking, where the records
  hold no masks (run_pretraining.py's flags set them then)."""
  given = [name for name in MASKING_FLAGS if flag_values[name].present]
  if flag_values.dynamic_masking and given:
    raise ValueError("%s: no use with --dynamic_masking: the records hold no masks (give the "
                     "masking options to run_pretraining.py)"
                     % ", ".join("--" + name for name in given))


def define_flags():
  """Defines the command-line flags (the original's, plus --num_workers)."""
  flags.DEFINE_string("input_file", None,
                      "Input raw text files: comma-separated file names or glob patterns.")
  flags.DEFINE_string("output_file", None,
                      "Output TFRecord files, comma-separated: one per input file, or fewer.")
  flags.DEFINE_string("vocab_file", None, "The vocabulary file the BERT model uses.")
  generator_flags.define_generator_flags()
  flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Maximum number of masked LM predictions per sequence.")
  flags.DEFINE_integer("num_workers", None,
                       "Processes working on input files in parallel (default: all cores).")
  flags.mark_flags_as_required(["input_file", "output_file", "vocab_file"])

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
      dupe_factor=generator_flags.dupe_factor(flag_values),
      do_whole_word_mask=flag_values.do_whole_word_mask, random_seed=flag_values.random_seed,
      dynamic_masking=flag_values.dynamic_masking)
  try:
    check_masking_flags(flag_values)
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
