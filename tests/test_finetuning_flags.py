"""utils/finetuning/flags.py: the flags both fine-tuning scripts take, defined once by this module
with the original release's names, types and defaults, taken by run_squad.py and run_classifier.py,
and never read here.

The global absl FLAGS is only inspected (definitions and defaults); parsing happens in private
copies of the flags."""

import ast
import copy
import dataclasses
import types

from absl import flags
import pytest

import run_classifier
import run_squad
from utils.core import errors
from utils.finetuning import config as finetuning_config
from utils.finetuning import flags as finetuning_flags
from utils.training import flags as job_flags

MODULE = finetuning_flags.__name__

# The release's run_classifier.py / run_squad.py definitions (both scripts agree), written out:
# name -> (absl type, default).
RELEASE_FLAGS = {"vocab_file": ("string", None),
                 "do_lower_case": ("bool", True),
                 "num_train_epochs": ("float", 3.0),
                 "warmup_proportion": ("float", 0.1),
                 "do_predict": ("bool", False),
                 "predict_batch_size": ("int", 8)}
# Ours on top of the release's (the SavedModel export); its default is not documented.
OWN_FLAGS = {"export_dir": "string"}
# The release's flags that run_pretraining.py takes too (the vocabulary its drawn masks use):
# the shared module defines them.
SHARED_FLAGS = {"vocab_file"}


def defining_module(name):
  """The module that must define flag `name`."""
  return job_flags.__name__ if name in SHARED_FLAGS else MODULE


def private_copy(names):
  """A FlagValues holding copies of the global definitions of `names` (parsing it leaks
  nothing)."""
  values = flags.FlagValues()
  for name in names:
    values[name] = copy.deepcopy(flags.FLAGS[name])
  return values


def test_the_release_flags_are_defined_here_with_the_releases_types_and_defaults():
  for name, (flag_type, default) in RELEASE_FLAGS.items():
    flag = flags.FLAGS[name]
    assert flags.FLAGS.find_module_defining_flag(name) == defining_module(name), name
    assert flag.flag_type() == flag_type, name
    assert flag.default == default and type(flag.default) is type(default), name
  for name, flag_type in OWN_FLAGS.items():
    assert flags.FLAGS.find_module_defining_flag(name) == MODULE, name
    assert flags.FLAGS[name].flag_type() == flag_type, name


def test_the_module_defines_only_the_fine_tuning_flags_on_top_of_the_shared_ones():
  """The vocabulary, epochs and warmup, prediction and export: nothing else, and none of the
  shared job flags (utils/training/flags.py), which the fine-tuning checks read too."""
  defined = {flag.name for flag in flags.FLAGS.flags_by_module_dict()[MODULE]}
  assert defined == (set(RELEASE_FLAGS) - SHARED_FLAGS) | set(OWN_FLAGS)
  for shared in ("learning_rate", "init_checkpoint", "train_batch_size", "max_seq_length",
                 "use_tpu", "deterministic_run", "seed"):
    assert flags.FLAGS.find_module_defining_flag(shared) == job_flags.__name__, shared


@pytest.mark.parametrize("script", [run_squad, run_classifier], ids=lambda m: m.__name__)
def test_both_fine_tuning_scripts_take_the_flags_as_their_own(script):
  """Key flags of each script (its --helpshort lists them), still defined by this module alone
  (the shared ones by utils/training/flags.py)."""
  key_flags = {flag.name for flag in flags.FLAGS.get_key_flags_for_module(script)}
  assert set(RELEASE_FLAGS) | set(OWN_FLAGS) <= key_flags
  for name in RELEASE_FLAGS:
    assert flags.FLAGS.find_module_defining_flag(name) == defining_module(name), (
        script.__name__, name)


def test_the_release_command_lines_parse_to_the_flag_types():
  values = private_copy(list(RELEASE_FLAGS) + list(OWN_FLAGS))
  values(["prog", "--vocab_file=/m/vocab.txt", "--nodo_lower_case", "--num_train_epochs=2.5",
          "--warmup_proportion=0", "--do_predict", "--predict_batch_size=16",
          "--export_dir=/m/export"])
  assert values.vocab_file == "/m/vocab.txt" and values.export_dir == "/m/export"
  assert values.do_lower_case is False and values.do_predict is True
  assert values.num_train_epochs == 2.5 and values.warmup_proportion == 0.0
  assert values.predict_batch_size == 16
  with pytest.raises(flags.IllegalFlagValueError, match="predict_batch_size"):
    private_copy(["predict_batch_size"])(["prog", "--predict_batch_size=2.5"])
  # The copies were parsed, not the global flags.
  assert not flags.FLAGS["do_lower_case"].present and not flags.FLAGS["do_predict"].present


def test_the_release_defaults_pass_the_fine_tuning_checks_once_a_vocabulary_is_given():
  # The shared flags the checks read (--learning_rate, --init_checkpoint) at their defaults too.
  shared = types.SimpleNamespace(**{name: flags.FLAGS[name].default
                                    for name in ("learning_rate", "init_checkpoint",
                                                 "vocab_file")})
  defaults = finetuning_config.FinetuningConfig(**{
      name: flags.FLAGS[name].default
      for name in list(RELEASE_FLAGS) + list(OWN_FLAGS) if name not in SHARED_FLAGS})
  assert shared.vocab_file is None
  defaults.check(types.SimpleNamespace(**dict(vars(shared), vocab_file="vocab.txt")))
  with pytest.raises(errors.UsageError, match="--vocab_file is required"):
    defaults.check(shared)


def test_the_module_reads_no_parsed_value():
  """It only defines: no FLAGS access, every call a flags.DEFINE_*."""
  with open(finetuning_flags.__file__) as source:
    tree = ast.parse(source.read())
  names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
  attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
  assert "FLAGS" not in names | attributes
  calls = [node.func for node in ast.walk(tree) if isinstance(node, ast.Call)]
  assert calls and all(isinstance(func, ast.Attribute) and func.attr.startswith("DEFINE_")
                       for func in calls)
