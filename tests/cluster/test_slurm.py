"""scripts/slurm/pretrain.sbatch under a running Slurm (tests/cluster/slurm.py: slurmctld on hostA,
a slurmd on each of the 2-host cluster's hosts), driven as an operator does: `sbatch`, `scancel`,
`scontrol`.

- A 2-worker job (one per host) trains both phases to the end: COMPLETED, exit 0, and the same
  per-update losses and final weights as the same two phases under mpirun without Slurm.
- Preemption (`scancel --signal=USR1`) mid-phase 1: the workers stop at one update, exit 75, the
  script requeues the job, the job resumes from its checkpoint and ends with the losses and
  weights of the uninterrupted job (--deterministic_run).
- The time limit: `--signal=USR1@N` reaches the workers before it, the job is requeued and resumes.
- A wrong input (exit 2), and a global batch the allocation cannot split: not requeued, the reason
  in the job's output.
- A node lost mid-run (every process of hostB killed, its slurmd included): the job ends, is
  requeued and finishes on hostA alone, with the same global batch (twice the accumulation).
  Last in the module, so that no other job here runs on a node just back in service.

Tiny model, 1 intra-op thread per worker; sizes are the job's (global) ones, as a user gives them.
"""

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import pack_pretraining_data
from tests import helpers
from tests import test_run_pretraining as job
from tests.cluster import cluster as cluster_lib
from tests.cluster import slurm as slurm_lib
from utils.runlog import dllogger_setup
from utils.runlog import golden

pytestmark = pytest.mark.e2e

SBATCH = os.path.join(job.REPO_ROOT, "scripts", "slurm", "pretrain.sbatch")
LAUNCHER = os.path.join(job.REPO_ROOT, "scripts", "run_pretraining_lamb.sh")
HOST_A, HOST_B = cluster_lib.HOSTS
SEQ1, PRED1, SEQ2, PRED2 = 32, 5, 64, 10
# The job's sizes: global batch 8 = 2 per worker x 2 accumulation x 2 workers (x 4 on one worker).
GLOBAL_BATCH1, BATCH1, LR1 = 8, 2, 2e-3
GLOBAL_BATCH2, BATCH2, LR2 = 4, 1, 1e-3
# Phase 1 long enough for a signal to land in it (the job saves every SAVE_STEPS updates).
PHASE1_STEPS, PHASE2_STEPS, SAVE_STEPS = 120, 4, 10


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """Phase 1 and phase 2 records, two files each (one per worker), and the tiny config. Phase 2's
  are packed (pack_pretraining_data.py), as a user packs phase 2's."""
  root = tmp_path_factory.mktemp("slurm")
  rng = np.random.RandomState(21)
  dirs = {}
  for phase, seq, pred in ((1, SEQ1, PRED1), (2, SEQ2, PRED2)):
    dirs[phase] = root / ("phase%d" % phase if phase == 1 else "unpacked%d" % phase)
    dirs[phase].mkdir()
    for index in range(2):
      helpers.write_batch_records(dirs[phase] / ("part-%d.tfrecord" % index),
                                  helpers.random_batch(rng, 32, seq, helpers.TINY_CONFIG[
                                      "vocab_size"], pred, max_length=seq // 3 if phase == 2
                                                       else None))
  inputs = sorted(str(path) for path in dirs[2].glob("*.tfrecord"))
  dirs[2] = root / "phase2"
  pack_pretraining_data.pack_files(
      inputs, [str(dirs[2] / os.path.basename(path)) for path in inputs], num_workers=1)
  config = helpers.write_bert_config(root / "bert_config.json", max_position_embeddings=SEQ2)
  return {"root": root, "config": config, "phase1": str(dirs[1]), "phase2": str(dirs[2])}


def settings(data, output_dir, **overrides):
  """The batch script's settings (its EDIT lines), as environment variables of `sbatch`."""
  values = {"REPO": job.REPO_ROOT, "PYTHON": sys.executable, "CONFIG": data["config"],
            "PHASE1_DATA": data["phase1"], "PHASE2_DATA": data["phase2"],
            "OUTPUT_DIR": str(output_dir),
            "PHASE1_GLOBAL_BATCH": GLOBAL_BATCH1, "PHASE1_BATCH": BATCH1, "PHASE1_LR": LR1,
            "PHASE2_GLOBAL_BATCH": GLOBAL_BATCH2, "PHASE2_BATCH": BATCH2, "PHASE2_LR": LR2,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            # Two workers share two cores: a rank waiting in a collective yields.
            "OMPI_MCA_mpi_yield_when_idle": "1"}
  values.update(overrides)
  return {key: str(value) for key, value in values.items()}


def launcher_args(phases="1,2", phase1_steps=PHASE1_STEPS):
  """The arguments the batch script hands to scripts/run_pretraining_lamb.sh."""
  return ["--phases=%s" % phases, "--phase1_seq=%d" % SEQ1, "--phase1_pred=%d" % PRED1,
          "--phase1_steps=%d" % phase1_steps, "--phase1_warmup=5",
          "--phase2_seq=%d" % SEQ2, "--phase2_pred=%d" % PRED2,
          "--phase2_steps=%d" % PHASE2_STEPS, "--phase2_warmup=0",
          "--save_checkpoints_steps=%d" % SAVE_STEPS,
          "--extra=--deterministic_run --intra_op_threads=1 --inter_op_threads=1"]


def submit(slurm, data, output_dir, sbatch_args, args=None, **overrides):
  """Submits the batch script from hostA; returns (job id, its output file)."""
  out = "%s.out" % output_dir
  job_id = slurm.submit(list(sbatch_args) + ["--output=%s" % out, SBATCH]
                        + (launcher_args() if args is None else list(args)),
                        cwd=job.REPO_ROOT, env=slurm.env(**settings(data, output_dir,
                                                                      **overrides)))
  return job_id, out


def read(path):
  with open(path) as f:
    return f.read()


def wait_for_dllog_step(log_path, step, slurm, job_id, timeout=300):
  """Waits until the run log at `log_path` has a line of update `step` or later (job running)."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    if os.path.exists(log_path):
      steps = [e["step"] for e in job.read_dllog(log_path) if isinstance(e["step"], int)]
      if steps and max(steps) >= step:
        return max(steps)
    state = slurm.job(job_id)["JobState"]
    assert state in ("PENDING", "RUNNING", "CONFIGURING"), "job %d is %s before update %d" % (
        job_id, state, step)
    time.sleep(0.2)
  raise AssertionError("update %d never logged in %s" % (step, log_path))


def assert_same_history(reference_dir, run_dir):
  """The run's per-update values and final weights equal the reference's (tolerance 0)."""
  reference = golden.log_entries(os.path.join(str(reference_dir), "bert_dllog.json"))
  entries = golden.log_entries(os.path.join(str(run_dir), "bert_dllog.json"))
  assert [e["step"] for e in entries] == [e["step"] for e in reference]
  assert golden.differences(reference, entries, tolerance=0) == []
  final_reference, final = job.checkpoint_values(reference_dir), job.checkpoint_values(run_dir)
  assert set(final) == set(final_reference)
  for name, value in final_reference.items():
    np.testing.assert_array_equal(final[name], value, err_msg=name)


def restarts_logged(run_dir):
  """The `resumed_from_step` of every restart line in the run log of `run_dir`."""
  return [record["data"]["resumed_from_step"]
          for record in job.read_dllog(os.path.join(str(run_dir), "bert_dllog.json"))
          if record["step"] == dllogger_setup.RESTART_STEP]


def wait_for_requeue(slurm, job_id, timeout=120):
  """Waits until the job is requeued (pending, one restart) and starts again.

  Returns:
    (seconds from the call to the requeue, seconds Slurm held the requeued job).
  """
  called = time.time()
  slurm.wait_for_job(job_id, ["PENDING"], timeout, restarts=1)
  requeued = time.time()
  slurm.wait_for_job(job_id, ["RUNNING", "COMPLETED"], slurm_lib.CRED_EXPIRE + 60, restarts=1)
  return requeued - called, time.time() - requeued


@pytest.fixture(scope="module")
def uninterrupted(slurm, data, tmp_path_factory):
  """The 2-worker job run to the end under Slurm; dict output_dir, job (scontrol), output."""
  output_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
  job_id, out = submit(slurm, data, output_dir, ["--nodes=2", "--ntasks-per-node=1"])
  final = slurm.wait_for_job(job_id, slurm_lib.JOB_STATES_DONE, timeout=600, output_file=out)
  return {"output_dir": output_dir, "job": final, "output": read(out)}


def test_job_runs_both_phases_to_the_end_as_without_slurm(uninterrupted, data, tmp_path):
  final, output = uninterrupted["job"], uninterrupted["output"]
  assert (final["JobState"], final["ExitCode"], final["Restarts"]) == ("COMPLETED", "0:0", "0"), (
      final, output[-6000:])
  assert final["NodeList"] == "hostA,hostB"
  assert "2 workers on hostA,hostB; phase 1: 8 = 2 x 2 accumulation x 2" in output
  assert "finished (exit 0)" in output
  assert "Traceback" not in output
  run_dir = uninterrupted["output_dir"]
  for phase, steps in ((1, PHASE1_STEPS), (2, PHASE2_STEPS)):
    assert os.path.exists(os.path.join(str(run_dir), "phase_%d" % phase,
                                       "model.ckpt-%d.index" % steps))
  # Phase 2 trained on the packed rows: its log counts their sequences.
  phase2_lines = [r["data"] for r in job.read_dllog(os.path.join(str(run_dir), "phase_2",
                                                                 "bert_dllog.json"))
                  if isinstance(r["step"], int)]
  assert phase2_lines and all("sequences_per_update" in d for d in phase2_lines)
  # The same two phases under mpirun on this machine, no Slurm: the same launcher script with the
  # per-worker sizes the batch script computed.
  reference = tmp_path / "mpirun"
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMPI_MCA_mpi_yield_when_idle="1",
             OMPI_MCA_orte_tmpdir_base=str(tmp_path))
  helpers.run_python([LAUNCHER, "--launcher=mpirun", "--np=2", "--python=%s" % sys.executable,
                      "--config=%s" % data["config"], "--output_dir=%s" % reference,
                      "--phase1_data=%s" % data["phase1"], "--phase2_data=%s" % data["phase2"],
                      "--phase1_batch=%d" % BATCH1, "--phase1_accum=2", "--phase1_lr=0.001",
                      "--phase2_batch=%d" % BATCH2, "--phase2_accum=2", "--phase2_lr=0.0005"]
                     + launcher_args(), timeout=600, env=env, python="bash")
  for phase in (1, 2):
    assert_same_history(reference / ("phase_%d" % phase), run_dir / ("phase_%d" % phase))


def test_preempted_job_is_requeued_and_resumes_exactly(slurm, data, uninterrupted, tmp_path):
  output_dir = tmp_path / "run"
  job_id, out = submit(slurm, data, output_dir, ["--nodes=2", "--ntasks-per-node=1"])
  phase1 = output_dir / "phase_1"
  wait_for_dllog_step(str(phase1 / "bert_dllog.json"), SAVE_STEPS + 1, slurm, job_id)
  slurm.run(slurm_lib.CONTROLLER, ["scancel", "--signal=USR1", str(job_id)])
  requeued_after, held = wait_for_requeue(slurm, job_id)
  output = read(out)
  assert output.count("stopped with its state saved (exit 75): requeueing") == 1, output[-6000:]
  # Both workers stopped at the same update (one stop line each, naming it).
  stops = re.findall(r"^run_pretraining.py: stopped by SIGUSR1 at update (\d+); checkpoint "
                     r"written", output, re.M)
  assert len(stops) == 2 and len(set(stops)) == 1, output[-6000:]
  final = slurm.wait_for_job(job_id, slurm_lib.JOB_STATES_DONE, timeout=600, output_file=out)
  assert (final["JobState"], final["ExitCode"], final["Restarts"]) == ("COMPLETED", "0:0", "1"), (
      final, read(out)[-6000:])
  restarts = restarts_logged(phase1)
  assert len(restarts) == 1 and SAVE_STEPS < restarts[0] < PHASE1_STEPS, restarts
  for phase in (1, 2):
    assert_same_history(uninterrupted["output_dir"] / ("phase_%d" % phase),
                        output_dir / ("phase_%d" % phase))
  assert restarts == [int(stops[0])]
  print("signal to requeued: %.1f s; Slurm's hold on the requeued job: %.0f s"
        % (requeued_after, held))


def test_time_limit_stops_the_workers_before_it_and_requeues(slurm, data, tmp_path):
  output_dir = tmp_path / "run"
  # Two minutes, SIGUSR1 60 s before the end: Slurm's timer runs every 30 s and sends it once
  # the end is at most 60 + 30 s away, i.e. 30-60 s after the start (after the worker's handlers
  # are in place, ~10 s). One worker on one node; a phase 1 that outlasts the limit.
  job_id, out = submit(slurm, data, output_dir,
                       ["--nodes=1", "--ntasks-per-node=1", "--time=2", "--signal=USR1@60"],
                       args=launcher_args(phases="1", phase1_steps=1000000))
  started = slurm.wait_for_job(job_id, ["RUNNING"], timeout=60)
  wait_for_requeue(slurm, job_id, timeout=180)
  output = read(out)
  assert "stopped with its state saved (exit 75): requeueing" in output, output[-6000:]
  phase1 = output_dir / "phase_1"
  deadline = time.time() + 120
  while not restarts_logged(phase1) and time.time() < deadline:
    time.sleep(0.5)
  restarts = restarts_logged(phase1)
  slurm.run(slurm_lib.CONTROLLER, ["scancel", str(job_id)])
  slurm.wait_for_job(job_id, slurm_lib.JOB_STATES_DONE, timeout=120, output_file=out)
  assert len(restarts) == 1 and restarts[0] > 0, (restarts, read(out)[-6000:])
  assert started["TimeLimit"] == "00:02:00"


def test_bad_input_is_not_requeued_and_says_why(slurm, data, tmp_path):
  missing = tmp_path / "no-such-data"
  bad_input, out = submit(slurm, data, tmp_path / "run", ["--nodes=2", "--ntasks-per-node=1"],
                          args=launcher_args(phases="1"), PHASE1_DATA=missing)
  # A global batch that 2 workers x 3 per worker cannot split: the script refuses it itself.
  bad_batch, out_batch = submit(slurm, data, tmp_path / "run2",
                                ["--nodes=2", "--ntasks-per-node=1"], PHASE1_BATCH=3)
  for job_id, path in ((bad_input, out), (bad_batch, out_batch)):
    final = slurm.wait_for_job(job_id, slurm_lib.JOB_STATES_DONE, timeout=300,
                               output_file=path)
    assert (final["JobState"], final["ExitCode"], final["Restarts"]) == ("FAILED", "2:0", "0"), (
        final, read(path)[-6000:])
  output = read(out)
  assert str(missing) in output
  assert "(exit 2, the error is above): not requeued" in output
  assert "Traceback" not in output
  assert ("phase 1's global batch 8 is not a multiple of 3 per worker x 2 workers; change "
          "PHASE1_GLOBAL_BATCH or PHASE1_BATCH") in read(out_batch)


# Last in the module: in one CI run the 2-node job after it, started 3 s after hostB was back in
# service, stayed RUNNING for the 300 s it was given (the cause not seen: the error now carries
# both slurmds' logs and the job's output). What this test checks ends with the job it runs.
def test_lost_node_ends_the_job_which_finishes_on_the_node_left(slurm, cluster, data, tmp_path):
  output_dir = tmp_path / "run"
  job_id, out = submit(slurm, data, output_dir, ["--nodes=1-2", "--ntasks-per-node=1"],
                       args=launcher_args(phases="1", phase1_steps=PHASE1_STEPS))
  phase1 = output_dir / "phase_1"
  wait_for_dllog_step(str(phase1 / "bert_dllog.json"), SAVE_STEPS + 1, slurm, job_id)
  lost = time.time()
  cluster.kill_host(HOST_B)
  try:
    # The job's first run ends; Slurm marks hostB down once it stops answering.
    slurm.wait_for_nodes("down*", [HOST_B], timeout=3 * slurm_lib.SLURMD_TIMEOUT + 30)
    pending = slurm.wait_for_job(job_id, ["PENDING"], timeout=120, restarts=1)
    ended_after = time.time() - lost
    final = slurm.wait_for_job(job_id, slurm_lib.JOB_STATES_DONE, timeout=600, output_file=out)
    output = read(out)
    assert (final["JobState"], final["ExitCode"]) == ("COMPLETED", "0:0"), (final,
                                                                             output[-6000:])
    assert final["NodeList"] == HOST_A
    # The global batch kept: one worker, twice the accumulation.
    assert "1 workers on hostA; phase 1: 8 = 2 x 4 accumulation x 1" in output
    restarts = restarts_logged(phase1)
    assert len(restarts) == 1 and SAVE_STEPS <= restarts[0] < PHASE1_STEPS, restarts
    assert os.path.exists(phase1 / ("model.ckpt-%d.index" % PHASE1_STEPS))
    print("node lost to the job's end: %.1f s (%s)" % (ended_after, pending.get("Reason")))
  finally:
    # hostB comes back: its munged and slurmd again; Slurm returns it to service.
    slurm.start_daemon(HOST_B, "munged")
    slurm.start_daemon(HOST_B, "slurmd")
    slurm.wait_for_nodes("idle", cluster_lib.HOSTS, timeout=120)
