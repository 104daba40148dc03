"""The fine-tuning flags as one typed, frozen value, read once from the parsed flags at the top of
run_squad.py's and run_classifier.py's `run` and passed down, beside the shared flags' `JobConfig`
(`utils/training/job_config.py`): nothing below the scripts reads the flags object.

`FinetuningConfig` has a field for every flag of `utils/finetuning/flags.py`, of the flag's type;
`check` holds every rule about their values that needs no file (two read shared values:
--learning_rate and --init_checkpoint). `read_flags` builds a script's own frozen dataclass the
same way (run_squad.py's `SquadConfig`, run_classifier.py's `ClassifierConfig`).
"""

import dataclasses
import typing

import tokenization
from utils.core import errors


def read_flags(cls, flag_values):
  """An instance of the frozen dataclass `cls` whose every field holds the parsed value of the
  flag of its name.

  Args:
    cls: a dataclass whose fields are named after flags.
    flag_values: the parsed flags (`absl.flags.FLAGS` after the script's defaults).

  Raises:
    KeyError: naming a field the flags object has no flag for.
  """
  return cls(**{field.name: flag_values[field.name].value for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class FinetuningConfig:
  """The values of the fine-tuning flags (meanings: `utils/finetuning/flags.py`)."""
  do_lower_case: bool
  num_train_epochs: float
  warmup_proportion: float
  do_predict: bool
  predict_batch_size: int
  export_dir: typing.Optional[str]

  @classmethod
  def from_flags(cls, flag_values):
    """The configuration of parsed flags (`read_flags`)."""
    return read_flags(cls, flag_values)

  def actions(self, config, names):
    """The script's action flags and their values, for `JobConfig.check`.

    Args:
      config: the `job_config.JobConfig` of the shared flags (--do_train, --do_eval).
      names: the action flags, in the order the message lists them (e.g. "do_train",
        "do_predict", "export_dir").

    Returns:
      dict name -> value, in the order of `names`: this configuration's field of that name, else
      the shared one.
    """
    return {name: getattr(self if name in _FIELDS else config, name) for name in names}

  def check(self, config):
    """Every rule about the fine-tuning flags' values that needs no file access, on top of
    `JobConfig.check`.

    Args:
      config: the `job_config.JobConfig` of the shared flags (--learning_rate and
        --init_checkpoint are checked here too: fine-tuning's rules of them).

    Raises:
      errors.UsageError: naming the flag.
    """
    require = errors.require
    require(config.vocab_file, "--vocab_file is required")
    require(self.predict_batch_size >= 1, "--predict_batch_size must be >= 1, got %d",
            self.predict_batch_size)
    require(config.learning_rate > 0, "--learning_rate must be positive, got %g",
            config.learning_rate)
    require(self.num_train_epochs > 0, "--num_train_epochs must be positive, got %g",
            self.num_train_epochs)
    require(0 <= self.warmup_proportion < 1, "--warmup_proportion must be in [0, 1), got %g",
            self.warmup_proportion)
    try:
      tokenization.validate_case_matches_checkpoint(self.do_lower_case, config.init_checkpoint)
    except ValueError as e:
      raise errors.UsageError(str(e))


_FIELDS = frozenset(field.name for field in dataclasses.fields(FinetuningConfig))
