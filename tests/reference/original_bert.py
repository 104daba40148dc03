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
  python -m tests.reference.original_bert run_squad -- FLAGS...
  python -m tests.reference.original_bert run_classifier -- FLAGS...
  python -m tests.reference.original_bert extract_features -- FLAGS...
      run the original scripts with their own flags.
  python -m tests.reference.original_bert on_our_modules SCRIPT -- FLAGS...
      the original script SCRIPT (run_squad, run_classifier, extract_features) unchanged, under
      TF1 behaviour, with its `bert.modeling`, `bert.optimization` and `bert.tokenization` being
      this project's modules; the Estimator writes the loss summary at every step.
  python -m tests.reference.original_bert squad_features --out OUT.json -- FLAGS...
      the original run_squad's examples and features of --predict_file (and of --train_file when
      given, as training data) under its own flags (--vocab_file, --max_seq_length, --doc_stride,
      ...): OUT.json {"train": ..., "predict": ...}; with --logits_seed N, also the predictions it
      writes into --output_dir for random logits (numpy RandomState(N) normals, start then end
      logits of each feature in turn).
  python -m tests.reference.original_bert classifier_features --cases TASK:SPLIT:DATA_DIR...
      --out OUT.json -- FLAGS...
      the original run_classifier's examples and features of each case (split: train, dev,
      test), a list in OUT.json.
"""

import argparse
import json
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


# Scripts that read TF1 shapes (`shape[-1].value`).
_TF1_SHAPE_SCRIPTS = ("run_classifier", "run_squad", "extract_features")


def _run_script(module_name, argv):
  install_contrib()
  from absl import app  # pylint: disable=g-import-not-at-top
  module = __import__("bert." + module_name, fromlist=["main"])
  _tf1.disable_eager_execution()
  if module_name in _TF1_SHAPE_SCRIPTS:
    _tf1.disable_v2_tensorshape()
  app.run(module.main, argv=[module_name] + argv)


def _run_on_our_modules(script, argv):
  """Runs the release's `script` with our modeling / optimization / tokenization in its place."""
  install_contrib()
  import bert  # pylint: disable=g-import-not-at-top
  repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  if repo_root not in sys.path:
    sys.path.insert(0, repo_root)
  _tf1.disable_v2_behavior()
  for name in ("modeling", "optimization", "tokenization"):
    module = __import__(name)
    sys.modules["bert." + name] = module
    setattr(bert, name, module)
  tpu = _tf1.estimator.tpu
  base = tpu.RunConfig

  class EveryStepRunConfig(base):  # pylint: disable=missing-class-docstring
    def __init__(self, *args, **kwargs):
      kwargs.setdefault("log_step_count_steps", 1)
      kwargs.setdefault("save_summary_steps", 1)
      super().__init__(*args, **kwargs)

  tpu.RunConfig = EveryStepRunConfig
  from absl import app  # pylint: disable=g-import-not-at-top
  module = __import__("bert." + script, fromlist=["main"])
  app.run(module.main, argv=[script] + argv)


def _dump_squad_features(original, tokenizer, flags, is_training):
  examples = original.read_squad_examples(
      flags.train_file if is_training else flags.predict_file, is_training=is_training)
  features = []
  original.convert_examples_to_features(
      examples, tokenizer, flags.max_seq_length, flags.doc_stride, flags.max_query_length,
      is_training, features.append)
  dumped = [{name: getattr(feature, name) for name in (
      "unique_id", "example_index", "doc_span_index", "tokens", "input_ids", "input_mask",
      "segment_ids", "start_position", "end_position", "is_impossible")} for feature in features]
  for row, feature in zip(dumped, features):
    row["token_to_orig_map"] = {str(k): v for k, v in feature.token_to_orig_map.items()}
    row["token_is_max_context"] = {str(k): v for k, v in feature.token_is_max_context.items()}
  return examples, features, {"examples": [vars(e) for e in examples], "features": dumped}


def _squad_features(out_path, logits_seed, argv):
  install_contrib()
  from bert import run_squad as original  # pylint: disable=g-import-not-at-top
  from bert import tokenization as original_tokenization  # pylint: disable=g-import-not-at-top

  flags = original.FLAGS
  flags(["run_squad"] + argv)
  tokenizer = original_tokenization.FullTokenizer(flags.vocab_file, flags.do_lower_case)
  dumped = {}
  if flags.train_file:
    _, _, dumped["train"] = _dump_squad_features(original, tokenizer, flags, True)
  examples, features, dumped["predict"] = _dump_squad_features(original, tokenizer, flags, False)
  with open(out_path, "w") as writer:
    json.dump(dumped, writer)
  if logits_seed is None:
    return
  rng = np.random.RandomState(logits_seed)
  results = [original.RawResult(feature.unique_id,
                                [float(x) for x in rng.normal(size=flags.max_seq_length)],
                                [float(x) for x in rng.normal(size=flags.max_seq_length)])
             for feature in features]
  original.write_predictions(
      examples, features, results, flags.n_best_size, flags.max_answer_length,
      flags.do_lower_case, os.path.join(flags.output_dir, "predictions.json"),
      os.path.join(flags.output_dir, "nbest_predictions.json"),
      os.path.join(flags.output_dir, "null_odds.json"))


def _classifier_features(cases, out_path, argv):
  install_contrib()
  from bert import run_classifier as original  # pylint: disable=g-import-not-at-top
  from bert import tokenization as original_tokenization  # pylint: disable=g-import-not-at-top

  flags = original.FLAGS
  flags(["run_classifier"] + argv)
  tokenizer = original_tokenization.FullTokenizer(flags.vocab_file, flags.do_lower_case)
  processors = {"cola": original.ColaProcessor, "mnli": original.MnliProcessor,
                "mrpc": original.MrpcProcessor, "xnli": original.XnliProcessor}
  dumped = []
  for case in cases:
    task, split, data_dir = case.split(":", 2)
    processor = processors[task]()
    examples = getattr(processor, "get_%s_examples" % split)(data_dir)
    labels = processor.get_labels()
    features = [vars(original.convert_single_example(i, e, labels, flags.max_seq_length,
                                                     tokenizer))
                for i, e in enumerate(examples)]
    dumped.append({"examples": [vars(e) for e in examples], "features": features})
  with open(out_path, "w") as writer:
    json.dump(dumped, writer)


def _split_dashes(rest):
  """(own arguments, script flags) of `rest`: the script's flags follow "--"."""
  if "--" not in rest:
    return rest, []
  index = rest.index("--")
  return rest[:index], rest[index + 1:]


def _model_parser():
  """The arguments of the `model` command (`train` and `load` start from them): --config,
  --batch, --out, --seed."""
  parser = argparse.ArgumentParser()
  parser.add_argument("--config", required=True)
  parser.add_argument("--batch", required=True)
  parser.add_argument("--out", required=True)
  parser.add_argument("--seed", type=int, default=0)
  return parser


def _model_command(rest):
  args = _model_parser().parse_args(rest)
  _dump_model(args.config, args.batch, args.out, args.seed)


def _train_command(rest):
  parser = _model_parser()
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--lr", type=float, default=1e-3)
  parser.add_argument("--warmup", type=int, default=0)
  parser.add_argument("--train_steps", type=int, default=100)
  args = parser.parse_args(rest)
  _train(args.config, args.batch, args.out, args.seed, args.steps, args.lr, args.warmup,
         args.train_steps)


def _load_command(rest):
  parser = argparse.ArgumentParser()
  parser.add_argument("--config", required=True)
  parser.add_argument("--checkpoint", required=True)
  parser.add_argument("--out", required=True)
  args = parser.parse_args(rest)
  _load(args.config, args.checkpoint, args.out)


def _squad_features_command(rest):
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", required=True)
  parser.add_argument("--logits_seed", type=int, default=None)
  own, script_flags = _split_dashes(rest)
  args = parser.parse_args(own)
  _tf1.disable_eager_execution()
  _squad_features(args.out, args.logits_seed, script_flags)


def _on_our_modules_command(rest):
  script, script_flags = rest[0], _split_dashes(rest[1:])[1]
  _run_on_our_modules(script, script_flags)


def _classifier_features_command(rest):
  parser = argparse.ArgumentParser()
  parser.add_argument("--cases", nargs="+", required=True)
  parser.add_argument("--out", required=True)
  own, script_flags = _split_dashes(rest)
  args = parser.parse_args(own)
  _classifier_features(args.cases, args.out, script_flags)


# The commands of the module docstring besides the original scripts', by name.
_COMMANDS = {
    "model": _model_command,
    "train": _train_command,
    "load": _load_command,
    "squad_features": _squad_features_command,
    "on_our_modules": _on_our_modules_command,
    "classifier_features": _classifier_features_command,
}
# The original release's scripts, run with their own flags.
_SCRIPTS = ("create_pretraining_data", "run_pretraining", "run_squad", "run_classifier",
            "extract_features")


def main(argv):
  if len(argv) < 2:
    raise SystemExit(__doc__)
  command, rest = argv[1], argv[2:]
  if command in _COMMANDS:
    _COMMANDS[command](rest)
  elif command in _SCRIPTS:
    if rest and rest[0] == "--":
      rest = rest[1:]
    _run_script(command, rest)
  else:
    raise SystemExit("unknown command %r\n%s" % (command, __doc__))


if __name__ == "__main__":
  main(sys.argv)
