"""Keeps a pretraining job alive: relaunches it after a lost worker or host (docs/LONG_RUNS.md).

  python scripts/supervise.py --max_restarts=3 --backoff_secs=30 --min_workers=4 -- \\
      horovodrun -np 8 -H node1:4,node2:4 python run_pretraining.py --output_dir=... ...

Exit 0 and 2 (bad input, full disk) and 75 (stopped by a signal, checkpoint written) end the
supervision with that status; any other failure (a lost rank or host, a kill) relaunches the same
command, which resumes from the newest checkpoint of its --output_dir, after an exponential
back-off, at most --max_restarts times. With --min_workers the hosts of -H are probed before a
relaunch; dead ones are dropped and --num_accumulation_steps and --learning_rate rewritten so that
the global batch and the job's learning rate stay the same. SIGTERM / SIGINT / SIGUSR1 to the
supervisor go to the job's workers on this machine (the graceful stop, exit 75; the launcher when
none is found), and nothing is relaunched after them. Needs no TensorFlow.
"""

import argparse
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

from utils.core import errors  # noqa: E402
from scripts import process_launcher  # noqa: E402
from scripts import supervisor  # noqa: E402

PROGRAM = "supervise.py"


def parse_args(argv):
  parser = argparse.ArgumentParser(
      prog=PROGRAM, description=__doc__.split("\n\n")[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--max_restarts", type=int, default=3,
                      help="relaunches allowed after failures (0: none; default 3)")
  parser.add_argument("--backoff_secs", type=float, default=10.0,
                      help="wait before the first relaunch; doubled for each next (default 10)")
  parser.add_argument("--max_backoff_secs", type=float, default=600.0,
                      help="the longest wait between relaunches (default 600)")
  parser.add_argument("--min_workers", type=int, default=None,
                      help="continue on the hosts that still answer while at least this many "
                           "workers remain (default: always relaunch the same command)")
  parser.add_argument("--probe_command", default=supervisor.DEFAULT_PROBE,
                      help="shell command telling whether {host} answers (exit 0); default: %s"
                           % supervisor.DEFAULT_PROBE.replace("%", "%%"))
  parser.add_argument("--verbose", action="store_true",
                      help="show all of the launcher's output (horovodrun's own traceback after "
                           "a failed worker is left out by default)")
  parser.add_argument("command", nargs=argparse.REMAINDER,
                      help="the launcher command, after --")
  args = parser.parse_args(argv)
  if args.command and args.command[0] == "--":
    args.command = args.command[1:]
  return args


def run(args):
  launcher = process_launcher.ProcessLauncher(verbose=args.verbose or "--verbose" in args.command)
  launcher.install_signal_handlers()

  def log(line):
    print("%s: %s" % (PROGRAM, line), file=sys.stderr, flush=True)

  return supervisor.supervise(args.command, launcher.launch,
                              supervisor.command_probe(args.probe_command),
                              supervisor.real_sleep, log, max_restarts=args.max_restarts,
                              backoff_secs=args.backoff_secs,
                              max_backoff_secs=args.max_backoff_secs,
                              min_workers=args.min_workers,
                              is_local=supervisor.is_this_machine)


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  return errors.run_reporting_errors(PROGRAM, run, args)


if __name__ == "__main__":
  sys.exit(main())
