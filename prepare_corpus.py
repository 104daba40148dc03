"""Raw text to the pretraining records of every phase, in one command that resumes where it
stopped (docs/DATA.md, "From raw text").

  python prepare_corpus.py --input=enwiki-latest-pages-articles.xml.bz2 --input=books/ \\
      --output_dir=corpus --phases=128:20,512:80 --num_workers=8 [generator flags ...]

Inputs (`--input`, repeated): a MediaWiki XML dump, plain or bz2, recognised by its first bytes
whatever its name (a whole dump, Wikipedia's part files `*.xml-p<first>p<last>.bz2`, multistream
parts; a multistream index is refused: it holds no text), a directory of plain-text documents (one
a file: `.txt`, `.gz`, `.bz2`), a file of one document a line (NVIDIA's formatted text), a file in
the generator's own format (one sentence a line, a blank line between documents);
`utils/corpus/documents.py` tells them apart by their content, `--input_format` forces a format.

Output (OUT = --output_dir): OUT/text/{train,eval}/shard-<j>.txt (the sentences, exact duplicate
documents dropped, a held-out split by document), OUT/vocab.txt (trained unless --vocab_file is
given), OUT/seq<L>/{train,eval}/shard-<j>.tfrecord for each phase L:P of --phases (with --pack,
OUT/seq<L>_packed/... too), and OUT/manifest/ (one entry per finished unit of work). The stages,
their units and the tasks: `utils/corpus/stages.py`, `utils/corpus/runner.py`.

Running the same command again does only what is not done; a changed setting redoes only the
stages it affects. SIGTERM, SIGINT or SIGUSR1 stop a run at once: the units in progress are
dropped with what they wrote (a second signal ends the process without that clean-up), one line
says so, and the exit status is 75, as for a training run's graceful stop (docs/LONG_RUNS.md):
run the same command to continue. Input refused before any work (a bad flag, an input that does
not exist) creates no --output_dir.

Several tasks (`--task_index/--num_tasks`, by default from Slurm's array or MPI's environment)
share the units; the output does not depend on how many tasks or workers there are;
scripts/slurm/prepare_corpus.sh runs the same command as Slurm array jobs, one per stage
(`--stage`), sized by `--count_units`. Progress goes to stderr; the last line (stdout) sums up
the corpus and its records.

The records are sampled and masked as by create_pretraining_data.py, with its flags
(--do_lower_case, --do_whole_word_mask, --dupe_factor, --masked_lm_prob, --short_seq_prob,
--random_seed, --dynamic_masking, defined once in `utils/datafiles/generator_flags.py`;
`--helpshort` lists them). With --dynamic_masking the training records hold no masks (one copy
of the text unless --dupe_factor is given) and the held-out records keep fixed masks, so that
evaluations stay comparable whatever the training recipe; the records units' manifest entries
say which (`"dynamic_masking": true` in their options).
"""

import os
import sys

# Before TensorFlow (which --pack loads): cli sets its native log level, read when it loads.
from utils.runtime import cli  # pylint: disable=g-bad-import-order
from absl import flags

from utils.core import errors
from utils.corpus import config as config_lib
from utils.corpus import documents
from utils.corpus import manifest
from utils.corpus import runner
from utils.corpus import stages
from utils.datafiles import generator
from utils.datafiles import generator_flags
from utils.runtime import stop_at_once
from utils.runtime import worker_pool


def define_flags():
  """Defines the command-line flags: the corpus's, then the generator's (shared with
  create_pretraining_data.py: `generator_flags.define_generator_flags`)."""
  flags.DEFINE_multi_string("input", None, "An input: a MediaWiki XML dump, plain or bz2, "
                            "whatever its name (told by its first bytes: a whole dump, a part "
                            "file *.xml-p<first>p<last>.bz2, a multistream part; an index is "
                            "refused), a directory of documents (.txt, .gz, .bz2), a "
                            "one-document-per-line file or a file in the generator's format")
  flags.DEFINE_string("input_format", "auto", "The inputs' format: auto, or %s; one for every "
                      "input or a comma-separated list, one per --input."
                      % ", ".join(documents.FORMATS))
  flags.DEFINE_string("output_dir", None, "Where the text, vocabulary, records and manifest go.")
  flags.DEFINE_string("vocab_file", None, "A vocabulary to use as it is (default: one trained "
                      "on the training text, OUT/vocab.txt).")
  flags.DEFINE_integer("vocab_size", config_lib.DEFAULT_VOCAB_SIZE,
                       "Tokens of the trained vocabulary, special tokens included.")
  flags.DEFINE_string("phases", "128:20,512:80", "The records' phases, comma-separated "
                      "SEQ_LENGTH:PREDICTIONS pairs; each goes to OUT/seq<SEQ_LENGTH>/.")
  flags.DEFINE_integer("num_shards", config_lib.DEFAULT_NUM_SHARDS,
                       "Shards of the text and of each phase's records (of each split).")
  flags.DEFINE_integer("num_workers", None, "Processes of this task working on units in "
                       "parallel (default: all cores); the output does not depend on it.")
  flags.DEFINE_float("eval_fraction", config_lib.DEFAULT_EVAL_FRACTION, "The fraction of the "
                     "documents held out for evaluation (by a hash of each document; 0: none).")
  flags.DEFINE_bool("skip_bad_documents", False, "Skip and count a document that cannot be read "
                    "(not UTF-8, the rest of a compressed file cut short) instead of stopping.")
  flags.DEFINE_enum("stage", "all", ("all",) + config_lib.STAGES,
                    "The stage to run (all: every stage, waiting for the other tasks between "
                    "them); a single stage runs this task's units of it only.")
  flags.DEFINE_integer("task_index", None, "This task (default: from SLURM_ARRAY_TASK_ID, "
                       "OMPI_COMM_WORLD_RANK or PMI_RANK, else 0).")
  flags.DEFINE_integer("num_tasks", None, "Tasks sharing the work (default: from "
                       "SLURM_ARRAY_TASK_COUNT, OMPI_COMM_WORLD_SIZE or PMI_SIZE, else 1).")
  flags.DEFINE_bool("pack", False, "Also write packed records of every phase "
                    "(pack_pretraining_data.py's), under OUT/seq<L>_packed/.")
  flags.DEFINE_float("barrier_timeout_secs", config_lib.DEFAULT_BARRIER_TIMEOUT_SECS,
                     "Seconds a task waits for the other tasks' units of a stage.")
  flags.DEFINE_bool("count_units", False, "Check the flags, print the number of units of each "
                    "stage (a line `STAGE N` each) and exit without writing anything "
                    "(scripts/slurm/prepare_corpus.sh sizes its array jobs by it).")
  generator_flags.define_generator_flags()
  flags.mark_flags_as_required(["input", "output_dir"])


def read_config(flag_values, environ):
  """The checked configuration of the parsed flags.

  Raises:
    errors.UsageError: naming the flag: a bad value, a generator option out of range, a
      vocabulary that is missing or lacks the special tokens.
  """
  config = config_lib.CorpusConfig.from_flags(flag_values, environ,
                                              worker_pool.default_num_workers())
  config.check()
  try:
    for phase in config.phases:
      for split in config.splits:
        generator.validate_options(config.generator_options(phase, split))
    if config.vocab_file:
      generator.load_tokenizer(config.vocab_file, config.do_lower_case)
  except ValueError as e:
    raise errors.UsageError(str(e))
  return config


def main(argv):
  """Runs this task's stages; prints the summary line (with --count_units: the units of each
  stage, nothing run).

  Returns:
    the exit status: None (0); 2 for bad input (one line naming the file and position); 75 for a
    stop signal (one line). Bad flags raise errors.UsageError (2); another task's failure, a wait
    that timed out, a failed check or a dead worker end with status 1 and one line.
  """
  program = os.path.basename(argv[0])
  with stop_at_once.raise_on_stop_signals():
    try:
      return _run(argv, program)
    except stop_at_once.StopSignal as stop:
      print(stop_at_once.ran_until_stopped(program, stop), file=sys.stderr, flush=True)
      return errors.STOP_EXIT_CODE


def _run(argv, program):
  """`main`'s work (a stop signal raises `stop_at_once.StopSignal` out of it)."""
  if len(argv) > 1:
    raise errors.UsageError("unexpected argument(s) %s (give inputs with --input)"
                            % " ".join(argv[1:]))
  config = read_config(flags.FLAGS, os.environ)
  units = stages.plan(config)  # an input that does not exist: refused before any output
  if flags.FLAGS.count_units:
    for stage, stage_units in units.items():
      print("%s %d" % (stage, len(stage_units)))
    return None
  try:
    os.makedirs(config.output_dir, exist_ok=True)
  except OSError as e:
    raise errors.UsageError("--output_dir: cannot create %s: %s" % (config.output_dir,
                                                                   e.strerror))
  try:
    result = runner.run(config, units)
  except stages.DataError as e:
    errors.report(program, str(e))
    return errors.USAGE_EXIT_CODE
  except (manifest.StageIncomplete, stages.CheckFailed, RuntimeError) as e:
    raise SystemExit(errors.report_line(program, str(e)))
  print(runner.summary_line(result), flush=True)
  return None


if __name__ == "__main__":
  define_flags()
  cli.run_main(main)
