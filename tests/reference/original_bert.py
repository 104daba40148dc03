"""Runs the original BERT release (PyPI `bert-tensorflow`) under TF 2.15, as a reference.

The release is written against `tensorflow.compat.v1`; the one piece TF 2 no longer ships is
`tensorflow.contrib.layers` (for `layer_norm`), which `tf-slim` carries unchanged. This module
provides it and then imports the release's own modules, so what the tests compare against is the
original code, not a re-implementation.

The release's scripts define clashing absl flags, and ours define the same names, so every use runs
in its own process:

  python -m tests.reference.original_bert model --config C --batch B.npz --out DIR [--seed N]
      builds the original BertModel and pretraining heads (no dropout), gives every variable a
      random value, saves DIR/bert_model.ckpt and writes DIR/outputs.npz (sequence and pooled
      outputs, the three losses, and the gradient of the total loss for every variable).
  python -m tests.reference.original_bert train --config C --batch B.npz --out DIR --seed N
      --steps K --lr LR --warmup W --train_steps S
      the same model (no dropout), randomised and saved as DIR/initial.ckpt, then K LAMB updates
      with the plain reference step of tests/reference/plain_lamb.py on the batches of B.npz
      (cycled), global-norm clipping and the LAMB schedule of docs/DESIGN.md section 6; writes
      DIR/losses.npy, the total loss before each update.
  python -m tests.reference.original_bert load --config C --checkpoint CKPT --out OUT.npz
      builds the original BertModel and pretraining heads, initialises them from CKPT with the
      release's own `get_assignment_map_from_checkpoint` / `init_from_checkpoint`, and writes the
      value of every trainable variable to OUT.npz (keys: variable names); fails when a variable
      is not in CKPT.
  python -m tests.reference.original_bert create_pretraining_data -- FLAGS...
  python -m tests.reference.original_bert run_pretraining -- FLAGS...
  python -m tests.reference.original_bert run_classifier -- FLAGS...
      run the original scripts with their own flags.
"""

import os
import sys
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_slim  # noqa: E402

_tf1 = tf.compat.v1


def install_contrib():
  """Makes `from tensorflow.contrib import layers` resolve to tf-slim's copy of it."""
  if "tensorflow.contrib" not in sys.modules:
    contrib = types.ModuleType("tensorflow.contrib")
    contrib.layers = tf_slim.layers
    sys.modules["tensorflow.contrib"] = contrib


def _dump_model(config_path, batch_path, out_dir, seed):
  install_contrib()
  from bert import modeling as original_modeling  # pylint: disable=g-import-not-at-top
  from bert import run_pretraining as original_run_pretraining  # pylint: disable=g-import-not-at-top

  _tf1.disable_eager_execution()
  config = original_modeling.BertConfig.from_json_file(config_path)
  batch = dict(np.load(batch_path))
  features = {name: tf.constant(value) for name, value in batch.items()}
  model = original_modeling.BertModel(
      config=config, is_training=False, input_ids=features["input_ids"],
      input_mask=features["input_mask"], token_type_ids=features["segment_ids"],
      use_one_hot_embeddings=False)
  mlm_loss, mlm_per_example, _ = original_run_pretraining.get_masked_lm_output(
      config, model.get_sequence_output(), model.get_embedding_table(),
      features["masked_lm_positions"], features["masked_lm_ids"], features["masked_lm_weights"])
  nsp_loss, nsp_per_example, _ = original_run_pretraining.get_next_sentence_output(
      config, model.get_pooled_output(), features["next_sentence_labels"])
  total_loss = mlm_loss + nsp_loss
  tvars = _tf1.trainable_variables()
  grads = tf.gradients(total_loss, tvars)

  rng = np.random.RandomState(seed)
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    for var in tvars:
      value = rng.normal(size=var.shape.as_list()) * 0.2
      if var.op.name.endswith("gamma"):
        value += 1.0
      var.load(value.astype(np.float32), sess)
    _tf1.train.Saver().save(sess, os.path.join(out_dir, "bert_model.ckpt"))
    outputs = sess.run({
        "sequence_output": model.get_sequence_output(),
        "pooled_output": model.get_pooled_output(),
        "embedding_output": model.get_embedding_output(),
        "mlm_loss": mlm_loss,
        "mlm_per_example_loss": mlm_per_example,
        "nsp_loss": nsp_loss,
        "nsp_per_example_loss": nsp_per_example,
        "total_loss": total_loss,
    })
    for var, grad in zip(tvars, sess.run(grads)):
      outputs["grad/" + var.op.name] = np.asarray(grad)
  np.savez(os.path.join(out_dir, "outputs.npz"), **outputs)


def _lamb_learning_rate(step, init_lr, num_train_steps, num_warmup_steps):
  """docs/DESIGN.md section 6 LAMB schedule: linear warmup, then sqrt decay from init_lr to 0."""
  if num_warmup_steps and step < num_warmup_steps:
    return init_lr * step / num_warmup_steps
  return init_lr * (1.0 - min(step, num_train_steps) / num_train_steps) ** 0.5


def _train(config_path, batch_path, out_dir, seed, steps, init_lr, num_warmup_steps,
           num_train_steps):
  install_contrib()
  from bert import modeling as original_modeling  # pylint: disable=g-import-not-at-top
  from bert import run_pretraining as original_run_pretraining  # pylint: disable=g-import-not-at-top
  from tests.reference import plain_lamb  # pylint: disable=g-import-not-at-top

  _tf1.disable_eager_execution()
  config = original_modeling.BertConfig.from_json_file(config_path)
  batches = dict(np.load(batch_path))  # every feature [num_batches, batch, ...]
  placeholders = {name: _tf1.placeholder(tf.as_dtype(value.dtype), value.shape[1:])
                  for name, value in batches.items()}
  model = original_modeling.BertModel(
      config=config, is_training=False, input_ids=placeholders["input_ids"],
      input_mask=placeholders["input_mask"], token_type_ids=placeholders["segment_ids"],
      use_one_hot_embeddings=False)
  mlm_loss, _, _ = original_run_pretraining.get_masked_lm_output(
      config, model.get_sequence_output(), model.get_embedding_table(),
      placeholders["masked_lm_positions"], placeholders["masked_lm_ids"],
      placeholders["masked_lm_weights"])
  nsp_loss, _, _ = original_run_pretraining.get_next_sentence_output(
      config, model.get_pooled_output(), placeholders["next_sentence_labels"])
  total_loss = mlm_loss + nsp_loss
  tvars = _tf1.trainable_variables()
  learning_rate = _tf1.placeholder(tf.float32, [])
  update_count = _tf1.placeholder(tf.float32, [])
  train_op, _ = plain_lamb.lamb_train_op(total_loss, tvars, learning_rate, update_count)

  rng = np.random.RandomState(seed)
  num_batches = len(batches["input_ids"])
  losses = []
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    for var in tvars:
      value = rng.normal(size=var.shape.as_list()) * 0.2
      if var.op.name.endswith("gamma"):
        value += 1.0
      var.load(value.astype(np.float32), sess)
    _tf1.train.Saver(tvars).save(sess, os.path.join(out_dir, "initial.ckpt"))
    for k in range(1, steps + 1):
      feed = {placeholders[name]: value[(k - 1) % num_batches] for name, value in batches.items()}
      # Update k uses the LR of step k - 1 and the bias correction of t = k.
      feed[learning_rate] = _lamb_learning_rate(k - 1, init_lr, num_train_steps, num_warmup_steps)
      feed[update_count] = float(k)
      loss, _ = sess.run([total_loss, train_op], feed)
      losses.append(loss)
  np.save(os.path.join(out_dir, "losses.npy"), np.array(losses, np.float64))


def _load(config_path, checkpoint, out_path):
  install_contrib()
  from bert import modeling as original_modeling  # pylint: disable=g-import-not-at-top
  from bert import run_pretraining as original_run_pretraining  # pylint: disable=g-import-not-at-top

  _tf1.disable_eager_execution()
  config = original_modeling.BertConfig.from_json_file(config_path)
  ids = tf.zeros([1, 2], tf.int32)
  model = original_modeling.BertModel(config=config, is_training=False, input_ids=ids,
                                      input_mask=ids, token_type_ids=ids)
  original_run_pretraining.get_masked_lm_output(
      config, model.get_sequence_output(), model.get_embedding_table(), ids, ids,
      tf.ones([1, 2]))
  original_run_pretraining.get_next_sentence_output(config, model.get_pooled_output(),
                                                    tf.zeros([1], tf.int32))
  tvars = _tf1.trainable_variables()
  assignment_map, initialized = original_modeling.get_assignment_map_from_checkpoint(
      tvars, checkpoint)
  missing = [v.op.name for v in tvars if v.op.name not in initialized]
  if missing:
    raise SystemExit("not in %s: %s" % (checkpoint, missing))
  _tf1.train.init_from_checkpoint(checkpoint, assignment_map)
  with _tf1.Session() as sess:
    sess.run(_tf1.global_variables_initializer())
    values = sess.run({v.op.name: v for v in tvars})
  np.savez(out_path, **values)


def _run_script(module_name, argv):
  install_contrib()
  from absl import app  # pylint: disable=g-import-not-at-top
  module = __import__("bert." + module_name, fromlist=["main"])
  _tf1.disable_eager_execution()
  if module_name == "run_classifier":
    # It reads TF1 shapes (`shape[-1].value`); the other scripts run unchanged as they are.
    _tf1.disable_v2_tensorshape()
  app.run(module.main, argv=[module_name] + argv)


def main(argv):
  if len(argv) < 2:
    raise SystemExit(__doc__)
  command, rest = argv[1], argv[2:]
  if command == "model":
    import argparse  # pylint: disable=g-import-not-at-top
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--batch", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(rest)
    _dump_model(args.config, args.batch, args.out, args.seed)
  elif command == "train":
    import argparse  # pylint: disable=g-import-not-at-top
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--batch", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--train_steps", type=int, default=100)
    args = parser.parse_args(rest)
    _train(args.config, args.batch, args.out, args.seed, args.steps, args.lr, args.warmup,
           args.train_steps)
  elif command == "load":
    import argparse  # pylint: disable=g-import-not-at-top
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(rest)
    _load(args.config, args.checkpoint, args.out)
  elif command in ("create_pretraining_data", "run_pretraining", "run_classifier"):
    if rest and rest[0] == "--":
      rest = rest[1:]
    _run_script(command, rest)
  else:
    raise SystemExit("unknown command %r\n%s" % (command, __doc__))


if __name__ == "__main__":
  main(sys.argv)
