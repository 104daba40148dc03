"""The errors a job ends with and the advice they give, worded once.

  with messages.explaining_full_disks(output_dir):   # a write that found no space: one line
    ...
  raise messages.nan_loss_error(config, checkpoint_step)
  message = messages.input_stop_message(problem, finder_rank, stop_step, written)

The full disk's error names the directory, the sizes and the newest complete checkpoint (after
removing a failed save); the divergence's names the flags to change and where a rerun resumes.
"""

import contextlib
import os

from utils.checkpoints import contents as checkpoints_lib
from utils.checkpoints import recovery
from utils.core import errors
from utils.runtime import disk_space

# The errors a job ends with that already say what happened: never reworded as a full disk.
EXPLAINED_ERRORS = (errors.UsageError, errors.DiskFullError, errors.TrainingDivergedError)


@contextlib.contextmanager
def explaining_full_disks(output_dir, checkpoint_dir=None, checkpoint_sizes=None):
  """A block in which a write that found no space (anywhere: a checkpoint, the log, a result
  file) raises `errors.DiskFullError` naming the directory (`disk_full_error`), not a traceback.

  Args:
    output_dir: the job's --output_dir.
    checkpoint_dir: where this worker saves checkpoints (None: it saves none or none is being
      written): a failed save's files there are removed.
    checkpoint_sizes: None, or anything with `checkpoint_bytes` (bytes of one checkpoint, or
      None), read after the write failed: e.g. the `health.CheckpointHealthHook`.

  Yields:
    nothing; the block's other errors pass unchanged.

  Raises:
    errors.DiskFullError: the block's write found no space.
  """
  try:
    yield
  except EXPLAINED_ERRORS:
    raise
  except Exception as e:  # pylint: disable=broad-except  (re-raised unless the disk is full)
    if not disk_space.is_disk_full(e):
      raise
    checkpoint_bytes = None if checkpoint_sizes is None else checkpoint_sizes.checkpoint_bytes
    raise disk_full_error(e, output_dir, checkpoint_dir, checkpoint_bytes) from None


def disk_full_error(error, output_dir, checkpoint_dir=None, checkpoint_bytes=None):
  """The error to stop a job with after a write found no space; cleans up a partial checkpoint.

  Args:
    error: the error of the write (`disk_space.is_disk_full(error)`).
    output_dir: the job's --output_dir.
    checkpoint_dir: where this worker saves checkpoints (None: it saves none): the files of a
      failed save there (`model.ckpt-N_temp/`, an unfinished `model.ckpt-N.*`) are removed.
    checkpoint_bytes: bytes of one checkpoint, when known; else the newest checkpoint's size.

  Returns:
    `errors.DiskFullError`: the directory, what was written, the bytes a checkpoint needs and
    the bytes free (after the clean-up), the newest complete checkpoint and what to do.
  """
  path = disk_space.failed_path(error)
  removed = recovery.remove_partial_save(checkpoint_dir) if checkpoint_dir else []
  partial = [os.path.basename(p) for p in removed]
  temp = [name for name in partial if recovery.TEMP_SUFFIX in name]
  if path:
    directory, what = os.path.dirname(os.path.abspath(path)), "writing %s" % path
  elif temp:
    directory = checkpoint_dir
    what = "writing checkpoint %s" % temp[0].split(recovery.TEMP_SUFFIX)[0]
  else:
    directory, what = checkpoint_dir or output_dir, "writing to it"
  newest = checkpoints_lib.latest_checkpoint(checkpoint_dir or output_dir)
  if checkpoint_bytes is None and newest:
    checkpoint_bytes = recovery.checkpoint_bytes(newest)
  free = disk_space.free_bytes(directory)
  sizes = []
  if checkpoint_bytes:
    sizes.append("a checkpoint needs about %s" % disk_space.format_bytes(checkpoint_bytes))
  if free is not None:
    sizes.append("%s free" % disk_space.format_bytes(free))
  message = "no space left on the device of %s (%s)" % (directory, what)
  if sizes:
    message += ": " + ", ".join(sizes)
  if partial:
    message += "; removed the partial %s" % ", ".join(partial)
  if newest:
    message += "; the newest complete checkpoint is %s" % os.path.basename(newest)
  return errors.DiskFullError(
      message + ". Free some space (or use another --output_dir), then run the same command "
      "again to resume")


def nan_loss_error(config, checkpoint_step, bad_step=None, skipped_updates=False):
  """The error to stop a job with when the Estimator's NaN-loss check fired (or the
  `health.CheckpointHealthHook` saw too many updates skipped as non-finite).

  Args:
    config: the `job_config.JobConfig` (--output_dir, --learning_rate per worker, the precision
      flags and --init_loss_scale).
    checkpoint_step: global step of the newest checkpoint (0: none).
    bad_step: global step of the weights whose loss or gradient norm was first non-finite (or
      whose loss exploded, `health.CheckpointHealthHook`), when known: the message then names
      the newest checkpoint saved before it.
    skipped_updates: the run stopped for consecutive skipped updates, not a NaN loss.

  Returns:
    an `errors.TrainingDivergedError` naming the flags to change and where a rerun resumes.
  """
  output_dir = config.output_dir
  advice = ["lower --learning_rate (now %g per worker) or raise --num_warmup_steps"
            % config.learning_rate]
  if config.manual_fp16:
    advice.append("fp16 activations may overflow: lower --init_loss_scale (now %d), or train in "
                  "fp32 (without --manual_fp16)" % config.init_loss_scale)
  if config.bf16:
    advice.append("bf16 has fp32's range but 8 bits of mantissa: if fp32 (without --bf16) "
                  "trains, keep fp32 for this model")
  advice.append("check the input records (a NaN masked_lm_weights value makes a NaN loss)")
  resume = ("running the same command again resumes from the newest checkpoint (step %d in %s)"
            % (checkpoint_step, output_dir) if checkpoint_step else
            "no checkpoint was saved: a rerun starts from step 0")
  if checkpoint_step and bad_step is not None:
    resume = _resume_advice(output_dir, checkpoint_step, bad_step)
  what = ("the training loss became NaN" if not skipped_updates else
          "the gradient norm stayed non-finite (updates skipped one after another)")
  if bad_step is not None:
    what += " from the weights of step %d on" % bad_step
  return errors.TrainingDivergedError(
      "%s. What to try: %s. After a change, %s." % (what, "; ".join(advice), resume))


def _resume_advice(output_dir, checkpoint_step, bad_step):
  """Where a rerun should resume after a divergence first seen at the weights of `bad_step`."""
  good = recovery.newest_good_checkpoint(output_dir, bad_step)
  if good is None:
    return ("no checkpoint was saved before that: add --resume_from_step=0 to start again from "
            "the initial weights in %s (the diverged checkpoints are set aside)" % output_dir)
  step, prefix, record = good
  if step == checkpoint_step:
    return ("running the same command again resumes from the newest checkpoint (step %d in %s), "
            "saved before the values went bad" % (step, output_dir))
  values = ""
  if record is not None and record.get("loss") is not None:
    values = " (loss %.4g" % record["loss"]
    if record.get("global_norm") is not None:
      values += ", gradient norm %.4g" % record["global_norm"]
    values += ")"
  return ("resume from %s%s, the newest checkpoint saved before the loss or gradient norm went "
          "bad (the newer ones hold diverged weights): run the same command with "
          "--resume_from_step=%d" % (prefix, values, step))


def input_stop_message(problem, finder_rank, stop_step, checkpoint_written):
  """The line a job stopped for a bad input record ends with.

  Args:
    problem: this worker's input check's problem ("<file>: record <k> at byte offset <b>:
      <what>"), or None when another worker found the record.
    finder_rank: the rank whose check found it.
    stop_step: the global step the run stopped at, or None (before its first update).
    checkpoint_written: the checkpoint of `stop_step` is on disk.

  Returns:
    str: the record (or the worker that names it), the update saved and what to do.
  """
  if stop_step is None:
    saved = "stopped before the first update (nothing to save)"
  elif checkpoint_written:
    saved = "stopped at update %d, checkpoint written" % stop_step
  else:
    saved = "stopped at update %d, no checkpoint written by this worker" % stop_step
  if problem is not None:
    return ("bad input record: %s; %s: remove or regenerate the file, then run the same "
            "command to resume" % (problem, saved))
  return ("worker %d found a bad input record (its line names it); %s: remove or "
          "regenerate the file, then run the same command to resume" % (finder_rank, saved))
