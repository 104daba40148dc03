"""Worker for the distributed training-step tests (tests/test_optimization_horovod.py).

  python optimizer_worker.py --out DIR [--horovod] [--tf1]

Without --horovod: one process trains on the whole global batch (of --global_workers workers) of
every micro-step and writes DIR/single.npz. With --horovod (under horovodrun/mpirun): each of the W workers trains on its
1/W slice of the same global batches and writes DIR/rank<r>.npz. Both run every configuration of
CONFIGS; with --horovod also the inf-on-one-worker scenario and the fp16 allreduce check. With
--tf1 the process runs under TF1 behaviour (ref variables, v1 control flow).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import optimization  # noqa: E402
from tests import helpers  # noqa: E402

_tf1 = tf.compat.v1
WORKER_BATCH = 3
NUM_UPDATES = 3
# (name, num_accumulation_steps, allreduce_post_accumulation, optimizer_type, loss multiplier,
# bf16). Adam-type directions are invariant to the gradient's scale while |g| >> epsilon; with the
# loss multiplied by 1e-7 the gradients fall below epsilon (1e-6), the update becomes ~g / epsilon,
# and a wrong averaging factor (sum instead of mean, a missing 1/N) changes the weights. The bf16
# ones compute the model in bf16 (fp32 variables, fp32 gradients allreduced).
CONFIGS = [
    ("n1_per_step", 1, False, "lamb", 1.0, False),
    ("n1_post", 1, True, "adam", 1.0, False),
    ("n2_per_step", 2, False, "lamb", 1.0, False),
    ("n2_post", 2, True, "lamb", 1.0, False),
    ("n2_per_step_tiny", 2, False, "adam", 1e-7, False),
    ("n2_post_tiny", 2, True, "lamb", 1e-7, False),
    ("bf16_n1_per_step", 1, False, "lamb", 1.0, True),
    ("bf16_n2_post_tiny", 2, True, "lamb", 1e-7, True),
]


def global_batches(num_workers, num_accumulation_steps):
  """The global micro-batches, the same in every process: [update][micro-step] -> rows."""
  rng = np.random.RandomState(42)
  rows = WORKER_BATCH * num_workers
  return [[helpers.softmax_regression_data(rng, rows) for _ in range(num_accumulation_steps)]
          for _ in range(NUM_UPDATES)]


def build(hvd, num_accumulation_steps, post, optimizer_type, manual_fp16=False,
          loss_multiplier=1.0, bf16=False):
  ids = _tf1.placeholder(tf.int32, [None])
  x = _tf1.placeholder(tf.float32, [None, 5])
  y = _tf1.placeholder(tf.int32, [None])
  loss = helpers.softmax_regression_loss(
      {"ids": ids, "x": x}, y, compute_type=tf.bfloat16 if bf16 else tf.float32) * loss_multiplier
  train_op = optimization.create_optimizer(
      loss, 0.05, num_train_steps=20, num_warmup_steps=0, hvd=hvd,
      num_accumulation_steps=num_accumulation_steps, optimizer_type=optimizer_type,
      allreduce_post_accumulation=post, manual_fp16=manual_fp16, init_loss_scale=2.0 ** 10,
      bf16=bf16)
  return (ids, x, y), train_op


def node_dtypes(graph, op_type):
  """The sorted dtype names (attribute T) of the `op_type` nodes of `graph`, including those inside
  its functions (the branches of a v2 cond)."""
  graph_def = graph.as_graph_def()
  nodes = list(graph_def.node)
  for function in graph_def.library.function:
    nodes.extend(function.node_def)
  return np.array(sorted({tf.as_dtype(node.attr["T"].type).name for node in nodes
                          if node.op == op_type}))


def weights(sess):
  return {v.op.name: sess.run(v) for v in _tf1.trainable_variables()}


def run_configs(hvd, rank, size, results):
  """Trains every configuration; `size` workers share each global batch (1 process: all rows)."""
  for name, n, post, optimizer_type, loss_multiplier, bf16 in CONFIGS:
    with tf.Graph().as_default() as graph:
      (ids, x, y), train_op = build(hvd, n, post, optimizer_type, loss_multiplier=loss_multiplier,
                                    bf16=bf16)
      results["%s/allreduce_dtypes" % name] = node_dtypes(graph, "HorovodAllreduce")
      results["%s/matmul_dtypes" % name] = node_dtypes(graph, "MatMul")
      hooks_free_sync = hvd.broadcast_global_variables(0) if hvd else tf.no_op()
      with _tf1.Session() as sess:
        sess.run(_tf1.global_variables_initializer())
        sess.run(hooks_free_sync)
        for update in global_batches(size, n):
          for micro in update:
            rows = slice(rank * WORKER_BATCH, (rank + 1) * WORKER_BATCH) if hvd else slice(None)
            sess.run(train_op, {ids: micro["ids"][rows], x: micro["x"][rows],
                                y: micro["y"][rows]})
        for var_name, value in weights(sess).items():
          results["%s/%s" % (name, var_name)] = value
        results["%s/global_step" % name] = sess.run(_tf1.train.get_global_step())
        results["%s/ref_variables" % name] = np.array(
            [optimization.is_ref_variable(v) for v in _tf1.trainable_variables()])


def run_inf_on_one_worker(hvd, rank, results):
  """fp16 path: at the second update only rank 1 sees an inf input."""
  for post in (False, True):
    tag = "inf_post" if post else "inf_per_step"
    with tf.Graph().as_default() as graph:
      (ids, x, y), train_op = build(hvd, 1, post, "lamb", manual_fp16=True)
      allreduce_types = sorted({op.get_attr("T").name for op in graph.get_operations()
                                if op.type == "HorovodAllreduce"})
      results[tag + "/allreduce_dtypes"] = np.array(allreduce_types)
      scale = helpers.variable("current_loss_scale")
      step = _tf1.train.get_global_step()
      with _tf1.Session() as sess:
        sess.run(_tf1.global_variables_initializer())
        sess.run(hvd.broadcast_global_variables(0))
        data = global_batches(2, 1)
        history = []
        for update_index, update in enumerate(data):
          micro = update[0]
          rows = slice(rank * WORKER_BATCH, (rank + 1) * WORKER_BATCH)
          feed_x = micro["x"][rows].copy()
          if update_index == 1 and rank == 1:
            feed_x[0, 0] = np.inf
          before = weights(sess)
          sess.run(train_op, {ids: micro["ids"][rows], x: feed_x, y: micro["y"][rows]})
          after = weights(sess)
          changed = any(not np.array_equal(before[k], after[k]) for k in before)
          history.append((float(changed), float(sess.run(step)), float(sess.run(scale))))
          assert all(np.all(np.isfinite(v)) for v in after.values())
        results[tag + "/history"] = np.array(history)
        for var_name, value in weights(sess).items():
          results["%s/%s" % (tag, var_name)] = value


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", required=True)
  parser.add_argument("--horovod", action="store_true")
  parser.add_argument("--global_workers", type=int, default=2,
                      help="without --horovod: the worker count whose global batch to train on")
  parser.add_argument("--tf1", action="store_true",
                      help="TF1 behaviour (disable_v2_behavior): ref variables, v1 control flow")
  args = parser.parse_args()
  if args.tf1:
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  hvd = None
  rank, size = 0, args.global_workers
  if args.horovod:
    import horovod.tensorflow as hvd  # pylint: disable=g-import-not-at-top
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
  results = {"size": np.array(size)}
  run_configs(hvd, rank, size, results)
  if hvd is not None:
    run_inf_on_one_worker(hvd, rank, results)
  name = "rank%d.npz" % rank if hvd else "single.npz"
  np.savez(os.path.join(args.out, name), **results)
  print("worker %d done" % rank)


if __name__ == "__main__":
  main()
