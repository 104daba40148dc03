"""SQuAD v1.1 / v2.0 json files read into examples, every key the reader uses checked.

The conventions are those of the original BERT release's run_squad.py:

- A paragraph is split into words on whitespace (space, tab, CR, LF, U+202F); an answer's character
  offsets map to the words that contain its first and last character (an answer starting in the
  whitespace before the first word starts at that word).
- Training: each answerable question has exactly one answer, inside its context; an answer whose
  text is not found in the words it maps to is left out, with a warning.
- A file that is not UTF-8 JSON, a missing key or a value of the wrong type, a string that is not
  text (a lone surrogate) and an answer outside its context are refused with one
  `errors.UsageError` naming the file and the question (or its position).

`squad_data` (features, predictions) re-exports what is defined here.
"""

import json

from absl import logging
import tensorflow as tf

import tokenization
from utils.core import errors

# Characters that separate the words of a paragraph (U+202F: narrow no-break space).
_WHITESPACE = frozenset(" \t\r\n\u202f")


class SquadExample(object):
  """One question on one paragraph.

  Attributes:
    qas_id: question id.
    question_text: the question.
    doc_tokens: the paragraph's whitespace-separated words.
    orig_answer_text: training answer ("" when impossible), else None.
    start_position, end_position: word indices of the training answer (-1 when impossible),
      else None.
    is_impossible: SQuAD 2.0 question without an answer.
  """

  def __init__(self, qas_id, question_text, doc_tokens, orig_answer_text=None,
               start_position=None, end_position=None, is_impossible=False):
    self.qas_id = qas_id
    self.question_text = question_text
    self.doc_tokens = doc_tokens
    self.orig_answer_text = orig_answer_text
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible

  def __repr__(self):
    return "SquadExample(qas_id=%r, question_text=%r, %d words, answer=%r)" % (
        self.qas_id, self.question_text, len(self.doc_tokens), self.orig_answer_text)


def split_paragraph(text):
  """Splits a paragraph into words on whitespace.

  Args:
    text: the paragraph.

  Returns:
    (words, char_to_word): list of str, and for every character of `text` the index of the word
    it belongs to (a whitespace character belongs to the word before it; -1 before the first).
  """
  words = []
  char_to_word = []
  in_word = False
  for char in text:
    if char in _WHITESPACE:
      in_word = False
    elif in_word:
      words[-1] += char
    else:
      words.append(char)
      in_word = True
    char_to_word.append(len(words) - 1)
  return words, char_to_word


def load_squad(input_file):
  """The "data" list of a SQuAD json file.

  Raises:
    errors.UsageError: naming the file when it is not UTF-8 JSON (or nests deeper than Python's
      recursion limit) or has no "data" list.
  """
  with tf.io.gfile.GFile(input_file, "rb") as reader:
    content = reader.read()
  try:
    dataset = json.loads(content.decode("utf-8"))
  except UnicodeDecodeError as e:
    raise errors.UsageError("%s: not UTF-8 text: byte %d (0x%02x) at offset %d"
                            % (input_file, content[e.start], content[e.start], e.start))
  except ValueError as e:
    raise errors.UsageError("%s: not valid JSON: %s" % (input_file, e))
  except RecursionError:
    raise errors.UsageError("%s: not valid JSON: nested too deeply" % input_file)
  if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
    raise errors.UsageError("%s: a SQuAD file is a JSON object with a \"data\" list" % input_file)
  return dataset["data"]


def _require_key(item, key, kind, path, where, where_kind=None):
  """item[key], checked to be a `kind`; errors.UsageError "<path>: <where>: ..." otherwise."""
  if not isinstance(item, dict) or key not in item:
    raise errors.UsageError("%s: %s: no key %r" % (path, where, key))
  value = item[key]
  if not isinstance(value, kind) or isinstance(value, bool):
    raise errors.UsageError("%s: %s: %r is a %s, expected %s"
                            % (path, where, key, type(value).__name__,
                               where_kind or kind.__name__))
  if isinstance(value, str):
    # JSON's "\ud800" escapes make strings that are not text (no tokenizer takes them).
    try:
      value.encode("utf-8")
    except UnicodeEncodeError as e:
      raise errors.UsageError("%s: %s: %r has a lone surrogate (U+%04X) at character %d, not text"
                              % (path, where, key, ord(value[e.start]), e.start))
  return value


def check_squad(articles, path, is_training, version_2_with_negative=False):
  """Checks the structure of a SQuAD file's "data" list: every key the reader uses, and (training)
  every answer inside its context.

  Args:
    articles: the "data" list (`load_squad`).
    path: the file, for messages.
    is_training: the answers are training targets: each answerable question has exactly one,
      with "text" and an integer "answer_start" such that the answer lies inside the context.
    version_2_with_negative: SQuAD 2.0 ("is_impossible" questions need no answer).

  Returns:
    the number of questions.

  Raises:
    errors.UsageError: "<path>: question <id>: ..." naming the key or the answer, or, for a question
      without an id, its position "article a, paragraph p, question q" (0-based).
  """
  questions = 0
  for a, article in enumerate(articles):
    paragraphs = _require_key(article, "paragraphs", list, path, "article %d" % a)
    for p, paragraph in enumerate(paragraphs):
      where = "article %d, paragraph %d" % (a, p)
      context = _require_key(paragraph, "context", str, path, where)
      qas = _require_key(paragraph, "qas", list, path, where)
      for q, qa in enumerate(qas):
        position = "%s, question %d" % (where, q)
        qas_id = _require_key(qa, "id", (str, int), path, position, "a string")
        where_qa = "question %s" % qas_id
        _require_key(qa, "question", str, path, where_qa)
        questions += 1
        if not is_training or (version_2_with_negative and qa.get("is_impossible", False)):
          continue
        answers = _require_key(qa, "answers", list, path, where_qa)
        if len(answers) != 1:
          raise errors.UsageError("%s: %s: training questions need exactly 1 answer, got %d"
                                  % (path, where_qa, len(answers)))
        text = _require_key(answers[0], "text", str, path, where_qa + ", answer 0")
        start = _require_key(answers[0], "answer_start", int, path, where_qa + ", answer 0",
                             "an integer")
        if not text or start < 0 or start + len(text) > len(context):
          raise errors.UsageError("%s: %s: the answer (answer_start %d, %d characters) is outside "
                                  "its context of %d characters"
                                  % (path, where_qa, start, len(text), len(context)))
  return questions


def _training_answer(qa, words, char_to_word, version_2_with_negative):
  """(answer text, first word, last word, is_impossible) of a training question (checked by
  `check_squad`), or None when the answer cannot be found in the words (it is then left out, with
  a warning)."""
  is_impossible = bool(qa.get("is_impossible", False)) if version_2_with_negative else False
  if is_impossible:
    return "", -1, -1, True
  answer = qa["answers"][0]
  text, offset = answer["text"], answer["answer_start"]
  start, end = char_to_word[offset], char_to_word[offset + len(text) - 1]
  # An answer starting in the whitespace before the first word starts at that word (the original
  # took word -1, i.e. the last word); one that ends there too holds no word: not found.
  start = max(start, 0)
  found = " ".join(words[start:end + 1])
  if end < 0 or found.find(" ".join(tokenization.whitespace_tokenize(text))) == -1:
    logging.warning("Could not find answer: '%s' vs. '%s'", found, text)
    return None
  return text, start, end, False


def read_squad_examples(input_file, is_training, version_2_with_negative=False):
  """Reads a SQuAD json file.

  Args:
    input_file: path of the json file.
    is_training: read the answers as training targets (exactly one per answerable question).
    version_2_with_negative: SQuAD 2.0 (questions may be impossible).

  Returns:
    list of SquadExample in file order (training answers not found in their paragraph left out).

  Raises:
    errors.UsageError: naming the file and the question (`check_squad`) for a missing key, a
      training question without exactly one answer, or an answer outside its context.
  """
  examples = []
  articles = load_squad(input_file)
  check_squad(articles, input_file, is_training, version_2_with_negative)
  for article in articles:
    for paragraph in article["paragraphs"]:
      words, char_to_word = split_paragraph(paragraph["context"])
      for qa in paragraph["qas"]:
        answer = (None, None, None, False)
        if is_training:
          answer = _training_answer(qa, words, char_to_word, version_2_with_negative)
          if answer is None:
            continue
        text, start, end, is_impossible = answer
        examples.append(SquadExample(
            qas_id=qa["id"], question_text=qa["question"], doc_tokens=words,
            orig_answer_text=text, start_position=start, end_position=end,
            is_impossible=is_impossible))
  return examples
