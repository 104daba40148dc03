"""utils/finetuning/config.py: the fine-tuning flags read once into a typed, frozen
FinetuningConfig, and every rule of their values, each refused with its message word for word
(the scripts' end-to-end usage-error tests run the same rules through `main`)."""

import dataclasses
import typing

from absl import flags
import pytest

from tests import helpers
from utils.core import errors
from utils.finetuning import config as finetuning_config
from utils.finetuning import flags as finetuning_flags
from utils.training import job_config

VOCAB = "--vocab_file=vocab.txt"


def configs(*args):
  """(FinetuningConfig, JobConfig) of the command line `args` (the global flags are put back)."""
  with helpers.parsed_flags("prog", list(args)):
    return (finetuning_config.FinetuningConfig.from_flags(flags.FLAGS),
            job_config.JobConfig.from_flags(flags.FLAGS))


def check(*args):
  """Runs `FinetuningConfig.check` on the command line `args`."""
  tuning, config = configs(*args)
  tuning.check(config)


def test_every_fine_tuning_flag_has_a_field_of_its_value_and_type():
  tuning, config = configs(VOCAB, "--nodo_lower_case", "--num_train_epochs=2",
                           "--warmup_proportion=0", "--do_predict", "--predict_batch_size=16",
                           "--export_dir=/m/export")
  assert config.vocab_file == "vocab.txt"
  assert tuning == finetuning_config.FinetuningConfig(
      do_lower_case=False, num_train_epochs=2.0, warmup_proportion=0.0,
      do_predict=True, predict_batch_size=16, export_dir="/m/export")
  # Each value is of its flag's type: "--num_train_epochs=2" is the float 2.0.
  types = {field.name: field.type for field in dataclasses.fields(tuning)}
  for name, value in dataclasses.asdict(tuning).items():
    expected = (str if types[name] == typing.Optional[str] else types[name])
    assert type(value) is expected, (name, value)
  # Defaults are the flags' (utils/finetuning/flags.py).
  defaults, shared = configs()
  assert (shared.vocab_file, defaults.do_lower_case, defaults.num_train_epochs,
          defaults.warmup_proportion, defaults.do_predict, defaults.predict_batch_size,
          defaults.export_dir) == (None, True, 3.0, 0.1, False, 8, None)
  # A field for every flag utils/finetuning/flags.py defines, and nothing else (the shared flags,
  # --vocab_file among them as run_pretraining.py takes it too, are the JobConfig's).
  fields = set(types)
  defined = {flag.name for flag in flags.FLAGS.get_flags_for_module(finetuning_flags)}
  assert fields == defined
  assert not fields & {field.name for field in dataclasses.fields(job_config.JobConfig)}


def test_frozen():
  tuning, _ = configs(VOCAB)
  with pytest.raises(dataclasses.FrozenInstanceError):
    tuning.do_lower_case = False  # pylint: disable=assigning-non-existing-attribute


def test_a_valid_configuration_passes_and_the_edges_of_the_ranges_too():
  check(VOCAB)
  check(VOCAB, "--predict_batch_size=1", "--warmup_proportion=0", "--num_train_epochs=0.01",
        "--learning_rate=1e-9")
  # A checkpoint whose casing matches, or one that is not a released model.
  check(VOCAB, "--init_checkpoint=/m/uncased_L-12_H-768_A-12/bert_model.ckpt")
  check(VOCAB, "--nodo_lower_case", "--init_checkpoint=/m/cased_L-12_H-768_A-12/bert_model.ckpt")
  check(VOCAB, "--nodo_lower_case", "--init_checkpoint=/runs/mine/model.ckpt-9")


@pytest.mark.parametrize("args,message", [
    ((), "--vocab_file is required"),
    (("--vocab_file=",), "--vocab_file is required"),
    ((VOCAB, "--predict_batch_size=0"), "--predict_batch_size must be >= 1, got 0"),
    ((VOCAB, "--learning_rate=0"), "--learning_rate must be positive, got 0"),
    ((VOCAB, "--learning_rate=-1e-5"), "--learning_rate must be positive, got -1e-05"),
    ((VOCAB, "--num_train_epochs=0"), "--num_train_epochs must be positive, got 0"),
    ((VOCAB, "--num_train_epochs=-1.5"), "--num_train_epochs must be positive, got -1.5"),
    ((VOCAB, "--warmup_proportion=1"), "--warmup_proportion must be in [0, 1), got 1"),
    ((VOCAB, "--warmup_proportion=-0.1"), "--warmup_proportion must be in [0, 1), got -0.1"),
    ((VOCAB, "--nodo_lower_case", "--init_checkpoint=/m/uncased_L-12_H-768_A-12/bert_model.ckpt"),
     "--do_lower_case=False does not match --init_checkpoint=/m/uncased_L-12_H-768_A-12/"
     "bert_model.ckpt: uncased_L-12_H-768_A-12 is a lower-cased model, pass "
     "--do_lower_case=True"),
    ((VOCAB, "--init_checkpoint=/m/cased_L-12_H-768_A-12/bert_model.ckpt"),
     "--do_lower_case=True does not match --init_checkpoint=/m/cased_L-12_H-768_A-12/"
     "bert_model.ckpt: cased_L-12_H-768_A-12 is a cased model, pass --do_lower_case=False"),
    # Several bad values: the first rule's message.
    (("--predict_batch_size=0", "--warmup_proportion=2"), "--vocab_file is required"),
    ((VOCAB, "--num_train_epochs=0", "--warmup_proportion=2"),
     "--num_train_epochs must be positive, got 0"),
])
def test_each_rule_is_refused_with_its_message(args, message):
  with pytest.raises(errors.UsageError) as raised:
    check(*args)
  assert str(raised.value) == message


def test_actions_are_read_from_the_config_that_holds_each_flag_in_the_order_given():
  tuning, config = configs(VOCAB, "--do_train", "--export_dir=/m/export")
  actions = tuning.actions(config, ("do_train", "do_eval", "do_predict", "export_dir"))
  assert list(actions.items()) == [("do_train", True), ("do_eval", False), ("do_predict", False),
                                   ("export_dir", "/m/export")]
  # None given: the shared check's message lists them in that order.
  tuning, config = configs(VOCAB)
  with pytest.raises(errors.UsageError) as raised:
    config.check(tuning.actions(config, ("do_train", "do_predict", "export_dir")))
  assert str(raised.value) == "one of --do_train, --do_predict, --export_dir is required"


def test_read_flags_builds_any_dataclass_named_after_flags():

  @dataclasses.dataclass(frozen=True)
  class Script:
    train_batch_size: int
    vocab_file: typing.Optional[str]

  with helpers.parsed_flags("prog", ["--train_batch_size=4", VOCAB]):
    assert finetuning_config.read_flags(Script, flags.FLAGS) == Script(4, "vocab.txt")

  @dataclasses.dataclass(frozen=True)
  class Unknown:
    no_such_flag: int

  with pytest.raises(KeyError, match="no_such_flag"):
    finetuning_config.read_flags(Unknown, flags.FLAGS)
