"""Golden losses: the per-step values of a run log kept as a small JSON document, and the
comparison of a later run's log with them (`python -m utils.regression` is the command line;
docs/REGRESSION.md).

The golden file holds the command, the package versions and the BERT config of the run that
produced it, and one entry per logged update (in log order) with its step and the values of
`TRACKED_KEYS` the log has. `differences` pairs the entries of a new log with the golden ones in
order: a value outside the tolerance, a different step, a missing or extra entry.
"""

import datetime
import importlib.metadata
import json
import math
import platform
import shlex

from utils.core import errors
from utils.runlog import dllogger_setup

GOLDEN_FORMAT = 1
# Values of a log line the golden file keeps: what a numerics change shows up in first.
TRACKED_KEYS = ("total_loss", "mlm_loss", "nsp_loss", "avg_loss_step", "learning_rate",
                "loss_scaler")
# Packages whose versions go into the golden file, each with the distributions that provide it
# (read from the installed metadata, nothing imported).
VERSIONED_PACKAGES = (("tensorflow", ("tensorflow", "tensorflow-cpu", "tensorflow-gpu")),
                      ("tensorflow-estimator", ("tensorflow-estimator",)),
                      ("horovod", ("horovod",)), ("numpy", ("numpy",)))
DEFAULT_MAX_ROWS = 10


def package_versions():
  """dict name -> version of Python, the platform and `VERSIONED_PACKAGES` (None: not installed)."""
  versions = {"python": platform.python_version(), "platform": platform.platform()}
  for name, distributions in VERSIONED_PACKAGES:
    versions[name] = None
    for distribution in distributions:
      try:
        versions[name] = importlib.metadata.version(distribution)
        break
      except importlib.metadata.PackageNotFoundError:
        continue
  return versions


def log_entries(log_path):
  """The tracked values of every per-step line of a run log, in log order.

  Args:
    log_path: a dllogger log (`DLLL {json}` lines) of run_pretraining.py.

  Returns:
    list of dicts {"step": int, <key>: float, ...} with the keys of `TRACKED_KEYS` the line has.

  Raises:
    UsageError: naming the file, when it cannot be read, has no per-step line or a tracked value
      beyond the range of a float (naming the step and the key).
  """
  try:
    steps, _ = dllogger_setup.read_log(log_path)
  except (OSError, ValueError) as e:
    raise errors.UsageError("cannot read the run log %s: %s"
                            % (log_path, _without_path(e, log_path)))
  entries = []
  for step, data in steps:
    entry = {"step": step}
    for key in TRACKED_KEYS:
      if isinstance(data.get(key), (int, float)) and not isinstance(data.get(key), bool):
        entry[key] = _as_float(data[key], "%s: step %d" % (log_path, step), key)
    entries.append(entry)
  return entries


def _as_float(value, where, key):
  """`value` (int or float) as a float; UsageError "<where>: <key> ..." when out of its range."""
  try:
    return float(value)
  except OverflowError:
    raise errors.UsageError("%s: %r is an integer of %d digits, beyond the range of a float"
                            % (where, key, len(str(abs(value)))))


def command_flags(command):
  """The `--name=value` / `--name value` / `--name` flags of a command line, as a dict of strings.

  Args:
    command: list of str.

  Returns:
    dict flag name -> value ("true" for a bare `--name`, "false" for `--noname`).
  """
  flags = {}
  index = 0
  while index < len(command):
    arg = command[index]
    index += 1
    if not arg.startswith("--") or arg == "--":
      continue
    name, has_value, value = arg[2:].partition("=")
    if not has_value:
      if index < len(command) and not command[index].startswith("--"):
        value = command[index]
        index += 1
      elif name.startswith("no"):
        name, value = name[2:], "false"
      else:
        value = "true"
    flags[name] = value
  return flags


def _bert_config(flags):
  """The JSON of the command's --bert_config_file, or None when it has none."""
  path = flags.get("bert_config_file")
  if not path:
    return None
  try:
    with open(path) as reader:
      return json.load(reader)
  except (OSError, ValueError) as e:
    raise errors.UsageError("--bert_config_file of the command: %s" % e)


def make_golden(entries, command):
  """The golden document of a run.

  Args:
    entries: from `log_entries`.
    command: list of str, the command that produced the log.

  Returns:
    dict: format, created, command, flags, bert_config, versions, entries.
  """
  flags = command_flags(command)
  return {
      "format": GOLDEN_FORMAT,
      "created": datetime.datetime.now().isoformat(timespec="seconds"),
      "command": list(command),
      "flags": flags,
      "bert_config": _bert_config(flags),
      "versions": package_versions(),
      "entries": entries,
  }


def _without_path(error, path=None):
  """What went wrong, for a message that names the file itself: an OSError's reason alone, an
  error's message without a leading "<path>: "."""
  if isinstance(error, OSError) and error.strerror:
    return error.strerror
  message = str(error)
  return message[len(path) + 2:] if path and message.startswith(path + ": ") else message


def read_golden(path):
  """Loads and checks a golden file.

  Args:
    path: the golden file (`make_golden`'s document as JSON).

  Returns:
    the document, its entries' tracked values as floats.

  Raises:
    errors.UsageError: naming the file and the problem (for an entry: its index and key).
  """
  try:
    with open(path, encoding="utf-8") as reader:
      golden = json.load(reader)
  except (OSError, ValueError) as e:
    raise errors.UsageError("cannot read the golden file %s: %s" % (path, _without_path(e)))
  except RecursionError:
    raise errors.UsageError("cannot read the golden file %s: JSON nested too deeply" % path)
  if not isinstance(golden, dict) or not _is_int(golden.get("format")) or (
      golden["format"] != GOLDEN_FORMAT):
    raise errors.UsageError("%s: not a golden-loss file of format %d" % (path, GOLDEN_FORMAT))
  entries = golden.get("entries")
  if not isinstance(entries, list) or not entries or not all(
      isinstance(e, dict) and _is_int(e.get("step")) for e in entries):
    raise errors.UsageError("%s: 'entries' must be a non-empty list of {\"step\": int, ...}" % path)
  _check_versions(golden.get("versions", {}), path)
  for index, entry in enumerate(entries):
    for key in TRACKED_KEYS:
      if key in entry:
        if not isinstance(entry[key], (int, float)) or isinstance(entry[key], bool):
          raise errors.UsageError("%s: entry %d: %r is a %s, expected a number"
                                  % (path, index, key, type(entry[key]).__name__))
        entry[key] = _as_float(entry[key], "%s: entry %d" % (path, index), key)
  return golden


def _check_versions(versions, path):
  """UsageError naming `path` unless `versions` maps names to printable version strings or null
  (`python -m utils.regression compare` prints the ones that changed)."""
  if not isinstance(versions, dict):
    raise errors.UsageError("%s: 'versions' is a %s, expected an object"
                            % (path, type(versions).__name__))
  for name, version in versions.items():
    if version is not None and not isinstance(version, str):
      raise errors.UsageError("%s: versions: %r is a %s, expected a string or null"
                              % (path, name, type(version).__name__))
    try:
      (name + (version or "")).encode("utf-8")
    except UnicodeEncodeError:
      raise errors.UsageError("%s: versions: %a has a lone surrogate, not text" % (path, name))


def _is_int(value):
  return isinstance(value, int) and not isinstance(value, bool)


def values_match(golden_value, new_value, tolerance):
  """True when `new_value` is within `tolerance` (relative to the golden value) of it.

  Tolerance 0 asks for the identical float (NaN matches NaN, so a golden NaN is reproducible);
  otherwise |new - golden| <= tolerance * |golden|.
  """
  if math.isnan(golden_value) or math.isnan(new_value):
    return math.isnan(golden_value) and math.isnan(new_value)
  if tolerance == 0:
    return new_value == golden_value
  return abs(new_value - golden_value) <= tolerance * abs(golden_value)


def differences(golden_entries, new_entries, tolerance):
  """Pairs the entries in order and lists every difference.

  Args:
    golden_entries, new_entries: lists from `log_entries`.
    tolerance: relative tolerance >= 0 (0: identical floats).

  Returns:
    list of (index, step, key, golden value, new value) in log order; `key` is "step" when the
    steps differ, and a missing (extra) entry has new (golden) value None.
  """
  found = []
  for index in range(max(len(golden_entries), len(new_entries))):
    golden = golden_entries[index] if index < len(golden_entries) else None
    new = new_entries[index] if index < len(new_entries) else None
    if golden is None or new is None:
      step = (golden or new)["step"]
      found.append((index, step, "entry", golden and golden["step"], new and new["step"]))
      continue
    if golden["step"] != new["step"]:
      found.append((index, golden["step"], "step", golden["step"], new["step"]))
    for key in TRACKED_KEYS:
      if key not in golden:
        continue
      if key not in new:
        found.append((index, golden["step"], key, golden[key], None))
      elif not values_match(golden[key], new[key], tolerance):
        found.append((index, golden["step"], key, golden[key], new[key]))
  return found


def difference_table(found, max_rows):
  """The first `max_rows` differences as aligned text lines (values printed exactly)."""
  rows = [("#", "step", "value", "golden", "new", "new - golden")]
  for index, step, key, golden, new in found[:max_rows]:
    delta = ""
    if isinstance(golden, float) and isinstance(new, float):
      delta = "%.3e" % (new - golden)
    rows.append((str(index), str(step), key, "-" if golden is None else repr(golden),
                 "-" if new is None else repr(new), delta))
  widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
  return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
          for row in rows]
