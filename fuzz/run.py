"""Runs the fuzz targets (fuzz/target_*.py) under atheris, one process each, and reports.

  python -m fuzz.run --seconds=600                 # every target for 10 minutes (make fuzz)
  python -m fuzz.run --targets=torch_pickle --runs=2000 --seed=1   # a short, fixed-seed pass

Each target's corpus grows in OUT_DIR/corpus/NAME across runs; an input that crashed, hung or
broke a rule (fuzz/harness.py) is saved under OUT_DIR/findings/NAME/. A line per target gives
the inputs run, the seconds and the findings; the exit code is 1 when any target had a finding,
2 for a bad flag, else 0. A finding, once fixed, is copied to fuzz/regressions/NAME/ so that
tests/test_fuzz.py replays it for good.
"""

import argparse
import glob
import os
import re
import subprocess
import sys

from fuzz import harness

REPO_ROOT = os.path.dirname(harness.FUZZ_DIR)
# A generous memory ceiling for the fuzzer's process: TensorFlow's import alone takes ~0.6 GB;
# the per-input bound is the harness's traced-memory rule.
RSS_LIMIT_MB = 3072
# Seconds one input may take before libFuzzer calls it a hang.
INPUT_TIMEOUT_SECONDS = 30

_DONE = re.compile(r"Done (\d+) runs in (\d+) second")


def parse_args(argv):
  parser = argparse.ArgumentParser(prog="python -m fuzz.run", description=__doc__.split("\n")[0])
  parser.add_argument("--targets", default="all",
                      help="comma-separated target names, or 'all' (%s)"
                      % ", ".join(harness.target_names()))
  parser.add_argument("--seconds", type=int, default=0,
                      help="time per target (libFuzzer's -max_total_time); 0: no time limit")
  parser.add_argument("--runs", type=int, default=0,
                      help="inputs per target (libFuzzer's -runs); 0: no count limit")
  parser.add_argument("--seed", type=int, default=0, help="libFuzzer's -seed; 0: random")
  parser.add_argument("--out_dir", default=os.path.join(REPO_ROOT, "fuzz-out"),
                      help="where corpora and findings go (default: %(default)s)")
  args = parser.parse_args(argv)
  known = harness.target_names()
  names = known if args.targets == "all" else [n for n in args.targets.split(",") if n]
  unknown = [n for n in names if n not in known]
  if unknown or not names:
    parser.error("--targets: unknown target(s) %s; known: %s" % (", ".join(unknown) or "(none)",
                                                                 ", ".join(known)))
  if args.seconds <= 0 and args.runs <= 0:
    parser.error("give --seconds or --runs (or both), so that each target ends")
  if args.seconds < 0 or args.runs < 0 or args.seed < 0:
    parser.error("--seconds, --runs and --seed take numbers >= 0")
  args.names = names
  return args


def fuzz_command(name, args):
  """The worker's command line for target `name`."""
  corpus = os.path.join(args.out_dir, "corpus", name)
  findings = os.path.join(args.out_dir, "findings", name)
  os.makedirs(findings, exist_ok=True)
  command = [sys.executable, "-m", "fuzz.worker", name, corpus,
             "-artifact_prefix=%s%s" % (findings, os.sep),
             "-rss_limit_mb=%d" % RSS_LIMIT_MB, "-timeout=%d" % INPUT_TIMEOUT_SECONDS,
             # No rereading of the corpus folder every second (libFuzzer's default, for jobs
             # that share one): each target has its own, and what a reread runs comes on top
             # of -runs (a fixed-seed pass in the suite once counted other than its 300 inputs).
             "-reload=0", "-print_final_stats=1"]
  if args.seconds:
    command.append("-max_total_time=%d" % args.seconds)
  if args.runs:
    command.append("-runs=%d" % args.runs)
  if args.seed:
    command.append("-seed=%d" % args.seed)
  return command, findings


def summary_line(name, returncode, output, findings):
  """One line for a target's run: inputs, seconds, findings (the files saved)."""
  done = _DONE.findall(output)
  runs, seconds = (int(done[-1][0]), int(done[-1][1])) if done else (None, None)
  saved = sorted(glob.glob(os.path.join(findings, "*")))
  if returncode == 0 and not saved:
    return True, "%s: %s inputs in %s s, no finding" % (name, runs, seconds)
  return False, "%s: FINDING (exit %d) after %s inputs; saved: %s" % (
      name, returncode, runs, ", ".join(saved) or "nothing")


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  environment = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get(
      "PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")
  clean = True
  for name in args.names:
    command, findings = fuzz_command(name, args)
    result = subprocess.run(command, cwd=REPO_ROOT, env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", check=False)
    ok, line = summary_line(name, result.returncode, result.stdout, findings)
    if not ok:
      sys.stdout.write(result.stdout[-4000:] + "\n")
    print(line, flush=True)
    clean = clean and ok
  return 0 if clean else 1


if __name__ == "__main__":
  sys.exit(main())
