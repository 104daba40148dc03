"""utils/core/errors.py: the exit status and the one line each error of the module ends a run
with (a stop by a signal is not reported as an error), the report helpers, and that an error the
module does not define is left to propagate."""

import io
import os

import pytest

from utils.core import errors


def test_exit_codes_are_the_documented_conventions():
  assert errors.USAGE_EXIT_CODE == 2
  assert errors.FAILURE_EXIT_CODE == 1
  assert errors.STOP_EXIT_CODE == os.EX_TEMPFAIL == 75  # sysexits.h: temporary failure, retry


def test_require_raises_a_usage_error_formatted_with_its_arguments():
  assert errors.require(True, "never %s", "formatted") is None
  with pytest.raises(errors.UsageError, match=r"^--n=3 must be even \(got 3, 50%\)$"):
    errors.require(False, "--n=%d must be even (got %s, %d%%)", 3, "3", 50)


@pytest.mark.parametrize("kind,expected", [
    ("error", "tool.py: error: bad flag"), ("warning", "tool.py: warning: bad flag"),
    (None, "tool.py: bad flag"), ("", "tool.py: bad flag")])
def test_report_line_puts_the_kind_between_program_and_message(kind, expected):
  assert errors.report_line("tool.py", "bad flag", kind) == expected


def test_report_prints_one_line_on_the_given_stream_or_stderr(capsys):
  stream = io.StringIO()
  errors.report("tool.py", "no vocab", stream=stream)
  assert stream.getvalue() == "tool.py: error: no vocab\n"
  errors.report("tool.py", "stopped at step 4", kind=None)
  assert capsys.readouterr() == ("", "tool.py: stopped at step 4\n")


def test_ending_line_is_not_an_error_only_for_a_stop_by_a_signal():
  assert errors.ending_line("run.py", errors.StoppedBySignal("saved at step 9")) == \
      "run.py: saved at step 9"
  assert errors.ending_line("run.py", errors.TrainingDivergedError("loss is NaN")) == \
      "run.py: error: loss is NaN"
  assert errors.ending_line("run.py", errors.DiskFullError("/ckpt: 0 free")) == \
      "run.py: error: /ckpt: 0 free"


@pytest.mark.parametrize("error,status,line", [
    (errors.TrainingDivergedError("loss became NaN: lower --learning_rate"), 1,
     "run.py: error: loss became NaN: lower --learning_rate\n"),
    (errors.DiskFullError("/out: 2000 bytes needed, 10 free"), 2,
     "run.py: error: /out: 2000 bytes needed, 10 free\n"),
    (errors.StoppedBySignal("stopped by SIGTERM at step 12, checkpoint saved"), 75,
     "run.py: stopped by SIGTERM at step 12, checkpoint saved\n")])
def test_each_error_ends_the_run_with_its_status_and_one_line(capsys, error, status, line):
  def failing():
    raise error

  assert errors.run_reporting_errors("run.py", failing) == status
  assert capsys.readouterr() == ("", line)


def test_the_function_status_is_returned_and_other_errors_propagate(capsys):
  assert errors.run_reporting_errors("run.py", lambda a, b: a + b, 3, 4) == 7

  def plain_value_error():
    raise ValueError("not one of the module's errors")

  with pytest.raises(ValueError, match="not one of the module's errors"):
    errors.run_reporting_errors("run.py", plain_value_error)
  assert capsys.readouterr().err == ""


def test_a_worker_stopped_by_another_ends_with_one_line_and_its_traceback_if_verbose(capsys):
  def stopped():
    raise errors.StoppedByAnotherWorker("rank 1 ended the job")
  assert errors.run_reporting_errors("run_pretraining.py", stopped) == 1
  assert capsys.readouterr().err == "run_pretraining.py: error: rank 1 ended the job\n"
  assert errors.run_reporting_errors("run_pretraining.py", stopped, verbose=True) == 1
  err = capsys.readouterr().err
  assert "Traceback" in err
  assert err.rstrip().endswith("run_pretraining.py: error: rank 1 ended the job")
