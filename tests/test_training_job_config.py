"""utils/training/job_config.py: the shared flags read once into a typed, frozen JobConfig, and
every rule of their values, checked in process (the scripts' end-to-end usage-error tests run the
same rules through `main`)."""

import dataclasses

from absl import flags
import pytest

import optimization
from tests import helpers
from utils.core import errors
from utils.training import flags as job_flags
from utils.training import job_config

REQUIRED = ["--bert_config_file=bert_config.json", "--output_dir=out"]
TRAIN = {"do_train": True}


def config(*args):
  return helpers.job_config(REQUIRED + list(args))


def usage_error(*args, actions=None):
  """The message of the usage error the shared checks raise for the flags `args`."""
  with pytest.raises(errors.UsageError) as raised:
    config(*args).check(TRAIN if actions is None else actions)
  return str(raised.value)


def test_every_shared_flag_has_a_field_of_its_value_and_type():
  values = config("--train_batch_size=7", "--learning_rate=0.5", "--bf16", "--seed=3",
                  "--tpu_name=grpc://tpu")
  assert (values.train_batch_size, values.learning_rate, values.bf16, values.seed,
          values.tpu_name) == (7, 0.5, True, 3, "grpc://tpu")
  # Defaults are the flags' (utils/training/flags.py): unset strings None, a fixed seed.
  assert values.init_checkpoint is None and values.num_accumulation_steps == 1
  assert values.seed == 3 and config().seed == job_flags.DEFAULT_SEED
  # A field for every flag utils/training/flags.py defines (its alias --use_fp16 is --amp), and
  # nothing else.
  # --precision's field is precision_flag (the `precision` property is the optimizer's view).
  fields = {job_config.FLAG_OF_FIELD.get(field.name, field.name)
            for field in dataclasses.fields(job_config.JobConfig)} - {"given"}
  defined = {flag.name for flag in flags.FLAGS.get_flags_for_module(job_flags)}
  assert fields == defined - {"use_fp16"}


def test_given_names_the_flags_on_the_command_line_only():
  values = config("--save_checkpoints_steps=1000", "--nobf16")
  assert values.given == {"bert_config_file", "output_dir", "save_checkpoints_steps", "bf16"}
  assert "train_batch_size" not in values.given


@pytest.mark.parametrize("name,field", [("bf16", "bf16"), ("fp16", "manual_fp16"),
                                        ("amp", "amp")])
def test_precision_by_name_is_its_flag(name, field):
  values = config("--precision=" + name)
  assert getattr(values, field) and values.precision == config("--" + field).precision
  assert values.precision.name == name and not values.auto_precision
  values.check(TRAIN)
  assert values.given >= {"precision"} and field not in values.given


def test_precision_fp32_and_auto():
  assert config("--precision=fp32").precision == config().precision
  auto = config("--precision=auto")
  auto.check(TRAIN)
  # Until the job measures (utils/training/job.py, decide_precision), auto is fp32's view.
  assert auto.auto_precision and auto.precision.name == "fp32"
  assert auto.with_precision("bf16").precision.name == "bf16"
  assert auto.with_precision("bf16").auto_precision
  assert auto.with_precision("fp32") == auto


@pytest.mark.parametrize("args,message", [
    (("--precision=auto", "--bf16"), "--precision=auto and --bf16 exclude each other: give one"),
    (("--precision=fp32", "--manual_fp16"),
     "--precision=fp32 and --manual_fp16 exclude each other: give one"),
    (("--precision=bf16", "--amp"), "--precision=bf16 and --amp exclude each other: give one"),
    (("--precision=auto", "--use_tpu"),
     "--precision=auto measures this machine's CPU or GPU, not a TPU: give --precision=bf16 or "
     "--precision=fp32 with --use_tpu")])
def test_precision_refused_beside_another_precision_flag(args, message):
  assert usage_error(*args) == message


def test_an_unknown_precision_is_a_usage_error():
  with pytest.raises(flags.IllegalFlagValueError, match="fp8"):
    config("--precision=fp8")


def test_frozen():
  values = config()
  with pytest.raises(dataclasses.FrozenInstanceError):
    values.learning_rate = 1.0  # pylint: disable=assigning-non-existing-attribute


def test_derived_values():
  values = config("--train_batch_size=8", "--num_accumulation_steps=4")
  assert values.global_batch_size(3) == 8 * 4 * 3
  assert values.random_seed is None
  assert config("--deterministic_run", "--seed=9").random_seed == 9


def test_a_valid_configuration_passes():
  config().check(TRAIN)
  config("--bf16", "--num_accumulation_steps=2", "--horovod", "--save_checkpoints_secs=60",
         "--resume_from_step=0").check(TRAIN)
  config("--use_tpu", "--tpu_name=t").check({"do_train": False, "do_predict": True})


@pytest.mark.parametrize("args,actions,message", [
    ((), {"do_train": False, "do_eval": False}, "one of --do_train, --do_eval is required"),
    (("--output_dir=",), None, "--output_dir is required"),
    (("--train_batch_size=0",), None, "--train_batch_size must be >= 1, got 0"),
    (("--iterations_per_loop=0",), None, "--iterations_per_loop must be >= 1, got 0"),
    (("--resume_from_step=-1",), None, "--resume_from_step must be >= 0, got -1"),
    (("--intra_op_threads=-1",), None, "--intra_op_threads and --inter_op_threads must be >= 0"),
    (("--save_checkpoints_secs=60", "--save_checkpoints_steps=1000"), None,
     "--save_checkpoints_secs and --save_checkpoints_steps exclude each other: give one"),
    (("--save_checkpoints_secs=0",), None, "--save_checkpoints_secs must be >= 1 second, got 0"),
    (("--init_loss_scale=0",), None, "--init_loss_scale must be positive, got 0"),
    (("--amp", "--manual_fp16"), None, "--amp and --manual_fp16 cannot be combined"),
    (("--bf16", "--amp"), None, "--bf16 and --amp cannot be combined: choose one precision"),
    (("--num_accumulation_steps=0",), None, "--num_accumulation_steps must be >= 1, got 0"),
    (("--use_tpu", "--horovod"), None, "--use_tpu and --horovod cannot be combined"),
    (("--use_tpu", "--num_accumulation_steps=2"), None,
     "--use_tpu with --num_accumulation_steps > 1 is not supported"),
])
def test_each_rule_names_its_flags(args, actions, message):
  assert usage_error(*args, actions=actions).startswith(message)


def test_save_checkpoints_steps_at_its_default_value_but_not_given_is_no_conflict():
  config("--save_checkpoints_secs=60").check(TRAIN)


def test_schedule_rules_name_the_step_flags():
  values = config("--optimizer_type=adam")
  values.check_schedule(10, 2)
  with pytest.raises(errors.UsageError) as raised:
    values.check_schedule(10, 10)
  assert str(raised.value) == ("--num_warmup_steps (10) must be smaller than --num_train_steps "
                               "(10) with --optimizer_type=adam and --lr_schedule=recipe: the "
                               "decay starts at the end of warmup")
  with pytest.raises(errors.UsageError, match="^--num_train_steps must be >= 1, got 0$"):
    values.check_schedule(0, 0)
  with pytest.raises(errors.UsageError, match="^--learning_rate must be positive, got 0.0$"):
    config("--learning_rate=0").check_schedule(10, 0)


def test_optimizer_option_rules_name_their_flags():
  lamb = config("--optimizer_type=lamb")
  # LAMB's recipe decays from the peak: warmup may fill the run; the linear decay starts at its end.
  lamb.check_schedule(10, 10)
  with pytest.raises(errors.UsageError, match=r"^--num_warmup_steps \(10\) must be smaller than "
                     r"--num_train_steps \(10\) with --optimizer_type=lamb and "
                     r"--lr_schedule=linear"):
    lamb.check_schedule(10, 10, dict(lr_schedule="linear"))
  with pytest.raises(errors.UsageError, match=r"^--lr_schedule must be one of"):
    lamb.check_schedule(10, 1, dict(lr_schedule="cosine"))
  with pytest.raises(errors.UsageError, match=r"^--adam_beta2 must be in \[0, 1\), got 1.0$"):
    lamb.check_schedule(10, 1, dict(adam_beta2=1.0))
  with pytest.raises(errors.UsageError, match=r"^--adam_epsilon must be positive, got 0.0$"):
    lamb.check_schedule(10, 1, dict(adam_epsilon=0.0))
  schedule = lamb.schedule(2, 10, 1, dict(lr_schedule="linear", adam_beta2=0.98,
                                          adam_epsilon=1e-8))
  assert schedule == optimization.Schedule("lamb", 2 * lamb.learning_rate, 10, 1, "linear", 0.98,
                                           1e-8)


def test_flag_error_marks_whole_names_only():
  error = job_config.flag_error(ValueError("amp and manual_fp16 cannot be combined (example)"))
  assert isinstance(error, errors.UsageError)
  assert str(error) == "--amp and --manual_fp16 cannot be combined (example)"


def test_the_optimizers_settings_are_views_of_the_config():
  values = config("--optimizer_type=adam", "--learning_rate=0.5", "--manual_fp16",
                  "--init_loss_scale=128", "--num_accumulation_steps=4",
                  "--allreduce_post_accumulation", "--tpu_estimator")
  # The learning rate is per worker: the schedule's is that x the workers.
  assert values.schedule(3, 100, 10) == optimization.Schedule("adam", 1.5, 100, 10)
  # A run that does not train still has one update in its schedule.
  assert values.schedule(1, 0, 0).num_train_steps == 1
  assert values.precision == optimization.Precision(manual_fp16=True, amp=False,
                                                    init_loss_scale=128, bf16=False)
  assert values.precision.name == "fp16" and config("--bf16").precision.name == "bf16"
  assert config().precision.name == "fp32"
  assert values.accumulation == optimization.Accumulation(4, True)
  assert values.distribution(None) == optimization.Distribution(hvd=None, use_tpu=False,
                                                                tpu_estimator=True)
  assert values.distribution(None).uses_tpu_estimator
  assert not config().distribution(None).uses_tpu_estimator


def test_refuse_names_the_first_unused_flag_given():
  config("--learning_rate=0.5").refuse(["num_accumulation_steps"], "run_squad.py")
  with pytest.raises(errors.UsageError,
                     match="^--num_accumulation_steps is not a flag of run_squad.py$"):
    config("--num_accumulation_steps=2").refuse(["num_accumulation_steps"], "run_squad.py")
