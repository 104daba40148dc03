"""Fuzz target: `tokenization.load_vocab` and `FullTokenizer` on a vocab.txt.

Property: the vocabulary holds the file's lines (split at "\\n" only, each stripped of
surrounding whitespace), each token with the id of its first line in file order, ids 0..n-1; a
tokenizer built on it returns only tokens of the vocabulary, and ids that map back to them.
"""

import os
import tempfile

import tokenization
from fuzz import harness
from utils.data import vocabulary

_TEXT = ("The quick brown fox jumped over the lazy dog's back; [unused0] naïve café, 東京 "
         "unaffable running runs!")


def _expected_vocab(data):
  """Token -> id of a vocabulary file's bytes, computed from the format's definition."""
  lines = data.decode("utf-8").split("\n")
  if lines[-1] == "":
    lines.pop()  # the text after the last newline is a line only when it is not empty
  vocab = {}
  for line in lines:
    vocab.setdefault(line.strip(), len(vocab))
  return vocab


def _check_tokenizer(path, vocab, preserve_unused_tokens):
  """Builds a FullTokenizer on `path` and checks its output against `vocab`."""
  try:
    tokenizer = tokenization.FullTokenizer(path, do_lower_case=True,
                                           preserve_unused_tokens=preserve_unused_tokens)
  except ValueError as e:
    assert "[UNK]" not in vocab, e
    return
  assert tokenizer.vocab == vocab
  tokens = tokenizer.tokenize(_TEXT)
  assert all(token in vocab for token in tokens), [t for t in tokens if t not in vocab]
  ids = tokenizer.convert_tokens_to_ids(tokens)
  assert ids == [vocab[token] for token in tokens]
  assert tokenizer.convert_ids_to_tokens(ids) == tokens


def read(data):
  """Loads `data` as a vocab.txt; checks the vocabulary and a tokenizer built on it."""
  with harness.input_file(data, "vocab.txt") as path:
    try:
      vocab = tokenization.load_vocab(path)
    except ValueError as e:
      assert path in str(e), e
      data.decode("utf-8")  # refused: it must really not be UTF-8 (else this raises a refusal)
      raise AssertionError("a UTF-8 vocabulary refused: %s" % e)
    assert list(vocab.values()) == list(range(len(vocab)))
    assert dict(vocab) == _expected_vocab(data)
    _check_tokenizer(path, vocab, preserve_unused_tokens=False)
    _check_tokenizer(path, vocab, preserve_unused_tokens=True)


def seeds():
  """A vocabulary trained by the project's trainer on a small text, and one written by hand
  (special tokens, words, "##" pieces, an unused token, a repeated token, CRLF line ends)."""
  with tempfile.TemporaryDirectory() as directory:
    corpus = os.path.join(directory, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
      f.write((_TEXT + "\nthe fox runs and the dog sleeps\n") * 20)
    output = os.path.join(directory, "vocab.txt")
    vocabulary.build_vocab([corpus], 120, output)
    with open(output, "rb") as f:
      trained = f.read()
  by_hand = ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n[unused0]\nthe\nquick\n##s\n##ing\nrun\n"
             "fox\nthe\n  dog \r\n東\n##京\ncafe\n").encode("utf-8")
  return [trained, by_hand]


TARGET = harness.Target("vocabulary", read, (ValueError,), seeds, max_len=4096)
