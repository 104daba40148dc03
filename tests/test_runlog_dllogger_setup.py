"""utils/runlog/dllogger_setup.py: `DLLL {json}` lines, stdout lines, rank 0 only, the real
package."""

import datetime
import json
import sys
import textwrap

import numpy as np
import pytest

from utils.runlog import dllogger_setup


def scripted_now(*seconds):
  """A `now` function returning start + each of `seconds` in turn (first call: the start)."""
  start = datetime.datetime(2024, 3, 1, 12, 0, 0, 250000)
  values = [start] + [start + datetime.timedelta(seconds=s) for s in seconds]
  return lambda: values.pop(0), values[1:]


def test_builtin_lines_are_dllogger_json(tmp_path):
  log_path = tmp_path / "sub" / "dllogger.json"
  now, stamps = scripted_now(1.5, 2.25, 10.0)
  logger = dllogger_setup.RunLogger(str(log_path), backend="builtin", stdout=False, now=now)
  assert logger.enabled
  logger.log(step=1, data={"total_loss": np.float32(7.5), "throughput_train": 99.25})
  logger.log(step=np.int64(20), data={"learning_rate": 1e-4, "loss_scaler": np.float32(32768)})
  logger.log(step=dllogger_setup.SUMMARY_STEP, data={"throughput_train": 101.5,
                                                     "update_steps": np.int32(20),
                                                     "fp16": np.bool_(True), "note": None})
  logger.close()

  lines = log_path.read_text().splitlines()
  assert len(lines) == 3
  records = []
  for line in lines:
    assert line.startswith("DLLL {")
    records.append(json.loads(line[len("DLLL "):]))
  for record, stamp, elapsed in zip(records, stamps, (1.5, 2.25, 10.0)):
    assert list(record) == ["timestamp", "datetime", "elapsedtime", "type", "step", "data"]
    assert record["type"] == "LOG"
    assert float(record["timestamp"]) == pytest.approx(stamp.timestamp())
    assert record["datetime"] == "2024-03-01 12:00:%09.6f" % (0.25 + elapsed)
    assert float(record["elapsedtime"]) == pytest.approx(elapsed)
  assert [r["step"] for r in records] == [1, 20, []]
  assert records[0]["data"] == {"total_loss": 7.5, "throughput_train": 99.25}
  assert records[1]["data"] == {"learning_rate": 1e-4, "loss_scaler": 32768.0}
  assert records[2]["data"] == {"throughput_train": 101.5, "update_steps": 20, "fp16": True,
                                "note": None}
  assert records[2]["data"]["fp16"] is True


def test_stdout_line_is_readable(capsys):
  logger = dllogger_setup.RunLogger(None, backend="builtin")
  logger.log(step=3, data={"total_loss": 7.123456789, "learning_rate": 0.0001})
  logger.log(step=(), data={"throughput_train": 12.5})
  out = capsys.readouterr().out.splitlines()
  assert len(out) == 2
  assert out[0].startswith("DLL 2")
  assert out[0].endswith(" - 3 total_loss : 7.12346 learning_rate : 0.0001")
  assert out[1].endswith(" - summary throughput_train : 12.5")


def test_other_ranks_never_open_the_file(tmp_path, capsys):
  log_path = tmp_path / "never" / "dllogger.json"
  logger = dllogger_setup.RunLogger(str(log_path), rank=1, backend="builtin")
  assert not logger.enabled
  logger.log(step=1, data={"total_loss": 1.0})
  logger.flush()
  logger.close()
  assert not log_path.parent.exists()
  assert capsys.readouterr().out == ""


def test_append_keeps_earlier_lines(tmp_path):
  log_path = str(tmp_path / "dllogger.json")
  with dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False) as logger:
    logger.log(step=1, data={"a": 1})
  with dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False, append=True) as logger:
    logger.log(step=2, data={"a": 2})
  steps = [dllogger_setup.parse_log_line(line)["step"] for line in open(log_path)]
  assert steps == [1, 2]


def test_run_log_of_a_restart_appends_and_marks_the_restart(tmp_path):
  log_path = str(tmp_path / "out" / "bert_dllog.json")
  first = dllogger_setup.open_run_log(log_path, 0, 0, backend="builtin", stdout=False)
  first.log(step=1, data={"total_loss": 7.0})
  first.log(step=2, data={"total_loss": 6.0})
  first.close()
  # Only rank 0 writes: another rank's logger adds nothing, restart line included.
  dllogger_setup.open_run_log(log_path, 1, 2, backend="builtin", stdout=False).close()
  second = dllogger_setup.open_run_log(log_path, 0, 2, backend="builtin", stdout=False)
  second.log(step=3, data={"total_loss": 5.0})
  second.close()
  records = [dllogger_setup.parse_log_line(line) for line in open(log_path)]
  assert [r["step"] for r in records] == [1, 2, "RESTART", 3]
  assert records[2]["data"] == {"resumed_from_step": 2}
  # A first run into an empty directory has no restart line.
  fresh = str(tmp_path / "fresh.json")
  dllogger_setup.open_run_log(fresh, 0, 0, backend="builtin", stdout=False).close()
  assert open(fresh).read() == ""


def test_read_log_of_a_resumed_run_is_the_training_history(tmp_path):
  # The first run logged steps 1-3 and was killed after its step-2 checkpoint; the resumed run
  # trained step 3 again and went on to 4.
  log_path = str(tmp_path / "bert_dllog.json")
  first = dllogger_setup.open_run_log(log_path, 0, 0, backend="builtin", stdout=False)
  for step, loss in ((1, 7.0), (2, 6.0), (3, 5.5)):
    first.log(step=step, data={"total_loss": loss})
  first.close()
  second = dllogger_setup.open_run_log(log_path, 0, 2, backend="builtin", stdout=False)
  second.log(step=3, data={"total_loss": 5.0})
  second.log(step=4, data={"total_loss": 4.0})
  second.close()
  steps, _ = dllogger_setup.read_log(log_path)
  assert steps == [(1, {"total_loss": 7.0}), (2, {"total_loss": 6.0}), (3, {"total_loss": 5.0}),
                   (4, {"total_loss": 4.0})]


def test_a_last_line_cut_short_by_a_kill_is_removed_before_the_restart_line(tmp_path, caplog):
  # A SIGKILL stops a write at a page boundary (a killed writer of 700-byte lines left 3 files in
  # 200 ending part-way through a line, each cut at a multiple of 4096 bytes). Appended to such a
  # line, the restart line could not be parsed: the earlier run's step 3, after its checkpoint 2,
  # stayed in the history beside the resumed run's.
  log_path = str(tmp_path / "bert_dllog.json")
  first = dllogger_setup.open_run_log(log_path, 0, 0, backend="builtin", stdout=False)
  for step in (1, 2, 3):
    first.log(step=step, data={"total_loss": 7.0 - step, "note": "x" * 3000})
  first.close()
  with open(log_path, "rb") as log:
    whole = log.read()
  third = whole.rindex(b"\n", 0, len(whole) - 1) + 1
  with open(log_path, "r+b") as log:
    log.truncate(len(whole) - 1000)  # step 3's line, cut
  second = dllogger_setup.open_run_log(log_path, 0, 2, backend="builtin", stdout=False)
  second.log(step=3, data={"total_loss": 3.5})
  second.close()
  records = [dllogger_setup.parse_log_line(line) for line in open(log_path)]
  assert None not in records  # every line whole
  assert [r["step"] for r in records] == [1, 2, "RESTART", 3]
  assert "removed its last %d bytes" % (len(whole) - 1000 - third) in caplog.text
  steps, _ = dllogger_setup.read_log(log_path)
  assert [(step, data["total_loss"]) for step, data in steps] == [(1, 6.0), (2, 5.0), (3, 3.5)]
  # A log that is one cut line only is emptied, and still marked as a restart.
  with open(log_path, "wb") as log:
    log.write(b'DLLL {"timestamp": "17')
  dllogger_setup.open_run_log(log_path, 0, 0, backend="builtin", stdout=False).close()
  assert [dllogger_setup.parse_log_line(line)["step"] for line in open(log_path)] == ["RESTART"]


def test_bad_input_is_rejected_with_a_clear_error(tmp_path):
  logger = dllogger_setup.RunLogger(str(tmp_path / "log.json"), backend="builtin", stdout=False)
  with pytest.raises(ValueError, match="step"):
    logger.log(step=1.5, data={"a": 1})
  with pytest.raises(ValueError, match="'weights'"):
    logger.log(step=1, data={"weights": np.zeros(3)})
  with pytest.raises(ValueError, match="dict"):
    logger.log(step=1, data=[("a", 1)])
  logger.close()
  with pytest.raises(ValueError, match="closed"):
    logger.log(step=1, data={"a": 1})
  with pytest.raises(ValueError, match="is a directory"):
    dllogger_setup.RunLogger(str(tmp_path), backend="builtin")
  with pytest.raises(ValueError, match="backend"):
    dllogger_setup.RunLogger(None, backend="tensorboard")
  with pytest.raises(ValueError, match="rank"):
    dllogger_setup.RunLogger(None, rank=-1)


def test_parse_log_line():
  assert dllogger_setup.parse_log_line('DLLL {"step": 1}\n') == {"step": 1}
  assert dllogger_setup.parse_log_line("DLL 2024 - 1 a : 1") is None
  assert dllogger_setup.parse_log_line("DLLL {broken") is None


FAKE_DLLOGGER = textwrap.dedent('''
    """Stand-in with the public API of NVIDIA's dllogger package, recording how it is driven."""
    import json
    calls = []

    class Verbosity:
      OFF = -1
      DEFAULT = 0
      VERBOSE = 1

    class JSONStreamBackend:
      def __init__(self, verbosity, filename, append=False):
        calls.append(("json", verbosity, filename, append))
        self.verbosity = verbosity
        self.file = open(filename, "a" if append else "w")
      def log(self, timestamp, elapsedtime, step, data):
        self.file.write("DLLL " + json.dumps({"type": "LOG", "step": step, "data": data}) + "\\n")
      def flush(self):
        self.file.flush()

    class StdOutBackend:
      def __init__(self, verbosity, step_format=str, metric_format=None):
        calls.append(("stdout", verbosity))
        self.verbosity = verbosity
        self.step_format = step_format
        self.metric_format = metric_format
      def log(self, timestamp, elapsedtime, step, data):
        print("FAKE " + self.step_format(step) + " " +
              " ".join(self.metric_format(k, {}, v) for k, v in data.items()))
      def flush(self):
        pass

    class Logger:
      def __init__(self, backends):
        self.backends = backends
      def log(self, step, data, verbosity=1):
        calls.append(("log", step, dict(data), verbosity))
        for backend in self.backends:
          if backend.verbosity >= verbosity:
            backend.log(None, 0.0, step, data)
      def flush(self):
        calls.append(("flush",))
        for backend in self.backends:
          backend.flush()
''')


@pytest.fixture
def fake_dllogger(tmp_path, monkeypatch):
  package = tmp_path / "fake_site" / "dllogger"
  package.mkdir(parents=True)
  (package / "__init__.py").write_text(FAKE_DLLOGGER)
  monkeypatch.syspath_prepend(str(package.parent))
  sys.modules.pop("dllogger", None)
  import dllogger  # pylint: disable=import-outside-toplevel
  yield dllogger
  sys.modules.pop("dllogger", None)


def test_uses_the_dllogger_package_when_importable(tmp_path, fake_dllogger, capsys):
  log_path = str(tmp_path / "dllogger.json")
  logger = dllogger_setup.RunLogger(log_path)
  logger.log(step=5, data={"total_loss": np.float32(2.5)})
  logger.log(step=(), data={"throughput_train": 10.0})
  logger.close()
  calls = fake_dllogger.calls
  assert calls[0] == ("json", 1, log_path, False)
  assert calls[1] == ("stdout", 0)
  assert calls[2:6] == [("log", 5, {"total_loss": 2.5}, 0), ("flush",),
                        ("log", (), {"throughput_train": 10.0}, 0), ("flush",)]
  assert type(calls[2][2]["total_loss"]) is float  # numpy scalars converted before json
  records = [dllogger_setup.parse_log_line(line) for line in open(log_path)]
  assert [r["step"] for r in records] == [5, []]
  out = capsys.readouterr().out.splitlines()
  assert out == ["FAKE 5 total_loss : 2.5", "FAKE summary throughput_train : 10"]


def test_a_line_of_the_dllogger_package_is_in_the_file_once_logged(tmp_path, fake_dllogger):
  # Its JSONStreamBackend buffers the file (as the fake does): unflushed, the line of an update
  # whose checkpoint is saved next (utils/training/job.py) would be lost to a kill.
  log_path = tmp_path / "dllogger.json"
  logger = dllogger_setup.RunLogger(str(log_path), stdout=False)
  logger.log(step=5, data={"total_loss": 2.5})
  assert [dllogger_setup.parse_log_line(line)["step"]
          for line in log_path.read_text().splitlines()] == [5]
  logger.close()


def test_builtin_backend_is_used_when_asked_even_with_the_package(tmp_path, fake_dllogger,
                                                                   capsys):
  logger = dllogger_setup.RunLogger(str(tmp_path / "log.json"), backend="builtin")
  logger.log(step=1, data={"a": 1})
  logger.close()
  assert fake_dllogger.calls == []
  assert capsys.readouterr().out.startswith("DLL ")  # the built-in backend's stdout line
  assert dllogger_setup.parse_log_line(open(tmp_path / "log.json").readline())["data"] == {"a": 1}


def test_dllogger_backend_required_but_missing(monkeypatch, capsys):
  monkeypatch.setitem(sys.modules, "dllogger", None)  # makes `import dllogger` fail
  with pytest.raises(ImportError, match="dllogger package is not installed"):
    dllogger_setup.RunLogger(None, backend="dllogger")
  dllogger_setup.RunLogger(None, backend="auto").log(step=1, data={"a": 1})
  assert capsys.readouterr().out.startswith("DLL ")  # the built-in backend's stdout line
