"""The end of `make demo`: the run log's plot, and what its pretraining learnt, in three lines.

  demo: masked-LM loss 8.35 at the first update -> 5.62 at the last (ln(vocab) = 8.32)
  demo: masked-LM accuracy 0.159 on the held-out records; always predicting the commonest masked
        token (the unigram baseline) scores 0.074 on them: 2.2x
  demo: bench/quality.py measured ... (docs/quality.json, the benchmark's recorded run)

  python scripts/demo_summary.py --run_log=OUT/bert_dllog.json --plot=OUT/training.png
      --eval_results=OUT/eval_results.txt --eval_files_dir=data/demo/seq128/eval
      --vocab_file=data/demo/vocab.txt [--python=PY]
"""

import argparse
import glob
import json
import math
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# The benchmark's recorded run (bench/quality.py's last line), which docs/FINETUNING.md reports.
QUALITY_RESULT = os.path.join(REPO_ROOT, "docs", "quality.json")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python scripts/demo_summary.py",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--run_log", required=True, help="the pretraining's bert_dllog.json")
  parser.add_argument("--plot", required=True, help="PNG to draw the run log into (utils.plot_log)")
  parser.add_argument("--eval_results", required=True, help="its eval_results.txt")
  parser.add_argument("--eval_files_dir", required=True, help="the held-out TFRecords")
  parser.add_argument("--vocab_file", required=True)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--python", default="python", help="the python the benchmark line names")
  parser.add_argument("--quality_result", default=QUALITY_RESULT,
                      help="the benchmark's recorded result (JSON)")
  return parser.parse_args(argv)


def loss_line(run_log, vocab_size):
  from utils.runlog import dllogger_setup  # pylint: disable=g-import-not-at-top
  from utils.runlog import plot  # pylint: disable=g-import-not-at-top
  _, losses = plot.series(dllogger_setup.read_log(run_log)[0], "mlm_loss")
  return ("demo: masked-LM loss %.2f at the first update -> %.2f at the last (ln(vocab) = %.2f)"
          % (losses[0], losses[-1], math.log(vocab_size)))


def accuracy_line(accuracy, unigram):
  return ("demo: masked-LM accuracy %.3f on the held-out records; always predicting their "
          "commonest masked token (the unigram baseline) scores %.3f: %.1fx"
          % (accuracy, unigram, accuracy / unigram))


def benchmark_line(result, python):
  """One line: what the earlier bench/quality.py's recorded run showed (docs/quality.json, on the
  demo corpus), and the command of today's benchmark (docs/PERFORMANCE.md), which measures
  something else: time to the original's loss on a corpus no job reads twice."""
  return ("demo: what longer pretraining buys (bench/quality.py, %g minutes, %s, %s): masked-LM "
          "accuracy %.3f (unigram %.3f), the stdlib classifier %.3f fine-tuned from the checkpoint "
          "against %.3f from random weights (means over %d seeds; the earlier benchmark on the "
          "demo corpus, docs/FINETUNING.md); time to quality today: %s bench/quality.py "
          "--output_dir=/tmp/quality (docs/PERFORMANCE.md)"
          % (result["budget_minutes"], result["variant"], result["cpu"], result["mlm_accuracy"],
             result["unigram_accuracy"], result["pretrained_dev_accuracy"],
             result["random_dev_accuracy"], result["seeds"], python))


def main(argv=None):
  args = parse_args(argv)
  from utils.model import evaluation  # pylint: disable=g-import-not-at-top
  from utils.runlog import plot  # pylint: disable=g-import-not-at-top
  from utils.training import estimator  # pylint: disable=g-import-not-at-top
  plot.plot_log(args.run_log, args.plot)
  with open(args.vocab_file) as f:
    vocab_size = sum(1 for _ in f)
  print(loss_line(args.run_log, vocab_size))
  eval_files = sorted(glob.glob(os.path.join(args.eval_files_dir, "*.tfrecord")))
  records = evaluation.read_pretraining_records(eval_files, args.max_seq_length,
                                                args.max_predictions_per_seq)
  print(accuracy_line(estimator.read_eval_results(args.eval_results)["masked_lm_accuracy"],
                      evaluation.unigram_accuracy(records)))
  with open(args.quality_result) as f:
    print(benchmark_line(json.load(f), args.python))
  return 0


if __name__ == "__main__":
  sys.exit(main())
