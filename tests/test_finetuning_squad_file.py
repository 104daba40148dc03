"""utils/finetuning/squad_file.py: a SQuAD file that is not UTF-8 JSON text, or nests deeper than
Python can read, is refused naming the file (and the byte, the question, the key); answers at the
paragraph's leading whitespace map to words as the original's offsets intend. The checks of every
key are tests/test_finetuning_squad_data.py's."""

import os

import pytest

from tests.test_finetuning_squad_data import _dataset
from tests.test_finetuning_squad_data import _one_question
from tests.test_finetuning_squad_data import _qa
from tests.test_finetuning_squad_data import _write
from utils.core import errors
from utils.finetuning import squad_file

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _regression_input(name):
  """The SQuAD file of a saved fuzz input (its first byte is the fuzz target's mode)."""
  with open(os.path.join(REPO_ROOT, "fuzz", "regressions", "squad_json", name), "rb") as f:
    return f.read()[1:]


def test_a_file_that_is_not_utf8_is_refused_naming_the_byte_and_offset(tmp_path):
  content = _regression_input("not-utf8")
  offset = 500
  assert content[offset] == 0xce and content[:offset].decode("utf-8")
  path = tmp_path / "train.json"
  path.write_bytes(content)
  with pytest.raises(errors.UsageError) as raised:
    squad_file.read_squad_examples(str(path), is_training=True)
  assert str(raised.value) == "%s: not UTF-8 text: byte 206 (0xce) at offset 500" % path


def test_json_nested_deeper_than_the_recursion_limit_is_refused(tmp_path):
  path = tmp_path / "deep.json"
  path.write_text('{"data": ' + "[" * 100000 + "]" * 100000 + "}")
  with pytest.raises(errors.UsageError, match="deep.json: not valid JSON: nested too deeply"):
    squad_file.read_squad_examples(str(path), is_training=False)


def test_an_answer_starting_in_the_leading_whitespace_starts_at_the_first_word(tmp_path):
  # " Guido" starts at the space before "Guido", the paragraph's first word (word 0).
  [example] = _one_question(tmp_path, " Guido van Rossum", " Guido", 0)
  assert example.doc_tokens == ["Guido", "van", "Rossum"]
  assert (example.start_position, example.end_position) == (0, 0)


def test_an_answer_inside_the_leading_whitespace_is_left_out(tmp_path):
  # Characters 0-1 are the two spaces before the first word: no word holds the answer.
  assert _one_question(tmp_path, "  Guido van Rossum", "  ", 0) == []


def test_a_lone_surrogate_is_refused_naming_question_key_and_character(tmp_path):
  # JSON's "\ud800" escape reads as a str that is not text: no tokenizer takes it.
  articles = _dataset()
  _qa(articles, 1, 0)["question"] = "Who created \ud800Python?"
  path = _write(tmp_path / "dev.json", articles)
  with pytest.raises(errors.UsageError) as raised:
    squad_file.read_squad_examples(path, is_training=False)
  assert str(raised.value) == ("%s: question q0-6: 'question' has a lone surrogate (U+D800) at "
                               "character 12, not text" % path)
