"""Exports a training checkpoint as Google releases BERT: weights only, fp32, the release's names.

  python -m utils.export_release --checkpoint=OUTPUT_DIR --bert_config_file=bert_config.json \
      --output_dir=EXPORT_DIR [--vocab_file=vocab.txt]

writes EXPORT_DIR/bert_model.ckpt.{index,data-00000-of-00001} (the model's weights: `bert/...`,
`cls/predictions/...`, `cls/seq_relationship/...`, without the optimizer's moments, accumulators,
loss scale or step), bert_config.json and, when given, vocab.txt, and prints the sizes before and
after. --checkpoint is a checkpoint prefix (.../model.ckpt-1000) or a directory (its newest
checkpoint). The weights are checked against the model bert_config.json describes, so the bundle
loads with --init_checkpoint in run_pretraining.py and in the original release's scripts
(`utils/checkpoints/release.py`). Exit code 2 for bad arguments.
"""

import argparse
import sys

# Before TensorFlow loads: its native start-up INFO lines are left out unless --verbose is given
# or TF_CPP_MIN_LOG_LEVEL is set (`utils/runtime/cli.py`).
from utils.runtime import cli  # noqa: F401  pylint: disable=g-bad-import-order,unused-import
from utils.checkpoints import contents as ckpt
from utils.checkpoints import release
from utils.core import errors


def _export(args):
  result = release.export(args.checkpoint, args.bert_config_file, args.output_dir,
                          args.vocab_file)
  print("exported %d weights of %s to %s" % (result["variables"], result["checkpoint"],
                                             result["bundle"]))
  print("size: %s -> %s (%.1f%%)" % (
      ckpt.describe_size(result["size_before"]), ckpt.describe_size(result["size_after"]),
      100.0 * result["size_after"] / result["size_before"]))
  return 0


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
  parser.add_argument("--verbose", action="store_true",
                      help="keep TensorFlow's start-up log lines")
  args = parser.parse_args(argv)
  return errors.run_reporting_errors("export_release", _export, args)


if __name__ == "__main__":
  sys.exit(main())
