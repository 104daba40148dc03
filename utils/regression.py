"""Golden losses: record the per-step losses of a run, then check a later run against them.

A framework, driver or cluster change is accepted when a short deterministic pretraining run gives
the same losses as before (README, "Use this pipeline as a regression test"):

  python -m utils.regression record --log OUT/bert_dllog.json --output golden.json \
      -- python run_pretraining.py --deterministic_run --output_dir=OUT ...
  python -m utils.regression compare --golden golden.json --log NEW/bert_dllog.json \
      --tolerance 0 -- python run_pretraining.py --deterministic_run --output_dir=NEW ...

With a command after `--`, the tool runs it first (it must exit 0) and then reads its log; without
one it reads an existing log (`record` then needs `--command`, the command that produced it).

The golden file is a small JSON document: the command, the package versions and the BERT config of
the run that produced it, and one entry per logged update (in log order) with its step and the
values of `TRACKED_KEYS` the log has. `compare` pairs the entries of the new log with the golden
ones in order, prints a table of the first differences and exits 1 on any difference (a value
outside the tolerance, a different step, a missing or extra entry), 0 when every value matches,
2 for a usage error (unreadable file, bad flag, failed command).
"""

import argparse
import datetime
import importlib.metadata
import json
import math
import platform
import shlex
import subprocess
import sys

from utils import dllogger_setup

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


class UsageError(ValueError):
  """A bad argument, file or command; exit status 2."""


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
    UsageError: naming the file, when it cannot be read or has no per-step line.
  """
  try:
    steps, _ = dllogger_setup.read_log(log_path)
  except (OSError, ValueError) as e:
    raise UsageError("cannot read the run log: %s" % e)
  entries = []
  for step, data in steps:
    entry = {"step": step}
    for key in TRACKED_KEYS:
      if isinstance(data.get(key), (int, float)) and not isinstance(data.get(key), bool):
        entry[key] = float(data[key])
    entries.append(entry)
  return entries


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
    raise UsageError("--bert_config_file of the command: %s" % e)


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


def read_golden(path):
  """Loads and checks a golden file; UsageError naming the file and the problem."""
  try:
    with open(path) as reader:
      golden = json.load(reader)
  except (OSError, ValueError) as e:
    raise UsageError("cannot read the golden file: %s" % e)
  if not isinstance(golden, dict) or golden.get("format") != GOLDEN_FORMAT:
    raise UsageError("%s: not a golden-loss file of format %d" % (path, GOLDEN_FORMAT))
  entries = golden.get("entries")
  if not isinstance(entries, list) or not entries or not all(
      isinstance(e, dict) and isinstance(e.get("step"), int) for e in entries):
    raise UsageError("%s: 'entries' must be a non-empty list of {\"step\": int, ...}" % path)
  return golden


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


def _run_command(command, timeout):
  """Runs the command of the golden run (output passed through); UsageError when it fails."""
  print("running: %s" % shlex.join(command), flush=True)
  try:
    code = subprocess.run(command, timeout=timeout).returncode
  except (OSError, subprocess.TimeoutExpired) as e:
    raise UsageError("the command failed: %s" % e)
  if code != 0:
    raise UsageError("the command exited with status %d: %s" % (code, shlex.join(command)))


def record(log_path, output_path, command, run_command, timeout=None):
  """`record`: runs the command (when asked), reads its log and writes the golden file.

  Returns:
    the golden document written.
  """
  if run_command:
    _run_command(command, timeout)
  golden = make_golden(log_entries(log_path), command)
  with open(output_path, "w") as writer:
    json.dump(golden, writer, indent=1)
    writer.write("\n")
  print("recorded %d log entries (steps %d..%d) of %s into %s"
        % (len(golden["entries"]), golden["entries"][0]["step"], golden["entries"][-1]["step"],
           log_path, output_path))
  return golden


def compare(golden_path, log_path, tolerance, command=None, timeout=None,
            max_rows=DEFAULT_MAX_ROWS, out=sys.stdout):
  """`compare`: runs the command (when given), checks its log against the golden file.

  Returns:
    0 when every entry matches, 1 otherwise (the table of first differences is printed).
  """
  if not tolerance >= 0:
    raise UsageError("--tolerance must be >= 0, got %r" % (tolerance,))
  golden = read_golden(golden_path)
  if command:
    _run_command(command, timeout)
  new_entries = log_entries(log_path)
  current = package_versions()
  for name, version in sorted(golden.get("versions", {}).items()):
    if current.get(name) != version:
      print("note: %s %s now, %s in the golden run" % (name, current.get(name), version),
            file=out)
  found = differences(golden["entries"], new_entries, tolerance)
  what = "identical values" if tolerance == 0 else "relative tolerance %g" % tolerance
  if not found:
    print("match: %d log entries (steps %d..%d), %s" % (
        len(new_entries), new_entries[0]["step"], new_entries[-1]["step"], what), file=out)
    return 0
  print("MISMATCH (%s): %d difference(s) over %d golden / %d new log entries; first at step %d"
        % (what, len(found), len(golden["entries"]), len(new_entries), found[0][1]), file=out)
  for line in difference_table(found, max_rows):
    print(line, file=out)
  if len(found) > max_rows:
    print("... %d more" % (len(found) - max_rows), file=out)
  return 1


def _split_command(argv):
  """(tool arguments, command after `--` or [])."""
  if "--" in argv:
    at = argv.index("--")
    return argv[:at], argv[at + 1:]
  return argv, []


def main(argv=None):
  """Command line; returns the exit status (0 match / recorded, 1 mismatch, 2 usage error)."""
  argv = list(sys.argv[1:] if argv is None else argv)
  tool_args, command = _split_command(argv)
  parser = argparse.ArgumentParser(
      prog="python -m utils.regression",
      description="Record the per-step losses of a run as golden values, or compare a run with "
                  "them. A command after `--` is run first.")
  sub = parser.add_subparsers(dest="action", required=True)
  rec = sub.add_parser("record", help="write a golden file from a run log")
  rec.add_argument("--log", required=True, help="dllogger log of the run (DLLL lines)")
  rec.add_argument("--output", required=True, help="golden JSON file to write")
  rec.add_argument("--command", default=None,
                   help="the command that produced an existing log (when no command follows --)")
  cmp_ = sub.add_parser("compare", help="check a run log against a golden file")
  cmp_.add_argument("--golden", required=True, help="golden JSON file written by record")
  cmp_.add_argument("--log", required=True, help="dllogger log of the new run")
  cmp_.add_argument("--tolerance", type=float, default=0.0,
                    help="relative tolerance of every value (0, the default: identical floats)")
  cmp_.add_argument("--max_rows", type=int, default=DEFAULT_MAX_ROWS,
                    help="differences printed in the table")
  for p in (rec, cmp_):
    p.add_argument("--timeout", type=float, default=None, help="seconds the command may take")
  try:
    args = parser.parse_args(tool_args)
  except SystemExit as e:
    return 2 if e.code else 0
  try:
    if args.action == "record":
      if command and args.command:
        raise UsageError("give the command after -- (it is run) or --command (it is not), not both")
      if not command and not args.command:
        raise UsageError("record needs the command that produced the log: after -- (run first) "
                         "or as --command")
      record(args.log, args.output, command or shlex.split(args.command),
             run_command=bool(command), timeout=args.timeout)
      return 0
    return compare(args.golden, args.log, args.tolerance, command=command, timeout=args.timeout,
                   max_rows=args.max_rows)
  except UsageError as e:
    print("python -m utils.regression: error: %s" % e, file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
