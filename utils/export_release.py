"""Exports a checkpoint for use elsewhere, or imports a Hugging Face BERT (`--help` for flags).

  python -m utils.export_release --checkpoint=CKPT --bert_config_file=bert_config.json \
      --output_dir=DIR [--vocab_file=vocab.txt] [--format=release|huggingface|saved_model]
  python -m utils.export_release --from_huggingface=HF_DIR --output_dir=DIR

--format=release (the default) writes DIR/bert_model.ckpt.{index,data-00000-of-00001} (the model's
weights: `bert/...`, `cls/predictions/...`, `cls/seq_relationship/...`, without the optimizer's
moments, accumulators, loss scale or step), bert_config.json and, when given, vocab.txt, and prints
the sizes before and after (`utils/checkpoints/release.py`). --format=huggingface writes what
transformers' BertForPreTraining and BertTokenizerFast load (config.json, model.safetensors,
vocab.txt, tokenizer files; `utils/checkpoints/huggingface.py`; --vocab_file is required).
--format=saved_model writes a SavedModel of the encoder (sequence and pooled outputs) for
TensorFlow Serving. --from_huggingface converts a transformers BERT directory into a release
bundle that run_pretraining.py --init_checkpoint and the fine-tuning scripts take.

--checkpoint is a checkpoint prefix (.../model.ckpt-1000) or a directory (its newest checkpoint).
The weights are checked against the model bert_config.json describes. docs/HANDOFF.md has the
details. Exit code 2 for bad arguments or input, naming the file and the problem; an --output_dir
that cannot be a writable directory (a regular file on its way, a directory that is not writable)
is refused before anything is read. The huggingface, saved_model and import outputs are written
whole or not at all.
"""

import argparse
import sys

# Before TensorFlow loads: its native start-up INFO lines are left out unless --verbose is given
# or TF_CPP_MIN_LOG_LEVEL is set (`utils/runtime/cli.py`).
from utils.runtime import cli  # pylint: disable=g-bad-import-order
from utils.checkpoints import contents as ckpt
from utils.checkpoints import huggingface
from utils.checkpoints import release
from utils.checkpoints import saved_model
from utils.core import errors
from utils.runtime import output_lock

FORMATS = ("release", "huggingface", "saved_model")


def _parse_bool(value):
  if value.lower() in ("true", "1", "yes"):
    return True
  if value.lower() in ("false", "0", "no"):
    return False
  raise argparse.ArgumentTypeError("expected true or false, got %r" % value)


def _export_huggingface(args):
  if not args.vocab_file:
    raise errors.UsageError("--format=huggingface needs --vocab_file (the tokenizer's vocabulary)")
  result = huggingface.export(args.checkpoint, args.bert_config_file, args.vocab_file,
                              args.output_dir, do_lower_case=args.do_lower_case)
  print("exported %d tensors of %s to %s (transformers BertForPreTraining, do_lower_case=%s)"
        % (result["tensors"], result["checkpoint"], result["output_dir"], args.do_lower_case))
  cased = result["cased_tokens"]
  if args.do_lower_case and cased:
    sys.stderr.write(
        "export_release: warning: %s has %d tokens with upper-case letters (%s) but the tokenizer "
        "was written with do_lower_case=true, so it never produces them; for a cased model "
        "export again with --do_lower_case=false\n"
        % (args.vocab_file, len(cased), ", ".join(cased[:3]) + (", ..." if len(cased) > 3 else "")))
  return 0


def _import_huggingface(args):
  result = huggingface.import_directory(args.from_huggingface, args.output_dir,
                                        init_missing_heads=args.init_missing_heads)
  for note in result["notes"]:
    print("note: %s" % note)
  print("imported %d weights of %s to %s (tokenizer do_lower_case=%s)" % (
      result["variables"], result["source"], result["bundle"], result["do_lower_case"]))
  return 0


def _export_saved_model(args):
  result = saved_model.export_encoder(args.checkpoint, args.bert_config_file, args.output_dir)
  print("exported the encoder of %s to %s (SavedModel, serving_default: input_ids, input_mask, "
        "segment_ids -> sequence_output, pooled_output)" % (result["checkpoint"],
                                                            result["output_dir"]))
  return 0


def _check_output_dir(output_dir):
  """Raises errors.UsageError naming --output_dir and why it cannot be written (a regular file
  on the way, a directory that is not writable); nothing is created."""
  problem = output_lock.directory_problem(output_dir)
  errors.require(problem is None, "--output_dir=%s: %s", output_dir, problem)


def _run(args):
  # Before any checkpoint is read: an output that cannot be written fails at once, with its
  # reason, not after the work with the file system's traceback.
  _check_output_dir(args.output_dir)
  if args.from_huggingface:
    if args.checkpoint or args.bert_config_file:
      raise errors.UsageError("--from_huggingface takes no --checkpoint or --bert_config_file "
                              "(config.json and the weights come from the directory)")
    return _import_huggingface(args)
  if not args.checkpoint or not args.bert_config_file:
    raise errors.UsageError("--checkpoint and --bert_config_file are required (or "
                            "--from_huggingface)")
  if args.format == "huggingface":
    return _export_huggingface(args)
  if args.format == "saved_model":
    return _export_saved_model(args)
  return _export(args)


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
      prog="python -m utils.export_release", allow_abbrev=False,
      description="Write a training checkpoint as a release bundle (bert_model.ckpt with the "
                  "model's fp32 weights, bert_config.json, vocab.txt), a Hugging Face "
                  "transformers directory or an encoder SavedModel; or import a transformers "
                  "BERT directory as a release bundle.")
  parser.add_argument("--checkpoint", default=None,
                      help="checkpoint prefix (.../model.ckpt-1000) or directory (its newest)")
  parser.add_argument("--bert_config_file", default=None, help="the model's bert_config.json")
  parser.add_argument("--output_dir", required=True, help="directory of the output")
  parser.add_argument("--vocab_file", default=None, help="vocabulary copied as vocab.txt")
  parser.add_argument("--verbose", action="store_true",
                      help="keep TensorFlow's start-up log lines, and an error's traceback")
  parser.add_argument("--format", choices=FORMATS, default="release",
                      help="release (default): bert_model.ckpt; huggingface: config.json, "
                           "model.safetensors and tokenizer files; saved_model: the encoder")
  parser.add_argument("--do_lower_case", type=_parse_bool, default=True,
                      help="the tokenizer's casing written to tokenizer_config.json (huggingface)")
  parser.add_argument("--from_huggingface", default=None, metavar="HF_DIR",
                      help="convert this transformers BERT directory into a release bundle")
  parser.add_argument("--init_missing_heads", action="store_true",
                      help="with --from_huggingface: initialise a missing pooler or pretraining "
                           "head afresh (and drop another head's weights) instead of refusing")
  args = parser.parse_args(argv)
  # TensorFlow's Python warnings (the SavedModel builder's deprecation notices) only with
  # --verbose: the command's output is its own lines.
  cli.configure_python_logging(args.verbose)
  return errors.run_reporting_errors("export_release", _run, args, verbose=args.verbose)


if __name__ == "__main__":
  sys.exit(main())
