"""BERT fine-tuning for sentence and sentence-pair classification (GLUE MRPC, CoLA, MNLI; XNLI).

  python run_classifier.py --task_name=MRPC --data_dir=glue/MRPC --vocab_file=vocab.txt \
      --bert_config_file=bert_config.json --init_checkpoint=bert_model.ckpt \
      --output_dir=out --do_train --do_eval [--horovod] [--manual_fp16 | --bf16] ...

The original release's flags, processors, record files (train.tf_record, eval.tf_record,
predict.tf_record) and outputs (eval_results.txt, test_results.tsv), plus NVIDIA's --horovod, --amp,
--manual_fp16, --use_xla, --num_accumulation_steps and --dllog_path (and ours, --bf16). The head's
variables are the release's (`output_weights`, `output_bias`), so a checkpoint fine-tuned by either
script loads in the other. Importing this module defines the flags (the shared ones once, in
utils/training/flags.py and utils/finetuning/flags.py) and nothing else.
"""

import dataclasses
import os
import typing

from absl import flags
from absl import logging
from utils.runtime import cli  # pylint: disable=g-bad-import-order
import tensorflow as tf

import modeling
from utils.core import errors
from utils.finetuning import classifier_data
from utils.finetuning import config as finetuning_config
from utils.finetuning import flags as finetuning_flags
from utils.finetuning import task as finetuning
# The release's names for the data classes and functions, for code that imports them from here.
from utils.finetuning.classifier_data import ColaProcessor  # noqa: F401
from utils.finetuning.classifier_data import DataProcessor  # noqa: F401
from utils.finetuning.classifier_data import InputExample  # noqa: F401
from utils.finetuning.classifier_data import InputFeatures  # noqa: F401
from utils.finetuning.classifier_data import MnliProcessor  # noqa: F401
from utils.finetuning.classifier_data import MrpcProcessor  # noqa: F401
from utils.finetuning.classifier_data import PaddingInputExample
from utils.finetuning.classifier_data import XnliProcessor  # noqa: F401
from utils.model import heads
from utils.training import entry
from utils.training import flags as job_flags
from utils.training import job as job_lib

_tf1 = tf.compat.v1
FLAGS = flags.FLAGS
# --helpshort lists the shared flags beside the script's own.
flags.adopt_module_key_flags(job_flags)
flags.adopt_module_key_flags(finetuning_flags)
# The name the script's messages and last line start with.
PROGRAM = "run_classifier.py"
# This script's defaults of shared flags (the release's run_classifier.py).
DEFAULTS = {"max_seq_length": 128, "optimizer_type": "adam"}
ACTIONS = ("do_train", "do_eval", "do_predict", "export_dir")

flags.DEFINE_string("data_dir", None, "Directory of the task's .tsv files.")
flags.DEFINE_string("task_name", None,
                    "The task: %s." % ", ".join(classifier_data.PROCESSORS))


@dataclasses.dataclass(frozen=True)
class ClassifierConfig:
  """The values of this script's own flags (meanings: their definitions above)."""
  data_dir: typing.Optional[str]
  task_name: typing.Optional[str]

  @classmethod
  def from_flags(cls, flag_values):
    """The configuration of parsed flags (`finetuning_config.read_flags`)."""
    return finetuning_config.read_flags(cls, flag_values)

  def check(self):
    """The classifier's rule without file access (--task_name is checked when its processor is
    made, `load_processor`).

    Raises:
      errors.UsageError: naming the flag.
    """
    errors.require(self.data_dir, "--data_dir is required")


# Dropout on the pooled output while training (the release's keep probability 0.9).
HEAD_DROPOUT = 0.1
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
SCALAR_FEATURES = ("label_ids", "is_real_example")


def classifier_head(pooled_output, labels, num_labels, dropout_prob=0.0, dropout_seed=None):
  """Softmax classifier on the pooled [CLS] output, in fp32.

  Variables `output_weights` [num_labels, hidden] and `output_bias` [num_labels] (the release's).

  Args:
    pooled_output: [batch, hidden] (fp32 or fp16).
    labels: int32 [batch].
    num_labels: classes.
    dropout_prob: dropout on the pooled output (training).
    dropout_seed: optional int Tensor [2]: the mask is keyed on it (a deterministic run, see
      `modeling.dropout`); None draws it from TensorFlow's stateful generator.

  Returns:
    (loss, per_example_loss [batch], logits [batch, num_labels], probabilities), all fp32.
  """
  pooled_output = heads.encoder_output_fp32(pooled_output)
  hidden_size = pooled_output.shape[-1]
  output_weights = _tf1.get_variable("output_weights", [num_labels, hidden_size],
                                     initializer=modeling.create_initializer(0.02))
  output_bias = _tf1.get_variable("output_bias", [num_labels],
                                  initializer=_tf1.zeros_initializer())
  with _tf1.variable_scope("loss"):
    pooled_output = modeling.dropout(pooled_output, dropout_prob, seed=dropout_seed)
    logits = tf.nn.bias_add(tf.matmul(pooled_output, output_weights, transpose_b=True),
                            output_bias)
    probabilities = tf.nn.softmax(logits, axis=-1)
    log_probs = heads.log_probabilities(logits)
    one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    return tf.reduce_mean(per_example_loss), per_example_loss, logits, probabilities


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids, labels,
                 num_labels, use_one_hot_embeddings, compute_type=tf.float32):
  """The release's create_model: BertModel + classifier head.

  Returns:
    (loss, per_example_loss, logits, probabilities), see `classifier_head`.
  """
  model = modeling.BertModel(config=bert_config, is_training=is_training, input_ids=input_ids,
                             input_mask=input_mask, token_type_ids=segment_ids,
                             use_one_hot_embeddings=use_one_hot_embeddings,
                             compute_type=compute_type)
  return classifier_head(model.get_pooled_output(), labels, num_labels,
                         HEAD_DROPOUT if is_training else 0.0)


def metric_fn(per_example_loss, label_ids, logits, is_real_example):
  """eval_accuracy and eval_loss over the real (not padding) examples."""
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
  return {
      "eval_accuracy": _tf1.metrics.accuracy(labels=label_ids, predictions=predictions,
                                             weights=is_real_example),
      "eval_loss": _tf1.metrics.mean(values=per_example_loss, weights=is_real_example),
  }


def head_fn_builder(num_labels, dropout_prob=HEAD_DROPOUT):
  """The classifier head for `utils/training/model_fn.py`; in a deterministic run its dropout
  mask is keyed like the encoder's (layer `modeling.HEADS_LAYER`)."""

  def head_fn(model, features, mode):
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    loss, per_example_loss, logits, probabilities = classifier_head(
        model.get_pooled_output(), features["label_ids"], num_labels,
        dropout_prob if is_training else 0.0,
        dropout_seed=modeling.dropout_site_key(model.dropout_key, modeling.HEADS_LAYER, 0))
    is_real_example = tf.cast(features["is_real_example"], tf.float32)
    return heads.HeadOutput(
        loss=loss, predictions={"probabilities": probabilities}, metric_fn=metric_fn,
        metric_args=[per_example_loss, features["label_ids"], logits, is_real_example])

  return head_fn


def file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                            output_file):
  """Writes the features of `examples` as TFRecords; returns how many."""
  return finetuning.write_records(output_file, (
      classifier_data.feature_record(classifier_data.convert_single_example(
          example, label_list, max_seq_length, tokenizer)) for example in examples))


def check_flags(config, tuning, classifier):
  """The shared checks (`JobConfig.check`), fine-tuning's (`FinetuningConfig.check`, a used
  --export_dir) and the classifier's (`ClassifierConfig.check`), in that order.

  Raises:
    errors.UsageError: naming the flag.
  """
  config.check(tuning.actions(config, ACTIONS))
  tuning.check(config)
  finetuning.check_export_dir(tuning.export_dir)
  classifier.check()


def load_processor(classifier):
  """The processor of --task_name (reading --data_dir for the labels of a task that keeps them
  there) and its labels.

  Returns:
    (processor, label_list).

  Raises:
    errors.UsageError: naming --task_name.
  """
  try:
    processor = classifier_data.get_processor(classifier.task_name, classifier.data_dir)
    return processor, processor.get_labels()
  except ValueError as e:
    raise errors.UsageError("--task_name: %s" % e)


def _examples(classifier, use_tpu, getter, batch_size):
  """A split's examples, padded to whole batches on TPU (`use_tpu`); (examples, number of real
  ones).

  Args:
    classifier: the `ClassifierConfig` (--data_dir, --task_name).
    use_tpu: pad the examples to whole batches.
    getter: the processor's method of the split, e.g. `processor.get_dev_examples`.
    batch_size: the split's batch.

  Raises:
    errors.UsageError: naming the file and line of a row the task cannot read (too few columns,
      an unknown label).
  """
  try:
    examples = getter(classifier.data_dir)
  except ValueError as e:
    raise errors.UsageError("--data_dir=%s, task %s: %s" % (classifier.data_dir,
                                                            classifier.task_name, e))
  real = len(examples)
  if use_tpu:
    examples += [PaddingInputExample()] * (-real % batch_size)
  return examples, real


def read_splits(config, tuning, classifier, processor):
  """Every split the run uses, read and checked up front, before any graph is built.

  A bad row of dev.tsv or test.tsv is reported before training starts, not after it.

  Args:
    config: the `job_config.JobConfig` (--do_train, --do_eval and its batch, --use_tpu).
    tuning: the `finetuning_config.FinetuningConfig` (--do_predict and its batch).
    classifier: the `ClassifierConfig`.
    processor: the task's processor (`load_processor`).

  Returns:
    dict "train" / "eval" / "predict" -> (examples, number of real ones), the splits the action
    flags ask for.
  """
  splits = {}
  if config.do_train:
    splits["train"] = _examples(classifier, config.use_tpu, processor.get_train_examples, 1)
  if config.do_eval:
    splits["eval"] = _examples(classifier, config.use_tpu, processor.get_dev_examples,
                               config.eval_batch_size)
  if tuning.do_predict:
    splits["predict"] = _examples(classifier, config.use_tpu, processor.get_test_examples,
                                  tuning.predict_batch_size)
  return splits


def training_updates(config, tuning, splits, num_workers):
  """(num_train_steps, num_warmup_steps) of the training split (`finetuning.training_steps`);
  (0, 0) without --do_train.

  Args:
    config: the `job_config.JobConfig` (--do_train, the batch).
    tuning: the `finetuning_config.FinetuningConfig` (the epochs and warmup).
    splits: `read_splits`'s.
    num_workers: the job's workers.
  """
  if not config.do_train:
    return 0, 0
  return finetuning.training_steps(tuning, len(splits["train"][0]),
                                   config.global_batch_size(num_workers))


def _write_test_results(path, probabilities):
  """test_results.tsv: one line per real example, the class probabilities tab-separated."""
  with tf.io.gfile.GFile(path, "w") as writer:
    for row in probabilities:
      writer.write("\t".join(str(p) for p in row) + "\n")


def run(f, config):
  """Fine-tunes (every worker), evaluates and predicts (rank 0).

  Args:
    f: parsed flags (the classifier's own and fine-tuning's), read once here into their typed
      configurations.
    config: the `job_config.JobConfig` of the shared ones.

  Returns:
    0 on success.

  Raises:
    errors.UsageError: for bad flags or data, before any graph is built.
  """
  tuning = finetuning_config.FinetuningConfig.from_flags(f)
  classifier = ClassifierConfig.from_flags(f)
  check_flags(config, tuning, classifier)
  processor, label_list = load_processor(classifier)
  bert_config = job_lib.load_bert_config(config)
  tokenizer = finetuning.load_tokenizer(config.vocab_file, tuning.do_lower_case,
                                       bert_config.vocab_size)
  workers = job_lib.start_workers(config)
  splits = read_splits(config, tuning, classifier, processor)
  num_train_steps, num_warmup_steps = training_updates(config, tuning, splits, workers.size)
  job = job_lib.Job.open(
      config, PROGRAM, workers,
      job_lib.Model(head_fn_builder(len(label_list)), bert_config,
                    job_lib.dropout_seed(config, bert_config, head_dropout_prob=HEAD_DROPOUT)),
      job_lib.Plan(num_train_steps, num_warmup_steps, dict(
          train_batch_size=config.train_batch_size, eval_batch_size=config.eval_batch_size,
          predict_batch_size=tuning.predict_batch_size)))
  spec = finetuning.int_feature_spec(config.max_seq_length, SEQUENCE_FEATURES, SCALAR_FEATURES)

  if config.do_train:
    train_examples = splits["train"][0]
    train_file = os.path.join(job.output_dir, "train.tf_record")
    file_based_convert_examples_to_features(train_examples, label_list, config.max_seq_length,
                                            tokenizer, train_file)
    logging.info("***** Training on %d examples, batch %d per worker, %d updates *****",
                 len(train_examples), config.train_batch_size, num_train_steps)
    job.train(finetuning.train_input_fn(config, train_file, spec, workers), loss_names=())

  if config.do_eval and job.is_chief:
    eval_examples, real = splits["eval"]
    eval_file = os.path.join(job.output_dir, "eval.tf_record")
    file_based_convert_examples_to_features(eval_examples, label_list, config.max_seq_length,
                                            tokenizer, eval_file)
    logging.info("***** Evaluating %d examples (%d padding), batch %d *****", len(eval_examples),
                 len(eval_examples) - real, config.eval_batch_size)
    job.evaluate(finetuning.predict_input_fn(config, eval_file, spec, config.eval_batch_size),
                 None)

  if tuning.do_predict and job.is_chief:
    test_examples, real = splits["predict"]
    predict_file = os.path.join(job.output_dir, "predict.tf_record")
    file_based_convert_examples_to_features(test_examples, label_list, config.max_seq_length,
                                            tokenizer, predict_file)
    results = job.predict(finetuning.predict_input_fn(
        config, predict_file, spec, tuning.predict_batch_size), tuning.predict_batch_size)
    probabilities = [result["probabilities"] for result, _ in zip(results, range(real))]
    _write_test_results(os.path.join(job.output_dir, "test_results.tsv"), probabilities)

  if tuning.export_dir and job.is_chief:
    # serving_default: input_ids, input_mask, segment_ids -> probabilities [batch, labels].
    finetuning.export_saved_model(job.estimator, tuning.export_dir, config.max_seq_length,
                                  constant_features=SCALAR_FEATURES)
    logging.info("SavedModel written to %s", tuning.export_dir)

  job.close()
  return 0


main = entry.script_main(PROGRAM, run, DEFAULTS)


if __name__ == "__main__":
  cli.run_main(main, DEFAULTS)
