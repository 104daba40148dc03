"""Training and evaluation on packed records end to end: records packed by
pack_pretraining_data.py, then run_pretraining.py on them as users run it.

The deterministic packed run (fp32, dropout on, accumulation) runs three times at once, as the
unpacked ones of test_run_pretraining_deterministic.py do: two to the end, compared at tolerance
0 with the golden-loss tool, and one killed and resumed, which must continue exactly. The log's
sequence counts are checked against the records themselves; evaluation on the packed records
against evaluation on the same records unpacked. Horovod (horovodrun --gloo and mpirun) trains
on packed records in test_run_pretraining_deterministic.py.
"""

import json
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tests import test_run_pretraining as job
from tests import test_run_pretraining_deterministic as det
from utils.data import records as records_lib

pytestmark = pytest.mark.e2e

SEQ, PRED = det.SEQ, det.PRED
# Sequences of 4 to 7 tokens: two or three share a row of 16.
MAX_LENGTH = 7
RECORDS_PER_FILE = 24


def write_short_records(directory, seed, files=2):
  """Unpacked records of short sequences, `files` files of RECORDS_PER_FILE; returns the dir."""
  directory.mkdir()
  rng = np.random.RandomState(seed)
  for index in range(files):
    helpers.write_batch_records(
        directory / ("part-%d.tfrecord" % index),
        helpers.random_batch(rng, RECORDS_PER_FILE, SEQ, det.CONFIG["vocab_size"], PRED,
                             max_length=MAX_LENGTH))
  return directory


def pack(unpacked_dir, packed_dir):
  """pack_pretraining_data.py on every file of `unpacked_dir`; returns its last output line."""
  proc = helpers.run_python(["pack_pretraining_data.py",
                             "--input_file=%s/*.tfrecord" % unpacked_dir,
                             "--output_dir=%s" % packed_dir], timeout=120)
  return proc.stdout.strip().splitlines()[-1]


def features_of(directory):
  """Every record of the TFRecord files of `directory` as {name: numpy array}, in file order."""
  rows = []
  for path in sorted(directory.glob("*.tfrecord")):
    for record in records_lib.read_records(str(path)):
      example = tf.train.Example.FromString(record)
      rows.append({name: np.array(getattr(f, f.WhichOneof("kind")).value)
                   for name, f in example.features.feature.items()})
  return rows


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("packed")
  config = root / "dropout.json"
  config.write_text(json.dumps(dict(det.CONFIG, hidden_act="gelu", hidden_dropout_prob=0.1,
                                    attention_probs_dropout_prob=0.1, initializer_range=0.02)))
  unpacked = write_short_records(root / "unpacked", seed=11)
  packed = root / "packed"
  last_line = pack(unpacked, packed)
  return {"root": root, "configs": {"dropout": str(config)}, "train_dir": str(packed),
          "unpacked_dir": str(unpacked), "packer_line": last_line,
          "packed_rows": features_of(packed), "unpacked_rows": features_of(unpacked)}


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
  """The packed deterministic command (fp32) three times at once, one of them killed and resumed
  (`det.three_runs_one_killed`)."""
  return det.three_runs_one_killed(data, tmp_path_factory.mktemp("packed_runs"))


def test_the_packer_packs_the_short_sequences_two_or_more_per_row(data):
  sequences = 2 * RECORDS_PER_FILE
  rows = len(data["packed_rows"])
  assert sequences / 3 <= rows <= sequences / 2
  assert data["packer_line"].startswith("packed %d sequences into %d packs" % (sequences, rows))
  assert sum(int(row["next_sentence_weights"].sum()) for row in data["packed_rows"]) == sequences


def test_packed_runs_repeat_bit_for_bit_and_log_sequences(data, runs, tmp_path):
  assert "(packed: up to 3 sequences per row)" in runs["a_output"]
  entries = det.assert_same_losses(runs["a"] / "bert_dllog.json", runs["b"] / "bert_dllog.json",
                                   det.command(data, "OUT"), tmp_path)
  det.assert_counters(entries, runs["a"], fp16=False)
  lines = [r for r in job.read_dllog(runs["a"] / "bert_dllog.json") if isinstance(r["step"], int)]
  # Every update reads 2 x 2 rows; 4 x R rows (R rows in the data) are 4 whole epochs, each
  # record once per epoch: their updates hold 4 times the data's sequences and real tokens.
  rows_per_update = 2 * det.ACCUMULATION
  num_rows = len(data["packed_rows"])
  assert len(lines) >= num_rows
  epochs = lines[:num_rows]
  sequences = sum(r["data"]["sequences_per_update"] for r in epochs)
  assert sequences == 4 * 2 * RECORDS_PER_FILE
  real_tokens = sum(int(row["input_mask"].sum()) for row in data["unpacked_rows"])
  logged_tokens = sum((1 - r["data"]["padding"]) * rows_per_update * SEQ for r in epochs)
  assert logged_tokens == pytest.approx(4 * real_tokens, rel=1e-6)
  for r in epochs:
    assert r["data"]["rows_per_sec"] == pytest.approx(
        r["data"]["throughput_train"] * rows_per_update / r["data"]["sequences_per_update"],
        rel=1e-4)


def test_packed_killed_run_resumes_exactly(runs):
  # The input position of a resumed run counts rows: the packed rows continue where they stopped.
  det.assert_resumed_exactly(runs)
  assert "the input continues after" in runs["resumed_output"]


def test_packed_evaluation_gives_the_metrics_of_the_same_records_unpacked(data, runs, tmp_path):
  commands, dirs = [], {}
  for name, records in (("unpacked", data["unpacked_dir"]), ("packed", data["train_dir"])):
    dirs[name] = tmp_path / name
    shutil.copytree(runs["a"], dirs[name])
    commands.append([job.SCRIPT] + job.common_flags(
        {"config": data["configs"]["dropout"], "train_dir": records}, dirs[name],
        max_seq_length=SEQ, max_predictions_per_seq=PRED, do_eval=True, eval_files_dir=records,
        max_eval_steps=1000, eval_batch_size=5))
  results = helpers.run_side_by_side([[sys.executable] + c for c in commands])
  for code, out, err in results:
    assert code == 0, err[-4000:]
  unpacked = helpers.read_eval_results(dirs["unpacked"] / "eval_results.txt")
  packed = helpers.read_eval_results(dirs["packed"] / "eval_results.txt")
  assert packed["masked_lm_accuracy"] == unpacked["masked_lm_accuracy"]
  assert packed["next_sentence_accuracy"] == unpacked["next_sentence_accuracy"]
  for name in ("masked_lm_loss", "next_sentence_loss"):
    assert packed[name] == pytest.approx(unpacked[name], abs=1e-5), name
  # The accuracies count real predictions and sequences only: with the padding slots counted,
  # the packed figure would differ from the unpacked one.
  assert 0.0 <= unpacked["next_sentence_accuracy"] <= 1.0


def test_packed_tpu_estimator_path_trains_and_evaluates_on_cpu(data, tmp_path):
  out = tmp_path / "out"
  job.run_job(job.common_flags(
      {"config": data["configs"]["dropout"], "train_dir": data["train_dir"]}, out,
      max_seq_length=SEQ, max_predictions_per_seq=PRED, do_train=True, do_eval=True,
      tpu_estimator=True, num_train_steps=3, eval_files_dir=data["train_dir"]))
  result = helpers.read_eval_results(out / "eval_results.txt")
  assert result["global_step"] == 3
  assert 0.0 <= result["next_sentence_accuracy"] <= 1.0 and result["masked_lm_loss"] > 0


def _bad_packed_row(data, directory):
  """A copy of the packed records, first a row of two or more sequences whose positions do not
  restart (0..n over the whole row): the fields disagree.

  Returns:
    (directory, the message expected: sequence 2's positions named).
  """
  directory.mkdir()
  rows = [dict(row) for row in data["packed_rows"]]
  index = next(i for i, row in enumerate(rows) if row["input_mask"].max() >= 2)
  bad = rows.pop(index)
  real = int(np.count_nonzero(bad["input_mask"]))
  bad["positions"] = np.concatenate([np.arange(real), np.zeros(SEQ - real, np.int64)])
  first, second = (int(np.count_nonzero(bad["input_mask"] == n)) for n in (1, 2))
  with tf.io.TFRecordWriter(str(directory / "bad.tfrecord")) as writer:
    for row in [bad] + rows:
      writer.write(helpers.example_from_arrays(row).SerializeToString())
  return directory, ("a packed row: positions of sequence 2 (tokens %d..%d) do not count 0..%d"
                     % (first, first + second - 1, second - 1))


def test_bad_packed_input_is_one_line_and_exit_2(data, tmp_path):
  flags = dict(max_seq_length=SEQ, max_predictions_per_seq=PRED, do_train=True,
               num_train_steps=1)
  config = data["configs"]["dropout"]
  mixed = "%s/*.tfrecord,%s/*.tfrecord" % (data["unpacked_dir"], data["train_dir"])
  bad_dir, bad_message = _bad_packed_row(data, tmp_path / "bad")
  cases = [
      ({"input_file": mixed}, "holds packed records (up to 3 sequences per row of 16 tokens, 6 "
                              "predictions) but %s" % data["unpacked_dir"]),
      ({"input_files_dir": data["train_dir"], "enable_packed_data_mode": False},
       "--noenable_packed_data_mode disagrees with the input"),
      ({"input_files_dir": data["unpacked_dir"], "enable_packed_data_mode": True},
       "--enable_packed_data_mode disagrees with the input"),
      ({"input_files_dir": str(bad_dir)}, bad_message),
      ({"input_files_dir": data["train_dir"], "avg_seq_per_pack": 0.5},
       "--avg_seq_per_pack must be >= 1 (sequences per packed row), got 0.5"),
  ]
  commands = []
  for index, (inputs, _) in enumerate(cases):
    values = dict(flags, bert_config_file=config, output_dir=tmp_path / ("out%d" % index),
                  **inputs)
    commands.append([sys.executable, job.SCRIPT]
                    + ["--%s=%s" % (k, v) for k, v in values.items()])
  for (code, _, err), (_, expected) in zip(helpers.run_side_by_side(commands), cases):
    lines = [line for line in err.splitlines() if line.startswith("run_pretraining.py: error:")]
    assert code == 2, err[-3000:]
    assert len(lines) == 1 and expected in lines[0], (expected, err[-3000:])
    assert "Traceback" not in err


def test_packed_training_under_manual_fp16_with_habanas_flags(data, tmp_path):
  out = tmp_path / "out"
  proc = job.run_job(job.common_flags(
      {"config": data["configs"]["dropout"], "train_dir": data["train_dir"]}, out,
      max_seq_length=SEQ, max_predictions_per_seq=PRED, do_train=True, manual_fp16=True,
      num_train_steps=3, enable_packed_data_mode=True, avg_seq_per_pack=2))
  assert "--avg_seq_per_pack=2 is not used: the log counts each update's sequences" in proc.stderr
  lines = [r["data"] for r in job.read_dllog(out / "bert_dllog.json")
           if isinstance(r["step"], int)]
  # 4 rows of 1 to 3 sequences each per update, the fp16 loss scale logged.
  assert len(lines) == 3
  assert all(4 <= d["sequences_per_update"] <= 12 and "loss_scaler" in d for d in lines)
  assert all(np.isfinite(d["total_loss"]) for d in lines)
