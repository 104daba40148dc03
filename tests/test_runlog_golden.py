"""utils/runlog/golden.py in-process: the tracked values read from hand-written log lines, the flags
of a command, the golden document and its checks, and the comparison and table of differences."""

import datetime
import importlib.metadata
import json
import math
import platform

import pytest

from utils.core import errors
from utils.runlog import golden


def _write_log(path, records):
  """A run log of `DLLL {json}` lines, one per record, and a line that is not a log line."""
  lines = ["DLLL " + json.dumps(dict(record, type="LOG")) for record in records]
  path.write_text("\n".join(lines[:1] + ["some other output"] + lines[1:]) + "\n")
  return str(path)


def test_log_entries_keep_only_numeric_tracked_values_in_log_order(tmp_path):
  log = _write_log(tmp_path / "run.log", [
      {"step": 1, "data": {"total_loss": 2.5, "mlm_loss": 2, "nsp_loss": True,
                           "learning_rate": "0.1", "throughput_train": 99.0}},
      {"step": 2, "data": {"avg_loss_step": 1.25, "loss_scaler": 65536.0, "nsp_loss": None}},
      {"step": [], "data": {"total_loss": 9.0}},  # the summary line
      {"step": 3, "data": {"nsp_loss": float("nan")}},
      {"step": 4, "data": {}}])
  entries = golden.log_entries(log)
  assert [e["step"] for e in entries] == [1, 2, 3, 4]
  assert entries[0] == {"step": 1, "total_loss": 2.5, "mlm_loss": 2.0}
  assert isinstance(entries[0]["mlm_loss"], float)
  assert entries[1] == {"step": 2, "avg_loss_step": 1.25, "loss_scaler": 65536.0}
  assert set(entries[2]) == {"step", "nsp_loss"} and math.isnan(entries[2]["nsp_loss"])
  assert entries[3] == {"step": 4}


def test_log_entries_of_a_missing_or_stepless_log_are_usage_errors(tmp_path):
  missing = str(tmp_path / "missing.log")
  with pytest.raises(errors.UsageError, match="cannot read the run log.*missing.log"):
    golden.log_entries(missing)
  summary_only = _write_log(tmp_path / "summary.log", [{"step": [], "data": {"total_loss": 1.0}}])
  with pytest.raises(errors.UsageError, match="summary.log: no per-step log line"):
    golden.log_entries(summary_only)
  undecodable = tmp_path / "binary.log"
  undecodable.write_bytes(b"DLLL {\xff\xfe}\n")
  with pytest.raises(errors.UsageError, match="cannot read the run log .*binary.log: .*utf-8"):
    golden.log_entries(str(undecodable))


@pytest.mark.parametrize("command,expected", [
    (["python", "run.py", "--a=1", "--b", "2", "--c", "--d=x=y", "--nofoo", "--", "pos",
      "--e=", "--f", "-1", "--last"],
     {"a": "1", "b": "2", "c": "true", "d": "x=y", "foo": "false", "e": "", "f": "-1",
      "last": "true"}),
    (["python", "-u", "run.py", "positional", "-x"], {}),
    (["--nodo_train"], {"do_train": "false"}),
])
def test_command_flags_read_every_form_of_flag(command, expected):
  assert golden.command_flags(command) == expected


def test_package_versions_take_the_first_installed_distribution(monkeypatch):
  installed = {"tensorflow-cpu": "2.15.1", "tensorflow-gpu": "0.0", "numpy": "1.2.3"}

  def version(distribution):
    if distribution not in installed:
      raise importlib.metadata.PackageNotFoundError(distribution)
    return installed[distribution]

  monkeypatch.setattr(importlib.metadata, "version", version)
  assert golden.package_versions() == {
      "python": platform.python_version(), "platform": platform.platform(),
      "tensorflow": "2.15.1", "tensorflow-estimator": None, "horovod": None, "numpy": "1.2.3"}


def test_make_golden_records_the_command_flags_config_and_entries(tmp_path):
  config = tmp_path / "bert_config.json"
  config.write_text(json.dumps({"hidden_size": 8, "vocab_size": 30}))
  entries = [{"step": 1, "total_loss": 3.0}, {"step": 2, "total_loss": 2.0}]
  command = ("python", "run_pretraining.py", "--bert_config_file", str(config), "--nouse_xla")
  before = datetime.datetime.now().replace(microsecond=0)
  document = golden.make_golden(entries, command)
  assert set(document) == {"format", "created", "command", "flags", "bert_config", "versions",
                           "entries"}
  assert document["format"] == 1
  assert before <= datetime.datetime.fromisoformat(document["created"]) <= datetime.datetime.now()
  assert document["command"] == list(command)
  assert document["flags"] == {"bert_config_file": str(config), "use_xla": "false"}
  assert document["bert_config"] == {"hidden_size": 8, "vocab_size": 30}
  assert document["versions"]["python"] == platform.python_version()
  assert document["entries"] == entries
  # The document is what a golden file holds: read back, it passes the checks.
  path = tmp_path / "golden.json"
  path.write_text(json.dumps(document))
  assert golden.read_golden(str(path)) == document
  assert golden.make_golden(entries, ["python", "run.py"])["bert_config"] is None
  (tmp_path / "bad.json").write_text("{")
  with pytest.raises(errors.UsageError, match="--bert_config_file of the command"):
    golden.make_golden(entries, ["run.py", "--bert_config_file=%s" % (tmp_path / "bad.json")])


@pytest.mark.parametrize("content,message", [
    ("not json", "cannot read the golden file"),
    ("[1, 2]", "not a golden-loss file of format 1"),
    ('{"format": 2, "entries": [{"step": 1}]}', "not a golden-loss file of format 1"),
    ('{"format": 1}', "'entries' must be a non-empty list"),
    ('{"format": 1, "entries": []}', "'entries' must be a non-empty list"),
    ('{"format": 1, "entries": [{"step": 1}, {"step": "2"}]}', "'entries' must be"),
    ('{"format": 1, "entries": [{"total_loss": 1.0}]}', "'entries' must be"),
])
def test_read_golden_refuses_what_is_not_a_golden_file(tmp_path, content, message):
  path = tmp_path / "golden.json"
  path.write_text(content)
  with pytest.raises(errors.UsageError, match=message) as refused:
    golden.read_golden(str(path))
  assert str(path) in str(refused.value)  # every refusal names the file
  with pytest.raises(errors.UsageError, match="cannot read the golden file.*missing.json"):
    golden.read_golden(str(tmp_path / "missing.json"))


_ENTRY = '{"step": 1, "total_loss": 2.5}'


@pytest.mark.parametrize("content,message", [
    ('{"format": 1, "entries": [{"step": 1, "total_loss": "2.5"}]}',
     r"entry 0: 'total_loss' is a str, expected a number"),
    ('{"format": 1, "entries": [%s, {"step": 2, "mlm_loss": null}]}' % _ENTRY,
     r"entry 1: 'mlm_loss' is a NoneType, expected a number"),
    ('{"format": 1, "entries": [{"step": 1, "nsp_loss": true}]}',
     r"entry 0: 'nsp_loss' is a bool, expected a number"),
    ('{"format": 1, "entries": [{"step": 1, "total_loss": 1%s}]}' % ("0" * 400),
     r"entry 0: 'total_loss' is an integer of 401 digits, beyond the range of a float"),
    ('{"format": 1, "versions": ["tensorflow"], "entries": [%s]}' % _ENTRY,
     r"'versions' is a list, expected an object"),
    ('{"format": 1, "versions": null, "entries": [%s]}' % _ENTRY,
     r"'versions' is a NoneType, expected an object"),
    ('{"format": 1, "versions": {"numpy": 1.26}, "entries": [%s]}' % _ENTRY,
     r"versions: 'numpy' is a float, expected a string or null"),
    ('{"format": 1, "versions": {"numpy": "1.\\udc80"}, "entries": [%s]}' % _ENTRY,
     r"versions: 'numpy' has a lone surrogate, not text"),
    ('{"format": true, "entries": [%s]}' % _ENTRY, "not a golden-loss file of format 1"),
    ('{"format": 1, "entries": [{"step": true}]}', "'entries' must be"),
    ('{"format": 1, "entries": %s1%s}' % ("[" * 100000, "]" * 100000),
     "cannot read the golden file .*: JSON nested too deeply"),
], ids=["str-value", "null-value", "bool-value", "int-beyond-float", "versions-list",
        "versions-null", "version-float", "version-surrogate", "format-true", "step-true",
        "nested-too-deeply"])
def test_read_golden_refuses_values_the_comparison_cannot_use(tmp_path, content, message):
  path = tmp_path / "golden.json"
  path.write_text(content)
  with pytest.raises(errors.UsageError, match=message) as refused:
    golden.read_golden(str(path))
  assert str(path) in str(refused.value)


def test_read_golden_gives_the_tracked_values_as_floats(tmp_path):
  path = tmp_path / "golden.json"
  path.write_text('{"format": 1, "entries": [{"step": 3, "total_loss": 2, "mlm_loss": NaN, '
                  '"note": "kept"}]}')
  [entry] = golden.read_golden(str(path))["entries"]
  assert entry["step"] == 3 and type(entry["total_loss"]) is float and entry["total_loss"] == 2.0
  assert math.isnan(entry["mlm_loss"]) and entry["note"] == "kept"


def test_a_logged_integer_beyond_the_float_range_is_refused_naming_step_and_key(tmp_path):
  path = tmp_path / "run.log"
  path.write_text('DLLL {"type": "LOG", "step": 7, "data": {"total_loss": 1%s}}\n' % ("0" * 400))
  with pytest.raises(errors.UsageError) as refused:
    golden.log_entries(str(path))
  assert str(refused.value) == ("%s: step 7: 'total_loss' is an integer of 401 digits, beyond the "
                                "range of a float" % path)


@pytest.mark.parametrize("golden_value,new_value,tolerance,expected", [
    (2.5, 2.5, 0, True),
    (2.5, 2.5000000000000004, 0, False),   # one ulp
    (float("nan"), float("nan"), 0, True),
    (float("nan"), float("nan"), 0.5, True),
    (float("nan"), 1.0, 0.5, False),
    (1.0, float("nan"), 0.5, False),
    (2.0, 2.5, 0.25, True),                # |0.5| <= 0.25 * 2
    (2.0, 1.5, 0.25, True),
    (2.0, 2.5000001, 0.25, False),
    (-2.0, -2.5, 0.25, True),              # relative to |golden|
    (0.0, 1e-300, 0.5, False),             # a zero golden value matches only zero
    (0.0, 0.0, 0.5, True),
])
def test_values_match_within_a_relative_tolerance(golden_value, new_value, tolerance, expected):
  assert golden.values_match(golden_value, new_value, tolerance) is expected


def test_differences_list_steps_values_and_entries_in_log_order():
  old = [{"step": 1, "total_loss": 2.0, "mlm_loss": 1.0},
         {"step": 2, "total_loss": 1.5, "loss_scaler": 4.0},
         {"step": 3, "total_loss": 1.0}]
  new = [{"step": 1, "total_loss": 2.0, "mlm_loss": 1.0, "nsp_loss": 0.7},  # extra key: ignored
         {"step": 4, "total_loss": 1.5},
         {"step": 3, "total_loss": 1.1},
         {"step": 5, "total_loss": 0.5}]
  assert golden.differences(old, new, 0) == [
      (1, 2, "step", 2, 4), (1, 2, "loss_scaler", 4.0, None), (2, 3, "total_loss", 1.0, 1.1),
      (3, 5, "entry", None, 5)]
  # 1.1 is within 20 % of 1.0; the other differences stay.
  assert golden.differences(old, new, 0.2) == [
      (1, 2, "step", 2, 4), (1, 2, "loss_scaler", 4.0, None), (3, 5, "entry", None, 5)]
  assert golden.differences(old, new[:2], 0.2)[-1] == (2, 3, "entry", 3, None)
  assert golden.differences(old, [dict(e) for e in old], 0) == []


def test_difference_table_aligns_the_first_rows_with_exact_values():
  found = [(0, 1, "total_loss", 2.5, 2.75), (1, 2, "entry", 2, None), (2, 3, "mlm_loss", 1.0, None)]
  assert golden.difference_table(found, 2) == [
      "#  step  value       golden  new   new - golden",
      "0  1     total_loss  2.5     2.75  2.500e-01",
      "1  2     entry       2       -"]
  assert len(golden.difference_table(found, 0)) == 1
  row = golden.difference_table([(0, 7, "nsp_loss", 0.1, 0.1 + 0.2)], 5)[1]
  assert row.split() == ["0", "7", "nsp_loss", "0.1", "0.30000000000000004", "2.000e-01"]
