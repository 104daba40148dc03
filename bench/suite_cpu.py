"""Where the test suite's CPU time goes: per test module, per test, per program it started.

  $PY bench/suite_cpu.py [--workers 2] [--top 20] [-- PYTEST_ARGS...]

Runs pytest (as `make test` does: `-n WORKERS`, or one process with `--workers 0`) with a
`sitecustomize` on PYTHONPATH that makes every Python process the suite starts (scripts, launchers'
workers, helper programs, the pytest workers themselves) record, when it exits, its own user + system
CPU seconds, its program and the test that started it (pytest's PYTEST_CURRENT_TEST, which the
processes inherit). Then prints the totals: the suite's wall time, the CPU of all its processes
(`os.times` of the children), the share recorded per Python program, and the modules and tests
that cost the most CPU.

On a 2-core box the suite is CPU-bound once both pytest workers are busy: its wall time is at least
total CPU / 2, so CPU, not wall time, is what a change to the tests must cut (docs/TESTING.md).
Not recorded: processes killed outright (SIGKILL skips their exit), processes started over ssh
(the multi-node tests' hosts) and non-Python programs (mpirun, orted, sshd, git, make): the
difference between the total and the recorded sum.
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Written into the temporary sitecustomize.py; RECORD_DIR is filled in.
_SITECUSTOMIZE = '''
import atexit, json, os, resource, sys


def _record_cpu():
  usage = resource.getrusage(resource.RUSAGE_SELF)
  record = {"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" (")[0],
            "program": os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python",
            "cpu": usage.ru_utime + usage.ru_stime}
  try:
    with open(os.path.join(%(record_dir)r, "%%d.json" %% os.getpid()), "w") as f:
      json.dump(record, f)
  except OSError:
    pass


atexit.register(_record_cpu)
'''


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--workers", type=int, default=2,
                      help="pytest-xdist workers (0: one process), as make test's PYTEST_WORKERS")
  parser.add_argument("--top", type=int, default=20, help="modules and tests listed")
  parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: all)")
  return parser.parse_args(argv)


def summarize(records, top):
  """Aggregates the per-process records.

  Args:
    records: list of {"test": nodeid or "", "program": name, "cpu": seconds}.
    top: rows per table.

  Returns:
    dict: "recorded" (CPU seconds of all records), "programs" [(program, processes, seconds)],
    "modules" [(module, seconds)], "tests" [(test, processes, seconds)], each by descending
    seconds, at most `top` rows (programs: all).
  """
  programs = collections.defaultdict(lambda: [0, 0.0])
  modules = collections.defaultdict(float)
  tests = collections.defaultdict(lambda: [0, 0.0])
  for record in records:
    programs[record["program"]][0] += 1
    programs[record["program"]][1] += record["cpu"]
    test = record["test"] or "(the pytest processes: in-process tests and collection)"
    modules[test.split("::")[0]] += record["cpu"]
    tests[test][0] += 1
    tests[test][1] += record["cpu"]

  def ranked(table):
    return sorted(table.items(), key=lambda item: -(item[1][1] if isinstance(item[1], list)
                                                     else item[1]))

  return {"recorded": sum(record["cpu"] for record in records),
          "programs": [(name, n, cpu) for name, (n, cpu) in ranked(programs)],
          "modules": ranked(modules)[:top],
          "tests": [(name, n, cpu) for name, (n, cpu) in ranked(tests)[:top]]}


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  with tempfile.TemporaryDirectory(prefix="suite_cpu.") as work:
    record_dir = os.path.join(work, "records")
    os.mkdir(record_dir)
    with open(os.path.join(work, "sitecustomize.py"), "w") as f:
      f.write(_SITECUSTOMIZE % {"record_dir": record_dir})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [work] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.pop("PYTEST_CURRENT_TEST", None)  # run from a test: its processes name their own tests
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if args.workers:
      command += ["-n", str(args.workers)]
    command += args.pytest_args
    before = os.times()
    start = time.time()
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    wall = time.time() - start
    after = os.times()
    records = []
    for name in os.listdir(record_dir):
      with open(os.path.join(record_dir, name)) as f:
        records.append(json.load(f))
  total = (after.children_user - before.children_user
           + after.children_system - before.children_system)
  summary = summarize(records, args.top)
  print("pytest exit %d; %s" % (proc.returncode, proc.stdout.strip().splitlines()[-1]
                                if proc.stdout.strip() else "no output"))
  print("wall %.0f s; CPU of every process %.0f s (%.2f cores busy on average); recorded in %d "
        "Python processes: %.0f s" % (wall, total, total / max(wall, 1e-9), len(records),
                                      summary["recorded"]))
  print("\nCPU s  processes  program")
  for name, count, cpu in summary["programs"]:
    print("%6.0f  %9d  %s" % (cpu, count, name))
  print("\nCPU s  module")
  for name, cpu in summary["modules"]:
    print("%6.0f  %s" % (cpu, name))
  print("\nCPU s  processes  test")
  for name, count, cpu in summary["tests"]:
    print("%6.0f  %9d  %s" % (cpu, count, name))
  return proc.returncode


if __name__ == "__main__":
  sys.exit(main())
