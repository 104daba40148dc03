"""Worker launched on the 2-host cluster: reports where it runs and which records it reads.

  node_probe.py OUT_DIR NODE_LOCAL_DIR SEQ PRED DATA_DIR [DATA_DIR ...]

Writes OUT_DIR/rank_<rank>.json: host name, Horovod rank / size / local rank / local size, the
launchers' local-rank variables, the files every rank of this host wrote to NODE_LOCAL_DIR, and
for each DATA_DIR the record ids (input_ids[0]) of the first DRAWS records this rank's training input
pipeline (the project's, given the Horovod rank and size; shuffled, repeated) yields.
"""

import json
import os
import socket
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO_ROOT)

import tensorflow as tf  # noqa: E402

from utils.runtime import hvd_utils  # noqa: E402
from utils.data import input_pipeline  # noqa: E402
from utils.data import record_layout  # noqa: E402

# Records drawn per data directory: many passes over a rank's share, so every record of it shows.
DRAWS = 60


def main(out_dir, node_local_dir, seq, pred, data_dirs):
  hvd = hvd_utils.hvd_init()
  rank, size = hvd_utils.hvd_rank(), hvd_utils.hvd_size()
  with open(os.path.join(node_local_dir, "rank_%d" % rank), "w") as f:
    f.write(socket.gethostname())
  hvd.allreduce(tf.constant(1.0), op=hvd.Sum)  # every rank has written its file
  shares = {}
  for data_dir in data_dirs:
    files = input_pipeline.resolve_input_files(input_files_dir=data_dir)
    plan = input_pipeline.InputPlan(files, record_layout.unpacked(seq, pred), is_training=True,
                                    num_workers=size, worker_index=rank, deterministic=True)
    dataset = input_pipeline.input_fn_builder(plan, 1)({})
    shares[data_dir] = [int(batch["input_ids"][0, 0]) for batch in dataset.take(DRAWS)]
  report = {
      "host": socket.gethostname(), "rank": rank, "size": size,
      "local_rank": hvd_utils.comm_local_rank(), "local_size": hvd_utils.comm_local_size(),
      "HOROVOD_LOCAL_RANK": os.environ.get("HOROVOD_LOCAL_RANK"),
      "OMPI_COMM_WORLD_LOCAL_RANK": os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"),
      "node_local_files": sorted(os.listdir(node_local_dir)),
      "records": shares,
  }
  with open(os.path.join(out_dir, "rank_%d.json" % rank), "w") as f:
    json.dump(report, f)
  hvd.allreduce(tf.constant(1.0), op=hvd.Sum)  # nobody leaves before everyone has listed


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
