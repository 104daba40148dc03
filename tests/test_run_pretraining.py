"""run_pretraining.py end to end: real processes, small models, outer timeouts.

Single process (train, resume, init_checkpoint, eval metrics against numpy, the TPUEstimator path)
and bad flags / bad data; Horovod launches (horovodrun --gloo and mpirun) and the two-phase
launcher are in tests/test_run_pretraining_launchers.py. Killed workers, resumed runs and corrupt
records are drilled in tests/test_fault_drills.py.
"""

import json
import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

import modeling
import optimization
import run_pretraining
from tests import helpers
from utils.runtime import workers as workers_lib
from tests import numpy_bert

pytestmark = pytest.mark.e2e

_tf1 = tf.compat.v1
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "run_pretraining.py")
BIN_DIR = os.path.dirname(sys.executable)
SEQ, PRED = 32, 5
CONFIG = helpers.TINY_CONFIG


def run_job(args, timeout=240, launcher=(), env=None, check=True):
  """Runs run_pretraining.py (optionally under a launcher); returns the CompletedProcess."""
  return helpers.run_python([SCRIPT] + list(args), check=check, timeout=timeout,
                            launcher=launcher, env=env)


def common_flags(data, out, **overrides):
  values = {"bert_config_file": data["config"], "input_files_dir": data["train_dir"],
            "output_dir": out, "max_seq_length": SEQ, "max_predictions_per_seq": PRED,
            "train_batch_size": 4, "eval_batch_size": 4, "learning_rate": 1e-3,
            "num_warmup_steps": 1, "save_checkpoints_steps": 2, "display_loss_steps": 1}
  values.update(overrides)
  return ["--%s=%s" % (k, v) for k, v in values.items() if v is not None]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("pipeline")
  config_path = helpers.write_bert_config(root / "bert_config.json")
  no_dropout_path = helpers.write_bert_config(root / "bert_config_no_dropout.json",
                                              hidden_dropout_prob=0.0,
                                              attention_probs_dropout_prob=0.0)
  rng = np.random.RandomState(0)
  train_dir = root / "train"
  train_dir.mkdir()
  for index in range(2):
    helpers.write_batch_records(train_dir / ("part-%d.tfrecord" % index),
                                helpers.random_batch(rng, 24, SEQ, CONFIG["vocab_size"], PRED))
  eval_batch = helpers.random_batch(rng, 12, SEQ, CONFIG["vocab_size"], PRED)
  eval_dir = root / "eval"
  eval_dir.mkdir()
  helpers.write_batch_records(eval_dir / "eval.tfrecord", eval_batch)
  # One record repeated: every batch is the same whatever the order or restart point.
  same_dir = root / "same"
  same_dir.mkdir()
  one = helpers.random_batch(rng, 1, SEQ, CONFIG["vocab_size"], PRED)
  helpers.write_batch_records(same_dir / "same.tfrecord",
                              {k: np.repeat(v, 16, axis=0) for k, v in one.items()})
  single_dir = root / "single"
  single_dir.mkdir()
  helpers.write_batch_records(single_dir / "only.tfrecord",
                              helpers.random_batch(rng, 16, SEQ, CONFIG["vocab_size"], PRED))
  return {"root": root, "config": str(config_path), "no_dropout_config": str(no_dropout_path),
          "train_dir": str(train_dir),
          "eval_dir": str(eval_dir), "eval_batch": eval_batch, "same_dir": str(same_dir),
          "single_dir": str(single_dir)}


def checkpoint_values(directory):
  checkpoint = tf.train.latest_checkpoint(str(directory))
  assert checkpoint, "no checkpoint in %s" % directory
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(checkpoint)}


def read_dllog(path):
  lines = []
  with open(path) as f:
    for line in f:
      assert line.startswith("DLLL "), line
      lines.append(json.loads(line[len("DLLL "):]))
  return lines


def assert_scalars_match_log(summary_dir, step_lines):
  """The events file in `summary_dir` holds, for each tag, the values of `step_lines` (the
  per-update log lines, in order) at their steps; returns the tags found."""
  scalars = helpers.read_scalars(str(summary_dir))
  for tag, points in scalars.items():
    key = helpers.SCALAR_LOG_KEYS[tag]
    assert [step for step, _ in points] == [l["step"] for l in step_lines], tag
    np.testing.assert_allclose([v for _, v in points], [l["data"][key] for l in step_lines],
                               rtol=1e-6, err_msg=tag)
  return set(scalars)


# ---------------------------------------------------------------------------------------------
# Single process

def test_train_logs_and_checkpoints(data, tmp_path):
  out = tmp_path / "out"
  run_job(common_flags(data, out, do_train=True, num_train_steps=4))
  values = checkpoint_values(out)
  assert values["global_step"] == 4
  assert tf.io.gfile.exists(str(out / "model.ckpt-2.index"))
  lines = read_dllog(out / "bert_dllog.json")
  steps = [l for l in lines if l["step"] != []]
  assert [l["step"] for l in steps] == [1, 2, 3, 4]
  for line in steps:
    assert set(line["data"]) >= {"throughput_train", "mlm_loss", "nsp_loss", "total_loss",
                                 "avg_loss_step", "learning_rate"}
    assert "loss_scaler" not in line["data"]
    assert line["type"] == "LOG"
    assert {"timestamp", "datetime", "elapsedtime"} <= set(line)
  # fp32: lr of update k is the schedule at step k - 1 (warmup 1: 0, then decay from 1e-3).
  assert steps[0]["data"]["learning_rate"] == 0.0
  np.testing.assert_allclose(steps[1]["data"]["learning_rate"], 1e-3 * np.sqrt(1 - 1 / 4),
                             rtol=1e-5)
  summary = [l for l in lines if l["step"] == []]
  assert summary and "throughput_train" in summary[-1]["data"]
  # The loss starts near ln(vocab) for a freshly initialised model.
  assert abs(steps[0]["data"]["mlm_loss"] - np.log(CONFIG["vocab_size"])) < 1.0
  assert all(np.isfinite(l["data"]["global_norm"]) and l["data"]["global_norm"] > 0
             for l in steps)
  # TensorBoard: the run "train" holds the logged values at the logged steps (fp32: no loss scale).
  assert assert_scalars_match_log(out / "train", steps) == (
      set(helpers.SCALAR_LOG_KEYS) - {"loss_scale", "skipped_updates"})


def test_fp16_overflow_shows_in_loss_scale_and_skipped_updates(data, tmp_path):
  # An initial loss scale of 2^32 overflows the fp16 gradients (a scaled gradient above 65504 is
  # inf): updates are skipped, each halving the scale, until the scale fits; then 2 updates apply
  # (another batch may still overflow once at the lowered scale, between them: the input order is
  # not seeded here). A skipped update gets no step line (its step would repeat the last applied
  # one): it is logged as skipped, and the applied updates' lines carry the count so far and the
  # scale it left.
  out = tmp_path / "out"
  proc = run_job(common_flags(data, out, do_train=True, num_train_steps=2, manual_fp16=True,
                              init_loss_scale=2**32, save_checkpoints_steps=100))
  steps = [l for l in read_dllog(out / "bert_dllog.json") if l["step"] != []]
  assert [l["step"] for l in steps] == [1, 2]
  skipped = int(checkpoint_values(out)["skipped_update_count"])
  assert skipped >= 1
  # Each skip is reported at the step it repeats; a line counts the skips reported before it.
  output = proc.stdout + proc.stderr
  skipped_at = [output.count("update skipped at step %d (" % step) for step in (0, 1)]
  assert skipped_at[0] >= 1 and sum(skipped_at) == skipped, (skipped_at, skipped)
  # Each skip line gives the scale after its skip: 2^32 halved once per skip so far.
  reported = re.findall(r"update skipped at step \d+ \(non-finite gradients\); loss scale now "
                        r"(\S+)", output)
  assert reported == ["%g" % (2.0 ** 32 / 2 ** k) for k in range(1, skipped + 1)], reported
  counts = [line["data"]["skipped_updates"] for line in steps]
  assert counts == list(np.cumsum(skipped_at)), (counts, skipped_at)
  assert 1 <= counts[0] <= counts[1] == skipped, (counts, skipped)
  for line, count in zip(steps, counts):
    assert np.isfinite(line["data"]["global_norm"]) and line["data"]["global_norm"] > 0
    # Each skip so far halved the scale; no doubling within 1000 finite updates.
    assert line["data"]["loss_scaler"] == 2.0 ** 32 / 2 ** count
  summary = [l for l in read_dllog(out / "bert_dllog.json") if l["step"] == []][-1]
  assert summary["data"]["skipped_updates"] == skipped
  assert assert_scalars_match_log(out / "train", steps) == set(helpers.SCALAR_LOG_KEYS)


def _continue_in_process(checkpoint, record_dir, num_train_steps, updates):
  """Restores every variable of `checkpoint` into a graph built without the Estimator and runs
  `updates` LAMB updates on a batch of 4 copies of the (single, repeated) record of `record_dir`.

  Returns:
    dict variable name -> value after the updates.
  """
  path = os.path.join(record_dir, os.listdir(record_dir)[0])
  example = tf.train.Example.FromString(next(iter(_tf1.io.tf_record_iterator(path))))
  features = {}
  for name, feature in example.features.feature.items():
    values = (feature.float_list.value if feature.WhichOneof("kind") == "float_list"
              else feature.int64_list.value)
    array = np.asarray(values, np.float32 if name == "masked_lm_weights" else np.int32)
    features[name] = np.repeat(array[None], 4, axis=0)
  config = modeling.BertConfig.from_dict(dict(CONFIG, hidden_dropout_prob=0.0,
                                              attention_probs_dropout_prob=0.0))
  with tf.Graph().as_default():
    built = run_pretraining.build_pretraining_model(
        config, helpers.constant_features(features), is_training=True)
    train_op = optimization.create_optimizer(
        built["total_loss"], 1e-3, num_train_steps, 1, optimizer_type="lamb")
    with _tf1.Session() as sess:
      _tf1.train.Saver().restore(sess, checkpoint)
      for _ in range(updates):
        sess.run(train_op)
      return {v.op.name: sess.run(v) for v in _tf1.global_variables()}


def test_resume_restores_weights_slots_and_step(data, tmp_path):
  # One record repeated, no dropout: the run is a pure function of the restored state, so the
  # resumed CLI run must equal two updates computed in-process from the same checkpoint.
  flags = dict(input_files_dir=data["same_dir"], deterministic_run=True,
               bert_config_file=data["no_dropout_config"])
  out = tmp_path / "out"
  run_job(common_flags(data, out, do_train=True, num_train_steps=4, **flags))
  step4 = str(out / "model.ckpt-4")
  proc = run_job(common_flags(data, out, do_train=True, num_train_steps=6, **flags))
  assert "from step 4 to 6" in proc.stderr
  resumed = checkpoint_values(out)
  expected = _continue_in_process(step4, data["same_dir"], num_train_steps=6, updates=2)
  assert resumed["global_step"] == expected["global_step"] == 6
  slots = [name for name in expected if name.endswith("/adam_m")]
  assert slots and set(expected) <= set(resumed)
  for name, value in expected.items():
    np.testing.assert_allclose(resumed[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
  # A finished run is not trained again.
  proc = run_job(common_flags(data, out, do_train=True, num_train_steps=6, **flags))
  assert "nothing to train" in proc.stderr
  assert checkpoint_values(out)["global_step"] == 6


def _precision_runs_side_by_side(runs, timeout=300):
  """Runs run_pretraining.py argument lists at once; returns their stderr, in order."""
  results = helpers.run_side_by_side([[sys.executable, SCRIPT] + args for args in runs], timeout)
  for args, (code, _, err) in zip(runs, results):
    assert code == 0, "exit %d: %s\n%s" % (code, args, err[-5000:])
  return [err for _, _, err in results]


def _bf16_warnings(stderr):
  return [l for l in stderr.splitlines() if "without bf16 units" in l]


def _assert_start_line(stderr, args, precision, num_train_steps, num_warmup_steps):
  """The run's output holds its start line exactly once, naming `precision` and its flag, with
  this machine's device and CPU units (tests/test_runlog_start_line.py has the exact strings)."""
  lines = helpers.start_lines(stderr, "run_pretraining.py")
  assert len(lines) == 1, stderr[-3000:]
  assert "] run_pretraining.py: precision %s" % precision in lines[0], lines[0]
  assert lines[0].endswith(helpers.expected_start_line(run_pretraining, args, num_train_steps,
                                                       num_warmup_steps)), lines[0]


@pytest.mark.e2e
def test_bf16_checkpoints_are_fp32_and_resume_across_precisions(data, tmp_path):
  # One record repeated, no dropout: every update sees the same batch; --deterministic_run: the
  # same initial weights in both precisions.
  flags = dict(input_files_dir=data["same_dir"], bert_config_file=data["no_dropout_config"],
               do_train=True, deterministic_run=True)
  fp32_out, bf16_out = tmp_path / "fp32", tmp_path / "bf16"
  runs = [common_flags(data, fp32_out, num_train_steps=2, **flags),
          common_flags(data, bf16_out, num_train_steps=2, bf16=True, **flags)]
  fp32_err, bf16_err = _precision_runs_side_by_side(runs)
  # Each run says what it computes in and why, once: fp32 by default, bf16 by its flag.
  _assert_start_line(fp32_err, runs[0], "fp32 (default); ", 2, 1)
  _assert_start_line(bf16_err, runs[1], "bf16 (--bf16; ", 2, 1)
  fp32_values, bf16_values = checkpoint_values(fp32_out), checkpoint_values(bf16_out)
  # The same variables under the same names, every float one fp32 (the release's layout).
  assert set(bf16_values) == set(fp32_values)
  for name, value in bf16_values.items():
    assert value.dtype == fp32_values[name].dtype, name
    if np.issubdtype(value.dtype, np.floating):
      assert value.dtype == np.float32, name
  assert not [name for name in bf16_values if "loss_scale" in name]
  # The script really computed in bf16: from the same weights and batch its first loss differs
  # from fp32's, by no more than bf16's rounding (8u relative, as in tests/test_bf16.py).
  first_losses = [[l["data"]["total_loss"] for l in read_dllog(out / "bert_dllog.json")
                   if l["step"] != [] and "total_loss" in l["data"]][0]
                  for out in (fp32_out, bf16_out)]
  assert first_losses[0] != first_losses[1]
  np.testing.assert_allclose(first_losses[1], first_losses[0], rtol=8 * 2.0**-8)
  # The bf16 run's start line (checked whole above against the ratio the run left in the test
  # run's probe cache, tests/conftest.py) says what bf16 products run at here, measured: faster,
  # or what it costs; no other line says it again, and no warning repeats it.
  line = helpers.start_lines(bf16_err, "run_pretraining.py")[0]
  assert re.search(r"precision bf16 \(--bf16; bf16 products (\d+\.\d\dx fp32 here|run at "
                   r"\d+\.\d\dx fp32 on this CPU: fp32 is faster here)\);", line), line
  assert bf16_err.count("bf16 products") == 1 and not _bf16_warnings(bf16_err), bf16_err[-3000:]
  # Each run resumes in the other precision: the step continues from the checkpoint and the
  # weights (and LAMB slots) move on from it.
  runs = [common_flags(data, bf16_out, num_train_steps=4, **flags),
          common_flags(data, fp32_out, num_train_steps=4, bf16=True, **flags)]
  fp32_err, bf16_err = _precision_runs_side_by_side(runs)
  assert "from step 2 to 4" in fp32_err and "from step 2 to 4" in bf16_err
  _assert_start_line(fp32_err, runs[0], "fp32 (default); ", 4, 1)
  _assert_start_line(bf16_err, runs[1], "bf16 (--bf16; ", 4, 1)
  assert not _bf16_warnings(fp32_err)
  for out, before in ((bf16_out, bf16_values), (fp32_out, fp32_values)):
    after = checkpoint_values(out)
    assert after["global_step"] == 4
    moved = [name for name in before if name.startswith("bert/")
             and not np.array_equal(after[name], before[name])]
    assert "bert/embeddings/word_embeddings" in moved
    assert all(after[name].dtype == before[name].dtype for name in before)
  # The losses continue where the other precision left off (same batch every update): the
  # first resumed loss is below the first loss of the run (it trained 2 updates already).
  for out in (bf16_out, fp32_out):
    losses = [l["data"]["total_loss"] for l in read_dllog(out / "bert_dllog.json")
              if l["step"] != [] and "total_loss" in l["data"]]
    assert len(losses) == 4 and losses[2] < losses[0], losses


def _released_style_checkpoint(directory, seed):
  """Writes `bert_model.ckpt` holding only bert/ and cls/ variables with random values."""
  config = modeling.BertConfig.from_dict(CONFIG)
  batch = helpers.random_batch(np.random.RandomState(seed), 2, SEQ, CONFIG["vocab_size"], PRED)
  with tf.Graph().as_default():
    run_pretraining.build_pretraining_model(config, helpers.constant_features(batch),
                                            is_training=False)
    with _tf1.Session() as sess:
      sess.run(_tf1.global_variables_initializer())
      weights = helpers.randomize_variables(sess, _tf1.trainable_variables(),
                                            np.random.RandomState(seed), scale=0.2)
      _tf1.train.Saver(_tf1.trainable_variables()).save(
          sess, os.path.join(str(directory), "bert_model.ckpt"))
  return weights


def test_eval_from_released_style_checkpoint_matches_numpy(data, tmp_path):
  weights = _released_style_checkpoint(tmp_path, seed=3)
  out = tmp_path / "out"
  proc = run_job(common_flags(data, out, do_eval=True, input_files_dir=None,
                              eval_files_dir=data["eval_dir"], max_eval_steps=100,
                              init_checkpoint=tmp_path / "bert_model.ckpt",
                              verbose_logging=True))
  assert proc.stderr.count("*INIT_FROM_CKPT*") == len(weights)
  result = helpers.read_eval_results(out / "eval_results.txt")

  batch = data["eval_batch"]
  _, layers, pooled = numpy_bert.encoder(weights, CONFIG["num_hidden_layers"],
                                         CONFIG["num_attention_heads"], batch["input_ids"],
                                         batch["input_mask"], batch["segment_ids"])
  heads = numpy_bert.pretraining_outputs(
      weights, layers[-1], pooled, batch["masked_lm_positions"], batch["masked_lm_ids"],
      batch["masked_lm_weights"], batch["next_sentence_labels"])
  w = batch["masked_lm_weights"].reshape(-1).astype(np.float64)
  ids = batch["masked_lm_ids"].reshape(-1)
  labels = batch["next_sentence_labels"].reshape(-1)
  expected = {
      "masked_lm_accuracy": np.sum(w * (heads["mlm_log_probs"].argmax(-1) == ids)) / w.sum(),
      "masked_lm_loss": np.sum(w * heads["mlm_per_example"]) / w.sum(),
      "next_sentence_accuracy": np.mean(heads["nsp_log_probs"].argmax(-1) == labels),
      "next_sentence_loss": heads["nsp_per_example"].mean(),
  }
  for key, value in expected.items():
    np.testing.assert_allclose(result[key], value, atol=1e-5, err_msg=key)
  assert result["global_step"] == 0
  # The throughput of the evaluation is logged too.
  lines = read_dllog(out / "bert_dllog.json")
  assert any("throughput_val" in l["data"] for l in lines if l["step"] == [])


def test_init_checkpoint_then_train(data, tmp_path):
  weights = _released_style_checkpoint(tmp_path, seed=4)
  out = tmp_path / "out"
  run_job(common_flags(data, out, do_train=True, num_train_steps=1, learning_rate=1e-9,
                       init_checkpoint=tmp_path / "bert_model.ckpt"))
  trained = checkpoint_values(out)
  # One update with a tiny learning rate: every variable still equals the checkpoint's value.
  for name, value in weights.items():
    np.testing.assert_allclose(trained[name], value, atol=1e-6, err_msg=name)


def test_tpu_estimator_path_trains_and_evaluates_on_cpu(data, tmp_path):
  out = tmp_path / "out"
  run_job(common_flags(data, out, do_train=True, do_eval=True, tpu_estimator=True,
                       num_train_steps=3, eval_files_dir=data["eval_dir"]))
  result = helpers.read_eval_results(out / "eval_results.txt")
  assert result["global_step"] == 3
  assert 0.0 <= result["masked_lm_accuracy"] <= 1.0 and result["masked_lm_loss"] > 0
  assert checkpoint_values(out)["global_step"] == 3


# ---------------------------------------------------------------------------------------------
# Bad flags and bad data

@pytest.mark.parametrize("overrides,message", [
    (dict(), "one of --do_train, --do_eval is required"),
    (dict(do_train=True, train_batch_size=0), "--train_batch_size must be >= 1"),
    (dict(do_train=True, num_accumulation_steps=0), "--num_accumulation_steps must be >= 1"),
    (dict(do_train=True, max_seq_length=128), "--max_seq_length=128 exceeds"),
    (dict(do_train=True, max_seq_length=16), "input_ids"),
    (dict(do_train=True, max_predictions_per_seq=7), "(max_predictions_per_seq=7)"),
    (dict(do_train=True, input_files_dir="/nonexistent/dir"), "/nonexistent/dir"),
    (dict(do_train=True, amp=True, manual_fp16=True), "--amp and --manual_fp16"),
    (dict(do_train=True, bf16=True, manual_fp16=True), "--bf16 and --manual_fp16"),
    (dict(do_train=True, bf16=True, amp=True), "--bf16 and --amp"),
    (dict(do_train=True, init_checkpoint="/nonexistent/ckpt"), "--init_checkpoint"),
])
def test_bad_flags_fail_before_the_graph(data, tmp_path, overrides, message):
  # In this process (the exit status and the one line of a real process: the other usage tests
  # below): no graph, no output directory.
  status, stderr = helpers.run_script_in_process(
      run_pretraining, common_flags(data, tmp_path / "out", **overrides))
  assert status == 2, stderr[-3000:]
  assert message in stderr.strip().splitlines()[-1], stderr[-3000:]
  assert stderr.strip().splitlines()[-1].startswith("run_pretraining.py: error: ")
  assert "Traceback" not in stderr
  assert not (tmp_path / "out").exists()


def test_vocabulary_mismatch_is_refused(data, tmp_path):
  small = dict(CONFIG, vocab_size=50)
  config_path = tmp_path / "small_vocab.json"
  config_path.write_text(json.dumps(small))
  proc = run_job(common_flags(data, tmp_path / "out", do_train=True,
                              bert_config_file=config_path), check=False, timeout=120)
  assert proc.returncode == 2
  assert "vocab_size=50" in proc.stderr and "part-0.tfrecord" in proc.stderr
  # The records are read without TensorFlow's deprecated record iterator: the message is not
  # preceded by its deprecation warning (nor by any other).
  assert "deprecated" not in proc.stderr, proc.stderr[-3000:]


def test_config_without_a_size_key_is_a_usage_error(data, tmp_path):
  # Without the check, the run silently builds BERT-base's 12 layers for a 2-layer config.
  config_path = tmp_path / "two_layers.json"
  config_path.write_text(json.dumps({k: v for k, v in CONFIG.items()
                                     if k != "num_hidden_layers"}))
  status, stderr = helpers.run_script_in_process(
      run_pretraining, common_flags(data, tmp_path / "out", do_train=True, num_train_steps=1,
                                    bert_config_file=config_path))
  assert status == 2, stderr[-3000:]
  assert "--bert_config_file" in stderr and "two_layers.json" in stderr
  assert "'num_hidden_layers'" in stderr and "Traceback" not in stderr


def test_output_dir_under_a_regular_file_is_a_usage_error(data, tmp_path):
  regular = tmp_path / "results"
  regular.write_text("a file, not a directory")
  status, stderr = helpers.run_script_in_process(
      run_pretraining, common_flags(data, regular / "run", do_train=True, num_train_steps=1))
  assert status == 2, stderr[-3000:]
  assert "--output_dir=%s" % (regular / "run") in stderr
  assert "%s is a regular file" % regular in stderr and "Traceback" not in stderr


def test_nan_loss_under_fp16_says_what_to_change(data, tmp_path):
  nan_dir = tmp_path / "nan"
  nan_dir.mkdir()
  batch = helpers.random_batch(np.random.RandomState(5), 8, SEQ, CONFIG["vocab_size"], PRED)
  batch["masked_lm_weights"][:, 0] = np.nan
  helpers.write_batch_records(nan_dir / "nan.tfrecord", batch)
  proc = run_job(common_flags(data, tmp_path / "out", do_train=True, num_train_steps=3,
                              manual_fp16=True, init_loss_scale=2**15,
                              input_files_dir=nan_dir), check=False, timeout=180)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "the training loss became NaN" in proc.stderr
  assert "--learning_rate (now 0.001 per worker)" in proc.stderr
  assert "--init_loss_scale (now 32768)" in proc.stderr
  assert "no checkpoint was saved" in proc.stderr and "Traceback" not in proc.stderr


def test_threads_per_worker_shares_the_node():
  assert workers_lib.threads_per_worker(0, 1, cores=8) == 0       # TF's default
  assert workers_lib.threads_per_worker(0, 2, cores=8) == 4
  assert workers_lib.threads_per_worker(0, 3, cores=8) == 2
  assert workers_lib.threads_per_worker(0, 16, cores=8) == 1      # at least one
  assert workers_lib.threads_per_worker(3, 2, cores=8) == 3       # the flag wins
