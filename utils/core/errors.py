"""The errors a run ends with, and the exit status of each: defined once for every script and tool.

  UsageError             a bad flag, file or input the user gave: exit 2 (argparse's and absl's
                         convention for usage errors), found before any graph is built when it can
  TrainingDivergedError  the training loss became NaN; the message says what to change: exit 1
  DiskFullError          a checkpoint or log write found no space left on the device; the message
                         names the directory, the bytes needed and free: exit 2 (like a usage
                         error, the user has to act before a rerun can succeed; docs/LONG_RUNS.md)
  StoppedByAnotherWorker another worker ended the job and printed why: exit 1 without a line

Scripts and tools end through `run_reporting_errors`, which prints one line,
"<program>: error: <message>", instead of a traceback (the traceback too with --verbose).
"""

import sys
import traceback

# Exit status of a usage error (bad flag or input).
USAGE_EXIT_CODE = 2
# Exit status of a job that failed for another reason the message explains.
FAILURE_EXIT_CODE = 1


class UsageError(ValueError):
  """A bad flag, file or input the user gave (exit status 2)."""


class TrainingDivergedError(RuntimeError):
  """The training loss became NaN; the message says what to change (exit status 1)."""


class DiskFullError(RuntimeError):
  """No space left for a checkpoint or the run log; the message names the directory, the bytes
  needed and free (exit status 2)."""


class StoppedByAnotherWorker(RuntimeError):
  """Another worker of the job ended it and reported why; this worker ends quietly (exit status
  1, no line: the job's message is the other worker's)."""


def require(condition, message, *args):
  """Raises UsageError(message % args) unless `condition`."""
  if not condition:
    raise UsageError(message % args)


# The errors that end a run with one line (StoppedByAnotherWorker: none), and their exit status.
_EXIT_CODES = ((UsageError, USAGE_EXIT_CODE), (TrainingDivergedError, FAILURE_EXIT_CODE),
               (DiskFullError, USAGE_EXIT_CODE), (StoppedByAnotherWorker, FAILURE_EXIT_CODE))


def report(program, message, stream=None):
  """Prints "<program>: error: <message>" on `stream` (stderr)."""
  stream = sys.stderr if stream is None else stream
  print("%s: error: %s" % (program, message), file=stream, flush=True)


def run_reporting_errors(program, function, *args, verbose=False):
  """Runs `function(*args)`; an error of this module becomes one line on stderr and its status.

  Args:
    program: the script or tool name for the message, e.g. "run_pretraining.py".
    function: returns the exit status.
    *args: its arguments.
    verbose: print the error's traceback (with the errors it was raised from) before the line.

  Returns:
    the exit status: the function's, or that of the error it raised.
  """
  try:
    return function(*args)
  except tuple(kind for kind, _ in _EXIT_CODES) as e:
    if verbose:
      traceback.print_exc(file=sys.stderr)
    if not isinstance(e, StoppedByAnotherWorker) or verbose:
      report(program, e)
    return next(code for kind, code in _EXIT_CODES if isinstance(e, kind))
