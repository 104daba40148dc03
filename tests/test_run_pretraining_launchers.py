"""run_pretraining.py under its launchers, end to end: Horovod (horovodrun --gloo and mpirun:
identical weights, only rank 0 writes, sharding by record) and the two-phase LAMB script
(scripts/run_pretraining_lamb.sh: its commands, options and both phases run). The records and the
job's flags are test_run_pretraining.py's.
"""

import atexit
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import pack_pretraining_data
from tests.test_run_pretraining import BIN_DIR
from tests.test_run_pretraining import PRED
from tests.test_run_pretraining import REPO_ROOT
from tests.test_run_pretraining import SEQ
from tests.test_run_pretraining import checkpoint_values
from tests.test_run_pretraining import common_flags
from tests.test_run_pretraining import data  # noqa: F401  (the module's data fixture)
from tests.test_run_pretraining import read_dllog
from tests.test_run_pretraining import run_job

pytestmark = pytest.mark.e2e


# ---------------------------------------------------------------------------------------------
# Horovod

def _horovodrun(n=2):
  return [os.path.join(BIN_DIR, "horovodrun"), "-np", str(n), "-H", "localhost:%d" % n, "--gloo"]


def _mpirun(n=2):
  """mpirun of `n` workers on this machine, with a session directory of its own.

  Two mpiruns started at the same moment by the same user race to create their shared session
  directory (/tmp/ompi.HOST.UID): the loser fails in orte_init with "mkdir ... File exists" (seen
  in a suite that starts two jobs side by side), so each launch gets its own base directory,
  removed when the test process exits.
  """
  base = tempfile.mkdtemp(prefix="ompi-")
  atexit.register(shutil.rmtree, base, True)
  args = ["mpirun", "-np", str(n), "--mca", "orte_tmpdir_base", base]
  if os.geteuid() == 0:
    args.append("--allow-run-as-root")
  return args + ["--oversubscribe"]


def test_horovodrun_two_workers_identical_weights(data, tmp_path):
  out = tmp_path / "out"
  run_job(common_flags(data, out, do_train=True, horovod=True, num_train_steps=4,
                       num_accumulation_steps=2, allreduce_post_accumulation=True,
                       checkpoint_all_workers=True),
          launcher=_horovodrun(), timeout=300)
  rank0, rank1 = checkpoint_values(out), checkpoint_values(out / "worker_1")
  assert rank0["global_step"] == rank1["global_step"] == 4
  # Weights and optimizer slots are identical; the accumulators hold each worker's own
  # (not yet allreduced) sums with post-accumulation allreduce, so they legitimately differ.
  shared = [n for n in rank0 if not n.endswith("/accum") and n != "local_step"]
  assert any(n.endswith("/adam_v") for n in shared)
  for name in shared:
    np.testing.assert_array_equal(rank1[name], rank0[name], err_msg=name)
  # Global batch 4 x 2 accumulation x 2 workers; learning rate 1e-3 x 2 workers.
  steps = [l for l in read_dllog(out / "bert_dllog.json") if l["step"] != []]
  np.testing.assert_allclose(steps[1]["data"]["learning_rate"], 2e-3 * np.sqrt(1 - 1 / 4),
                             rtol=1e-5)


def test_mpirun_only_rank0_writes_and_few_files_shard_by_record(data, tmp_path):
  out = tmp_path / "out"
  proc = run_job(common_flags(data, out, do_train=True, horovod=True, num_train_steps=3,
                              input_files_dir=data["single_dir"]),
                 launcher=_mpirun(), timeout=300)
  assert "sharding by record" in proc.stderr + proc.stdout
  assert checkpoint_values(out)["global_step"] == 3
  worker_dir = out / "worker_1"
  assert not worker_dir.exists()  # rank 1 saves nothing: no empty directory of its own
  written = [p.name for p in worker_dir.rglob("*") if p.is_file()]
  assert not [n for n in written if n.startswith(("model.ckpt", "checkpoint", "events."))], written
  assert not (worker_dir / "bert_dllog.json").exists()
  assert (out / "bert_dllog.json").exists()
  assert list(out.glob("events.out.tfevents.*"))


# ---------------------------------------------------------------------------------------------
# The two-phase launcher

LAUNCHER = os.path.join(REPO_ROOT, "scripts", "run_pretraining_lamb.sh")


def test_launcher_dry_run_builds_the_nvidia_style_commands(tmp_path):
  proc = subprocess.run(
      ["bash", LAUNCHER, "--dry_run", "--launcher", "mpirun", "--np", "16",
       "--hosts", "a:8,b:8", "--phase1_data", "/d/128", "--phase2_data=/d/512",
       "--output_dir", "/r", "--precision", "fp16"],
      capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  commands = [line[2:].split() for line in proc.stderr.splitlines() if line.startswith("+ ")]
  assert len(commands) == 2
  phase1, phase2 = commands
  assert phase1[:3] == ["mpirun", "-np", "16"] and "-H" in phase1 and "a:8,b:8" in phase1
  for flag in ("--horovod", "--manual_fp16", "--do_train", "--allreduce_post_accumulation",
               "--input_files_dir=/d/128", "--output_dir=/r/phase_1", "--max_seq_length=128",
               "--max_predictions_per_seq=20", "--optimizer_type=lamb"):
    assert flag in phase1, flag
  for flag in ("--input_files_dir=/d/512", "--output_dir=/r/phase_2", "--max_seq_length=512",
               "--max_predictions_per_seq=80", "--init_checkpoint=/r/phase_1/model.ckpt-7038"):
    assert flag in phase2, flag


@pytest.mark.e2e
@pytest.mark.parametrize("precision,flag", [("bf16", "--bf16"), ("fp32", None),
                                            ("auto", "--precision=auto")])
def test_launcher_precision_bf16(precision, flag):
  proc = subprocess.run(
      ["bash", LAUNCHER, "--dry_run", "--launcher", "none", "--phases", "1",
       "--phase1_data", "/d/128", "--output_dir", "/r", "--precision", precision,
       "--python", sys.executable],
      capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  commands = [line[2:].split() for line in proc.stderr.splitlines() if line.startswith("+ ")]
  assert len(commands) == 1
  precision_flags = [a for a in commands[0] if a in ("--bf16", "--manual_fp16", "--amp")
                     or a.startswith("--precision")]
  assert precision_flags == ([flag] if flag else [])


def test_launcher_rejects_unknown_options():
  proc = subprocess.run(["bash", LAUNCHER, "--phase3_data", "x"], capture_output=True,
                        text=True, timeout=60)
  assert proc.returncode == 2 and "unknown option --phase3_data" in proc.stderr


def test_launcher_defaults_to_the_environment_and_says_so():
  # A shell without the environment's bin directory on PATH (the rest of PATH as it is: env.sh
  # finds the environment by the base python and MPI it sees there).
  path = [d for d in os.environ["PATH"].split(os.pathsep) if os.path.abspath(d) != BIN_DIR]
  env = dict(os.environ, PATH=os.pathsep.join(path))
  proc = subprocess.run(["bash", LAUNCHER, "--dry_run", "--np", "2", "--phase1_data", "/d/128",
                         "--phases", "1"], capture_output=True, text=True, timeout=120, env=env)
  assert proc.returncode == 0, proc.stderr
  horovodrun = os.path.join(BIN_DIR, "horovodrun")
  assert "using python %s, launcher %s" % (sys.executable, horovodrun) in proc.stderr
  (command,) = [line[2:].split() for line in proc.stderr.splitlines() if line.startswith("+ ")]
  assert command[:4] == [horovodrun, "-np", "2", sys.executable]
  missing = subprocess.run(["bash", LAUNCHER, "--dry_run", "--phase1_data", "/d", "--phases", "1",
                            "--launcher", "mpirun", "--mpirun", "/no/mpirun"],
                           capture_output=True, text=True, timeout=120, env=env)
  assert missing.returncode == 2 and "/no/mpirun not found" in missing.stderr


def test_launcher_runs_both_phases_and_phase2_starts_from_phase1(data, tmp_path):
  # Phase 2 on the same records packed, as a user packs phase 2's.
  packed = tmp_path / "packed"
  inputs = sorted(str(p) for p in pathlib.Path(data["train_dir"]).glob("*.tfrecord"))
  pack_pretraining_data.pack_files(inputs, [str(packed / os.path.basename(p)) for p in inputs],
                                   num_workers=1)
  out = tmp_path / "results"
  common = ["--python", sys.executable, "--config", data["config"], "--launcher", "none",
            "--output_dir", str(out), "--phase1_data", data["train_dir"],
            "--phase2_data", str(packed), "--save_checkpoints_steps", "2"]
  phases = []
  for n, lr in ((1, "1e-3"), (2, "1e-9")):
    phases += ["--phase%d_seq" % n, str(SEQ), "--phase%d_pred" % n, str(PRED),
               "--phase%d_batch" % n, "4", "--phase%d_accum" % n, "1",
               "--phase%d_steps" % n, "2", "--phase%d_warmup" % n, "1", "--phase%d_lr" % n, lr]
  proc = subprocess.run(["bash", LAUNCHER] + common + phases, capture_output=True, text=True,
                        timeout=300, cwd=REPO_ROOT)
  assert proc.returncode == 0, proc.stderr[-4000:]
  phase1, phase2 = checkpoint_values(out / "phase_1"), checkpoint_values(out / "phase_2")
  assert phase1["global_step"] == 2 and phase2["global_step"] == 2
  # Phase 2 (learning rate ~0) starts from phase 1's weights, not from a fresh initialisation.
  np.testing.assert_allclose(phase2["bert/pooler/dense/kernel"],
                             phase1["bert/pooler/dense/kernel"], atol=1e-6)
  logged = [r["data"] for r in read_dllog(out / "phase_2" / "bert_dllog.json")
            if isinstance(r["step"], int)]
  assert logged and all("sequences_per_update" in d for d in logged)
