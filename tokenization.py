"""WordPiece tokenisation with the interface and output of the original BERT release.

`FullTokenizer`, `BasicTokenizer` and `WordpieceTokenizer` keep the original classes, methods and
results (lower-casing and accent stripping, CJK characters split, punctuation split, control
characters dropped, greedy longest-match-first WordPiece, words over 200 characters -> `[UNK]`), but
the work runs in the `tokenizers` library (Rust, parallel over a batch):

  text -> str.lower() and NFD (Python's own Unicode tables, as the original)
       -> normalizer: drop control characters (and, when lower-casing, non-spacing marks)
       -> pre-tokenizer: isolate CJK characters and punctuation, split on whitespace
       -> WordPiece model.

The character classes are built from this Python's `unicodedata`, the tables the original uses, so
both agree character for character. `python -m utils.data.vocabulary ...` trains a vocabulary
(utils/data/vocabulary.py).
"""

import collections
import functools
import itertools
import re
import unicodedata

from absl import flags
from absl import logging
import numpy as np
import tokenizers
from tokenizers import models as tk_models
from tokenizers import normalizers as tk_normalizers
from tokenizers import pre_tokenizers as tk_pre_tokenizers

from utils.core import paths

# Tokens every BERT vocabulary starts with, in this order ([PAD] has id 0).
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Words longer than this (in characters) become [UNK], as in the original.
MAX_INPUT_CHARS_PER_WORD = 200
# `tokenize_lines_to_ids` encodes about this many characters at a time (what it holds at once).
_BATCH_CHARS = 1 << 21

# Code point ranges the original treats as CJK characters (each becomes its own token).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
_GREEK_CAPITAL_SIGMA = "\u03a3"
# Control, format, space, non-spacing mark and punctuation characters are all in planes 0, 1 and
# 14: planes 2 and 3 hold only ideographs, 4 to 13 are unassigned, 15 and 16 are private use.
_PLANES_WITH_THESE_CATEGORIES = (range(0x0, 0x20000), range(0xE0000, 0xF0000))
# Released checkpoints whose casing is known (validate_case_matches_checkpoint).
_UNCASED_MODELS = ("uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                   "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_MODELS = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16", "multi_cased_L-12_H-768_A-12")
# Vocabulary tokens that `preserve_unused_tokens` keeps whole.
_UNUSED_TOKEN_RE = re.compile(r"\[unused\d+\]")
_PRESERVE_UNUSED_TOKENS_FLAG = "preserve_unused_tokens"

# The original release defines this flag in its tokenization module and its tokenizers read it;
# scripts and tests written for the release set it (e.g. `--preserve_unused_tokens` on the command
# line). It is consulted only when a tokenizer is built without an explicit
# `preserve_unused_tokens` argument.
flags.DEFINE_bool(
    _PRESERVE_UNUSED_TOKENS_FLAG, False,
    "Keep vocabulary tokens such as [unused0] whole: neither lower-cased, split on "
    "punctuation nor split into WordPieces.")


def convert_to_unicode(text):
  """Returns `text` as str; bytes are decoded as UTF-8, invalid bytes dropped (as the original)."""
  if isinstance(text, str):
    return text
  if isinstance(text, bytes):
    return text.decode("utf-8", "ignore")
  raise ValueError("unsupported string type: %s" % type(text))


def printable_text(text):
  """Returns `text` as a str suitable for printing or logging."""
  return convert_to_unicode(text)


def whitespace_tokenize(text):
  """Splits `text` on whitespace (Python's definition); returns a list of str, [] for blank text."""
  return text.split()


def load_vocab(vocab_file):
  """Reads a vocabulary file, one token per line; the id of a token is its line number.

  As in the original, each line is stripped of surrounding whitespace and a repeated token keeps
  the id of its first occurrence (later lines shift up by one).

  Args:
    vocab_file: path of the vocabulary file.

  Returns:
    OrderedDict token (str) -> id (int), ids 0..len-1 in file order.

  Raises:
    ValueError: naming the file when it does not exist or is not UTF-8 text.
  """
  vocab = collections.OrderedDict()
  try:
    with paths.open_file(vocab_file) as reader:
      for line in reader:
        token = line.strip()
        if token not in vocab:
          vocab[token] = len(vocab)
  except FileNotFoundError:
    raise ValueError("vocabulary file not found: %s" % vocab_file)
  except UnicodeDecodeError as e:
    raise ValueError("vocabulary file %s is not UTF-8 text: %s" % (vocab_file, e))
  return vocab


def check_special_tokens(vocab, vocab_file, required=("[UNK]", "[CLS]", "[SEP]", "[MASK]")):
  """Raises ValueError naming `vocab_file` and the missing tokens when `vocab` lacks any of them."""
  missing = [token for token in required if token not in vocab]
  if missing:
    raise ValueError("vocabulary %s lacks the special token(s) %s (a BERT vocabulary starts "
                     "with %s)" % (vocab_file, " ".join(missing), " ".join(SPECIAL_TOKENS)))


def convert_by_vocab(vocab, items):
  """Maps every item through `vocab` (tokens -> ids or ids -> tokens); returns a list."""
  return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab, tokens):
  """Tokens -> ids with `vocab` (token -> id)."""
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
  """Ids -> tokens with `inv_vocab` (id -> token)."""
  return convert_by_vocab(inv_vocab, ids)


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Raises ValueError when `do_lower_case` contradicts the casing of a released checkpoint.

  Only the released Google checkpoints are recognised, from the directory that holds
  `bert_model.ckpt`; any other path passes.

  Args:
    do_lower_case: the casing flag the job runs with.
    init_checkpoint: checkpoint path, or None / "".
  """
  if not init_checkpoint:
    return
  match = re.match(r"^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
  if match is None:
    return
  model_name = match.group(1)
  if model_name in _UNCASED_MODELS and not do_lower_case:
    wrong, kind, right = "False", "lower-cased", "True"
  elif model_name in _CASED_MODELS and do_lower_case:
    wrong, kind, right = "True", "cased", "False"
  else:
    return
  raise ValueError("--do_lower_case=%s does not match --init_checkpoint=%s: %s is a %s model, "
                   "pass --do_lower_case=%s" % (wrong, init_checkpoint, model_name, kind, right))


def preserve_token(token, vocab, preserve_unused_tokens=None):
  """True when `token` (a whitespace-separated word) is kept whole: preservation is on, and the
  token is an "[unusedN]" token of `vocab`.

  Args:
    token: str.
    vocab: container of the vocabulary's tokens.
    preserve_unused_tokens: bool, or None for the `--preserve_unused_tokens` flag.
  """
  if not _preserves_unused_tokens(preserve_unused_tokens):
    return False
  return token in vocab and _UNUSED_TOKEN_RE.fullmatch(token) is not None


def _preserves_unused_tokens(preserve_unused_tokens):
  """`preserve_unused_tokens`, or when it is None the value of the `--preserve_unused_tokens` flag
  (its default if the flags are not parsed)."""
  if preserve_unused_tokens is None:
    return bool(flags.FLAGS[_PRESERVE_UNUSED_TOKENS_FLAG].value)
  return bool(preserve_unused_tokens)


def _preserved_tokens(vocab, preserve_unused_tokens):
  """The tokens of `vocab` that are kept whole (a frozenset; empty when preservation is off)."""
  if not _preserves_unused_tokens(preserve_unused_tokens):
    return frozenset()
  return frozenset(token for token in vocab if _UNUSED_TOKEN_RE.fullmatch(token))


@functools.lru_cache(maxsize=None)
def _cjk_python_re():
  return re.compile("[%s]" % "".join("%s-%s" % (chr(low), chr(high)) for low, high in _CJK_RANGES))


def _split_at_preserved(text, preserved):
  """Splits text into the words kept whole and the runs of text between them.

  Words are found as the original finds them before its preservation check: removed characters
  dropped, whitespace characters made spaces, CJK characters set apart, then split on whitespace.

  Args:
    text: str or UTF-8 bytes.
    preserved: set of the words kept whole.

  Returns:
    list of (is_preserved, str): a preserved word, or the other words joined by spaces (to be
    tokenized as usual).
  """
  text = convert_to_unicode(text)
  cleaned = "".join(" " if _is_whitespace(c) else c for c in text if not _is_removed(c))
  words = _cjk_python_re().sub(r" \g<0> ", cleaned).split()
  segments, pending = [], []
  for word in words:
    if word in preserved:
      if pending:
        segments.append((False, " ".join(pending)))
        pending = []
      segments.append((True, word))
    else:
      pending.append(word)
  if pending:
    segments.append((False, " ".join(pending)))
  return segments


def _tokenize_preserving(text, preserved, tokenize):
  """`tokenize` applied to the text between the preserved words, which are kept as they are."""
  tokens = []
  for is_preserved, piece in _split_at_preserved(text, preserved):
    tokens.extend([piece] if is_preserved else tokenize(piece))
  return tokens


def _ranges_to_class(codepoints):
  """Sorted code points -> an Oniguruma character class such as "[\\x{41}-\\x{5A}\\x{5F}]"."""
  body = "".join("\\x{%X}" % a if a == b else "\\x{%X}-\\x{%X}" % (a, b)
                 for a, b in _runs(codepoints))
  return "[" + body + "]"


def _is_whitespace(char):
  """True for the characters the original splits words on: space, tab, newline, return, Zs."""
  return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char):
  """True for control and format characters (Cc, Cf), which are removed; tab, newline and return
  count as whitespace instead."""
  if char in "\t\n\r":
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
  """True for ASCII non-alphanumeric printable characters (such as "^", "$", "`") and Unicode
  punctuation (P*): each becomes a token of its own."""
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def _is_removed(char):
  """True for the characters the original drops before anything else: NUL, U+FFFD, controls."""
  return char in "\x00\ufffd" or _is_control(char)


@functools.lru_cache(maxsize=None)
def codepoint_sets():
  """The original's character categories (`_is_removed`, `_is_whitespace`, `_is_punctuation`), as
  sorted code point lists.

  Returns:
    dict of sorted code point lists: "removed" (NUL, U+FFFD, control and format characters other
    than tab, newline and return), "space" (tab, newline, return, Zs and the other characters
    str.split() splits on, unless removed), "mark" (non-spacing marks: the stripped accents),
    "punctuation" (ASCII non-alphanumerics and Unicode P*) and "cjk".
  """
  removed, space, mark, punctuation = [], [], [], []
  for cp in itertools.chain(*_PLANES_WITH_THESE_CATEGORIES):
    char = chr(cp)
    if _is_removed(char):
      removed.append(cp)
    elif _is_whitespace(char) or char.isspace():
      space.append(cp)
    elif unicodedata.category(char) == "Mn":
      mark.append(cp)
    if _is_punctuation(char):
      punctuation.append(cp)
  cjk = sorted(cp for low, high in _CJK_RANGES for cp in range(low, high + 1))
  return {"removed": removed, "space": space, "mark": mark, "punctuation": punctuation,
          "cjk": cjk}


@functools.lru_cache(maxsize=None)
def _character_classes():
  """`codepoint_sets` as Oniguruma classes, plus "removed_python", a class for Python's `re`."""
  sets = codepoint_sets()
  classes = {name: _ranges_to_class(codepoints) for name, codepoints in sets.items()}
  classes["removed_python"] = "[" + "".join(
      re.escape(chr(a)) if a == b else "%s-%s" % (re.escape(chr(a)), re.escape(chr(b)))
      for a, b in _runs(sets["removed"])) + "]"
  return classes


def _runs(codepoints):
  """Sorted code points -> list of (first, last) runs of consecutive values."""
  runs = []
  for cp in codepoints:
    if runs and cp == runs[-1][1] + 1:
      runs[-1][1] = cp
    else:
      runs.append([cp, cp])
  return [tuple(run) for run in runs]


@functools.lru_cache(maxsize=None)
def _removed_python_re():
  return re.compile(_character_classes()["removed_python"])


def prepare_text(text, do_lower_case):
  """The steps that run in Python before the Rust pipeline: str.lower() and NFD.

  The original lower-cases with Python's str.lower(), whose Greek final-sigma rule looks at the
  neighbouring characters; when the text has a capital sigma, the characters the original removes
  first are removed here too, so the rule sees the same neighbours.

  Args:
    text: str or bytes.
    do_lower_case: lower-case and decompose (the accents are dropped later, in Rust).

  Returns:
    str.
  """
  text = convert_to_unicode(text)
  if not do_lower_case:
    return text
  if _GREEK_CAPITAL_SIGMA in text:
    text = _removed_python_re().sub("", text)
  return unicodedata.normalize("NFD", text.lower())


def basic_pipeline(do_lower_case):
  """The normalizer and pre-tokenizer of `BasicTokenizer` (after `prepare_text`).

  Characters are removed in one pass (control characters, and the non-spacing marks when
  lower-casing); CJK characters and punctuation are isolated in one pass; whitespace splits last.
  The whitespace characters of the original are exactly those `WhitespaceSplit` splits on (checked
  here; should a future library disagree, they are mapped to " " first).

  Returns:
    (normalizer, pre_tokenizer) of the `tokenizers` library.
  """
  classes = _character_classes()
  removed = classes["removed"]
  if do_lower_case:
    removed = removed[:-1] + classes["mark"][1:]
  steps = [tk_normalizers.Replace(tokenizers.Regex(removed), "")]
  if not _whitespace_split_matches():
    steps.append(tk_normalizers.Replace(tokenizers.Regex(classes["space"]), " "))
  normalizer = steps[0] if len(steps) == 1 else tk_normalizers.Sequence(steps)
  isolated = classes["cjk"][:-1] + classes["punctuation"][1:]
  pre_tokenizer = tk_pre_tokenizers.Sequence([
      tk_pre_tokenizers.Split(tokenizers.Regex(isolated), "isolated"),
      tk_pre_tokenizers.WhitespaceSplit(),
  ])
  return normalizer, pre_tokenizer


@functools.lru_cache(maxsize=None)
def _whitespace_split_matches():
  """True when `WhitespaceSplit` splits on every whitespace character of the original."""
  spaces = [chr(cp) for a, b in _runs(codepoint_sets()["space"]) for cp in range(a, b + 1)]
  text = "x" + "x".join(spaces) + "x"
  pieces = tk_pre_tokenizers.WhitespaceSplit().pre_tokenize_str(text)
  return [piece for piece, _ in pieces] == ["x"] * (len(spaces) + 1)


def _wordpiece_model(vocab, unk_token, max_input_chars_per_word):
  """A `tokenizers` WordPiece model over `vocab` (token -> id)."""
  if unk_token not in vocab:
    raise ValueError("the vocabulary has no unknown token %r" % unk_token)
  return tk_models.WordPiece(vocab=dict(vocab), unk_token=unk_token,
                             max_input_chars_per_word=max_input_chars_per_word,
                             continuing_subword_prefix="##")


class BasicTokenizer(object):
  """Splits text into words and punctuation, lower-cases and strips accents (optional)."""

  def __init__(self, do_lower_case=True, vocab=tuple(), preserve_unused_tokens=None):
    """Builds the tokenizer.

    Args:
      do_lower_case: lower-case the text and strip accents.
      vocab: container of the vocabulary's tokens; only its "[unusedN]" tokens matter, and only
        with preservation on.
      preserve_unused_tokens: keep the "[unusedN]" words of `vocab` whole (not lower-cased, not
        split on punctuation); None: the `--preserve_unused_tokens` flag, as the original.
    """
    self.do_lower_case = do_lower_case
    self.vocab = vocab
    self._preserved = _preserved_tokens(vocab, preserve_unused_tokens)
    self._normalizer, self._pre_tokenizer = basic_pipeline(do_lower_case)

  def tokenize(self, text):
    """Text (str or UTF-8 bytes) -> list of str words and punctuation characters."""
    if self._preserved:
      return _tokenize_preserving(text, self._preserved, self._tokenize_plain)
    return self._tokenize_plain(text)

  def _tokenize_plain(self, text):
    normalized = self._normalizer.normalize_str(prepare_text(text, self.do_lower_case))
    return [piece for piece, _ in self._pre_tokenizer.pre_tokenize_str(normalized)]


class WordpieceTokenizer(object):
  """Greedy longest-match-first WordPiece over a fixed vocabulary."""

  def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD):
    """Builds the tokenizer.

    Args:
      vocab: dict token -> id; continuation pieces start with "##".
      unk_token: token for words that cannot be split into vocabulary pieces; must be in `vocab`.
      max_input_chars_per_word: longer words (in characters) become `unk_token`.

    Raises:
      ValueError: when `unk_token` is not in `vocab`.
    """
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word
    self._backend = tokenizers.Tokenizer(
        _wordpiece_model(vocab, unk_token, max_input_chars_per_word))

  def tokenize(self, text):
    """Whitespace-separated words (already basic-tokenized) -> list of WordPiece tokens.

    For example "unaffable" -> ["un", "##aff", "##able"].
    """
    words = whitespace_tokenize(convert_to_unicode(text))
    if not words:
      return []
    return self._backend.encode(words, is_pretokenized=True, add_special_tokens=False).tokens


class FullTokenizer(object):
  """Basic tokenisation followed by WordPiece: raw text -> WordPiece tokens and ids."""

  def __init__(self, vocab_file, do_lower_case=True, preserve_unused_tokens=None):
    """Loads the vocabulary and builds the pipeline.

    Args:
      vocab_file: vocabulary file, one token per line.
      do_lower_case: lower-case and strip accents (uncased models).
      preserve_unused_tokens: keep the vocabulary's "[unusedN]" tokens whole when they appear as
        words of the text; None: the `--preserve_unused_tokens` flag (read now), as the original.
        With it on and such tokens in the vocabulary, text is split at them in Python first,
        which is slower.

    Raises:
      ValueError: naming the file when it is missing, unreadable or has no "[UNK]".
    """
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.do_lower_case = do_lower_case
    check_special_tokens(self.vocab, vocab_file, required=("[UNK]",))
    self._preserved = _preserved_tokens(self.vocab, preserve_unused_tokens)
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case, vocab=self.vocab,
                                          preserve_unused_tokens=bool(self._preserved))
    self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
    # One Rust pipeline for both steps, assembled from the parts the two tokenizers above built.
    self._backend = tokenizers.Tokenizer(self.wordpiece_tokenizer._backend.model)
    self._backend.normalizer = self.basic_tokenizer._normalizer
    self._backend.pre_tokenizer = self.basic_tokenizer._pre_tokenizer
    self._lines = None  # (tokenizer, separator id) of tokenize_lines_to_ids, built on first use

  def tokenize(self, text):
    """Raw text (str or UTF-8 bytes) -> list of WordPiece tokens (str)."""
    if self._preserved:
      return _tokenize_preserving(text, self._preserved, self._tokenize_plain)
    return self._tokenize_plain(text)

  def _tokenize_plain(self, text):
    prepared = prepare_text(text, self.do_lower_case)
    return self._backend.encode(prepared, add_special_tokens=False).tokens

  def tokenize_to_ids(self, texts):
    """Tokenizes many texts at once, in parallel, straight to ids.

    Args:
      texts: list of str.

    Returns:
      list (one per text) of lists of int token ids; equal to
      `[convert_tokens_to_ids(tokenize(t)) for t in texts]`.
    """
    if self._preserved:
      return [self.convert_tokens_to_ids(self.tokenize(text)) for text in texts]
    prepared = [prepare_text(text, self.do_lower_case) for text in texts]
    encodings = self._backend.encode_batch_fast(prepared, add_special_tokens=False)
    return [encoding.ids for encoding in encodings]

  def tokenize_lines_to_ids(self, lines, lines_per_chunk=256):
    """Tokenizes many lines at once, in parallel, into one flat array of ids.

    Lines are joined with "\\n" into chunks, which the Rust side tokenizes in parallel with "\\n"
    as a separator token; this avoids one Python object per line.

    Args:
      lines: list of str, none containing "\\n".
      lines_per_chunk: lines per chunk.

    Returns:
      (ids, lengths): int32 [total tokens] and int64 [len(lines)]; the ids of line i are
      `ids[offsets[i]:offsets[i + 1]]` with `offsets = [0] + cumsum(lengths)`, equal to
      `convert_tokens_to_ids(tokenize(lines[i]))`.
    """
    backend, separator = self._lines_backend()
    if not lines:
      return np.zeros([0], np.int32), np.zeros([0], np.int64)
    if self._preserved:
      per_line = self.tokenize_to_ids(lines)
      return (np.array([i for ids in per_line for i in ids], np.int32),
              np.array([len(ids) for ids in per_line], np.int64))
    pieces = []
    # The library's encodings take some 200 bytes a token: they are made a batch of chunks at a
    # time, so that only one batch's are held, whatever the input's size.
    for chunks in self._chunk_batches(lines, lines_per_chunk):
      for encoding in backend.encode_batch_fast(chunks, add_special_tokens=False):
        pieces.append(np.asarray(encoding.ids, dtype=np.int32))
        pieces.append(np.array([separator], np.int32))
    flat = np.concatenate(pieces)
    is_separator = flat == separator
    ends = np.flatnonzero(is_separator)
    if len(ends) != len(lines):
      raise ValueError("tokenize_lines_to_ids: a line contains a newline")
    lengths = np.diff(ends, prepend=-1) - 1
    return flat[~is_separator], lengths.astype(np.int64)

  def _chunk_batches(self, lines, lines_per_chunk):
    """Lines -> lists of chunks (`lines_per_chunk` lines joined by "\\n", prepared), each list of
    at most _BATCH_CHARS characters unless it is one chunk."""
    batch, size = [], 0
    for i in range(0, len(lines), lines_per_chunk):
      chunk = prepare_text("\n".join(lines[i:i + lines_per_chunk]), self.do_lower_case)
      if batch and size + len(chunk) > _BATCH_CHARS:
        yield batch
        batch, size = [], 0
      batch.append(chunk)
      size += len(chunk)
    if batch:
      yield batch

  def _lines_backend(self):
    """The pipeline of `tokenize` plus "\\n" as an extra token; returns (tokenizer, its id)."""
    if self._lines is None:
      backend = tokenizers.Tokenizer.from_str(self._backend.to_str())
      backend.add_tokens([tokenizers.AddedToken("\n", normalized=False)])
      self._lines = (backend, backend.token_to_id("\n"))
    return self._lines

  def convert_tokens_to_ids(self, tokens):
    """Tokens -> ids (KeyError for a token outside the vocabulary)."""
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    """Ids -> tokens (KeyError for an id outside the vocabulary)."""
    return convert_by_vocab(self.inv_vocab, ids)



if __name__ == "__main__":
  # The vocabulary trainer's command was `python tokenization.py build_vocab` before it moved to
  # its own module: a user's old script is told where it went instead of ending silently.
  import sys  # pylint: disable=g-import-not-at-top
  sys.stderr.write("tokenization.py: error: this module has no command; the vocabulary trainer is "
                   "`python -m utils.data.vocabulary` (docs/DATA.md)\n")
  sys.exit(2)
