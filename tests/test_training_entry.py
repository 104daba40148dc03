"""utils/training/entry.py: the `main` of every Estimator script, in process: the script's
defaults and the JobConfig handed to its `run`, and every ending as one line with its exit status
(a usage error, a full disk, a rank whose peer ended). The scripts' end-to-end tests run the same
`main` in processes.
"""

import contextlib
import errno
import io

import tensorflow as tf

from tests import helpers
from utils.core import errors
from utils.training import entry

PROGRAM = "prog.py"


def _main(run, args=(), defaults=None, argv=(PROGRAM,)):
  """(exit status, stderr) of `script_main(PROGRAM, run, defaults)` on the flags `args`."""
  stderr = io.StringIO()
  with contextlib.redirect_stderr(stderr):
    with helpers.parsed_flags(PROGRAM, args):
      status = entry.script_main(PROGRAM, run, defaults)(list(argv))
  return status, stderr.getvalue()


def test_run_gets_the_flags_and_the_config_with_the_scripts_defaults(tmp_path):
  seen = {}

  def run(f, config):
    seen.update(flags_seed=f.seed, config=config)
    return 0

  status, _ = _main(run, ["--output_dir=%s" % tmp_path, "--seed=3"], {"max_seq_length": 77})
  assert status == 0
  assert seen["flags_seed"] == 3 and seen["config"].seed == 3
  assert seen["config"].max_seq_length == 77 and seen["config"].output_dir == str(tmp_path)


def test_positional_arguments_and_usage_errors_are_one_line_and_status_2():
  status, stderr = _main(lambda f, config: 0, argv=(PROGRAM, "extra"))
  assert (status, stderr) == (2, "prog.py: error: unexpected arguments: extra\n")

  def run(f, config):
    raise errors.UsageError("--flag must be > 1, got 0")

  assert _main(run) == (2, "prog.py: error: --flag must be > 1, got 0\n")


def test_a_full_disk_anywhere_in_the_run_is_one_line(tmp_path):
  def run(f, config):
    raise OSError(errno.ENOSPC, "No space left on device")

  status, stderr = _main(run, ["--output_dir=%s" % tmp_path])
  assert status == errors.exit_code(errors.DiskFullError("x"))
  assert stderr.startswith("prog.py: error: no space left on the device of %s (writing to it)"
                           % tmp_path), stderr
  assert stderr.count("\n") == 1


def test_a_rank_whose_peer_ended_names_the_checkpoint_a_rerun_resumes_from(tmp_path):
  helpers.write_checkpoints(tmp_path, [40])

  def run(f, config):
    raise tf.errors.UnknownError(None, None, "Horovod has been shut down. This was caused by an "
                                 "exception on one of the ranks")

  status, stderr = _main(run, ["--output_dir=%s" % tmp_path])
  assert status == errors.FAILURE_EXIT_CODE
  assert stderr.startswith("prog.py: error: rank 0 stopped: ")
  assert stderr.endswith("nothing was saved after checkpoint 40, which the same command resumes "
                         "from\n")
