"""scripts/supervise.py on the 2-host cluster: host B dies mid-run, the job finishes on host A.

The supervisor runs `horovodrun --gloo -np 2 -H hostA:1,hostB:1` (batch 2 per worker, no
accumulation: global batch 4, learning rate 1e-3 per worker, 2e-3 for the job) on hostA with
`--min_workers=1`. After the job's first checkpoint host B dies (every process on it killed, then
its network interface down, so it no longer answers ssh). The supervisor sees the job fail,
probes the hosts, drops hostB and relaunches on hostA alone with `-np 1`,
`--num_accumulation_steps 2` and `--learning_rate 0.002`: global batch 4 and the job's rate 2e-3
unchanged. The run finishes at num_train_steps.

The loss curve is compared with a reference run on one host with the doubled accumulation from the
same initial checkpoint (batch 2 x 2 micro-steps, learning rate 2e-3). Every record of the data is
the same record, so every batch either job draws holds the same examples whatever its sharding
and shuffling: the two trajectories differ only by floating-point rounding (the mean of two
workers' gradients through Horovod's allreduce against the mean of two accumulated micro-batches,
summed in another order). The tolerance, 1e-4 relative on each update's loss, is that rounding
(~1e-7 per operation in fp32) grown over the few updates, with a wide margin (measured on this
machine: identical float32 losses). The losses fall by far more than the tolerance over the run
(checked), so a wrong learning rate after the relaunch (the per-worker rate not doubled: the
job's rate halved) would leave it.
"""

import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import helpers
from tests.cluster import cluster as cluster_lib
from tests.cluster import test_multinode as multinode
from tests.test_run_pretraining import CONFIG
from tests.test_run_pretraining import PRED
from tests.test_run_pretraining import SEQ
from tests.test_run_pretraining import _released_style_checkpoint
from tests.test_run_pretraining import read_dllog

pytestmark = pytest.mark.e2e

SUPERVISE = os.path.join(multinode.REPO_ROOT, "scripts", "supervise.py")
HOST_A, HOST_B = cluster_lib.HOSTS
BATCH = 2
LEARNING_RATE = 1e-3  # per worker
UPDATES = 30
SAVE_STEPS = 2
# Relative tolerance on each update's loss against the reference (module docstring).
RTOL = 1e-4


@pytest.fixture(scope="module")
def same_record_data(tmp_path_factory):
  """2 files of 16 copies of one record; the config and initial checkpoint of test_multinode."""
  root = tmp_path_factory.mktemp("supervise_cluster")
  config_path = root / "bert_config.json"
  config_path.write_text(json.dumps(dict(CONFIG, num_hidden_layers=1, hidden_act="gelu",
                                         hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0,
                                         initializer_range=0.02)))
  record = helpers.random_batch(np.random.RandomState(21), 1, SEQ, CONFIG["vocab_size"], PRED)
  train_dir = root / "train"
  train_dir.mkdir()
  for index in range(2):
    helpers.write_batch_records(train_dir / ("part-%d.tfrecord" % index),
                                {k: np.repeat(v, 16, axis=0) for k, v in record.items()})
  init_dir = root / "init"
  init_dir.mkdir()
  _released_style_checkpoint(init_dir, seed=12)
  return {"root": root, "config": str(config_path), "train_dir": str(train_dir),
          "init_checkpoint": str(init_dir / "bert_model.ckpt")}


def flags(data, output_dir, **overrides):
  values = dict(init_checkpoint=data["init_checkpoint"], train_batch_size=BATCH,
                learning_rate=LEARNING_RATE, num_train_steps=UPDATES,
                save_checkpoints_steps=SAVE_STEPS)
  values.update(overrides)
  return multinode.job_flags(data, output_dir, **values)


def two_host_launch():
  return [multinode.HOROVODRUN, "-np", "2", "-H", "%s:1,%s:1" % (HOST_A, HOST_B), "--gloo",
          "--disable-cache", "--network-interface", cluster_lib.INTERFACE]


def losses_of(lines):
  """[(step, total_loss)] of the update lines among run-log lines, in the order written."""
  return [(l["step"], l["data"]["total_loss"]) for l in lines
          if isinstance(l["step"], int) and "total_loss" in l["data"]]


def losses(log_path):
  return losses_of(read_dllog(log_path))


@pytest.fixture(scope="module")
def lost_host_run(cluster, same_record_data):
  data = same_record_data
  out = data["root"] / "out"
  output = data["root"] / "supervise.out"
  cmd = ([sys.executable, SUPERVISE, "--min_workers=1", "--max_restarts=2", "--backoff_secs=1",
          "--"] + two_host_launch() + [sys.executable, multinode.SCRIPT]
         + flags(data, str(out), num_accumulation_steps=1))
  with open(output, "w") as sink:
    proc = cluster.popen(HOST_A, cmd, cwd=multinode.REPO_ROOT, env=multinode.job_env(),
                         stdout=sink, stderr=subprocess.STDOUT)
  try:
    # pylint: disable=protected-access
    step = multinode._wait_for_checkpoint(str(out), proc, timeout=400)
    killed_at = time.time()
    assert cluster.kill_host(HOST_B)
    with cluster.interface_down(HOST_B):
      code, _ = multinode._wait_for_end(proc, 600)  # pylint: disable=protected-access
  finally:
    helpers.kill_session(proc, timeout=30)
    for host in cluster_lib.HOSTS:
      cluster.kill_host(host)
  reference = data["root"] / "reference"
  cluster.run(HOST_A, [sys.executable, multinode.SCRIPT]
              + flags(data, str(reference), horovod=None, num_accumulation_steps=2,
                      learning_rate=2 * LEARNING_RATE),
              timeout=600, cwd=multinode.REPO_ROOT, env=multinode.job_env())
  return {"code": code, "output": output.read_text(), "out": out, "reference": reference,
          "killed_step": step, "seconds": time.time() - killed_at}


def test_the_job_continues_on_host_a_with_the_same_global_batch(lost_host_run):
  run = lost_host_run
  text = run["output"]
  assert run["code"] == 0, text[-6000:]
  assert ("continuing on 1 workers (host hostB lost): --num_accumulation_steps 1 -> 2, global "
          "batch 4 unchanged; --learning_rate 0.001 -> 0.002 per worker, the job's 0.002 x 1 = "
          "0.002 unchanged") in text
  launches = re.findall(r"supervise\.py: launch \d+: (.*)", text)
  assert len(launches) == 2, launches
  assert " -np 1 -H hostA:1 --gloo --disable-cache /" in launches[1]
  assert "--network-interface dropped" in text
  assert "--num_accumulation_steps=2" in launches[1] and "--learning_rate=0.002" in launches[1]
  # The relaunched script's own account of its settings (utils/runlog/start_line.py).
  assert "; 2 workers; global batch 4 = 2 x 1 accumulation x 2 workers; " in text
  assert "; 1 worker; global batch 4 = 2 x 2 accumulation x 1 worker; " in text
  assert "; learning rate 0.002 = 0.001 per worker x 2 workers; " in text
  assert "; learning rate 0.002 = 0.002 per worker x 1 worker; " in text
  assert "supervise.py: the job finished" in text
  assert multinode.newest_step(run["out"]) == UPDATES


def test_the_loss_curve_continues_within_tolerance_of_the_reference(lost_host_run):
  run = lost_host_run
  assert run["code"] == 0, run["output"][-6000:]
  reference = dict(losses(run["reference"] / "bert_dllog.json"))
  assert sorted(reference) == list(range(1, UPDATES + 1))
  lines = read_dllog(run["out"] / "bert_dllog.json")
  restarts = [i for i, l in enumerate(lines) if l["step"] == "RESTART"]
  assert len(restarts) == 1, lines  # one relaunch
  resumed_from = lines[restarts[0]]["data"]["resumed_from_step"]
  before, after = losses_of(lines[:restarts[0]]), losses_of(lines[restarts[0]:])
  assert resumed_from >= run["killed_step"] and before[0][0] == 1
  # The relaunch goes on from its checkpoint to the end, every update logged.
  assert [s for s, _ in after] == list(range(resumed_from + 1, UPDATES + 1))
  for step, loss in before + after:
    np.testing.assert_allclose(loss, reference[step], rtol=RTOL, err_msg="update %d" % step)
  # The losses move over the run: a job's rate half as large would leave the tolerance.
  assert abs(reference[UPDATES] - reference[1]) > 100 * RTOL * abs(reference[1])
