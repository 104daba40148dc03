"""The manifest of a corpus build: one JSON file per finished unit of work, and the files written
whole or not at all.

  OUT/manifest/<stage>/<unit>.json   {"stage", "unit", "status", "settings_hash", "settings",
                                      "outputs": [{"path", "size", "sha256"}], "counts", ...}

A unit is done iff its entry says "done" with the settings hash of the current settings and each
of its outputs exists with the recorded size (`is_done`). Every output is written under
`temp_name(path)`, then fsynced and renamed (`publish_file`), and the entry last, the same way
(`write_entry`): a file under a final name is always whole, and a unit killed part way has no
entry, so it is done again; its temporary files are removed first (`remove_unit_leftovers`). A
unit that fails or is stopped has its temporary files removed at once (`remove_unit_temp_files`);
one that fails writes an entry "failed" with the error, so that tasks waiting for it stop at once
(`wait_for_units`) instead of waiting out their timeout. Output paths are relative to OUT.
"""

import hashlib
import json
import os
import time

from absl import logging

STATUS_DONE = "done"
STATUS_FAILED = "failed"
MANIFEST_DIRECTORY = "manifest"
# The suffix of a file being written; never a final name.
TEMP_SUFFIX = ".tmp"
# Seconds between two looks at the manifest while waiting for other tasks' units.
POLL_SECONDS = 1.0
# Units named in a message at most.
NAMED_UNITS = 10


class StageIncomplete(RuntimeError):
  """Units another task owns did not finish: one failed (its error is named), or they were still
  missing when the wait timed out (they are named, with their tasks)."""


def settings_hash(settings):
  """The SHA-256 (hex) of a JSON-serialisable settings value, keys sorted."""
  text = json.dumps(settings, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
  return hashlib.sha256(text.encode("ascii")).hexdigest()


def temp_name(path):
  """The name a file is written under until it is whole."""
  return path + TEMP_SUFFIX


def file_sha256(path):
  """The SHA-256 (hex) of a file's bytes."""
  digest = hashlib.sha256()
  with open(path, "rb") as reader:
    for block in iter(lambda: reader.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def _fsync_directory(directory):
  """Makes a rename in `directory` durable."""
  descriptor = os.open(directory or ".", os.O_RDONLY)
  try:
    os.fsync(descriptor)
  finally:
    os.close(descriptor)


def publish_file(path):
  """Moves the whole file `temp_name(path)` to `path`: fsync, rename, fsync of the directory."""
  with open(temp_name(path), "rb+") as writer:
    os.fsync(writer.fileno())
  os.replace(temp_name(path), path)
  _fsync_directory(os.path.dirname(path))


def entry_path(output_dir, stage, unit):
  """OUT/manifest/<stage>/<unit>.json."""
  return os.path.join(output_dir, MANIFEST_DIRECTORY, stage, unit + ".json")


def read_entry(output_dir, stage, unit):
  """A unit's entry as a dict, or None when there is none (or it cannot be read)."""
  try:
    with open(entry_path(output_dir, stage, unit), encoding="utf-8") as reader:
      return json.load(reader)
  except (OSError, ValueError):
    return None


def write_entry(output_dir, entry):
  """Writes a unit's entry (a dict with "stage" and "unit") whole: temp file, fsync, rename."""
  path = entry_path(output_dir, entry["stage"], entry["unit"])
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(temp_name(path), "w", encoding="utf-8") as writer:
    json.dump(entry, writer, indent=1, sort_keys=True)
    writer.write("\n")
  publish_file(path)


def publish_unit(output_dir, unit, outputs, counts, **extra):
  """Publishes a finished unit: each output's temp file renamed to its name, then the entry.

  Args:
    output_dir: OUT.
    unit: an object with `stage`, `name`, `settings_hash` and `settings`.
    outputs: the unit's outputs, relative to OUT, each written whole under its `temp_name`.
    counts: dict of the unit's counts (documents, duplicates, records, ...).
    **extra: more fields of the entry (e.g. seconds, task).

  Returns:
    the entry written (dict).
  """
  recorded = []
  for relative in outputs:
    path = os.path.join(output_dir, relative)
    sha256 = file_sha256(temp_name(path))
    publish_file(path)
    recorded.append(dict(path=relative, size=os.path.getsize(path), sha256=sha256))
  entry = dict(stage=unit.stage, unit=unit.name, status=STATUS_DONE,
               settings_hash=unit.settings_hash, settings=unit.settings, outputs=recorded,
               counts=counts, **extra)
  write_entry(output_dir, entry)
  return entry


def record_failure(output_dir, unit, error, **extra):
  """Writes the entry of a unit that failed, with its error, for the tasks waiting for it."""
  write_entry(output_dir, dict(stage=unit.stage, unit=unit.name, status=STATUS_FAILED,
                               settings_hash=unit.settings_hash, error=str(error), **extra))


def is_done(output_dir, entry, expected_hash):
  """Whether `entry` (from `read_entry`) is a finished unit of the expected settings whose every
  output exists with the recorded size."""
  if not entry or entry.get("status") != STATUS_DONE or entry.get(
      "settings_hash") != expected_hash:
    return False
  for output in entry.get("outputs", ()):
    try:
      if os.path.getsize(os.path.join(output_dir, output["path"])) != output["size"]:
        return False
    except OSError:
      return False
  return True


def remove_unit_leftovers(output_dir, unit, outputs):
  """Before a unit is done (again): removes its entry, the outputs an earlier entry recorded,
  and the temporary files of its outputs and entry that a killed run left.

  Args:
    output_dir: OUT.
    unit: an object with `stage` and `name`.
    outputs: the unit's possible outputs, relative to OUT.
  """
  entry = read_entry(output_dir, unit.stage, unit.name)
  path = entry_path(output_dir, unit.stage, unit.name)
  candidates = [path, temp_name(path)]
  for relative in list(outputs) + [o["path"] for o in (entry or {}).get("outputs", ())]:
    candidates += [os.path.join(output_dir, relative),
                   temp_name(os.path.join(output_dir, relative))]
  for candidate in candidates:
    if os.path.lexists(candidate):
      if candidate.endswith(TEMP_SUFFIX):
        logging.info("removed the leftover of an interrupted run: %s", candidate)
      os.remove(candidate)


def remove_unit_temp_files(output_dir, unit, outputs, own_directory=None):
  """After a unit failed or was stopped: removes the temporary files of its outputs and entry
  (what it wrote half), then `own_directory` if it is left empty.

  Args:
    output_dir: OUT.
    unit: an object with `stage` and `name`.
    outputs: the unit's possible outputs, relative to OUT.
    own_directory: None, or a directory relative to OUT that only this unit writes to.

  Returns:
    the removed files, relative to OUT.
  """
  removed = []
  path = entry_path(output_dir, unit.stage, unit.name)
  for candidate in [temp_name(path)] + [temp_name(os.path.join(output_dir, relative))
                                        for relative in outputs]:
    try:
      os.remove(candidate)
    except FileNotFoundError:
      continue
    removed.append(os.path.relpath(candidate, output_dir))
  if own_directory:
    try:
      os.rmdir(os.path.join(output_dir, own_directory))
    except OSError:  # not empty (published outputs of an earlier run), or not there
      pass
  return removed


def wait_for_units(output_dir, stage, units, num_tasks, timeout_secs, poll_secs=POLL_SECONDS):
  """Waits until every unit of a stage is done (a file barrier between the tasks).

  Args:
    output_dir: OUT.
    stage: the stage's name, for messages.
    units: the stage's units (`name`, `settings_hash`, `index`: task index % num_tasks owns it).
    num_tasks: the number of tasks.
    timeout_secs: seconds to wait at most.
    poll_secs: seconds between two looks.

  Raises:
    StageIncomplete: at once when a unit's entry says it failed with these settings (naming it,
      its task and its error); or after `timeout_secs`, naming the units still missing and
      their tasks.
  """
  deadline = time.time() + timeout_secs
  pending = list(units)
  while True:
    still = []
    for unit in pending:
      entry = read_entry(output_dir, unit.stage, unit.name)
      if is_done(output_dir, entry, unit.settings_hash):
        continue
      if (entry and entry.get("status") == STATUS_FAILED
          and entry.get("settings_hash") == unit.settings_hash):
        raise StageIncomplete("%s: unit %s of task %d failed: %s" % (
            stage, unit.name, unit.index % num_tasks, entry.get("error")))
      still.append(unit)
    pending = still
    if not pending:
      return
    if time.time() >= deadline:
      raise StageIncomplete("%s: after %.0f s, %d units are not done: %s (is every task "
                            "running? a rerun does only what is missing)" % (
                                stage, timeout_secs, len(pending), describe_units(pending,
                                                                                  num_tasks)))
    time.sleep(poll_secs)


def describe_units(units, num_tasks):
  """"name (task i), ..." of the first NAMED_UNITS units, and how many more."""
  named = ", ".join("%s (task %d)" % (unit.name, unit.index % num_tasks)
                    for unit in units[:NAMED_UNITS])
  more = len(units) - NAMED_UNITS
  return named + (" and %d more" % more if more > 0 else "")


def remove_stale(output_dir, keep, directories):
  """Removes the files under `directories` that are not in `keep` (an earlier run's outputs of
  units no longer asked for, temporary files), then the directories left empty.

  Args:
    output_dir: OUT.
    keep: set of paths relative to OUT.
    directories: directories relative to OUT to sweep (missing ones are passed over).

  Returns:
    the removed files, relative to OUT, sorted.
  """
  removed = []
  for directory in directories:
    top = os.path.join(output_dir, directory)
    for root, _, names in os.walk(top, topdown=False):  # a directory after its subdirectories
      for name in names:
        relative = os.path.relpath(os.path.join(root, name), output_dir)
        if relative not in keep:
          os.remove(os.path.join(root, name))
          removed.append(relative)
      if not os.listdir(root):
        os.rmdir(root)
  return sorted(removed)
