"""The vocabulary trainer: a deterministic WordPiece vocabulary from text files, for
`tokenization.FullTokenizer`, and its command:

  python -m utils.data.vocabulary --input_file='corpus/*.txt' --output_file=vocab.txt
      [--vocab_size=8192] [--nodo_lower_case] [--min_frequency=2] [--limit_alphabet=1000]

It trains on the tokenizer's own text pipeline (`tokenization.prepare_text`,
`tokenization.basic_pipeline`), so every word is split as the tokenizer will split it.
"""

import collections
import sys

from absl import flags
from absl import logging
import tokenizers
from tokenizers import models as tk_models
from tokenizers import pre_tokenizers as tk_pre_tokenizers
from tokenizers import trainers as tk_trainers

import tokenization
from utils.core import errors
from utils.core import paths

# Marks the start of a word while training: a control character, so the tokenizer's normalizer
# has removed every occurrence from the text.
WORD_START = "\x01"
# The command, as its usage and error lines name it.
PROGRAM = "python -m utils.data.vocabulary"


def _iter_prepared_lines(input_files, do_lower_case):
  """Yields the non-blank lines of `input_files`, prepared as for tokenisation."""
  for path in input_files:
    with paths.open_file(path) as reader:
      for line in reader:
        line = line.strip()
        if line:
          yield tokenization.prepare_text(line, do_lower_case)


def _training_alphabet(input_files, do_lower_case, limit_alphabet):
  """The characters of the corpus that survive normalisation, most frequent first.

  Returns:
    list of at most `limit_alphabet` characters, by descending count, ties by code point.
  """
  counts = collections.Counter()
  for line in _iter_prepared_lines(input_files, do_lower_case):
    counts.update(line)
  sets = tokenization.codepoint_sets()
  dropped = set(sets["removed"]) | set(sets["space"])
  if do_lower_case:
    dropped |= set(sets["mark"])
  ranked = sorted((-count, char) for char, count in counts.items() if ord(char) not in dropped)
  return [char for _, char in ranked[:limit_alphabet]]


def build_vocab(input_files, vocab_size, output_file, do_lower_case=True, min_frequency=2,
                limit_alphabet=1000):
  """Trains a WordPiece vocabulary on text files and writes it, one token per line.

  Words are split exactly as `tokenization.FullTokenizer` splits them. Pieces are learnt by byte-pair-encoding
  merges (the `tokenizers` BPE trainer) on words that start with a marker character, so a piece
  with the marker becomes a word-initial token and one without it a "##" token. (The library's own
  WordPiece trainer numbers the "##" characters in hash-map order, so ties make its result change
  from run to run; this one gives the same vocabulary every time.)

  The file holds [PAD] [UNK] [CLS] [SEP] [MASK], every kept character as a word-initial and as a
  "##" token (so no word of known characters is [UNK]), then the learnt pieces in the order they
  were learnt, up to `vocab_size`; a corpus too small to fill it is padded with "[unused0]",
  "[unused1]", ... (a warning says how many).

  Args:
    input_files: list of text files (one sentence per line; blank lines are ignored).
    vocab_size: number of tokens in the written vocabulary, special tokens included.
    output_file: path of the vocabulary file to write.
    do_lower_case: train on lower-cased, accent-stripped text (uncased models).
    min_frequency: least number of occurrences of a pair for it to be merged.
    limit_alphabet: most distinct characters kept (the most frequent ones).

  Returns:
    list of the tokens written, in id order.

  Raises:
    ValueError: for a missing input file, input without any text, or a vocab_size too small for
      the special tokens and the characters.
  """
  missing = [path for path in input_files if not paths.is_file(path)]
  if not input_files or missing:
    raise ValueError("build_vocab: input file(s) not found: %s" % (missing or "(none given)"))
  alphabet = _training_alphabet(input_files, do_lower_case, limit_alphabet)
  if not alphabet:
    raise ValueError("build_vocab: no text to train on in %s" % ", ".join(input_files))
  fixed = list(tokenization.SPECIAL_TOKENS) + sorted(alphabet) + ["##" + char for char in sorted(alphabet)]
  if vocab_size < len(fixed):
    raise ValueError("build_vocab: vocab_size=%d is too small for the %d special tokens and the "
                     "%d characters (x2: word-initial and ##) of the corpus; raise vocab_size or "
                     "lower limit_alphabet" % (vocab_size, len(tokenization.SPECIAL_TOKENS), len(alphabet)))

  backend = tokenizers.Tokenizer(tk_models.BPE())
  backend.normalizer, pre_tokenizer = tokenization.basic_pipeline(do_lower_case)
  backend.pre_tokenizer = tk_pre_tokenizers.Sequence([
      pre_tokenizer,
      tk_pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme="always", split=True)])
  # Enough merges to fill the vocabulary although some duplicate the characters already in it.
  trainer = tk_trainers.BpeTrainer(
      vocab_size=vocab_size + 3 * len(alphabet) + 16, min_frequency=min_frequency,
      show_progress=False, special_tokens=[])
  backend.train_from_iterator(_iter_prepared_lines(input_files, do_lower_case), trainer)

  kept = set(alphabet)
  tokens = list(fixed)
  seen = set(tokens)
  for piece, _ in sorted(backend.get_vocab().items(), key=lambda item: item[1]):
    if piece.startswith(WORD_START):
      piece = piece[len(WORD_START):]
      token = piece
    else:
      token = "##" + piece
    if not piece or token in seen or not set(piece) <= kept:
      continue
    tokens.append(token)
    seen.add(token)
    if len(tokens) == vocab_size:
      break
  if len(tokens) < vocab_size:
    logging.warning("build_vocab: the corpus gives %d tokens; filling up to %d with [unusedN]",
                    len(tokens), vocab_size)
    tokens += ["[unused%d]" % i for i in range(vocab_size - len(tokens))]
  with paths.open_file(output_file, "w") as writer:
    writer.write("".join(token + "\n" for token in tokens))
  return tokens


def define_command_flags():
  """Defines the flags of `python -m utils.data.vocabulary` (by the command only)."""
  flags.DEFINE_string("input_file", None, "Text files: comma-separated globs.")
  flags.DEFINE_string("output_file", None, "Vocabulary file to write.")
  flags.DEFINE_integer("vocab_size", 8192, "Tokens in the vocabulary, special tokens included.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
  flags.DEFINE_integer("min_frequency", 2, "Least number of occurrences of a merged pair.")
  flags.DEFINE_integer("limit_alphabet", 1000, "Most distinct single characters kept.")
  flags.mark_flags_as_required(["input_file", "output_file"])


def command_main(argv, input_file, output_file, vocab_size, do_lower_case, min_frequency,
                 limit_alphabet):
  """`python -m utils.data.vocabulary`: trains a vocabulary on the files of --input_file and
  writes --output_file.

  Args:
    argv: the positional arguments absl left: [program].
    input_file, output_file, vocab_size, do_lower_case, min_frequency, limit_alphabet: the values
      of the flags `define_command_flags` defines.

  Raises:
    errors.UsageError: naming the argument, flag or file at fault.
  """
  if len(argv) != 1:
    raise errors.UsageError("unexpected argument(s) %s; usage: %s --input_file=GLOBS "
                            "--output_file=vocab.txt [--vocab_size=8192] [--nodo_lower_case]"
                            % (" ".join(argv[1:]), PROGRAM))
  # Sorted as a whole: the vocabulary does not depend on the order of the patterns.
  files = sorted(paths.resolve_files(paths.split_list(input_file)))
  if not files:
    raise errors.UsageError("build_vocab: no file matches --input_file=%s" % input_file)
  try:
    tokens = build_vocab(files, vocab_size, output_file, do_lower_case=do_lower_case,
                         min_frequency=min_frequency, limit_alphabet=limit_alphabet)
  except ValueError as e:
    raise errors.UsageError(str(e))  # already names build_vocab
  logging.info("build_vocab: wrote %d tokens to %s", len(tokens), output_file)


if __name__ == "__main__":
  # The command's own imports: cli (the scripts' entry, which defines --verbose) is in runtime, a
  # sibling package the library part of this module does not import.
  from utils.runtime import cli  # pylint: disable=g-import-not-at-top
  define_command_flags()

  def main(argv):
    f = flags.FLAGS
    command_main(argv, f.input_file, f.output_file, f.vocab_size, f.do_lower_case,
                 f.min_frequency, f.limit_alphabet)

  cli.run_main(main, argv=[PROGRAM] + sys.argv[1:])
