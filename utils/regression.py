"""Golden losses: record the per-step losses of a run, then check a later run against them.

A framework, driver or cluster change is accepted when a short deterministic pretraining run gives
the same losses as before (docs/REGRESSION.md):

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
2 for a usage error (unreadable file, bad flag, failed command). The golden file and the
comparison are `utils/runlog/golden.py`.
"""

import argparse
import json
import shlex
import subprocess
import sys

from utils.core import errors
from utils.runlog import golden as golden_lib


def _run_command(command, timeout):
  """Runs the command of the golden run (output passed through); UsageError when it fails."""
  print("running: %s" % shlex.join(command), flush=True)
  try:
    code = subprocess.run(command, timeout=timeout).returncode
  except (OSError, subprocess.TimeoutExpired) as e:
    raise errors.UsageError("the command failed: %s" % e)
  if code != 0:
    raise errors.UsageError("the command exited with status %d: %s" % (code, shlex.join(command)))


def record(log_path, output_path, command, run_command, timeout=None):
  """`record`: runs the command (when asked), reads its log and writes the golden file.

  Returns:
    the golden document written.
  """
  if run_command:
    _run_command(command, timeout)
  golden = golden_lib.make_golden(golden_lib.log_entries(log_path), command)
  with open(output_path, "w") as writer:
    json.dump(golden, writer, indent=1)
    writer.write("\n")
  print("recorded %d log entries (steps %d..%d) of %s into %s"
        % (len(golden["entries"]), golden["entries"][0]["step"], golden["entries"][-1]["step"],
           log_path, output_path))
  return golden


def compare(golden_path, log_path, tolerance, command=None, timeout=None,
            max_rows=golden_lib.DEFAULT_MAX_ROWS, out=sys.stdout):
  """`compare`: runs the command (when given), checks its log against the golden file.

  Returns:
    0 when every entry matches, 1 otherwise (the table of first differences is printed).
  """
  if not tolerance >= 0:
    raise errors.UsageError("--tolerance must be >= 0, got %r" % (tolerance,))
  golden = golden_lib.read_golden(golden_path)
  if command:
    _run_command(command, timeout)
  new_entries = golden_lib.log_entries(log_path)
  current = golden_lib.package_versions()
  for name, version in sorted(golden.get("versions", {}).items()):
    if current.get(name) != version:
      print("note: %s %s now, %s in the golden run" % (name, current.get(name), version),
            file=out)
  found = golden_lib.differences(golden["entries"], new_entries, tolerance)
  what = "identical values" if tolerance == 0 else "relative tolerance %g" % tolerance
  if not found:
    print("match: %d log entries (steps %d..%d), %s" % (
        len(new_entries), new_entries[0]["step"], new_entries[-1]["step"], what), file=out)
    return 0
  print("MISMATCH (%s): %d difference(s) over %d golden / %d new log entries; first at step %d"
        % (what, len(found), len(golden["entries"]), len(new_entries), found[0][1]), file=out)
  for line in golden_lib.difference_table(found, max_rows):
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
  cmp_.add_argument("--max_rows", type=int, default=golden_lib.DEFAULT_MAX_ROWS,
                    help="differences printed in the table")
  for p in (rec, cmp_):
    p.add_argument("--timeout", type=float, default=None, help="seconds the command may take")
  try:
    args = parser.parse_args(tool_args)
  except SystemExit as e:
    return errors.USAGE_EXIT_CODE if e.code else 0
  return errors.run_reporting_errors("python -m utils.regression", _act, args, command)


def _act(args, command):
  """Runs the parsed action; returns the exit status (0 recorded / match, 1 mismatch)."""
  if args.action == "record":
    if command and args.command:
      raise errors.UsageError("give the command after -- (it is run) or --command (it is not), "
                              "not both")
    if not command and not args.command:
      raise errors.UsageError("record needs the command that produced the log: after -- (run "
                              "first) or as --command")
    record(args.log, args.output, command or shlex.split(args.command),
           run_command=bool(command), timeout=args.timeout)
    return 0
  return compare(args.golden, args.log, args.tolerance, command=command, timeout=args.timeout,
                 max_rows=args.max_rows)


if __name__ == "__main__":
  sys.exit(main())
