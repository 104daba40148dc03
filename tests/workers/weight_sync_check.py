"""Worker for the weight-sync test: runs WeightSyncHook in a MonitoredSession, records weights.

Usage: weight_sync_check.py CONFIG_JSON OUT_DIR

CONFIG_JSON holds scenarios (and "tf1": true to run under TF1 behaviour, with ref variables); each
gives, per rank, the starting values and the per-iteration
increment of every trainable variable, the starting value of one non-trainable variable, the
number of accumulation steps and the number of iterations. There is no broadcast: the workers start
from different weights. The train op adds each rank's increment. A recording hook placed after the
weight-sync hook reads the variables just before each train op (after any sync) and just after it.
Writes OUT_DIR/rank_<rank>.json.
"""

import json
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from utils.training import hooks  # noqa: E402
from utils.training import weight_sync  # noqa: E402
from utils.runtime import hvd_utils  # noqa: E402

_tf1 = tf.compat.v1


class RecordingHook(tf.estimator.SessionRunHook):
  """Reads the variables before (after earlier hooks' before_run) and after every train op, and
  `final_variable` at the end."""

  def __init__(self, variables, final_variable):
    self._variables = variables
    self._final_variable = final_variable
    self.before = []
    self.after = []
    self.final = None

  def begin(self):
    self._reads = {name: tf.identity(var) for name, var in self._variables.items()}
    self._final_read = tf.identity(self._final_variable)

  def before_run(self, run_context):
    self.before.append(_to_lists(run_context.session.run(self._reads)))

  def after_run(self, run_context, run_values):
    self.after.append(_to_lists(run_context.session.run(self._reads)))

  def end(self, session):
    self.final = float(session.run(self._final_read))


def _to_lists(values):
  return {name: np.asarray(value).tolist() for name, value in values.items()}


def run_scenario(scenario, rank):
  """Runs one scenario in a fresh graph; returns what this rank recorded."""
  with tf.Graph().as_default():
    variables = {}
    train_ops = []
    for name, per_rank in sorted(scenario["initial"].items()):
      variables[name] = _tf1.get_variable(name, initializer=np.asarray(per_rank[rank], np.float32))
      train_ops.append(variables[name].assign_add(
          np.asarray(scenario["increment"][name][rank], np.float32)))
    local_only = _tf1.get_variable(
        "local_only", initializer=np.float32(scenario["local_only"][rank]), trainable=False)
    train_ops.append(local_only.assign_add(1.0))
    train_op = tf.group(*train_ops)
    updates = hooks.UpdateSource(scenario["num_accumulation_steps"])
    sync_hook = weight_sync.WeightSyncHook(updates)
    recorder = RecordingHook(variables, local_only)
    with _tf1.train.MonitoredSession(hooks=[updates, sync_hook, recorder]) as session:
      for _ in range(scenario["iterations"]):
        session.run(train_op)
  return {"before": recorder.before, "after": recorder.after, "sync_count": sync_hook.sync_count,
          "local_only": recorder.final,
          "ref_variables": [var.dtype != var.dtype.base_dtype for var in variables.values()]}


def main(argv):
  with open(argv[1]) as f:
    config = json.load(f)
  if config.get("tf1"):
    tf.compat.v1.disable_v2_behavior()  # ref variables, v1 control flow
  else:
    tf.compat.v1.disable_eager_execution()
  hvd = hvd_utils.hvd_init()
  rank = hvd.rank()
  results = [run_scenario(scenario, rank) for scenario in config["scenarios"]]
  with open(os.path.join(argv[2], "rank_%d.json" % rank), "w") as f:
    json.dump({"rank": rank, "size": hvd.size(), "scenarios": results}, f)
  print("rank %d: weight sync worker done" % rank)
  sys.stdout.flush()


if __name__ == "__main__":
  main(sys.argv)
