"""Pretraining quality of checkpoints on held-out records, and the unigram baseline beside it.

  records = read_pretraining_records(files, max_seq_length, max_predictions_per_seq)
  unigram_accuracy(records)            # always predicting the commonest masked token
  evaluate_checkpoints(bert_config, records, [ckpt, ...])
      # one graph for all of them: masked-LM loss and accuracy, next-sentence accuracy

The figures are those of run_pretraining.py's evaluation (`pretraining.metric_fn`): masked-LM
loss and accuracy weighted by masked_lm_weights, next-sentence accuracy over the records; here
they are computed in numpy from one fp32 forward pass per batch, without dropout, for any number
of checkpoints, including the original release's (its variable names are ours).
"""

import numpy as np
import tensorflow as tf

import modeling
from utils.data import input_pipeline
from utils.data import record_framing
from utils.data import record_layout
from utils.data import records
from utils.model import pretraining

_tf1 = tf.compat.v1


def read_pretraining_records(files, max_seq_length, max_predictions_per_seq):
  """Every record of the pretraining TFRecord `files`, in file order, as numpy arrays.

  Returns:
    dict name -> array [records, ...] of the features of
    `input_pipeline.pretraining_feature_spec` (int64, masked_lm_weights float32).

  Raises:
    ValueError: naming the files when they hold no record, or the file, record and byte offset
      of a record whose framing is bad (checked before TensorFlow's reader opens the file), or
      the file of packed records (this evaluation scores one sequence per record).
  """
  for path in files:
    bad = record_framing.walked_problem(path)
    if bad is not None:
      raise ValueError("%s: record %d at byte offset %d: %s" % ((path,) + bad))
    for record in records.read_records(path, max_records=1):
      layout = record_layout.layout_of(tf.train.Example.FromString(record))
      if layout.packed:
        raise ValueError("%s holds %s; the held-out evaluation reads unpacked records (the "
                         "packer's input), or evaluate packed records with run_pretraining.py "
                         "--do_eval" % (path, record_layout.describe(layout)))
  spec = input_pipeline.pretraining_feature_spec(max_seq_length, max_predictions_per_seq)
  columns = {name: [] for name in spec}
  with tf.Graph().as_default():
    dataset = tf.data.TFRecordDataset(list(files)).batch(1024).map(
        lambda records: tf.io.parse_example(records, spec))
    batch = _tf1.data.make_one_shot_iterator(dataset).get_next()
    with _tf1.Session() as sess:
      while True:
        try:
          values = sess.run(batch)
        except tf.errors.OutOfRangeError:
          break
        for name in spec:
          columns[name].append(values[name])
  if not columns["input_ids"]:
    raise ValueError("no records in %s" % ", ".join(files))
  return {name: np.concatenate(parts) for name, parts in columns.items()}


def unigram_accuracy(records):
  """Masked-LM accuracy of always predicting the commonest masked token of `records`.

  Args:
    records: dict with masked_lm_ids and masked_lm_weights [records, predictions] (padding
      predictions have weight 0).

  Returns:
    (count of the commonest real masked token) / (real masked tokens), a float.
  """
  ids = np.asarray(records["masked_lm_ids"]).reshape(-1)
  real = np.asarray(records["masked_lm_weights"]).reshape(-1) > 0
  if not real.any():
    raise ValueError("the records hold no masked token (every masked_lm_weight is 0)")
  return float(np.bincount(ids[real]).max()) / float(real.sum())


def _metrics(log_probs, nsp_log_probs, records):
  """(masked-LM loss sum, correct, count; next-sentence correct) of one batch, in numpy."""
  ids = records["masked_lm_ids"].reshape(-1)
  weights = records["masked_lm_weights"].reshape(-1).astype(np.float64)
  token_log_probs = log_probs[np.arange(ids.size), ids].astype(np.float64)
  correct = (np.argmax(log_probs, axis=-1) == ids).astype(np.float64)
  nsp_correct = np.sum(np.argmax(nsp_log_probs, axis=-1) == records["next_sentence_labels"][:, 0])
  return (-np.sum(weights * token_log_probs), np.sum(weights * correct), np.sum(weights),
          int(nsp_correct))


def evaluate_checkpoints(bert_config, records, checkpoints, batch_size=128, init_seed=0):
  """Masked-LM loss and accuracy and next-sentence accuracy of each checkpoint on `records`.

  Args:
    bert_config: `modeling.BertConfig` of the checkpoints.
    records: dict of `read_pretraining_records`.
    checkpoints: checkpoint prefixes (e.g. ".../model.ckpt-500"); None stands for freshly
      initialised weights (the initialisers of a pretraining run, graph seed `init_seed`).
    batch_size: records per forward pass.
    init_seed: graph seed of the fresh weights.

  Returns:
    list, one dict per checkpoint: masked_lm_loss, masked_lm_accuracy, next_sentence_accuracy,
    records.
  """
  records = {name: np.asarray(value) for name, value in records.items()}
  seq_length = records["input_ids"].shape[1]
  predictions = records["masked_lm_ids"].shape[1]
  with tf.Graph().as_default():
    _tf1.set_random_seed(init_seed)
    features = {
        name: _tf1.placeholder(tf.float32 if name == "masked_lm_weights" else tf.int32,
                               [None, predictions if name.startswith("masked_lm") else
                                1 if name == "next_sentence_labels" else seq_length], name=name)
        for name in records}
    built = pretraining.build_pretraining_model(bert_config, features, is_training=False)
    saver = _tf1.train.Saver(_tf1.global_variables())
    init = _tf1.global_variables_initializer()
    results = []
    with _tf1.Session() as sess:
      for checkpoint in checkpoints:
        if checkpoint is None:
          sess.run(init)
        else:
          saver.restore(sess, checkpoint)
        results.append(_evaluate(sess, built, features, records, batch_size))
  return results


def _evaluate(sess, built, features, records, batch_size):
  """The metrics of the session's weights over every record, batch by batch."""
  count = records["input_ids"].shape[0]
  loss_sum = correct = weight = nsp_correct = 0.0
  for begin in range(0, count, batch_size):
    batch = {name: value[begin:begin + batch_size] for name, value in records.items()}
    log_probs, nsp_log_probs = sess.run(
        [built["mlm_log_probs"], built["nsp_log_probs"]],
        {features[name]: value for name, value in batch.items()})
    parts = _metrics(log_probs, nsp_log_probs, batch)
    loss_sum, correct, weight = loss_sum + parts[0], correct + parts[1], weight + parts[2]
    nsp_correct += parts[3]
  return {"masked_lm_loss": loss_sum / weight, "masked_lm_accuracy": correct / weight,
          "next_sentence_accuracy": nsp_correct / count, "records": int(count)}
