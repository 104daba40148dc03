"""Worker for the session-config test: two HorovodAllreduce ops under build_session_config.

Usage: session_config_check.py INPUTS_JSON OUT_DIR

INPUTS_JSON gives, per rank, the values of two variables `a` and `b`. The graph allreduces 2a
(Average) and 3b (Sum) and feeds both results into further ops, as gradients are in training. It
runs with the default session config (partition graphs recorded), then with the scoped allocator
turned on (the outcome, value or error, recorded). Writes OUT_DIR/rank_<rank>.json.
"""

import json
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from utils.runtime import hvd_utils  # noqa: E402
from utils.runtime import session_config  # noqa: E402

_tf1 = tf.compat.v1


def build_graph(hvd, inputs):
  """Two allreduces whose outputs are used by further ops; returns the fetches."""
  a = _tf1.get_variable("a", initializer=np.asarray(inputs["a"], np.float32))
  b = _tf1.get_variable("b", initializer=np.asarray(inputs["b"], np.float32))
  averaged = hvd.allreduce(a * 2.0, op=hvd.Average)
  summed = hvd.allreduce(b * 3.0, op=hvd.Sum)
  return {"averaged_plus_1": averaged + 1.0, "summed_times_2": summed * 2.0}


def run(config, hvd, inputs, record_graph):
  """Runs the graph once with `config`; returns values (and op types) or the error message."""
  with tf.Graph().as_default():
    fetches = build_graph(hvd, inputs)
    init = _tf1.global_variables_initializer()
    options = _tf1.RunOptions(output_partition_graphs=record_graph)
    metadata = _tf1.RunMetadata()
    with _tf1.Session(config=config) as session:
      session.run(init)
      try:
        values = session.run(fetches, options=options, run_metadata=metadata)
      except tf.errors.OpError as e:
        return {"error": e.message}
  result = {name: value.tolist() for name, value in values.items()}
  if record_graph:
    result["op_types"] = [node.op for g in metadata.partition_graphs for node in g.node]
  return result


def main(argv):
  tf.compat.v1.disable_eager_execution()
  hvd = hvd_utils.hvd_init()
  rank = hvd.rank()
  with open(argv[1]) as f:
    inputs = json.load(f)[str(rank)]
  default_config = session_config.build_session_config(
      use_horovod=True, local_rank=hvd_utils.comm_local_rank(), environ={})
  scoped_config = session_config.build_session_config(
      use_horovod=True, local_rank=hvd_utils.comm_local_rank(), enable_scoped_allocator=True,
      environ={})
  result = {
      "rank": rank,
      "size": hvd.size(),
      "default": run(default_config, hvd, inputs, record_graph=True),
      "scoped_allocator": run(scoped_config, hvd, inputs, record_graph=False),
  }
  with open(os.path.join(argv[2], "rank_%d.json" % rank), "w") as f:
    json.dump(result, f)
  print("rank %d: session config worker done" % rank)
  sys.stdout.flush()


if __name__ == "__main__":
  main(sys.argv)
