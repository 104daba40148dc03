"""scripts/slurm/pretrain.sbatch without a Slurm cluster: its help, its usage errors, and the
per-worker shares it computes from the allocation (a dry run in a Slurm job's environment).

Under a running Slurm: tests/cluster/test_slurm.py.
"""

import os
import subprocess

import pytest

from tests import helpers

pytestmark = pytest.mark.e2e

SBATCH = os.path.join(helpers.REPO_ROOT, "scripts", "slurm", "pretrain.sbatch")


def run(args, env=None, **overrides):
  return subprocess.run(["bash", SBATCH] + list(args), capture_output=True, text=True,
                        timeout=120, cwd=helpers.REPO_ROOT,
                        env=dict(env or os.environ, **overrides))


def slurm_job_env(tmp_path, tasks):
  """The environment of a batch script in an allocation of `tasks` tasks; `srun` on PATH is a
  program that fails if it is ever started (a dry run only prints its command)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(parents=True)
  srun = bin_dir / "srun"
  srun.write_text("#!/bin/sh\necho 'srun started by a dry run' >&2\nexit 99\n")
  srun.chmod(0o755)
  return dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), SLURM_JOB_ID="7",
              SLURM_NTASKS=str(tasks), SLURM_JOB_NODELIST="node[1-2]", SLURM_RESTART_COUNT="0",
              OUTPUT_DIR=str(tmp_path / "out"), PHASE1_DATA="/d/128", PHASE2_DATA="/d/512")


def test_help_shows_the_lines_to_edit_and_the_arguments_left_to_the_user():
  proc = run(["--help"])
  assert proc.returncode == 0, proc.stderr
  for line in ("#SBATCH --signal=USR1@600", "#SBATCH --requeue", "#SBATCH --open-mode=append",
               'PHASE1_GLOBAL_BATCH="${PHASE1_GLOBAL_BATCH:-65536}"', "--precision",
               "--phase1_steps"):
    assert line in proc.stdout, line
  assert "EDIT" in proc.stdout
  # The options the script sets itself are not offered.
  assert "--phase1_accum" not in proc.stdout and "--np " not in proc.stdout


def test_refuses_to_run_outside_a_slurm_job_and_the_options_it_sets(tmp_path):
  env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
  outside = run([], env=env)
  assert outside.returncode == 2
  assert outside.stderr.strip() == ("pretrain.sbatch: submit this script with sbatch (no "
                                    "SLURM_JOB_ID: not inside a Slurm job)")
  for option in ("--np=3", "--phase1_accum=4", "--output_dir=/x"):
    proc = run([option], env=slurm_job_env(tmp_path / option.strip("-=/"), 8))
    assert proc.returncode == 2, proc
    assert proc.stderr.strip() == ("pretrain.sbatch: %s is set by this script: edit its "
                                   "settings instead (--help lists them)" % option.split("=")[0])


def test_the_workers_share_of_nvidia_recipe_on_8_and_on_4_workers(tmp_path):
  # NVIDIA's LAMB recipe on 8 workers: 64 x 128 accumulation (phase 1), 8 x 512 (phase 2), and
  # 7.5e-4 / 5e-4 per worker (x 8 workers: 6e-3 / 4e-3 for the job).
  shares = {}
  for tasks in (8, 4):
    proc = run(["--dry_run"], env=slurm_job_env(tmp_path / str(tasks), tasks))
    assert proc.returncode == 0, proc.stderr
    assert "srun started" not in proc.stderr
    commands = [line[2:].split() for line in proc.stderr.splitlines() if line.startswith("+ ")]
    assert [c[:4] for c in commands] == [["srun", "--mpi=pmix", "--ntasks=%d" % tasks,
                                          "--kill-on-bad-exit=0"]] * 2
    shares[tasks] = [{a.split("=")[0]: a.split("=")[1] for a in c if "=" in a
                      and a.split("=")[0] in ("--train_batch_size", "--num_accumulation_steps",
                                              "--learning_rate")} for c in commands]
    assert "[slurm] job 7 (run 1): %d workers on node[1-2]" % tasks in proc.stdout
  assert shares[8] == [
      {"--train_batch_size": "64", "--num_accumulation_steps": "128", "--learning_rate": "0.00075"},
      {"--train_batch_size": "8", "--num_accumulation_steps": "512", "--learning_rate": "0.0005"}]
  # Half the workers: the same global batch through twice the accumulation, the same job rate.
  assert shares[4] == [
      {"--train_batch_size": "64", "--num_accumulation_steps": "256", "--learning_rate": "0.0015"},
      {"--train_batch_size": "8", "--num_accumulation_steps": "1024", "--learning_rate": "0.001"}]


def test_a_global_batch_the_workers_cannot_split_is_a_usage_error(tmp_path):
  proc = run([], env=slurm_job_env(tmp_path, 3))
  assert proc.returncode == 2
  assert ("phase 1's global batch 65536 is not a multiple of 64 per worker x 3 workers; change "
          "PHASE1_GLOBAL_BATCH or PHASE1_BATCH") in proc.stderr
  assert "srun started" not in proc.stderr
