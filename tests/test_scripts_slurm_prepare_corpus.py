"""scripts/slurm/prepare_corpus.sh and prepare_corpus.sbatch without a Slurm cluster: the help,
the usage errors, the jobs submitted (an `sbatch` and a `scancel` on PATH that record their
arguments), the dry run, and one array task's share of a stage in a Slurm job's environment.

Under a running Slurm: tests/cluster/test_slurm_corpus.py.
"""

import json
import os
import subprocess
import sys

import pytest

from tests import corpus_data
from tests import helpers
from tests.test_prepare_corpus import small_flags
from utils.corpus import manifest

pytestmark = pytest.mark.e2e

SUBMIT = os.path.join(helpers.REPO_ROOT, "scripts", "slurm", "prepare_corpus.sh")
BATCH_SCRIPT = os.path.join(helpers.REPO_ROOT, "scripts", "slurm", "prepare_corpus.sbatch")
# An sbatch / scancel that appends its arguments and the environment the jobs would get to
# $FAKE_SLURM_LOG; sbatch prints job id 100 + its call's number (as --parsable does), and fails
# its call number $FAKE_SBATCH_FAILS.
FAKE_COMMAND = """\
#!%s
import json, os, sys
log = os.environ["FAKE_SLURM_LOG"]
with open(log, "a") as writer:
  writer.write(json.dumps(dict(command=os.path.basename(sys.argv[0]), argv=sys.argv[1:],
                               REPO=os.environ.get("REPO"), PYTHON=os.environ.get("PYTHON")))
               + "\\n")
with open(log) as reader:
  calls = sum(1 for line in reader if json.loads(line)["command"] == "sbatch")
if os.path.basename(sys.argv[0]) == "sbatch":
  if str(calls) == os.environ.get("FAKE_SBATCH_FAILS"):
    sys.exit("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy")
  print("%%d;cluster" %% (100 + calls))
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory):
  return corpus_data.write_inputs(str(tmp_path_factory.mktemp("inputs")))


def fake_slurm_env(tmp_path, **overrides):
  """The environment of a login node whose sbatch and scancel record their calls; no Slurm job's
  variables."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(parents=True, exist_ok=True)
  for command in ("sbatch", "scancel"):
    (bin_dir / command).write_text(FAKE_COMMAND % sys.executable)
    (bin_dir / command).chmod(0o755)
  env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
  env.update(PATH="%s:%s" % (bin_dir, os.environ["PATH"]), FAKE_SLURM_LOG=str(tmp_path / "calls"),
             PYTHON=sys.executable, LOG_DIR=str(tmp_path), TASKS="4", CPUS_PER_TASK="2",
             TIME_LIMIT="1:00:00")
  env.update({key: str(value) for key, value in overrides.items()})
  return env


def calls(tmp_path):
  """The recorded calls of sbatch and scancel, in order (dicts: command, argv, REPO, PYTHON)."""
  path = tmp_path / "calls"
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines()]


def run(script, args, env):
  return subprocess.run(["bash", script] + list(args), capture_output=True, text=True,
                        timeout=120, cwd=helpers.REPO_ROOT, env=env)


def test_help_shows_the_lines_to_edit_and_the_flags_it_sets():
  proc = run(SUBMIT, ["--help"], dict(os.environ))
  assert proc.returncode == 0, proc.stderr
  for text in ('TASKS="${TASKS:-16}"', 'CPUS_PER_TASK="${CPUS_PER_TASK:-8}"',
               'TIME_LIMIT="${TIME_LIMIT:-24:00:00}"', 'LOG_DIR="${LOG_DIR:-$PWD}"', "EDIT",
               "--dry_run", "--kill-on-invalid-dep=yes",
               "--stage, --task_index, --num_tasks, --count_units"):
    assert text in proc.stdout, text
  batch_help = run(BATCH_SCRIPT, ["--help"], dict(os.environ))
  assert batch_help.returncode == 0, batch_help.stderr
  for text in ("#SBATCH --requeue", "#SBATCH --open-mode=append", "CPUS_PER_TASK", "EDIT",
               "prepare_corpus.py --help"):
    assert text in batch_help.stdout, text


@pytest.mark.parametrize("args, overrides, message", [
    (["--stage=records"], {}, "prepare_corpus.sh: --stage is set by this script"),
    (["--num_tasks=4"], {}, "prepare_corpus.sh: --num_tasks is set by this script"),
    (["--task_index=1"], {}, "prepare_corpus.sh: --task_index is set by this script"),
    ([], {"TASKS": "0"}, "prepare_corpus.sh: TASKS must be a positive integer, got '0'"),
    ([], {"CPUS_PER_TASK": "all"},
     "prepare_corpus.sh: CPUS_PER_TASK must be a positive integer, got 'all'"),
    (["--phases=128"], {}, "prepare_corpus.py: error: --phases: '128' is not LENGTH:PREDICTIONS"),
    (["--input=/nonexistent/corpus.txt"], {},
     "prepare_corpus.py: error: /nonexistent/corpus.txt: the input: "),
])
def test_a_usage_error_submits_nothing(written, tmp_path, args, overrides, message):
  env = fake_slurm_env(tmp_path, **overrides)
  proc = run(SUBMIT, small_flags(written["inputs"], tmp_path / "out") + args, env)
  assert proc.returncode == 2, proc.stderr
  assert any(line.startswith(message) for line in proc.stderr.splitlines()), proc.stderr
  assert calls(tmp_path) == [] and proc.stdout == ""
  assert not (tmp_path / "out").exists()


def test_one_array_job_per_stage_each_after_the_one_before_then_the_check(written, tmp_path):
  flags = small_flags(written["inputs"], tmp_path / "out", pack=True)
  proc = run(SUBMIT, flags, fake_slurm_env(tmp_path))
  assert proc.returncode == 0, proc.stderr
  submitted = calls(tmp_path)
  assert [c["command"] for c in submitted] == ["sbatch"] * 6
  # Three inputs, three shards, 2 phases x 2 splits x 3 shards of records and of packed records:
  # as many tasks as units, 4 (TASKS) at most; the check one job.
  stages = [("extract", 3, "0-2"), ("shard", 3, "0-2"), ("vocab", 1, "0-0"),
            ("records", 12, "0-3"), ("pack", 12, "0-3"), ("check", 1, None)]
  for index, (call, (stage, units, array)) in enumerate(zip(submitted, stages)):
    output = ("prepare-corpus-%s-%%A_%%a.out" % stage if array else
              "prepare-corpus-%s-%%j.out" % stage)
    expected = ["--parsable", "--job-name=prepare-corpus-" + stage, "--cpus-per-task=2",
                "--time=1:00:00"]
    expected += (["--array=" + array] if array else []) + ["--output=%s/%s" % (tmp_path, output)]
    if index:
      expected += ["--dependency=afterok:%d" % (100 + index), "--kill-on-invalid-dep=yes"]
    assert call["argv"] == expected + [BATCH_SCRIPT, "--stage=" + stage] + flags, stage
    assert (call["REPO"], call["PYTHON"]) == (helpers.REPO_ROOT, sys.executable)
    tasks = int(array.split("-")[1]) + 1 if array else 1
    assert ("prepare_corpus.sh: %s: job %d, %d task(s) for %d unit(s)" % (
        stage, 101 + index, tasks, units)) in proc.stdout.splitlines()
  assert proc.stdout.splitlines()[-1].startswith("prepare_corpus.sh: the check job 106 ends "
                                                 "COMPLETED once every unit is done")
  # The dry run prints the same commands, the job ids as <stage>, and submits nothing.
  dry = run(SUBMIT, flags + ["--dry_run"], fake_slurm_env(tmp_path / "dry", LOG_DIR=tmp_path))
  assert dry.returncode == 0, dry.stderr
  assert calls(tmp_path / "dry") == []
  shown = [line[2:].replace("'", "").split(" ") for line in dry.stdout.splitlines()
           if line.startswith("+ ")]
  assert len(shown) == len(submitted)
  for index, (argv, call) in enumerate(zip(shown, submitted)):
    expected = ["sbatch"] + call["argv"]
    if index:
      expected = [arg.replace("afterok:%d" % (100 + index), "afterok:<%s>" % stages[index - 1][0])
                  for arg in expected]
    assert argv == expected
  assert dry.stdout.splitlines()[-1] == "prepare_corpus.sh: a dry run: nothing submitted"
  assert not (tmp_path / "out").exists()


def test_a_failed_submission_cancels_the_jobs_submitted_before_it(written, tmp_path):
  env = fake_slurm_env(tmp_path, FAKE_SBATCH_FAILS=3)
  proc = run(SUBMIT, small_flags(written["inputs"], tmp_path / "out"), env)
  assert proc.returncode == 1
  assert "Job violates accounting/QOS policy" in proc.stderr
  assert proc.stderr.strip().splitlines()[-2:] == [
      "prepare_corpus.sh: sbatch failed for the stage vocab (its error is above)",
      "prepare_corpus.sh: cancelling the jobs submitted before it: 101 102"]
  assert [(c["command"], c["argv"]) for c in calls(tmp_path)][-1] == ("scancel", ["101", "102"])


def slurm_job_env(tmp_path, **overrides):
  """The environment of array task 1 of 2 in a Slurm job (no sbatch needed)."""
  env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
  env.update(SLURM_JOB_ID="8", SLURM_ARRAY_JOB_ID="7", SLURM_ARRAY_TASK_ID="1",
             SLURM_ARRAY_TASK_COUNT="2", SLURM_ARRAY_TASK_MIN="0", SLURM_CPUS_PER_TASK="1",
             SLURM_JOB_NODELIST="node2", REPO=helpers.REPO_ROOT, PYTHON=sys.executable)
  env.update({key: str(value) for key, value in overrides.items()})
  return env


def test_an_array_task_does_its_share_of_a_stage(written, tmp_path):
  out = tmp_path / "out"
  flags = small_flags(written["inputs"], out, num_workers=None)
  proc = run(BATCH_SCRIPT, ["--stage=extract"] + flags, slurm_job_env(tmp_path))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.splitlines()[0] == (
      "[slurm] job 7 task 1 of 2 (run 1): on node2: prepare_corpus.py --stage=extract "
      + " ".join(flags))
  assert proc.stdout.splitlines()[-1] == "[slurm] job 7 task 1 of 2 (run 1): finished (exit 0)"
  assert "prepare_corpus: extract: 3 units, 1 of this task (0 done earlier)" in proc.stderr
  # Task 1 of 2 did the extract unit of index 1 (the second input), nothing else.
  entries = [manifest.read_entry(str(out), "extract", name[:-len(".json")])
             for name in os.listdir(str(out / "manifest" / "extract"))]
  assert [(e["task"], e["settings"]["input"]) for e in entries] == [(1, written["inputs"][1])]
  # Requeued (run 2), it finds its unit done; the next stage refuses to start before this one is
  # done by every task (exit 2, not requeued).
  again = run(BATCH_SCRIPT, ["--stage=extract"] + flags,
              slurm_job_env(tmp_path, SLURM_RESTART_COUNT=1))
  assert again.returncode == 0, again.stderr[-3000:]
  assert "extract: 3 units, 1 of this task (1 done earlier)" in again.stderr
  assert again.stdout.splitlines()[-1] == "[slurm] job 7 task 1 of 2 (run 2): finished (exit 0)"
  shard = run(BATCH_SCRIPT, ["--stage=shard"] + flags, slurm_job_env(tmp_path))
  assert shard.returncode == 2
  assert "--stage=shard: the stage extract is not done with these settings" in shard.stderr
  assert "a stage before is not done (exit 2, the error is above)" in shard.stdout


def test_the_batch_script_refuses_to_run_outside_a_job_and_the_task_flags(tmp_path):
  env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
  outside = run(BATCH_SCRIPT, ["--stage=extract"], env)
  assert outside.returncode == 2
  assert outside.stderr.strip() == (
      "prepare_corpus.sbatch: submit this script with sbatch, or scripts/slurm/prepare_corpus.sh "
      "for every stage (no SLURM_JOB_ID: not inside a Slurm job)")
  for flag in ("--task_index=0", "--num_tasks=2"):
    proc = run(BATCH_SCRIPT, [flag], slurm_job_env(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.startswith("prepare_corpus.sbatch: %s is set by Slurm's array" %
                                  flag.split("=")[0])
