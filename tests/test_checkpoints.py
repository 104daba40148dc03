"""Release export and the check of --output_dir's checkpoint against the model of the flags.

Two small training runs give real checkpoints: fp32 AdamWeightDecay without accumulation, and
fp16 LAMB with accumulation 2 (every kind of optimizer state). The export is compared with the
training checkpoint and loaded by the original release (its modeling graph and its
run_classifier.py) and by our run_pretraining.py; the resume decisions are checked in process on
those checkpoints, and end to end for a refusal and for a continued run.
"""

import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

import modeling
import optimization
import run_pretraining
from tests import helpers
from utils.checkpoints import compat as checkpoint_compat
from utils.checkpoints import contents as ckpt

pytestmark = pytest.mark.e2e

_tf1 = tf.compat.v1
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "run_pretraining.py")
SEQ, PRED = 32, 5
CONFIG = helpers.TINY_CONFIG
FP32_ADAM = dict(optimizer_type="adam")
FP16_LAMB_ACCUMULATION = dict(optimizer_type="lamb", manual_fp16=True, num_accumulation_steps=2)


# This module's processes: the suite's one way to run a program and check its exit.
run = helpers.run_python


write_config = helpers.write_bert_config


def job_flags(config, train_dir, out, **overrides):
  values = dict(bert_config_file=config, input_files_dir=train_dir, output_dir=out,
                max_seq_length=SEQ, max_predictions_per_seq=PRED, train_batch_size=4,
                learning_rate=1e-3, num_warmup_steps=1, save_checkpoints_steps=2, do_train=True,
                num_train_steps=2)
  values.update(overrides)
  return ["--%s=%s" % (k, v) for k, v in values.items()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp("checkpoints")
  train_dir = root / "train"
  train_dir.mkdir()
  helpers.write_batch_records(train_dir / "part-0.tfrecord", helpers.random_batch(
      np.random.RandomState(0), 16, SEQ, CONFIG["vocab_size"], PRED))
  config = write_config(root / "bert_config.json")
  result = {"root": root, "train_dir": str(train_dir), "config": config}
  for name, flags in (("fp32_adam", FP32_ADAM), ("fp16_lamb_acc", FP16_LAMB_ACCUMULATION)):
    out = root / name
    run([SCRIPT] + job_flags(config, train_dir, out, **flags))
    result[name] = out
  return result


def copy_run(runs, name, tmp_path):
  """A copy of a trained output directory that the test may change."""
  return shutil.copytree(str(runs[name]), str(tmp_path / name))


def read_all(checkpoint):
  return ckpt.read_tensors(checkpoint, ckpt.checkpoint_shapes(checkpoint))


def file_sizes(prefix):
  return sum(os.path.getsize(os.path.join(os.path.dirname(prefix), name))
             for name in os.listdir(os.path.dirname(prefix))
             if name.startswith(os.path.basename(prefix) + "."))


# ---------------------------------------------------------------------------------------------
# Export

def test_saved_state_is_what_the_roles_say(runs):
  names = set(ckpt.checkpoint_shapes(str(runs["fp16_lamb_acc"] / "model.ckpt-2")))
  weights = {n for n in names if n.startswith(("bert/", "cls/predictions/", "cls/seq_relationship/"))
             and not re.search(r"/(adam_m|adam_v|accum)$", n)}
  assert {n for n in names if ckpt.variable_role(n) == ckpt.ROLE_WEIGHT} == weights
  assert {n for n in names if ckpt.variable_role(n) == ckpt.ROLE_MOMENT} == (
      {w + "/adam_m" for w in weights} | {w + "/adam_v" for w in weights})
  assert {n for n in names if ckpt.variable_role(n) == ckpt.ROLE_ACCUMULATION} == (
      {w + "/accum" for w in weights} | {"local_step"})
  assert {n for n in names if ckpt.variable_role(n) == ckpt.ROLE_LOSS_SCALE} == {
      "current_loss_scale", "good_steps", "skipped_update_count"}
  assert {n for n in names if ckpt.variable_role(n) == ckpt.ROLE_STEP} == {"global_step"}
  assert len(names) == 4 * len(weights) + 5


@pytest.fixture(scope="module")
def bundle(runs):
  vocab = runs["root"] / "vocab.txt"
  words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  words += ["w%d" % i for i in range(CONFIG["vocab_size"] - len(words))]
  vocab.write_text("\n".join(words) + "\n")
  out = runs["root"] / "bundle"
  proc = run(["-m", "utils.export_release", "--checkpoint=%s" % runs["fp16_lamb_acc"],
              "--bert_config_file=%s" % runs["config"], "--output_dir=%s" % out,
              "--vocab_file=%s" % vocab])
  return {"dir": out, "prefix": str(out / "bert_model.ckpt"), "vocab": vocab,
          "stdout": proc.stdout}


def test_export_holds_the_fp32_weights_bit_exactly_under_the_release_names(runs, bundle, tmp_path):
  source = str(runs["fp16_lamb_acc"] / "model.ckpt-2")
  trained = read_all(source)
  exported = read_all(bundle["prefix"])
  # The release's own model, initialised from the bundle by the release's code: the same names
  # (every one of its variables is found) and the same values, bit for bit.
  release_values = tmp_path / "release.npz"
  run(["-m", "tests.reference.original_bert", "load", "--config",
       str(bundle["dir"] / "bert_config.json"), "--checkpoint", bundle["prefix"],
       "--out", str(release_values)])
  release = dict(np.load(release_values))
  assert sorted(exported) == sorted(release)
  for name, value in exported.items():
    assert value.dtype == np.float32, name
    assert value.tobytes() == trained[name].tobytes(), name
    assert release[name].tobytes() == trained[name].tobytes(), name
  # Sizes: 4 bytes per weight (+ the index); the training checkpoint also holds two moments and an
  # accumulator per weight.
  params = sum(value.size for value in exported.values())
  data = os.path.getsize(bundle["prefix"] + ".data-00000-of-00001")
  assert data == 4 * params
  before, after = file_sizes(source), file_sizes(bundle["prefix"])
  assert 3.5 < before / after < 4.1
  printed = re.search(r"size: (\S+) (\S+) -> (\S+) (\S+)", bundle["stdout"]).groups()
  assert printed == tuple(ckpt.describe_size(before).split() + ckpt.describe_size(after).split())
  assert json.loads((bundle["dir"] / "bert_config.json").read_text()) == CONFIG
  assert (bundle["dir"] / "vocab.txt").read_text() == bundle["vocab"].read_text()


def test_export_refuses_a_config_that_does_not_match(runs, tmp_path):
  wide = write_config(tmp_path / "wide.json", hidden_size=64)
  proc = run(["-m", "utils.export_release", "--checkpoint=%s" % runs["fp32_adam"],
              "--bert_config_file=%s" % wide, "--output_dir=%s" % (tmp_path / "b")], check=False)
  assert proc.returncode == 2
  assert "bert/embeddings/word_embeddings: checkpoint [120, 32], model [120, 64]" in proc.stderr
  assert "Traceback" not in proc.stderr
  assert not (tmp_path / "b" / "bert_model.ckpt.index").exists()


def test_release_run_classifier_evaluates_from_the_bundle(bundle, tmp_path):
  data_dir = tmp_path / "mrpc"
  data_dir.mkdir()
  rng = np.random.RandomState(5)
  rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
  for i in range(10):
    sentence = lambda: " ".join("w%d" % k for k in rng.randint(0, 100, size=rng.randint(3, 9)))
    rows.append("%d\t%d\t%d\t%s\t%s" % (i % 2, 2 * i, 2 * i + 1, sentence(), sentence()))
  (data_dir / "dev.tsv").write_text("\n".join(rows) + "\n")
  out = tmp_path / "classifier"
  proc = run(["-m", "tests.reference.original_bert", "run_classifier", "--", "--task_name=MRPC",
              "--do_eval=true", "--data_dir=%s" % data_dir,
              "--vocab_file=%s" % (bundle["dir"] / "vocab.txt"),
              "--bert_config_file=%s" % (bundle["dir"] / "bert_config.json"),
              "--init_checkpoint=%s" % bundle["prefix"], "--max_seq_length=%d" % SEQ,
              "--eval_batch_size=4", "--output_dir=%s" % out, "--use_tpu=false"])
  # Every encoder variable came from the bundle (the release logs each one it loads).
  assert "name = bert/embeddings/word_embeddings:0, shape = (120, 32), *INIT_FROM_CKPT*" in (
      proc.stderr)
  assert re.search(r"name = bert/encoder/layer_1/output/dense/kernel:0, .*INIT_FROM_CKPT",
                   proc.stderr)
  results = helpers.read_eval_results(out / "eval_results.txt")
  assert 0.0 <= results["eval_accuracy"] <= 1.0
  assert np.isfinite(results["eval_loss"]) and results["eval_loss"] > 0


def test_run_pretraining_evaluates_the_bundle_as_the_training_checkpoint(runs, bundle, tmp_path):
  eval_dir = tmp_path / "eval"
  eval_dir.mkdir()
  helpers.write_batch_records(eval_dir / "eval.tfrecord", helpers.random_batch(
      np.random.RandomState(9), 8, SEQ, CONFIG["vocab_size"], PRED))
  common = ["--bert_config_file=%s" % runs["config"], "--eval_files_dir=%s" % eval_dir,
            "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PRED, "--do_eval",
            "--eval_batch_size=4"]
  trained = copy_run(runs, "fp16_lamb_acc", tmp_path)
  run([SCRIPT, "--output_dir=%s" % trained] + common)
  run([SCRIPT, "--output_dir=%s" % (tmp_path / "fresh"),
       "--init_checkpoint=%s" % bundle["prefix"]] + common)
  from_training = helpers.read_eval_results(os.path.join(trained, "eval_results.txt"))
  from_bundle = helpers.read_eval_results(tmp_path / "fresh" / "eval_results.txt")
  for key in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
              "next_sentence_loss"):
    np.testing.assert_allclose(from_bundle[key], from_training[key], rtol=1e-6, err_msg=key)
  assert from_training["global_step"] == 2 and from_bundle["global_step"] == 0


# ---------------------------------------------------------------------------------------------
# Resuming: the decisions, on the real checkpoints

def model_fn_for(config_path, optimizer_type="lamb", manual_fp16=False, num_accumulation_steps=1):
  """The job's model_fn for the model of `config_path` with these flag values (the others fixed)."""
  config = modeling.BertConfig.from_json_file(config_path)
  return run_pretraining.model_fn_builder(
      config, None, optimization.Schedule(optimizer_type, 1e-3, 10, 1),
      optimization.Precision(manual_fp16=manual_fp16, init_loss_scale=2**10),
      optimization.Accumulation(num_accumulation_steps))


def check(directory, config_path, training=True, **overrides):
  """check_output_dir with a model_fn built from `config_path` and flag values `overrides`."""
  model_fn = model_fn_for(config_path, **overrides)
  return checkpoint_compat.check_output_dir(
      str(directory), model_fn, training, SEQ, PRED, overrides.get("optimizer_type", "lamb"))


def logged(caplog):
  return "\n".join(record.getMessage() for record in caplog.records)


def test_checkpoint_of_a_wider_model_is_refused_with_both_shapes(runs, tmp_path):
  wide = write_config(tmp_path / "wide.json", hidden_size=64)
  with pytest.raises(checkpoint_compat.CheckpointMismatch) as error:
    check(runs["fp32_adam"], wide, **FP32_ADAM)
  message = str(error.value)
  assert "holds a checkpoint of another model" in message
  assert "bert/embeddings/word_embeddings: checkpoint [120, 32], model [120, 64]" in message
  assert "use a fresh --output_dir" in message
  assert "use the --bert_config_file it was trained with" in message


def test_checkpoint_with_fewer_or_more_layers_is_refused(runs, tmp_path):
  deeper = write_config(tmp_path / "deeper.json", num_hidden_layers=3)
  with pytest.raises(checkpoint_compat.CheckpointMismatch) as error:
    check(runs["fp32_adam"], deeper, **FP32_ADAM)
  message = str(error.value)
  assert "bert/encoder/layer_2/attention/self/query/kernel [32, 32]: not in the checkpoint" in (
      message)
  assert "--init_checkpoint=%s" % (runs["fp32_adam"] / "model.ckpt-2") in message
  shallower = write_config(tmp_path / "shallower.json", num_hidden_layers=1)
  with pytest.raises(checkpoint_compat.CheckpointMismatch) as error:
    check(runs["fp32_adam"], shallower, **FP32_ADAM)
  # A layer has 16 variables: query, key, value, two dense layers and the intermediate one
  # (kernel and bias each), two layer norms (beta and gamma).
  assert "(16 difference(s))" in str(error.value)
  assert re.search(r"bert/encoder/layer_1/\S+ \[\d+(, \d+)?\]: in the checkpoint, not in the "
                   r"model", str(error.value))


def test_weights_only_checkpoint_is_refused(runs, bundle, tmp_path):
  directory = tmp_path / "exported"
  shutil.copytree(str(bundle["dir"]), str(directory))
  _tf1.train.update_checkpoint_state(str(directory), str(directory / "bert_model.ckpt"))
  with pytest.raises(checkpoint_compat.CheckpointMismatch) as error:
    check(directory, runs["config"])
  assert "holds no optimizer moments" in str(error.value)
  assert "weights-only checkpoint" in str(error.value)
  # Evaluation needs the weights only (and the step): refused for want of global_step, not moments.
  with pytest.raises(checkpoint_compat.CheckpointMismatch) as error:
    check(directory, runs["config"], training=False)
  assert "global_step" in str(error.value)


def test_same_flags_resume_silently(runs, caplog):
  caplog.set_level("INFO", logger="absl")
  assert check(runs["fp16_lamb_acc"], runs["config"], **FP16_LAMB_ACCUMULATION).endswith(
      "model.ckpt-2")
  assert check(runs["fp32_adam"], runs["config"], training=False) is not None
  assert "turned" not in logged(caplog) and "resuming" not in logged(caplog)


def test_optimizer_switch_continues_with_a_log_line(runs, tmp_path, caplog):
  caplog.set_level("INFO", logger="absl")
  directory = copy_run(runs, "fp32_adam", tmp_path)
  assert json.loads((runs["fp32_adam"] / "optimizer.json").read_text()) == {
      "optimizer_type": "adam"}
  check(directory, runs["config"], optimizer_type="lamb")
  assert re.search(r"resuming \S+model.ckpt-2 \(trained with --optimizer_type=adam\) with "
                   r"--optimizer_type=lamb", logged(caplog))


def test_accumulation_and_loss_scale_off_continue_with_log_lines(runs, caplog):
  caplog.set_level("INFO", logger="absl")
  before = read_all(str(runs["fp16_lamb_acc"] / "model.ckpt-2"))
  check(runs["fp16_lamb_acc"], runs["config"], optimizer_type="lamb")
  text = logged(caplog)
  assert "accumulation turned off" in text and "are not restored" in text
  assert "loss scaling turned off" in text
  after = read_all(str(runs["fp16_lamb_acc"] / "model.ckpt-2"))
  assert sorted(after) == sorted(before)  # nothing written


def test_accumulation_and_loss_scale_on_add_their_initial_state(runs, tmp_path, caplog):
  caplog.set_level("INFO", logger="absl")
  directory = copy_run(runs, "fp32_adam", tmp_path)
  checkpoint = os.path.join(directory, "model.ckpt-2")
  before = read_all(checkpoint)
  check(directory, runs["config"], **dict(FP16_LAMB_ACCUMULATION, optimizer_type="adam"))
  text = logged(caplog)
  assert "accumulation turned on" in text and "local_step and 46 <weight>/accum" in text
  assert "loss scaling turned on" in text
  after = read_all(checkpoint)
  weights = [name for name in before if ckpt.variable_role(name) == ckpt.ROLE_WEIGHT]
  assert set(after) == set(before) | {w + "/accum" for w in weights} | {
      "local_step", "current_loss_scale", "good_steps", "skipped_update_count"}
  for name, value in before.items():
    assert after[name].tobytes() == value.tobytes() and after[name].dtype == value.dtype, name
  for name in weights:
    assert not after[name + "/accum"].any() and after[name + "/accum"].shape == before[name].shape
  assert after["local_step"] == 0 and after["good_steps"] == 0
  assert after["skipped_update_count"] == 0
  assert after["current_loss_scale"] == 2.0**10  # the init_loss_scale given to the model_fn


# ---------------------------------------------------------------------------------------------
# End to end

def test_issue_scenario_exits_2_before_the_graph(runs, tmp_path):
  wide = write_config(tmp_path / "wide.json", hidden_size=64)
  directory = copy_run(runs, "fp32_adam", tmp_path)
  proc = run([SCRIPT] + job_flags(wide, runs["train_dir"], directory, num_train_steps=4),
             check=False)
  assert proc.returncode == 2
  assert "run_pretraining.py: error: --output_dir holds a checkpoint of another model" in (
      proc.stderr)
  assert "checkpoint [120, 32], model [120, 64]" in proc.stderr
  assert "Traceback" not in proc.stderr and "Running training" not in proc.stderr


def test_resume_with_accumulation_fp16_and_lamb_continues(runs, tmp_path):
  directory = copy_run(runs, "fp32_adam", tmp_path)
  before = read_all(os.path.join(directory, "model.ckpt-2"))
  proc = run([SCRIPT] + job_flags(runs["config"], runs["train_dir"], directory,
                                  num_train_steps=4, init_loss_scale=2**10,
                                  **FP16_LAMB_ACCUMULATION))
  for line in ("with --optimizer_type=lamb", "accumulation turned on", "loss scaling turned on",
               "Running training from step 2 to 4"):
    assert line in proc.stderr, line
  after = read_all(os.path.join(directory, "model.ckpt-4"))
  assert after["global_step"] == 4
  assert after["local_step"] == 0 and after["current_loss_scale"] > 0
  changed = [n for n in before if ckpt.variable_role(n) == ckpt.ROLE_WEIGHT
             and not np.array_equal(after[n], before[n])]
  assert changed  # trained on from the restored weights
