"""BERT fine-tuning for question answering on SQuAD v1.1 and v2.0.

  python run_squad.py --vocab_file=vocab.txt --bert_config_file=bert_config.json \
      --init_checkpoint=bert_model.ckpt --train_file=train-v1.1.json \
      --predict_file=dev-v1.1.json --output_dir=out --do_train --do_predict \
      [--version_2_with_negative] [--horovod] [--manual_fp16 | --bf16] ...

The original release's flags, records (train.tf_record, eval.tf_record) and outputs
(predictions.json, nbest_predictions.json, null_odds.json with --version_2_with_negative), plus
NVIDIA's --horovod, --amp, --manual_fp16, --use_xla, --num_accumulation_steps and --dllog_path, and
ours --bf16 (docs/PRECISION.md). When the predict file carries answers (a dev set), exact match and
F1 (the official v1.1 definitions, utils/finetuning/squad_eval.py) are logged and written to
eval_results.txt next to the predictions. The head's variables are the release's
(`cls/squad/output_weights`, `cls/squad/output_bias`), so a checkpoint fine-tuned by either script
loads in the other.
Importing this module defines the flags (the shared ones once, in utils/training/flags.py and
utils/finetuning/flags.py) and nothing else.
"""

import dataclasses
import os
import random
import typing

from absl import flags
from absl import logging
from utils.runtime import cli  # pylint: disable=g-bad-import-order
import tensorflow as tf

import modeling
from utils.core import errors
from utils.finetuning import config as finetuning_config
from utils.finetuning import flags as finetuning_flags
from utils.finetuning import squad_data
from utils.finetuning import squad_eval
from utils.finetuning import task as finetuning
# The release's names for the data classes and functions, for code that imports them from here.
from utils.finetuning.squad_data import InputFeatures  # noqa: F401
from utils.finetuning.squad_data import RawResult
from utils.finetuning.squad_data import SquadExample  # noqa: F401
from utils.finetuning.squad_data import convert_examples_to_features
from utils.finetuning.squad_data import get_final_text  # noqa: F401
from utils.model import heads
from utils.training import entry
from utils.training import estimator as estimator_lib
from utils.training import flags as job_flags
from utils.training import job as job_lib

_tf1 = tf.compat.v1
FLAGS = flags.FLAGS
# --helpshort lists the shared flags beside the script's own.
flags.adopt_module_key_flags(job_flags)
flags.adopt_module_key_flags(finetuning_flags)
# The name the script's messages and last line start with.
PROGRAM = "run_squad.py"
# This script's defaults of shared flags (the release's run_squad.py).
DEFAULTS = {"max_seq_length": 384, "optimizer_type": "adam"}
ACTIONS = ("do_train", "do_predict", "export_dir")
# Shared flags this script has no use for (it predicts; it does not evaluate).
UNUSED_FLAGS = ("do_eval", "eval_batch_size")

flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD json to answer, e.g. dev-v1.1.json.")
flags.DEFINE_integer("doc_stride", 128, "Tokens between the starts of a document's windows.")
flags.DEFINE_integer("max_query_length", 64, "Question tokens kept (longer ones are truncated).")
flags.DEFINE_integer("n_best_size", 20, "Answers kept per question in nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in tokens.")
flags.DEFINE_bool("version_2_with_negative", False,
                  "SQuAD 2.0: questions may have no answer (null_odds.json).")
flags.DEFINE_float("null_score_diff_threshold", 0.0,
                   "SQuAD 2.0: answer nothing when the null score minus the best answer's score "
                   "exceeds this.")


@dataclasses.dataclass(frozen=True)
class SquadConfig:
  """The values of this script's own flags (meanings: their definitions above)."""
  train_file: typing.Optional[str]
  predict_file: typing.Optional[str]
  doc_stride: int
  max_query_length: int
  n_best_size: int
  max_answer_length: int
  version_2_with_negative: bool
  null_score_diff_threshold: float

  @classmethod
  def from_flags(cls, flag_values):
    """The configuration of parsed flags (`finetuning_config.read_flags`)."""
    return finetuning_config.read_flags(cls, flag_values)

  def check(self, config, tuning):
    """SQuAD's rules, without file access.

    Args:
      config: the `job_config.JobConfig` (--do_train, --max_seq_length).
      tuning: the `finetuning_config.FinetuningConfig` (--do_predict).

    Raises:
      errors.UsageError: naming the flag.
    """
    require = errors.require
    if config.do_train:
      require(self.train_file, "--do_train needs --train_file")
    if tuning.do_predict:
      require(self.predict_file, "--do_predict needs --predict_file")
    # --predict_batch_size >= 1 is fine-tuning's rule (`FinetuningConfig.check`).
    for name in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length"):
      require(getattr(self, name) >= 1, "--%s must be >= 1, got %d", name, getattr(self, name))
    require(config.max_seq_length > self.max_query_length + 3,
            "--max_seq_length (%d) must be greater than --max_query_length (%d) + 3",
            config.max_seq_length, self.max_query_length)


SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
TRAIN_SCALARS = ("unique_ids", "start_positions", "end_positions")
PREDICT_SCALARS = ("unique_ids",)
# The release shuffles the training examples once, with this seed, before writing them.
TRAIN_SHUFFLE_SEED = 12345


def squad_head(sequence_output):
  """Start and end logits of every position, in fp32.

  Variables `cls/squad/output_weights` [2, hidden] and `cls/squad/output_bias` [2] (the
  release's).

  Args:
    sequence_output: [batch, seq_length, hidden] (fp32 or fp16).

  Returns:
    (start_logits, end_logits), fp32 [batch, seq_length] each.
  """
  sequence_output = heads.encoder_output_fp32(sequence_output)
  batch_size, seq_length, hidden_size = modeling.get_shape_list(sequence_output, expected_rank=3)
  output_weights = _tf1.get_variable("cls/squad/output_weights", [2, hidden_size],
                                     initializer=modeling.create_initializer(0.02))
  output_bias = _tf1.get_variable("cls/squad/output_bias", [2],
                                  initializer=_tf1.zeros_initializer())
  logits = tf.nn.bias_add(tf.matmul(tf.reshape(sequence_output, [-1, hidden_size]),
                                    output_weights, transpose_b=True), output_bias)
  logits = tf.transpose(tf.reshape(logits, [batch_size, seq_length, 2]), [2, 0, 1])
  return logits[0], logits[1]


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 use_one_hot_embeddings, compute_type=tf.float32):
  """The release's create_model: BertModel + span head; returns (start_logits, end_logits)."""
  model = modeling.BertModel(config=bert_config, is_training=is_training, input_ids=input_ids,
                             input_mask=input_mask, token_type_ids=segment_ids,
                             use_one_hot_embeddings=use_one_hot_embeddings,
                             compute_type=compute_type)
  return squad_head(model.get_sequence_output())


def position_loss(logits, positions):
  """Mean cross-entropy of fp32 logits [batch, seq_length] against positions [batch]."""
  one_hot = tf.one_hot(positions, depth=tf.shape(logits)[-1], dtype=tf.float32)
  return -tf.reduce_mean(tf.reduce_sum(one_hot * heads.log_probabilities(logits), axis=-1))


def head_fn(model, features, mode):
  """The span head for `utils/training/model_fn.py`: loss (mean of start and end) or logits."""
  start_logits, end_logits = squad_head(model.get_sequence_output())
  loss = None
  if mode == tf.estimator.ModeKeys.TRAIN:
    loss = (position_loss(start_logits, features["start_positions"])
            + position_loss(end_logits, features["end_positions"])) / 2.0
  return heads.HeadOutput(
      loss=loss, metric_fn=None, metric_args=None,
      predictions=dict({"start_logits": start_logits, "end_logits": end_logits},
                       # Records carry the ids; the SavedModel's serving input does not.
                       **({"unique_ids": features["unique_ids"]} if "unique_ids" in features
                          else {})))


def check_flags(config, tuning, squad):
  """The shared checks (`JobConfig.check`), fine-tuning's (`FinetuningConfig.check`, a used
  --export_dir) and SQuAD's (`SquadConfig.check`), in that order.

  Raises:
    errors.UsageError: naming the flag.
  """
  config.check(tuning.actions(config, ACTIONS))
  config.refuse(UNUSED_FLAGS, PROGRAM)
  tuning.check(config)
  finetuning.check_export_dir(tuning.export_dir)
  squad.check(config, tuning)


def _read_examples(path, flag, is_training, version_2_with_negative):
  """The examples of a SQuAD file, every question checked (`squad_data.check_squad`).

  Raises:
    errors.UsageError: naming the flag, the file and the question.
  """
  try:
    return squad_data.read_squad_examples(path, is_training, version_2_with_negative)
  except (ValueError, KeyError, OSError, tf.errors.OpError) as e:
    message = getattr(e, "message", None) or str(e)
    if path in message:  # the message names the file (and the question) already
      raise errors.UsageError("--%s: %s" % (flag, message))
    raise errors.UsageError("--%s=%s: %s" % (flag, path, message))


def read_squad_files(config, tuning, squad, num_workers):
  """The examples of --train_file and --predict_file, each read and checked before any graph is
  built, and the updates the training examples make.

  Args:
    config: the `job_config.JobConfig` (--do_train, the batch).
    tuning: the `finetuning_config.FinetuningConfig` (--do_predict, the epochs and warmup).
    squad: the `SquadConfig` (the files, --version_2_with_negative).
    num_workers: the job's workers.

  Returns:
    (train_examples, predict_examples, num_train_steps, num_warmup_steps): no examples and no
    updates for an action not asked for.

  Raises:
    errors.UsageError: naming the flag, the file and the question; or no update at all.
  """
  train_examples, num_train_steps, num_warmup_steps = [], 0, 0
  if config.do_train:
    train_examples = _read_examples(squad.train_file, "train_file", True,
                                    squad.version_2_with_negative)
    num_train_steps, num_warmup_steps = finetuning.training_steps(
        tuning, len(train_examples), config.global_batch_size(num_workers))
  # The release shuffles once, before writing the records, with a fixed seed.
  random.Random(TRAIN_SHUFFLE_SEED).shuffle(train_examples)
  # --predict_file is read and checked before training too: a bad question there is reported
  # now, not after the training run.
  predict_examples = (_read_examples(squad.predict_file, "predict_file", False,
                                     squad.version_2_with_negative) if tuning.do_predict else [])
  return train_examples, predict_examples, num_train_steps, num_warmup_steps


def _write_features(examples, tokenizer, max_seq_length, squad, is_training, path, keep=None):
  """Converts `examples` into records at `path` (and appends the features to `keep`): windows of
  `max_seq_length` tokens, --doc_stride and --max_query_length of `squad` (the `SquadConfig`)."""
  writer = finetuning.RecordWriter(
      path, lambda feature: squad_data.feature_record(feature, is_training))

  def output_fn(feature):
    writer.process_feature(feature)
    if keep is not None:
      keep.append(feature)

  convert_examples_to_features(examples, tokenizer, max_seq_length, squad.doc_stride,
                               squad.max_query_length, is_training, output_fn)
  writer.close()
  return writer.num_features


def write_outputs(squad, output_dir, predictions, nbest, null_odds):
  """predictions.json, nbest_predictions.json and (v2.0) null_odds.json in `output_dir`; with
  answers in --predict_file, the scores in eval_results.txt. Returns the scores or None.

  `squad` is the `SquadConfig` (--version_2_with_negative, --predict_file)."""
  squad_data.write_json(os.path.join(output_dir, "predictions.json"), predictions)
  squad_data.write_json(os.path.join(output_dir, "nbest_predictions.json"), nbest)
  if squad.version_2_with_negative:
    squad_data.write_json(os.path.join(output_dir, "null_odds.json"), null_odds)
  dataset = squad_data.load_squad(squad.predict_file)
  if not squad_eval.has_answers(dataset):
    return None
  scores = squad_eval.evaluate(dataset, predictions)
  estimator_lib.write_eval_results(os.path.join(output_dir, "eval_results.txt"), scores)
  logging.info("***** SQuAD scores: exact_match = %.2f, f1 = %.2f (%d questions) *****",
               scores["exact_match"], scores["f1"], scores["total"])
  return scores


def run(f, config):
  """Fine-tunes (every worker) and answers --predict_file (rank 0).

  Args:
    f: parsed flags (SQuAD's own and fine-tuning's), read once here into their typed
      configurations.
    config: the `job_config.JobConfig` of the shared ones.

  Returns:
    0 on success.

  Raises:
    errors.UsageError: for bad flags or data, before any graph is built.
  """
  tuning = finetuning_config.FinetuningConfig.from_flags(f)
  squad = SquadConfig.from_flags(f)
  check_flags(config, tuning, squad)
  bert_config = job_lib.load_bert_config(config)
  tokenizer = finetuning.load_tokenizer(config.vocab_file, tuning.do_lower_case,
                                       bert_config.vocab_size)
  workers = job_lib.start_workers(config)
  train_examples, predict_examples, num_train_steps, num_warmup_steps = read_squad_files(
      config, tuning, squad, workers.size)
  job = job_lib.Job.open(
      config, PROGRAM, workers,
      job_lib.Model(head_fn, bert_config, job_lib.dropout_seed(config, bert_config)),
      job_lib.Plan(num_train_steps, num_warmup_steps, dict(
          train_batch_size=config.train_batch_size,
          predict_batch_size=tuning.predict_batch_size)))

  if config.do_train:
    train_file = os.path.join(job.output_dir, "train.tf_record")
    num_features = _write_features(train_examples, tokenizer, config.max_seq_length, squad, True,
                                   train_file)
    logging.info("***** Training on %d examples (%d windows), batch %d per worker, %d updates "
                 "*****", len(train_examples), num_features, config.train_batch_size,
                 num_train_steps)
    job.train(finetuning.train_input_fn(config, train_file, finetuning.int_feature_spec(
        config.max_seq_length, SEQUENCE_FEATURES, TRAIN_SCALARS), workers), loss_names=())

  if tuning.do_predict and job.is_chief:
    examples = predict_examples
    features = []
    eval_file = os.path.join(job.output_dir, "eval.tf_record")
    _write_features(examples, tokenizer, config.max_seq_length, squad, False, eval_file,
                    keep=features)
    logging.info("***** Answering %d questions (%d windows), batch %d *****", len(examples),
                 len(features), tuning.predict_batch_size)
    spec = finetuning.int_feature_spec(config.max_seq_length, SEQUENCE_FEATURES, PREDICT_SCALARS)
    outputs = job.predict(finetuning.predict_input_fn(
        config, eval_file, spec, tuning.predict_batch_size), tuning.predict_batch_size)
    results = [RawResult(int(out["unique_ids"]), [float(x) for x in out["start_logits"].flat],
                         [float(x) for x in out["end_logits"].flat])
               for out, _ in zip(outputs, features)]
    write_outputs(squad, job.output_dir, *squad_data.compute_predictions(
        examples, features, results, squad.n_best_size, squad.max_answer_length,
        tuning.do_lower_case, squad.version_2_with_negative, squad.null_score_diff_threshold,
        config.verbose_logging))

  if tuning.export_dir and job.is_chief:
    # serving_default: input_ids, input_mask, segment_ids -> start_logits, end_logits.
    finetuning.export_saved_model(job.estimator, tuning.export_dir, config.max_seq_length)
    logging.info("SavedModel written to %s", tuning.export_dir)

  job.close()
  return 0


main = entry.script_main(PROGRAM, run, DEFAULTS)


if __name__ == "__main__":
  cli.run_main(main, DEFAULTS)
