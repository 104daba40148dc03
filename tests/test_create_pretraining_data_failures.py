"""create_pretraining_data.py when something goes wrong: errors that name the problem, and what a
failed or killed run leaves behind (nothing: no partial file, no empty directory of its own, no
process); the command line's progress and one-line errors. The corpus and the generator's
helpers are test_create_pretraining_data.py's.
"""

import logging
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import create_pretraining_data as cpd
from tests import helpers
from tests.test_create_pretraining_data import MAX_PREDICTIONS
from tests.test_create_pretraining_data import MAX_SEQ_LENGTH
from tests.test_create_pretraining_data import REPO_ROOT
from tests.test_create_pretraining_data import corpus_with_vocabulary
from tests.test_create_pretraining_data import generate
from tests.test_create_pretraining_data import make_corpus
from tests.test_create_pretraining_data import options
from tests.test_create_pretraining_data import read_examples
from utils.core import errors
from utils.data import instances
from utils.data import vocabulary


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """(input files, vocabulary file) of a small generated corpus."""
  return corpus_with_vocabulary(tmp_path_factory.mktemp("corpus"))


def test_errors_name_the_problem(corpus, tmp_path):
  inputs, vocab_file = corpus
  with pytest.raises(ValueError, match="no file matches .*nothing-here-\\*.txt, .*also-not"):
    cpd.resolve_input_files(str(tmp_path / "nothing-here-*.txt") + "," + str(tmp_path / "also-not"))
  assert cpd.resolve_input_files(",".join([inputs[1], inputs[0], inputs[1]])) == [inputs[1],
                                                                                  inputs[0]]
  with pytest.raises(ValueError, match="vocabulary file not found: .*missing.txt"):
    cpd.load_tokenizer(str(tmp_path / "missing.txt"), True)
  no_special = tmp_path / "plain_vocab.txt"
  no_special.write_text("[UNK]\n[CLS]\nthe\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"plain_vocab.txt lacks the special token\(s\) \[SEP\] "
                                       r"\[MASK\]"):
    generate(inputs, str(no_special), tmp_path / "x")
  blank = tmp_path / "blank.txt"
  blank.write_text("\n\n  \n\x05\n", encoding="utf-8")
  with pytest.raises(instances.InputDataError,
                     match="^no documents in the input files .*blank.txt: no line holds a token"):
    generate([str(blank)], vocab_file, tmp_path / "blank_out")
  assert not os.listdir(str(tmp_path / "blank_out"))  # it existed before: kept
  with pytest.raises(ValueError, match="--output_file lists 2 files but only 1 input"):
    cpd.resolve_output_files("a,b", 1)
  with pytest.raises(ValueError, match="--max_seq_length must be an integer >= 5"):
    generate(inputs, vocab_file, tmp_path / "y", max_seq_length=4)
  with pytest.raises(ValueError, match="--masked_lm_prob must be in"):
    generate(inputs, vocab_file, tmp_path / "y", masked_lm_prob=0.0)
  latin1 = tmp_path / "latin1.txt"
  latin1.write_bytes(b"caf\xe9\n")
  not_utf8 = r"^%s: not UTF-8 text at byte offset 3 \(line 1\): convert the file to UTF-8$" % (
      re.escape(str(latin1)))
  with pytest.raises(instances.InputDataError, match=not_utf8):
    generate([str(latin1)], vocab_file, tmp_path / "z")
  with pytest.raises(instances.InputDataError, match=not_utf8):  # from a worker
    generate([inputs[0], str(latin1)], vocab_file, tmp_path / "z2", num_workers=2)
  assert not os.listdir(str(tmp_path / "z2"))


def test_a_failed_run_removes_the_directories_it_created_and_only_those(corpus, tmp_path,
                                                                         monkeypatch):
  inputs, vocab_file = corpus
  latin1 = tmp_path / "latin1.txt"
  latin1.write_bytes(b"caf\xe9\n")
  existing = tmp_path / "existing"
  existing.mkdir()
  kept = tmp_path / "kept" / "new"  # created by the run, but another file lands in it
  outputs = [str(tmp_path / "new" / "deeper" / "a.tfrecord"), str(existing / "b.tfrecord"),
             str(kept / "c.tfrecord")]
  real_process_file = instances.process_file

  def writes_beside_the_output(task):
    (kept / "theirs.txt").write_text("not the run's")
    return real_process_file(task)

  monkeypatch.setattr(instances, "process_file", writes_beside_the_output)
  with pytest.raises(instances.InputDataError, match="latin1.txt: not UTF-8"):
    cpd.create_pretraining_data([inputs[0], inputs[1], str(latin1)], outputs, vocab_file,
                                options(dupe_factor=1), num_workers=2)
  assert sorted(os.listdir(tmp_path)) == ["existing", "kept", "latin1.txt"]
  assert os.listdir(existing) == [] and os.listdir(kept) == ["theirs.txt"]


@pytest.mark.timeout(120)
def test_a_dead_worker_stops_the_run_with_the_file_named(corpus, tmp_path, monkeypatch):
  inputs, vocab_file = corpus
  real_process_file = instances.process_file

  def dies_on_second_file(task):
    if task[0] == 1:
      os._exit(9)  # as if killed (the workers are forked: they run this patched function)
    return real_process_file(task)

  monkeypatch.setattr(instances, "process_file", dies_on_second_file)
  with pytest.raises(RuntimeError, match="worker process of input file .*corpus-1.txt died "
                                         "\\(exit code 9"):
    generate(inputs, vocab_file, tmp_path, num_workers=2)
  assert not os.listdir(str(tmp_path))  # no output, no partial file


def test_a_rerun_removes_the_leftovers_of_an_interrupted_run(corpus, tmp_path, caplog,
                                                             monkeypatch):
  inputs, vocab_file = corpus
  reference = generate(inputs, vocab_file, tmp_path / "reference", num_workers=2)
  out = tmp_path / "out"
  out.mkdir()
  outputs = [str(out / "a.tfrecord"), str(out / "b.tfrecord")]  # 3 inputs -> 2 outputs: parts
  leftovers = [outputs[0] + ".partial", outputs[1] + ".part-00001.partial",
               outputs[0] + ".part-00002"]
  for path in leftovers + [outputs[1]]:
    with open(path, "wb") as writer:
      writer.write(b"from an interrupted run")
  # What a reader of the directory sees while the rerun writes (the workers are forked: they
  # append to a file). Neither the interrupted run's finished-looking b.tfrecord nor its other
  # files may be seen next to the new ones: the rerun removes them before it starts.
  seen = tmp_path / "seen_mid_run.txt"
  real_process_file = instances.process_file

  def recording(task):
    with open(str(seen), "a") as writer:
      writer.write(" ".join(sorted(os.listdir(str(out)))) + "\n")
    return real_process_file(task)

  monkeypatch.setattr(instances, "process_file", recording)
  with caplog.at_level(logging.WARNING):
    generate(inputs, vocab_file, out, num_workers=2, outputs=outputs)
  # Names the rerun itself writes only after every input is done (or never).
  stale = {"b.tfrecord", "a.tfrecord.partial", "a.tfrecord.part-00002"}
  listings = [set(line.split()) for line in seen.read_text().splitlines()]
  assert len(listings) == 3
  assert all(not names & stale for names in listings), listings
  assert sorted(os.listdir(str(out))) == ["a.tfrecord", "b.tfrecord"]
  assert all(path in caplog.text for path in leftovers)
  assert read_examples(outputs) == read_examples([reference[0], reference[2], reference[1]])


def test_outputs_are_published_only_when_the_whole_set_is_written(corpus, tmp_path, monkeypatch):
  inputs, vocab_file = corpus
  real_process_file = instances.process_file
  published = []

  def recording(task):
    result = real_process_file(task)
    published.append(sorted(os.listdir(str(tmp_path))))  # what a reader sees mid-run
    return result

  monkeypatch.setattr(instances, "process_file", recording)
  outputs = generate(inputs, vocab_file, tmp_path)
  assert len(published) == 3
  assert all(not name.endswith(".tfrecord") for names in published for name in names), published
  assert sorted(os.listdir(str(tmp_path))) == sorted(os.path.basename(p) for p in outputs)


@pytest.mark.e2e
def test_output_directories_are_created_and_a_file_in_the_way_is_named(corpus, tmp_path):
  inputs, vocab_file = corpus
  nested = tmp_path / "new" / "dir" / "out.tfrecord"
  cpd.create_pretraining_data(inputs[:1], [str(nested)], vocab_file, options(dupe_factor=1))
  assert len(read_examples([str(nested)])) > 0
  regular = tmp_path / "results"
  regular.write_text("a file")
  args = [sys.executable, "create_pretraining_data.py", "--input_file=%s" % inputs[0],
          "--output_file=%s" % (regular / "out.tfrecord"), "--vocab_file=%s" % vocab_file]
  proc = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert "--output_file=%s" % regular in proc.stderr and "is a regular file" in proc.stderr
  assert "Traceback" not in proc.stderr


@pytest.mark.e2e
def test_command_line_progress_and_errors(corpus, tmp_path):
  inputs, vocab_file = corpus
  out = tmp_path / "cli.tfrecord"
  args = [sys.executable, "create_pretraining_data.py", "--input_file=%s" % inputs[0],
          "--output_file=%s" % out, "--vocab_file=%s" % vocab_file, "--max_seq_length=64",
          "--max_predictions_per_seq=10", "--dupe_factor=1", "--random_seed=7"]
  proc = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert "1/1 files" in proc.stderr and "instances/s" in proc.stderr
  assert len(read_examples([str(out)])) > 0
  missing = subprocess.run(args[:3] + ["--output_file=%s" % out, "--vocab_file=/no/vocab.txt"],
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert missing.returncode == 2 and "/no/vocab.txt" in missing.stderr
  assert "Traceback" not in missing.stderr


def _error_lines(stderr):
  """The lines of a run's stderr that are not absl log records ("I1126 20:27:42.975300 ...")."""
  return [line for line in stderr.splitlines() if not re.match(r"[IWEF]\d{4} \d\d:", line)]


@pytest.mark.e2e
@pytest.mark.parametrize("problem", ["not UTF-8", "no documents"])
def test_bad_input_data_is_named_with_its_fix_and_leaves_no_directory(corpus, tmp_path, problem):
  inputs, vocab_file = corpus
  if problem == "not UTF-8":
    data = b"A first line.\n\nThen caf\xe9 au lait.\n"
    bad = tmp_path / "latin1.txt"
    offset = data.index(b"\xe9")
    expected = "%s: not UTF-8 text at byte offset %d (line 3): convert the file to UTF-8" % (
        bad, offset)
    input_files = [inputs[0], str(bad)]  # the bad file is read by a worker process
  else:
    data = b"\n  \n\t\n\n\x05\n"
    bad = tmp_path / "blank.txt"
    expected = ("no documents in the input files %s: no line holds a token (only blank lines, "
                "spaces or control characters); give text with one sentence per line and a "
                "blank line between documents" % bad)
    input_files = [str(bad)]
  bad.write_bytes(data)
  out = tmp_path / "out" / "new"
  proc = helpers.run_python(
      ["create_pretraining_data.py", "--input_file=%s" % ",".join(input_files),
       "--output_file=%s" % ",".join(str(out / ("%d.tfrecord" % i))
                                     for i in range(len(input_files))),
       "--vocab_file=%s" % vocab_file, "--num_workers=2", "--dupe_factor=1"],
      check=False, timeout=120)
  assert proc.returncode == errors.USAGE_EXIT_CODE, proc.stderr[-3000:]
  # One line naming the file and the fix: no hint to the flags (the flags were right).
  assert _error_lines(proc.stderr) == ["create_pretraining_data.py: error: " + expected]
  assert not (tmp_path / "out").exists()  # the run created it, wrote nothing: removed


def _process_status(pid):
  """(state letter, parent pid) of process `pid` from /proc, None when there is none."""
  try:
    with open("/proc/%d/stat" % pid) as reader:
      fields = reader.read().rsplit(")", 1)[1].split()
  except OSError:
    return None
  return fields[0], int(fields[1])


def _alive(pid):
  """Whether process `pid` runs (a zombie has ended: it waits only to be reaped)."""
  status = _process_status(pid)
  return status is not None and status[0] != "Z"


def _children(pid):
  """Pids of the live processes whose parent is `pid`."""
  return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()
          and _alive(int(entry)) and (_process_status(int(entry)) or ("", 0))[1] == pid]


def _command_line(pid):
  """The command line of process `pid` (bytes, NUL-separated), None when there is none."""
  try:
    with open("/proc/%d/cmdline" % pid, "rb") as reader:
      return reader.read()
  except OSError:
    return None


def kill_mid_run_and_expect_nothing_left(command, out, stderr_path, check_processes=None):
  """Starts a data tool, kills it with SIGKILL once a ".partial" file appears in `out`, and
  checks that within 10 s no file is left in `out` and none of its processes lives.

  Args:
    command: the tool's argv, run from the repository root in its own session.
    out: the (empty) directory its outputs go to.
    stderr_path: where its stderr goes (shown when it ends before writing).
    check_processes: optional check_processes(parent_pid, pids) on the run's processes, before
      the kill.
  """
  with open(stderr_path, "w") as stderr:
    parent = subprocess.Popen(command, cwd=REPO_ROOT, stderr=stderr, start_new_session=True)
  try:
    deadline = time.time() + 90
    while not any(name.endswith(".partial") for name in os.listdir(out)):
      assert parent.poll() is None, "ended before writing:\n" + stderr_path.read_text()[-3000:]
      assert time.time() < deadline, "no .partial file after 90 s"
      time.sleep(0.005)
    run = _children(parent.pid)
    if check_processes is not None:
      check_processes(parent.pid, run)
    parent.send_signal(signal.SIGKILL)
    assert parent.wait(timeout=30) == -signal.SIGKILL  # killed mid-run, not ended by itself
    deadline = time.time() + 10
    while os.listdir(out) or any(_alive(pid) for pid in run):
      assert time.time() < deadline, "10 s after kill -9: files %s, processes %s" % (
          os.listdir(out), [pid for pid in run if _alive(pid)])
      time.sleep(0.05)
  finally:
    try:
      os.killpg(parent.pid, signal.SIGKILL)  # what is left of the run, should the test fail
    except ProcessLookupError:
      pass
    parent.wait()


def _has_its_workers(parent_pid, run):
  forks = [pid for pid in run if _command_line(pid) == _command_line(parent_pid)]
  assert len(forks) >= 2, "expected its worker processes: %s" % run


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_a_generator_killed_outright_leaves_no_partial_file_and_no_process(tmp_path):
  inputs = make_corpus(tmp_path, num_files=8, documents_per_file=150)
  vocab_file = str(tmp_path / "vocab.txt")
  vocabulary.build_vocab(inputs, 300, vocab_file, min_frequency=2)
  out = tmp_path / "out"
  out.mkdir()
  outputs = [str(out / ("%d.tfrecord" % i)) for i in range(len(inputs))]
  kill_mid_run_and_expect_nothing_left(
      [sys.executable, "create_pretraining_data.py", "--input_file=%s" % ",".join(inputs),
       "--output_file=%s" % ",".join(outputs), "--vocab_file=%s" % vocab_file,
       "--max_seq_length=%d" % MAX_SEQ_LENGTH, "--max_predictions_per_seq=%d" % MAX_PREDICTIONS,
       "--dupe_factor=10", "--num_workers=2"],
      out, tmp_path / "stderr.txt", check_processes=_has_its_workers)
