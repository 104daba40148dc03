"""run_pretraining.py on the 2-host cluster: 2 hosts x 2 workers (4 ranks), launched from hostA.

- Gloo with `--network-interface`: 4 ranks with batch B end with the weights of one process with
  batch 4B (reference computed in-process), and only global rank 0 writes the log and checkpoints.
- MPI through scripts/run_pretraining_lamb.sh with `--node_local_output_dir`: each host's local
  rank 0 checkpoints phase 1 on its own disk, and phase 2 starts from it on both hosts.
- A host dies mid-run: the job ends on hostA, non-zero, naming the lost rank, within 60 s; a new
  launch resumes from the last checkpoint.

Tiny model, seq 32, 1 intra-op thread, few steps: 4 TF processes share the machine's cores.
"""

import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import modeling
import optimization
import run_pretraining
from tests import helpers
from tests.cluster import cluster as cluster_lib
from tests.test_run_pretraining import CONFIG
from tests.test_run_pretraining import PRED
from tests.test_run_pretraining import SEQ
from tests.test_run_pretraining import _released_style_checkpoint
from tests.test_run_pretraining import checkpoint_values
from tests.test_run_pretraining import read_dllog

_tf1 = tf.compat.v1
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO_ROOT, "run_pretraining.py")
LAUNCHER = os.path.join(REPO_ROOT, "scripts", "run_pretraining_lamb.sh")
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
HOST_A, HOST_B = cluster_lib.HOSTS
HOST_LIST = "%s:2,%s:2" % (HOST_A, HOST_B)
NUM_RANKS = 4
BATCH = 2            # per rank
LEARNING_RATE = 1e-3  # per rank; the job multiplies it by the 4 ranks
TRAIN_STEPS = 3
# Files written only by a worker that saves checkpoints or summaries.
CHECKPOINT_FILES = ("model.ckpt", "checkpoint", "events.", "graph.pbtxt")


def horovodrun(*extra):
  return [HOROVODRUN, "-np", str(NUM_RANKS), "-H", HOST_LIST, "--gloo", "--disable-cache"] + list(
      extra)


def job_env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """4 files, file r holding 8 copies of record r: rank r (shard by file) only ever sees record r.

  Every record has the same number of real predictions, so the mean of the 4 ranks' losses is the
  loss of one batch holding all 4 records equally often.
  """
  root = tmp_path_factory.mktemp("multinode")
  config_path = root / "bert_config.json"
  # No dropout: the 4 ranks' update is compared with one process's (a deterministic run keeps
  # dropout, with masks keyed per rank, which one process cannot reproduce).
  config_path.write_text(json.dumps(dict(CONFIG, hidden_act="gelu", hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0,
                                         initializer_range=0.02)))
  records = helpers.random_batch(np.random.RandomState(11), NUM_RANKS, SEQ, CONFIG["vocab_size"],
                                 PRED)
  train_dir = root / "train"
  train_dir.mkdir()
  for rank in range(NUM_RANKS):
    helpers.write_batch_records(train_dir / ("part-%d.tfrecord" % rank),
                                {k: np.repeat(v[rank:rank + 1], 8, axis=0)
                                 for k, v in records.items()})
  init_dir = root / "init"
  init_dir.mkdir()
  _released_style_checkpoint(init_dir, seed=12)
  return {"root": root, "config": str(config_path), "train_dir": str(train_dir),
          "records": records, "init_checkpoint": str(init_dir / "bert_model.ckpt")}


def job_flags(data, output_dir, **overrides):
  values = {"horovod": True, "do_train": True, "bert_config_file": data["config"],
            "input_files_dir": data["train_dir"], "output_dir": output_dir,
            "max_seq_length": SEQ, "max_predictions_per_seq": PRED,
            "train_batch_size": BATCH, "learning_rate": LEARNING_RATE, "num_warmup_steps": 0,
            "num_train_steps": TRAIN_STEPS, "save_checkpoints_steps": TRAIN_STEPS,
            "display_loss_steps": 1, "deterministic_run": True, "intra_op_threads": 1,
            "inter_op_threads": 1}
  values.update(overrides)
  return ["--%s=%s" % (k, v) for k, v in values.items() if v is not None]


def train_in_process(config_path, init_checkpoint, features, learning_rate, steps):
  """One process: LAMB updates on the constant batch `features` from `init_checkpoint`.

  Returns:
    dict variable name -> value after `steps` updates.
  """
  config = modeling.BertConfig.from_json_file(config_path)
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
  with tf.Graph().as_default():
    built = run_pretraining.build_pretraining_model(config, helpers.constant_features(features),
                                                    is_training=True)
    tvars = _tf1.trainable_variables()
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, init_checkpoint)
    assert len(assignment_map) == len(tvars)
    _tf1.train.init_from_checkpoint(init_checkpoint, assignment_map)
    train_op = optimization.create_optimizer(built["total_loss"], learning_rate, steps, 0,
                                             optimizer_type="lamb")
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      for _ in range(steps):
        sess.run(train_op)
      return {v.op.name: sess.run(v) for v in _tf1.global_variables()}


def files_under(directory):
  return sorted(os.path.relpath(os.path.join(d, n), directory)
                for d, _, names in os.walk(directory) for n in names)


def test_gloo_four_ranks_on_two_hosts_train_like_one_process_with_4x_the_batch(
    cluster, data, tmp_path):
  out = tmp_path / "out"
  proc = cluster.run(HOST_A, horovodrun("--network-interface", cluster_lib.INTERFACE)
                     + [sys.executable, SCRIPT] + job_flags(data, out, init_checkpoint=data[
                         "init_checkpoint"]), timeout=400, cwd=REPO_ROOT, env=job_env())
  assert "global batch: 2 x 1 accumulation x 4 workers = 8" in proc.stdout + proc.stderr

  trained = checkpoint_values(out)
  assert trained["global_step"] == TRAIN_STEPS
  # One process, batch 4B = 2 copies of each rank's record, learning rate 4 x the per-rank rate.
  big_batch = {k: np.repeat(v, BATCH, axis=0) for k, v in data["records"].items()}
  expected = train_in_process(data["config"], data["init_checkpoint"], big_batch,
                              NUM_RANKS * LEARNING_RATE, TRAIN_STEPS)
  # The key bias adds the same amount to every score of a query, which the softmax ignores: its
  # gradient is 0 up to round-off, and LAMB's normalised update of that round-off is noise.
  compared = [n for n in expected if n.startswith(("bert/", "cls/"))
              and not n.endswith("attention/self/key/bias")]
  assert any(n.endswith("/adam_v") for n in compared)
  for name in compared:
    np.testing.assert_allclose(trained[name], expected[name], rtol=1e-4, atol=2e-6, err_msg=name)
  # Not vacuous: had every rank read the same record, the weights would be elsewhere.
  one_record = {k: np.repeat(v[:1], NUM_RANKS * BATCH, axis=0)
                for k, v in data["records"].items()}
  wrong = train_in_process(data["config"], data["init_checkpoint"], one_record,
                           NUM_RANKS * LEARNING_RATE, TRAIN_STEPS)
  name = "bert/encoder/layer_0/attention/self/query/kernel"
  assert np.max(np.abs(wrong[name] - expected[name])) > 100 * 2e-6

  # Only global rank 0 writes the log and checkpoints; hostB's local rank 0 (rank 2) writes none.
  assert (out / "bert_dllog.json").exists()
  assert [l["step"] for l in read_dllog(out / "bert_dllog.json") if l["step"] != []] == [1, 2, 3]
  for rank in range(1, NUM_RANKS):
    written = files_under(out / ("worker_%d" % rank))
    assert not [f for f in written if f.startswith(CHECKPOINT_FILES) or "dllog" in f], written
  assert sorted(os.listdir(out)) == sorted(
      [f for f in os.listdir(out) if f.startswith(CHECKPOINT_FILES)]
      + ["bert_dllog.json", "optimizer.json", "train", "worker_1", "worker_2", "worker_3"])
  for host in cluster_lib.HOSTS:
    assert files_under(cluster.disk(host)) == []


def test_mpirun_two_phases_with_node_local_output_dirs(cluster, data):
  results = os.path.join(cluster.node_local_dir, "results")  # each host's own disk
  phases = []
  for n, lr in ((1, "1e-3"), (2, "1e-9")):
    phases += ["--phase%d_seq" % n, str(SEQ), "--phase%d_pred" % n, str(PRED),
               "--phase%d_batch" % n, str(BATCH), "--phase%d_accum" % n, "1",
               "--phase%d_steps" % n, "2", "--phase%d_warmup" % n, "0", "--phase%d_lr" % n, lr]
  # Interface selection for OpenMPI's own traffic and its TCP transport, through the environment.
  # 4 ranks share 2 cores here: ranks waiting in a collective yield instead of spinning.
  env = dict(job_env(), OMPI_MCA_btl_tcp_if_include=cluster_lib.INTERFACE,
             OMPI_MCA_oob_tcp_if_include=cluster_lib.INTERFACE, OMPI_MCA_mpi_yield_when_idle="1")
  cluster.run(HOST_A, ["bash", LAUNCHER, "--python", sys.executable, "--config", data["config"],
                       "--launcher", "mpirun", "--np", str(NUM_RANKS), "--hosts", HOST_LIST,
                       "--output_dir", results, "--phase1_data", data["train_dir"],
                       "--phase2_data", data["train_dir"], "--save_checkpoints_steps", "2",
                       "--extra", "--node_local_output_dir --deterministic_run "
                                  "--intra_op_threads=1 --inter_op_threads=1"] + phases,
              timeout=600, cwd=REPO_ROOT, env=env)

  disk = {host: os.path.join(cluster.disk(host), "results") for host in cluster_lib.HOSTS}
  phase1 = {host: checkpoint_values(os.path.join(disk[host], "phase_1"))
            for host in cluster_lib.HOSTS}
  phase2 = {host: checkpoint_values(os.path.join(disk[host], "phase_2"))
            for host in cluster_lib.HOSTS}
  name = "bert/pooler/dense/kernel"
  for host in cluster_lib.HOSTS:
    assert phase1[host]["global_step"] == 2 and phase2[host]["global_step"] == 2
    # Phase 2 (learning rate ~0) started from this host's copy of phase 1's last checkpoint.
    np.testing.assert_allclose(phase2[host][name], phase1[host][name], atol=1e-6)
  # Both hosts' local rank 0 saved the same (synchronised) weights.
  np.testing.assert_array_equal(phase1[HOST_A][name], phase1[HOST_B][name])
  # The log is written by global rank 0 only (hostA); the other ranks checkpoint nothing.
  for phase in ("phase_1", "phase_2"):
    assert os.path.exists(os.path.join(disk[HOST_A], phase, "bert_dllog.json"))
    assert not os.path.exists(os.path.join(disk[HOST_B], phase, "bert_dllog.json"))
    for host, rank in ((HOST_A, 1), (HOST_B, 3)):
      written = files_under(os.path.join(disk[host], phase, "worker_%d" % rank))
      assert not [f for f in written if f.startswith(CHECKPOINT_FILES)], written
    assert sorted(os.listdir(os.path.join(disk[HOST_B], phase))) == sorted(
        [f for f in os.listdir(os.path.join(disk[HOST_B], phase))
         if f.startswith(CHECKPOINT_FILES)] + ["optimizer.json", "worker_3"])
  # Nothing reached the shared file system behind the node-local mount point.
  assert os.listdir(cluster.node_local_dir) == []


def _wait_for_checkpoint(directory, launcher, timeout):
  """Newest checkpoint step in `directory` once there is one (the job must still be running)."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    assert launcher.poll() is None, "the job ended before the fault"
    state = os.path.join(directory, "checkpoint")
    if os.path.exists(state) and tf.train.latest_checkpoint(directory):
      return int(tf.train.load_variable(tf.train.latest_checkpoint(directory), "global_step"))
    time.sleep(0.5)
  raise AssertionError("no checkpoint in %s after %d s" % (directory, timeout))


def test_dead_host_ends_the_job_quickly_and_a_relaunch_resumes(cluster, data, tmp_path):
  out = tmp_path / "out"
  log_path = tmp_path / "launcher.log"
  with open(log_path, "w") as log:
    launcher = cluster.popen(HOST_A, horovodrun() + [sys.executable, SCRIPT] + job_flags(
        data, out, num_train_steps=100000, save_checkpoints_steps=2), cwd=REPO_ROOT,
                             env=job_env(), stdout=log, stderr=subprocess.STDOUT)
  try:
    _wait_for_checkpoint(str(out), launcher, timeout=300)
    killed = cluster.kill_host(HOST_B)
    assert killed
    killed_at = time.time()
    code = launcher.wait(timeout=90)
    elapsed = time.time() - killed_at
  finally:
    if launcher.poll() is None:
      os.killpg(launcher.pid, 9)
      launcher.wait(timeout=30)
  output = log_path.read_text()
  assert code != 0, output[-3000:]
  assert elapsed < 60, elapsed
  # horovodrun names the first rank that failed: one of hostB's (ranks 2 and 3).
  assert re.search(r"Process name: [23]\b", output), output[-3000:]

  # A new launch continues from the newest checkpoint the dead job left.
  # To extend when the output-dir lock and the log appended on resume land: the lock left by the
  # killed job must not block this relaunch, and the log must continue the killed job's.
  resumed_from = int(tf.train.load_variable(tf.train.latest_checkpoint(str(out)), "global_step"))
  assert resumed_from >= 2
  proc = cluster.run(HOST_A, horovodrun() + [sys.executable, SCRIPT] + job_flags(
      data, out, num_train_steps=resumed_from + 2, save_checkpoints_steps=2),
                     timeout=400, cwd=REPO_ROOT, env=job_env())
  assert "from step %d to %d" % (resumed_from, resumed_from + 2) in proc.stdout + proc.stderr
  assert checkpoint_values(out)["global_step"] == resumed_from + 2
