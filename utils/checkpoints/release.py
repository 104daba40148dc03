"""The release bundle of a checkpoint, as Google releases BERT: weights only, fp32, the release's
names (`python -m utils.export_release` is its command line).

`export` writes OUTPUT_DIR/bert_model.ckpt.{index,data-00000-of-00001} (the model's weights:
`bert/...`, `cls/predictions/...`, `cls/seq_relationship/...`, without the optimizer's moments,
accumulators, loss scale or step), bert_config.json and, when given, vocab.txt. The weights are
checked against the model bert_config.json describes, so the bundle loads with --init_checkpoint in
run_pretraining.py and in the original release's scripts.
"""

import os

import numpy as np
import tensorflow as tf

import modeling
from utils.checkpoints import compat as checkpoint_compat
from utils.checkpoints import contents as ckpt
from utils.core import errors
from utils.model import pretraining

RELEASE_CHECKPOINT = "bert_model.ckpt"
RELEASE_CONFIG = "bert_config.json"
RELEASE_VOCAB = "vocab.txt"


def model_weight_shapes(bert_config):
  """dict name -> shape of the pretraining model's weights (encoder and both heads).

  Built in a throw-away graph from the pretraining model, so the names cannot drift from it.
  """
  model = ckpt.GraphVariables(lambda: build_model(bert_config))
  return ckpt.by_role(model.shapes, ckpt.ROLE_WEIGHT)


def build_model(bert_config):
  """Builds the pretraining model (encoder and both heads) in the default graph, for its
  variables: a batch of one sequence of two tokens, no dropout."""
  pretraining.build_pretraining_model(bert_config, ckpt.placeholder_features(2, 1),
                                      is_training=False)


def _vocab_size(path):
  with tf.io.gfile.GFile(path) as f:
    return sum(1 for line in f if line.strip())


def load_model_weights(checkpoint, bert_config_file):
  """The model's weights in a training or release checkpoint, checked against its config.

  Args:
    checkpoint: a checkpoint prefix or a directory (its newest checkpoint).
    bert_config_file: the bert_config.json of the checkpoint's model.

  Returns:
    (checkpoint prefix, `modeling.BertConfig`, dict name -> float32 numpy array of the weights
    `model_weight_shapes` names, without optimizer state, accumulators, loss scale or step).

  Raises:
    errors.UsageError: naming the file and the problem: no checkpoint, a config that does not
      parse, variables of another model, or a checkpoint whose files are truncated.
  """
  try:
    checkpoint = ckpt.resolve_checkpoint(checkpoint)
    bert_config = modeling.BertConfig.from_json_file(bert_config_file)
  except (ValueError, tf.errors.OpError) as e:
    raise errors.UsageError(str(e))
  try:
    stored = ckpt.checkpoint_shapes(checkpoint)
  except tf.errors.OpError as e:
    raise errors.UsageError("%s.index is unreadable (truncated or damaged?): %s"
                            % (checkpoint, e.message.splitlines()[0]))
  try:
    ckpt.check_data_files(checkpoint)
  except (ValueError, tf.errors.OpError) as e:
    raise errors.UsageError(getattr(e, "message", str(e)))
  wanted = model_weight_shapes(bert_config)
  mismatches = checkpoint_compat.weight_mismatches(stored, wanted)
  if mismatches:
    raise errors.UsageError("%s does not match the model of --bert_config_file=%s "
                            "(%d difference(s)):\n  %s"
                            % (checkpoint, bert_config_file, len(mismatches),
                               checkpoint_compat.list_some(mismatches)))
  try:
    weights = ckpt.read_tensors(checkpoint, wanted)
  except (tf.errors.OpError, IndexError) as e:  # IndexError: "Read less bytes than requested"
    detail = e.message if isinstance(e, tf.errors.OpError) else str(e)
    raise errors.UsageError("%s: the data files are unreadable (truncated or damaged?): %s"
                            % (checkpoint, detail.splitlines()[0]))
  # Master weights are fp32 already; a checkpoint with fp16 weights is widened (exactly).
  weights = {name: value.astype(np.float32) for name, value in weights.items()}
  return checkpoint, bert_config, weights


def check_vocab(vocab_file, bert_config, bert_config_file):
  """Raises errors.UsageError unless `vocab_file` exists with the config's vocab_size tokens."""
  if not tf.io.gfile.exists(vocab_file):
    raise errors.UsageError("--vocab_file=%s does not exist" % vocab_file)
  if _vocab_size(vocab_file) != bert_config.vocab_size:
    raise errors.UsageError("--vocab_file=%s has %d tokens but vocab_size is %d in %s" % (
        vocab_file, _vocab_size(vocab_file), bert_config.vocab_size, bert_config_file))


def export(checkpoint, bert_config_file, output_dir, vocab_file=None):
  """Writes the release bundle of `checkpoint` into `output_dir`.

  Args:
    checkpoint: a checkpoint prefix or a directory (its newest checkpoint).
    bert_config_file: the bert_config.json of the checkpoint's model.
    output_dir: the bundle's directory (created; must not hold a bert_model.ckpt yet).
    vocab_file: optional vocabulary copied as vocab.txt; its size must be the config's.

  Returns:
    dict with "checkpoint" (the source prefix), "bundle" (the written prefix), "variables"
    (number of weights), "size_before" and "size_after" (bytes of the checkpoints).

  Raises:
    errors.UsageError: naming the argument, the variables that do not match, or the data file
      that is truncated or cannot be read; nothing is written then.
  """
  bundle = os.path.join(output_dir, RELEASE_CHECKPOINT)
  if tf.io.gfile.exists(bundle + ".index"):
    raise errors.UsageError("%s already exists: choose an empty --output_dir" % bundle)
  checkpoint, bert_config, weights = load_model_weights(checkpoint, bert_config_file)
  if vocab_file is not None:
    check_vocab(vocab_file, bert_config, bert_config_file)
  tf.io.gfile.makedirs(output_dir)
  write_bundle(output_dir, bert_config, weights, vocab_file)
  return {"checkpoint": checkpoint, "bundle": bundle, "variables": len(weights),
          "size_before": ckpt.checkpoint_size(checkpoint),
          "size_after": ckpt.checkpoint_size(bundle)}


def write_bundle(output_dir, bert_config, weights, vocab_file=None):
  """Writes bert_model.ckpt (`weights` bit-exactly), bert_config.json and vocab.txt (a copy of
  `vocab_file`, when given) into the existing directory `output_dir`."""
  ckpt.write_checkpoint(os.path.join(output_dir, RELEASE_CHECKPOINT), weights)
  with tf.io.gfile.GFile(os.path.join(output_dir, RELEASE_CONFIG), "w") as f:
    f.write(bert_config.to_json_string())
  if vocab_file is not None:
    tf.io.gfile.copy(vocab_file, os.path.join(output_dir, RELEASE_VOCAB), overwrite=True)
