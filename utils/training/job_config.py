"""The shared flags of an Estimator script as one typed, frozen value, read once from the parsed
flags by the script's `main` (`entry.script_main`) and passed down: nothing below the script
reads the flags object.

`JobConfig` has a field for every flag of `utils/training/flags.py`, of the flag's type (named
as the flag, but for --precision: `precision_flag`), plus `given`, the names of the flags that
were on the command line (two rules depend on it: --save_checkpoints_secs excludes a given
--save_checkpoints_steps, and a script refuses shared flags it has no use for when they are
given). `check` holds every rule about their values that needs no
file; the scripts add the rules of their own flags. The optimizer's settings are views of it
(`schedule`, `precision`, `accumulation`, `distribution`), built where they are used.
"""

import dataclasses
import re
import typing

import optimization
from utils.core import errors


@dataclasses.dataclass(frozen=True)
class JobConfig:
  """The values of the shared flags (meanings: `utils/training/flags.py`)."""
  # Model, checkpoints and outputs.
  bert_config_file: typing.Optional[str]
  vocab_file: typing.Optional[str]
  output_dir: typing.Optional[str]
  init_checkpoint: typing.Optional[str]
  dllog_path: typing.Optional[str]
  max_seq_length: int
  save_checkpoints_steps: int
  save_checkpoints_secs: typing.Optional[int]
  keep_checkpoint_max: int
  resume_from_step: typing.Optional[int]
  save_graph_def: bool
  # What to run.
  do_train: bool
  do_eval: bool
  train_batch_size: int
  eval_batch_size: int
  # The training step.
  optimizer_type: str
  learning_rate: float
  num_accumulation_steps: int
  allreduce_post_accumulation: bool
  manual_fp16: bool
  amp: bool
  bf16: bool
  precision_flag: typing.Optional[str]
  init_loss_scale: int
  use_xla: bool
  deterministic_run: bool
  seed: int
  # Logging.
  display_loss_steps: int
  report_loss: bool
  verbose_logging: bool
  # Workers and the session.
  horovod: bool
  node_local_output_dir: bool
  checkpoint_all_workers: bool
  force_weight_sync: bool
  enable_scoped_allocator: bool
  intra_op_threads: int
  inter_op_threads: int
  # TPU.
  use_tpu: bool
  tpu_name: typing.Optional[str]
  tpu_zone: typing.Optional[str]
  gcp_project: typing.Optional[str]
  master: typing.Optional[str]
  num_tpu_cores: int
  iterations_per_loop: int
  tpu_estimator: bool
  # The names of the flags given on the command line.
  given: typing.FrozenSet[str] = frozenset()

  @classmethod
  def from_flags(cls, flag_values):
    """The configuration of parsed flags (`absl.flags.FLAGS` after the script's defaults).

    Raises:
      KeyError: naming a field the flags object has no flag for (a script that did not import
        `utils/training/flags.py`).
    """
    fields = [field.name for field in dataclasses.fields(cls) if field.name != "given"]
    values = {field: flag_values[FLAG_OF_FIELD.get(field, field)].value for field in fields}
    given = frozenset(FLAG_OF_FIELD.get(field, field) for field in fields
                      if flag_values[FLAG_OF_FIELD.get(field, field)].present)
    # --precision=fp16|amp|bf16 is the flag of that precision (`check` refuses both given).
    named = PRECISION_FLAG_FIELDS.get(values["precision_flag"])
    if named:
      values[named] = True
    return cls(given=given, **values)

  @property
  def auto_precision(self):
    """--precision=auto: the job measures which of fp32 and bf16 is faster here
    (`utils/runtime/bf16_probe.py`) and takes it (`with_precision`)."""
    return self.precision_flag == "auto"

  def with_precision(self, name):
    """This configuration computing in `name` ("fp32" or "bf16"), what --precision=auto chose."""
    return dataclasses.replace(self, bf16=name == "bf16")

  @property
  def random_seed(self):
    """The graph-level seed: --seed in a deterministic run, else None."""
    return self.seed if self.deterministic_run else None

  def global_batch_size(self, num_workers):
    """Examples per optimizer update over `num_workers` workers."""
    return self.train_batch_size * self.num_accumulation_steps * num_workers

  def job_learning_rate(self, num_workers):
    """The schedule's peak learning rate over `num_workers` workers: --learning_rate is per worker
    (NVIDIA's convention), so the job's is that x workers."""
    return self.learning_rate * num_workers

  def schedule(self, num_workers, num_train_steps, num_warmup_steps, options=None):
    """The optimizer's description: which one, its learning-rate schedule and its moments.

    Args:
      num_workers: the job's workers (the schedule's rate is `job_learning_rate`).
      num_train_steps: optimizer updates (0 when the run does not train).
      num_warmup_steps: warmup updates.
      options: None (the recipe's), or a dict of the `optimization.Schedule` fields a script's
        flags set (run_pretraining.py: lr_schedule, adam_beta2, adam_epsilon).

    Returns:
      `optimization.Schedule`.
    """
    # A run that does not train still builds its model_fn: the schedule needs an update.
    return optimization.Schedule(self.optimizer_type, self.job_learning_rate(num_workers),
                                 max(num_train_steps, 1), num_warmup_steps, **(options or {}))

  @property
  def precision(self):
    """The `optimization.Precision` of --manual_fp16, --amp, --bf16 and --init_loss_scale."""
    return optimization.Precision(manual_fp16=self.manual_fp16, amp=self.amp,
                                  init_loss_scale=self.init_loss_scale, bf16=self.bf16)

  @property
  def accumulation(self):
    """The `optimization.Accumulation` of --num_accumulation_steps and
    --allreduce_post_accumulation."""
    return optimization.Accumulation(self.num_accumulation_steps,
                                     self.allreduce_post_accumulation)

  def distribution(self, hvd):
    """The `optimization.Distribution` of the job.

    Args:
      hvd: the `horovod.tensorflow` module under Horovod (`workers_lib.Workers.hvd`), else None.

    Returns:
      `optimization.Distribution` (--use_tpu, --tpu_estimator).
    """
    return optimization.Distribution(hvd=hvd, use_tpu=self.use_tpu,
                                     tpu_estimator=self.tpu_estimator)

  def refuse(self, names, script_name):
    """Refuses flags of the shared set that a script has no use for, when they were given.

    Args:
      names: the flags the script has no use for.
      script_name: e.g. "run_squad.py".

    Raises:
      errors.UsageError: naming the first such flag given.
    """
    for name in names:
      errors.require(name not in self.given, "--%s is not a flag of %s", name, script_name)

  def check(self, actions):
    """Every rule about the shared flags' values that needs no file access.

    Args:
      actions: dict of the script's action flags and their values, e.g. {"do_train": True,
        "do_predict": False}: one must be on.

    Raises:
      errors.UsageError: naming the flag.
    """
    require = errors.require
    require(any(actions.values()), "one of %s is required",
            ", ".join("--" + name for name in actions))
    for name in ("bert_config_file", "output_dir"):
      require(getattr(self, name), "--%s is required", name)
    for name in POSITIVE:
      value = getattr(self, name)
      require(value >= 1, "--%s must be >= 1, got %d", name, value)
    require(self.resume_from_step is None or self.resume_from_step >= 0,
            "--resume_from_step must be >= 0, got %s", self.resume_from_step)
    require(self.intra_op_threads >= 0 and self.inter_op_threads >= 0,
            "--intra_op_threads and --inter_op_threads must be >= 0")
    if self.precision_flag is not None:
      for field in sorted(set(PRECISION_FLAG_FIELDS.values())):
        require(field not in self.given, "--precision=%s and --%s exclude each other: give one",
                self.precision_flag, field)
      require(not (self.auto_precision and self.use_tpu),
              "--precision=auto measures this machine's CPU or GPU, not a TPU: give "
              "--precision=bf16 or --precision=fp32 with --use_tpu")
    if self.save_checkpoints_secs is not None:
      require("save_checkpoints_steps" not in self.given,
              "--save_checkpoints_secs and --save_checkpoints_steps exclude each other: give one")
      require(self.save_checkpoints_secs >= 1,
              "--save_checkpoints_secs must be >= 1 second, got %d", self.save_checkpoints_secs)
    try:
      optimization.check_optimizer_type(self.optimizer_type)
      optimization.check_precision(self.manual_fp16, self.amp, self.init_loss_scale,
                                   bf16=self.bf16)
      optimization.check_accumulation(self.num_accumulation_steps)
      optimization.check_distribution(self.use_tpu, self.horovod, self.num_accumulation_steps)
    except ValueError as e:
      raise flag_error(e) from None

  def check_schedule(self, num_train_steps, num_warmup_steps, options=None):
    """The rules of the optimizer's description (`optimization.Schedule.check`), for a script
    whose steps and options are flags (run_pretraining.py's --num_train_steps,
    --num_warmup_steps, --lr_schedule, --adam_beta2 and --adam_epsilon).

    Args:
      num_train_steps, num_warmup_steps, options: as `schedule`.

    Raises:
      errors.UsageError: naming the flag.
    """
    try:
      optimization.Schedule(self.optimizer_type, self.learning_rate, num_train_steps,
                            num_warmup_steps, **(options or {})).check()
    except ValueError as e:
      raise flag_error(e) from None


# The field of a flag whose name is taken by a view: --precision (the `precision` property).
FLAG_OF_FIELD = {"precision_flag": "precision"}
# The boolean flag each named --precision sets (fp32 and auto set none).
PRECISION_FLAG_FIELDS = {"fp16": "manual_fp16", "amp": "amp", "bf16": "bf16"}
# The fields whose value must be >= 1.
POSITIVE = ("max_seq_length", "save_checkpoints_steps", "keep_checkpoint_max", "train_batch_size",
            "eval_batch_size", "display_loss_steps", "num_tpu_cores", "iterations_per_loop")

# The optimizer's settings named as the flags that carry them: the fields, and run_pretraining.py's
# step and optimizer flags.
_FLAG_NAMES = tuple(field.name for field in dataclasses.fields(JobConfig)
                    if field.name != "given") + ("num_train_steps", "num_warmup_steps",
                                                 "lr_schedule", "adam_beta2", "adam_epsilon")
_FLAG_NAME = re.compile(r"\b(%s)\b" % "|".join(sorted(_FLAG_NAMES, key=len, reverse=True)))


def flag_error(error):
  """A ValueError of `optimization`'s checks, which name its settings (`num_accumulation_steps
  must be >= 1`), as the usage error of the flags of the same names (`--num_accumulation_steps
  must be >= 1`): the rule stays written once, in the optimizer's module.

  Returns:
    errors.UsageError.
  """
  return errors.UsageError(_FLAG_NAME.sub(r"--\1", str(error)))
