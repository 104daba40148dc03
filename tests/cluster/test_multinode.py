"""run_pretraining.py on the 2-host cluster: 2 hosts x 2 workers (4 ranks), launched from hostA.

- MPI through scripts/run_pretraining_lamb.sh with `--node_local_output_dir`: 4 ranks with batch B
  reach the weights of one process with batch 4B (reference computed in-process); host B's
  interface goes down mid-phase 1: the job ends on hostA within 60 s naming host B; a relaunch
  resumes phase 1 from each host's own disk, and phase 2 starts from phase 1's last checkpoint on
  both hosts.
- Gloo with `--network-interface`: 4 ranks with batch B reach the weights of one process with batch
  4B (the same check); host B dies mid-run: the job ends on hostA, non-zero, naming the lost rank,
  within 60 s; a relaunch resumes from the last checkpoint, and across both launches only global
  rank 0 writes the log and checkpoints.

Each fault ends a run that the other checks use anyway, so a fault adds one launch (the relaunch).
Tiny model, seq 32, 1 intra-op thread, few steps: 4 TF processes share the machine's cores.
"""

from concurrent import futures
import json
import os
import re
import shutil
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

pytestmark = pytest.mark.e2e

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
# The faulted runs train "forever" (until the fault); the LR schedule decays over these updates.
LONG_RUN_STEPS = 100000
SAVE_STEPS = 2
PHASE2_STEPS = 2
# Files written only by a worker that saves checkpoints or summaries.
CHECKPOINT_FILES = ("model.ckpt", "checkpoint", "events.", "graph.pbtxt")
# OpenMPI settings of the two-phase runs, given as a user would, through the environment.
MPI_SETTINGS = {
    # OpenMPI's own traffic and its TCP transport on the hosts' one interface.
    "OMPI_MCA_btl_tcp_if_include": cluster_lib.INTERFACE,
    "OMPI_MCA_oob_tcp_if_include": cluster_lib.INTERFACE,
    # 4 ranks share 2 cores here: ranks waiting in a collective yield instead of spinning.
    "OMPI_MCA_mpi_yield_when_idle": "1",
    # TCP keepalive on mpirun's connections to the other hosts' daemons (docs/MULTINODE.md): with
    # OpenMPI's defaults (300 s, then 9 probes 20 s apart) a host whose network goes away leaves
    # the job waiting for about 8 minutes.
    "OMPI_MCA_oob_tcp_keepalive_time": "5",
    "OMPI_MCA_oob_tcp_keepalive_intvl": "5",
    "OMPI_MCA_oob_tcp_keepalive_probes": "3",
}


def horovodrun():
  """The Gloo launch of the 4 ranks, over the one interface both hosts have."""
  return [HOROVODRUN, "-np", str(NUM_RANKS), "-H", HOST_LIST, "--gloo", "--disable-cache",
          "--network-interface", cluster_lib.INTERFACE]


def job_env(**settings):
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **settings)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """4 files, file r holding 8 copies of record r: rank r (shard by file) only ever sees record r.

  Every record has the same number of real predictions, so the mean of the 4 ranks' losses is the
  loss of one batch holding all 4 records equally often.
  """
  root = tmp_path_factory.mktemp("multinode")
  config_path = root / "bert_config.json"
  # No dropout: the 4 ranks' update is compared with one process's (a deterministic run keeps
  # dropout, with masks keyed per rank, which one process cannot reproduce). One layer, the
  # smallest model the checks need, as 4 TF processes share the cores (the init checkpoint's
  # second layer goes unused).
  config_path.write_text(json.dumps(dict(CONFIG, num_hidden_layers=1, hidden_act="gelu",
                                         hidden_dropout_prob=0.0,
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
            "num_train_steps": LONG_RUN_STEPS, "save_checkpoints_steps": SAVE_STEPS,
            "display_loss_steps": 1, "deterministic_run": True, "intra_op_threads": 1,
            "inter_op_threads": 1}
  values.update(overrides)
  return ["--%s=%s" % (k, v) for k, v in values.items() if v is not None]


def train_in_process(config_path, init_checkpoint, features, learning_rate, steps,
                     num_train_steps):
  """One process: `steps` LAMB updates on the constant batch `features` from `init_checkpoint`,
  with the learning rate schedule of a run of `num_train_steps` updates (no warmup).

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
    train_op = optimization.create_optimizer(built["total_loss"], learning_rate, num_train_steps,
                                             0, optimizer_type="lamb")
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      for _ in range(steps):
        sess.run(train_op)
      return {v.op.name: sess.run(v) for v in _tf1.global_variables()}


def files_under(directory):
  return sorted(os.path.relpath(os.path.join(d, n), directory)
                for d, _, names in os.walk(directory) for n in names)


def values_at(directory, step):
  """Every variable of checkpoint `model.ckpt-<step>` in `directory`: dict name -> value."""
  reader = tf.train.load_checkpoint(os.path.join(str(directory), "model.ckpt-%d" % step))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def newest_step(directory):
  return int(tf.train.load_variable(tf.train.latest_checkpoint(str(directory)), "global_step"))


def _wait_for_checkpoint(directory, launcher, timeout):
  """Newest checkpoint step in `directory` once there is one (the job must still be running)."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    assert launcher.poll() is None, "the job ended before the fault"
    if os.path.exists(os.path.join(directory, "checkpoint")) and tf.train.latest_checkpoint(
        directory):
      return newest_step(directory)
    time.sleep(0.2)
  raise AssertionError("no checkpoint in %s after %d s" % (directory, timeout))


def _wait_for_end(launcher, timeout):
  """(exit code, seconds until `launcher` ended); the code is None if it still ran after `timeout`."""
  start = time.time()
  try:
    code = launcher.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    code = None
  return code, time.time() - start


def _stop(cluster, launcher):
  """Kills the launcher's session if it still runs and whatever of the job is left on the hosts
  (clean-up after a failed check, so that the later tests find the cluster idle)."""
  helpers.kill_session(launcher, timeout=30)
  for host in cluster_lib.HOSTS:
    cluster.kill_host(host)


def _job_processes(cluster, host, timeout):
  """pids on `host` other than its sshd listener, once there are none or after `timeout` s."""
  deadline = time.time() + timeout
  while True:
    pids = [pid for pid in cluster.pids(host) if pid != cluster.sshd_pid(host)]
    if not pids or time.time() > deadline:
      return pids
    time.sleep(0.5)


def two_phase_command(data, results, phases, phase1_steps, extra=""):
  """scripts/run_pretraining_lamb.sh under mpirun on the 4 ranks, with node-local output dirs.

  Phase 1 (LEARNING_RATE) trains `phase1_steps` updates, phase 2 (1e-9: its weights stay those it
  starts from) PHASE2_STEPS; `phases` is the launcher's --phases, `extra` flags for both.
  """
  command = ["bash", LAUNCHER, "--python", sys.executable, "--config", data["config"],
             "--launcher", "mpirun", "--np", str(NUM_RANKS), "--hosts", HOST_LIST,
             "--output_dir", results, "--phases", phases, "--phase1_data", data["train_dir"],
             "--phase2_data", data["train_dir"], "--save_checkpoints_steps", str(SAVE_STEPS),
             "--extra", "--node_local_output_dir --deterministic_run --intra_op_threads=1 "
                        "--inter_op_threads=1 " + extra]
  for n, lr, steps in ((1, LEARNING_RATE, phase1_steps), (2, 1e-9, PHASE2_STEPS)):
    command += ["--phase%d_seq" % n, str(SEQ), "--phase%d_pred" % n, str(PRED),
                "--phase%d_batch" % n, str(BATCH), "--phase%d_accum" % n, "1",
                "--phase%d_steps" % n, str(steps), "--phase%d_warmup" % n, "0",
                "--phase%d_lr" % n, str(lr)]
  return command


def reference_weights(data, steps):
  """The 4-rank run's expected weights after `steps` updates, and a wrong expectation.

  Returns:
    (expected, wrong): dicts variable name -> value. `expected`: one process with batch 4B = 2
    copies of each rank's record and 4 x the per-rank learning rate; `wrong`: the same with every
    rank's record replaced by rank 0's (had the ranks not read their own files).
  """
  big_batch = {k: np.repeat(v, BATCH, axis=0) for k, v in data["records"].items()}
  one_record = {k: np.repeat(v[:1], NUM_RANKS * BATCH, axis=0)
                for k, v in data["records"].items()}
  return tuple(train_in_process(data["config"], data["init_checkpoint"], batch,
                                NUM_RANKS * LEARNING_RATE, steps, LONG_RUN_STEPS)
               for batch in (big_batch, one_record))


@pytest.fixture(scope="module")
def cut_off_phase_1(cluster, data, tmp_path_factory):
  """Phase 1 of the two-phase launcher under mpirun (node-local output dirs) from
  `init_checkpoint`: host B's network interface goes down after the first checkpoint and comes
  back up once the job has ended.

  While mpirun waits out its keepalive (the job's processes idle), the fixture computes the
  in-process reference weights of that checkpoint, so the two overlap.

  Yields:
    dict: results (the output dir, on each host's own disk), step (the newest checkpoint on hostA
    when the interface went down), references (`reference_weights` at that step), code (the exit
    code on hostA, None if it still ran 90 s later), seconds (from the cut to the end on hostA),
    output (the launcher's), left_on_a (pids on hostA but its sshd once the job ended there),
    left_on_b (the same on hostB once the interface is back up: what the cut-off left there is
    killed on the way), link (hostB's interface afterwards, as `ip link` shows it). The node-local
    disks are emptied after the module.
  """
  results = os.path.join(cluster.node_local_dir, "results")
  log_path = tmp_path_factory.mktemp("cut_off") / "launcher.log"
  with open(log_path, "w") as log:
    launcher = cluster.popen(
        HOST_A, two_phase_command(data, results, "1", LONG_RUN_STEPS,
                                  extra="--init_checkpoint=" + data["init_checkpoint"]),
        cwd=REPO_ROOT, env=job_env(**MPI_SETTINGS), stdout=log, stderr=subprocess.STDOUT)
  try:
    step = _wait_for_checkpoint(os.path.join(cluster.disk(HOST_A), "results", "phase_1"),
                                launcher, timeout=300)
    with cluster.interface_down(HOST_B), futures.ThreadPoolExecutor(1) as waiter:
      end = waiter.submit(_wait_for_end, launcher, 90)
      references = reference_weights(data, step)
      code, seconds = end.result()
      left_on_a = _job_processes(cluster, HOST_A, timeout=15)
    # The ssh sessions that checked the hosts reach each other again may still be ending there.
    left_on_b = _job_processes(cluster, HOST_B, timeout=15)
  finally:
    _stop(cluster, launcher)
  link = subprocess.run(["ip", "-n", cluster.namespaces[HOST_B], "-o", "link", "show",
                         cluster_lib.INTERFACE], capture_output=True, text=True, timeout=20,
                        check=True).stdout
  yield {"results": results, "step": step, "references": references, "code": code,
         "seconds": seconds, "output": log_path.read_text(), "left_on_a": left_on_a,
         "left_on_b": left_on_b, "link": link}
  for host in cluster_lib.HOSTS:
    shutil.rmtree(os.path.join(cluster.disk(host), "results"), ignore_errors=True)


def assert_trained_like_one_process_with_4x_the_batch(run, directory):
  """The 4-rank job `run` (a fixture's dict) saved, at run["step"] in `directory`, the weights of
  one process with batch 4B (run["references"])."""
  assert "; 4 workers; global batch 8 = 2 x 1 accumulation x 4 workers; " in run["output"]
  trained = values_at(directory, run["step"])
  assert trained["global_step"] == run["step"]
  expected, wrong = run["references"]
  # The key bias adds the same amount to every score of a query, which the softmax ignores: its
  # gradient is 0 up to round-off, and LAMB's normalised update of that round-off is noise.
  compared = [n for n in expected if n.startswith(("bert/", "cls/"))
              and not n.endswith("attention/self/key/bias")]
  assert any(n.endswith("/adam_v") for n in compared)
  for name in compared:
    np.testing.assert_allclose(trained[name], expected[name], rtol=1e-4, atol=2e-6, err_msg=name)
  # Not vacuous: had every rank read the same record, the weights would be elsewhere.
  name = "bert/encoder/layer_0/attention/self/query/kernel"
  assert np.max(np.abs(wrong[name] - expected[name])) > 100 * 2e-6


def test_mpirun_four_ranks_on_two_hosts_train_like_one_process_with_4x_the_batch(cluster,
                                                                                 cut_off_phase_1):
  assert_trained_like_one_process_with_4x_the_batch(
      cut_off_phase_1, os.path.join(cluster.disk(HOST_A), "results", "phase_1"))


def test_interface_down_ends_the_job_on_host_a_naming_host_b(cluster, cut_off_phase_1):
  run = cut_off_phase_1
  assert run["code"] not in (None, 0), run["output"][-3000:]
  assert run["seconds"] < 60, run["seconds"]
  # mpirun names the host it lost.
  assert "lost communication with a remote daemon" in run["output"], run["output"][-3000:]
  assert re.search(r"Remote daemon: \S+ on node %s\b" % HOST_B, run["output"]), run["output"]
  # Nothing of the job is left running on either host; hostB's interface is back up and both
  # hosts reach each other again.
  assert run["left_on_a"] == [] and run["left_on_b"] == []
  assert "state UP" in run["link"], run["link"]
  assert cluster.run(HOST_A, ["ssh", HOST_B, "hostname"], timeout=30).stdout.strip() == HOST_B


def test_mpirun_two_phases_with_node_local_output_dirs(cluster, data, cut_off_phase_1):
  # The same launch again resumes phase 1 on both hosts, each from its own disk, from the newest
  # checkpoint the cut-off job left; phase 2 then starts from phase 1's last checkpoint.
  disk = {host: os.path.join(cluster.disk(host), "results") for host in cluster_lib.HOSTS}
  resumed_from = newest_step(os.path.join(disk[HOST_A], "phase_1"))
  assert resumed_from >= cut_off_phase_1["step"]
  phase1_steps = resumed_from + 2
  proc = cluster.run(HOST_A, two_phase_command(data, cut_off_phase_1["results"], "1,2",
                                               phase1_steps),
                     timeout=600, cwd=REPO_ROOT, env=job_env(**MPI_SETTINGS))
  assert "from step %d to %d" % (resumed_from, phase1_steps) in proc.stdout + proc.stderr

  phase1 = {host: checkpoint_values(os.path.join(disk[host], "phase_1"))
            for host in cluster_lib.HOSTS}
  phase2 = {host: checkpoint_values(os.path.join(disk[host], "phase_2"))
            for host in cluster_lib.HOSTS}
  name = "bert/pooler/dense/kernel"
  for host in cluster_lib.HOSTS:
    assert phase1[host]["global_step"] == phase1_steps
    assert phase2[host]["global_step"] == PHASE2_STEPS
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
         if f.startswith(CHECKPOINT_FILES)] + ["optimizer.json"])  # no worker_3/: saves nothing
  # Nothing reached the shared file system behind the node-local mount point.
  assert os.listdir(cluster.node_local_dir) == []


@pytest.fixture(scope="module")
def dead_host_run(cluster, data, tmp_path_factory):
  """The Gloo job of the 4 ranks from `init_checkpoint`; host B dies after the job's first
  checkpoint.

  While Gloo waits out its timeout (the job's processes idle), the fixture computes the in-process
  reference weights of that checkpoint, so the two overlap.

  Returns:
    dict: out (the output dir), step (its newest checkpoint when host B died), references
    (`reference_weights` at that step), code (the exit code on hostA, None if it still ran 90 s
    later), seconds (from the kill to the end on hostA), output (the launcher's), left_on_a (pids
    on hostA but its sshd once the job ended there), disks_before / disks_after (files on each
    host's node-local disk).
  """
  out = tmp_path_factory.mktemp("dead_host") / "out"
  log_path = out.parent / "launcher.log"
  disks_before = {host: files_under(cluster.disk(host)) for host in cluster_lib.HOSTS}
  with open(log_path, "w") as log:
    launcher = cluster.popen(HOST_A, horovodrun() + [sys.executable, SCRIPT] + job_flags(
        data, out, init_checkpoint=data["init_checkpoint"]), cwd=REPO_ROOT, env=job_env(),
                             stdout=log, stderr=subprocess.STDOUT)
  try:
    step = _wait_for_checkpoint(str(out), launcher, timeout=300)
    assert cluster.kill_host(HOST_B)
    with futures.ThreadPoolExecutor(1) as waiter:
      end = waiter.submit(_wait_for_end, launcher, 90)
      references = reference_weights(data, step)
      code, seconds = end.result()
    left_on_a = _job_processes(cluster, HOST_A, timeout=15)
  finally:
    _stop(cluster, launcher)
  return {"out": out, "step": step, "references": references, "code": code, "seconds": seconds,
          "output": log_path.read_text(), "left_on_a": left_on_a, "disks_before": disks_before,
          "disks_after": {host: files_under(cluster.disk(host)) for host in cluster_lib.HOSTS}}


def test_dead_host_ends_the_job_quickly_and_a_relaunch_resumes(cluster, dead_host_run, data):
  output = dead_host_run["output"]
  assert dead_host_run["code"] not in (None, 0), output[-3000:]
  assert dead_host_run["seconds"] < 60, dead_host_run["seconds"]
  # horovodrun names the first rank that failed: one of hostB's (ranks 2 and 3).
  assert re.search(r"Process name: [23]\b", output), output[-3000:]
  assert dead_host_run["left_on_a"] == []  # nothing of the job left running on hostA

  # The same command again continues from the newest checkpoint the dead job left (the lock its
  # rank 0 held does not block it) and appends to its log.
  out = dead_host_run["out"]
  resumed_from = newest_step(out)
  assert resumed_from >= dead_host_run["step"]
  proc = cluster.run(HOST_A, horovodrun() + [sys.executable, SCRIPT] + job_flags(
      data, out, init_checkpoint=data["init_checkpoint"], num_train_steps=resumed_from + 2),
                     timeout=400, cwd=REPO_ROOT, env=job_env())
  assert "from step %d to %d" % (resumed_from, resumed_from + 2) in proc.stdout + proc.stderr
  assert newest_step(out) == resumed_from + 2
  lines = [l for l in read_dllog(out / "bert_dllog.json") if l["step"] != []]
  restart = [l["step"] for l in lines].index("RESTART")
  assert [l["step"] for l in lines[:restart]] == list(range(1, restart + 1))
  assert restart >= dead_host_run["step"]
  assert lines[restart]["data"] == {"resumed_from_step": resumed_from}
  assert [l["step"] for l in lines[restart + 1:]] == [resumed_from + 1, resumed_from + 2]

  # In both launches only global rank 0 wrote the log and checkpoints; hostB's local rank 0
  # (rank 2) wrote none, and nothing went to the hosts' node-local disks.
  for rank in range(1, NUM_RANKS):
    written = files_under(out / ("worker_%d" % rank))
    assert not [f for f in written if f.startswith(CHECKPOINT_FILES) or "dllog" in f], written
  assert sorted(os.listdir(out)) == sorted(
      [f for f in os.listdir(out) if f.startswith(CHECKPOINT_FILES)]
      + ["bert_dllog.json", "optimizer.json", "train"])  # no worker_<rank>/: they save nothing
  assert dead_host_run["disks_after"] == dead_host_run["disks_before"]
  for host in cluster_lib.HOSTS:
    assert files_under(cluster.disk(host)) == dead_host_run["disks_before"][host]


def test_gloo_four_ranks_on_two_hosts_train_like_one_process_with_4x_the_batch(dead_host_run):
  # Kept after the dead-host test: its fixture must start after the mpirun tests have written
  # the hosts' disks, which the dead-host test compares with what they held before its job.
  assert_trained_like_one_process_with_4x_the_batch(dead_host_run, str(dead_host_run["out"]))
