"""tokenization.py gives the original release's tokens.

Three references: the cases of the original release's own tokenizer test, a plain per-character
implementation of the documented algorithm written here, and the original `bert.tokenization`
itself (in a subprocess: importing it defines an absl flag, `preserve_unused_tokens`, that must be
parsed before its tokenizer runs, and would stay behind in this process).
"""

import json
import os
import subprocess
import sys
import unicodedata

import numpy as np
import pytest

import tokenization
from tests import helpers
from utils.data import vocabulary

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The vocabulary of the original release's tokenizer test.
ORIGINAL_TEST_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un", "runn",
                       "##ing", ","]

PARAGRAPHS = [
    # Plain English with punctuation, digits, quotes, dashes and a URL.
    "The quick brown fox -- who'd have thought? -- jumped over 13 lazy dogs in 2019. "
    "\"Quoted\" text, (parentheses), [brackets] and {braces}; colons: semi;colons! "
    "See https://example.com/path?q=1&r=2#frag for details... $5.00, 50% off, a+b=c, x^2, `code`.",
    # Accents, ligatures, typographic punctuation.
    "Caf\u00e9 na\u00efve \u00c5ngstr\u00f6m r\u00e9sum\u00e9 co\u00f6perate se\u00f1or "
    "Stra\u00dfe \ufb01nance \u201cquoted\u201d \u2018single\u2019 \u2014 em-dash \u2013 en-dash "
    "\u00bfQu\u00e9? \u00a1S\u00ed! \u2026 \u00abguillemets\u00bb \u00b7 \u2022 bullet.",
    # CJK (also the block edge the original treats differently from newer tables), Hangul, kana.
    "ah\u535a\u63a8zz \u4e2d\u6587\u5b57\u7b26\u3002"
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8"
    " \ud55c\uad6d\uc5b4 \u30ab\u30bf\u30ab\u30ca \U0002b820\U0002b8ff \U00020000x \uf900 "
    "\u3400\u4dbf",
    # Greek capitals (final sigma), Cyrillic, Arabic, Hebrew.
    "\u039f\u0394\u039f\u03a3 \u03a3\u039f\u03a6\u039f\u03a3. \u0391\u03a3\x01\u0392 "
    "\u039c\u03a5\u03a3\u03a4\u0397\u03a1\u0399\u039f\u03a3, \u041f\u0440\u0438\u0432\u0435\u0442 "
    "\u043c\u0438\u0440! \u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd "
    "\u0130stanbul \u0130I\u0131i",
    # Whitespace and control characters, zero-width characters, private use, emoji, replacement.
    "tab\tnew\nline\rreturn\u00a0nbsp\u2003em\u3000ideographic\u2028ls\u2029ps "
    "ctl\x05x nul\x00x zwj\u200dx zwsp\u200bx soft\u00adhyphen bom\ufeffx pua\ue000x "
    "emoji\U0001f4a9x repl\ufffdx vt\x0bx ff\x0cx fs\x1cx nel\x85x",
    # A word over 200 characters, one of exactly 200, and combining marks.
    "short " + "a" * 201 + " " + "b" * 200 + " e\u0301t\u00e9 a\u0301\u0301 "
    "\u0915\u094d\u0937 \u0e01\u0e34 x\u20ddy",
]


def write_vocab(path, tokens):
  path.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
  return str(path)


# ------------------------------------------------------------------------------------------------
# An independent implementation of the original's algorithm: per character, with unicodedata.
# ------------------------------------------------------------------------------------------------

def _reference_is_cjk(cp):
  return any(low <= cp <= high for low, high in (
      (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
      (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


def _reference_is_punctuation(char):
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def reference_basic_tokenize(text, do_lower_case):
  cleaned = []
  for char in text:
    category = unicodedata.category(char)
    if char in "\t\n\r" or char == " " or category == "Zs":
      cleaned.append(" ")
    elif ord(char) in (0, 0xFFFD) or category in ("Cc", "Cf"):
      continue
    elif _reference_is_cjk(ord(char)):
      cleaned.append(" " + char + " ")
    else:
      cleaned.append(char)
  words = []
  for word in "".join(cleaned).split():
    if do_lower_case:
      word = unicodedata.normalize("NFD", word.lower())
      word = "".join(c for c in word if unicodedata.category(c) != "Mn")
    current = ""
    for char in word:
      if _reference_is_punctuation(char):
        if current:
          words.append(current)
        words.append(char)
        current = ""
      else:
        current += char
    if current:
      words.append(current)
  return words


def reference_wordpiece(words, vocab, max_chars=200):
  pieces = []
  for word in words:
    if len(word) > max_chars:
      pieces.append("[UNK]")
      continue
    start, word_pieces = 0, []
    while start < len(word):
      for end in range(len(word), start, -1):
        candidate = word[start:end] if start == 0 else "##" + word[start:end]
        if candidate in vocab:
          word_pieces.append(candidate)
          start = end
          break
      else:
        word_pieces = ["[UNK]"]
        break
    pieces.extend(word_pieces)
  return pieces


def run_original_tokenizer(vocab_file, texts, preserve_unused_tokens=False):
  """Tokens of the original bert.tokenization, in a subprocess: {"lower"|"cased": {...}}.

  With `preserve_unused_tokens` the original runs with its flag of that name set, and its
  BasicTokenizer gets the vocabulary (as its FullTokenizer gives it)."""
  code = (
      "import json, sys\n"
      "from absl import flags\n"
      "from bert import tokenization\n"
      "request = json.load(sys.stdin)\n"
      "flags.FLAGS(['original', '--preserve_unused_tokens=%s' % request['preserve']])\n"
      "out = {}\n"
      "for name, lower in (('lower', True), ('cased', False)):\n"
      "  full = tokenization.FullTokenizer(request['vocab'], do_lower_case=lower)\n"
      "  basic = tokenization.BasicTokenizer(do_lower_case=lower, vocab=full.vocab)\n"
      "  out[name] = {'full': [full.tokenize(t) for t in request['texts']],\n"
      "               'basic': [basic.tokenize(t) for t in request['texts']]}\n"
      "json.dump(out, sys.stdout)\n")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(
      {"vocab": vocab_file, "texts": texts, "preserve": bool(preserve_unused_tokens)}),
                        capture_output=True, text=True, env=env,
                        timeout=300, cwd=REPO_ROOT)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def trained_vocab(tmp_path_factory):
  """A small vocabulary trained with build_vocab on the paragraphs plus English text."""
  directory = tmp_path_factory.mktemp("vocab")
  corpus = directory / "corpus.txt"
  english = ("the unwanted runners were running while others wanted to run. "
             "tokenization splits words into pieces; pieces make words. ") * 20
  corpus.write_text("\n".join(PARAGRAPHS + [english]) + "\n", encoding="utf-8")
  vocab_file = str(directory / "vocab.txt")
  tokens = vocabulary.build_vocab([str(corpus)], 400, vocab_file, min_frequency=2)
  return vocab_file, tokens


# ------------------------------------------------------------------------------------------------
# The original release's test cases.
# ------------------------------------------------------------------------------------------------

def test_full_tokenizer_original_case(tmp_path):
  tokenizer = tokenization.FullTokenizer(write_vocab(tmp_path / "v.txt", ORIGINAL_TEST_VOCAB))
  tokens = tokenizer.tokenize("UNwant\u00E9d,running")
  assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
  assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
  assert tokenizer.convert_ids_to_tokens([7, 4, 5, 10, 8, 9]) == tokens
  # Special-token strings in text are not special: brackets are punctuation.
  assert tokenizer.tokenize("[CLS] [unused0]") == ["[UNK]"] * 6
  assert tokenizer.vocab["##ing"] == 9 and tokenizer.inv_vocab[9] == "##ing"


def test_chinese_characters_are_split():
  assert tokenization.BasicTokenizer().tokenize("ah\u535A\u63A8zz") == ["ah", "\u535A", "\u63A8",
                                                                         "zz"]


def test_basic_tokenizer_lower_and_cased():
  text = " \tHeLLo!how  \n Are yoU?  "
  assert tokenization.BasicTokenizer(do_lower_case=True).tokenize(text) == [
      "hello", "!", "how", "are", "you", "?"]
  assert tokenization.BasicTokenizer(do_lower_case=True).tokenize("H\u00E9llo") == ["hello"]
  assert tokenization.BasicTokenizer(do_lower_case=False).tokenize(text) == [
      "HeLLo", "!", "how", "Are", "yoU", "?"]
  # Cased: accents stay.
  assert tokenization.BasicTokenizer(do_lower_case=False).tokenize("H\u00E9llo") == ["H\u00E9llo"]


def test_wordpiece_tokenizer_original_case():
  vocab = {token: i for i, token in enumerate(ORIGINAL_TEST_VOCAB[:-1])}
  tokenizer = tokenization.WordpieceTokenizer(vocab=vocab)
  assert tokenizer.tokenize("") == []
  assert tokenizer.tokenize("unwanted running") == ["un", "##want", "##ed", "runn", "##ing"]
  assert tokenizer.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
  assert tokenization.convert_tokens_to_ids(vocab, ["un", "##want", "##ed", "runn", "##ing"]) == [
      7, 4, 5, 8, 9]


def test_whitespace_control_and_punctuation_characters():
  basic = tokenization.BasicTokenizer(do_lower_case=False)
  # Whitespace: space, tab, return, newline, no-break space split words.
  assert basic.tokenize("a b\tc\rd\ne\u00A0f") == ["a", "b", "c", "d", "e", "f"]
  # Control characters disappear (no split); tab/newline/return are whitespace, not control.
  assert basic.tokenize("a\u0005b") == ["ab"]
  assert basic.tokenize("a\u200bb\u200dc") == ["abc"]
  # An emoji is neither control nor punctuation: it stays inside the word.
  assert basic.tokenize("a\U0001F4A9b") == ["a\U0001F4A9b"]
  # Punctuation: ASCII non-alphanumerics (even $ and `) and Unicode P*; letters are not.
  assert basic.tokenize("a-b$c`d.e") == ["a", "-", "b", "$", "c", "`", "d", ".", "e"]
  assert basic.tokenize("A\u00BFB\u3002C") == ["A", "\u00BF", "B", "\u3002", "C"]


def test_unknown_words(tmp_path):
  vocab = ["[UNK]", "a", "##a", "b"]
  tokenizer = tokenization.FullTokenizer(write_vocab(tmp_path / "v.txt", vocab))
  # Not splittable into vocabulary pieces -> one [UNK] per word.
  # "ab": "a" then no "##b" -> [UNK]; "ba" -> b ##a; "xyz" -> [UNK].
  assert tokenizer.tokenize("ab ba xyz a") == ["[UNK]", "b", "##a", "[UNK]", "a"]
  # Over 200 characters -> [UNK]; exactly 200 is split normally.
  assert tokenizer.tokenize("a" * 201) == ["[UNK]"]
  assert tokenizer.tokenize("a" * 200) == ["a"] + ["##a"] * 199


# ------------------------------------------------------------------------------------------------
# Paragraphs against the independent implementation and against the original code.
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("do_lower_case", [True, False])
def test_paragraphs_match_independent_implementation(trained_vocab, do_lower_case):
  vocab_file, _ = trained_vocab
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  vocab = tokenization.load_vocab(vocab_file)
  unknown = 0
  for text in PARAGRAPHS:
    words = reference_basic_tokenize(text, do_lower_case)
    assert basic.tokenize(text) == words
    expected = reference_wordpiece(words, vocab)
    assert tokenizer.tokenize(text) == expected
    unknown += expected.count("[UNK]")
  # The comparison covers both pieces and unknown words.
  assert unknown > 0
  assert any(t.startswith("##") for text in PARAGRAPHS for t in tokenizer.tokenize(text))


@pytest.mark.e2e
def test_paragraphs_match_original_bert_tokenization(trained_vocab):
  vocab_file, _ = trained_vocab
  texts = PARAGRAPHS + [" ".join(PARAGRAPHS), ""]
  original = run_original_tokenizer(vocab_file, texts)
  for name, lower in (("lower", True), ("cased", False)):
    ours = tokenization.FullTokenizer(vocab_file, do_lower_case=lower)
    basic = tokenization.BasicTokenizer(do_lower_case=lower)
    assert [basic.tokenize(t) for t in texts] == original[name]["basic"]
    assert [ours.tokenize(t) for t in texts] == original[name]["full"]
  # The final-sigma and private-use cases are in the comparison (they differ from
  # tokenizers' stock BertNormalizer).
  assert "\u03bf\u03b4\u03bf\u03c2" in original["lower"]["basic"][3]
  assert any("\ue000" in word for word in original["lower"]["basic"][4])


# Unused tokens whole, glued to punctuation, to CJK, with a control character inside, upper-cased,
# outside the vocabulary, around accents and a Greek capital sigma.
PRESERVE_TEXTS = [
    "[unused0] Caf\u00e9 [unused1]. ([unused1]) x[unused0] [unused0]y [UNUSED0] [unused99999]",
    "\u4e2d[unused12]\u6587 [unu\x05sed1] [unused1]\u00a0\u039f\u03a3 [unused12]\t[unused0]",
    "no unused tokens here, just WANTED running!",
    "",
]


@pytest.mark.e2e
def test_preserve_unused_tokens_matches_the_original(trained_vocab, tmp_path):
  _, tokens = trained_vocab
  vocab_file = write_vocab(tmp_path / "vocab.txt",
                           tokens + ["[unused0]", "[unused1]", "[unused12]"])
  original = run_original_tokenizer(vocab_file, PRESERVE_TEXTS, preserve_unused_tokens=True)
  for name, lower in (("lower", True), ("cased", False)):
    ours = tokenization.FullTokenizer(vocab_file, do_lower_case=lower,
                                      preserve_unused_tokens=True)
    basic = tokenization.BasicTokenizer(do_lower_case=lower, vocab=ours.vocab,
                                        preserve_unused_tokens=True)
    assert [basic.tokenize(t) for t in PRESERVE_TEXTS] == original[name]["basic"]
    assert [ours.tokenize(t) for t in PRESERVE_TEXTS] == original[name]["full"]
    expected_ids = [ours.convert_tokens_to_ids(ours.tokenize(t)) for t in PRESERVE_TEXTS]
    assert ours.tokenize_to_ids(PRESERVE_TEXTS) == expected_ids
    ids, lengths = ours.tokenize_lines_to_ids(PRESERVE_TEXTS)
    assert ids.tolist() == [i for line in expected_ids for i in line]
    assert lengths.tolist() == [len(line) for line in expected_ids]
  # Not vacuous: the original kept whole the whitespace-separated words only (not "[unused1].",
  # "x[unused0]", "[UNUSED0]" or "[unused99999]", which is not in the vocabulary), and words set
  # apart by CJK characters, Zs spaces or a removed control character.
  assert [t for t in original["lower"]["full"][0] if t.startswith("[unused")] == ["[unused0]"]
  assert [t for t in original["lower"]["full"][1] if t.startswith("[unused")] == [
      "[unused12]", "[unused1]", "[unused1]", "[unused12]", "[unused0]"]
  # Off by default, as the original's flag: the same text is split.
  plain = tokenization.FullTokenizer(vocab_file)
  assert "[unused0]" not in plain.tokenize(PRESERVE_TEXTS[0])


def test_character_classes_of_the_original():
  # The cases of the original's own tests, plus the edges of each rule.
  for char in (" ", "\t", "\r", "\n", "\u00a0", "\u3000"):
    assert tokenization._is_whitespace(char), repr(char)
  for char in ("A", "-", "\x0b", "\u2028"):
    assert not tokenization._is_whitespace(char), repr(char)
  for char in ("\u0005", "\x00", "\x7f", "\u200b", "\ufeff"):
    assert tokenization._is_control(char), repr(char)
  for char in ("A", " ", "\t", "\r", "\n", "\U0001F4A9"):
    assert not tokenization._is_control(char), repr(char)
  for char in ("-", "$", "`", ".", "^", "~", "\u00bf", "\u201c", "\u3002"):
    assert tokenization._is_punctuation(char), repr(char)
  for char in ("A", " ", "0", "\u00e9", "\u4e2d"):
    assert not tokenization._is_punctuation(char), repr(char)


def test_skipped_planes_hold_no_character_of_the_classes():
  """The character classes scan planes 0, 1 and 14 only; the others have none of their kinds."""
  scanned = tokenization._PLANES_WITH_THESE_CATEGORIES  # pylint: disable=protected-access
  assert [(r.start, r.stop) for r in scanned] == [(0, 0x20000), (0xE0000, 0xF0000)]
  for cp in list(range(0x20000, 0xE0000)) + list(range(0xF0000, 0x110000)):
    char = chr(cp)
    category = unicodedata.category(char)
    assert category not in ("Cc", "Cf", "Zs", "Mn") and not category.startswith("P"), hex(cp)
    assert not char.isspace(), hex(cp)


def test_batch_paths_equal_single_text(trained_vocab):
  vocab_file, _ = trained_vocab
  tokenizer = tokenization.FullTokenizer(vocab_file)
  lines = [line for text in PARAGRAPHS for line in text.replace("\r", "\n").split("\n")] + ["", "x"]
  expected = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)) for line in lines]
  assert tokenizer.tokenize_to_ids(lines) == expected
  ids, lengths = tokenizer.tokenize_lines_to_ids(lines, lines_per_chunk=3)
  offsets = np.concatenate([[0], np.cumsum(lengths)])
  assert [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(len(lines))] == expected
  assert ids.dtype == np.int32 and len(lengths) == len(lines)


def test_lines_encoded_a_batch_of_chunks_at_a_time_give_the_same_ids(trained_vocab, monkeypatch):
  vocab_file, _ = trained_vocab
  tokenizer = tokenization.FullTokenizer(vocab_file)
  lines = [line for text in PARAGRAPHS for line in text.replace("\r", "\n").split("\n")]
  expected = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)) for line in lines]
  monkeypatch.setattr(tokenization, "_BATCH_CHARS", 200)  # batches of one or two chunks
  batches = list(tokenizer._chunk_batches(lines, 2))  # pylint: disable=protected-access
  assert len(lines) == 8 and 2 <= len(batches) < 4
  ids, lengths = tokenizer.tokenize_lines_to_ids(lines, lines_per_chunk=2)
  offsets = np.concatenate([[0], np.cumsum(lengths)])
  assert [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(len(lines))] == expected


# ------------------------------------------------------------------------------------------------
# Vocabulary files.
# ------------------------------------------------------------------------------------------------

def test_load_vocab_semantics(tmp_path):
  path = write_vocab(tmp_path / "v.txt", ["[UNK]", " padded ", "dup", "dup", "last"])
  vocab = tokenization.load_vocab(path)
  # Stripped lines; a repeated token keeps its first id and the ids stay contiguous.
  assert list(vocab.items()) == [("[UNK]", 0), ("padded", 1), ("dup", 2), ("last", 3)]


def test_vocab_errors_name_the_file(tmp_path):
  with pytest.raises(ValueError, match="not found: .*nope.txt"):
    tokenization.FullTokenizer(str(tmp_path / "nope.txt"))
  no_unk = write_vocab(tmp_path / "no_unk.txt", ["a", "b"])
  with pytest.raises(ValueError, match=r"no_unk.txt lacks the special token\(s\) \[UNK\]"):
    tokenization.FullTokenizer(no_unk)


def test_validate_case_matches_checkpoint():
  tokenization.validate_case_matches_checkpoint(True, "/x/uncased_L-12_H-768_A-12/bert_model.ckpt")
  tokenization.validate_case_matches_checkpoint(False, "/x/cased_L-12_H-768_A-12/bert_model.ckpt")
  tokenization.validate_case_matches_checkpoint(False, "/x/my_model/bert_model.ckpt")
  tokenization.validate_case_matches_checkpoint(True, None)
  with pytest.raises(ValueError, match="--do_lower_case=False"):
    tokenization.validate_case_matches_checkpoint(
        False, "/x/uncased_L-12_H-768_A-12/bert_model.ckpt")
  with pytest.raises(ValueError, match="--do_lower_case=True"):
    tokenization.validate_case_matches_checkpoint(True, "/x/cased_L-24_H-1024_A-16/bert_model.ckpt")


def test_text_helpers():
  assert tokenization.convert_to_unicode(b"caf\xc3\xa9\xff") == "caf\u00e9"
  assert tokenization.printable_text("x") == "x"
  assert tokenization.whitespace_tokenize("  a b\n c ") == ["a", "b", "c"]
  assert tokenization.whitespace_tokenize("   ") == []
  with pytest.raises(ValueError):
    tokenization.convert_to_unicode(3)


@pytest.mark.e2e
def test_the_old_vocabulary_command_is_pointed_to_its_new_place():
  """`python tokenization.py build_vocab ...` (the command's spelling before it moved) ends with
  a usage error naming the new command, not silently with nothing written."""
  proc = helpers.run_python(["tokenization.py", "build_vocab", "--input_file=x",
                             "--output_file=y"], check=False, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1] == (
      "tokenization.py: error: this module has no command; the vocabulary trainer is "
      "`python -m utils.data.vocabulary` (docs/DATA.md)")
  assert not os.path.exists(os.path.join(helpers.REPO_ROOT, "y"))
