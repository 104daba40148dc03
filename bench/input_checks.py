"""Cost of the bad-input checks: the pretraining records' token-id check and the fine-tuning
files' up-front pass. Prints one JSON line, then a table.

Records (seq 128, 20 predictions: BERT's phase-1 shape; --records of them in one file):
  native_read_us       per record, tf.data's TFRecordDataset reading the file (C++, no parse)
  python_read_us       per record, the pre-flight's reader (`records.read_records`)
  python_check_us      per record, that reader + parse + `check_example` with vocab_size (what a
                       full up-front scan in Python costs)
  pipeline_base_us     per record, the evaluation input pipeline drained (read, batch 32, parse)
  pipeline_check_us    the same with the in-pipeline token-id check (vocab_size given); the two
                       alternate, each keeping its best of --repeats
SQuAD (--questions synthetic questions, ~4.6 per paragraph of ~750 characters: SQuAD v1.1 train's
shape, ~30 MB):
  json_load_s, check_s (`squad_data.check_squad`), read_s (`read_squad_examples`: load, check,
  split paragraphs), features_per_question_ms (feature conversion of 500 questions, seq 384,
  stride 128, the tests' vocabulary: the part of the up-front work that was already there).

  PY=$(make -s python-path | tail -n1); $PY bench/input_checks.py
"""

import argparse
import json
import os
import random
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SEQ, PRED, VOCAB, BATCH = 128, 20, 30522, 32


def _write_records(path, count, rng):
  from tests import helpers  # pylint: disable=g-import-not-at-top
  batch = helpers.random_batch(rng, count, SEQ, VOCAB, PRED)
  helpers.write_batch_records(path, batch)


def _best(function, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    function()
    times.append(time.perf_counter() - start)
  return min(times)


def bench_records(count, repeats, work_dir):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from utils.data import input_pipeline  # pylint: disable=g-import-not-at-top
  from utils.data import record_layout  # pylint: disable=g-import-not-at-top
  from utils.data import records  # pylint: disable=g-import-not-at-top
  path = os.path.join(work_dir, "records.tfrecord")
  _write_records(path, count, np.random.RandomState(0))

  def native():
    counted = tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda n, _: n + 1)
    assert int(counted) == count

  def python_read():
    assert sum(1 for _ in records.read_records(path)) == count

  def python_check():
    assert records.find_bad_record([path], SEQ, PRED, VOCAB) is None

  def drain(vocab_size):
    def run():
      with tf.Graph().as_default():
        plan = input_pipeline.InputPlan([path], record_layout.unpacked(SEQ, PRED),
                                        is_training=False, vocab_size=vocab_size)
        input_fn = input_pipeline.input_fn_builder(plan, BATCH)
        batch = tf.compat.v1.data.make_one_shot_iterator(input_fn({})).get_next()
        with tf.compat.v1.Session() as session:
          while True:
            try:
              session.run(batch)
            except tf.errors.OutOfRangeError:
              return
    return run

  per_record = lambda seconds: 1e6 * seconds / count  # noqa: E731
  # The pipelines with and without the check alternate, so a change of the machine's load
  # between them does not pass for the check's cost; each keeps its best time.
  base, check = [], []
  for _ in range(repeats):
    base.append(_best(drain(None), 1))
    check.append(_best(drain(VOCAB), 1))
  return {
      "records": count,
      "native_read_us": per_record(_best(native, repeats)),
      "python_read_us": per_record(_best(python_read, repeats)),
      "python_check_us": per_record(_best(python_check, repeats)),
      "pipeline_base_us": per_record(min(base)),
      "pipeline_check_us": per_record(min(check)),
  }


def _squad_file(path, questions, rng):
  from tests import finetuning_data  # pylint: disable=g-import-not-at-top
  words = finetuning_data.WORDS
  articles, made, paragraph_index = [], 0, 0
  while made < questions:
    context = " ".join(rng.choice(words) for _ in range(130))[:750]
    qas = []
    for _ in range(min(rng.choice([4, 5, 5]), questions - made)):
      start = rng.randrange(0, len(context) - 40)
      start = context.index(" ", start) + 1
      text = context[start:context.index(" ", start)]
      qas.append({"id": "%024x" % made, "question": "what is " + " ".join(
          rng.choice(words) for _ in range(8)) + "?",
                  "answers": [{"text": text, "answer_start": start}]})
      made += 1
    if paragraph_index % 40 == 0:
      articles.append({"title": "a%d" % len(articles), "paragraphs": []})
    articles[-1]["paragraphs"].append({"context": context, "qas": qas})
    paragraph_index += 1
  with open(path, "w") as writer:
    json.dump({"version": "1.1", "data": articles}, writer)


def bench_squad(questions, repeats, work_dir):
  from tests import finetuning_data  # pylint: disable=g-import-not-at-top
  import tokenization  # pylint: disable=g-import-not-at-top
  from utils.finetuning import squad_data  # pylint: disable=g-import-not-at-top
  path = os.path.join(work_dir, "train.json")
  _squad_file(path, questions, random.Random(0))
  articles = squad_data.load_squad(path)
  vocab = os.path.join(work_dir, "vocab.txt")
  finetuning_data.write_vocab(vocab)
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  examples = squad_data.read_squad_examples(path, is_training=True)
  assert len(examples) == questions, len(examples)
  sample = examples[:500]
  features = []
  convert_s = _best(lambda: squad_data.convert_examples_to_features(
      sample, tokenizer, 384, 128, 64, True, features.append), 1)
  return {
      "questions": questions,
      "file_mb": os.path.getsize(path) / 1e6,
      "json_load_s": _best(lambda: squad_data.load_squad(path), repeats),
      "check_s": _best(lambda: squad_data.check_squad(articles, path, True), repeats),
      "read_s": _best(lambda: squad_data.read_squad_examples(path, True), repeats),
      "features_per_question_ms": 1e3 * convert_s / len(sample),
  }


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--records", type=int, default=20000)
  parser.add_argument("--questions", type=int, default=87599)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory() as work_dir:
    result = {"records": bench_records(args.records, args.repeats, work_dir),
              "squad": bench_squad(args.questions, args.repeats, work_dir)}
  print(json.dumps(result))
  for part, values in result.items():
    for key, value in values.items():
      print("%-8s %-26s %12.3f" % (part, key, value))


if __name__ == "__main__":
  main()
