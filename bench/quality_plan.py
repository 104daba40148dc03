"""The jobs of bench/quality.py and their plan: what each variant runs (one description per
variant, its argv made from it), each job's budget and updates, the single-pass check, and the
estimated minutes of the whole comparison.

A variant is a `Variant`: the program (the original release or ours), its optimizer and learning
rate, the records it reads (fixed or dynamic masks, packed or not), its recipe levers and its share
of the original's budget B. `fast`'s ablations are `fast` with one of its choices undone: a lever
as `today` has it, or the budget recipes' choice where fast keeps today's (their linear decay to
zero: `ABLATIONS`).
"""

import dataclasses
import math
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MAX_SEQ_LENGTH = 128
# The evaluation records' (and fixed-mask training records') masks: 15% of 128, at most 20.
MAX_PREDICTIONS = 20
BATCH = 64
# The curve's points: a checkpoint every 1/CHECKPOINTS_PER_JOB of a job's updates.
CHECKPOINTS_PER_JOB = 20
# A job reads at most this fraction of its training split: the input pipelines interleave a
# few files at once, so the next pass's first records can start before the last files end.
PASS_LIMIT = 0.9
# Fine-tuning runs of each final checkpoint of original, today and fast, seeds 1..N (the same N
# seeds for every checkpoint, so that checkpoints are compared on the same fine-tuning draws).
FINETUNE_SEEDS = 3
# The comparison's wall-clock bound (minutes on a 2-core box) and the original's longest budget.
TOTAL_MINUTES = 100.0
MAX_BUDGET_MINUTES = 30.0
# Estimated costs, used only to plan, as the first full run measured them (2-core AMD EPYC, Zen 4,
# BERT-tiny, vocabulary 8,192, nothing else running; docs/PERFORMANCE.md): evaluating one
# checkpoint on 1,000 held-out sequences (301 checkpoints on 2,000 in 1,001 s: 1.66); a fine-tuning
# run, two at a time with one thread each: its start-up, checkpoint and evaluation graph (6 + 6 +
# 1 s), then sequences/s training (173) and evaluating (582) at seq 128. Earlier guesses, 2.5 s
# and 30 sequences/s, made the plan's estimate 100 minutes for a comparison that took 73.
EVAL_SECONDS_PER_1000 = 1.7
FINETUNE_FIXED_SECONDS = 13.0
FINETUNE_TRAIN_PER_S = 170.0
FINETUNE_EVAL_PER_S = 580.0


@dataclasses.dataclass(frozen=True)
class Variant:
  """One pretraining variant.

  name: its name in the output ("original", "today", "fast", "fast_<lever>").
  program: "original" (tests/reference/original_bert.py, fp32) or "ours" (run_pretraining.py,
    --precision=auto).
  optimizer, learning_rate: --optimizer_type ("adam": AdamWeightDecay, "lamb") and the peak rate.
  budget_fraction: its budget as a fraction of the original's B; its schedule ends there.
  seeds: repeats (each a fresh initialisation and input order: neither release seeds a normal run).
  packed: trains on the packed rows of its records (about BATCH sequences an update).
  dynamic_masks: reads the records without masks, masks drawn anew each epoch at masked_lm_prob.
  masked_lm_prob: the training masking rate of dynamic masks.
  dropout: --pretraining_dropout (None: the config's 0.1).
  next_sentence: trains the next-sentence loss.
  schedule: --lr_schedule ("recipe": the optimizer's own; "linear": to zero at the job's end).
  warmup_fraction: warmup updates / the job's updates.
  beta2: --adam_beta2 (None: the optimizer's 0.999).
  lever: for an ablation, the choice of fast it undoes (what the ablation table names).
  """
  name: str
  program: str = "ours"
  optimizer: str = "lamb"
  learning_rate: float = 8e-3
  budget_fraction: float = 1.0
  seeds: int = 3
  packed: bool = False
  dynamic_masks: bool = False
  masked_lm_prob: float = 0.15
  dropout: float = None
  next_sentence: bool = True
  schedule: str = "recipe"
  warmup_fraction: float = 0.1
  beta2: float = None
  lever: str = None

  def cost_key(self):
    """What a calibration of this variant measures: variants with the same key run at the same
    updates/s (the schedule, the rates and beta2 cost nothing; the masking rate sets the masked-LM
    head's width, max_predictions)."""
    return (self.program, self.packed, self.dynamic_masks, self.max_predictions(), self.dropout,
            self.next_sentence)

  def max_predictions(self):
    """--max_predictions_per_seq: the fixed records' 20, or room for masked_lm_prob of 128."""
    if not self.dynamic_masks:
      return MAX_PREDICTIONS
    return max(MAX_PREDICTIONS, int(math.ceil(MAX_SEQ_LENGTH * self.masked_lm_prob - 1e-9)))


# The original release as its README runs it: fp32, AdamWeightDecay at batch 64, warmup then
# linear decay, the full budget; its rate and warmup tuned on this corpus (docs/PERFORMANCE.md,
# "Time to quality" and "After the fourth run: the original's rate and warmup"). At 10% warmup
# 5e-4 ended lowest (6.08-6.10), where 1e-3 (the demo's rate) left the unigram plateau late or
# never; with 30% warmup 1e-3 left it in both runs and ended at 6.008 and 5.994, 1.5e-3 at 5.984
# and 5.997, 2e-3 at 6.042, 7e-4 at 6.039 and 6.049, 5e-4 at 6.131. The four full runs ran 5e-4
# at 10%: their target flattered ours by about 0.09. A target from an untuned original would
# flatter us.
ORIGINAL = Variant("original", program="original", optimizer="adam", learning_rate=1e-3,
                   warmup_fraction=0.3)
# Ours as a user runs it today: LAMB as NVIDIA's recipe (the demo's 8e-3 at batch 64), packed
# rows, the precision --precision=auto picks, fixed masks, dropout, next-sentence loss.
TODAY = Variant("today", packed=True, budget_fraction=0.5)
# Today with the budget recipes' (MosaicBERT, Cramming) levers, on half of B: its schedule must
# outlast the time it needs to reach the target (planned for B/4 it ended above the tuned
# original's final loss; planned for B/2 it reached it after B/4: docs/PERFORMANCE.md). It keeps
# LAMB's own schedule, not their linear decay to zero: in all four full runs decaying to zero
# ended higher and stopped falling (the schedule's ablation rows there). It masks 30% of each
# sequence, as MosaicBERT trains: at a fixed 1,130 updates its three seeds reached 6.0 (about the
# tuned original's final loss) after 552-630 updates, where 15% took 771-918, and ended
# 0.08-0.15 lower; its masked-LM head, 39 predictions wide, makes an update 1.18x (the fourth
# full run) to 1.41x (the fifth full run's calibration) as long. The fifth full run's ablation
# measured the minutes: 15% as soon (2.45 against fast's 2.47), 1.16x sooner at the calibrated
# rates, with 730 updates to the target against fast's 603-606.
# Against the four full runs' higher target (6.0957, an original tuned too little) the two rates
# were within one run's noise (docs/PERFORMANCE.md, "After the fourth run: the batch, the model
# size and the masking rate"). It keeps the 10% warmup and LAMB 8e-3:
# at a fixed 1,130 updates, 2% and 0.5% warmups reached the target within the 548-621 updates of
# its own seeds, and 1.2e-2 after 714 ("After the fourth run: fast's warmup and rate").
FAST = dataclasses.replace(TODAY, name="fast", budget_fraction=0.5, dynamic_masks=True,
                           masked_lm_prob=0.3, dropout=0.0, next_sentence=False, beta2=0.98)
# fast with one of its choices undone: {name: (the choice, the fields without it)}: today's
# setting for each lever, and the budget recipes' linear decay to zero for LAMB's own schedule.
ABLATIONS = {
    "fast_fixed_masks": ("dynamic masks", {"dynamic_masks": False, "masked_lm_prob": 0.15}),
    "fast_mask_rate_15": ("the 30% masking rate", {"masked_lm_prob": 0.15}),
    "fast_dropout": ("no pretraining dropout", {"dropout": None}),
    "fast_next_sentence": ("no next-sentence loss", {"next_sentence": True}),
    "fast_linear_schedule": ("LAMB's own schedule", {"schedule": "linear",
                                                     "warmup_fraction": 0.06}),
    "fast_beta2": ("beta2 0.98", {"beta2": None}),
}


def variants():
  """Every variant of the comparison, in order: original, today, fast, then the ablations."""
  ablations = [dataclasses.replace(FAST, name=name, seeds=1, lever=lever, **fields)
               for name, (lever, fields) in ABLATIONS.items()]
  return [ORIGINAL, TODAY, FAST] + ablations


# What `--set` may change: any field of ours but the name, the program and the lever; of the
# original release, only what its run_pretraining.py takes (its optimizer and schedule are fixed;
# its budget is B).
CHOICES = {"optimizer": ("adam", "lamb"), "schedule": ("recipe", "linear")}
ORIGINAL_SETTABLE = ("learning_rate", "warmup_fraction", "seeds")


def _expected(field):
  """What a `--set` value of Variant field `field` (a dataclasses.Field) must be, in words."""
  if field.name in CHOICES:
    return "one of " + ", ".join(CHOICES[field.name])
  kind = {"bool": "true or false", "int": "an integer >= 1",
          "float": "a number >= 0"}[getattr(field.type, "__name__", field.type)]
  return kind + (" or none" if field.default is None else "")


def _setting_value(field, text):
  """`text` as the value of Variant field `field`; raises ValueError when it is not one."""
  kind = getattr(field.type, "__name__", field.type)
  if field.default is None and text.lower() == "none":
    return None
  if field.name in CHOICES:  # the settable text fields
    if text not in CHOICES[field.name]:
      raise ValueError(text)
    return text
  if kind == "bool":
    if text.lower() not in ("true", "false"):
      raise ValueError(text)
    return text.lower() == "true"
  value = int(text) if kind == "int" else float(text)
  if not math.isfinite(value) or value < (1 if kind == "int" else 0):
    raise ValueError(text)
  return value


def with_settings(variant_list, settings=(), repeats=None):
  """`variant_list` with `settings` applied, each a text "<variant>.<field>=<value>" (`--set`),
  and every variant's repeats set to `repeats` (None: their own): an exploration of the
  comparison's variants.

  Raises:
    ValueError: naming the setting, for an unknown variant or field, a field that cannot be set
      or a value of the wrong kind.
  """
  by_name = {v.name: v for v in variant_list}
  fields = {f.name: f for f in dataclasses.fields(Variant)
            if f.name not in ("name", "program", "lever")}
  for setting in settings:
    target, equals, text = setting.partition("=")
    name, _, key = target.partition(".")
    if not equals or name not in by_name:
      raise ValueError("--set %s: expected <variant>.<field>=<value> with a variant of %s"
                       % (setting, ", ".join(by_name)))
    if key not in fields or (by_name[name].program == "original"
                             and key not in ORIGINAL_SETTABLE):
      settable = ORIGINAL_SETTABLE if by_name[name].program == "original" else fields
      raise ValueError("--set %s: %s has no field '%s' to set (expected one of %s)"
                       % (setting, name, key, ", ".join(settable)))
    try:
      value = _setting_value(fields[key], text)
    except ValueError:
      raise ValueError("--set %s: %s.%s must be %s, got '%s'"
                       % (setting, name, key, _expected(fields[key]), text)) from None
    by_name[name] = dataclasses.replace(by_name[name], **{key: value})
  if repeats is not None:
    by_name = {name: dataclasses.replace(v, seeds=repeats) for name, v in by_name.items()}
  return [by_name[v.name] for v in variant_list]


@dataclasses.dataclass(frozen=True)
class Records:
  """The training records a job reads: the directory (for ours), the files, and how many
  sequences they hold (the split a single pass may not exceed); rows, when packed."""
  train_dir: str
  files: tuple
  sequences: int
  rows: int = None

  def sequences_per_update(self):
    """Sequences an update trains: BATCH; packed, rows_per_update() rows of the average
    sequences per row."""
    if self.rows is None:
      return float(BATCH)
    return self.rows_per_update() * self.sequences / self.rows

  def rows_per_update(self):
    """--train_batch_size: BATCH; packed, the rows that hold about BATCH sequences (halves up)."""
    if self.rows is None:
      return BATCH
    return max(1, int(math.floor(BATCH * self.rows / self.sequences + 0.5)))


def job_command(variant, records, config_path, vocab_file, out_dir, updates,
                checkpoints=CHECKPOINTS_PER_JOB):
  """argv of one pretraining job of `variant` (a Variant) on `records` (Records) for `updates`
  updates, a checkpoint every 1/`checkpoints` of them, all kept; `vocab_file`: the corpus's
  (dynamic masks draw their random tokens from it)."""
  common = ["--bert_config_file=%s" % config_path, "--output_dir=%s" % out_dir,
            "--train_batch_size=%d" % records.rows_per_update(),
            "--max_seq_length=%d" % MAX_SEQ_LENGTH,
            "--max_predictions_per_seq=%d" % variant.max_predictions(),
            "--num_train_steps=%d" % updates, "--learning_rate=%g" % variant.learning_rate,
            "--save_checkpoints_steps=%d" % max(1, updates // checkpoints)]
  warmup = ["--num_warmup_steps=%d" % max(1, int(updates * variant.warmup_fraction))]
  if variant.program == "original":
    return [sys.executable, "-m", "tests.reference.original_bert", "run_pretraining", "--",
            "--input_file=%s" % ",".join(records.files), "--do_train=true"] + common + warmup
  argv = [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"),
          "--input_files_dir=%s" % records.train_dir, "--do_train",
          "--optimizer_type=%s" % variant.optimizer, "--precision=auto",
          "--display_loss_steps=1", "--keep_checkpoint_max=%d" % (checkpoints + 2)] + common
  if records.rows is not None:
    argv.append("--enable_packed_data_mode")  # the job refuses records that are not packed
  if variant.dynamic_masks:
    argv += ["--vocab_file=%s" % vocab_file, "--masked_lm_prob=%g" % variant.masked_lm_prob]
  if variant.dropout is not None:
    argv.append("--pretraining_dropout=%g" % variant.dropout)
  if not variant.next_sentence:
    argv.append("--nonext_sentence_loss")
  if variant.schedule == "linear":
    argv += ["--lr_schedule=linear", "--warmup_fraction=%g" % variant.warmup_fraction]
  else:
    argv += warmup
  if variant.beta2 is not None:
    argv.append("--adam_beta2=%g" % variant.beta2)
  return argv


def updates_in_budget(budget_seconds, startup_seconds, updates_per_second,
                      checkpoints=CHECKPOINTS_PER_JOB):
  """Updates that fit in the budget after the start-up, 5% left for checkpoints and the ends;
  at least one per checkpoint."""
  return max(checkpoints, int(0.95 * (budget_seconds - startup_seconds) * updates_per_second))


@dataclasses.dataclass(frozen=True)
class Rate:
  """A calibration's figures: start-up seconds and updates per second."""
  startup_s: float
  updates_per_s: float


def measured_rate(checkpoints):
  """The Rate a finished job ran at, from its kept checkpoints ({update: seconds since the job's
  start}): updates/s from its first checkpoint after update 0 to its last, and the start-up that
  puts that first checkpoint where it was written; None with fewer than two such checkpoints.

  A calibration is a few seconds of one job, and a 2-core guest's speed drifts over minutes (jobs
  ran up to 37% off a calibration made minutes before, docs/PERFORMANCE.md): the last job of a cost
  that ran its whole budget is the nearer measure of the next one's rate.
  """
  points = sorted((update, seconds) for update, seconds in checkpoints.items() if update > 0)
  if len(points) < 2 or points[-1][1] <= points[0][1]:
    return None
  (first_update, first_s), (last_update, last_s) = points[0], points[-1]
  rate = (last_update - first_update) / (last_s - first_s)
  return Rate(startup_s=max(0.0, first_s - first_update / rate), updates_per_s=rate)


def pass_limit_updates(records, pass_limit=PASS_LIMIT):
  """The updates (a float) that read `pass_limit` of `records` (Records)."""
  return pass_limit * records.sequences / records.sequences_per_update()


def pass_bound_minutes(rate, records, pass_limit=PASS_LIMIT):
  """The longest budget (minutes) in which a job at `rate` (Rate) reads at most `pass_limit` of
  `records` (Records): start-up, then updates at the rate, as updates_in_budget plans them."""
  updates = pass_limit_updates(records, pass_limit)
  return (updates / (0.95 * rate.updates_per_s) + rate.startup_s) / 60.0


def finetune_seconds(train_examples, dev_examples, epochs):
  """The estimated seconds of one fine-tuning run: `epochs` over `train_examples`, then
  `dev_examples` evaluated, after its start-up."""
  return (FINETUNE_FIXED_SECONDS + epochs * train_examples / FINETUNE_TRAIN_PER_S
          + dev_examples / FINETUNE_EVAL_PER_S)


def estimated_minutes(budget_minutes, variant_list, eval_sequences, calibration_minutes,
                      finetune_run_seconds, checkpoints=CHECKPOINTS_PER_JOB, finetune_parallel=2,
                      finetune_seeds=FINETUNE_SEEDS):
  """{part: minutes} of the comparison at the original's budget `budget_minutes`: the jobs
  (each variant's share times its seeds), evaluating every checkpoint on `eval_sequences`, the
  fine-tuning of the seeded variants' final checkpoints (`finetune_seeds` runs each,
  `finetune_parallel` at a time, `finetune_run_seconds` each), the calibrations; and "total"."""
  jobs = sum(v.budget_fraction * v.seeds for v in variant_list) * budget_minutes
  points = sum(v.seeds for v in variant_list) * checkpoints + 1
  evaluation = points * eval_sequences / 1000.0 * EVAL_SECONDS_PER_1000 / 60.0
  runs = sum(v.seeds for v in variant_list if v.lever is None) * finetune_seeds
  finetune = math.ceil(runs / float(finetune_parallel)) * finetune_run_seconds / 60.0
  parts = {"jobs": jobs, "evaluation": evaluation, "fine_tuning": finetune,
           "calibration": calibration_minutes}
  parts["total"] = sum(parts.values())
  return {k: round(v, 1) for k, v in parts.items()}


def longest_budget(variant_list, eval_sequences, calibration_minutes, finetune_run_seconds,
                   total=TOTAL_MINUTES, checkpoints=CHECKPOINTS_PER_JOB,
                   finetune_seeds=FINETUNE_SEEDS):
  """The original's budget B (minutes) at which estimated_minutes' total is `total`, at most
  MAX_BUDGET_MINUTES (the total is linear in B)."""
  fixed = estimated_minutes(0.0, variant_list, eval_sequences, calibration_minutes,
                            finetune_run_seconds, checkpoints,
                            finetune_seeds=finetune_seeds)["total"]
  per_minute = sum(v.budget_fraction * v.seeds for v in variant_list)
  return max(0.0, min(MAX_BUDGET_MINUTES, (total - fixed) / per_minute))


def job_updates(variant, budget_minutes, rate, checkpoints=CHECKPOINTS_PER_JOB):
  """The updates of `variant`'s job: its share of `budget_minutes` at `rate` (Rate)."""
  return updates_in_budget(variant.budget_fraction * budget_minutes * 60, rate.startup_s,
                           rate.updates_per_s, checkpoints)


def replanned_updates(variant, budget_minutes, rate, records, checkpoints=CHECKPOINTS_PER_JOB):
  """job_updates of `variant` at a measured `rate` (Rate), at most PASS_LIMIT of `records`
  (Records): a faster rate than the calibration's must not make a job read a sequence twice."""
  bound = int(pass_limit_updates(records))
  return min(job_updates(variant, budget_minutes, rate, checkpoints), max(checkpoints, bound))


def pass_fraction(updates, records):
  """The fraction of `records` (Records) that `updates` updates read."""
  return updates * records.sequences_per_update() / records.sequences


def check_single_pass(planned):
  """Exits naming every job of `planned` ({name: (updates, Records)}) that would read more than
  its training split (a sequence trained twice)."""
  over = ["%s: %d updates read %.0f sequences, %.2f passes over its %d" % (
      name, updates, updates * records.sequences_per_update(), pass_fraction(updates, records),
      records.sequences) for name, (updates, records) in planned.items()
          if pass_fraction(updates, records) > 1.0]
  if over:
    raise SystemExit("the plan trains sequences twice (a smaller --budget_minutes or a larger "
                     "corpus):\n  " + "\n  ".join(over))
