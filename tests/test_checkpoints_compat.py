"""utils/checkpoints/compat.py in-process: which changes between a checkpoint and the model
`decide` refuses (another model, weights only, a foreign checkpoint) or allows with a note and
additions, the optimizer record, `add_variables`, and `check_output_dir` on small checkpoints
written here with a stand-in model_fn.

The same decisions on checkpoints of real runs are in tests/test_checkpoints.py (e2e)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from utils.checkpoints import compat
from utils.checkpoints import contents

_tf1 = tf.compat.v1
CKPT = "/runs/x/model.ckpt-2"
# A training checkpoint's variables: two weights, their moments, the step.
TRAINED = {"bert/w": [3, 4], "cls/b": [4], "bert/w/adam_m": [3, 4], "bert/w/adam_v": [3, 4],
           "cls/b/adam_m": [4], "cls/b/adam_v": [4], "global_step": []}
ACCUMULATION = {"bert/w/accum": [3, 4], "cls/b/accum": [4], "local_step": []}
LOSS_SCALE = {"current_loss_scale": [], "good_steps": [], "skipped_update_count": []}


def _with(base, *extra, without=()):
  shapes = dict(base)
  for more in extra:
    shapes.update(more)
  return {name: shape for name, shape in shapes.items() if name not in without}


# ---------------------------------------------------------------------------------------------
# The decisions

def test_list_some_lists_five_lines_and_counts_the_rest():
  lines = ["line %d" % i for i in range(7)]
  assert compat.list_some(lines) == (
      "line 0\n  line 1\n  line 2\n  line 3\n  line 4\n  ... and 2 more")
  assert compat.list_some(lines[:5]) == "line 0\n  line 1\n  line 2\n  line 3\n  line 4"
  assert compat.list_some([]) == ""


def test_weight_mismatches_name_reshaped_missing_and_extra_weights_only():
  stored = {"bert/a": [2, 3], "bert/b": [4], "cls/c": [5], "bert/a/adam_m": [9],
            "global_step": [], "micro_step": []}
  model = {"bert/a": [2, 4], "bert/b": [4], "bert/d": [7], "bert/a/adam_m": [1]}
  assert compat.weight_mismatches(stored, model) == [
      "bert/a: checkpoint [2, 3], model [2, 4]",
      "bert/d [7]: not in the checkpoint",
      "cls/c [5]: in the checkpoint, not in the model"]
  assert compat.weight_mismatches(stored, stored) == []


def test_another_model_is_refused_with_the_way_out_that_works():
  wider = _with(TRAINED, {"bert/w": [3, 8]})
  decision = compat.decide(CKPT, TRAINED, wider, "lamb", "lamb")
  assert decision.refusal.startswith(
      "--output_dir holds a checkpoint of another model: %s does not match the model of "
      "--bert_config_file (1 difference(s)):\n  bert/w: checkpoint [3, 4], model [3, 8]\n" % CKPT)
  # --init_checkpoint cannot load a weight of another shape: only a fresh directory helps.
  assert "use a fresh --output_dir (--init_checkpoint loads variables of the same shape only" in (
      decision.refusal)
  assert "--init_checkpoint=" not in decision.refusal
  assert decision.refusal.endswith("to resume that run, use the --bert_config_file it was "
                                   "trained with.")
  assert decision.notes == [] and decision.additions == []
  # Missing weights only (a deeper model): the checkpoint's weights can start a fresh run.
  deeper = _with(TRAINED, {"bert/layer_%d" % i: [4] for i in range(7)})
  decision = compat.decide(CKPT, TRAINED, deeper, "lamb")
  assert "(7 difference(s)):\n  bert/layer_0 [4]: not in the checkpoint\n" in decision.refusal
  assert "\n  ... and 2 more\n" in decision.refusal
  assert ("use --init_checkpoint=%s with a fresh --output_dir" % CKPT) in decision.refusal


@pytest.mark.parametrize("checkpoint,model,message", [
    # An exported bert_model.ckpt: weights only.
    (_with(TRAINED, without=["bert/w/adam_m", "bert/w/adam_v", "cls/b/adam_m", "cls/b/adam_v",
                             "global_step"]),
     TRAINED, "%s holds no optimizer moments (bert/w/adam_m ... not in it): it is a weights-only "
              "checkpoint (e.g. an exported bert_model.ckpt), which cannot be resumed. To start "
              "this model from the checkpoint's weights, use --init_checkpoint=%s with a fresh "
              "--output_dir (matching variables are loaded, the others initialised)." % (
                  CKPT, CKPT)),
    # The same, evaluated: no moments needed, but the step is.
    (_with(TRAINED, without=["bert/w/adam_m", "bert/w/adam_v", "cls/b/adam_m", "cls/b/adam_v",
                             "global_step"]),
     {"bert/w": [3, 4], "cls/b": [4], "global_step": []},
     "%s lacks variable(s) the job's graph restores:\n  global_step\nIt is not a training "
     "checkpoint of this job. To start" % CKPT),
    # A variable of the graph that is neither weight, moment nor optimizer state.
    (TRAINED, _with(TRAINED, {"micro_step": []}),
     "%s lacks variable(s) the job's graph restores:\n  micro_step\n" % CKPT),
    # Weights match, a moment does not.
    (_with(TRAINED, {"bert/w/adam_m": [4, 3]}), TRAINED,
     "%s: variable bert/w/adam_m has shape [4, 3] in the checkpoint but [3, 4] in the model. "
     "To start" % CKPT),
    # Trained without the next-sentence loss (no moments for its head), resumed with it.
    (_with(TRAINED, without=["cls/b/adam_m", "cls/b/adam_v"]), TRAINED,
     "%s holds optimizer moments, but not 2 of this job's (cls/b/adam_m ...): its run did not "
     "train those variables (run_pretraining.py's --nonext_sentence_loss" % CKPT),
], ids=["weights only", "weights only, evaluated", "foreign variable", "moment of another shape",
        "moments of some variables"])
def test_checkpoints_that_cannot_be_resumed_are_refused(checkpoint, model, message):
  decision = compat.decide(CKPT, checkpoint, model, "lamb", None)
  assert decision.refusal is not None and decision.refusal.startswith(message)
  assert decision.notes == [] and decision.additions == []


@pytest.mark.parametrize("change", [
    "nothing", "optimizer switched", "same optimizer recorded", "optimizer unknown",
    "not training", "accumulation on", "accumulation off", "loss scaling on",
    "loss scaling off", "accumulation and loss scaling on"])
def test_optimizer_state_changes_continue_with_notes_and_additions(change):
  checkpoint, model, recorded, training = TRAINED, TRAINED, "lamb", "lamb"
  notes, additions = [], []
  if change == "optimizer switched":
    recorded = "adam"
    notes = ["resuming %s (trained with --optimizer_type=adam) with --optimizer_type=lamb: the "
             "moments adam_m / adam_v are the same moving averages for both and are restored "
             "as they are" % CKPT]
  elif change == "optimizer unknown":
    recorded = None
  elif change == "not training":
    recorded, training = "adam", None
  if change in ("accumulation on", "accumulation and loss scaling on"):
    model = _with(model, ACCUMULATION)
    additions += ["bert/w/accum", "cls/b/accum", "local_step"]
    notes.append("accumulation turned on: %s has no gradient accumulators; local_step and 2 "
                 "<weight>/accum are added at their initial values (zero: the first micro-step "
                 "starts a cycle)" % CKPT)
  if change in ("loss scaling on", "accumulation and loss scaling on"):
    model = _with(model, LOSS_SCALE)
    additions += ["current_loss_scale", "good_steps", "skipped_update_count"]
    notes.append("loss scaling turned on: %s has no loss scale; it starts at --init_loss_scale "
                 "as in a fresh run" % CKPT)
  if change == "accumulation off":
    checkpoint = _with(checkpoint, ACCUMULATION)
    notes = ["accumulation turned off: the accumulators of %s (the sums of an update already "
             "applied) are not restored" % CKPT]
  if change == "loss scaling off":
    checkpoint = _with(checkpoint, LOSS_SCALE)
    notes = ["loss scaling turned off: the loss scale of %s is not restored (fp32 training)"
             % CKPT]
  decision = compat.decide(CKPT, checkpoint, model, training, recorded)
  assert decision.refusal is None
  assert decision.notes == notes
  assert sorted(decision.additions) == sorted(additions)


# ---------------------------------------------------------------------------------------------
# The optimizer record and adding variables

def test_the_optimizer_record_round_trips_and_an_unreadable_one_is_unknown(tmp_path):
  assert compat.read_recorded_optimizer(str(tmp_path)) is None
  compat.record_optimizer(str(tmp_path), "adam")
  text = (tmp_path / compat.OPTIMIZER_RECORD).read_text()
  assert compat.OPTIMIZER_RECORD == "optimizer.json"
  assert text.endswith("\n") and json.loads(text) == {"optimizer_type": "adam"}
  assert compat.read_recorded_optimizer(str(tmp_path)) == "adam"
  compat.record_optimizer(str(tmp_path), "lamb")
  assert compat.read_recorded_optimizer(str(tmp_path)) == "lamb"
  for damaged in ("{not json", "[1, 2]\n"):
    (tmp_path / "optimizer.json").write_text(damaged)
    assert compat.read_recorded_optimizer(str(tmp_path)) is None, damaged


def _read_all(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_add_variables_keeps_the_checkpoint_bit_exact_and_leaves_no_temporary(tmp_path):
  rng = np.random.RandomState(3)
  original = {"bert/w": rng.randn(3, 4).astype(np.float32),
              "bert/h": rng.randn(5).astype(np.float16),
              "global_step": np.int64(12)}
  prefix = str(tmp_path / "model.ckpt-12")
  contents.write_checkpoint(prefix, original)
  compat.add_variables(prefix, {"bert/w/accum": np.zeros([3, 4], np.float32),
                                "local_step": np.int32(0)})
  after = _read_all(prefix)
  assert sorted(after) == ["bert/h", "bert/w", "bert/w/accum", "global_step", "local_step"]
  for name, value in original.items():
    assert after[name].dtype == np.asarray(value).dtype, name
    assert after[name].tobytes() == np.asarray(value).tobytes(), name
  assert after["bert/w/accum"].shape == (3, 4) and not after["bert/w/accum"].any()
  assert after["local_step"].dtype == np.int32 and after["local_step"] == 0
  assert sorted(os.listdir(tmp_path)) == ["model.ckpt-12.data-00000-of-00001",
                                          "model.ckpt-12.index"]


# ---------------------------------------------------------------------------------------------
# check_output_dir, with a stand-in model_fn

def _model_fn(calls, width=4, accumulation=False, loss_scale=False):
  """A model_fn creating TRAINED's variables (of `width`), optionally accumulators and a loss
  scale (initial value 1024); records each call's mode in `calls`."""
  def model_fn(features, labels, mode, params):
    del features, labels, params
    calls.append(mode)
    weights = [_tf1.get_variable("bert/w", [3, width], initializer=_tf1.ones_initializer()),
               _tf1.get_variable("cls/b", [width], initializer=_tf1.zeros_initializer())]
    if mode != tf.estimator.ModeKeys.TRAIN:
      return
    suffixes = ["adam_m", "adam_v"] + (["accum"] if accumulation else [])
    for var in weights:
      for suffix in suffixes:
        _tf1.get_variable("%s/%s" % (var.op.name, suffix), var.shape,
                          initializer=_tf1.zeros_initializer(), trainable=False)
    if accumulation:
      _tf1.get_variable("local_step", [], tf.int32, _tf1.zeros_initializer(), trainable=False)
    if loss_scale:
      _tf1.get_variable("current_loss_scale", [], tf.float32, _tf1.constant_initializer(1024.0),
                        trainable=False)
      for name in ("good_steps", "skipped_update_count"):
        _tf1.get_variable(name, [], tf.int32, _tf1.zeros_initializer(), trainable=False)
  return model_fn


def _training_checkpoint(directory):
  """model.ckpt-2 holding TRAINED's variables (random values), named in the checkpoint index."""
  rng = np.random.RandomState(0)
  tensors = {name: rng.randn(*shape).astype(np.float32) for name, shape in TRAINED.items()
             if name != "global_step"}
  tensors["global_step"] = np.int64(2)
  prefix = str(directory / "model.ckpt-2")
  contents.write_checkpoint(prefix, tensors)
  _tf1.train.update_checkpoint_state(str(directory), prefix)
  return prefix, tensors


def _check(directory, model_fn, training=True, optimizer_type="lamb"):
  return compat.check_output_dir(str(directory), model_fn, training, 8, 2, optimizer_type)


def test_check_output_dir_without_a_checkpoint_builds_nothing(tmp_path):
  calls = []
  assert _check(tmp_path, _model_fn(calls)) is None
  assert _check(tmp_path / "missing", _model_fn(calls)) is None
  assert calls == [] and not (tmp_path / "missing").exists()


def test_check_output_dir_refuses_another_model_and_leaves_the_checkpoint(tmp_path):
  prefix, _ = _training_checkpoint(tmp_path)
  before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
  calls = []
  with pytest.raises(compat.CheckpointMismatch) as raised:
    _check(tmp_path, _model_fn(calls, width=6))
  assert isinstance(raised.value, ValueError)
  assert str(raised.value).startswith(
      "--output_dir holds a checkpoint of another model: %s does not match the model of "
      "--bert_config_file (2 difference(s)):\n  bert/w: checkpoint [3, 4], model [3, 6]\n  "
      "cls/b: checkpoint [4], model [6]\n" % prefix)
  assert calls == [tf.estimator.ModeKeys.TRAIN]
  assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before


def test_check_output_dir_adds_the_missing_optimizer_state_at_its_initial_values(
    tmp_path, caplog):
  caplog.set_level("INFO", logger="absl")
  prefix, tensors = _training_checkpoint(tmp_path)
  compat.record_optimizer(str(tmp_path), "adam")
  calls = []
  with tf.Graph().as_default() as graph:
    assert _check(tmp_path, _model_fn(calls, accumulation=True, loss_scale=True)) == prefix
    assert graph.get_operations() == []  # built in a throw-away graph, not the caller's
  assert calls == [tf.estimator.ModeKeys.TRAIN]
  after = _read_all(prefix)
  assert sorted(after) == sorted(list(TRAINED) + list(ACCUMULATION) + list(LOSS_SCALE))
  for name, value in tensors.items():
    assert after[name].tobytes() == np.asarray(value).tobytes(), name
  assert not after["bert/w/accum"].any() and after["bert/w/accum"].shape == (3, 4)
  assert not after["cls/b/accum"].any() and after["local_step"] == 0
  assert after["current_loss_scale"] == 1024.0 and after["good_steps"] == 0
  assert after["skipped_update_count"] == 0
  logged = "\n".join(record.getMessage() for record in caplog.records)
  assert "(trained with --optimizer_type=adam) with --optimizer_type=lamb" in logged
  assert "accumulation turned on" in logged and "loss scaling turned on" in logged
  assert "added 6 variable(s) to %s; its other tensors are unchanged" % prefix in logged


def test_check_output_dir_for_evaluation_needs_the_weights_and_step_only(tmp_path, caplog):
  caplog.set_level("INFO", logger="absl")
  prefix, tensors = _training_checkpoint(tmp_path)
  compat.record_optimizer(str(tmp_path), "adam")
  before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
  calls = []
  assert _check(tmp_path, _model_fn(calls), training=False) == prefix
  assert calls == [tf.estimator.ModeKeys.EVAL]
  # No optimizer switch is noted (evaluation does not train) and nothing is written.
  assert "optimizer_type" not in "\n".join(record.getMessage() for record in caplog.records)
  assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before
