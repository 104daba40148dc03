"""bf16 against fp32 beyond a toy: the demo's pretraining, side by side on the same batches.

  PY=$(make -s python-path | tail -n1); make data
  $PY bench/convergence.py --output_dir=/tmp/convergence --figure=docs/bf16_convergence.png

Trains the demo's model (BERT-tiny with the demo vocabulary) on the demo data twice at once, in
fp32 and with --bf16, one thread each, with --deterministic_run (the same initial weights, batches
and dropout masks), LAMB, then evaluates both on the held-out records. Prints the logged training
MLM losses side by side and the eval losses with their relative differences, and draws both
training curves and their relative difference in one figure.
"""

import argparse
import json
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from utils.runlog import dllogger_setup  # noqa: E402
from utils.training import estimator as estimator_lib  # noqa: E402

PRECISIONS = ("fp32", "bf16")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="python bench/convergence.py",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--data_dir", default=os.path.join(REPO_ROOT, "data", "demo"),
                      help="the demo data (make data)")
  parser.add_argument("--output_dir", required=True, help="the two runs go to fp32/ and bf16/")
  parser.add_argument("--figure", default=None, help="PNG to draw both curves into")
  parser.add_argument("--updates", type=int, default=600)
  parser.add_argument("--display_every", type=int, default=10)
  return parser.parse_args(argv)


def demo_config(data_dir, path):
  """bert_configs/tiny.json with the demo vocabulary's size, written to `path`."""
  return tiny_config(os.path.join(data_dir, "vocab.txt"), path)


def tiny_config(vocab_file, path):
  """bert_configs/tiny.json with the size of the vocabulary `vocab_file`, written to `path`."""
  with open(os.path.join(REPO_ROOT, "bert_configs", "tiny.json")) as f:
    config = json.load(f)
  with open(vocab_file) as f:
    config["vocab_size"] = sum(1 for _ in f)
  with open(path, "w") as f:
    json.dump(config, f, indent=2, sort_keys=True)
  return config


def command(args, config_path, precision):
  out = os.path.join(args.output_dir, precision)
  return [sys.executable, os.path.join(REPO_ROOT, "run_pretraining.py"),
          "--bert_config_file=%s" % config_path,
          "--input_files_dir=%s" % os.path.join(args.data_dir, "seq128", "train"),
          "--eval_files_dir=%s" % os.path.join(args.data_dir, "seq128", "eval"),
          "--output_dir=%s" % out, "--do_train", "--do_eval",
          "--max_seq_length=128", "--max_predictions_per_seq=20", "--optimizer_type=lamb",
          "--learning_rate=4e-3", "--train_batch_size=16", "--num_accumulation_steps=4",
          "--num_train_steps=%d" % args.updates, "--num_warmup_steps=%d" % (args.updates // 10),
          "--save_checkpoints_steps=%d" % args.updates, "--eval_batch_size=32",
          "--max_eval_steps=1000", "--display_loss_steps=%d" % args.display_every,
          "--deterministic_run", "--intra_op_threads=1", "--inter_op_threads=1"] + (
              ["--bf16"] if precision == "bf16" else [])


def training_losses(log_path):
  """{update: MLM loss} of the logged training updates."""
  steps, _ = dllogger_setup.read_log(log_path)
  return {step: data["mlm_loss"] for step, data in steps if "mlm_loss" in data}


def relative(new, old):
  return (new - old) / abs(old)


def draw(losses, figure):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  steps = sorted(set(losses["fp32"]) & set(losses["bf16"]))
  fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                    gridspec_kw={"height_ratios": [3, 1]})
  for precision, style in (("fp32", "-"), ("bf16", "--")):
    top.plot(steps, [losses[precision][s] for s in steps], style, label=precision)
  top.set_ylabel("training MLM loss")
  top.legend()
  top.set_title("Demo pretraining (BERT-tiny, LAMB, global batch 64): fp32 and --bf16, "
                "same batches", fontsize=9)
  bottom.plot(steps, [100 * relative(losses["bf16"][s], losses["fp32"][s]) for s in steps])
  bottom.axhline(0, color="grey", linewidth=0.5)
  bottom.set_ylabel("bf16 - fp32 (%)")
  bottom.set_xlabel("update")
  fig.tight_layout()
  fig.savefig(figure, dpi=100)


def main(argv=None):
  args = parse_args(argv)
  os.makedirs(args.output_dir, exist_ok=True)
  config_path = os.path.join(args.output_dir, "bert_config.json")
  demo_config(args.data_dir, config_path)
  procs = {}
  for precision in PRECISIONS:
    log = open(os.path.join(args.output_dir, precision + ".out"), "w")
    procs[precision] = subprocess.Popen(command(args, config_path, precision), cwd=REPO_ROOT,
                                        stdout=log, stderr=subprocess.STDOUT)
  failed = [p for p, proc in procs.items() if proc.wait() != 0]
  if failed:
    raise SystemExit("run(s) %s failed: see %s" % (failed, args.output_dir))
  losses = {p: training_losses(os.path.join(args.output_dir, p, "bert_dllog.json"))
            for p in PRECISIONS}
  evals = {p: estimator_lib.read_eval_results(
      os.path.join(args.output_dir, p, "eval_results.txt")) for p in PRECISIONS}
  steps = sorted(set(losses["fp32"]) & set(losses["bf16"]))
  print("| update | fp32 MLM loss | bf16 MLM loss | bf16 - fp32 |")
  print("|---|---|---|---|")
  for step in steps:
    a, b = losses["fp32"][step], losses["bf16"][step]
    print("| %d | %.4f | %.4f | %+.2f%% |" % (step, a, b, 100 * relative(b, a)))
  worst = max(abs(relative(losses["bf16"][s], losses["fp32"][s])) for s in steps)
  print("largest relative difference of a logged training MLM loss: %.2f%%" % (100 * worst))
  for key in ("masked_lm_loss", "loss", "masked_lm_accuracy", "next_sentence_accuracy"):
    if key in evals["fp32"] and key in evals["bf16"]:
      a, b = evals["fp32"][key], evals["bf16"][key]
      print("eval %s: fp32 %.4f, bf16 %.4f (%+.2f%%)" % (key, a, b, 100 * relative(b, a)))
  if args.figure:
    draw(losses, args.figure)
    print(args.figure)


if __name__ == "__main__":
  main()
