"""Exports a training checkpoint as Google releases BERT: weights only, fp32, the release's names.

  python -m utils.export_release --checkpoint=OUTPUT_DIR --bert_config_file=bert_config.json \
      --output_dir=EXPORT_DIR [--vocab_file=vocab.txt]

writes EXPORT_DIR/bert_model.ckpt.{index,data-00000-of-00001} (the model's weights: `bert/...`,
`cls/predictions/...`, `cls/seq_relationship/...`, without the optimizer's moments, accumulators,
loss scale or step), bert_config.json and, when given, vocab.txt, and prints the sizes before and
after. --checkpoint is a checkpoint prefix (.../model.ckpt-1000) or a directory (its newest
checkpoint). The weights are checked against the model bert_config.json describes, so the bundle
loads with --init_checkpoint in run_pretraining.py and in the original release's scripts.
Exit code 2 for bad arguments.
"""

import argparse
import os
import shutil
import sys

import numpy as np
import tensorflow as tf

import modeling
from utils import checkpoint_compat
from utils import checkpoints as ckpt

RELEASE_CHECKPOINT = "bert_model.ckpt"
RELEASE_CONFIG = "bert_config.json"
RELEASE_VOCAB = "vocab.txt"


class ExportError(ValueError):
  """A bad argument or a checkpoint that does not match the config."""


def model_weight_shapes(bert_config):
  """dict name -> shape of the pretraining model's weights (encoder and both heads).

  Built in a throw-away graph from run_pretraining's model, so the names cannot drift from it.
  """
  import run_pretraining  # pylint: disable=g-import-not-at-top  (defines absl flags on import)
  model = ckpt.GraphVariables(lambda: run_pretraining.build_pretraining_model(
      bert_config, ckpt.placeholder_features(2, 1), is_training=False))
  return ckpt.by_role(model.shapes, ckpt.ROLE_WEIGHT)


def _vocab_size(path):
  with tf.io.gfile.GFile(path) as f:
    return sum(1 for line in f if line.strip())


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
    ExportError: naming the argument or the variables that do not match.
  """
  try:
    checkpoint = ckpt.resolve_checkpoint(checkpoint)
    bert_config = modeling.BertConfig.from_json_file(bert_config_file)
  except (ValueError, tf.errors.OpError) as e:
    raise ExportError(str(e))
  if vocab_file is not None:
    if not tf.io.gfile.exists(vocab_file):
      raise ExportError("--vocab_file=%s does not exist" % vocab_file)
    if _vocab_size(vocab_file) != bert_config.vocab_size:
      raise ExportError("--vocab_file=%s has %d tokens but vocab_size is %d in %s" % (
          vocab_file, _vocab_size(vocab_file), bert_config.vocab_size, bert_config_file))
  bundle = os.path.join(output_dir, RELEASE_CHECKPOINT)
  if tf.io.gfile.exists(bundle + ".index"):
    raise ExportError("%s already exists: choose an empty --output_dir" % bundle)

  stored = ckpt.checkpoint_shapes(checkpoint)
  wanted = model_weight_shapes(bert_config)
  mismatches = checkpoint_compat.weight_mismatches(stored, wanted)
  if mismatches:
    raise ExportError("%s does not match the model of --bert_config_file=%s (%d difference(s)):"
                      "\n  %s" % (checkpoint, bert_config_file, len(mismatches),
                                  checkpoint_compat.list_some(mismatches)))

  weights = ckpt.read_tensors(checkpoint, wanted)
  # Master weights are fp32 already; a checkpoint with fp16 weights is widened (exactly).
  weights = {name: value.astype(np.float32) for name, value in weights.items()}
  tf.io.gfile.makedirs(output_dir)
  ckpt.write_checkpoint(bundle, weights)
  with tf.io.gfile.GFile(os.path.join(output_dir, RELEASE_CONFIG), "w") as f:
    f.write(bert_config.to_json_string())
  if vocab_file is not None:
    tf.io.gfile.copy(vocab_file, os.path.join(output_dir, RELEASE_VOCAB), overwrite=True)
  return {"checkpoint": checkpoint, "bundle": bundle, "variables": len(weights),
          "size_before": ckpt.checkpoint_size(checkpoint), "size_after": ckpt.checkpoint_size(bundle)}


def main(argv=None):
  parser = argparse.ArgumentParser(
      prog="python -m utils.export_release",
      description="Write a training checkpoint as a release bundle (bert_model.ckpt with the "
                  "model's fp32 weights, bert_config.json, vocab.txt).")
  parser.add_argument("--checkpoint", required=True,
                      help="checkpoint prefix (.../model.ckpt-1000) or directory (its newest)")
  parser.add_argument("--bert_config_file", required=True, help="the model's bert_config.json")
  parser.add_argument("--output_dir", required=True, help="directory of the bundle")
  parser.add_argument("--vocab_file", default=None, help="vocabulary copied as vocab.txt")
  args = parser.parse_args(argv)
  try:
    result = export(args.checkpoint, args.bert_config_file, args.output_dir, args.vocab_file)
  except ExportError as e:
    print("export_release: error: %s" % e, file=sys.stderr, flush=True)
    return 2
  print("exported %d weights of %s to %s" % (result["variables"], result["checkpoint"],
                                             result["bundle"]))
  print("size: %s -> %s (%.1f%%)" % (
      ckpt.describe_size(result["size_before"]), ckpt.describe_size(result["size_after"]),
      100.0 * result["size_after"] / result["size_before"]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
