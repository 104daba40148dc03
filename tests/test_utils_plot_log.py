"""utils/plot_log.py, the command line `python -m utils.plot_log LOG PNG` (its `main`, in process;
the README's block runs the command itself): the PNG's path on stdout, exit 2 and one line naming
the file for a log without step lines, a missing log or a PNG that cannot be written. The drawing
is tests/test_runlog_plot.py's."""

import pytest

from tests.test_runlog_plot import png_size
from tests.test_runlog_plot import write_log
from utils import plot_log
from utils.runlog import dllogger_setup


def test_command_line_writes_the_png_and_prints_its_path(tmp_path, capsys):
  log_path = tmp_path / "dllogger.json"
  write_log(log_path, num_steps=5)
  out = tmp_path / "cli.png"
  assert plot_log.main([str(log_path), str(out)]) == 0
  assert capsys.readouterr().out.strip() == str(out)
  assert png_size(out) == (900, 1000)


def test_log_without_step_lines_is_a_usage_error_naming_the_file(tmp_path, capsys):
  bad = tmp_path / "not_a_log.txt"
  bad.write_text("hello\nDLLL {broken json\nDLLL {\"type\": \"LOG\", \"step\": [], \"data\": {}}\n")
  assert plot_log.main([str(bad), str(tmp_path / "out.png")]) == 2
  err = capsys.readouterr().err
  assert err.startswith("python -m utils.plot_log: error: %s: no per-step log line" % bad)
  assert err.count("\n") == 1
  assert not (tmp_path / "out.png").exists()


def test_a_missing_log_and_an_unwritable_png_are_usage_errors(tmp_path, capsys):
  missing = tmp_path / "missing.json"
  assert plot_log.main([str(missing), str(tmp_path / "out.png")]) == 2
  assert capsys.readouterr().err == (
      "python -m utils.plot_log: error: cannot read the run log %s: No such file or directory\n"
      % missing)
  log_path = tmp_path / "dllogger.json"
  write_log(log_path, num_steps=3)
  (tmp_path / "file").write_text("")
  out = tmp_path / "file" / "out.png"  # under a regular file: cannot be written
  assert plot_log.main([str(log_path), str(out)]) == 2
  err = capsys.readouterr().err
  assert err.startswith("python -m utils.plot_log: error: cannot write the plot %s" % out.parent)
  assert err.count("\n") == 1
  with pytest.raises(OSError):
    dllogger_setup.read_log(str(tmp_path / "missing.json"))
