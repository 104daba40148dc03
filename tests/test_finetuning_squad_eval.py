"""The SQuAD scorer against hand-worked examples of the official v1.1 definitions."""

import pytest

from utils.finetuning import squad_eval


@pytest.mark.parametrize("text, normalised", [
    ("The  Quick, Brown fox!", "quick brown fox"),
    ("An apple a day", "apple day"),
    ("theory of the anthem", "theory of anthem"),  # articles only as whole words
    ("U.S.", "us"),
    ("  \t(1895-1943).\n", "18951943"),
    ("the", ""),
])
def test_normalisation(text, normalised):
  assert squad_eval.normalize_answer(text) == normalised


def test_exact_match_ignores_case_punctuation_articles_and_spaces():
  assert squad_eval.exact_match_score("The Denver Broncos.", "denver  broncos") == 1.0
  assert squad_eval.exact_match_score("Denver", "Denver Broncos") == 0.0


def test_f1_by_hand():
  # "cat sat on mat" (4 tokens) vs "cat on mat" (3): 3 shared, P = 3/4, R = 1, F1 = 6/7.
  assert squad_eval.f1_score("the cat sat on the mat", "a cat on a mat") == pytest.approx(6 / 7)
  # Bags of words: "paris" twice against once shares 1; P = 1/2, R = 1, F1 = 2/3.
  assert squad_eval.f1_score("Paris paris", "Paris") == pytest.approx(2 / 3)
  assert squad_eval.f1_score("London", "Paris") == 0.0
  # Empty after normalisation: equal only to empty.
  assert squad_eval.f1_score("the", "") == 1.0
  assert squad_eval.f1_score("", "Paris") == 0.0


def _dataset(questions):
  return [{"title": "t", "paragraphs": [{"context": "c", "qas": [
      {"id": qid, "question": "q?", "answers": [{"text": t, "answer_start": 0} for t in golds]}
      for qid, golds in questions]}]}]


def test_evaluate_takes_the_best_gold_and_scores_missing_questions_zero():
  dataset = _dataset([("q1", ["Broncos", "Denver Broncos"]),
                      ("q2", ["a cat on a mat", "dog"]),
                      ("q3", ["anything"])])
  predictions = {"q1": "the Denver Broncos", "q2": "the cat sat on the mat"}
  result = squad_eval.evaluate(dataset, predictions)
  # EM: 1 + 0 + 0 of 3; F1: 1 + 6/7 + 0 of 3 = 13/21.
  assert result["exact_match"] == pytest.approx(100 / 3)
  assert result["f1"] == pytest.approx(100 * 13 / 21)
  assert result["total"] == 3
  assert result["unanswered"] == 1


def test_questions_without_answer_expect_the_empty_prediction():
  dataset = _dataset([("q1", []), ("q2", []), ("q3", ["Paris"])])
  result = squad_eval.evaluate(dataset, {"q1": "", "q2": "Paris", "q3": "paris"})
  assert result["exact_match"] == pytest.approx(200 / 3)
  assert result["f1"] == pytest.approx(200 / 3)


def test_has_answers_tells_a_dev_set_from_a_test_set():
  assert squad_eval.has_answers(_dataset([("q1", ["x"]), ("q2", [])]))
  assert not squad_eval.has_answers(_dataset([("q1", []), ("q2", [])]))
  test_set = [{"paragraphs": [{"context": "c", "qas": [{"id": "q", "question": "q?"}]}]}]
  assert not squad_eval.has_answers(test_set)
