"""utils/data/vocabulary.py: the vocabulary trainer and its command, `python -m
utils.data.vocabulary`.

The vocabulary is checked through what it is for: `tokenization.FullTokenizer` built on it, and
the tokenizer tests (tests/test_tokenization.py) run on a vocabulary it trained.
"""

import subprocess
import sys

import pytest

import tokenization
from tests.test_tokenization import PARAGRAPHS
from tests.test_tokenization import REPO_ROOT
from tests.test_tokenization import trained_vocab  # noqa: F401  (the module's fixture)
from utils.core import errors
from utils.data import vocabulary


def test_build_vocab_special_tokens_first_and_exact_size(trained_vocab, tmp_path):
  vocab_file, tokens = trained_vocab
  assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert len(tokens) == 400 == len(tokenization.load_vocab(vocab_file))
  assert len(set(tokens)) == 400
  assert any(token.startswith("##") for token in tokens)
  # A corpus too small for the size is filled with [unusedN] up to the size.
  small = tmp_path / "small.txt"
  small.write_text("aa ab\n", encoding="utf-8")
  filled = vocabulary.build_vocab([str(small)], 50, str(tmp_path / "v.txt"), min_frequency=1)
  first_unused = filled.index("[unused0]")
  assert len(filled) == 50 and 5 < first_unused < 50
  assert filled[first_unused:] == ["[unused%d]" % i for i in range(50 - first_unused)]
  # Deterministic (ties between equally frequent pairs are frequent in a small corpus).
  again = vocabulary.build_vocab([str(small)], 50, str(tmp_path / "v2.txt"), min_frequency=1)
  assert again == filled
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(PARAGRAPHS) + "\n", encoding="utf-8")
  runs = [vocabulary.build_vocab([str(corpus)], 420, str(tmp_path / "d.txt"), min_frequency=1)
          for _ in range(3)]
  assert runs[0] == runs[1] == runs[2]
  # Every character of the corpus is a word-initial and a ## token: no [UNK] but the long word.
  tokenizer = tokenization.FullTokenizer(str(tmp_path / "d.txt"))
  assert [t for p in PARAGRAPHS for t in tokenizer.tokenize(p)].count("[UNK]") == 1
  with pytest.raises(ValueError, match="vocab_size=20 is too small .* 5 special tokens and the 16 "
                                       "characters"):
    vocabulary.build_vocab([str(corpus)], 20, str(tmp_path / "v3.txt"), limit_alphabet=16)


@pytest.mark.e2e
def test_build_vocab_command_line(tmp_path):
  corpus = tmp_path / "c.txt"
  corpus.write_text("hello world\n\nhello there world\n", encoding="utf-8")
  out = tmp_path / "vocab.txt"
  proc = subprocess.run([sys.executable, "-m", "utils.data.vocabulary",
                         "--input_file=%s" % (tmp_path / "*.txt"), "--output_file=%s" % out,
                         "--vocab_size=40", "--min_frequency=1"],
                        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  lines = out.read_text(encoding="utf-8").split("\n")[:-1]
  assert lines[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(lines) == 40
  assert "hello" in lines
  missing = subprocess.run([sys.executable, "-m", "utils.data.vocabulary",
                            "--input_file=%s" % (tmp_path / "nothing*.txt"),
                            "--output_file=%s" % out], cwd=REPO_ROOT, capture_output=True,
                           text=True, timeout=120)
  assert missing.returncode == 2 and "nothing*.txt" in missing.stderr


def test_command_refuses_what_it_cannot_use_naming_it(tmp_path):
  def command(argv, input_file, vocab_size=40):
    vocabulary.command_main(argv, input_file, str(tmp_path / "vocab.txt"), vocab_size,
                            do_lower_case=True, min_frequency=1, limit_alphabet=1000)

  corpus = tmp_path / "c.txt"
  corpus.write_text("hello world\n", encoding="utf-8")
  with pytest.raises(errors.UsageError, match="argument.* build_vocab; usage: python -m "
                                               "utils.data.vocabulary --input_file"):
    command([vocabulary.PROGRAM, "build_vocab"], str(corpus))
  with pytest.raises(errors.UsageError, match=r"no file matches --input_file=.*/none\*\.txt"):
    command([vocabulary.PROGRAM], str(tmp_path / "none*.txt"))
  with pytest.raises(errors.UsageError, match="build_vocab: vocab_size=8 is too small"):
    command([vocabulary.PROGRAM], str(corpus), vocab_size=8)
  assert not (tmp_path / "vocab.txt").exists()
  command([vocabulary.PROGRAM], str(corpus))
  assert (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:5] == [
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
