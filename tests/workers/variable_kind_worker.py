"""Worker for tests/test_ref_variables.py: the same training with ref or resource variables.

  python variable_kind_worker.py --out FILE.npz [--tf1]

Trains the softmax-regression model of tests/helpers.py with `create_optimizer` for every
configuration of CONFIGS (LAMB and Adam, 1 and 4 accumulation steps, fp32 and loss-scaled), from
the same start on the same batches, and saves the final weights and global step of each. With
--tf1 the process runs under the TF1 convention (`disable_v2_behavior`: ref variables, v1 control
flow); without it, graph mode with resource variables, as the rest of the tests.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

_tf1 = tf.compat.v1
BATCH = 6
NUM_UPDATES = 4
# (name, optimizer_type, num_accumulation_steps, manual_fp16). manual_fp16 turns on dynamic loss
# scaling (the model stays fp32): with the initial scale 2^62 the squares of the scaled gradients
# overflow the global norm, so the first updates are skipped and the scale halves until they fit;
# with an increment period of 2 the scale doubles again (and overflows again).
CONFIGS = [
    ("lamb_n1_fp32", "lamb", 1, False),
    ("lamb_n4_fp32", "lamb", 4, False),
    ("lamb_n1_scaled", "lamb", 1, True),
    ("lamb_n4_scaled", "lamb", 4, True),
    ("adam_n1_fp32", "adam", 1, False),
    ("adam_n4_fp32", "adam", 4, False),
    ("adam_n1_scaled", "adam", 1, True),
    ("adam_n4_scaled", "adam", 4, True),
]


def train(optimizer_type, num_accumulation_steps, manual_fp16):
  """Runs NUM_UPDATES updates (plus any skipped ones); returns {name: value} after training."""
  import optimization  # pylint: disable=g-import-not-at-top
  from tests import helpers  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(7)
  with tf.Graph().as_default():
    ids = _tf1.placeholder(tf.int32, [None])
    x = _tf1.placeholder(tf.float32, [None, 5])
    y = _tf1.placeholder(tf.int32, [None])
    loss = helpers.softmax_regression_loss({"ids": ids, "x": x}, y)
    train_op = optimization.create_optimizer(
        loss, 0.05, num_train_steps=20, num_warmup_steps=2, optimizer_type=optimizer_type,
        num_accumulation_steps=num_accumulation_steps, manual_fp16=manual_fp16,
        init_loss_scale=2.0 ** 62, loss_scale_increment_period=2)
    global_step = _tf1.train.get_global_step()
    tvars = _tf1.trainable_variables()
    results = {"ref_variables": np.array([optimization.is_ref_variable(v) for v in
                                          tvars + [global_step]])}
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      micro_steps = 0
      while sess.run(global_step) < NUM_UPDATES:
        batch = helpers.softmax_regression_data(rng, BATCH)
        sess.run(train_op, {ids: batch["ids"], x: batch["x"], y: batch["y"]})
        micro_steps += 1
        assert micro_steps < 100, "the training step does not advance"
      results["micro_steps"] = np.array(micro_steps)
      results["global_step"] = np.array(sess.run(global_step))
      for var in _tf1.global_variables():
        results[var.op.name] = sess.run(var)
  return results


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", required=True)
  parser.add_argument("--tf1", action="store_true")
  args = parser.parse_args()
  if args.tf1:
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  results = {}
  for name, optimizer_type, num_accumulation_steps, manual_fp16 in CONFIGS:
    for key, value in train(optimizer_type, num_accumulation_steps, manual_fp16).items():
      results["%s/%s" % (name, key)] = value
  np.savez(args.out, **results)


if __name__ == "__main__":
  main()
