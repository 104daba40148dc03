"""The golden-loss file: `python -m utils.regression compare` reading it against a fixed run log.

Checked: the entries `golden.read_golden` returns are the file's own (parsed here with json), with
an integer step and numbers for the tracked values, and the comparison ends with 0 (a match) or 1
(a difference) naming only values of the file and of the log.
"""

import io
import json
import math
import os
import tempfile

from fuzz import harness
from utils import regression
from utils.core import errors
from utils.runlog import golden

# The run log every golden file is compared with: three updates.
LOG_ENTRIES = ({"step": 1, "total_loss": 10.5, "mlm_loss": 9.75, "nsp_loss": 0.75,
                "learning_rate": 1e-4},
               {"step": 2, "total_loss": 9.25, "mlm_loss": 8.5, "nsp_loss": 0.75,
                "learning_rate": 2e-4, "loss_scaler": 65536.0},
               {"step": 3, "total_loss": 8.0, "mlm_loss": 7.25, "nsp_loss": 0.75,
                "learning_rate": 3e-4, "avg_loss_step": 9.25})


def _log_text():
  lines = []
  for entry in LOG_ENTRIES:
    data = {key: value for key, value in entry.items() if key != "step"}
    lines.append("DLLL " + json.dumps({"type": "LOG", "step": entry["step"], "data": data}))
  return "\n".join(lines) + "\n"


def _same(a, b):
  return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a)
                    and math.isnan(b))


def _check(path, data, printed):
  """Asserts that the entries read from `path` are those of `data` (parsed here), and the rows of
  the table `printed` name their values."""
  entries = golden.read_golden(path)["entries"]
  original = json.loads(data.decode("utf-8"))["entries"]
  assert len(entries) == len(original), "entries"
  for entry, given in zip(entries, original):
    assert entry["step"] == given["step"] and type(entry["step"]) is int, "step %r" % (entry,)
    for key in golden.TRACKED_KEYS:
      if key in entry:
        assert isinstance(entry[key], float) and _same(entry[key], float(given[key])), key
  known = {repr(float(v)) for e in original for k, v in e.items() if k in golden.TRACKED_KEYS}
  known |= {repr(e[k]) for e in LOG_ENTRIES for k in e}
  for line in printed.splitlines()[1:]:
    cells = line.split()
    if cells and cells[0].isdigit() and len(cells) >= 5:
      assert cells[3] in known | {"-"} or cells[2] in ("step", "entry"), "table row %r" % line


def read(data):
  """Compares the golden file `data` with `LOG_ENTRIES`' log; checks what it read and said."""
  with tempfile.TemporaryDirectory() as directory:
    path = os.path.join(directory, "golden.json")
    log_path = os.path.join(directory, "bert_dllog.json")
    with open(path, "wb") as writer:
      writer.write(data)
    with open(log_path, "w") as writer:
      writer.write(_log_text())
    # Written as to a UTF-8 stdout: a string that is not text fails here as it would there.
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="\n")
    status = regression.compare(path, log_path, 0.0, out=out)
    assert status in (0, 1), "status %r" % (status,)
    out.flush()
    _check(path, data, out.buffer.getvalue().decode("utf-8"))


def seeds():
  """Golden files: the log's own (a match), one with a different value and step, one short."""
  document = {"format": golden.GOLDEN_FORMAT, "created": "2026-01-01T00:00:00",
              "command": ["python", "run_pretraining.py", "--bert_config_file=c.json"],
              "flags": {"bert_config_file": "c.json"}, "bert_config": {"hidden_size": 32},
              "versions": {"python": "3.11.0", "numpy": "1.26.4", "horovod": None},
              "entries": [dict(entry) for entry in LOG_ENTRIES]}
  found = [json.dumps(document, indent=1).encode("utf-8")]
  document["entries"][1]["total_loss"] = float("nan")
  document["entries"][2]["step"] = 4
  found.append(json.dumps(document).encode("utf-8"))
  document["entries"] = document["entries"][:1]
  del document["versions"]
  found.append(json.dumps(document).encode("utf-8"))
  return found


TARGET = harness.Target("golden_losses", read, (errors.UsageError,), seeds, 4096)
