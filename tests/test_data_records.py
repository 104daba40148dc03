"""Bad pretraining records met during a run: named by file and record, one line, exit status 2.

- Token ids: the pre-flight check reads the first record of each file; the input pipeline checks
  every batch, so an out-of-vocabulary id in the LAST record of a file is caught too (on a GPU the
  embedding lookup would return zeros for it and train on garbage).
- A corrupt record (bytes overwritten mid-file): the scan after the failure names it.
- Under Horovod, the rank that met it prints the line; no rank prints a traceback.
- The background check of every record beside training (the default): a bad record stops every
  worker at the same update, which is saved, exit 2; the rank that found it names the file, the
  record and its byte offset, the others name that rank; the fixed file then resumes.
- A length field past the end of the file with a right CRC (TensorFlow's reader died on it):
  named by training without the background check.

The checks of whole files without training (`check_record_file`, the background check) are
test_data_records_file_check.py's.
"""

import json
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tests import test_data_record_framing as framing_tests
from utils.core import errors
from utils.data import input_pipeline
from utils.data import record_layout
from utils.data import records

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "run_pretraining.py")
BIN_DIR = os.path.dirname(sys.executable)
SEQ, PRED, VOCAB = 16, 3, 100
LAYOUT = record_layout.unpacked(SEQ, PRED)
CONFIG = dict(helpers.TINY_CONFIG, vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1,
              intermediate_size=32, max_position_embeddings=SEQ)
# The largest id of the data, only in the last record of the last file.
LARGEST_ID = VOCAB + 17


def _batch(seed, rows):
  return helpers.random_batch(np.random.RandomState(seed), rows, SEQ, VOCAB, PRED)


def _write_data(directory, rows=(12, 10)):
  """Files part-<i>.tfrecord with ids < VOCAB, except input_ids[1] of the last record of the
  last file: LARGEST_ID. Returns the paths."""
  directory.mkdir(parents=True, exist_ok=True)
  paths = []
  for index, count in enumerate(rows):
    batch = _batch(index, count)
    if index == len(rows) - 1:
      batch["input_ids"][-1, 1] = LARGEST_ID
    path = str(directory / ("part-%d.tfrecord" % index))
    helpers.write_batch_records(path, batch)
    paths.append(path)
  return paths


def _drain(input_fn):
  """Reads every batch of an evaluation input_fn's dataset (graph mode, like the Estimator)."""
  with tf.Graph().as_default():
    batch = tf.compat.v1.data.make_one_shot_iterator(input_fn({})).get_next()
    with tf.compat.v1.Session() as session:
      count = 0
      while True:
        try:
          session.run(batch)
        except tf.errors.OutOfRangeError:
          return count
        count += 1


def _record_spans(path):
  """[(first byte, end byte)] of each record of a TFRecord file, read from its framing (8-byte
  length, 4-byte length CRC, data, 4-byte data CRC), independently of TensorFlow."""
  data = open(path, "rb").read()
  spans, offset = [], 0
  while offset < len(data):
    (length,) = struct.unpack("<Q", data[offset:offset + 8])
    end = offset + 12 + length + 4
    spans.append((offset, end))
    offset = end
  return spans


def test_out_of_vocabulary_id_in_the_last_record_is_named_by_the_pipeline(tmp_path):
  paths = _write_data(tmp_path)
  last = len(_record_spans(paths[1])) - 1
  assert last == 9
  # vocab_size just below the largest id: the pre-flight check of first records passes ...
  records.check_input_files(paths, SEQ, PRED, vocab_size=LARGEST_ID)
  # ... the pipeline's check of every batch fails on the last record, naming it.
  for is_training in (False, True):
    input_fn = input_pipeline.input_fn_builder(input_pipeline.InputPlan(paths, LAYOUT,
        is_training=is_training, vocab_size=LARGEST_ID), 4)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
      if is_training:
        with tf.Graph().as_default():
          batch = tf.compat.v1.data.make_one_shot_iterator(input_fn({})).get_next()
          with tf.compat.v1.Session() as session:
            for _ in range(20):  # 22 records: the last is met in the first epoch's 6 batches
              session.run(batch)
      else:
        _drain(input_fn)
    expected = ("%s: record %d: token id %d in input_ids is outside [0, vocab_size=%d)"
                % (paths[1], last, LARGEST_ID, LARGEST_ID))
    assert records.pipeline_problem(raised.value).startswith(expected)
    named = records.name_bad_input(raised.value, paths)
    assert isinstance(named, errors.UsageError)
    assert str(named).startswith("bad input record: " + expected)
  # One id more in the vocabulary: every record passes.
  assert _drain(input_pipeline.input_fn_builder(input_pipeline.InputPlan(paths, LAYOUT,
      is_training=False, vocab_size=LARGEST_ID + 1), 4)) == 6


def test_masked_lm_id_outside_the_vocabulary_is_named(tmp_path):
  batch = _batch(3, 5)
  batch["masked_lm_ids"][2, 0] = VOCAB
  path = str(tmp_path / "masked.tfrecord")
  helpers.write_batch_records(path, batch)
  with pytest.raises(tf.errors.InvalidArgumentError) as raised:
    _drain(input_pipeline.input_fn_builder(input_pipeline.InputPlan([path], LAYOUT,
        is_training=False, vocab_size=VOCAB), 2))
  assert records.pipeline_problem(raised.value).startswith(
      "%s: record 2: token id %d in masked_lm_ids is outside" % (path, VOCAB))


def test_pipeline_without_vocab_size_yields_the_same_batches(tmp_path):
  # The records carry their origin through the pipeline: the batches are unchanged.
  paths = _write_data(tmp_path, rows=(5, 6))
  expected = [_batch(0, 5), _batch(1, 6)]
  expected[1]["input_ids"][-1, 1] = LARGEST_ID
  with tf.Graph().as_default():
    input_fn = input_pipeline.input_fn_builder(input_pipeline.InputPlan(paths, LAYOUT,
        is_training=False), 11)
    batch = tf.compat.v1.data.make_one_shot_iterator(input_fn({})).get_next()
    with tf.compat.v1.Session() as session:
      got = session.run(batch)
  for name in ("input_ids", "masked_lm_ids", "masked_lm_weights"):
    np.testing.assert_array_equal(got[name], np.concatenate([e[name] for e in expected]))


def _flags(config, input_dir, out, **extra):
  values = dict(bert_config_file=config, input_files_dir=input_dir, output_dir=out,
                max_seq_length=SEQ, max_predictions_per_seq=PRED, train_batch_size=4,
                learning_rate=1e-3, num_warmup_steps=1, num_train_steps=40,
                save_checkpoints_steps=1000, display_loss_steps=10, do_train=True)
  values.update(extra)
  return ["--%s=%s" % (k, v) for k, v in values.items()]


def _config(tmp_path, **changes):
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(dict(CONFIG, **changes)))
  return str(path)


def _run(args, launcher=(), timeout=240):
  return helpers.run_python([SCRIPT] + list(args), check=False, launcher=launcher,
                            timeout=timeout)


@pytest.mark.e2e
def test_run_stops_at_the_last_records_out_of_vocabulary_id_in_one_line(tmp_path):
  paths = _write_data(tmp_path / "data")
  config = _config(tmp_path, vocab_size=LARGEST_ID)
  proc = _run(_flags(config, tmp_path / "data", tmp_path / "out"))
  assert proc.returncode == 2, proc.stderr[-3000:]
  expected = ("run_pretraining.py: error: bad input record: %s: record 9: token id %d in "
              "input_ids is outside [0, vocab_size=%d)" % (paths[1], LARGEST_ID, LARGEST_ID))
  assert expected in proc.stderr, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr


def _corrupt_middle(source, target):
  """Copies `source` with 100 bytes in its middle overwritten; returns the index of the first
  record those bytes fall in (from the file's framing)."""
  data = bytearray(open(source, "rb").read())
  middle = len(data) // 2
  data[middle:middle + 100] = bytes(range(100))
  open(target, "wb").write(bytes(data))
  return next(i for i, (start, end) in enumerate(_record_spans(source)) if start <= middle < end)


# Without the background check (--nocheck_input_records) the input pipeline meets the record.
@pytest.mark.e2e
def test_corrupt_record_mid_training_is_one_line_and_the_traceback_only_with_verbose(tmp_path):
  good = _write_data(tmp_path / "good", rows=(40,))[0]
  (tmp_path / "bad").mkdir()
  broken = str(tmp_path / "bad" / "broken.tfrecord")
  index = _corrupt_middle(good, broken)
  assert index > 0  # the pre-flight check (first record) passes
  config = _config(tmp_path, vocab_size=LARGEST_ID + 1)
  quiet, verbose = [_run(_flags(config, tmp_path / "bad", tmp_path / name,
                                check_input_records=False, **extra))
                    for name, extra in (("quiet", {}), ("verbose", {"verbose": True}))]
  expected = "run_pretraining.py: error: bad input record: %s: record %d at byte offset %d: " % (
      broken, index, _record_spans(good)[index][0])
  for proc in (quiet, verbose):
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert expected in proc.stderr, proc.stderr[-3000:]
  assert "Traceback" not in quiet.stderr
  error_lines = [line for line in quiet.stderr.splitlines() if "error" in line.lower()]
  assert len(error_lines) == 1 and error_lines[0].startswith(expected), error_lines
  assert "Traceback" in verbose.stderr and "DataLossError" in verbose.stderr


@pytest.mark.e2e
def test_a_length_past_the_end_ends_training_without_the_background_check_in_one_line(tmp_path):
  good = _write_data(tmp_path / "good", rows=(40,))[0]
  (tmp_path / "bad").mkdir()
  broken = tmp_path / "bad" / "huge.tfrecord"
  data = open(good, "rb").read()
  broken.write_bytes(data + framing_tests.header(framing_tests.HUGE) + b"abcd")
  proc = _run(_flags(_config(tmp_path, vocab_size=LARGEST_ID + 1), tmp_path / "bad",
                     tmp_path / "out", check_input_records=False))
  assert proc.returncode == 2, proc.stderr[-3000:]
  error_lines = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
  assert error_lines == ["run_pretraining.py: error: bad input record: %s: record 40 at byte "
                         "offset %d: %s" % (broken, len(data), framing_tests.HUGE_PROBLEM)]
  assert "Traceback" not in proc.stderr


@pytest.mark.e2e
def test_corrupt_record_under_horovod_is_one_line_from_the_rank_that_met_it(tmp_path):
  good = [_write_data(tmp_path / ("good%d" % i), rows=(40,))[0] for i in range(2)]
  (tmp_path / "bad").mkdir()
  os.link(good[0], str(tmp_path / "bad" / "a-good.tfrecord"))
  broken = str(tmp_path / "bad" / "b-broken.tfrecord")
  index = _corrupt_middle(good[1], broken)
  config = _config(tmp_path, vocab_size=LARGEST_ID + 1)
  launcher = [os.path.join(BIN_DIR, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo"]
  proc = subprocess.run(["timeout", "240"] + launcher + [sys.executable, SCRIPT] + _flags(
      config, tmp_path / "bad", tmp_path / "out", horovod=True, num_train_steps=100000,
      check_input_records=False), capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
  output = proc.stdout + proc.stderr
  assert proc.returncode not in (0, 124), output[-4000:]
  expected = "run_pretraining.py: error: bad input record: %s: record %d at byte offset %d: " % (
      broken, index, _record_spans(good[1])[index][0])
  assert output.count(expected) == 1, output[-4000:]
  # No rank prints a traceback (horovodrun prefixes each rank's lines with "[<rank>]<stderr>:";
  # the launcher's own report of the failed process is Horovod's).
  rank_lines = [line for line in output.splitlines() if line.startswith(("[0]", "[1]"))]
  assert any(expected in line for line in rank_lines)
  assert not [line for line in rank_lines if "Traceback" in line], output[-6000:]
  # The other rank says that one ended (by pid once its process is gone), and leaves the why to
  # it: from there a rank that ended on a bad record and one that was killed look alike.
  others = [line for line in rank_lines if "error" in line.lower() and expected not in line]
  assert len(others) <= 1, output[-6000:]
  for line in others:
    assert re.match(r"\[\d\]<stderr>:run_pretraining\.py: error: rank \d stopped: (rank \d \(pid "
                    r"\d+ on [^)]+\)|another rank) ended, and Horovod shut down with it \(a line "
                    r"of that rank, if it printed one, says why\); no checkpoint was saved yet$",
                    line), output[-6000:]


def _horovodrun(args, timeout=240):
  launcher = [os.path.join(BIN_DIR, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo"]
  return subprocess.run(["timeout", str(timeout)] + launcher + [sys.executable, SCRIPT] + args,
                        capture_output=True, text=True, timeout=timeout + 60, cwd=REPO_ROOT)


def _checkpoint_steps(directory):
  return sorted(int(path.name[len("model.ckpt-"):-len(".index")])
                for path in directory.glob("model.ckpt-*.index"))


@pytest.mark.e2e
def test_a_bad_record_stops_every_worker_at_one_update_with_its_checkpoint_and_the_fix_resumes(
    tmp_path):
  # Rank 1 reads the broken file (two files, two workers: one each). Its background check finds
  # the record long before the input pipeline would reach it; both workers stop at the same update,
  # rank 0 saves it, and both end with exit status 2 and one line each. The record is the 300th:
  # past what the pipeline reads ahead for its first update (a shuffle buffer of 100 records).
  good = [_write_data(tmp_path / ("good%d" % i), rows=(600,))[0] for i in range(2)]
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  os.link(good[0], str(data_dir / "a-good.tfrecord"))
  broken = str(data_dir / "b-broken.tfrecord")
  index = _corrupt_middle(good[1], broken)
  offset = _record_spans(good[1])[index][0]
  assert index >= 200
  config = _config(tmp_path, vocab_size=LARGEST_ID + 1)
  out = tmp_path / "out"
  args = _flags(config, data_dir, out, horovod=True, num_train_steps=30)
  first = _horovodrun(args)
  output = first.stdout + first.stderr
  assert first.returncode not in (0, 124), output[-4000:]
  rank_lines = [line for line in output.splitlines() if line.startswith(("[0]", "[1]"))]
  found = re.findall(r"^\[1\]<stderr>:run_pretraining\.py: error: bad input record: (.*): record "
                     r"(\d+) at byte offset (\d+): [a-z ]+CRC mismatch; stopped at update (\d+), "
                     r"checkpoint written: remove or regenerate the file, then run the same "
                     r"command to resume$", output, re.M)
  assert len(found) == 1, output[-4000:]
  path, record, byte_offset, update = found[0]
  assert (path, int(record), int(byte_offset)) == (broken, index, offset)
  told = re.findall(r"^\[0\]<stderr>:run_pretraining\.py: error: worker 1 found a bad input "
                    r"record \(its line names it\); stopped at update (\d+), checkpoint "
                    r"written", output, re.M)
  assert told == [update], output[-4000:]
  # The update is saved (with the periodic saves at 1000, only the stop saved it), nothing else
  # went wrong, and no worker left its lock or a save in flight.
  assert _checkpoint_steps(out) == [int(update)]
  assert 1 <= int(update) < 30
  assert not [line for line in rank_lines if "Traceback" in line], output[-6000:]
  errors_said = [line for line in rank_lines if "error" in line.lower()]
  assert len(errors_said) == 2, errors_said
  assert not (out / ".output_dir.lock").exists()
  assert not list(out.glob("*_temp*"))
  stops = [json.loads(line[len("DLLL "):]) for line in open(out / "bert_dllog.json")
           if '"STOP"' in line]
  assert [(stop["data"]["update"], stop["data"]["exit_code"]) for stop in stops] == [
      (int(update), 2)]
  # The fix the line asks for: the file regenerated (here: the good copy); the same command resumes
  # from the saved update and ends the run.
  os.remove(broken)
  os.link(good[1], broken)
  second = _horovodrun(args)
  assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
  assert _checkpoint_steps(out)[-1] == 30
  assert "Running training from step %s to 30" % update in second.stdout + second.stderr


@pytest.mark.e2e
def test_a_bad_record_found_before_the_first_update_ends_one_worker_without_a_save(tmp_path):
  good = _write_data(tmp_path / "good", rows=(40,))[0]
  (tmp_path / "data").mkdir()
  broken = str(tmp_path / "data" / "broken.tfrecord")
  spans = _record_spans(good)
  data = bytearray(open(good, "rb").read())
  data[spans[-1][0] + 12:] = b""  # the last record cut after its header
  open(broken, "wb").write(bytes(data))
  out = tmp_path / "out"
  proc = _run(_flags(_config(tmp_path, vocab_size=LARGEST_ID + 1), tmp_path / "data", out))
  assert proc.returncode == 2, proc.stderr[-3000:]
  length = spans[-1][1] - spans[-1][0] - 16
  expected = ("run_pretraining.py: error: bad input record: %s: record %d at byte offset %d: "
              "truncated: 12 bytes left, fewer than the record's %d (%d of data, 16 of framing); "
              "stopped before the first update (nothing to save): remove or regenerate the file, "
              "then run the same command to resume" % (broken, len(spans) - 1, spans[-1][0],
                                                       length + 16, length))
  assert proc.stderr.rstrip().splitlines()[-1] == expected, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr
  assert _checkpoint_steps(out) == [] and not (out / ".output_dir.lock").exists()
