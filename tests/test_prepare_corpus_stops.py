"""prepare_corpus.py when a run ends early: a unit that fails leaves no temporary file (its own nor
its workers'); SIGTERM or SIGINT (to the process or its whole group, under mpirun to one rank)
ends the run with one line and exit 75, nothing half-written left, and the same command then
continues to the bytes of a run never stopped; input refused before any work creates no
--output_dir."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests import corpus_data
from tests import helpers
from tests.test_prepare_corpus import SCRIPT
from tests.test_prepare_corpus import _write_dumps
from tests.test_prepare_corpus import run_command
from tests.test_prepare_corpus import small_flags
from tests.test_prepare_corpus import written  # noqa: F401  (a fixture)
from tests.test_run_pretraining_launchers import _mpirun
from utils.core import errors
from utils.corpus import manifest
from utils.corpus import runner
from utils.corpus import stages

# The settings of the interrupted runs: records long enough to be stopped in the middle.
SETTINGS = dict(num_shards=6, dupe_factor=4)


@pytest.fixture(scope="module")
def expected(written, tmp_path_factory):  # noqa: F811
  """The files of a run of SETTINGS never stopped (in this process)."""
  out = tmp_path_factory.mktemp("reference")
  runner.run(corpus_data.make_config(written["inputs"], out, **SETTINGS))
  return corpus_data.output_files(out)


def _leftovers(out):
  """Temporary files under `out`, and the empty directories of extract units (relative paths)."""
  found = []
  for directory, subdirectories, names in os.walk(str(out)):
    relative = os.path.relpath(directory, str(out))
    found += [os.path.join(relative, name) for name in names
              if name.endswith(manifest.TEMP_SUFFIX)]
    if os.path.dirname(relative) == "extracted" and not subdirectories and not names:
      found.append(relative + os.sep)
  return found


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_failed_extract_leaves_no_temporary_file(written, tmp_path, num_workers):  # noqa: F811
  """A dump cut short and a folder with a file that is not UTF-8, without --skip_bad_documents:
  each unit has written buckets before its error; none is left, in this process or a worker."""
  _, cut, _ = _write_dumps(str(tmp_path))
  out = tmp_path / "out"
  config = corpus_data.make_config([cut, written["inputs"][0]], out, skip_bad_documents=False,
                                   num_workers=num_workers)
  with pytest.raises(stages.DataError):
    runner.run(config)
  assert _leftovers(out) == []
  failed = [manifest.read_entry(str(out), "extract", unit.name)
            for unit in stages.plan(config)["extract"]]
  assert any(entry and entry["status"] == manifest.STATUS_FAILED for entry in failed)


def _stop_during_the_records(args, out, signum, whole_group, launcher=()):
  """Starts the command, sends `signum` once two record units are done (to the process, or to its
  whole process group; under a launcher, to rank 0). Returns (exit status, stderr), or None when
  the run ended before the signal."""
  log = str(out) + ".log"
  with open(log, "w") as stderr:
    proc = subprocess.Popen(list(launcher) + [sys.executable, SCRIPT] + args,
                            cwd=helpers.REPO_ROOT, stdout=subprocess.DEVNULL, stderr=stderr,
                            start_new_session=True)
  records = os.path.join(str(out), "manifest", "records")
  try:
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
      done = os.listdir(records) if os.path.isdir(records) else []
      if len([name for name in done if name.endswith(".json")]) >= 2:
        if whole_group:
          os.killpg(proc.pid, signum)
        elif launcher:
          os.kill(_rank_zero(proc.pid), signum)
        else:
          proc.send_signal(signum)
        code = proc.wait(timeout=120)
        with open(log) as reader:
          return code, reader.read()
      time.sleep(0.005)
    return None
  finally:
    helpers.kill_session(proc)


def _rank_zero(launcher_pid):
  """The pid of rank 0's prepare_corpus.py under the launcher."""
  import psutil  # pylint: disable=g-import-not-at-top
  for child in psutil.Process(launcher_pid).children(recursive=True):
    try:
      if (any(arg.endswith("prepare_corpus.py") for arg in child.cmdline())
          and child.environ().get("OMPI_COMM_WORLD_RANK") == "0"):
        return child.pid
    except psutil.Error:
      continue
  raise AssertionError("no rank 0 under %d" % launcher_pid)


def _stopped_then_continued(written, expected, tmp_path, signum, whole_group, launcher=(),
                            **flags):
  """Stops a run during its records (three tries: a loaded machine may let a run end first),
  checks its ending, then reruns the same command and checks the bytes."""
  for attempt in range(3):
    out = tmp_path / ("out-%d" % attempt)
    args = small_flags(written["inputs"], out, **dict(SETTINGS, **flags))
    ended = _stop_during_the_records(args, out, signum, whole_group, launcher)
    if ended is not None:
      break
  else:
    pytest.fail("each of three runs ended before it could be stopped during its records")
  code, stderr = ended
  assert code == errors.STOP_EXIT_CODE, stderr[-3000:]
  name = signal.Signals(signum).name
  line = ("prepare_corpus.py: stopped by %s: the work in progress removed; run the same command "
          "to continue" % name)
  lines = [text for text in stderr.splitlines() if "prepare_corpus.py: " in text]
  assert lines and all(text.endswith(line) for text in lines), stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  assert _leftovers(out) == []
  proc = run_command(args, launcher=launcher, timeout=600)
  assert "done earlier)" in proc.stderr
  assert corpus_data.output_files(out) == expected
  return lines


@pytest.mark.e2e
@pytest.mark.parametrize("signum, whole_group", [(signal.SIGTERM, False),
                                                 (signal.SIGINT, True)])
def test_a_signal_stops_the_run_with_exit_75_and_the_rerun_continues(written, expected, tmp_path,
                                                                     signum, whole_group):
  lines = _stopped_then_continued(written, expected, tmp_path, signum, whole_group,
                                  num_workers=2)
  assert len(lines) == 1


@pytest.mark.e2e
def test_under_mpirun_a_signal_to_one_rank_stops_the_job_with_exit_75(written, expected,
                                                                      tmp_path):
  # mpirun exits with the first rank's status and ends the other with SIGTERM (which stops it
  # the same way, if it gets there before mpirun's SIGKILL a second later).
  lines = _stopped_then_continued(written, expected, tmp_path, signal.SIGTERM, False,
                                  launcher=_mpirun(2), barrier_timeout_secs=300)
  assert 1 <= len(lines) <= 2, lines


@pytest.mark.e2e
@pytest.mark.parametrize("flags, message", [
    (["--input=/nonexistent/corpus.txt"], "/nonexistent/corpus.txt: the input: no such file"),
    (["--input=/nonexistent/folder", "--input_format=directory"],
     "/nonexistent/folder: the input: no such directory"),
    (["--phases=128"], "--phases: '128' is not LENGTH:PREDICTIONS"),
    ([], "--input must have a value other than None"),
])
def test_input_refused_before_any_work_creates_no_output_directory(written, tmp_path, flags,
                                                                   message):
  out = tmp_path / "new" / "out"
  inputs = [] if not flags or flags[0].startswith("--input=") else written["inputs"][1:2]
  args = [arg for arg in small_flags(inputs, out) if not arg.startswith("--skip")] + flags
  proc = run_command(args, check=False)
  assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
  assert not os.path.exists(str(tmp_path / "new"))
