"""SQuAD json (v1.1 / v2.0): `squad_data.read_squad_examples`, then the examples made into features.

The first byte of an input picks the mode (training or not, v2.0 or not); the rest is the json
file. Checked: every example's id, question, words and training answer are the file's own (parsed
here with json and split on whitespace independently), its answer's words lie inside its
paragraph, and every feature's training targets lie inside its window.
"""

import json
import re

from fuzz import harness
from utils.core import errors
from utils.finetuning import squad_data

# (is_training, version_2_with_negative) of the first byte's four modes.
MODES = ((False, False), (True, False), (False, True), (True, True))
MAX_SEQ_LENGTH = 24
DOC_STRIDE = 5
MAX_QUERY_LENGTH = 6
_VOCAB = ("[PAD] [UNK] [CLS] [SEP] [MASK] the a of in was is what who when where python created by "
          "guido van rossum first released 1991 paris france ? . , ( ) - ##s ##e ##n ##o").split()
_SPLIT = re.compile("[ \t\r\n\u202f]+")


TOKENIZER = harness.tokenizer(_VOCAB)


def _questions(data):
  """id -> list of (question, context, answers) of the file, parsed here."""
  found = {}
  for article in json.loads(data.decode("utf-8"))["data"]:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        found.setdefault(qa["id"], []).append(
            (qa["question"], paragraph["context"], qa.get("answers")))
  return found


def _check_example(example, questions, is_training):
  """Asserts that `example` is one of the file's questions (`_questions`), its answer inside."""
  assert example.qas_id in questions, "id %r is not in the file" % (example.qas_id,)
  same = [(question, context, answers) for question, context, answers in questions[example.qas_id]
          if question == example.question_text
          and example.doc_tokens == [w for w in _SPLIT.split(context) if w]]
  assert same, "question %r and its words are not the file's" % (example.question_text,)
  if not is_training:
    assert example.orig_answer_text is None and example.start_position is None
    return
  if example.is_impossible:
    assert (example.orig_answer_text, example.start_position, example.end_position) == ("", -1, -1)
    return
  texts = [answers[0]["text"] for _, _, answers in same if answers]
  assert example.orig_answer_text in texts, "answer %r" % (example.orig_answer_text,)
  assert 0 <= example.start_position <= example.end_position < len(example.doc_tokens), (
      "answer words %d..%d of %d" % (example.start_position, example.end_position,
                                     len(example.doc_tokens)))


def _check_feature(feature, is_training):
  tokens = len(feature.tokens)
  assert tokens <= MAX_SEQ_LENGTH and len(feature.input_ids) == MAX_SEQ_LENGTH, "feature length"
  assert all(0 <= i < len(_VOCAB) for i in feature.input_ids), "token ids"
  if is_training:
    assert 0 <= feature.start_position <= feature.end_position < tokens, (
        "targets %d..%d of %d tokens" % (feature.start_position, feature.end_position, tokens))


def read(data):
  """Reads `data[1:]` as a SQuAD file in the mode of `data[0]` and checks what comes back."""
  if not data:
    return
  is_training, version_2 = MODES[data[0] % len(MODES)]
  with harness.input_file(data[1:], "squad.json") as path:
    examples = squad_data.read_squad_examples(path, is_training, version_2)
  if not examples:
    return
  questions = _questions(data[1:])
  for example in examples:
    _check_example(example, questions, is_training)
  features = []
  squad_data.convert_examples_to_features(examples, TOKENIZER, MAX_SEQ_LENGTH, DOC_STRIDE,
                                          MAX_QUERY_LENGTH, is_training, features.append)
  for feature in features:
    _check_feature(feature, is_training)


def _squad(mode, articles):
  return bytes([mode]) + json.dumps({"version": "x", "data": articles}).encode("utf-8")


def seeds():
  """SQuAD files of each mode: two paragraphs, answerable and (v2.0) unanswerable questions."""
  short = "Python was created by Guido van Rossum and first released in 1991."
  long = ("The leader was John Smith (1895-1943). He lived in Paris,\tFrance\u202fand worked in "
          "the  Japanese industry.")
  qas = [(short, "Who created Python?", "Guido van Rossum"),
         (short, "When was Python first released?", "1991"),
         (long, "Where did he live?", "Paris,\tFrance"),
         (long, "What year was he born?", "1895"),
         (long, "What is the capital of Mars?", None)]
  found = []
  for mode, (_, version_2) in enumerate(MODES):
    paragraphs = {}
    for index, (context, question, answer) in enumerate(qas):
      if answer is None and not version_2:
        continue
      qa = {"id": "q%d" % index, "question": question, "answers": [] if answer is None else [
          {"text": answer, "answer_start": context.index(answer)}]}
      if version_2:
        qa["is_impossible"] = answer is None
      paragraphs.setdefault(context, []).append(qa)
    found.append(_squad(mode, [{"title": "t", "paragraphs": [
        {"context": context, "qas": q} for context, q in paragraphs.items()]}]))
  return found


TARGET = harness.Target("squad_json", read, (errors.UsageError,), seeds, 4096)
