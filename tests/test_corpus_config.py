"""utils/corpus/config.py: --phases, the task from the launcher's environment, the configuration
read from the flags and its rules (each naming its flag)."""

import dataclasses
import types

from absl import flags
import pytest

from utils.core import errors
from utils.corpus import config as config_lib
from utils.datafiles import generator_flags

FLAG_DEFAULTS = dict(
    input=["corpus/"], input_format="auto", output_dir="out", vocab_file=None, vocab_size=30522,
    phases="128:20,512:80", num_shards=256, num_workers=None, eval_fraction=0.01,
    skip_bad_documents=False, stage="all", task_index=None, num_tasks=None, pack=False,
    barrier_timeout_secs=60.0, do_lower_case=True, do_whole_word_mask=False, random_seed=12345,
    dupe_factor=10, masked_lm_prob=0.15, short_seq_prob=0.1, dynamic_masking=False)


def from_flags(environ=None, **overrides):
  flag_values = types.SimpleNamespace(**dict(FLAG_DEFAULTS, **overrides))
  return config_lib.CorpusConfig.from_flags(flag_values, environ or {}, default_num_workers=2)


def test_phases_are_length_prediction_pairs():
  assert config_lib.parse_phases("128:20, 512:80,") == (config_lib.Phase(128, 20),
                                                        config_lib.Phase(512, 80))
  assert config_lib.phase_name(config_lib.Phase(384, 56)) == "seq384"


@pytest.mark.parametrize("value, message", [
    ("128", "'128' is not LENGTH:PREDICTIONS"),
    ("128:x", "'128:x' is not LENGTH:PREDICTIONS"),
    ("4:2", "4:2: the sequence length must be >= 5"),
    ("128:0", "128:0: the predictions must be in"),
    ("64:65", "64:65: the predictions must be in"),
    ("128:20,128:10", "the sequence length 128 is given twice"),
    ("", "no phase given"),
])
def test_bad_phases_are_named(value, message):
  with pytest.raises(errors.UsageError, match="^--phases: .*" + message.replace("(", r"\(")):
    config_lib.parse_phases(value)


@pytest.mark.parametrize("environ, expected", [
    ({}, (0, 1)),
    ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_COUNT": "3"},
     (1, 3)),
    ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"}, (2, 4)),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "PMI_RANK": "0",
      "PMI_SIZE": "1"}, (1, 2)),
    ({"PMI_RANK": "3", "PMI_SIZE": "8"}, (3, 8)),
    ({"OMPI_COMM_WORLD_RANK": "1"}, (0, 1)),  # no size: not a task of a group
])
def test_the_task_comes_from_the_launchers_environment(environ, expected):
  assert config_lib.task_from_environment(environ) == expected


def test_a_task_variable_that_is_not_a_number_is_named():
  with pytest.raises(errors.UsageError, match="PMI_SIZE='many' is not an integer"):
    config_lib.task_from_environment({"PMI_RANK": "0", "PMI_SIZE": "many"})


def test_the_configuration_of_the_flags():
  config = from_flags({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
                      input=["a.xml.bz2", "books/"], input_format="wikidump,directory")
  config.check()
  assert (config.inputs, config.input_formats) == (("a.xml.bz2", "books/"),
                                                   ("wikidump", "directory"))
  assert (config.task_index, config.num_tasks, config.num_workers) == (1, 2, 2)
  assert config.phases == (config_lib.Phase(128, 20), config_lib.Phase(512, 80))
  assert config.stages == ("extract", "shard", "vocab", "records", "check")
  assert config.splits == ("train", "eval")
  # The flags win over the environment; one format is every input's.
  config = from_flags({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, task_index=0,
                      num_tasks=1, input=["a", "b"], input_format="directory", pack=True,
                      eval_fraction=0.0, num_workers=3)
  assert (config.task_index, config.num_tasks, config.num_workers) == (0, 1, 3)
  assert config.input_formats == ("directory", "directory")
  assert "pack" in config.stages and config.splits == ("train",)
  with pytest.raises(dataclasses.FrozenInstanceError):
    config.num_shards = 3


def test_held_out_records_are_written_once_and_training_records_dupe_factor_times():
  config = from_flags(dupe_factor=7, do_whole_word_mask=True, random_seed=3)
  train = config.generator_options(config_lib.Phase(64, 10), "train")
  held_out = config.generator_options(config_lib.Phase(64, 10), "eval")
  assert train._asdict() == dict(max_seq_length=64, max_predictions_per_seq=10,
                                 masked_lm_prob=0.15, short_seq_prob=0.1, dupe_factor=7,
                                 do_whole_word_mask=True, random_seed=3, dynamic_masking=False)
  assert held_out._replace(dupe_factor=7) == train and held_out.dupe_factor == 1


class _ParsedFlags(object):
  """prepare_corpus's flags: the generator's parsed by absl (whether one was given counts), the
  corpus's own at FLAG_DEFAULTS."""

  def __init__(self, *argv):
    self._values = flags.FlagValues()
    generator_flags.define_generator_flags(self._values)
    self._values(["prepare_corpus.py"] + list(argv))

  def __getattr__(self, name):
    return self._values[name].value if name in self._values else FLAG_DEFAULTS[name]

  def __getitem__(self, name):
    return self._values[name]


def _config_of(*argv):
  """The CorpusConfig of the generator flags `argv`, the corpus's flags at their defaults."""
  return config_lib.CorpusConfig.from_flags(_ParsedFlags(*argv), {}, default_num_workers=2)


def test_dynamic_masking_leaves_the_masks_out_of_the_training_records_only():
  """With --dynamic_masking the training split's records have no masks and one copy of the text
  unless --dupe_factor is given; the held-out split keeps fixed masks and one copy."""
  phase = config_lib.Phase(64, 10)
  config = _config_of("--dynamic_masking")
  train, held_out = config.generator_options(phase, "train"), config.generator_options(phase,
                                                                                      "eval")
  assert (train.dynamic_masking, train.dupe_factor) == (True, 1)
  assert (held_out.dynamic_masking, held_out.dupe_factor) == (False, 1)
  assert held_out == _config_of().generator_options(phase, "eval")  # as without the flag
  assert _config_of("--dynamic_masking", "--dupe_factor=4").generator_options(
      phase, "train").dupe_factor == 4
  assert _config_of("--dupe_factor=4").generator_options(phase, "train") == train._replace(
      dynamic_masking=False, dupe_factor=4)
  assert _config_of().dupe_factor == 10


@pytest.mark.parametrize("overrides, message", [
    (dict(input=[]), "--input is required"),
    (dict(output_dir=None), "--output_dir is required"),
    (dict(input=["a", "b", "c"], input_format="auto,directory"),
     "--input_format lists 2 formats for 3 inputs"),
    (dict(input_format="csv"), "--input_format: 'csv' is not one of wikidump, directory"),
    (dict(num_shards=0), "--num_shards must be >= 1"),
    (dict(num_workers=0), "--num_workers must be >= 1"),
    (dict(eval_fraction=1.0), r"--eval_fraction must be in \[0, 1\)"),
    (dict(eval_fraction=-0.1), r"--eval_fraction must be in \[0, 1\)"),
    (dict(vocab_size=0), "--vocab_size must be >= 1"),
    (dict(stage="pack"), "--stage=pack needs --pack"),
    (dict(num_tasks=0, task_index=0), "--num_tasks must be >= 1"),
    (dict(num_tasks=2, task_index=2), r"--task_index must be in \[0, --num_tasks=2\), got 2"),
    (dict(barrier_timeout_secs=0), "--barrier_timeout_secs must be positive"),
])
def test_each_rule_names_its_flag(overrides, message):
  with pytest.raises(errors.UsageError, match=message):
    from_flags(**overrides).check()
