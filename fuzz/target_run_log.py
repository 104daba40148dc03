"""The run log read back (`DLLL {json}` lines): `dllogger_setup.read_log`, and the tools on it,
`golden.log_entries` (`python -m utils.regression`) and `plot.series` (`python -m utils.plot_log`:
every curve it draws). The drawing itself is left out: matplotlib takes 3 to 10 s a plot under
tracemalloc, over libFuzzer's slow-input limit (tests/test_runlog_plot.py draws hostile values).

Checked: every step and value read is one of the file's (its lines parsed here with json), and a
tracked value is a float.
"""

import json
import math
import re

from fuzz import harness
from utils.core import errors
from utils.runlog import dllogger_setup
from utils.runlog import golden
from utils.runlog import plot

_KEYS = plot.LOSS_KEYS + ("learning_rate", "throughput_train", "global_norm", "loss_scaler",
                          "skipped_updates")


def _file_records(text):
  """The steps and data values of the file's `DLLL` lines, parsed here."""
  steps, values = set(), []
  for line in re.split("\r\n|\r|\n", text):  # a text-mode file's lines
    if not line.startswith("DLLL "):
      continue
    try:
      record = json.loads(line[5:])
    except (ValueError, RecursionError):
      continue
    if isinstance(record, dict) and isinstance(record.get("data"), dict):
      steps.add(repr(record.get("step")))
      values.extend(record["data"].values())
  return steps, values


def _is_one_of(value, values):
  return any(value == v or (isinstance(v, float) and math.isnan(v) and math.isnan(value))
             for v in values if isinstance(v, (int, float, str)) and not isinstance(v, bool))


def _check(text, steps, entries):
  file_steps, file_values = _file_records(text)
  for step, _ in steps:
    assert repr(step) in file_steps, "step %r is not in the file" % (step,)
  numbers = []
  for value in file_values:
    try:
      numbers.append(float(value))
    except (TypeError, ValueError, OverflowError):
      pass
  for key in _KEYS:
    for y in plot.series(steps, key)[1]:
      assert isinstance(y, float) and _is_one_of(y, numbers), "%s value %r" % (key, y)
  for entry in entries:
    assert repr(entry["step"]) in file_steps, "entry step %r" % (entry["step"],)
    for key in golden.TRACKED_KEYS:
      if key in entry:
        assert isinstance(entry[key], float) and _is_one_of(entry[key], numbers), key


def read(data):
  """Reads `data` as a run log with each reader and checks what they return."""
  with harness.input_file(data, "bert_dllog.json") as path:
    steps, _ = dllogger_setup.read_log(path)
    entries = golden.log_entries(path)
  _check(data.decode("utf-8"), steps, entries)


def seeds():
  """A log of a short run: per-step lines, a summary, a restart, other output mixed in."""
  lines = ["DLLL " + json.dumps({"type": "PARAMETER", "step": "PARAMETER",
                                 "data": {"batch_size": 8}}), "some other output"]
  for step in range(1, 7):
    data = {"total_loss": 10.0 - step, "mlm_loss": 9.0 - step, "nsp_loss": 0.5,
            "learning_rate": "%.1e" % (1e-4 * step), "throughput_train": 100.0 + step,
            "global_norm": float("inf") if step == 3 else 1.5, "loss_scaler": 2.0 ** (16 - step),
            "skipped_updates": int(step >= 3)}
    lines.append("DLLL " + json.dumps({"timestamp": "1.0", "type": "LOG", "step": step,
                                       "data": data}))
    if step == 4:
      lines.append("DLLL " + json.dumps({"type": "LOG", "step": "RESTART",
                                         "data": {"resumed_from_step": 2}}))
  lines.append("DLLL " + json.dumps({"type": "LOG", "step": [], "data": {"throughput_train": 99}}))
  text = ("\n".join(lines) + "\n").encode("utf-8")
  return [text]


TARGET = harness.Target("run_log", read, (errors.UsageError,), seeds, 4096)
