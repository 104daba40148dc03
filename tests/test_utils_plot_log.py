"""utils/plot_log.py, the command line `python -m utils.plot_log LOG PNG` (its `main`, in process;
the README's block runs the command itself): the PNG's path on stdout, exit 1 naming the file
for a log without step lines. The drawing is tests/test_runlog_plot.py's."""

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


def test_log_without_step_lines_is_an_error_naming_the_file(tmp_path, capsys):
  bad = tmp_path / "not_a_log.txt"
  bad.write_text("hello\nDLLL {broken json\nDLLL {\"type\": \"LOG\", \"step\": [], \"data\": {}}\n")
  assert plot_log.main([str(bad), str(tmp_path / "out.png")]) == 1
  err = capsys.readouterr().err
  assert str(bad) in err and "no per-step log line" in err
  assert not (tmp_path / "out.png").exists()
  with pytest.raises(OSError):
    dllogger_setup.read_log(str(tmp_path / "missing.json"))
