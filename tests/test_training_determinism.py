"""Deterministic mode in the graph: stateless dropout keyed on (seed, micro-step, rank, layer, site),
the micro-step counter in checkpoints, and the input skipping the records a checkpoint consumed."""

import numpy as np
import pytest
import tensorflow as tf

import modeling
import optimization
import run_pretraining
from tests import helpers
from tests import test_data_input_pipeline as input_tests
from utils.training import determinism

_tf1 = tf.compat.v1


def _session(threads=0):
  config = _tf1.ConfigProto(intra_op_parallelism_threads=threads,
                            inter_op_parallelism_threads=threads)
  return _tf1.Session(config=config)


def test_stateless_dropout_keeps_the_mask_semantics_and_is_a_function_of_the_seed(graph):
  rate = 0.25
  x = tf.constant(np.random.RandomState(0).uniform(1.0, 2.0, size=(200, 50)).astype(np.float32))
  seed = _tf1.placeholder(tf.int64, [2])
  out = modeling.dropout(x, rate, seed=seed)
  with _session() as sess:
    a = sess.run(out, {seed: [1, 2]})
    again = sess.run(out, {seed: [1, 2]})
    other = sess.run(out, {seed: [1, 3]})
    x_value = sess.run(x)
  kept = a != 0
  # Kept values are scaled by 1 / (1 - rate) exactly as tf.nn.dropout does, the rest are 0.
  np.testing.assert_allclose(a[kept], x_value[kept] / (1.0 - rate), rtol=1e-6)
  # 10,000 Bernoulli(0.75) draws: the kept fraction is within 5 standard deviations.
  assert abs(kept.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / kept.size)
  np.testing.assert_array_equal(a, again)
  assert (kept != (other != 0)).mean() > 0.2  # another seed, another mask
  # fp16 keeps its dtype.
  half = modeling.dropout(tf.cast(x, tf.float16), rate, seed=tf.constant([1, 2], tf.int64))
  assert half.dtype == tf.float16


def _uniform_tensors(graph):
  """The random uniform tensors behind every stateless dropout mask of `graph`."""
  ops = [op for op in graph.get_operations() if op.type == "StatelessRandomUniformV2"]
  return [op.outputs[0] for op in ops]


def _model_masks(num_layers=3):
  """Builds a BertModel keyed on placeholders (micro-step, rank); returns (graph, run(step, rank,
  threads) -> list of uniform arrays, one per dropout site, in graph order)."""
  graph = tf.Graph()
  with graph.as_default():
    config = helpers.tiny_config(num_hidden_layers=num_layers)
    batch = helpers.random_batch(np.random.RandomState(0), 2, 16, config.vocab_size, 3)
    micro_step = _tf1.placeholder(tf.int64, [])
    rank = _tf1.placeholder(tf.int32, [])
    key = determinism.dropout_key(7, micro_step, rank)
    modeling.BertModel(config, True, tf.constant(batch["input_ids"]),
                       tf.constant(batch["input_mask"]), tf.constant(batch["segment_ids"]),
                       dropout_key=key)
    uniforms = _uniform_tensors(graph)
    init = _tf1.global_variables_initializer()

  def run(step, worker, threads=0):
    with graph.as_default(), _session(threads) as sess:
      sess.run(init)
      return sess.run(uniforms, {micro_step: step, rank: worker})

  return uniforms, run


def _assert_sites_differ(masks, uniforms):
  """No two dropout sites of one micro-step (`masks`, in the order of `uniforms`) share a mask."""
  for i in range(len(masks)):
    for j in range(i + 1, len(masks)):
      if masks[i].shape == masks[j].shape:
        assert not np.array_equal(masks[i], masks[j]), (uniforms[i].name, uniforms[j].name)


def test_every_layer_site_micro_step_and_worker_draws_its_own_mask():
  uniforms, run = _model_masks(num_layers=3)
  # The embeddings, then per layer: attention probabilities, attention output, layer output.
  assert len(uniforms) == 1 + 3 * 3
  step0 = run(0, 0)
  _assert_sites_differ(step0, uniforms)
  for other in (run(1, 0), run(0, 1), run(2, 1)):
    for site, (a, b) in enumerate(zip(step0, other)):
      assert not np.array_equal(a, b), uniforms[site].name
  # A pure function of the key: the same numbers again, whatever the thread count.
  for again in (run(0, 0, threads=1), run(0, 0, threads=2)):
    for a, b in zip(step0, again):
      np.testing.assert_array_equal(a, b)


def test_training_graph_draws_new_masks_every_micro_step_and_again_from_the_start():
  # The job's own model_fn with accumulation: the masks its train op uses come from the counter
  # it advances, so no two micro-steps (inside an update or across updates) share a mask, and a
  # new session from the same start draws the same masks again.
  micro_steps = 4  # two updates of ACCUMULATION 2
  graph = tf.Graph()
  with graph.as_default():
    config = helpers.tiny_config(num_hidden_layers=2)
    batch = helpers.random_batch(np.random.RandomState(2), 2, 16, config.vocab_size, 3)
    _tf1.train.get_or_create_global_step()
    model_fn = run_pretraining.model_fn_builder(
        config, None, optimization.Schedule("lamb", 1e-3, 10, 1),
        accumulation=optimization.Accumulation(2), dropout_seed=7)
    spec = model_fn(helpers.constant_features(batch), None, tf.estimator.ModeKeys.TRAIN, {})
    uniforms = _uniform_tensors(graph)
    counter = helpers.variable(determinism.MICRO_STEP_NAME)
    init = _tf1.global_variables_initializer()

  def masks():
    with graph.as_default(), _session() as sess:
      sess.run(init)
      drawn = [sess.run([spec.train_op, uniforms])[1] for _ in range(micro_steps)]
      assert sess.run(counter) == micro_steps
      return drawn

  first = masks()
  assert len(first[0]) == 1 + 3 * 2
  _assert_sites_differ(first[0], uniforms)
  for i in range(micro_steps):
    for j in range(i + 1, micro_steps):
      for site, (a, b) in enumerate(zip(first[i], first[j])):
        assert not np.array_equal(a, b), (i, j, uniforms[site].name)
  for step_masks, again in zip(first, masks()):
    for a, b in zip(step_masks, again):
      np.testing.assert_array_equal(a, b)


def test_dropout_key_changes_the_training_output_and_only_training_uses_it(graph):
  config = helpers.tiny_config()
  batch = helpers.random_batch(np.random.RandomState(1), 2, 16, config.vocab_size, 3)
  key = _tf1.placeholder(tf.int64, [2])
  outputs = {}
  for name, is_training, cfg in (("train", True, config), ("eval", False, config),
                                 ("no_dropout", True, helpers.tiny_config(
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))):
    with _tf1.variable_scope("", reuse=_tf1.AUTO_REUSE):
      model = modeling.BertModel(cfg, is_training, tf.constant(batch["input_ids"]),
                                 tf.constant(batch["input_mask"]),
                                 tf.constant(batch["segment_ids"]), scope="bert",
                                 dropout_key=key)
    outputs[name] = model.get_sequence_output()
  with _session() as sess:
    sess.run(_tf1.global_variables_initializer())
    a = sess.run(outputs, {key: [3, 4]})
    b = sess.run(outputs, {key: [3, 5]})
  np.testing.assert_array_equal(a["eval"], a["no_dropout"])
  np.testing.assert_array_equal(a["eval"], b["eval"])
  assert np.abs(a["train"] - a["eval"]).max() > 1e-2  # dropout is on in training
  assert np.abs(a["train"] - b["train"]).max() > 1e-2  # and follows the key


def test_micro_step_counter_advances_once_per_run_and_keys_follow_it(graph):
  key, advance = determinism.begin_micro_step(seed=1, rank=0)
  counter = helpers.variable(determinism.MICRO_STEP_NAME)
  assert counter.dtype.base_dtype == tf.int64 and counter not in _tf1.trainable_variables()
  assert counter in _tf1.global_variables()
  with _session() as sess:
    sess.run(_tf1.global_variables_initializer())
    keys = [sess.run([key, advance])[0] for _ in range(3)]
    assert sess.run(counter) == 3
  assert len({tuple(k) for k in keys}) == 3
  with _session() as sess:
    sess.run(_tf1.global_variables_initializer())
    np.testing.assert_array_equal(sess.run([key, advance])[0], keys[0])


def test_checkpoint_micro_steps(tmp_path, graph):
  assert determinism.checkpoint_micro_steps(str(tmp_path / "none")) == 0
  step = _tf1.train.get_or_create_global_step()
  with _session() as sess:
    sess.run(_tf1.global_variables_initializer())
    _tf1.train.Saver().save(sess, str(tmp_path / "plain" / "model.ckpt"), global_step=step)
  with pytest.raises(ValueError, match="without --deterministic_run"):
    determinism.checkpoint_micro_steps(str(tmp_path / "plain"))
  counter = determinism.micro_step_counter()
  with _session() as sess:
    sess.run(_tf1.global_variables_initializer())
    sess.run(counter.assign(41))
    _tf1.train.Saver().save(sess, str(tmp_path / "det" / "model.ckpt"), global_step=step)
  assert determinism.checkpoint_micro_steps(str(tmp_path / "det")) == 41


def test_skip_records_continues_the_deterministic_stream(tmp_path):
  files = input_tests.write_files(tmp_path, [9, 9, 9, 9])

  def numbers(skip, batches):
    input_fn = run_pretraining.input_fn_builder(input_tests.plan(files, is_training=True,
        deterministic=True, seed=3, skip_records=skip), 5)
    return input_tests.record_numbers(input_tests.run_dataset(input_fn, max_batches=batches)[0])

  full = numbers(0, 12)
  # Resuming after 4 batches of 5 gives exactly the batches 5.. of the uninterrupted stream.
  assert numbers(20, 8) == full[20:]
  assert numbers(20, 8) != full[:40]
  with pytest.raises(ValueError, match="skip_records"):
    run_pretraining.input_fn_builder(input_tests.plan(files, is_training=True, skip_records=10), 5)
