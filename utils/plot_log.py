"""Draws a run log (`DLLL {json}` lines) as a PNG: loss, learning rate and throughput against step,
and, when the log has them, the gradient norm and the loss scale (with the skipped updates).

  python -m utils.plot_log OUTPUT_DIR/bert_dllog.json OUTPUT_DIR/training.png

Prints the PNG's path; a log that cannot be read or has no per-step line, or a PNG that cannot be
written, is one line "python -m utils.plot_log: error: ..." and exit status 2. The drawing is
`utils/runlog/plot.py`.
"""

import argparse
import sys

from utils.core import errors
from utils.runlog import plot

PROGRAM = "python -m utils.plot_log"


def _draw(args):
  """Draws `args.log_file` into `args.out_png` and prints the PNG's path; returns 0.

  Raises:
    errors.UsageError: naming the file that cannot be read or written, or the log's problem.
  """
  try:
    plot.plot_log(args.log_file, args.out_png, title=args.title)
  except OSError as e:
    what = "read the run log" if e.filename == args.log_file else "write the plot"
    raise errors.UsageError("cannot %s %s: %s" % (what, e.filename or args.out_png,
                                                  e.strerror or e))
  print(args.out_png)
  return 0


def main(argv=None):
  """Command line: `python -m utils.plot_log LOGFILE OUT.png`; returns the exit status (0, or 2
  for a usage error)."""
  parser = argparse.ArgumentParser(
      prog=PROGRAM,
      description="Draw loss, learning rate, gradient norm and loss scale (when logged) and "
                  "throughput against step from a run log (DLLL lines) into a PNG.")
  parser.add_argument("log_file", help="run log written by the training job (DLLL lines)")
  parser.add_argument("out_png", help="PNG file to write")
  parser.add_argument("--title", default=None, help="figure title (default: the log file name)")
  args = parser.parse_args(argv)
  return errors.run_reporting_errors(PROGRAM, _draw, args)


if __name__ == "__main__":
  sys.exit(main())
