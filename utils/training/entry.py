"""The `main` of every Estimator script: run_pretraining.py, run_squad.py, run_classifier.py.

  main = entry.script_main(PROGRAM, run, DEFAULTS)  # PROGRAM = "run_squad.py"

  if __name__ == "__main__":
    cli.run_main(main, DEFAULTS)   # parses with the script's defaults, quiet logs, runs main

`script_main` reads the shared flags once into a `job_config.JobConfig` (typed, frozen), which the
script's `run` passes to the job's steps (`utils/training/job.py`), never the flags object. Errors
in what a user gave are `errors.UsageError`s, which `script_main` turns into one line and exit
status 2 (`errors.run_reporting_errors`); a full disk and a rank whose peer ended get one line too.
"""

from absl import flags
from absl import logging

from utils.core import errors
from utils.runtime import hvd_utils
from utils.training import estimator as estimator_lib
from utils.training import flags as job_flags
from utils.training import job_config
from utils.training import messages


def script_main(script_name, run, defaults=None):
  """The `main(argv)` of an Estimator script, for `cli.run_main` or absl's `app.run`.

  Args:
    script_name: e.g. "run_squad.py", for messages.
    run: the script's job, run(flags, config) -> exit status: `flags` the parsed flags (for the
      script's own), `config` the `job_config.JobConfig` of the shared ones.
    defaults: dict flag name -> the script's own default (`flags.apply_script_defaults`).

  Returns:
    main(argv) -> exit status: no positional arguments, the script's defaults for the flags not
    given, INFO logging, and `run`'s errors reported as one line with their exit status (after
    their traceback with --verbose).
  """

  def main(argv):
    if len(argv) > 1:
      errors.report(script_name, "unexpected arguments: %s" % " ".join(argv[1:]))
      return errors.USAGE_EXIT_CODE
    job_flags.apply_script_defaults(flags.FLAGS, defaults)
    logging.set_verbosity(logging.INFO)
    config = job_config.JobConfig.from_flags(flags.FLAGS)
    return errors.run_reporting_errors(
        script_name, _ending_after_another_rank(_explaining_full_disks(run)), flags.FLAGS, config,
        verbose=getattr(flags.FLAGS, "verbose", False))

  return main


def _ending_after_another_rank(run):
  """`run` where a worker whose collective failed because another rank had ended first ends
  with one line naming that rank and the checkpoint a rerun resumes from
  (`estimator.another_worker_ended`, exit status 1), not a traceback."""

  def checked_run(f, config):
    try:
      return run(f, config)
    except errors.StoppedByAnotherWorker:
      raise
    except Exception as e:  # pylint: disable=broad-except  (re-raised unless Horovod shut down)
      if not hvd_utils.is_shutdown_error(e):
        raise
      raise estimator_lib.another_worker_ended(config.output_dir) from e

  return checked_run


def _explaining_full_disks(run):
  """`run` with a write that found no space (anywhere: a checkpoint, the log, a result file)
  reported as `errors.DiskFullError` naming the directory (`messages.explaining_full_disks`),
  instead of a traceback."""

  def checked_run(f, config):
    with messages.explaining_full_disks(config.output_dir):
      return run(f, config)

  return checked_run
