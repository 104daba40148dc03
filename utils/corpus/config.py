"""The settings of a corpus build (`prepare_corpus.py`) as one typed, frozen value, read once from
the parsed flags and passed down: nothing below the script reads the flags object.

`CorpusConfig.check` holds every rule about the values that needs no file; the generator's own
options are checked by `utils/datafiles/generator.validate_options`. The task of this process
(`--task_index/--num_tasks`) defaults from the launcher's environment (`task_from_environment`).
"""

import collections
import dataclasses
import typing

from utils.core import errors
from utils.corpus import documents
from utils.data import instances
from utils.datafiles import generator_flags

# The stages in the order they run; "pack" runs with --pack only.
STAGES = ("extract", "shard", "vocab", "records", "pack", "check")
SPLITS = ("train", "eval")
# The held-out fraction by default: 1% of the documents.
DEFAULT_EVAL_FRACTION = 0.01
# BERT's vocabulary size (bert_configs/*.json), so that a trained vocabulary fits them as they are.
DEFAULT_VOCAB_SIZE = 30522
# NVIDIA's number of shards of each split.
DEFAULT_NUM_SHARDS = 256
# Seconds a task waits for the other tasks' units of a stage (an extract of a whole Wikipedia
# dump takes hours on one core).
DEFAULT_BARRIER_TIMEOUT_SECS = 24 * 3600
# Sequences per pack at most (`utils/datafiles/packer.py`'s default).
MAX_SEQUENCES_PER_PACK = 3

# One phase of the records: its sequence length and masked-LM predictions per sequence.
Phase = collections.namedtuple("Phase", ["max_seq_length", "max_predictions_per_seq"])

# (index variable, count variable, minimum variable or None), the first present wins.
_TASK_VARIABLES = (("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"),
                   ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", None),
                   ("PMI_RANK", "PMI_SIZE", None))


def phase_name(phase):
  """"seq128": the directory of a phase's records."""
  return "seq%d" % phase.max_seq_length


def parse_phases(value):
  """`--phases`, e.g. "128:20,512:80", as a tuple of Phase.

  Raises:
    errors.UsageError: naming --phases: not LENGTH:PREDICTIONS, out of range (length >= 5,
      1 <= predictions <= length), a length given twice, none.
  """
  phases = []
  for item in (value or "").split(","):
    if not item.strip():
      continue
    try:
      length, predictions = (int(part) for part in item.split(":"))
    except ValueError:
      raise errors.UsageError("--phases: %r is not LENGTH:PREDICTIONS (e.g. 128:20)" % item)
    errors.require(length >= 5, "--phases: %s: the sequence length must be >= 5", item)
    errors.require(1 <= predictions <= length, "--phases: %s: the predictions must be in "
                   "[1, the sequence length]", item)
    errors.require(length not in [p.max_seq_length for p in phases],
                   "--phases: the sequence length %d is given twice", length)
    phases.append(Phase(length, predictions))
  errors.require(phases, "--phases: no phase given (e.g. --phases=128:20,512:80)")
  return tuple(phases)


def task_from_environment(environ):
  """This process's (task index, number of tasks) by its launcher: a Slurm array
  (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT), Open MPI
  (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE), PMI (PMI_RANK, PMI_SIZE); else (0, 1).

  Raises:
    errors.UsageError: naming the variable whose value is not an integer.
  """
  for index_name, count_name, minimum_name in _TASK_VARIABLES:
    if index_name in environ and count_name in environ:
      values = {}
      for name in (index_name, count_name, minimum_name):
        if name is None:
          continue
        try:
          values[name] = int(environ.get(name, "0"))
        except ValueError:
          raise errors.UsageError("%s=%r is not an integer" % (name, environ[name]))
      return (values[index_name] - values.get(minimum_name, 0), values[count_name])
  return 0, 1


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
  """The values of prepare_corpus.py's flags (meanings: its flag definitions)."""
  inputs: typing.Tuple[str, ...]
  input_formats: typing.Tuple[str, ...]  # one per input: a format of documents.FORMATS or "auto"
  output_dir: str
  vocab_file: typing.Optional[str]
  vocab_size: int
  phases: typing.Tuple[Phase, ...]
  num_shards: int
  num_workers: int
  eval_fraction: float
  skip_bad_documents: bool
  stage: str
  task_index: int
  num_tasks: int
  pack: bool
  barrier_timeout_secs: float
  # The generator's options (`utils/datafiles/generator_flags.py`).
  do_lower_case: bool
  do_whole_word_mask: bool
  random_seed: int
  dupe_factor: int
  masked_lm_prob: float
  short_seq_prob: float
  # The training records without masks (the held-out ones keep fixed masks).
  dynamic_masking: bool = False

  @classmethod
  def from_flags(cls, flag_values, environ, default_num_workers):
    """The configuration of parsed flags.

    Args:
      flag_values: the parsed flags (absl.flags.FLAGS).
      environ: the environment, for the task's defaults (`task_from_environment`).
      default_num_workers: --num_workers when not given (the cores).

    Raises:
      errors.UsageError: naming the flag (--phases, --input_format) or environment variable.
    """
    f = flag_values
    inputs = tuple(f.input or ())
    formats = tuple(part.strip() for part in (f.input_format or "auto").split(","))
    if len(formats) == 1:
      formats *= len(inputs)
    task_index, num_tasks = task_from_environment(environ)
    return cls(
        inputs=inputs, input_formats=formats, output_dir=f.output_dir, vocab_file=f.vocab_file,
        vocab_size=f.vocab_size, phases=parse_phases(f.phases), num_shards=f.num_shards,
        num_workers=default_num_workers if f.num_workers is None else f.num_workers,
        eval_fraction=f.eval_fraction, skip_bad_documents=f.skip_bad_documents, stage=f.stage,
        task_index=task_index if f.task_index is None else f.task_index,
        num_tasks=num_tasks if f.num_tasks is None else f.num_tasks, pack=f.pack,
        barrier_timeout_secs=f.barrier_timeout_secs, do_lower_case=f.do_lower_case,
        do_whole_word_mask=f.do_whole_word_mask, random_seed=f.random_seed,
        dupe_factor=generator_flags.dupe_factor(f), masked_lm_prob=f.masked_lm_prob,
        short_seq_prob=f.short_seq_prob, dynamic_masking=f.dynamic_masking)

  def check(self):
    """Every rule about the values that needs no file.

    Raises:
      errors.UsageError: naming the flag.
    """
    require = errors.require
    require(self.inputs, "--input is required (a dump, a directory or a file; repeat it)")
    require(self.output_dir, "--output_dir is required")
    require(len(self.input_formats) == len(self.inputs), "--input_format lists %d formats for "
            "%d inputs: give one for all or one per --input", len(self.input_formats),
            len(self.inputs))
    for fmt in self.input_formats:
      require(fmt in documents.FORMATS + ("auto",), "--input_format: %r is not one of %s", fmt,
              ", ".join(documents.FORMATS + ("auto",)))
    require(self.num_shards >= 1, "--num_shards must be >= 1, got %d", self.num_shards)
    require(self.num_workers >= 1, "--num_workers must be >= 1, got %d", self.num_workers)
    require(0.0 <= self.eval_fraction < 1.0, "--eval_fraction must be in [0, 1), got %g",
            self.eval_fraction)
    require(self.vocab_size >= 1, "--vocab_size must be >= 1, got %d", self.vocab_size)
    require(self.stage in STAGES + ("all",), "--stage must be all or one of %s, got %r",
            ", ".join(STAGES), self.stage)
    require(self.stage != "pack" or self.pack, "--stage=pack needs --pack")
    require(self.num_tasks >= 1, "--num_tasks must be >= 1, got %d", self.num_tasks)
    require(0 <= self.task_index < self.num_tasks, "--task_index must be in [0, --num_tasks=%d), "
            "got %d", self.num_tasks, self.task_index)
    require(self.barrier_timeout_secs > 0, "--barrier_timeout_secs must be positive, got %g",
            self.barrier_timeout_secs)

  @property
  def splits(self):
    """The splits written: ("train", "eval"), or ("train",) when nothing is held out."""
    return SPLITS if self.eval_fraction > 0 else SPLITS[:1]

  @property
  def stages(self):
    """Every stage of the build, in order ("pack" with --pack only)."""
    return tuple(stage for stage in STAGES if stage != "pack" or self.pack)

  def generator_options(self, phase, split):
    """The generator's options of one phase and split: the held-out records are written with a
    dupe factor of 1 (every held-out document once) and fixed masks (an evaluation comparable
    whatever the training recipe), the training records with --dupe_factor, without masks with
    --dynamic_masking."""
    train = split == "train"
    return instances.GeneratorOptions(
        max_seq_length=phase.max_seq_length,
        max_predictions_per_seq=phase.max_predictions_per_seq,
        masked_lm_prob=self.masked_lm_prob, short_seq_prob=self.short_seq_prob,
        dupe_factor=self.dupe_factor if train else 1,
        do_whole_word_mask=self.do_whole_word_mask, random_seed=self.random_seed,
        dynamic_masking=self.dynamic_masking and train)
