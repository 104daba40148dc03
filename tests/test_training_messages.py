"""utils/training/messages.py: the errors a job ends with, worded once: a full disk (and the block
that turns a write that found no space into it), a diverged loss, a bad input record. In process;
tests/test_run_pretraining_recovery.py fills a real disk under a real run.
"""

import errno
import re
import types

import pytest

from tests import helpers
from utils.core import errors
from utils.training import messages


def _disk_full(path=None):
  return OSError(errno.ENOSPC, "No space left on device", path)


def test_a_write_that_found_no_space_is_one_line_naming_the_directory(tmp_path):
  helpers.write_checkpoints(tmp_path, [4])
  with pytest.raises(errors.DiskFullError) as raised:
    with messages.explaining_full_disks(str(tmp_path)):
      raise _disk_full()
  assert re.match(r"^no space left on the device of %s \(writing to it\): a checkpoint needs "
                  r"about [\d.]+ kB, [\d.]+ [kMGT]?B free; the newest complete checkpoint is "
                  r"model.ckpt-4\. Free some space \(or use another --output_dir\), then run the "
                  r"same command again to resume$" % re.escape(str(tmp_path)),
                  str(raised.value)), str(raised.value)
  assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_a_failed_save_is_removed_and_named_with_the_checkpoints_size(tmp_path):
  helpers.write_checkpoints(tmp_path, [4])
  (tmp_path / "model.ckpt-6_temp").mkdir()
  sizes = types.SimpleNamespace(checkpoint_bytes=2500000)
  with pytest.raises(errors.DiskFullError) as raised:
    with messages.explaining_full_disks("out", str(tmp_path), sizes):
      raise _disk_full()
  message = str(raised.value)
  assert message.startswith("no space left on the device of %s (writing checkpoint "
                            "model.ckpt-6): a checkpoint needs about 2.5 MB, " % tmp_path), message
  assert "; removed the partial model.ckpt-6_temp; the newest complete checkpoint is " \
         "model.ckpt-4. " in message
  assert not (tmp_path / "model.ckpt-6_temp").exists()
  # A file the error names is the one named.
  error = messages.disk_full_error(_disk_full(str(tmp_path / "eval_results.txt")), "out")
  assert str(error).startswith("no space left on the device of %s (writing %s)"
                               % (tmp_path, tmp_path / "eval_results.txt"))


def test_other_errors_and_explained_ones_pass_unchanged(tmp_path):
  for error in (ValueError("no"), errors.UsageError("No space left on device"),
                errors.TrainingDivergedError("x"), errors.DiskFullError("y")):
    with pytest.raises(type(error)) as raised:
      with messages.explaining_full_disks(str(tmp_path)):
        raise error
    assert raised.value is error
  with messages.explaining_full_disks(str(tmp_path)):
    pass


def _config(tmp_path, *args):
  return helpers.job_config(["--output_dir=%s" % tmp_path, "--learning_rate=0.5"] + list(args))


def test_nan_loss_advice_names_the_flags_to_change(tmp_path):
  error = messages.nan_loss_error(_config(tmp_path), 0)
  assert isinstance(error, errors.TrainingDivergedError)
  assert str(error) == (
      "the training loss became NaN. What to try: lower --learning_rate (now 0.5 per worker) or "
      "raise --num_warmup_steps; check the input records (a NaN masked_lm_weights value makes a "
      "NaN loss). After a change, no checkpoint was saved: a rerun starts from step 0.")
  fp16 = str(messages.nan_loss_error(_config(tmp_path, "--manual_fp16", "--init_loss_scale=64"),
                                     6, skipped_updates=True))
  assert fp16.startswith("the gradient norm stayed non-finite (updates skipped one after "
                         "another). What to try: ")
  assert "fp16 activations may overflow: lower --init_loss_scale (now 64)" in fp16
  assert fp16.endswith("After a change, running the same command again resumes from the newest "
                       "checkpoint (step 6 in %s)." % tmp_path)
  assert "bf16 has fp32's range" in str(messages.nan_loss_error(_config(tmp_path, "--bf16"), 0))


@pytest.mark.parametrize("problem,rank,step,written,expected", [
    ("f: record 3 at byte offset 96: bad CRC", 0, 8, True,
     "bad input record: f: record 3 at byte offset 96: bad CRC; stopped at update 8, checkpoint "
     "written: remove or regenerate the file, then run the same command to resume"),
    (None, 1, 8, False,
     "worker 1 found a bad input record (its line names it); stopped at update 8, no checkpoint "
     "written by this worker: remove or regenerate the file, then run the same command to "
     "resume"),
    ("f: x", 0, None, False,
     "bad input record: f: x; stopped before the first update (nothing to save): remove or "
     "regenerate the file, then run the same command to resume"),
])
def test_input_stop_message(problem, rank, step, written, expected):
  assert messages.input_stop_message(problem, rank, step, written) == expected
