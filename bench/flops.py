"""Model FLOPs per sequence of BERT pretraining, the figure model-FLOP utilisation (MFU) divides.

One formula, shared by every benchmark so their figures compare with each other and with the
figures quoted for other BERT pipelines:

  6 x encoder_params x T + 12 x L x H x T^2 + 6 x P x H x V + 6 x (P x H^2 + H^2)

T = sequence length, L = layers, H = hidden size, P = max_predictions_per_seq, V = vocabulary size,
encoder_params = every weight and bias of the encoder layers (layer norms included; embeddings and
pooler excluded). The terms are, forward + backward (x3 of the forward's 2 FLOPs per
multiply-add): the encoder's dense layers, the attention scores and context (QK^T and PV), the MLM
output projection onto the vocabulary, and the MLM transform plus the pooler. Embedding lookups,
element-wise work and the optimizer are not counted: MFU measures how much of the matmul peak the
model's own matmuls turn into progress. `config_file` finds the configuration a benchmark's
--config names.

  python bench/flops.py --config base --seq 128 --predictions 20    # FLOPs per sequence
"""

import argparse
import json
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_file(name):
  """bert_configs/<name>.json for a config name, or `name` itself when it ends in .json."""
  path = name if name.endswith(".json") else os.path.join(REPO_ROOT, "bert_configs",
                                                         name + ".json")
  if not os.path.isfile(path):
    raise SystemExit("no BERT config %s" % path)
  return path


def encoder_params(hidden_size, num_hidden_layers, intermediate_size):
  """Weights and biases of the encoder layers (layer norms included).

  Per layer: Q, K, V and attention-output dense layers (4 H^2 + 4 H), two layer norms (4 H), the
  intermediate (H I + I) and output (I H + H) dense layers.

  Args:
    hidden_size: H.
    num_hidden_layers: L.
    intermediate_size: I.

  Returns:
    int, the parameter count of all L layers.
  """
  h, i = hidden_size, intermediate_size
  per_layer = (4 * h * h + 4 * h) + 4 * h + (h * i + i) + (i * h + h)
  return num_hidden_layers * per_layer


def model_flops_per_sequence(hidden_size, num_hidden_layers, intermediate_size, vocab_size,
                             seq_length, max_predictions_per_seq, num_encoder_params=None):
  """Training FLOPs of one sequence (forward and backward), by the formula of the module doc.

  Args:
    hidden_size: H.
    num_hidden_layers: L.
    intermediate_size: I (only used when `num_encoder_params` is None).
    vocab_size: V.
    seq_length: T.
    max_predictions_per_seq: P.
    num_encoder_params: the encoder's parameter count when already known (e.g. counted in a
      graph); computed from the config when None.

  Returns:
    int, FLOPs per sequence.
  """
  if num_encoder_params is None:
    num_encoder_params = encoder_params(hidden_size, num_hidden_layers, intermediate_size)
  h, l, t, p, v = hidden_size, num_hidden_layers, seq_length, max_predictions_per_seq, vocab_size
  return (6 * num_encoder_params * t + 12 * l * h * t * t + 6 * p * h * v
          + 6 * (p * h * h + h * h))


def config_flops_per_sequence(bert_config, seq_length, max_predictions_per_seq):
  """`model_flops_per_sequence` for a `modeling.BertConfig` (or any object with its keys)."""
  return model_flops_per_sequence(
      bert_config.hidden_size, bert_config.num_hidden_layers, bert_config.intermediate_size,
      bert_config.vocab_size, seq_length, max_predictions_per_seq)


def mfu(sequences_per_second, flops_per_sequence, peak_flops_per_second):
  """Model-FLOP utilisation: the share of the peak the model's FLOPs use (0..1)."""
  return sequences_per_second * flops_per_sequence / peak_flops_per_second


def measure_matmul_peak(runs, size=4096, dtype="float32"):
  """The MFU denominator: best matmul FLOP/s of `runs` size^3 TF matmuls in `dtype` ("float32" or
  "bfloat16"), one session, all cores.

  The product is computed but not fetched, so no 64 MB copy falls in the timed region.
  """
  import time  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf1 = tf.compat.v1
  with tf.Graph().as_default():
    a = tf1.get_variable("a", [size, size], dtype=dtype,
                         initializer=tf1.random_normal_initializer())
    b = tf1.get_variable("b", [size, size], dtype=dtype,
                         initializer=tf1.random_normal_initializer())
    product = tf.matmul(a, b)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      sess.run(product.op)
      best = float("inf")
      for _ in range(runs):
        start = time.perf_counter()
        sess.run(product.op)
        best = min(best, time.perf_counter() - start)
  return 2.0 * size ** 3 / best


def main(argv=None):
  """Command line: prints the model FLOPs per sequence of a configuration; returns 0."""
  parser = argparse.ArgumentParser(
      prog="python bench/flops.py",
      description="Model FLOPs per sequence of BERT pretraining (forward + backward), the figure "
                  "MFU divides.")
  parser.add_argument("--config", default="base",
                      help="bert_configs/<name>.json by name (tiny, small, base, ...) or a path")
  parser.add_argument("--seq", type=int, default=128, help="sequence length T")
  parser.add_argument("--predictions", type=int, default=20, help="max_predictions_per_seq P")
  args = parser.parse_args(argv)
  with open(config_file(args.config)) as f:
    config = argparse.Namespace(**json.load(f))
  total = config_flops_per_sequence(config, args.seq, args.predictions)
  print("%s: %.3f GFLOP per sequence (T=%d, P=%d, V=%d, encoder parameters %d)"
        % (args.config, total / 1e9, args.seq, args.predictions, config.vocab_size,
           encoder_params(config.hidden_size, config.num_hidden_layers,
                          config.intermediate_size)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
