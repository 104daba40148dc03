"""The errors a run ends with, and the exit status of each: defined once for every script and tool.

  UsageError             a bad flag, file or input the user gave: exit 2 (argparse's and absl's
                         convention for usage errors), found before any graph is built when it can
  TrainingDivergedError  the training loss became NaN; the message says what to change: exit 1
  DiskFullError          a checkpoint or log write found no space left on the device; the message
                         names the directory, the bytes needed and free: exit 2 (like a usage
                         error, the user has to act before a rerun can succeed; docs/LONG_RUNS.md)
  StoppedByAnotherWorker another rank ended first and Horovod shut down: exit 1, one line naming
                         the rank when it can be seen (a process of this host) and the checkpoint
                         a rerun resumes from
  StoppedBySignal        SIGTERM, SIGINT or SIGUSR1 stopped the job at an update boundary after
                         saving a checkpoint: exit 75 (STOP_EXIT_CODE, sysexits.h's EX_TEMPFAIL,
                         "temporary failure, retry"): running the same command resumes; schedulers
                         requeue on it (docs/LONG_RUNS.md). A second signal during the stop ends
                         the process at once with 128 + the signal's number; once the stop is
                         saved, with its line and 75.

Scripts and tools end through `run_reporting_errors`, which prints one line,
"<program>: error: <message>", instead of a traceback (the traceback too with --verbose).
"""

import sys
import traceback

# Exit status of a usage error (bad flag or input).
USAGE_EXIT_CODE = 2
# Exit status of a job that failed for another reason the message explains.
FAILURE_EXIT_CODE = 1
# Exit status of a job stopped by a signal with its state saved: EX_TEMPFAIL of sysexits.h (a
# temporary failure: run it again). Distinct from 1 and 2 (failures a rerun repeats) and from
# 128 + n (killed by signal n, state not saved), so a scheduler's requeue rule can match it alone.
STOP_EXIT_CODE = 75


class UsageError(ValueError):
  """A bad flag, file or input the user gave (exit status 2)."""


class TrainingDivergedError(RuntimeError):
  """The training loss became NaN; the message says what to change (exit status 1)."""


class DiskFullError(RuntimeError):
  """No space left for a checkpoint or the run log; the message names the directory, the bytes
  needed and free (exit status 2)."""


class StoppedByAnotherWorker(RuntimeError):
  """Another rank of the job ended first (failed, was killed, lost its host) and Horovod shut down;
  the message names it where it can and says what a rerun resumes from (exit status 1)."""


class StoppedBySignal(RuntimeError):
  """A signal stopped the job after it saved its state; the message says where (exit status 75).

  Reported as "<program>: <message>" (not an error: the job can be resumed as it is).
  """


def require(condition, message, *args):
  """Raises UsageError(message % args) unless `condition`."""
  if not condition:
    raise UsageError(message % args)


# The errors that end a run with one line (StoppedByAnotherWorker: none), and their exit status.
_EXIT_CODES = ((UsageError, USAGE_EXIT_CODE), (TrainingDivergedError, FAILURE_EXIT_CODE),
               (DiskFullError, USAGE_EXIT_CODE), (StoppedByAnotherWorker, FAILURE_EXIT_CODE),
               (StoppedBySignal, STOP_EXIT_CODE))


def report_line(program, message, kind="error"):
  """"<program>: <kind>: <message>"; no kind: "<program>: <message>"."""
  return "%s: %s%s" % (program, "%s: " % kind if kind else "", message)


def report(program, message, stream=None, kind="error"):
  """Prints `report_line(program, message, kind)` on `stream` (stderr)."""
  stream = sys.stderr if stream is None else stream
  print(report_line(program, message, kind), file=stream, flush=True)


def ending_line(program, error):
  """The line `run_reporting_errors` ends a run with for `error`, one of this module's errors:
  "<program>: <message>" for a stop by a signal (not an error), else "<program>: error: <message>".
  """
  return report_line(program, error, kind=None if isinstance(error, StoppedBySignal) else "error")


def run_reporting_errors(program, function, *args, verbose=False):
  """Runs `function(*args)`; an error of this module becomes one line on stderr and its status.

  Args:
    program: the script or tool name for the message, e.g. "run_pretraining.py".
    function: returns the exit status.
    *args: its arguments.
    verbose: print the error's traceback (with the errors it was raised from) before the line,
      and the line of a `StoppedByAnotherWorker` too.

  Returns:
    the exit status: the function's, or that of the error it raised.
  """
  try:
    return function(*args)
  except tuple(kind for kind, _ in _EXIT_CODES) as e:
    if verbose:
      traceback.print_exc(file=sys.stderr)
    print(ending_line(program, e), file=sys.stderr, flush=True)
    return exit_code(e)


def exit_code(error):
  """The exit status a run ends with for `error`, one of this module's errors."""
  return next(code for kind, code in _EXIT_CODES if isinstance(error, kind))
