"""scripts/launcher_output.py: horovodrun's own traceback left out after a failed worker's line,
in-process; and scripts/run_pretraining_lamb.sh with a stand-in horovodrun that ends as the real
one does after a worker's failure (its output written by hand from a real run's)."""

import os
import stat
import subprocess
import sys

import pytest

from scripts import launcher_output

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAMB_SCRIPT = os.path.join(REPO_ROOT, "scripts", "run_pretraining_lamb.sh")

WORKER_LINE = "[1]<stderr>:run_pretraining.py: error: bad input record: /d/part-1: record 3\n"
# What horovodrun 0.28.1 prints after a worker exits 2 (paths shortened, some frames left out).
HOROVODRUN_TRACEBACK = """Traceback (most recent call last):
  File "/venv/bin/horovodrun", line 8, in <module>
    sys.exit(run_commandline())
             ^^^^^^^^^^^^^^^^^
  File "/venv/horovod/runner/launch.py", line 837, in run_commandline
    _run(args)
  File "/venv/horovod/runner/launch.py", line 827, in _run
    return _run_static(args)
           ^^^^^^^^^^^^^^^^^
  File "/venv/horovod/runner/launch.py", line 685, in _run_static
    _launch_job(args, settings, nics, command)
  File "/venv/horovod/runner/gloo_run.py", line 284, in launch_gloo
    raise RuntimeError('Horovod detected that one or more processes exited with non-zero '
RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus \
causing the job to be terminated. The first process to do so was:
Process name: 1
Exit code: 2

"""


def filtered(lines, verbose=False):
  output = launcher_output.LauncherOutput(verbose=verbose)
  shown = []
  for line in lines:
    shown += output.line(line)
  return shown + output.end()


def test_horovodrun_traceback_after_the_workers_line_is_left_out():
  lines = ["Process 1 exit with status code 2.\n", WORKER_LINE] + \
      HOROVODRUN_TRACEBACK.splitlines(True)
  assert filtered(lines) == lines[:2]
  assert filtered(lines, verbose=True) == lines


def test_a_traceback_followed_by_worker_lines_is_passed_on_whole():
  # Not horovodrun's last word: the job went on, so the held lines are printed, in order.
  lines = ["[0]<stdout>:a\n", "Traceback (most recent call last):\n", "  File \"x\", line 1\n",
           "ValueError: y\n", "[0]<stderr>:b\n", "c\n"]
  assert filtered(lines) == lines
  # horovodrun's traceback for anything but a failed worker (here a bad option) is its only word.
  own = ["Traceback (most recent call last):\n", "ValueError: -np must be positive\n"]
  assert filtered(own) == own
  # A worker's own traceback carries its prefix and is never held.
  worker = ["[0]<stderr>:Traceback (most recent call last):\n", "[0]<stderr>:  File \"x\"\n"]
  assert filtered(worker) == worker


@pytest.mark.e2e
def test_the_lamb_script_hides_horovodruns_traceback_unless_verbose(tmp_path):
  (tmp_path / "stderr.txt").write_text(WORKER_LINE + HOROVODRUN_TRACEBACK)
  fake = tmp_path / "horovodrun"
  fake.write_text("#!/bin/sh\necho 'Process 1 exit with status code 2.'\ncat %s >&2\nexit 1\n"
                  % (tmp_path / "stderr.txt"))
  fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
  command = ["bash", LAMB_SCRIPT, "--launcher", "horovodrun", "--horovodrun", str(fake),
             "--python", sys.executable, "--np", "2", "--phases", "1", "--phase1_data", "/d",
             "--output_dir", str(tmp_path / "out")]
  for verbose in (False, True):
    proc = subprocess.run(command + (["--verbose"] if verbose else []), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "Process 1 exit with status code 2.\n"
    lines = proc.stderr.splitlines()
    launched = [line for line in lines if line.startswith("+ ")]
    assert len(launched) == 1 and ("--verbose" in launched[0].split()) is verbose
    assert WORKER_LINE.rstrip("\n") in lines
    if not verbose:
      assert lines[-1] == WORKER_LINE.rstrip("\n")
    assert ("Traceback (most recent call last):" in proc.stderr) is verbose
