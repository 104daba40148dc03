"""scripts/slurm/prepare_corpus.sh under a running Slurm (tests/cluster/slurm.py: slurmctld on
hostA, a slurmd on each of the 2-host cluster's hosts), run as a user runs it, on hostA, with the
flags of a one-machine `prepare_corpus.py` run; TASKS=2, so a stage of two units or more is an
array of two tasks (a whole node each: they can run on both hosts at once).

- Run to the end: every job COMPLETED, the two tasks of each stage shared its units, and the
  output is byte for byte that of `prepare_corpus.py` with the same flags on one machine.
- One task of the records stage requeued mid-way (`scontrol requeue JOB_TASK`, what Slurm does to
  a task of a lost node): after Slurm's hold it runs again and does only its units that were not
  done; no unit done before the requeue is done again (its manifest entry untouched), the check
  job passes, the bytes are those of one machine.

The tests' inputs are tests/corpus_data.py's, at its small sizes (a stage's unit takes
milliseconds); in the requeue test the python the jobs run (`PYTHON`) is a wrapper that holds
each records unit RECORDS_UNIT_SECONDS between writing its files (under their temporary names)
and publishing them, so the requeue lands while the task has a unit half done.
"""

import collections
import os
import re
import sys
import time

import pytest

from tests import corpus_data
from tests import helpers
from tests.cluster import slurm as slurm_lib
from tests.test_prepare_corpus import small_flags
from utils.corpus import manifest

pytestmark = pytest.mark.e2e

SUBMIT = os.path.join(helpers.REPO_ROOT, "scripts", "slurm", "prepare_corpus.sh")
PREPARE_CORPUS = os.path.join(helpers.REPO_ROOT, "prepare_corpus.py")
# 2 phases x 2 splits x 4 shards: 16 records units, 8 a task.
SETTINGS = dict(num_shards=4, dupe_factor=2)
RECORDS_UNITS_PER_TASK = 8
RECORDS_UNIT_SECONDS = 0.5
STAGES = ("extract", "shard", "vocab", "records", "check")
SUBMITTED = re.compile(r"^prepare_corpus\.sh: (\w+): job (\d+), (\d+) task\(s\) for (\d+) unit",
                       re.M)

# The jobs' python in the requeue test: prepare_corpus.py as it is, each records unit held
# between its work and its publication.
SLOW_RECORDS_PYTHON = """\
#!%(python)s
import os, runpy, sys, time
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
from utils.runtime import cli  # before anything else, as prepare_corpus.py imports it
from utils.corpus import stages
work = stages.work
def slow_work(config, unit):
  result = work(config, unit)
  if unit.stage == "records":
    time.sleep(%(seconds)r)
  return result
stages.work = slow_work
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
  return corpus_data.write_inputs(str(tmp_path_factory.mktemp("corpus-inputs")))["inputs"]


@pytest.fixture(scope="module")
def one_machine(inputs, tmp_path_factory):
  """{path: bytes} of `prepare_corpus.py` with the same flags on this machine, no Slurm."""
  out = tmp_path_factory.mktemp("one-machine") / "out"
  helpers.run_python([PREPARE_CORPUS] + small_flags(inputs, out, **SETTINGS))
  return corpus_data.output_files(out)


def submit(slurm, inputs, out, python=sys.executable):
  """Runs the submit script on hostA, as a user does; returns {stage: (job id, tasks, units)}."""
  env = slurm.env(TASKS="2", CPUS_PER_TASK="1", TIME_LIMIT="10", PYTHON=python,
                  LOG_DIR=os.path.dirname(str(out)))
  proc = slurm.run(slurm_lib.CONTROLLER, ["bash", SUBMIT] + small_flags(inputs, out, **SETTINGS),
                   timeout=120, cwd=os.path.dirname(str(out)), env=env)
  jobs = {stage: (int(job), int(tasks), int(units))
          for stage, job, tasks, units in SUBMITTED.findall(proc.stdout)}
  assert tuple(jobs) == STAGES, proc.stdout + proc.stderr
  return jobs


def array_tasks(slurm, job_id):
  """{task id: `scontrol show job` fields} of every task of an array job (or the job itself,
  as task None)."""
  proc = slurm.run(slurm_lib.CONTROLLER, ["scontrol", "show", "job", "-o", str(job_id)],
                   timeout=15)
  tasks = {}
  for line in proc.stdout.splitlines():
    if line.strip():
      fields = slurm_lib.parse_scontrol(line)
      tasks[fields.get("ArrayTaskId")] = fields
  return tasks


def job_output(out, stage, job_id, task):
  """The output file of one task of a stage's array job (LOG_DIR: beside OUT)."""
  path = os.path.join(os.path.dirname(str(out)), "prepare-corpus-%s-%d_%d.out" % (
      stage, job_id, task))
  with open(path) as reader:
    return reader.read()


def done_entries(out):
  """{(stage, unit): (task, mtime in ns)} of every done unit in the manifest."""
  found = {}
  for stage in STAGES:
    directory = os.path.join(str(out), "manifest", stage)
    names = os.listdir(directory) if os.path.isdir(directory) else []
    for name in [name for name in names if name.endswith(".json")]:
      entry = manifest.read_entry(str(out), stage, name[:-len(".json")])
      if entry and entry["status"] == manifest.STATUS_DONE:
        found[stage, entry["unit"]] = (entry.get("task"), os.stat(os.path.join(
            directory, name)).st_mtime_ns)
  return found


def assert_all_completed(slurm, jobs, restarted=()):
  """Every task of every stage's job COMPLETED, exit 0; those of `restarted` ((stage, task))
  run twice, the others once."""
  for stage, (job_id, tasks, _) in jobs.items():
    found = array_tasks(slurm, job_id)
    expected = [None] if stage == "check" else [str(task) for task in range(tasks)]
    assert sorted(found, key=str) == sorted(expected, key=str), (stage, found)
    for task, fields in found.items():
      restarts = "1" if (stage, None if task is None else int(task)) in restarted else "0"
      assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == (
          "COMPLETED", "0:0", restarts), (stage, task, fields)


def test_array_jobs_write_the_bytes_of_one_machine(slurm, inputs, one_machine, tmp_path):
  out = tmp_path / "out"
  start = time.time()
  jobs = submit(slurm, inputs, out)
  # As many tasks as units, two at most: 3 inputs, 4 shards, 1 vocabulary, 16 records units.
  assert {stage: job[1:] for stage, job in jobs.items()} == {
      "extract": (2, 3), "shard": (2, 4), "vocab": (1, 1), "records": (2, 16), "check": (1, 1)}
  slurm.wait_for_job(jobs["check"][0], slurm_lib.JOB_STATES_DONE, timeout=300)
  seconds = time.time() - start
  assert_all_completed(slurm, jobs)
  assert corpus_data.output_files(out) == one_machine
  # Each task did its share (units i mod 2).
  shares = collections.Counter((stage, task) for (stage, _), (task, _) in done_entries(
      out).items())
  assert shares == {("extract", 0): 2, ("extract", 1): 1, ("shard", 0): 2, ("shard", 1): 2,
                    ("vocab", 0): 1, ("records", 0): 8, ("records", 1): 8, ("check", 0): 1}
  assert "finished (exit 0)" in job_output(out, "records", jobs["records"][0], 1)
  print("five jobs, submit to the check's end: %.1f s" % seconds)


def wait_for_records_of_task(out, count, task, slurm, job_id, timeout=300):
  """Waits until `task` of the records job has published `count` units; returns their number."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    done = [key for key, (owner, _) in done_entries(out).items()
            if key[0] == "records" and owner == task]
    if len(done) >= count:
      return len(done)
    assert int(slurm.job(job_id)["Restarts"]) == 0
    time.sleep(0.05)
  raise AssertionError("task %d of job %s had not published %d records units after %d s" % (
      task, job_id, count, timeout))


def test_a_task_requeued_mid_way_redoes_only_its_units_not_done(slurm, inputs, one_machine,
                                                                tmp_path):
  slow_python = tmp_path / "slow-records-python"
  slow_python.write_text(SLOW_RECORDS_PYTHON % dict(python=sys.executable,
                                                    seconds=RECORDS_UNIT_SECONDS))
  slow_python.chmod(0o755)
  out = tmp_path / "out"
  jobs = submit(slurm, inputs, out, python=str(slow_python))
  records_job = jobs["records"][0]
  killed = "%d_1" % records_job
  wait_for_records_of_task(out, 2, 1, slurm, killed)
  slurm.run(slurm_lib.CONTROLLER, ["scontrol", "requeue", killed])
  requeued = time.time()
  slurm.wait_for_job(killed, ["PENDING"], timeout=60, restarts=1)
  before = done_entries(out)
  done_by_killed = len([key for key, (task, _) in before.items()
                        if key[0] == "records" and task == 1])
  assert 2 <= done_by_killed < RECORDS_UNITS_PER_TASK
  slurm.wait_for_job(killed, ["RUNNING", "COMPLETED"], slurm_lib.CRED_EXPIRE + 60, restarts=1)
  held = time.time() - requeued
  slurm.wait_for_job(jobs["check"][0], slurm_lib.JOB_STATES_DONE, timeout=300)
  assert_all_completed(slurm, jobs, restarted=[("records", 1)])
  # Its second run did the units it had not published, nothing else: every unit done before the
  # requeue (of either task, of every stage) is untouched.
  output = job_output(out, "records", records_job, 1)
  runs = re.findall(r"records: 16 units, 8 of this task \((\d+) done earlier\)", output)
  assert len(runs) == 2 and runs[0] == "0", output[-3000:]
  assert done_by_killed <= int(runs[1]) < RECORDS_UNITS_PER_TASK, output[-3000:]
  assert "[slurm] job %d task 1 of 2 (run 2): finished (exit 0)" % records_job in output
  # The requeue's SIGTERM stopped the unit in progress, which removed what it had written (one
  # line); the second run did it again.
  assert ("prepare_corpus.py: stopped by SIGTERM: the work in progress removed; run the same "
          "command to continue") in output, output[-3000:]
  after = done_entries(out)
  assert {key: after.get(key) for key in before} == before
  assert len([key for key in after if key[0] == "records"]) == 2 * RECORDS_UNITS_PER_TASK
  assert corpus_data.output_files(out) == one_machine
  assert not [name for _, _, names in os.walk(str(out)) for name in names
              if name.endswith(manifest.TEMP_SUFFIX)]
  print("requeued after %d of its %d records units; Slurm's hold: %.0f s" % (
      done_by_killed, RECORDS_UNITS_PER_TASK, held))
