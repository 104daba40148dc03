"""utils/runlog/plot.py: the curves read from a run log and the PNG drawn from them (panels by
what the log holds)."""

import json
import os
import struct

import numpy as np
import pytest

from utils.core import errors
from utils.runlog import dllogger_setup
from utils.runlog import plot

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path):
  """(width, height) from the IHDR chunk of a PNG file."""
  with open(path, "rb") as f:
    header = f.read(24)
  assert header[:8] == PNG_SIGNATURE, "%s is not a PNG" % path
  assert header[12:16] == b"IHDR"
  return struct.unpack(">II", header[16:24])


def write_log(path, num_steps=30, extra=None):
  """A training log as the training hook writes it; returns the per-step values.

  `extra(step)` gives more keys of a step's line (e.g. global_norm, loss_scaler)."""
  rng = np.random.RandomState(8)
  values = []
  with dllogger_setup.RunLogger(str(path), backend="builtin", stdout=False) as logger:
    for step in range(1, num_steps + 1):
      loss = 10.0 * np.exp(-step / 10.0) + 1.0
      data = {"throughput_train": float(rng.uniform(80, 100)), "mlm_loss": loss - 0.6,
              "nsp_loss": 0.6, "total_loss": loss, "avg_loss_step": loss + 0.1,
              "learning_rate": 1e-4 * step}
      if extra is not None:
        data.update(extra(step))
      values.append((step, data))
      logger.log(step=step, data=data)
    logger.log(step=(), data={"throughput_train": 91.5, "update_steps": num_steps})
  return values


def test_read_log_returns_steps_and_summary(tmp_path):
  log_path = tmp_path / "dllogger.json"
  values = write_log(log_path)
  with open(log_path, "a") as f:
    f.write("a line from another program\n")
  steps, summaries = dllogger_setup.read_log(str(log_path))
  assert [s for s, _ in steps] == [s for s, _ in values]
  assert summaries == [{"throughput_train": 91.5, "update_steps": 30}]
  xs, ys = plot.series(steps, "total_loss")
  assert xs == list(range(1, 31))
  np.testing.assert_allclose(ys, [d["total_loss"] for _, d in values])


def test_learning_rate_logged_as_string_is_plotted():
  # NVIDIA's script logs the learning rate as a string.
  steps = [(1, {"learning_rate": "0.0001"}), (2, {"learning_rate": "n/a"}), (3, {})]
  assert plot.series(steps, "learning_rate") == ([1], [1e-4])


def test_plot_log_writes_a_png(tmp_path):
  log_path = tmp_path / "dllogger.json"
  write_log(log_path)
  out = tmp_path / "plots" / "training.png"
  assert plot.plot_log(str(log_path), str(out)) == str(out)
  assert png_size(out) == (900, 1000)
  assert os.path.getsize(out) > 20000  # three panels with curves, not a blank image


def _fp16_keys(step):
  """fp16 log keys: updates 3 and 4 overflow (non-finite norm), each halving the loss scale."""
  skipped = min(max(step - 2, 0), 2)
  norm = float("inf") if step == 3 else float("nan") if step == 4 else 1.0 + 1.0 / step
  return {"global_norm": norm, "loss_scaler": 2.0 ** (16 - skipped), "skipped_updates": skipped}


@pytest.mark.parametrize("extra,height", [
    (lambda step: {"global_norm": 1.0 / step}, 1300),  # fp32: a gradient norm panel
    (_fp16_keys, 1600),                                 # fp16: and a loss scale panel
])
def test_gradient_norm_and_loss_scale_panels_when_logged(tmp_path, extra, height):
  log_path = tmp_path / "dllogger.json"
  values = write_log(log_path, extra=extra)
  steps, _ = dllogger_setup.read_log(str(log_path))
  xs, norms = plot.series(steps, "global_norm")
  assert xs == list(range(1, 31))
  np.testing.assert_array_equal(norms, [d["global_norm"] for _, d in values])
  out = tmp_path / "training.png"
  plot.plot_log(str(log_path), str(out))
  assert png_size(out) == (900, height)


def test_a_log_without_step_lines_is_refused_naming_the_file(tmp_path):
  bad = tmp_path / "not_a_log.txt"
  bad.write_text("hello\nDLLL {broken json\nDLLL {\"type\": \"LOG\", \"step\": [], \"data\": {}}\n")
  with pytest.raises(ValueError, match="not_a_log.txt: no per-step log line"):
    plot.plot_log(str(bad), str(tmp_path / "out.png"))
  assert not (tmp_path / "out.png").exists()


def _line(step, data):
  return "DLLL " + json.dumps({"type": "LOG", "step": step, "data": data}) + "\n"


def test_a_line_nested_deeper_than_the_recursion_limit_is_skipped(tmp_path):
  log_path = tmp_path / "dllogger.json"
  log_path.write_text(_line(1, {"total_loss": 3.5}) + "DLLL " + "[" * 100000 + "\n"
                      + _line(2, {"total_loss": 2.5}))
  steps, _ = dllogger_setup.read_log(str(log_path))
  assert plot.series(steps, "total_loss") == ([1, 2], [3.5, 2.5])


def test_a_log_that_is_not_utf8_is_refused_naming_the_byte_and_offset(tmp_path):
  log_path = tmp_path / "dllogger.json"
  first = _line(1, {"total_loss": 3.5}).encode("utf-8")
  log_path.write_bytes(first + b"DLLL {\"note\": \"caf\xe9\"}\n")
  with pytest.raises(errors.UsageError) as refused:
    plot.plot_log(str(log_path), str(tmp_path / "out.png"))
  assert str(refused.value) == "%s: byte 233 (0xe9) at offset %d is not utf-8 text" % (
      log_path, len(first) + 18)
  assert not (tmp_path / "out.png").exists()


def test_an_integer_beyond_the_float_range_is_not_a_point(tmp_path):
  log_path = tmp_path / "dllogger.json"
  log_path.write_text(_line(1, {"total_loss": 3.5, "mlm_loss": 10 ** 400})
                      + _line(2, {"total_loss": 2.5, "mlm_loss": 2.25}))
  steps, _ = dllogger_setup.read_log(str(log_path))
  assert plot.series(steps, "mlm_loss") == ([2], [2.25])
  out = tmp_path / "training.png"
  plot.plot_log(str(log_path), str(out))
  assert png_size(out) == (900, 1000)
