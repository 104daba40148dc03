"""The SQuAD reader's checks: a missing key or an answer outside its context is named (file,
question id or position, key) when the file is read, and run_squad.py reads --train_file and
--predict_file before it trains."""

import json
import os
import subprocess
import sys

import pytest

from tests import finetuning_data
import tokenization
from utils.finetuning import squad_data

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(path, articles):
  with open(path, "w") as writer:
    json.dump({"version": "1.1", "data": articles}, writer)
  return str(path)


def _dataset(change=None):
  """The test SQuAD v1.1 data, `change(articles)` applied."""
  articles = finetuning_data.squad_dataset(version_2=False)
  if change is not None:
    change(articles)
  return articles


def _qa(articles, paragraph, question):
  return articles[0]["paragraphs"][paragraph]["qas"][question]


def test_answer_outside_its_context_names_file_and_question(tmp_path):
  articles = _dataset()
  qa = _qa(articles, 1, 1)  # "When was Python first released?" in the 66-character paragraph
  context = articles[0]["paragraphs"][1]["context"]
  assert len(context) == 66
  qa["answers"][0]["answer_start"] = 64  # "1991" would end at 68 > 66
  path = _write(tmp_path / "train.json", articles)
  with pytest.raises(ValueError) as raised:
    squad_data.read_squad_examples(path, is_training=True)
  assert str(raised.value) == ("%s: question %s: the answer (answer_start 64, 4 characters) is "
                               "outside its context of 66 characters" % (path, qa["id"]))
  # A prediction file's answers are not training targets: not checked.
  assert len(squad_data.read_squad_examples(path, is_training=False)) == 7


@pytest.mark.parametrize("where,key,expected", [
    ("qa", "question", "question q0-2: no key 'question'"),
    ("qa", "id", "article 0, paragraph 0, question 2: no key 'id'"),
    ("qa", "answers", "question q0-2: no key 'answers'"),
    ("answer", "answer_start", "question q0-2, answer 0: no key 'answer_start'"),
    ("paragraph", "context", "article 0, paragraph 0: no key 'context'"),
])
def test_missing_key_names_file_question_and_key(tmp_path, where, key, expected):
  articles = _dataset()
  qa = _qa(articles, 0, 2)
  item = {"qa": qa, "answer": qa["answers"][0], "paragraph": articles[0]["paragraphs"][0]}[where]
  del item[key]
  path = _write(tmp_path / "train.json", articles)
  with pytest.raises(ValueError) as raised:
    squad_data.read_squad_examples(path, is_training=True)
  assert str(raised.value) == "%s: %s" % (path, expected)


def test_answer_start_of_the_wrong_type_and_not_json(tmp_path):
  articles = _dataset()
  _qa(articles, 0, 0)["answers"][0]["answer_start"] = "36"
  path = _write(tmp_path / "train.json", articles)
  with pytest.raises(ValueError, match=r"question q0-0, answer 0: 'answer_start' is a str, "
                                       r"expected an integer"):
    squad_data.read_squad_examples(path, is_training=True)
  broken = tmp_path / "broken.json"
  broken.write_text('{"data": [')
  with pytest.raises(ValueError, match="broken.json: not valid JSON"):
    squad_data.read_squad_examples(str(broken), is_training=False)


def test_good_files_pass_and_count_every_question():
  for version_2, questions in ((False, 7), (True, 9)):
    articles = finetuning_data.squad_dataset(version_2, repeat=2)
    assert squad_data.check_squad(articles, "f.json", True, version_2) == 2 * questions


def _run_squad(tmp_path, train_file, predict_file):
  vocab = str(tmp_path / "vocab.txt")
  vocab_size = finetuning_data.write_vocab(vocab)
  config = str(tmp_path / "bert_config.json")
  finetuning_data.write_bert_config(config, vocab_size)
  values = dict(vocab_file=vocab, bert_config_file=config, output_dir=tmp_path / "out",
                train_file=train_file, predict_file=predict_file, do_train=True,
                do_predict=True, max_seq_length=48, doc_stride=16, max_query_length=12,
                train_batch_size=4, num_train_epochs=1)
  args = ["--%s=%s" % (k, v) for k, v in values.items()]
  return subprocess.run([sys.executable, "run_squad.py"] + args, capture_output=True, text=True,
                        timeout=180, cwd=REPO_ROOT)


@pytest.mark.e2e
def test_run_squad_reports_bad_train_and_predict_files_before_training(tmp_path):
  good = _write(tmp_path / "good.json", _dataset())

  def outside(articles):
    _qa(articles, 0, 1)["answers"][0]["answer_start"] = 10**6

  def no_question(articles):
    del _qa(articles, 1, 0)["question"]

  bad_train = _write(tmp_path / "bad_train.json", _dataset(outside))
  bad_predict = _write(tmp_path / "bad_predict.json", _dataset(no_question))
  for train, predict, expected in (
      (bad_train, good, "--train_file: %s: question q0-1: the answer (answer_start 1000000"
       % bad_train),
      (good, bad_predict, "--predict_file: %s: question q0-6: no key 'question'" % bad_predict)):
    proc = _run_squad(tmp_path, train, predict)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert expected in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "Running training" not in proc.stderr
    assert not (tmp_path / "out").exists()


def _one_question(tmp_path, context, text, answer_start):
  answer = {"text": text, "answer_start": answer_start}
  path = _write(tmp_path / "train.json", [{"paragraphs": [{"context": context, "qas": [
      {"id": "q", "question": "Who?", "answers": [answer]}]}]}])
  return squad_data.read_squad_examples(path, is_training=True)


def test_an_answer_whose_words_have_no_token_is_in_no_window(tmp_path):
  # "\x00" is one word that the tokenizer removes whole: the answer has no token, so every
  # window points at [CLS] (the training convention for an answer a window does not hold).
  [example] = _one_question(tmp_path, "python \x00", "\x00", 7)
  assert (example.start_position, example.end_position) == (1, 1)
  vocab = str(tmp_path / "vocab.txt")
  finetuning_data.write_vocab(vocab)
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  features = []
  squad_data.convert_examples_to_features([example], tokenizer, 16, 4, 4, True, features.append)
  assert [f.tokens for f in features] == [["[CLS]", "who", "?", "[SEP]", "python", "[SEP]"]]
  assert [(f.start_position, f.end_position) for f in features] == [(0, 0)]
