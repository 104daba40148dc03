"""The golden-loss tool (utils/regression.py): record a run log, compare logs against it."""

import io
import json
import subprocess
import sys

import numpy as np
import pytest

from utils.runlog import dllogger_setup
from utils import regression

REPO_ROOT = __file__.rsplit("/tests/", 1)[0]


def write_log(path, rows):
  """Writes a run log with one per-step line per (step, data) row and a summary line."""
  with dllogger_setup.RunLogger(str(path), stdout=False, backend="builtin") as logger:
    for step, data in rows:
      logger.log(step=step, data=dict(data, throughput_train=123.0))
    logger.log(step=dllogger_setup.SUMMARY_STEP, data={"throughput_train": 100.0})


def rows(n=5, scale=True):
  """n updates with distinct, non-round losses (and a loss scale when `scale`)."""
  out = []
  for step in range(1, n + 1):
    data = {"total_loss": 7.0 / step + 0.1234567, "mlm_loss": 6.0 / step + 0.01,
            "nsp_loss": 0.693 - step * 1e-3, "avg_loss_step": 7.1 / step,
            "learning_rate": 1e-4 * step / 3.0}
    if scale:
      data["loss_scaler"] = 2.0 ** (10 + step)
    out.append((step, data))
  return out


@pytest.fixture
def golden_file(tmp_path):
  config = tmp_path / "bert_config.json"
  config.write_text(json.dumps({"vocab_size": 120, "hidden_size": 32}))
  write_log(tmp_path / "golden.json.log", rows())
  command = ("python run_pretraining.py --bert_config_file=%s --deterministic_run "
             "--train_batch_size 4" % config)
  golden = tmp_path / "golden.json"
  assert regression.main(["record", "--log", str(tmp_path / "golden.json.log"),
                          "--output", str(golden), "--command", command]) == 0
  return golden


def compare(golden, log, tolerance=0.0, max_rows=10):
  out = io.StringIO()
  code = regression.compare(str(golden), str(log), tolerance, max_rows=max_rows, out=out)
  return code, out.getvalue()


def test_record_keeps_values_command_config_and_versions(golden_file):
  golden = json.loads(golden_file.read_text())
  assert [e["step"] for e in golden["entries"]] == [1, 2, 3, 4, 5]
  for entry, (step, data) in zip(golden["entries"], rows()):
    assert entry == dict(data, step=step)  # every tracked value exactly; throughput left out
  assert golden["command"][:2] == ["python", "run_pretraining.py"]
  assert golden["flags"]["deterministic_run"] == "true"
  assert golden["flags"]["train_batch_size"] == "4"
  assert golden["bert_config"] == {"vocab_size": 120, "hidden_size": 32}
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  assert golden["versions"]["tensorflow"] == tf.__version__
  assert golden["versions"]["horovod"] == "0.28.1"


def test_identical_log_matches(golden_file, tmp_path):
  write_log(tmp_path / "new.log", rows())
  code, text = compare(golden_file, tmp_path / "new.log")
  assert code == 0, text
  assert "match: 5 log entries" in text


def test_one_ulp_change_fails_at_tolerance_zero_and_passes_a_tolerance(golden_file, tmp_path):
  changed = rows()
  loss = changed[2][1]["total_loss"]
  changed[2][1]["total_loss"] = float(np.nextafter(loss, 10.0))
  write_log(tmp_path / "new.log", changed)
  code, text = compare(golden_file, tmp_path / "new.log")
  assert code == 1
  assert "first at step 3" in text
  table = text.splitlines()
  row = [line for line in table if "total_loss" in line]
  assert len(row) == 1 and repr(loss) in row[0] and repr(changed[2][1]["total_loss"]) in row[0]
  # One ulp of ~2.5 is ~4.4e-16 relative.
  assert compare(golden_file, tmp_path / "new.log", tolerance=1e-15)[0] == 0


@pytest.mark.parametrize("key", ["total_loss", "mlm_loss", "nsp_loss", "avg_loss_step",
                                 "learning_rate", "loss_scaler"])
def test_each_value_changed_by_one_ulp_exits_1(golden_file, tmp_path, key):
  # Through the command line's exit status, the answer a regression run acts on.
  changed = rows()
  changed[1][1][key] = float(np.nextafter(changed[1][1][key], np.inf))
  write_log(tmp_path / "new.log", changed)
  args = ["compare", "--golden", str(golden_file), "--log", str(tmp_path / "new.log")]
  assert regression.main(args) == 1
  code, text = compare(golden_file, tmp_path / "new.log")
  assert code == 1 and "1 difference(s)" in text and "first at step 2" in text
  assert [line.split()[2] for line in text.splitlines() if line.startswith("1 ")] == [key]


def test_change_beyond_the_tolerance_fails(golden_file, tmp_path):
  changed = rows()
  changed[4][1]["loss_scaler"] *= 0.5
  changed[1][1]["mlm_loss"] *= 1.0 + 2e-6
  write_log(tmp_path / "new.log", changed)
  code, text = compare(golden_file, tmp_path / "new.log", tolerance=1e-6)
  assert code == 1
  assert "2 difference(s)" in text and "first at step 2" in text
  assert any("loss_scaler" in line and line.split()[1] == "5" for line in text.splitlines())


def test_missing_entries_values_and_shifted_steps_fail(golden_file, tmp_path):
  write_log(tmp_path / "short.log", rows(4))
  code, text = compare(golden_file, tmp_path / "short.log")
  assert code == 1 and "entry" in text
  write_log(tmp_path / "noscale.log", rows(scale=False))
  code, text = compare(golden_file, tmp_path / "noscale.log")
  assert code == 1 and text.count("loss_scaler") == 5
  shifted = [(step + 1, data) for step, data in rows()]
  write_log(tmp_path / "shifted.log", shifted)
  assert compare(golden_file, tmp_path / "shifted.log")[0] == 1
  write_log(tmp_path / "long.log", rows(6))
  assert compare(golden_file, tmp_path / "long.log")[0] == 1


def test_table_is_cut_at_max_rows(golden_file, tmp_path):
  changed = [(step, {k: v * 2 for k, v in data.items()}) for step, data in rows()]
  write_log(tmp_path / "new.log", changed)
  code, text = compare(golden_file, tmp_path / "new.log", max_rows=3)
  assert code == 1
  assert "... 27 more" in text


def test_usage_errors_exit_2(golden_file, tmp_path, capsys):
  write_log(tmp_path / "new.log", rows())
  assert regression.main(["compare", "--golden", str(tmp_path / "nope.json"),
                          "--log", str(tmp_path / "new.log")]) == 2
  assert "nope.json" in capsys.readouterr().err
  assert regression.main(["compare", "--golden", str(golden_file),
                          "--log", str(tmp_path / "missing.log")]) == 2
  assert regression.main(["compare", "--golden", str(golden_file), "--log",
                          str(tmp_path / "new.log"), "--tolerance", "-1"]) == 2
  (tmp_path / "bad.json").write_text("{}")
  assert regression.main(["compare", "--golden", str(tmp_path / "bad.json"),
                          "--log", str(tmp_path / "new.log")]) == 2
  assert regression.main(["record", "--log", str(tmp_path / "new.log"),
                          "--output", str(tmp_path / "g.json")]) == 2
  assert "needs the command" in capsys.readouterr().err


@pytest.mark.e2e
def test_command_after_double_dash_is_run_first(tmp_path):
  log = tmp_path / "run.log"
  script = ("import sys; sys.path.insert(0, %r); from utils.runlog import dllogger_setup as d; "
            "l = d.RunLogger(%r, stdout=False, backend='builtin'); "
            "[l.log(step=s, data={'total_loss': 1.0 / s}) for s in (1, 2)]; l.close()"
            % (REPO_ROOT, str(log)))
  golden = tmp_path / "golden.json"
  proc = subprocess.run(
      [sys.executable, "-m", "utils.regression", "record", "--log", str(log), "--output",
       str(golden), "--", sys.executable, "-c", script],
      capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
  assert proc.returncode == 0, proc.stderr
  assert json.loads(golden.read_text())["command"][:2] == [sys.executable, "-c"]
  log.unlink()
  proc = subprocess.run(
      [sys.executable, "-m", "utils.regression", "compare", "--golden", str(golden), "--log",
       str(log), "--", sys.executable, "-c", script],
      capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  proc = subprocess.run(
      [sys.executable, "-m", "utils.regression", "compare", "--golden", str(golden), "--log",
       str(log), "--", sys.executable, "-c", "raise SystemExit(3)"],
      capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
  assert proc.returncode == 2 and "status 3" in proc.stderr


def test_a_golden_value_that_is_not_a_number_exits_2_naming_entry_and_key(golden_file, tmp_path,
                                                                          capsys):
  document = json.loads(golden_file.read_text())
  document["entries"][2]["mlm_loss"] = "2.01"
  golden_file.write_text(json.dumps(document))
  write_log(tmp_path / "new.log", rows())
  assert regression.main(["compare", "--golden", str(golden_file),
                          "--log", str(tmp_path / "new.log")]) == 2
  assert capsys.readouterr().err == (
      "python -m utils.regression: error: %s: entry 2: 'mlm_loss' is a str, expected a number\n"
      % golden_file)
