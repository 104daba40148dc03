"""BERT pretraining: masked LM and next-sentence prediction, the Estimator job.

  python run_pretraining.py --bert_config_file=... --input_files_dir=... --output_dir=... \
      --do_train --do_eval [--horovod] ...

Launched once per worker by `mpirun` / `horovodrun` with --horovod, or under a TPUEstimator with
--use_tpu. The flags are those of NVIDIA's run_pretraining.py (plus the original release's
--input_file and TPU flags); see README.md. Importing this module defines the flags and nothing
else: the shared ones in `utils/training/flags.py`, the pretraining data's here.

The heads live in `utils/model/pretraining.py` and the job's steps in `utils/training/job.py`;
this script keeps what is its own: the records and their checks (each file set's
`record_layout.Layout`, decided once and handed to the input pipeline and the model_fn), the masks
of records without masks (`--vocab_file`, `--masked_lm_prob`, ...), the checkpoint compatibility
check before a resume (`job.ResumeCheck`), and the exact resume of a deterministic run.
The release's names are re-exported here (`build_pretraining_model`, `get_masked_lm_output`,
`input_fn_builder`, ...) for code that imports them from this module.
"""

from absl import flags
from absl import logging
# Before TensorFlow: cli sets TensorFlow's native log level, which TensorFlow reads when it loads.
from utils.runtime import cli  # pylint: disable=g-bad-import-order
import tensorflow as tf  # noqa: F401  (loaded after cli, see above)

import optimization
from utils.core import errors
from utils.data.input_pipeline import DEFAULT_INPUT_SEED  # noqa: F401
from utils.data.input_pipeline import input_fn_builder
from utils.data.input_pipeline import InputPlan
from utils.data.input_pipeline import Masking
from utils.data.input_pipeline import pretraining_feature_spec  # noqa: F401
from utils.data.input_pipeline import resolve_input_files
from utils.data.input_pipeline import shard_input_files  # noqa: F401
from utils.data.input_pipeline import worker_files
from utils.data import dynamic_masks
from utils.data import record_layout
from utils.data import records
from utils.data.records import check_example  # noqa: F401
from utils.data.records import check_input_files
from utils.data.records import find_bad_record  # noqa: F401
from utils.data.records import name_bad_input
from utils.model.pretraining import build_pretraining_model  # noqa: F401
from utils.model.pretraining import gather_indexes  # noqa: F401
from utils.model.pretraining import get_masked_lm_output  # noqa: F401
from utils.model.pretraining import get_next_sentence_output  # noqa: F401
from utils.model.pretraining import metric_fn  # noqa: F401
from utils.model.pretraining import pretraining_head
from utils.model.pretraining import pretraining_losses
from utils.model.pretraining import softmax_cross_entropy  # noqa: F401
from utils.training import entry
from utils.training import flags as job_flags
from utils.training import job as job_lib
from utils.training import model_fn as model_fn_lib

FLAGS = flags.FLAGS
# --helpshort lists the shared flags beside the script's own.
flags.adopt_module_key_flags(job_flags)
# The name the script's messages and last line start with.
PROGRAM = "run_pretraining.py"
# This script's defaults of shared flags (NVIDIA's run_pretraining.py).
DEFAULTS = {"max_seq_length": 512, "optimizer_type": "lamb"}
ACTIONS = ("do_train", "do_eval")

flags.DEFINE_string("input_files_dir", None,
                    "Directory (or comma-separated directories) whose files are the training "
                    "TFRecords.")
flags.DEFINE_string("input_file", None,
                    "Training TFRecords: comma-separated files or glob patterns (the original "
                    "release's flag; an alternative to --input_files_dir).")
flags.DEFINE_string("eval_files_dir", None,
                    "Directory (or comma-separated directories) of the evaluation TFRecords; "
                    "default: the training input.")
flags.DEFINE_integer("max_predictions_per_seq", 80,
                     "Masked LM predictions per sequence (must match the data).")
flags.DEFINE_bool("enable_packed_data_mode", None,
                  "Packed records (pack_pretraining_data.py; Habana's flag): by default the "
                  "records say whether they are packed; given, it must agree with them. With "
                  "packed records --train_batch_size counts rows of up to K sequences.")
flags.DEFINE_float("avg_seq_per_pack", None,
                   "Habana's flag, accepted so its command lines run: the log counts each "
                   "update's sequences itself, so the value is not used (a note says so).")
flags.DEFINE_integer("num_train_steps", 100000, "Optimizer updates to train for.")
flags.DEFINE_integer("num_warmup_steps", 10000, "Warmup updates.")
flags.DEFINE_integer("max_eval_steps", 100,
                     "Maximum evaluation batches (evaluation also stops at the end of the data).")
flags.DEFINE_bool("check_input_records", True,
                  "While training, check every record of this worker's input files (framing and "
                  "CRCs) in a background thread: a bad record stops the job at an update boundary "
                  "with a checkpoint, exit 2 (docs/LONG_RUNS.md). With --nocheck_input_records the "
                  "input pipeline meets it and the job ends without saving the updates since the "
                  "last checkpoint.")
# The recipe's levers (docs/TRAINING.md, "Recipe levers"): off by default, each run is then the
# release's recipe.
flags.DEFINE_float("pretraining_dropout", None,
                   "Hidden and attention dropout of the training graph instead of "
                   "--bert_config_file's (e.g. 0: none while pretraining); the file, and so "
                   "fine-tuning, keeps its own values.")
flags.DEFINE_bool("next_sentence_loss", True,
                  "Train the next-sentence loss (the release's); with --nonext_sentence_loss the "
                  "loss is the masked LM's alone, records may lack next_sentence_labels and "
                  "evaluation reports no next-sentence metrics.")
flags.DEFINE_enum("lr_schedule", "recipe", list(optimization.LR_SCHEDULES),
                  "Learning-rate decay after warmup: recipe (LAMB: power 0.5 from the peak; "
                  "Adam: linear) or linear (linearly to 0 at --num_train_steps from the peak at "
                  "the end of warmup, either optimizer).")
flags.DEFINE_float("warmup_fraction", None,
                   "Warmup as a fraction of --num_train_steps (int(fraction x steps) updates) "
                   "instead of --num_warmup_steps.")
flags.DEFINE_float("adam_beta2", optimization.BETA_2,
                   "Decay of the second moment of LAMB and AdamWeightDecay.")
flags.DEFINE_float("adam_epsilon", optimization.EPSILON,
                   "Epsilon of the update's denominator (LAMB and AdamWeightDecay).")
# Records without masks (create_pretraining_data.py --dynamic_masking): the input pipeline draws
# their masks from (--seed, record, epoch) with --vocab_file (utils/data/dynamic_masks.py).
flags.DEFINE_float("masked_lm_prob", dynamic_masks.EVAL_MASKED_LM_PROB,
                   "Records without masks: the training masking rate (evaluation records without "
                   "masks always get 15%).")
flags.DEFINE_bool("whole_word_masking", False,
                  "Records without masks: mask whole words (a word and its ## pieces) in training.")
flags.DEFINE_bool("mask_token_only", False,
                  "Records without masks: every masked training token becomes [MASK] (default: "
                  "80% [MASK], 10% itself, 10% a random token).")


def model_fn_builder(bert_config, init_checkpoint, schedule,
                     precision=optimization.Precision(),
                     accumulation=optimization.Accumulation(),
                     distribution=optimization.Distribution(), verbose_logging=False,
                     dropout_seed=None, layouts=None):
  """Returns the `model_fn` of the pretraining Estimator (or TPUEstimator).

  Args:
    bert_config: `modeling.BertConfig`.
    init_checkpoint: checkpoint to initialise matching variables from, or None.
    schedule: `optimization.Schedule` (learning rate already multiplied by the number of workers).
    precision: `optimization.Precision`; with manual_fp16 the encoder computes in fp16.
    accumulation: `optimization.Accumulation`.
    distribution: `optimization.Distribution`: Horovod, or TPU cores (one-hot embedding lookup);
      a TPUEstimator (`uses_tpu_estimator`) gets `TPUEstimatorSpec`s.
    verbose_logging: list every trainable variable, marking those loaded from the checkpoint.
    dropout_seed: deterministic mode: training counts micro-steps (`utils/training/determinism.py`)
      and draws each dropout mask from (seed, micro-step, rank, layer, site); None: stateful
      dropout.
    layouts: `record_layout.Layouts` of the training and evaluation records; None: the release's
      records (one sequence each).

  Returns:
    model_fn(features, labels, mode, params) for TRAIN and EVAL.
  """
  settings = model_fn_lib.TrainingSettings(schedule, precision, accumulation, distribution)
  return model_fn_lib.model_fn_builder(pretraining_head(bert_config, layouts), bert_config,
                                       init_checkpoint, settings, verbose_logging=verbose_logging,
                                       dropout_seed=dropout_seed, layouts=layouts)


# The recipe's levers, in the order of their flags.
LEVER_FLAGS = ("pretraining_dropout", "next_sentence_loss", "lr_schedule", "warmup_fraction",
               "adam_beta2", "adam_epsilon", "masked_lm_prob", "whole_word_masking",
               "mask_token_only")
# The flags of drawn masks: they act on records without masks only.
MASKING_FLAGS = ("vocab_file", "masked_lm_prob", "whole_word_masking", "mask_token_only")


def _log_levers(f):
  """One line naming the recipe's levers given on the command line (none: no line)."""
  given = ["--%s=%s" % (name, f[name].value) for name in LEVER_FLAGS if f[name].present]
  if given:
    logging.info("recipe levers (docs/TRAINING.md, \"Recipe levers\"): %s", " ".join(given))


def num_warmup_steps(f):
  """The warmup updates: int(--warmup_fraction x --num_train_steps), or --num_warmup_steps."""
  if f.warmup_fraction is None:
    return f.num_warmup_steps
  return int(f.warmup_fraction * f.num_train_steps)


def schedule_options(f):
  """The `optimization.Schedule` fields of the recipe flags (`JobConfig.schedule`'s options)."""
  return dict(lr_schedule=f.lr_schedule, adam_beta2=f.adam_beta2, adam_epsilon=f.adam_epsilon)


def check_flags(f, config):
  """The shared checks (`JobConfig.check`) and pretraining's, without file access.

  Args:
    f: the parsed flags (pretraining's own).
    config: the `job_config.JobConfig` of the shared ones.

  Raises:
    errors.UsageError: naming the flag.
  """
  config.check({name: getattr(f, name) for name in ACTIONS})
  require = errors.require
  if f.do_train:
    require(f.input_file or f.input_files_dir,
            "--do_train needs the training data: give --input_files_dir or --input_file")
  if f.do_eval and not f.do_train:
    require(f.eval_files_dir or f.input_file or f.input_files_dir,
            "--do_eval needs data: give --eval_files_dir (or --input_files_dir / --input_file)")
  for name in ("max_predictions_per_seq", "max_eval_steps"):
    require(getattr(f, name) >= 1, "--%s must be >= 1, got %d", name, getattr(f, name))
  require(f.avg_seq_per_pack is None or f.avg_seq_per_pack >= 1,
          "--avg_seq_per_pack must be >= 1 (sequences per packed row), got %s", f.avg_seq_per_pack)
  require(f.max_predictions_per_seq <= f.max_seq_length,
          "--max_predictions_per_seq (%d) cannot exceed --max_seq_length (%d)",
          f.max_predictions_per_seq, f.max_seq_length)
  require(f.pretraining_dropout is None or 0 <= f.pretraining_dropout < 1,
          "--pretraining_dropout must be in [0, 1), got %s", f.pretraining_dropout)
  require(0 < f.masked_lm_prob < 1, "--masked_lm_prob must be in (0, 1), got %s",
          f.masked_lm_prob)
  if f.warmup_fraction is not None:
    require(0 <= f.warmup_fraction < 1, "--warmup_fraction must be in [0, 1), got %s",
            f.warmup_fraction)
    require(not f["num_warmup_steps"].present,
            "--warmup_fraction and --num_warmup_steps exclude each other: give one")
  config.check_schedule(f.num_train_steps, num_warmup_steps(f), schedule_options(f))


def _check_packed_flag(f, layout, files):
  """--enable_packed_data_mode, when given, must agree with the records (`layout`, of `files`)."""
  if f.enable_packed_data_mode is None or layout is None:
    return
  errors.require(f.enable_packed_data_mode == layout.packed,
                 "--%senable_packed_data_mode disagrees with the input: %s holds %s",
                 "" if f.enable_packed_data_mode else "no", files[0],
                 record_layout.describe(layout))


def _file_set_layout(f, files, vocab_size):
  """The `record_layout.Layout` of one file set (None for no files), the first record of each
  file checked against the model (`check_input_files`).

  Raises:
    errors.UsageError: naming the file whose record does not fit, or the two files of different
      layouts.
  """
  try:
    return check_input_files(files, f.max_seq_length, f.max_predictions_per_seq, vocab_size,
                             next_sentence_labels=f.next_sentence_loss)
  except records.RecordDoesNotFitModel as e:  # shapes or token ids: the flags' or the config's
    raise errors.UsageError("%s (check --max_seq_length / --max_predictions_per_seq and the "
                            "vocabulary of --bert_config_file)" % e)
  except ValueError as e:  # the file itself (unreadable, empty, damaged): no hint to the flags
    raise errors.UsageError(str(e))


def _resolve_inputs(f, vocab_size):
  """(train_files, eval_files, layouts) from the flags, their first records checked against the
  model; layouts is the `record_layout.Layouts` of the two file sets, each decided once from its
  files (None for a set the job does not read).

  Raises:
    errors.UsageError: naming the flags when nothing matches, the file whose record does not fit,
      or a file of each set when one set is packed and the other is not.
  """
  train_files, eval_files = [], []
  try:
    if f.do_train or not f.eval_files_dir:
      train_files = resolve_input_files(f.input_file, f.input_files_dir)
    eval_files = (resolve_input_files(input_files_dir=f.eval_files_dir, dir_flag="eval_files_dir")
                  if f.eval_files_dir else train_files)
  except ValueError as e:
    raise errors.UsageError(str(e))
  train_files = train_files if f.do_train else []
  eval_files = eval_files if f.do_eval else []
  # Each set is checked in name order (the messages name its first file).
  checked_train, checked_eval = sorted(set(train_files)), sorted(set(eval_files))
  train_layout = _file_set_layout(f, checked_train, vocab_size)
  layouts = record_layout.Layouts(
      train=train_layout, eval=(train_layout if checked_eval == checked_train
                                else _file_set_layout(f, checked_eval, vocab_size)))
  if layouts.train and layouts.eval:
    errors.require(layouts.train.packed == layouts.eval.packed,
                   "%s holds %s but %s holds %s: training and evaluation read one kind (pack "
                   "every input with pack_pretraining_data.py, or none)", checked_train[0],
                   record_layout.describe(layouts.train), checked_eval[0],
                   record_layout.describe(layouts.eval))
  _check_packed_flag(f, layouts.train, checked_train)
  _check_packed_flag(f, layouts.eval, checked_eval)
  if f.avg_seq_per_pack is not None:
    logging.info("--avg_seq_per_pack=%g is not used: the log counts each update's sequences "
                 "(docs/TRAINING.md, packed sequences)", f.avg_seq_per_pack)
  return train_files, eval_files, layouts


def _masking(f, layout, options, vocabulary):
  """(layout with the width P of its drawn masks, `input_pipeline.Masking`) of one file set of
  records without masks; (layout, None) for records with masks or no set.

  P: --max_predictions_per_seq unpacked (`options` never asks for more: `_check_rate`); packed
  rows min(S, round(S x rate) + K), so that every sequence's predictions fit.
  """
  if layout is None or not layout.dynamic_masks:
    return layout, None
  width = f.max_predictions_per_seq
  if layout.packed:
    width = min(layout.seq_length, round(layout.seq_length * options.masked_lm_prob)
                + layout.sequences_per_row)
  return layout._replace(predictions=width), Masking(options, vocabulary)


def _mask_vocabulary(f, files, vocab_size):
  """The `dynamic_masks.MaskVocabulary` of --vocab_file, for `files` (records without masks).

  Raises:
    errors.UsageError: without --vocab_file, for a file it cannot read or that lacks [MASK],
      [CLS] or [SEP], or of another size than --bert_config_file's vocab_size.
  """
  errors.require(f.vocab_file, "--vocab_file is required: %s holds records without masks, whose "
                 "masks are drawn with the vocabulary ([MASK], [CLS], [SEP], the ## pieces)",
                 files[0])
  try:
    vocabulary = dynamic_masks.MaskVocabulary.from_file(f.vocab_file)
  except ValueError as e:
    raise errors.UsageError("--vocab_file=%s: %s" % (f.vocab_file, e))
  errors.require(vocabulary.vocab_size == vocab_size,
                 "--vocab_file=%s holds %d tokens but --bert_config_file's vocab_size is %d",
                 f.vocab_file, vocabulary.vocab_size, vocab_size)
  return vocabulary


def _check_rate(f):
  """Unpacked training records without masks: round(S x --masked_lm_prob) must fit in
  --max_predictions_per_seq (the width of the masked_lm_* features); a usage error names both."""
  wanted = round(f.max_seq_length * f.masked_lm_prob)
  errors.require(wanted <= f.max_predictions_per_seq,
                 "--masked_lm_prob=%g masks round(%d x %g) = %d tokens of a --max_seq_length=%d "
                 "sequence, more than --max_predictions_per_seq=%d: raise "
                 "--max_predictions_per_seq to %d or lower --masked_lm_prob", f.masked_lm_prob,
                 f.max_seq_length, f.masked_lm_prob, wanted, f.max_seq_length,
                 f.max_predictions_per_seq, wanted)


def _decide_masking(f, layouts, files, vocab_size):
  """The masks of each file set: (layouts with the widths drawn, (training masking, evaluation
  masking)), each masking an `input_pipeline.Masking`, or None for records with masks.

  Training records without masks get the flags' masking; evaluation records without masks the
  fixed one (`dynamic_masks.eval_options`); records with masks keep theirs (a line says that the
  masking flags, when given, are not used).

  Args:
    f: the parsed flags.
    layouts: `record_layout.Layouts` of the files.
    files: (training files, evaluation files).
    vocab_size: --bert_config_file's.

  Raises:
    errors.UsageError: see `_mask_vocabulary` and `_check_rate`.
  """
  unmasked = [names for names, layout in zip(files, layouts) if layout and layout.dynamic_masks]
  train_unmasked = layouts.train is not None and layouts.train.dynamic_masks
  unused = [name for name in MASKING_FLAGS if f[name].present
            and not (unmasked if name == "vocab_file" else train_unmasked)]
  if unused:
    logging.info("%s: not used, the records hold their masks (these flags act on records "
                 "without masks only)", " ".join("--" + name for name in unused))
  if not unmasked:
    return layouts, (None, None)
  vocabulary = _mask_vocabulary(f, unmasked[0], vocab_size)
  if train_unmasked and not layouts.train.packed:
    _check_rate(f)
  train_options = dynamic_masks.MaskingOptions(f.masked_lm_prob, f.max_predictions_per_seq,
                                               f.whole_word_masking, f.mask_token_only)
  train_layout, train_masking = _masking(f, layouts.train, train_options, vocabulary)
  eval_layout, eval_masking = _masking(
      f, layouts.eval, dynamic_masks.eval_options(f.max_predictions_per_seq), vocabulary)
  return record_layout.Layouts(train_layout, eval_layout), (train_masking, eval_masking)


def _sequences_per_row(layouts):
  """K for packed rows of up to K sequences (the start line and the log count sequences), 0 for
  the release's records."""
  return record_layout.max_sequences_per_pack(layouts.train or layouts.eval)


def run(f, config):
  """The pretraining job: check, train (every worker), evaluate (rank 0).

  Args:
    f: parsed flags (pretraining's own).
    config: the `job_config.JobConfig` of the shared ones.

  Returns:
    0 on success.

  Raises:
    errors.UsageError: for bad flags or data, before any graph is built.
  """
  check_flags(f, config)
  _log_levers(f)
  workers = job_lib.start_workers(config)
  bert_config = job_lib.load_bert_config(config, f.max_predictions_per_seq)
  train_files, eval_files, layouts = _resolve_inputs(f, bert_config.vocab_size)
  layouts, (train_masking, eval_masking) = _decide_masking(
      f, layouts, (train_files, eval_files), bert_config.vocab_size)
  # A deterministic resume continues the input after the micro-steps done: always count them.
  model = job_lib.Model(pretraining_head(bert_config, layouts, f.next_sentence_loss), bert_config,
                        job_lib.dropout_seed(config, bert_config, counts_micro_steps=True),
                        training_dropout=f.pretraining_dropout, layouts=layouts)
  sequences_per_row = _sequences_per_row(layouts)
  plan = job_lib.Plan(f.num_train_steps, num_warmup_steps(f),
                      dict(train_batch_size=f.train_batch_size, eval_batch_size=f.eval_batch_size),
                      max_sequences_per_pack=sequences_per_row,
                      schedule_options=schedule_options(f))
  job = job_lib.Job.open(config, PROGRAM, workers, model, plan,
                         resume_check=job_lib.ResumeCheck(f.max_predictions_per_seq,
                                                          sequences_per_row))
  reading = dict(deterministic=f.deterministic_run, seed=config.random_seed,
                 vocab_size=bert_config.vocab_size, next_sentence_labels=f.next_sentence_loss)

  def explain(files, layout):
    return lambda error: name_bad_input(
        error, files, layout.seq_length, layout.predictions, bert_config.vocab_size,
        record_layout.max_sequences_per_pack(layout), f.next_sentence_loss,
        masks=not layout.dynamic_masks)

  if f.do_train:
    train_input_fn = input_fn_builder(InputPlan(
        train_files, layouts.train, is_training=True, num_workers=workers.size,
        worker_index=workers.rank, skip_records=job.micro_steps_done * f.train_batch_size,
        masking=train_masking, **reading), f.train_batch_size)
    # Every record of this worker's files is checked beside training: a bad one stops the job at
    # an update boundary with a checkpoint, long before the input pipeline would reach it.
    input_check = (records.BackgroundRecordCheck(
        worker_files(train_files, workers.size, workers.rank))
                   if f.check_input_records else None)
    logging.info("***** Training on %d file(s) of %s *****", len(train_files),
                 record_layout.describe(layouts.train))
    job.train(train_input_fn, loss_names=pretraining_losses(f.next_sentence_loss),
              explain_input_error=explain(train_files, layouts.train), input_check=input_check)

  if f.do_eval and job.is_chief:
    eval_input_fn = input_fn_builder(
        InputPlan(eval_files, layouts.eval, is_training=False, masking=eval_masking, **reading),
        f.eval_batch_size)
    logging.info("***** Running evaluation on %d file(s) of %s, batch %d, at most %d batches "
                 "*****", len(eval_files), record_layout.describe(layouts.eval),
                 f.eval_batch_size, f.max_eval_steps)
    job.evaluate(eval_input_fn, f.max_eval_steps,
                 explain_input_error=explain(eval_files, layouts.eval))

  job.close()
  return 0


main = entry.script_main(PROGRAM, run, DEFAULTS)


if __name__ == "__main__":
  cli.run_main(main, DEFAULTS)
