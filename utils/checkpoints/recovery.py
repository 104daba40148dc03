"""Which checkpoint a run resumes from, what a failed save leaves behind, and checkpoint health.

Before the Estimator reads `<output_dir>/checkpoint` (the index naming the newest checkpoint),
the process that saves checkpoints calls `prepare_resume`:

  step, note = recovery.prepare_resume(output_dir, resume_from_step=None)

* Leftovers of an interrupted save (`model.ckpt-N_temp/`) are removed.
* The newest checkpoint is read whole (every tensor, so TensorFlow checks its checksums; a short
  data file is named with the bytes its index expects). An unreadable one is moved to
  `<output_dir>/unreadable/` and the index rewritten to name the newest complete one.
* `resume_from_step=N` resumes from `model.ckpt-N` instead: the newer checkpoints (a diverged
  trajectory) are moved to `<output_dir>/set_aside_after_step_N/`, out of the Saver's way;
  0 sets all of them aside and starts from the initial weights.

The index is rewritten, never the checkpoints: the Estimator then restores what it names.

At every save, `utils/training/health.CheckpointHealthHook` appends the step, loss and gradient
norm of the update that produced the checkpoint to `<output_dir>/checkpoint_health.json`
(`write_health`); when the training diverges it knows the global step at which the loss or the
gradient norm first became non-finite, and `newest_good_checkpoint` names the newest checkpoint
saved before it. docs/LONG_RUNS.md describes both for users.
"""

import json
import os
import re

from absl import logging
import numpy as np
import tensorflow as tf

from utils.core import errors
from utils.core import paths
from utils.runtime import disk_space

_tf1 = tf.compat.v1

CHECKPOINT_INDEX = "checkpoint"
HEALTH_FILE = "checkpoint_health.json"
UNREADABLE_DIR = "unreadable"
SET_ASIDE_DIR = "set_aside_after_step_%d"
TEMP_SUFFIX = "_temp"
_PREFIX_PATTERN = re.compile(r"^(?P<name>.+)-(?P<step>\d+)$")


def step_of(prefix):
  """The global step in a checkpoint prefix `.../model.ckpt-N`, or None."""
  match = _PREFIX_PATTERN.match(os.path.basename(prefix))
  return int(match.group("step")) if match else None


def listed_checkpoints(directory):
  """The checkpoint prefixes with an index file in `directory`, oldest step first.

  Returns:
    list of (step, prefix).
  """
  found = []
  for path in tf.io.gfile.glob(os.path.join(directory, "*.index")):
    prefix = path[:-len(".index")]
    step = step_of(prefix)
    if step is not None and not prefix.endswith(TEMP_SUFFIX):
      found.append((step, prefix))
  return sorted(found)


def indexed_checkpoints(directory):
  """The prefixes the `checkpoint` index lists (oldest first; the newest is the one resumed)."""
  state = tf.train.get_checkpoint_state(directory)
  if state is None:
    return []
  prefixes = list(state.all_model_checkpoint_paths)
  if state.model_checkpoint_path and state.model_checkpoint_path not in prefixes:
    prefixes.append(state.model_checkpoint_path)
  return [p if os.path.isabs(p) or paths.is_remote(p) else os.path.join(directory, p)
          for p in prefixes]


def prefix_files(prefix):
  """The files of a checkpoint prefix: index, data shards, .meta (those that exist)."""
  return sorted(tf.io.gfile.glob(prefix + ".index") + tf.io.gfile.glob(prefix + ".data-*")
                + tf.io.gfile.glob(prefix + ".meta"))


def _remove(path):
  if tf.io.gfile.isdir(path):
    tf.io.gfile.rmtree(path)
  else:
    tf.io.gfile.remove(path)


def remove_temporary(directory):
  """Removes the leftovers of interrupted saves (`<prefix>_temp/` directories and files).

  Returns:
    the paths removed.
  """
  removed = sorted(tf.io.gfile.glob(os.path.join(directory, "*" + TEMP_SUFFIX + "*")))
  for path in removed:
    _remove(path)
  return removed


def remove_partial_save(directory):
  """After a failed save: removes its `_temp` leftovers and the files of checkpoints newer than
  the newest one the index names (written by the failed save, never completed).

  Returns:
    the paths removed.
  """
  removed = remove_temporary(directory)
  indexed = [step_of(p) for p in indexed_checkpoints(directory)]
  newest = max([s for s in indexed if s is not None], default=-1)
  names = set()
  for path in tf.io.gfile.glob(os.path.join(directory, "*.ckpt-*")):
    match = re.match(r"^(.+-(\d+))\.(index|data-.*|meta)$", os.path.basename(path))
    if match and int(match.group(2)) > newest:
      names.add(path)
  for path in sorted(names):
    tf.io.gfile.remove(path)
  return removed + sorted(names)


def expected_data_bytes(reader):
  """Bytes the data shards of a checkpoint hold according to its index, or None (strings)."""
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  if any(dtypes[name] == tf.string for name in shapes):
    return None
  return sum(int(np.prod(shapes[name], dtype=np.int64)) * dtypes[name].size for name in shapes)


def _first_line(error):
  text = getattr(error, "message", None) or str(error) or type(error).__name__
  return text.strip().splitlines()[0]


def checkpoint_problem(prefix):
  """Why the checkpoint at `prefix` cannot be restored, or None when every tensor reads back.

  Reads every tensor (TensorFlow checks each one's checksum); a data file shorter than its index
  says is named with both sizes.

  Returns:
    None, or "<file>: <reason>".
  """
  index = prefix + ".index"
  if not tf.io.gfile.exists(index):
    return "%s: missing" % index
  try:
    reader = tf.train.load_checkpoint(prefix)
  except Exception as e:  # pylint: disable=broad-except  (any failure: the file is unusable)
    return "%s: %s" % (index, _first_line(e))
  data_files = tf.io.gfile.glob(prefix + ".data-*")
  if not data_files:
    return "%s.data-*: missing" % prefix
  expected = expected_data_bytes(reader)
  actual = sum(tf.io.gfile.stat(path).length for path in data_files)
  if expected is not None and actual < expected:
    return ("%s: %d bytes, its index expects %d (truncated)"
            % (", ".join(sorted(data_files)), actual, expected))
  try:
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except Exception as e:  # pylint: disable=broad-except
    return "%s: %s" % (", ".join(sorted(data_files)), _first_line(e))
  return None


def move_checkpoints(prefixes, directory):
  """Moves the files of `prefixes` into `directory` (created). Returns `directory`."""
  tf.io.gfile.makedirs(directory)
  for prefix in prefixes:
    for path in prefix_files(prefix):
      tf.io.gfile.rename(path, os.path.join(directory, os.path.basename(path)), overwrite=True)
  return directory


def rewrite_index(directory, prefixes):
  """Makes the `checkpoint` index list `prefixes` (oldest first), the last as the newest; with
  none, removes the index (the next run starts from the initial weights)."""
  if prefixes:
    _tf1.train.update_checkpoint_state(directory, prefixes[-1],
                                       all_model_checkpoint_paths=list(prefixes))
  elif tf.io.gfile.exists(os.path.join(directory, CHECKPOINT_INDEX)):
    tf.io.gfile.remove(os.path.join(directory, CHECKPOINT_INDEX))


def _all_checkpoints(directory):
  """Every checkpoint of `directory` with an index file (also one the index does not name yet),
  oldest first: list of (step, prefix)."""
  return listed_checkpoints(directory)


def prepare_resume(directory, resume_from_step=None):
  """Chooses the checkpoint a run in `directory` resumes from and makes the index name it.

  Call in the process that saves checkpoints into `directory`, before anything reads the index.

  Args:
    directory: the output directory.
    resume_from_step: None: the newest complete checkpoint; N > 0: `model.ckpt-N` (the newer
      ones are set aside); 0: none (every checkpoint set aside, training starts afresh).

  Returns:
    (step, note): the global step the run resumes from (0: none) and a one-line note for the
    log, or None when the newest checkpoint is resumed as it is.

  Raises:
    errors.UsageError: --resume_from_step names a step without a checkpoint (the message lists
      the steps there are) or an unreadable one; or no checkpoint of `directory` is readable.
  """
  removed = remove_temporary(directory)
  for path in removed:
    logging.info("removed %s, left by an interrupted checkpoint save", path)
  checkpoints = _all_checkpoints(directory)
  if resume_from_step is not None:
    return _resume_from(directory, checkpoints, resume_from_step)
  if not checkpoints:
    return 0, None
  newest_indexed = step_of(indexed_checkpoints(directory)[-1]) if indexed_checkpoints(
      directory) else None
  # A checkpoint newer than the index (a kill between the save and the index update) counts too.
  unreadable = []
  for step, prefix in reversed(checkpoints):
    problem = checkpoint_problem(prefix)
    if problem is None:
      break
    unreadable.append((step, prefix, problem))
  else:
    step, prefix = None, None
  if not unreadable:
    if step == newest_indexed:
      return step, None
    rewrite_index(directory, [p for s, p in checkpoints])
    if newest_indexed is None or step > newest_indexed:
      return step, ("resuming from %s, complete but not yet in the checkpoint index (the save "
                    "was interrupted before the index was updated)" % prefix)
    return step, ("the checkpoint index names model.ckpt-%d, whose files are missing; resuming "
                  "from %s, the newest complete checkpoint" % (newest_indexed, prefix))
  moved_to = move_checkpoints([p for _, p, _ in unreadable],
                              os.path.join(directory, UNREADABLE_DIR))
  bad = "; ".join(problem for _, _, problem in unreadable)
  if prefix is None:
    raise errors.UsageError(
        "no checkpoint in %s can be read (%s; moved to %s): to start again from the initial "
        "weights give --resume_from_step=0" % (directory, bad, moved_to))
  rewrite_index(directory, [p for s, p in checkpoints if s <= step])
  return step, ("checkpoint %s is unreadable (%s); resuming from %s, the newest complete "
                "checkpoint (the unreadable one moved to %s)"
                % (", ".join(os.path.basename(p) for _, p, _ in unreadable), bad, prefix,
                   moved_to))


def _resume_from(directory, checkpoints, resume_from_step):
  """`prepare_resume` with --resume_from_step given."""
  steps = [s for s, _ in checkpoints]
  errors.require(resume_from_step >= 0, "--resume_from_step must be >= 0, got %d",
                 resume_from_step)
  if resume_from_step > 0:
    errors.require(resume_from_step in steps,
                   "--resume_from_step=%d: %s has no checkpoint of step %d; its checkpoints are "
                   "of steps %s", resume_from_step, directory, resume_from_step,
                   ", ".join(str(s) for s in steps) or "(none)")
    prefix = dict(checkpoints)[resume_from_step]
    problem = checkpoint_problem(prefix)
    errors.require(problem is None, "--resume_from_step=%d: %s cannot be read: %s",
                   resume_from_step, prefix, problem)
  newer = [p for s, p in checkpoints if s > resume_from_step]
  kept = [p for s, p in checkpoints if s <= resume_from_step]
  moved_to = os.path.join(directory, SET_ASIDE_DIR % resume_from_step)
  if newer:
    move_checkpoints(newer, moved_to)
  dropped = truncate_health(directory, resume_from_step)
  if dropped:
    write_health(moved_to, dropped)
  rewrite_index(directory, kept)
  start = ("model.ckpt-%d" % resume_from_step if resume_from_step
           else "the initial weights (no checkpoint)")
  note = "--resume_from_step=%d: training continues from %s" % (resume_from_step, start)
  if newer:
    note += "; the %d newer checkpoint(s) moved to %s" % (len(newer), moved_to)
  return resume_from_step, note


# ---------------------------------------------------------------------------------------------
# Checkpoint health


def read_health(directory):
  """The records of `<directory>/checkpoint_health.json`, oldest first ([] without the file)."""
  path = os.path.join(directory, HEALTH_FILE)
  if not tf.io.gfile.exists(path):
    return []
  try:
    with tf.io.gfile.GFile(path) as f:
      return list(json.load(f)["checkpoints"])
  except (ValueError, KeyError, TypeError) as e:
    logging.warning("%s cannot be read (%s): checkpoint health unknown", path, e)
    return []


def write_health(directory, records):
  """Writes the records (a new file, then renamed over the old: never half-written)."""
  tf.io.gfile.makedirs(directory)
  path = os.path.join(directory, HEALTH_FILE)
  try:
    with tf.io.gfile.GFile(path + ".tmp", "w") as f:
      json.dump({"checkpoints": records}, f, indent=1)
      f.write("\n")
  except Exception:
    if tf.io.gfile.exists(path + ".tmp"):
      tf.io.gfile.remove(path + ".tmp")
    raise
  tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def truncate_health(directory, step):
  """Drops the records after `step`; returns the dropped ones."""
  records = read_health(directory)
  kept = [r for r in records if r["step"] <= step]
  if len(kept) != len(records):
    write_health(directory, kept)
  return [r for r in records if r["step"] > step]


def newest_good_checkpoint(directory, bad_step):
  """The newest checkpoint of `directory` saved before the weights went bad.

  Args:
    directory: the output directory.
    bad_step: global step of the weights whose loss or gradient norm was first non-finite (the
      checkpoint of that step holds them); None: not known (the newest checkpoint is named).

  Returns:
    (step, prefix, health record or None) of the newest checkpoint on disk with a step below
    `bad_step` whose recorded loss and gradient norm are finite and whose loss did not explode
    (`health.CheckpointHealthHook.loss_exploded`), or None when there is none.
  """
  health = {r["step"]: r for r in read_health(directory)}
  for step, prefix in reversed(_all_checkpoints(directory)):
    if bad_step is not None and step >= bad_step:
      continue
    record = health.get(step)
    if record is not None and (not record.get("finite", True) or record.get("exploded", False)):
      continue
    return step, prefix, record
  return None


def variables_bytes(variables):
  """Bytes a checkpoint of `variables` (tf.Variables) holds: elements x dtype size."""
  total = 0
  for var in variables:
    shape = var.shape
    if shape.is_fully_defined():
      total += int(np.prod(shape.as_list(), dtype=np.int64)) * var.dtype.base_dtype.size
  return total


def checkpoint_bytes(prefix):
  """Bytes on disk of a checkpoint's files."""
  return sum(tf.io.gfile.stat(path).length for path in prefix_files(prefix))


def space_problem(directory, needed, keep_checkpoint_max, existing):
  """Compares the free space of `directory` with what its checkpoints need.

  Args:
    directory: where checkpoints are saved.
    needed: bytes of one checkpoint.
    keep_checkpoint_max: checkpoints kept (the Saver writes the next before deleting the oldest).
    existing: checkpoints already there.

  Returns:
    (error, warning): error, a message when the next checkpoint does not fit; warning, a message
    when the kept checkpoints will not; each None when fine or unknown (no local path).
  """
  free = disk_space.free_bytes(directory)
  if free is None or needed <= 0:
    return None, None
  if free < needed:
    return ("%s has %s free; the next checkpoint needs about %s. Free some space (or use another "
            "--output_dir), then run the same command again: it resumes from the newest "
            "complete checkpoint" % (directory, disk_space.format_bytes(free),
                                     disk_space.format_bytes(needed)), None)
  more = max(keep_checkpoint_max + 1 - existing, 1) * needed
  if free < more:
    return None, ("%s has %s free, less than the %s that --keep_checkpoint_max=%d checkpoints "
                  "of %s each need (%d more, counting the one written before the oldest is "
                  "deleted): the run will stop when the disk fills"
                  % (directory, disk_space.format_bytes(free), disk_space.format_bytes(more),
                     keep_checkpoint_max, disk_space.format_bytes(needed),
                     max(keep_checkpoint_max + 1 - existing, 1)))
  return None, None
