"""SQuAD scoring: exact match and F1 as the official v1.1 evaluation defines them.

An answer is normalised by lower-casing it, deleting every ASCII punctuation character, deleting
the articles "a", "an" and "the" (whole words) and collapsing whitespace. A prediction's exact match
is 1 when its normalised text equals a gold answer's; its F1 is the harmonic mean of the precision
and recall of the normalised tokens (bag of words) it shares with a gold answer. Each question takes
the maximum over its gold answers, and the data set's scores are the means over all questions, in
percent. A question the predictions do not answer scores 0.

SQuAD 2.0 questions without an answer (empty "answers") have the one gold answer "": the empty
prediction scores 1 on both measures, any other prediction 0 (the official v2.0 rule for empty
token lists; v1.1 data never has them).
"""

import collections
import re
import string

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text):
  """Lower case, no punctuation, no articles, single spaces.

  Args:
    text: str.

  Returns:
    the normalised str.
  """
  text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match_score(prediction, gold):
  """1.0 when the normalised texts are equal, else 0.0."""
  return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction, gold):
  """Token-level F1 of the normalised texts (0.0 to 1.0).

  Either text normalising to nothing scores 1.0 when both do and 0.0 otherwise.
  """
  prediction_tokens = normalize_answer(prediction).split()
  gold_tokens = normalize_answer(gold).split()
  if not prediction_tokens or not gold_tokens:
    return float(prediction_tokens == gold_tokens)
  shared = sum((collections.Counter(prediction_tokens)
                & collections.Counter(gold_tokens)).values())
  if shared == 0:
    return 0.0
  precision = shared / len(prediction_tokens)
  recall = shared / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def _best_over_gold(score_fn, prediction, gold_answers):
  return max(score_fn(prediction, gold) for gold in gold_answers)


def gold_answers(dataset):
  """Question id -> list of gold answer texts ([""] for a question without an answer).

  Args:
    dataset: the "data" list of a SQuAD json file.

  Returns:
    collections.OrderedDict, in file order.
  """
  answers = collections.OrderedDict()
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        answers[qa["id"]] = [answer["text"] for answer in qa.get("answers", [])] or [""]
  return answers


def has_answers(dataset):
  """True when every question lists its answers and at least one has an answer (a dev set)."""
  questions = [qa for article in dataset for paragraph in article["paragraphs"]
               for qa in paragraph["qas"]]
  return (bool(questions) and all("answers" in qa for qa in questions)
          and any(qa["answers"] for qa in questions))


def evaluate(dataset, predictions):
  """Scores `predictions` against the gold answers of `dataset`.

  Args:
    dataset: the "data" list of a SQuAD json file (with answers).
    predictions: dict question id -> predicted text.

  Returns:
    dict: "exact_match" and "f1" (percent, means over all questions), "total" (questions) and
    "unanswered" (questions without a prediction, scored 0).
  """
  exact_match = f1 = 0.0
  unanswered = 0
  answers = gold_answers(dataset)
  for qid, gold in answers.items():
    if qid not in predictions:
      unanswered += 1
      continue
    exact_match += _best_over_gold(exact_match_score, predictions[qid], gold)
    f1 += _best_over_gold(f1_score, predictions[qid], gold)
  total = len(answers)
  return {
      "exact_match": 100.0 * exact_match / total if total else 0.0,
      "f1": 100.0 * f1 / total if total else 0.0,
      "total": total,
      "unanswered": unanswered,
  }
