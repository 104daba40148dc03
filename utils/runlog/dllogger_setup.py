"""NVIDIA-style run log: `DLLL {json}` lines in a file and a readable line on stdout.

The file format is the one of NVIDIA's `dllogger` JSONStreamBackend, so NVIDIA's log tooling reads
our logs:

  DLLL {"timestamp": "1700000000.123456", "datetime": "2023-11-14 22:13:20.123456",
        "elapsedtime": "12.5", "type": "LOG", "step": 10, "data": {"total_loss": 7.1, ...}}

`timestamp` is the POSIX time, `datetime` the local date and time, `elapsedtime` the seconds since
the logger was created (all three written as strings, as dllogger does); `step` is an update step,
or `[]` for a summary of the whole run. When the `dllogger` package is importable it writes the
lines itself (JSONStreamBackend to the file, StdOutBackend to stdout); otherwise the built-in
backend below writes the same lines.

Only rank 0 logs: on any other rank the logger never opens the file and prints nothing.

  logger = RunLogger("/out/dllogger.json", rank=hvd_utils.hvd_rank())
  logger.log(step=10, data={"total_loss": 7.1})
  logger.log(step=SUMMARY_STEP, data={"throughput_train": 95.2})
  logger.flush()
"""

import datetime
import importlib
import json
import numbers
import os
import sys

from absl import logging
import numpy as np

from utils.core import checks
from utils.core import errors

# The step of a summary line (dllogger's empty tuple; written as [] in the file).
SUMMARY_STEP = ()
# Prefix of every line of the file.
LINE_PREFIX = "DLLL "
# The step of the line that marks a restart in an appended log (dllogger takes string steps, as
# its "PARAMETER" lines).
RESTART_STEP = "RESTART"
# The step of the line a job stopped by a signal ends with (data: signal, update,
# checkpoint_written, message).
STOP_STEP = "STOP"

_BACKENDS = ("auto", "dllogger", "builtin")


def format_step(step):
  """Readable step for stdout: the number, or "summary" for a summary line."""
  if isinstance(step, (tuple, list)) and not step:
    return "summary"
  return str(step)


def format_metric(metric, metadata, value):
  """Readable `name : value [unit]` for stdout; floats with 6 significant digits.

  Args:
    metric: metric name.
    metadata: dict, may hold a "unit" (dllogger's metadata convention).
    value: the logged value.

  Returns:
    str.
  """
  if isinstance(value, float):
    text = "%.6g" % value
  else:
    text = str(value)
  unit = (metadata or {}).get("unit")
  return "%s : %s%s" % (metric, text, " " + unit if unit else "")


def _normalise_step(step):
  """Validates a step and returns it as dllogger takes it (int, str or tuple of ints)."""
  if isinstance(step, numbers.Integral) and not isinstance(step, bool):
    return int(step)
  if isinstance(step, str):
    return step
  if isinstance(step, (tuple, list)):
    if all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in step):
      return tuple(int(s) for s in step)
  raise ValueError("log step must be an int, a string or a tuple of ints (() for a summary), "
                   "got %r" % (step,))


def _normalise_value(key, value):
  """Converts numpy scalars to Python values; raises ValueError naming `key` for other types."""
  if value is None or isinstance(value, (bool, str)):
    return value
  if isinstance(value, (np.generic, numbers.Number)):
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, bool):
      return value
    if isinstance(value, numbers.Integral):
      return int(value)
    if isinstance(value, numbers.Real):
      return float(value)
  if isinstance(value, (list, tuple)):
    return [_normalise_value(key, v) for v in value]
  raise ValueError("log data %r: value %r of type %s cannot be written as JSON"
                   % (key, value, type(value).__name__))


def _normalise_data(data):
  """Validates the data dict of a log line; returns a copy with plain Python values."""
  if not isinstance(data, dict):
    raise ValueError("log data must be a dict of metric name -> value, got %s"
                     % type(data).__name__)
  normalised = {}
  for key, value in data.items():
    if not isinstance(key, str):
      raise ValueError("log data keys must be strings, got %r" % (key,))
    normalised[key] = _normalise_value(key, value)
  return normalised


def _prepare_log_path(log_path):
  """Checks that `log_path` can be a file and creates its parent directory."""
  if os.path.isdir(log_path):
    raise ValueError("log file path %s is a directory" % log_path)
  parent = os.path.dirname(log_path)
  if parent:
    os.makedirs(parent, exist_ok=True)


def _open_log_file(log_path, append):
  """Opens the log file, line buffered, after `_prepare_log_path`."""
  _prepare_log_path(log_path)
  return open(log_path, "a" if append else "w", buffering=1)


class _BuiltinBackend(object):
  """Writes dllogger's JSON lines to a file and its readable lines to stdout."""

  def __init__(self, log_path, stdout, append, now):
    self._now = now
    self._start = now()
    self._stdout = stdout
    self._file = _open_log_file(log_path, append) if log_path else None

  def log(self, step, data):
    """Writes one line to the file (if any) and one to stdout (if enabled)."""
    timestamp = self._now()
    elapsed = (timestamp - self._start).total_seconds()
    if self._file is not None:
      record = {
          "timestamp": str(timestamp.timestamp()),
          "datetime": str(timestamp),
          "elapsedtime": str(elapsed),
          "type": "LOG",
          "step": list(step) if isinstance(step, tuple) else step,
          "data": data,
      }
      self._file.write(LINE_PREFIX + json.dumps(record) + "\n")
    if self._stdout:
      metrics = " ".join(format_metric(key, None, value) for key, value in data.items())
      sys.stdout.write("DLL %s - %s %s\n" % (timestamp, format_step(step), metrics))
      sys.stdout.flush()

  def flush(self):
    if self._file is not None:
      self._file.flush()

  def close(self):
    if self._file is not None:
      self._file.close()
      self._file = None


class _DLLoggerBackend(object):
  """Drives NVIDIA's `dllogger` package: JSONStreamBackend to the file, StdOutBackend to stdout."""

  def __init__(self, module, log_path, stdout, append):
    self._module = module
    backends = []
    if log_path:
      _prepare_log_path(log_path)
      kwargs = {"append": True} if append else {}
      backends.append(module.JSONStreamBackend(module.Verbosity.VERBOSE, log_path, **kwargs))
    if stdout:
      backends.append(module.StdOutBackend(module.Verbosity.DEFAULT, step_format=format_step,
                                           metric_format=format_metric))
    self._logger = module.Logger(backends=backends)

  def log(self, step, data):
    self._logger.log(step=step, data=data, verbosity=self._module.Verbosity.DEFAULT)
    # dllogger's JSONStreamBackend buffers its file: flushed at once, an update's line is in the
    # file before its checkpoint is saved, as with the built-in backend, and a kill loses none.
    self._logger.flush()

  def flush(self):
    self._logger.flush()

  def close(self):
    # dllogger closes its files at exit (and flushes them then): only flush here.
    self._logger.flush()


class RunLogger(object):
  """The run log of docs/DESIGN.md section 5, written by rank 0 only."""

  def __init__(self, log_path, rank=0, stdout=True, append=False, backend="auto", now=None):
    """Opens the log (on rank 0 only).

    Args:
      log_path: file for the `DLLL` lines, or None for stdout only. Its directory is created.
      rank: this worker's rank; any rank but 0 gets a logger that writes nothing and never opens
        the file.
      stdout: also print a readable line per log call.
      append: append to an existing file instead of truncating it.
      backend: "auto" (the `dllogger` package when importable, else the built-in backend),
        "dllogger" (required) or "builtin".
      now: clock returning `datetime.datetime` (for tests); `datetime.datetime.now` by default.

    Raises:
      ValueError: for an unknown backend, a negative rank or a log path that is a directory.
      ImportError: for backend="dllogger" when the package is not installed.
    """
    if backend not in _BACKENDS:
      raise ValueError("unknown log backend %r (expected one of: %s)"
                       % (backend, ", ".join(_BACKENDS)))
    checks.check_integer("rank", rank, 0)
    self._log_path = log_path
    self._backend = None
    self._closed = False
    if rank != 0:
      return
    module = None
    if backend in ("auto", "dllogger"):
      module = _import_dllogger(required=(backend == "dllogger"))
    if module is not None:
      self._backend = _DLLoggerBackend(module, log_path, stdout, append)
    else:
      self._backend = _BuiltinBackend(log_path, stdout, append, now or datetime.datetime.now)

  @property
  def enabled(self):
    """True on the worker that writes the log (rank 0)."""
    return self._backend is not None

  def log(self, step, data):
    """Writes one log line (rank 0 only).

    Args:
      step: update step (int), SUMMARY_STEP (or []) for a summary of the run, or a string.
      data: dict metric name -> number, string, bool or None (numpy scalars are converted).

    Raises:
      ValueError: for an invalid step or value, or a closed logger.
    """
    if self._closed:
      raise ValueError("log called on a closed RunLogger (%s)" % self._log_path)
    step = _normalise_step(step)
    data = _normalise_data(data)
    if self._backend is not None:
      self._backend.log(step, data)

  def flush(self):
    """Flushes the file to disk (lines are also flushed as they are written)."""
    if self._backend is not None:
      self._backend.flush()

  def close(self):
    """Flushes and closes the log; later `log` calls raise."""
    if self._backend is not None and not self._closed:
      self._backend.close()
    self._closed = True

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc_info):
    self.close()


def check_run_logger(logger):
  """Raises ValueError unless `logger` has the `RunLogger` interface the hooks use (`log()` and
  `enabled`)."""
  if not (hasattr(logger, "log") and hasattr(logger, "enabled")):
    raise ValueError("logger must be a dllogger_setup.RunLogger (log() and enabled), got %r"
                     % (logger,))


def open_run_log(log_path, rank, resumed_from_step, **kwargs):
  """The run log of a job that may be a restart: appends, and marks where a restart begins.

  A job started again on the same output directory (after a crash or a kill) must keep the earlier
  run's lines, the ones that tell what happened before the crash: the file is never truncated,
  but for a last line that a kill cut short (`_remove_cut_line`). When it already holds lines, a
  line with step `RESTART_STEP` and data {"resumed_from_step": resumed_from_step} separates the
  runs.

  Args:
    log_path: file for the `DLLL` lines, or None (stdout only).
    rank: this worker's rank (only rank 0 writes).
    resumed_from_step: global step the run starts from (the newest checkpoint's, 0 without one).
    **kwargs: further `RunLogger` arguments (stdout, backend, now).

  Returns:
    the `RunLogger`, opened for appending.
  """
  restarted = bool(rank == 0 and log_path and os.path.isfile(log_path)
                   and os.path.getsize(log_path) > 0)
  if restarted:
    _remove_cut_line(log_path)
  logger = RunLogger(log_path, rank=rank, append=True, **kwargs)
  if restarted:
    logger.log(step=RESTART_STEP, data={"resumed_from_step": int(resumed_from_step)})
  return logger


# Bytes read at a time when looking back for the start of a log's last line.
_TAIL_CHUNK = 4096


def _cut_line_start(log):
  """Where the last line of `log` starts when it has no newline, or None when it has one.

  Args:
    log: the run log, opened in binary mode.

  Returns:
    int offset, or None (an empty file too).
  """
  end = log.seek(0, os.SEEK_END)
  if end == 0:
    return None
  log.seek(end - 1)
  if log.read(1) == b"\n":
    return None
  while end > 0:
    start = max(0, end - _TAIL_CHUNK)
    log.seek(start)
    newline = log.read(end - start).rfind(b"\n")
    if newline >= 0:
      return start + newline + 1
    end = start
  return 0


def _remove_cut_line(log_path):
  """Removes the last line of the run log when a kill cut it short.

  A write that crosses a page boundary stops there when the process is killed (SIGKILL) during
  it: the line has no end, no reader can parse it, and the restart line appended to it would be
  lost in it (with it the drop of the earlier run's lines after the checkpoint, `read_log`).
  """
  size = os.path.getsize(log_path)
  with open(log_path, "r+b") as log:
    start = _cut_line_start(log)
    if start is None:
      return
    log.truncate(start)
  logging.warning("%s: removed its last %d bytes, a line cut short when the run writing it was "
                  "killed", log_path, size - start)


def _import_dllogger(required):
  """The `dllogger` module, or None when it is not installed and not required."""
  try:
    return importlib.import_module("dllogger")
  except ImportError:
    if required:
      raise ImportError("backend='dllogger' was requested but the dllogger package is not "
                        "installed; use backend='auto' or 'builtin'")
    return None


def parse_log_line(line):
  """Parses one `DLLL {json}` line.

  Args:
    line: a line of a log file (trailing newline allowed).

  Returns:
    The decoded dict, or None when the line does not start with "DLLL " or is not valid JSON.
  """
  if not line.startswith(LINE_PREFIX):
    return None
  try:
    record = json.loads(line[len(LINE_PREFIX):])
  except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's limit
    return None
  return record if isinstance(record, dict) else None


def _utf8_lines(reader, log_path):
  """The lines of `reader`, a text file of `log_path` read as UTF-8; errors.UsageError naming the
  first byte that is not UTF-8 and its offset."""
  try:
    yield from reader
  except UnicodeDecodeError:
    pass
  else:
    return
  offset = 0
  with open(log_path, "rb") as binary:
    for raw in binary:  # a multi-byte character never holds the byte of "\n"
      try:
        raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise errors.UsageError("%s: byte %d (0x%02x) at offset %d is not utf-8 text"
                                % (log_path, raw[e.start], raw[e.start], offset + e.start))
      offset += len(raw)
  raise errors.UsageError("%s: not utf-8 text" % log_path)


def read_log(log_path):
  """Reads the per-step and summary records of a log file.

  Args:
    log_path: a file of `DLLL {json}` lines.

  Returns:
    (steps, summaries): `steps` is a list of (step, data dict) for the lines whose step is an
    integer, in file order; `summaries` the data dicts of the lines whose step is []. A log that a
    resumed run appended to reads as the history of the training: at a `RESTART_STEP` line, the
    earlier lines of steps after `resumed_from_step` (logged after the checkpoint the run resumed
    from, and trained again by the resumed run) are dropped.

  Raises:
    OSError: when the file cannot be read.
    errors.UsageError (a ValueError): naming the file, when it is not UTF-8 text (the offset of
      the first bad byte) or has no per-step log line.
  """
  steps = []
  summaries = []
  skipped = 0
  with open(log_path, "r", encoding="utf-8") as reader:
    for line in _utf8_lines(reader, log_path):
      record = parse_log_line(line)
      if record is None or record.get("type") != "LOG" or not isinstance(record.get("data"), dict):
        if line.strip():
          skipped += 1
        continue
      step = record.get("step")
      if step == RESTART_STEP:
        resumed_from = record["data"].get("resumed_from_step")
        if isinstance(resumed_from, numbers.Integral):
          steps = [(s, data) for s, data in steps if s <= resumed_from]
        continue
      if isinstance(step, numbers.Integral) and not isinstance(step, bool):
        steps.append((int(step), record["data"]))
      elif step == []:
        summaries.append(record["data"])
  if not steps:
    raise errors.UsageError("%s: no per-step log line (expected lines 'DLLL {json}' with type "
                            "LOG and an integer step)" % log_path)
  if skipped:
    logging.info("%s: skipped %d lines that are not DLLL log records", log_path, skipped)
  return steps, summaries
