"""Packed sequences (several pretraining instances in one row, docs/DATA.md): the encoder and the
pretraining heads of `modeling.py` and `utils/model/pretraining.py` must give every sequence of a
packed row exactly what it gets alone in an unpacked row. Checked against unpacked rows of the same
sequences (outputs, losses, every gradient, metrics), against float64 numpy run on each sequence
alone, and by changing one sequence of a row; negative controls show the comparison can fail."""

import contextlib
import inspect

import numpy as np
import pytest
import tensorflow as tf

import modeling
from tests import helpers
from tests import numpy_bert
from utils.core import graph_names
from utils.data import input_pipeline
from utils.data import record_layout
from utils.model import pretraining

_tf1 = tf.compat.v1

# Dropout probabilities 0: the training graph (is_training=True) is deterministic.
CONFIG = helpers.tiny_config(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, max_position_embeddings=32,
                             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
CLS, SEP = 2, 3
PACKED_LENGTH, UNPACKED_LENGTH = 32, 16
MAX_SEQUENCES = 3  # K
MAX_PREDICTIONS = 4  # W of the unpacked records
PACKED_PREDICTIONS = MAX_PREDICTIONS + MAX_SEQUENCES  # P
# The rows: (length, predictions) of each sequence. The second row has an empty third slot.
ROWS = [[(9, 2), (12, 3), (7, 1)], [(14, 3), (10, 2)], [(5, 1), (11, 2), (13, 3)]]


def _layout(batch):
  """The `record_layout.Layout` of a batch built here (packed rows are PACKED_LENGTH long)."""
  if batch["input_ids"].shape[1] == PACKED_LENGTH:
    return record_layout.Layout(True, PACKED_LENGTH, PACKED_PREDICTIONS, MAX_SEQUENCES)
  return record_layout.unpacked(UNPACKED_LENGTH, MAX_PREDICTIONS)


def _sequence(rng, length, num_predictions):
  """One pretraining instance, [CLS] A [SEP] B [SEP], as numpy arrays of its own length."""
  ids = rng.randint(5, CONFIG.vocab_size, size=length)
  first_sep = rng.randint(2, length - 2)
  ids[[0, first_sep, length - 1]] = [CLS, SEP, SEP]
  segments = (np.arange(length) > first_sep).astype(np.int64)
  ordinary = [i for i in range(1, length - 1) if i != first_sep]
  positions = np.sort(rng.choice(ordinary, num_predictions, replace=False))
  return {"ids": ids, "segments": segments, "positions": positions,
          "mlm_ids": rng.randint(5, CONFIG.vocab_size, size=num_predictions),
          "label": rng.randint(0, 2)}


def _rows_of_sequences(seed):
  """ROWS filled with random sequences: list (rows) of lists of `_sequence` dicts."""
  rng = np.random.RandomState(seed)
  return [[_sequence(rng, length, count) for length, count in row] for row in ROWS]


def _packed_batch(rows):
  """The rows as a batch of packed features (PACKING.md's table), decoded dtypes."""
  b, s, p, k = len(rows), PACKED_LENGTH, PACKED_PREDICTIONS, MAX_SEQUENCES
  out = {name: np.zeros((b, s), np.int32)
         for name in ("input_ids", "input_mask", "segment_ids", "positions")}
  out.update({name: np.zeros((b, p), np.int32)
              for name in ("masked_lm_positions", "masked_lm_ids")})
  out.update({name: np.zeros((b, k), np.int32)
              for name in ("next_sentence_positions", "next_sentence_labels")})
  out["masked_lm_weights"] = np.zeros((b, p), np.float32)
  out["next_sentence_weights"] = np.zeros((b, k), np.float32)
  for r, row in enumerate(rows):
    offset = slot = 0
    for number, seq in enumerate(row, start=1):
      tokens = slice(offset, offset + len(seq["ids"]))
      out["input_ids"][r, tokens] = seq["ids"]
      out["input_mask"][r, tokens] = number
      out["segment_ids"][r, tokens] = seq["segments"]
      out["positions"][r, tokens] = np.arange(len(seq["ids"]))
      predictions = slice(slot, slot + len(seq["positions"]))
      out["masked_lm_positions"][r, predictions] = offset + seq["positions"]
      out["masked_lm_ids"][r, predictions] = seq["mlm_ids"]
      out["masked_lm_weights"][r, predictions] = number
      out["next_sentence_positions"][r, number - 1] = offset
      out["next_sentence_labels"][r, number - 1] = seq["label"]
      out["next_sentence_weights"][r, number - 1] = 1.0
      offset, slot = offset + len(seq["ids"]), slot + len(seq["positions"])
    assert offset <= s and slot <= p
  return out


def _unpacked_batch(rows):
  """The same sequences, one padded unpacked row each (rows in order), decoded dtypes."""
  sequences = [seq for row in rows for seq in row]
  b, s, w = len(sequences), UNPACKED_LENGTH, MAX_PREDICTIONS
  out = {name: np.zeros((b, s), np.int32) for name in ("input_ids", "input_mask", "segment_ids")}
  out.update({name: np.zeros((b, w), np.int32)
              for name in ("masked_lm_positions", "masked_lm_ids")})
  out["masked_lm_weights"] = np.zeros((b, w), np.float32)
  out["next_sentence_labels"] = np.zeros((b, 1), np.int32)
  for i, seq in enumerate(sequences):
    n, m = len(seq["ids"]), len(seq["positions"])
    out["input_ids"][i, :n] = seq["ids"]
    out["input_mask"][i, :n] = 1
    out["segment_ids"][i, :n] = seq["segments"]
    out["masked_lm_positions"][i, :m] = seq["positions"]
    out["masked_lm_ids"][i, :m] = seq["mlm_ids"]
    out["masked_lm_weights"][i, :m] = 1.0
    out["next_sentence_labels"][i, 0] = seq["label"]
  return out


def _real(batch, name):
  """Boolean mask over the flattened prediction ("mlm") or sequence ("nsp") slots of a batch."""
  if name == "mlm":
    return batch["masked_lm_weights"].reshape(-1) > 0
  if "next_sentence_weights" in batch:
    return batch["next_sentence_weights"].reshape(-1) > 0
  return np.ones(len(batch["input_ids"]), bool)


@pytest.mark.parametrize("packed", [True, False])
def test_the_batches_built_here_have_the_input_pipelines_features(packed):
  rows = _rows_of_sequences(seed=0)
  batch = _packed_batch(rows) if packed else _unpacked_batch(rows)
  spec = input_pipeline.pretraining_feature_spec(
      PACKED_LENGTH if packed else UNPACKED_LENGTH,
      PACKED_PREDICTIONS if packed else MAX_PREDICTIONS, MAX_SEQUENCES if packed else 0)
  assert set(batch) == set(spec)
  for name, feature in spec.items():
    assert batch[name].shape[1:] == tuple(feature.shape), name
    assert (batch[name].dtype.kind == "f") == feature.dtype.is_floating, name


@contextlib.contextmanager
def _encoder_overridden(**overrides):
  """Within: every `modeling.BertModel` is built with `overrides` (values or functions of the
  bound arguments) in place of its arguments: the negative controls break one part of packing."""
  original = modeling.BertModel
  if not overrides:
    yield
    return
  signature = inspect.signature(original.__init__)

  def build(*args, **kwargs):
    """modeling.BertModel(*args, **kwargs) with `overrides` applied; returns the model."""
    bound = signature.bind(None, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    del arguments["self"]
    for name, value in overrides.items():
      arguments[name] = value(arguments) if callable(value) else value
    return original(**arguments)

  modeling.BertModel = build
  try:
    yield
  finally:
    modeling.BertModel = original


def _load(sess, weights):
  """Initialises the graph's variables and loads `weights` (name -> value) into the trainable
  ones, which must be exactly the names of `weights`."""
  sess.run(_tf1.global_variables_initializer())
  variables = _tf1.trainable_variables()
  assert {v.op.name for v in variables} == set(weights)
  for var in variables:
    var.load(weights[var.op.name], sess)


def _run(batch, weights, compute_type=tf.float32, gradients=False, **overrides):
  """build_pretraining_model on `batch` (is_training=True, dropout 0) in a graph of its own with
  `weights` (None: random ones, returned under "weights"), the encoder built with `overrides`.

  Returns:
    dict of numpy values: mlm_log_probs [rows*predictions, V], nsp_log_probs [rows*slots, 2],
    mlm_loss, nsp_loss, total_loss, sequence [rows, seq, H], pooled [rows*slots, H] and, with
    `gradients`, "gradients": name -> d total_loss / d variable for every trainable variable.
  """
  with tf.Graph().as_default(), _encoder_overridden(**overrides):
    built = pretraining.build_pretraining_model(CONFIG, helpers.constant_features(batch),
                                                is_training=True, compute_type=compute_type,
                                                layout=_layout(batch))
    fetches = {name: built[name] for name in ("mlm_log_probs", "nsp_log_probs", "mlm_loss",
                                              "nsp_loss", "total_loss")}
    fetches["sequence"] = tf.cast(built["model"].get_sequence_output(), tf.float32)
    fetches["pooled"] = tf.cast(built["model"].get_pooled_output(), tf.float32)
    variables = _tf1.trainable_variables()
    if gradients:
      grads = tf.gradients(built["total_loss"], variables)
      fetches["gradients"] = {v.op.name: tf.convert_to_tensor(g)
                              for v, g in zip(variables, grads)}
    with _tf1.Session() as sess:
      if weights is None:
        sess.run(_tf1.global_variables_initializer())
        weights = helpers.randomize_variables(sess, variables, np.random.RandomState(7))
      _load(sess, weights)
      out = sess.run(fetches)
  out["weights"] = weights
  return out


def _max_difference(packed_batch, packed, unpacked_batch, unpacked):
  """The largest absolute difference between a packed run and an unpacked run of the same
  sequences: MLM log-probs of each real prediction, NSP log-probs of each real sequence, the two
  losses. A float."""
  differences = [np.abs(packed["mlm_loss"] - unpacked["mlm_loss"]),
                 np.abs(packed["nsp_loss"] - unpacked["nsp_loss"])]
  for name, key in (("mlm", "mlm_log_probs"), ("nsp", "nsp_log_probs")):
    ours = packed[key][_real(packed_batch, name)]
    theirs = unpacked[key][_real(unpacked_batch, name)]
    assert ours.shape == theirs.shape
    differences.append(np.abs(ours - theirs).max())
  return float(max(differences))


def _numpy_alone(weights, rows):
  """float64 numpy on each sequence alone (batch 1, no padding), in the order of the rows.

  Returns:
    dict: mlm_log_probs [predictions, V], nsp_log_probs [sequences, 2], mlm_loss (mean over the
    predictions), nsp_loss (mean over the sequences).
  """
  mlm, nsp, mlm_losses, nsp_losses = [], [], [], []
  for seq in (seq for row in rows for seq in row):
    _, layers, pooled = numpy_bert.encoder(
        weights, CONFIG.num_hidden_layers, CONFIG.num_attention_heads, seq["ids"][None],
        np.ones((1, len(seq["ids"]))), seq["segments"][None])
    out = numpy_bert.pretraining_outputs(
        weights, layers[-1], pooled, seq["positions"][None], seq["mlm_ids"][None],
        np.ones((1, len(seq["positions"]))), [[seq["label"]]])
    mlm.append(out["mlm_log_probs"])
    nsp.append(out["nsp_log_probs"])
    mlm_losses.extend(out["mlm_per_example"])
    nsp_losses.extend(out["nsp_per_example"])
  return {"mlm_log_probs": np.concatenate(mlm), "nsp_log_probs": np.concatenate(nsp),
          "mlm_loss": np.mean(mlm_losses), "nsp_loss": np.mean(nsp_losses)}


@pytest.fixture(scope="module")
def fp32_runs():
  """The packed and unpacked batches of the same sequences and their fp32 runs (with gradients)
  on the same random weights."""
  rows = _rows_of_sequences(seed=1)
  batches = {"packed": _packed_batch(rows), "unpacked": _unpacked_batch(rows)}
  unpacked = _run(batches["unpacked"], None, gradients=True)
  packed = _run(batches["packed"], unpacked["weights"], gradients=True)
  return {"rows": rows, "batches": batches, "weights": unpacked["weights"],
          "packed": packed, "unpacked": unpacked}


def test_packed_rows_give_each_sequence_its_unpacked_outputs_losses_and_gradients(fp32_runs):
  batches, packed, unpacked = fp32_runs["batches"], fp32_runs["packed"], fp32_runs["unpacked"]
  assert _max_difference(batches["packed"], packed, batches["unpacked"], unpacked) < 1e-5
  # The sequence output at each real token, and the pooled output of each real sequence.
  np.testing.assert_allclose(packed["sequence"][batches["packed"]["input_mask"] > 0],
                             unpacked["sequence"][batches["unpacked"]["input_mask"] > 0],
                             atol=1e-5)
  np.testing.assert_allclose(packed["pooled"][_real(batches["packed"], "nsp")],
                             unpacked["pooled"], atol=1e-5)
  np.testing.assert_allclose(packed["total_loss"], unpacked["total_loss"], rtol=1e-5)
  assert set(packed["gradients"]) == set(unpacked["gradients"]) == set(fp32_runs["weights"])
  for name, gradient in unpacked["gradients"].items():
    # Every variable takes part in the loss, but for the key biases: a bias added to every key
    # shifts all of a query's scores alike, which the softmax ignores (their gradient is rounding).
    if not name.endswith("key/bias"):
      assert np.abs(gradient).max() > 1e-2, name
    np.testing.assert_allclose(packed["gradients"][name], gradient, rtol=0, atol=1e-5,
                               err_msg=name)


def test_packed_rows_equal_numpy_on_each_sequence_alone(fp32_runs):
  batches, packed = fp32_runs["batches"], fp32_runs["packed"]
  expected = _numpy_alone(fp32_runs["weights"], fp32_runs["rows"])
  np.testing.assert_allclose(packed["mlm_log_probs"][_real(batches["packed"], "mlm")],
                             expected["mlm_log_probs"], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(packed["nsp_log_probs"][_real(batches["packed"], "nsp")],
                             expected["nsp_log_probs"], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(packed["mlm_loss"], expected["mlm_loss"], rtol=1e-5)
  np.testing.assert_allclose(packed["nsp_loss"], expected["nsp_loss"], rtol=1e-5)


def _changed_copy(rows, row, slot, seed):
  """`rows` with sequence `slot` of `row` replaced by new tokens, segments and labels of the same
  length and prediction positions."""
  changed = [[dict(seq) for seq in r] for r in rows]
  old = changed[row][slot]
  new = _sequence(np.random.RandomState(seed), len(old["ids"]), len(old["positions"]))
  changed[row][slot] = dict(new, positions=old["positions"], label=1 - old["label"])
  return changed


@pytest.mark.parametrize("slot", [0, 1, 2])
def test_changing_one_sequence_leaves_the_others_in_its_row_unchanged(fp32_runs, slot):
  rows, weights = fp32_runs["rows"], fp32_runs["weights"]
  batch, before = fp32_runs["batches"]["packed"], fp32_runs["packed"]
  changed = _packed_batch(_changed_copy(rows, 0, slot, seed=100 + slot))
  after = _run(changed, weights)
  number = slot + 1
  row_of_token = np.arange(len(batch["input_ids"]))[:, None]
  row_of_prediction = row_of_token.repeat(PACKED_PREDICTIONS, axis=1).reshape(-1)
  others = {"token": (batch["input_mask"] > 0) & ((row_of_token != 0)
                                                  | (batch["input_mask"] != number)),
            "mlm": _real(batch, "mlm") & ((row_of_prediction != 0)
                                          | (batch["masked_lm_weights"].reshape(-1) != number)),
            "nsp": _real(batch, "nsp") & (np.arange(batch["next_sentence_weights"].size) != slot)}
  pairs = [("sequence", "token"), ("mlm_log_probs", "mlm"), ("nsp_log_probs", "nsp"),
           ("pooled", "nsp")]
  for key, which in pairs:
    np.testing.assert_allclose(after[key][others[which]], before[key][others[which]],
                               rtol=0, atol=1e-6, err_msg=key)
  # The changed sequence itself did change (the test would see a leak).
  changed_tokens = (batch["input_mask"] == number) & (row_of_token == 0)
  assert np.abs(after["sequence"][changed_tokens] - before["sequence"][changed_tokens]).min() > 0
  assert np.abs(after["pooled"][slot] - before["pooled"][slot]).max() > 1e-3


def _without_block_mask(arguments):
  """input_mask as the release's 1 / 0 mask: every token of a row sees every real token."""
  return tf.minimum(arguments["input_mask"], 1)


@pytest.mark.parametrize("overrides", [
    dict(packed_sequences=False, input_mask=_without_block_mask),
    dict(position_ids=None),
], ids=["no_block_mask", "no_restarting_positions"])
def test_comparison_fails_with_a_part_of_packing_switched_off(fp32_runs, overrides):
  batches, unpacked = fp32_runs["batches"], fp32_runs["unpacked"]
  broken = _run(batches["packed"], fp32_runs["weights"], **overrides)
  assert _max_difference(batches["packed"], broken, batches["unpacked"], unpacked) > 1e-3


# Tolerances: about one unit of the precision's rounding (fp16 2^-10, bf16 2^-7); the controls'
# losses differ by 1-10 %.
@pytest.mark.parametrize("compute_type,rtol", [(tf.float16, 1e-3), (tf.bfloat16, 8e-3)],
                         ids=["fp16", "bf16"])
def test_reduced_precision_packed_losses_match_unpacked(fp32_runs, compute_type, rtol):
  batches, weights = fp32_runs["batches"], fp32_runs["weights"]
  packed = _run(batches["packed"], weights, compute_type=compute_type)
  unpacked = _run(batches["unpacked"], weights, compute_type=compute_type)
  for name in ("mlm_loss", "nsp_loss"):
    np.testing.assert_allclose(packed[name], unpacked[name], rtol=rtol, err_msg=name)
    # And both near fp32's, so the agreement is not two equal wrong values.
    np.testing.assert_allclose(packed[name], fp32_runs["packed"][name], rtol=rtol * 4,
                               err_msg=name)


def _metrics(batch, weights):
  """The pretraining head's evaluation metrics (as model_fn builds them) and the batch-count
  graph tensors on one batch: dict of numpy values."""
  with tf.Graph().as_default() as graph:
    features = helpers.constant_features(batch)
    model = modeling.BertModel(
        config=CONFIG, is_training=False, input_ids=features["input_ids"],
        input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
        **pretraining.packed_encoder_args(features, _layout(batch)))
    layouts = record_layout.Layouts(train=None, eval=_layout(batch))
    head = pretraining.pretraining_head(CONFIG, layouts)(model, features,
                                                         tf.estimator.ModeKeys.EVAL)
    metrics = head.metric_fn(*head.metric_args)
    counts = {name: graph.get_tensor_by_name(graph_names.tensor_name(name))
              for name in (graph_names.BATCH_SEQUENCES, graph_names.BATCH_TOKENS)}
    with _tf1.Session() as sess:
      _load(sess, weights)
      sess.run(_tf1.local_variables_initializer())
      sess.run({name: update for name, (_, update) in metrics.items()})
      out = sess.run({name: value for name, (value, _) in metrics.items()})
      out.update(sess.run(counts))
  return out


def test_evaluation_metrics_of_packed_and_unpacked_batches_are_equal(fp32_runs):
  weights, rows = fp32_runs["weights"], fp32_runs["rows"]
  expected = _numpy_alone(weights, rows)
  # Labels set so that a known part of the predictions is right: every other masked-LM label and
  # the first sequence's next-sentence label of each row are numpy's most likely ids.
  mlm_best = iter(expected["mlm_log_probs"].argmax(axis=-1))
  nsp_best = iter(expected["nsp_log_probs"].argmax(axis=-1))
  right_mlm = right_nsp = 0
  labelled = [[dict(seq) for seq in row] for row in rows]
  for row in labelled:
    for slot, seq in enumerate(row):
      best = np.array([next(mlm_best) for _ in seq["positions"]])
      seq["mlm_ids"] = np.where(np.arange(len(best)) % 2 == 0, best, (best + 1) % 64)
      right_mlm += len(best[::2])
      best_nsp = next(nsp_best)
      seq["label"] = best_nsp if slot == 0 else 1 - best_nsp
      right_nsp += slot == 0
  packed = _metrics(_packed_batch(labelled), weights)
  unpacked = _metrics(_unpacked_batch(labelled), weights)
  sequences = sum(len(row) for row in ROWS)
  predictions = sum(count for row in ROWS for _, count in row)
  assert packed["masked_lm_accuracy"] == unpacked["masked_lm_accuracy"]
  assert packed["next_sentence_accuracy"] == unpacked["next_sentence_accuracy"]
  np.testing.assert_allclose(packed["masked_lm_accuracy"], right_mlm / predictions, rtol=1e-6)
  np.testing.assert_allclose(packed["next_sentence_accuracy"], right_nsp / sequences, rtol=1e-6)
  for name in ("masked_lm_loss", "next_sentence_loss"):
    np.testing.assert_allclose(packed[name], unpacked[name], rtol=1e-5, err_msg=name)
  np.testing.assert_allclose(packed["masked_lm_loss"], -np.mean(
      expected["mlm_log_probs"][np.arange(predictions), np.concatenate(
          [seq["mlm_ids"] for row in labelled for seq in row])]), rtol=1e-5)
  tokens = sum(length for row in ROWS for length, _ in row)
  for out in (packed, unpacked):
    assert out[graph_names.BATCH_SEQUENCES] == sequences
    assert out[graph_names.BATCH_TOKENS] == tokens
