"""The command-line entry point of the project's scripts: quiet logs, exit code 2 for usage errors.

Every script imports this module BEFORE TensorFlow and ends with

  if __name__ == "__main__":
    cli.run_main(main[, the script's flag defaults])

instead of `app.run(main)`. `run_main` runs `main` under absl's `app.run` and adds:

* Usage errors exit with code 2 (`utils/core/errors.py`) and one line naming the problem: a flag
  absl cannot parse (an unknown flag, a value of the wrong type or outside an enum, a missing
  required flag), and a `UsageError` (ours or absl's) raised by `main` (absl's own `app.run` exits
  1 for both).
* Quiet logs by default; `--verbose` (a flag of every script) shows everything:
  - TensorFlow's Python log (deprecation notices, the Estimator's progress, "Use tf.keras
    instead.") is cut to errors; the script's own log lines (absl, INFO) stay.
  - TensorFlow's native (C++) log drops its INFO lines (`TF_CPP_MIN_LOG_LEVEL=1`, set when this
    module is imported: TensorFlow reads it once, when it loads; a value already in the
    environment wins) and the lines of `BENIGN_NATIVE_LINES`, which report normal operation at
    warning or error level.
* Always: each TensorFlow message is printed once (TensorFlow's own handler is removed; absl's
  prints it), and TensorFlow's "global step has not been increased" warning is dropped: the global
  step counts optimizer updates (docs/DESIGN.md), so a gradient-accumulation micro-step leaves it
  unchanged by design and the warning is wrong for every run with accumulation.
"""

import atexit
import gc
import logging as std_logging
import os
import signal
import subprocess
import sys

from absl import app
from absl import flags

from utils.core import errors
from utils.runtime import stop_signals

# TensorFlow's native log threshold in quiet mode: 1 drops INFO, keeps warnings and errors.
QUIET_NATIVE_LOG_LEVEL = "1"
# Native (C++) stderr lines that report normal operation and that no setting turns off. The
# optimizer's per-variable update is an XLA-compiled function (optimization.py), so every run
# compiles XLA clusters even without --use_xla; XLA's CPU stream then logs SetPriority at error
# level, and absl's C++ logging announces itself before its first line.
BENIGN_NATIVE_LINES = (
    "SetPriority unimplemented for this stream.",
    "Compiled cluster using XLA!",
    "All log messages before absl::InitializeLog() is called are written to STDERR",
)
# Native lines that repeat an error the script reports itself, left out unless --verbose:
# TensorFlow's warning for every op that fails ("OP_REQUIRES failed at save_restore_v2_ops.cc:...
# RESOURCE_EXHAUSTED: ..." on a full disk, "... at mpi_ops.cc" for a collective whose rank is
# gone), whose status is also raised into Python, where the script ends with its own line (or, for
# an error it does not know, a traceback that holds the same status); and Horovod's report of its
# background loop's exception when a rank is lost (each rank left names it in one line:
# `estimator.another_worker_ended`).
REPORTED_NATIVE_LINES = (
    "Horovod background loop uncaught exception",
    "OP_REQUIRES failed at ",
)
# The StepCounterHook's warning that a session run did not advance the global step.
GLOBAL_STEP_WARNING = "It seems that global step (tf.train.get_global_step) has not been increased"

flags.DEFINE_bool("verbose", False,
                  "Show every log line: TensorFlow's deprecation notices, Estimator progress and "
                  "native INFO lines (quiet by default).")

# Reads lines from stdin and copies those containing none of the byte strings of argv[1:] to
# stdout; ends at end of input. It ignores SIGINT / SIGTERM, so a process killed by either still
# gets its last lines (a traceback) printed: the filter ends when the last writer closes the pipe.
_LINE_FILTER_PROGRAM = r"""
import sys
dropped = [a.encode() for a in sys.argv[1:]]
out = sys.stdout.buffer
for line in sys.stdin.buffer:
  if not any(d in line for d in dropped):
    out.write(line)
    out.flush()
"""


def verbose_requested(argv):
  """Whether `argv` turns --verbose on, read before absl parses the flags (last setting wins).

  Args:
    argv: the command line, program name first.

  Returns:
    bool. Understands --verbose, --verbose=true|false|1|0 and --noverbose (one or two dashes);
    a --flagfile is not read.
  """
  verbose = False
  for arg in argv[1:]:
    if arg == "--":
      break
    name, _, value = arg.lstrip("-").partition("=")
    if not arg.startswith("-"):
      continue
    if name == "verbose":
      verbose = value.lower() not in ("false", "0", "f", "no")
    elif name == "noverbose" and not value:
      verbose = False
  return verbose


def quiet_native_log_level(argv, environ):
  """Sets TensorFlow's native log threshold for a quiet run, unless verbose or already set.

  Args:
    argv: the command line.
    environ: the environment to change (os.environ).

  Returns:
    The value of TF_CPP_MIN_LOG_LEVEL in `environ` afterwards, or None when unset.
  """
  if not verbose_requested(argv):
    environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_NATIVE_LOG_LEVEL)
  return environ.get("TF_CPP_MIN_LOG_LEVEL")


# TensorFlow reads the threshold once, when it first logs (while it is imported), so it has to be
# in the environment before that; a process that has already loaded TensorFlow is left alone.
if "tensorflow" not in sys.modules:
  quiet_native_log_level(sys.argv, os.environ)


class _DropMessages(std_logging.Filter):
  """Drops log records whose message contains one of the given strings."""

  def __init__(self, fragments):
    super().__init__()
    self._fragments = tuple(fragments)

  def filter(self, record):
    message = record.getMessage()
    return not any(fragment in message for fragment in self._fragments)


def configure_python_logging(verbose):
  """TensorFlow's Python log: once per message, errors only unless `verbose`.

  Call after absl's handler is installed (inside `app.run`).

  Args:
    verbose: keep TensorFlow's INFO and WARNING lines.

  Returns:
    The `tensorflow` logger.
  """
  tf_logger = std_logging.getLogger("tensorflow")
  # TensorFlow adds its own stderr handler when it loads before absl's handler exists; its records
  # also reach absl's handler on the root logger, so every line would be printed twice.
  for handler in list(tf_logger.handlers):
    if isinstance(handler, std_logging.StreamHandler):
      tf_logger.removeHandler(handler)
  tf_logger.propagate = True
  if not any(isinstance(f, _DropMessages) for f in tf_logger.filters):
    tf_logger.addFilter(_DropMessages([GLOBAL_STEP_WARNING]))
  if not verbose:
    tf_logger.setLevel(std_logging.ERROR)
  return tf_logger


def filter_native_stderr(dropped_lines=BENIGN_NATIVE_LINES + REPORTED_NATIVE_LINES,
                         executable=sys.executable):
  """Routes this process's stderr (file descriptor 2) through a line filter process.

  Native libraries write to the descriptor directly, so only a filter on it can drop their lines.
  The filter is a separate process, so a crash of this one (a fatal native error) loses nothing:
  the filter prints what was written and ends when every writer has closed the pipe. At exit the
  original stderr is put back and the filter is given a moment to print its last lines. The filter
  ignores the stop signals (`stop_signals.STOP_SIGNALS`) from its first instruction on (ignored
  dispositions survive exec): they reach it beside the job whenever they go to a process group or
  a whole job step (Ctrl-C in a terminal, `scancel --signal`, Slurm's `--signal`), and a filter
  ended by one would take the stop's own lines with it and leave the job writing into a closed
  pipe (exit 1 instead of the stop's 75).

  Args:
    dropped_lines: lines containing any of these strings are not printed.
    executable: the python that runs the filter.

  Returns:
    The filter's `subprocess.Popen`.
  """
  sys.stderr.flush()
  read_end, write_end = os.pipe()
  original = os.dup(2)
  # Ignored while the filter starts (main thread; the job's own handlers come later).
  previous = {signum: signal.signal(signum, signal.SIG_IGN)
              for signum in stop_signals.STOP_SIGNALS}
  try:
    proc = subprocess.Popen([executable, "-S", "-c", _LINE_FILTER_PROGRAM] + list(dropped_lines),
                            stdin=read_end, stdout=original, stderr=original, close_fds=True)
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)
  os.close(read_end)
  os.dup2(write_end, 2)
  os.close(write_end)

  def restore():
    try:
      sys.stderr.flush()
    except (OSError, ValueError):
      pass
    os.dup2(original, 2)  # closes this process's end of the pipe
    try:
      proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
      pass  # a child still holds the pipe; the filter ends when it does

  atexit.register(restore)
  return proc


def _program_name(argv):
  return os.path.basename(argv[0]) if argv else "command"


def usage_error(message, argv=None):
  """Prints `<program>: error: <message>` and a hint to stderr; exits with the usage status."""
  argv = sys.argv if argv is None else argv
  errors.report(_program_name(argv), message)
  sys.stderr.write("(--helpshort lists the flags)\n")
  sys.stderr.flush()
  sys.exit(errors.USAGE_EXIT_CODE)


def parse_flags_or_exit(argv):
  """absl's flag parser with exit code 2 and one line naming the flag for a parse error.

  Args:
    argv: the command line, program name first.

  Returns:
    The arguments left after the flags (program name first), as absl's parser returns them.
  """
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    usage_error(" ".join(str(e).split()), argv)


def freeze_objects_at_exit():
  """At the interpreter's exit: one garbage collection, then every object left frozen.

  While it unloads its modules, Python collects garbage several times over every tracked object,
  ~250,000 once TensorFlow is loaded: 1.0-1.4 s of each script's exit on a Zen 3
  (docs/PERFORMANCE.md), for memory the process is about to give back. The collection here
  finalizes the cycles that are garbage already, as the interpreter's first one would; objects
  still in use then are not collected again (Python does not promise their `__del__` at exit; the
  scripts close their files, logs and checkpoints before). Registered once (`atexit` runs it after
  the handlers registered later).
  """
  global _FREEZE_REGISTERED
  if not _FREEZE_REGISTERED:
    atexit.register(_collect_and_freeze)
    _FREEZE_REGISTERED = True


_FREEZE_REGISTERED = False


def _collect_and_freeze():
  gc.collect()
  gc.freeze()


def run_main(main, defaults=None, argv=None):
  """Runs `main(argv)` under absl's `app.run` with the project's logging and exit codes.

  Args:
    main: the script's main(argv) -> exit status.
    defaults: dict flag name -> the script's own default, set before the flags are parsed (so
      `--help` shows them; `utils/training/flags.py`).
    argv: the command line; sys.argv when None.
  """
  freeze_objects_at_exit()
  for name, value in (defaults or {}).items():
    flags.FLAGS.set_default(name, value)

  def configured_main(remaining_argv):
    verbose = flags.FLAGS.verbose
    configure_python_logging(verbose)
    if not verbose:
      filter_native_stderr()
    try:
      return main(remaining_argv)
    except (app.UsageError, errors.UsageError) as e:
      usage_error(str(e), remaining_argv)

  app.run(configured_main, argv=argv, flags_parser=parse_flags_or_exit)
