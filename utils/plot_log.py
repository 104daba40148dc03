"""Draws a run log (`DLLL {json}` lines) as a PNG: loss, learning rate and throughput against step,
and, when the log has them, the gradient norm and the loss scale (with the skipped updates).

  python -m utils.plot_log OUTPUT_DIR/bert_dllog.json OUTPUT_DIR/training.png

The drawing is `utils/runlog/plot.py`.
"""

import argparse
import sys

from utils.runlog import plot


def main(argv=None):
  """Command line: `python -m utils.plot_log LOGFILE OUT.png`; returns the exit status."""
  parser = argparse.ArgumentParser(
      prog="python -m utils.plot_log",
      description="Draw loss, learning rate, gradient norm and loss scale (when logged) and "
                  "throughput against step from a run log (DLLL lines) into a PNG.")
  parser.add_argument("log_file", help="run log written by the training job (DLLL lines)")
  parser.add_argument("out_png", help="PNG file to write")
  parser.add_argument("--title", default=None, help="figure title (default: the log file name)")
  args = parser.parse_args(argv)
  try:
    plot.plot_log(args.log_file, args.out_png, title=args.title)
  except (OSError, ValueError) as e:
    sys.stderr.write("plot_log: error: %s\n" % e)
    return 1
  print(args.out_png)
  return 0


if __name__ == "__main__":
  sys.exit(main())
