"""Micro-benchmarks behind the levers of docs/PERFORMANCE.md.

  PY=$(make -s python-path | tail -n1)
  $PY bench/micro_bench.py update --config base --optimizer lamb   # optimizer path alone
  $PY bench/micro_bench.py layer_norm                               # layer-norm formulations
  $PY bench/micro_bench.py matmul --batch 8 [--dtype bfloat16]      # BERT-base matmul shapes
  $PY bench/micro_bench.py mlm_loss --batch 32                      # MLM loss formulations
  $PY bench/micro_bench.py bf16_ops                                 # the ops --bf16 keeps in fp32
  $PY bench/micro_bench.py bf16_blocks                              # fused_blocks.py's kernels

`update` builds `optimization.create_optimizer` over variables with the shapes of the model's
trainable variables and a loss whose gradients are stored tensors (so only the gradient path and
the optimizer run), and reports the time per update. `layer_norm` times the forward and backward
pass of three layer-norm formulations on a [batch * 128, 768] input and their deviations.
`matmul` reports GFLOP/s of the encoder's and the MLM head's matmul shapes, forward and backward,
in `--dtype`; the input gradients (dX) of the widening layers also as the `BatchMatMulV2` with
`adj_y` that `modeling._widening_dense` uses.
`mlm_loss` times the forward and backward pass of MLM loss formulations over [batch * 20, 30522]
logits (the one `run_pretraining.softmax_cross_entropy` uses and the alternatives). `bf16_ops`
times the ops --bf16 keeps in fp32 (layer norm, GELU, softmax, dropout, the pooler's tanh) in
fp32, in bf16 and as an fp32 island between bf16 tensors, and GELU as --bf16 runs it (compiled).
`bf16_blocks` times the two blocks of `fused_blocks.py` op by op and compiled.
"""

import argparse
import os
import sys
import time

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _best_and_median(np, session, fetch, runs):
  session.run(fetch)
  times = []
  for _ in range(runs):
    start = time.perf_counter()
    session.run(fetch)
    times.append(time.perf_counter() - start)
  return min(times), float(np.median(times))


def bench_update(tf, np, args):
  """Time of the gradient path + optimizer update alone, on the model's variable shapes."""
  import modeling  # pylint: disable=g-import-not-at-top
  import optimization  # pylint: disable=g-import-not-at-top
  from utils.model import pretraining  # pylint: disable=g-import-not-at-top
  from bench import flops  # pylint: disable=g-import-not-at-top
  from utils.runtime import session_config  # pylint: disable=g-import-not-at-top
  tf1 = tf.compat.v1
  config = modeling.BertConfig.from_json_file(flops.config_file(args.config))
  with tf.Graph().as_default():
    features = {k: tf1.placeholder(tf.int32, [2, 8]) for k in
                ("input_ids", "input_mask", "segment_ids")}
    features.update({k: tf1.placeholder(tf.int32, [2, 2]) for k in
                     ("masked_lm_positions", "masked_lm_ids")})
    features["masked_lm_weights"] = tf1.placeholder(tf.float32, [2, 2])
    features["next_sentence_labels"] = tf1.placeholder(tf.int32, [2, 1])
    pretraining.build_pretraining_model(config, features, is_training=True)
    shapes = [(v.op.name, v.shape.as_list()) for v in tf1.trainable_variables()]
  graph = tf.Graph()
  with graph.as_default():
    build_start = time.perf_counter()
    loss = 0.0
    for name, shape in shapes:
      var = tf1.get_variable(name, shape, initializer=tf1.random_normal_initializer(stddev=0.02))
      # d loss / d var = stored: the gradient is a read, nothing else of a model runs.
      stored = tf1.get_variable(name + "/stored_gradient", shape, trainable=False,
                                initializer=tf1.random_normal_initializer(stddev=1e-3))
      loss += tf.reduce_sum(var * tf.stop_gradient(stored))
    train_op = optimization.create_optimizer(loss, 1e-3, 1000, 0, optimizer_type=args.optimizer)
    init = tf1.global_variables_initializer()
    build_s = time.perf_counter() - build_start
  with tf1.Session(graph=graph, config=session_config.build_session_config()) as sess:
    sess.run(init)
    start = time.perf_counter()
    sess.run(train_op)
    first_s = time.perf_counter() - start
    best, median = _best_and_median(np, sess, train_op, args.runs)
  num_params = sum(int(np.prod(shape)) for _, shape in shapes)
  print("update (%s, %s: %d variables, %.1fM parameters): median %.1f ms, best %.1f ms; "
        "graph build %.1f s, first run %.1f s"
        % (args.optimizer, args.config, len(shapes), num_params / 1e6, 1e3 * median, 1e3 * best,
           build_s, first_s))


def bench_layer_norm(tf, np, args):
  """Forward and forward+backward time of layer-norm formulations; max deviation."""
  tf1 = tf.compat.v1
  rows, hidden = args.batch * 128, 768

  def moments_and_batch_normalization(x, gamma, beta):
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return tf.nn.batch_normalization(x, mean, variance, offset=beta, scale=gamma,
                                     variance_epsilon=1e-12)

  def centred_once(x, gamma, beta):
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    centered = x - mean
    variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
    return centered * (tf.math.rsqrt(variance + 1e-12) * gamma) + beta

  def fused_batch_norm_kernel(x, gamma, beta):
    rows_as_channels = tf.reshape(x, [1, rows, hidden, 1])
    normalized, _, _ = tf1.nn.fused_batch_norm(
        rows_as_channels, tf.ones([rows]), tf.zeros([rows]), epsilon=1e-12,
        data_format="NCHW", is_training=True)
    return tf.reshape(normalized, [rows, hidden]) * gamma + beta

  rng = np.random.RandomState(0)
  x_value = (rng.normal(size=(rows, hidden)) * 2 + 0.5).astype(np.float32)
  dy_value = rng.normal(size=(rows, hidden)).astype(np.float32)
  gamma_value = (1 + 0.1 * rng.normal(size=hidden)).astype(np.float32)
  beta_value = (0.1 * rng.normal(size=hidden)).astype(np.float32)
  results = {}
  for fn in (moments_and_batch_normalization, centred_once, fused_batch_norm_kernel):
    with tf.Graph().as_default():
      x = tf1.get_variable("x", initializer=x_value)
      gamma = tf1.get_variable("gamma", initializer=gamma_value)
      beta = tf1.get_variable("beta", initializer=beta_value)
      y = fn(x, gamma, beta)
      grads = tf.gradients(y, [x, gamma, beta], grad_ys=tf.constant(dy_value))
      with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        forward, _ = _best_and_median(np, sess, y.op, args.runs)
        both, _ = _best_and_median(np, sess, [y.op] + [g.op for g in grads], args.runs)
        results[fn.__name__] = sess.run([y] + grads)
    deviation = max(float(np.abs(a - b).max()) for a, b in
                    zip(results[fn.__name__], results["moments_and_batch_normalization"]))
    print("%-32s forward %.3f ms, forward+backward %.3f ms (best of %d); max deviation from "
          "the first %.2g" % (fn.__name__, 1e3 * forward, 1e3 * both, args.runs, deviation))


def bench_matmul(tf, np, args):
  """GFLOP/s of BERT-base matmul shapes (M, K, N, transpose_a, transpose_b) in `args.dtype`;
  "as BMM" rows: the same product as `BatchMatMulV2(a, b, adj_y=True)`."""
  tf1 = tf.compat.v1
  rows = args.batch * 128
  predictions = args.batch * 20
  shapes = [
      (rows, 768, 768, False, False, "attention output dense"),
      (rows, 768, 2304, False, False, "fused QKV"),
      (rows, 768, 3072, False, False, "intermediate"),
      (rows, 3072, 768, False, False, "output"),
      (768, rows, 768, True, False, "dW 768x768 (x^T dy)"),
      (768, rows, 2304, True, False, "dW fused QKV"),
      (768, rows, 3072, True, False, "dW intermediate"),
      (3072, rows, 768, True, False, "dW output"),
      (rows, 768, 768, False, True, "dX 768x768 (dy W^T)"),
      (rows, 2304, 768, False, True, "dX fused QKV"),
      (rows, 3072, 768, False, True, "dX intermediate"),
      (rows, 768, 3072, False, True, "dX output"),
      (rows, 2304, 768, False, "bmm", "dX fused QKV as BMM"),
      (rows, 3072, 768, False, "bmm", "dX intermediate as BMM"),
      (predictions, 768, 30522, False, True, "MLM logits"),
      (predictions, 30522, 768, False, False, "MLM dX"),
      (30522, predictions, 768, True, False, "MLM dW (embedding table)"),
  ]
  with tf.Graph().as_default():
    ops = []
    for i, (m, k, n, transpose_a, transpose_b, label) in enumerate(shapes):
      a = tf1.get_variable("a%d" % i, [k, m] if transpose_a else [m, k], dtype=args.dtype)
      b = tf1.get_variable("b%d" % i, [n, k] if transpose_b else [k, n], dtype=args.dtype)
      if transpose_b == "bmm":
        product = tf.raw_ops.BatchMatMulV2(x=a, y=b, adj_y=True)
      else:
        product = tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
      ops.append((product.op, 2.0 * m * k * n, label, (m, k, n)))
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      for op, flops, label, mkn in ops:
        best, _ = _best_and_median(np, sess, op, args.runs)
        print("%-26s M,K,N=%-18s %7.2f ms %6.1f GFLOP/s" % (label, mkn, 1e3 * best,
                                                          flops / best / 1e9))


def bench_mlm_loss(tf, np, args):
  """Forward + backward time of per-prediction cross-entropy formulations over the vocabulary."""
  from utils.model import pretraining  # pylint: disable=g-import-not-at-top
  tf1 = tf.compat.v1
  rows, vocab = args.batch * 20, 30522
  rng = np.random.RandomState(0)

  def one_hot_log_softmax(logits, labels):
    return -tf.reduce_sum(tf.nn.log_softmax(logits) * tf.one_hot(labels, vocab), axis=-1)

  def sparse_fused_kernel(logits, labels):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

  def log_softmax_gather(logits, labels):
    return -tf.gather(tf.nn.log_softmax(logits), labels[:, None], batch_dims=1)[:, 0]

  formulations = (one_hot_log_softmax, sparse_fused_kernel, log_softmax_gather,
                  pretraining.softmax_cross_entropy)
  for fn in formulations:
    with tf.Graph().as_default():
      logits_var = tf1.get_variable("logits", initializer=tf.constant(
          (rng.normal(size=(rows, vocab)) * 3).astype(np.float32)))
      labels = tf.constant(rng.randint(0, vocab, rows).astype(np.int32))
      logits = logits_var * 1.0  # a computed tensor, as in the model
      loss = tf.reduce_sum(fn(logits, labels))
      grad = tf.gradients(loss, logits)[0]
      fetch = [loss, tf.reduce_sum(grad)]  # fetched: a tf.group of tensors would be pruned
      with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        best, median = _best_and_median(np, sess, fetch, args.runs)
    print("%-40s forward+backward %.2f ms (best), %.2f ms (median) over [%d, %d]"
          % (fn.__name__, 1e3 * best, 1e3 * median, rows, vocab))


def bench_bf16_ops(tf, np, args):
  """The ops --bf16 keeps in fp32, timed three ways at BERT-base shapes, forward + backward:
  all fp32; all bf16; and the fp32 island inside the bf16 graph (bf16 in, cast to fp32, the op,
  cast back, as the fp16 graph does). The island's cost over bf16 is what running the op in
  bf16 would save; its max deviation from fp32 is bf16's input rounding alone. GELU also a
  fourth way, what --bf16 runs between its two bf16 products: `modeling.gelu_fused_in_fp32`, the
  island compiled by XLA into one kernel forward and one backward."""
  import modeling  # pylint: disable=g-import-not-at-top
  tf1 = tf.compat.v1
  rows, hidden, intermediate, heads, seq = args.batch * 128, 768, 3072, 12, 128

  cases = (("layer_norm", modeling.layer_norm, (rows, hidden)),
           ("gelu", modeling.gelu, (rows, intermediate)),
           ("softmax", tf.nn.softmax, (args.batch, heads, seq, seq)),
           ("dropout", lambda x: modeling.dropout(x, 0.1, seed=(1, 2)), (rows, intermediate)),
           ("tanh", tf.tanh, (args.batch, hidden)))
  rng = np.random.RandomState(0)
  for name, fn, shape in cases:
    x_value = rng.normal(size=shape).astype(np.float32)
    dy_value = rng.normal(size=shape).astype(np.float32)
    results, times = {}, {}
    ways = ("fp32", "bf16", "fp32 island") + (("compiled",) if name == "gelu" else ())
    for way in ways:
      with tf.Graph().as_default():
        with tf1.variable_scope("case", reuse=tf1.AUTO_REUSE):
          x32 = tf1.get_variable("x", initializer=x_value)
          dtype = tf.float32 if way == "fp32" else tf.bfloat16
          x = tf.cast(x32, dtype) * tf.cast(1.0, dtype)  # a computed input, as in the model
          if way == "fp32 island":
            y = tf.cast(fn(tf.cast(x, tf.float32)), tf.bfloat16)
          elif way == "compiled":
            y = modeling.gelu_fused_in_fp32(x)
          else:
            y = fn(x)
          dx = tf.gradients(y, x, grad_ys=tf.cast(tf.constant(dy_value), dtype))[0]
          fetch = [tf.reduce_sum(tf.cast(y, tf.float32)), tf.reduce_sum(tf.cast(dx, tf.float32))]
          with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            times[way], _ = _best_and_median(np, sess, fetch, args.runs)
            results[way] = sess.run(tf.cast(y, tf.float32))
    deviation = {w: float(np.abs(results[w] - results["fp32"]).max()) for w in results}
    print("%-10s %-22s fp32 %7.2f ms | bf16 %7.2f ms (max dev %.2g) | fp32 island %7.2f ms "
          "(max dev %.2g) | island - bf16 %+.2f ms" % (
              name, shape, 1e3 * times["fp32"], 1e3 * times["bf16"], deviation["bf16"],
              1e3 * times["fp32 island"], deviation["fp32 island"],
              1e3 * (times["fp32 island"] - times["bf16"])))
    if "compiled" in times:
      print("%-10s %-22s compiled fp32 island (modeling.gelu_fused_in_fp32) %7.2f ms "
            "(max dev %.2g)" % (name, shape, 1e3 * times["compiled"], deviation["compiled"]))


def bench_bf16_blocks(tf, np, args):
  """The blocks `fused_blocks.py` compiles, forward + backward at BERT-base shapes: op by op in fp32
  between bf16 tensors (what --bf16 ran before) against the compiled kernels, each with dropout
  0.1 drawn per run (training)."""
  import fused_blocks  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  tf1 = tf.compat.v1
  rows, hidden, heads, seq = args.batch * 128, 768, 12, 128
  rng = np.random.RandomState(0)

  def residual_ops(y, residual, mask):
    del mask
    return modeling.layer_norm(modeling.dropout(tf.cast(y, tf.float32), 0.1) + residual)

  def residual_compiled(y, residual, mask):
    del mask
    return fused_blocks.dropout_residual_layer_norm(y, residual, 0.1,
                                                    modeling.LAYER_NORM_EPSILON)

  def softmax_ops(scores, unused, mask):
    del unused
    logits = tf.cast(scores, tf.float32) * 0.125 + (1.0 - tf.expand_dims(mask, 1)) * -10000.0
    return tf.cast(modeling.dropout(tf.nn.softmax(logits), 0.1), tf.bfloat16)

  def softmax_compiled(scores, unused, mask):
    del unused
    return fused_blocks.masked_softmax_dropout(scores, mask, 0.125, modeling.ATTENTION_MASK_ADDER,
                                               0.1)

  cases = (("dropout + residual + layer norm", (rows, hidden), residual_ops, residual_compiled),
           ("scale + mask + softmax + dropout", (args.batch, heads, seq, seq), softmax_ops,
            softmax_compiled))
  for name, shape, by_ops, compiled in cases:
    times = {}
    for way, fn in (("op by op", by_ops), ("compiled", compiled)):
      with tf.Graph().as_default():
        x32 = tf1.get_variable("x", initializer=rng.normal(size=shape).astype(np.float32))
        x = tf.cast(x32, tf.bfloat16) * tf.cast(1.0, tf.bfloat16)  # a product's output
        residual = tf1.get_variable("r", initializer=rng.normal(size=shape).astype(np.float32))
        mask = tf.constant((rng.uniform(size=(args.batch, seq, seq)) > 0.1).astype(np.float32))
        y = fn(x, residual * 1.0, mask)
        grads = tf.gradients(y, [x], grad_ys=tf.ones_like(y))
        fetch = [tf.reduce_sum(tf.cast(y, tf.float32))] + [
            tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads]
        with tf1.Session() as sess:
          sess.run(tf1.global_variables_initializer())
          times[way] = _best_and_median(np, sess, fetch, args.runs)
    print("%-34s %-20s op by op %6.2f ms (median %6.2f) | compiled %6.2f ms (median %6.2f)" % (
        name, shape, 1e3 * times["op by op"][0], 1e3 * times["op by op"][1],
        1e3 * times["compiled"][0], 1e3 * times["compiled"][1]))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("what", choices=("update", "layer_norm", "matmul", "mlm_loss", "bf16_ops",
                                       "bf16_blocks"))
  parser.add_argument("--config", default="base")
  parser.add_argument("--optimizer", choices=("lamb", "adam"), default="lamb")
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--runs", type=int, default=10)
  parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                      help="matmul: the operands' dtype")
  args = parser.parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.compat.v1.disable_eager_execution()
  {"update": bench_update, "layer_norm": bench_layer_norm, "matmul": bench_matmul,
   "mlm_loss": bench_mlm_loss, "bf16_ops": bench_bf16_ops,
   "bf16_blocks": bench_bf16_blocks}[args.what](tf, np, args)


if __name__ == "__main__":
  main()
