"""Sentences of a paragraph: blingfire's sentence breaker, repairs of its mistakes, and a bound on
the text held at once.

blingfire was chosen by measurement (`bench/sentence_split.py` on the hand-labelled sample
`bench/data/sentences_labelled.txt`; docs/DECISIONS.md, section Data): near pysbd's accuracy at
about a hundred times its speed and in time linear in the paragraph's length. The repairs are
measured on real Wikipedia text too (`bench/wiki_sentences.py`). It needs no download (its
model ships in the wheel).

Its mistakes with encyclopedia prose are breaks after an abbreviation that does not end the
sentence (`Maj.` | `Gen. Polk ignored ...`, `Susan B.` | `Anthony`, `Article 68, Par.` | `2 of
the Basic Law`, a list item's number `1.` | `The Congress ...`) and a sentence that opens with a
title, missed (`... is old. St. Mary's is older.`). The repairs, each measured on the samples (the
decision entry gives the figures):
  1. a break is added before a title right after a word ending a sentence;
  2. a break after a title (`Dr.`, `Gen.`, `St.`, ...), an initial (`B.`) or capitals with full
     stops (`U.S.`, `L.J.`) is removed unless the next sentence opens with one of the words that
     commonly open a sentence (`The`, `In`, `He`, ...: `She lived on Baker St.` | `The house is
     red.` stays); after `e.g.`, `i.e.`, `cf.`, `viz.` it is always removed; after a reference
     abbreviation (`No.`, `Par.`, `para.`, `Art.`, `p.`, `vol.`, ...) before a number, too;
  3. a sentence that is only a list item's number (`1.`) is joined to the next;
  4. a sentence starting with a lower-case letter is joined to the one before it when that one
     ends with a quoted question or exclamation (`"Why?" she asked.` is one sentence).
A paragraph whose text blingfire does not give back (it turns a NUL into a space, and returns
nothing when its output buffer is too small) is returned whole, as one sentence.

Bounds (`bounded_sentences`): a paragraph is split in windows of about WINDOW_CHARS characters,
the last sentence of a window carried into the next, so that no more than a window and a sentence
are held at once however long the paragraph; a sentence of more than MAX_SENTENCE_WORDS words is
cut into pieces of that many words (and counted).
"""

import importlib.metadata
import re

import blingfire

# The repairs' revision: raise it with any change of the rules below, so that the pipeline's
# settings hash (which includes SEGMENTER) redoes the sentences they split.
REPAIRS_REVISION = 2
SEGMENTER = "blingfire %s, repairs %d" % (importlib.metadata.version("blingfire"),
                                          REPAIRS_REVISION)
# The most words a sentence keeps: the longest sequence BERT's 512 positions hold (a longer
# sentence can never be one record's segment whole). A longer one is cut into pieces of this many
# words, counted as a long sentence.
MAX_SENTENCE_WORDS = 512
# A paragraph longer than this (characters) is split window by window.
WINDOW_CHARS = 1 << 16

# Abbreviations written before a name that never end an encyclopedia sentence as written there.
_TITLES = ("Adm", "Brig", "Capt", "Col", "Cpl", "Dr", "Fr", "Gen", "Gov", "Hon", "Lt", "Maj",
           "Messrs", "Mr", "Mrs", "Ms", "Mt", "Prof", "Rep", "Rev", "Sen", "Sgt", "St")
_TITLE = r"(?:%s)\." % "|".join(_TITLES)
# A sentence's end followed by a title and a capitalised name; the end is a sentence's when two
# letters or digits come before it (not an initial, not "U.S.": checked in `_break_before_titles`,
# out of the pattern, which is then fast to scan).
_STOP_BEFORE_TITLE = re.compile(r"[.!?] (?=%s [^\W\d_])" % _TITLE)
# The last word of a sentence that is a title, an initial or capitals with full stops: joined to
# the next sentence unless that one opens with a common opening word (`_OPENERS`). "I." alone is
# left out: it ends a sentence as a Roman numeral ("after World War I. Germany ...").
_NAME_PART = re.compile(r"%s|[A-HJ-Z]\.|[A-Z]\.(?:[A-Z]\.)+" % _TITLE)
# Latin abbreviations that never end a sentence.
_NEVER_END = re.compile(r"(?:e\.g|i\.e|cf|viz)\.")
# Reference abbreviations, joined to a next sentence that starts with a number (Arabic or Roman).
_REFERENCE = re.compile(r"(?:No|Nos|no|Art|art|Par|para|Para|p|pp|vol|Vol|ch|Ch|sec|Sec|Fig|fig)\.")
_NUMBER_START = re.compile(r"(?:\d|[IVX]+\b)")
# Words that open many sentences: after one of these, a title or an initial ended the sentence.
_OPENERS = frozenset((
    "A", "After", "Also", "Although", "An", "And", "As", "At", "Before", "But", "By", "During",
    "Each", "For", "From", "He", "Her", "His", "However", "I", "If", "In", "It", "Its", "Later",
    "Many", "Most", "On", "One", "She", "Since", "Some", "That", "The", "Their", "There", "These",
    "They", "This", "Those", "Thus", "To", "Today", "Two", "Under", "We", "When", "While", "With"))
# A list item's number: "1.", "12.", "iv.".
_LIST_NUMBER = re.compile(r"(?:\d{1,3}|[ivx]{1,4})\.")
# A question or exclamation closed by a quote: ?" !" ?' !' and the typographic quotes.
_QUESTION_MARKS, _CLOSING_QUOTES = "?!", "\"'\u201d\u2019"


def _break_before_titles(lines):
  """Repair 1: blingfire's output (a sentence a line) -> the same with a line break added
  between a sentence's end and a title opening the next sentence."""
  def replace(match):
    before = lines[max(0, match.start() - 2):match.start()]
    return match.group(0)[0] + "\n" if len(before) == 2 and before.isalnum() else match.group(0)
  return _STOP_BEFORE_TITLE.sub(replace, lines)


def _non_space(text):
  """`text` without its whitespace: what a split must keep, in order."""
  return "".join(text.split())


def _continues(sentence, following):
  """Whether `following` continues `sentence` (repairs 2 to 4): str, str -> bool. Only the last
  word of `sentence` is looked at, so the test takes the same time for any sentence."""
  if sentence[-1] == ".":
    last = sentence[sentence.rfind(" ") + 1:]
    if last == sentence and _LIST_NUMBER.fullmatch(last):
      return True
    last = last.lstrip("(\"'\u201c")
    if _NEVER_END.fullmatch(last):
      return True
    if _REFERENCE.fullmatch(last) and _NUMBER_START.match(following):
      return True
    if _NAME_PART.fullmatch(last):
      return following.split(" ", 1)[0].strip("\"'(\u201c") not in _OPENERS
    return False
  return (following[0].islower() and sentence[-1] in _CLOSING_QUOTES and len(sentence) > 1
          and sentence[-2] in _QUESTION_MARKS)


def _joined(pieces):
  """Repairs 2 to 4: list of sentences -> list with the wrongly broken ones joined."""
  sentences = []
  for piece in pieces:
    if sentences and _continues(sentences[-1], piece):
      sentences[-1] += " " + piece
    else:
      sentences.append(piece)
  return sentences


def split_sentences(text):
  """One paragraph -> its sentences (the whole paragraph at once: `bounded_sentences` bounds it).

  Args:
    text: str, one paragraph (no newline inside).

  Returns:
    list of str: the sentences, in order, stripped, none empty ([] for an empty or blank
    paragraph). Joined, they hold the paragraph's non-space characters in order.
  """
  lines = _break_before_titles(blingfire.text_to_sentences(text)).split("\n")
  sentences = _joined([line.strip() for line in lines if line.strip()])
  # blingfire changes only spaces, but for a NUL or a failed call (no output at all): the check
  # is one comparison for a paragraph single-spaced already.
  if " ".join(sentences) != text and _non_space("".join(sentences)) != _non_space(text):
    return [text.strip()] if text.strip() else []
  return sentences


class SentenceCounts(object):
  """What bounding did to a stream's sentences.

  Attributes:
    long_sentences: sentences of more than MAX_SENTENCE_WORDS words (or WINDOW_CHARS characters),
      each cut into pieces.
  """

  def __init__(self):
    self.long_sentences = 0


def cut_long(sentence, counts, continued=False):
  """A sentence -> [itself], or its pieces when it has more than MAX_SENTENCE_WORDS words or
  WINDOW_CHARS characters: MAX_SENTENCE_WORDS words each, whitespace collapsed, a word longer
  than WINDOW_CHARS cut into pieces of that many characters.

  Args:
    sentence: str.
    counts: `SentenceCounts`: a cut sentence is counted, unless `continued` (the rest of one
      counted already).

  Returns:
    list of str, each at most MAX_SENTENCE_WORDS words and WINDOW_CHARS characters.
  """
  if len(sentence) <= min(MAX_SENTENCE_WORDS * 2, WINDOW_CHARS):  # too short to be cut
    return [sentence]
  words = sentence.split()
  if len(words) <= MAX_SENTENCE_WORDS and len(sentence) <= WINDOW_CHARS:
    return [sentence]
  counts.long_sentences += not continued
  pieces = [" ".join(words[i:i + MAX_SENTENCE_WORDS])
            for i in range(0, len(words), MAX_SENTENCE_WORDS)]
  return [piece[i:i + WINDOW_CHARS] for piece in pieces
          for i in range(0, len(piece), WINDOW_CHARS)]


def _windows(text):
  """A paragraph -> its consecutive pieces of at most WINDOW_CHARS characters, each cut after a
  space when there is one (joined, they are the paragraph)."""
  start = 0
  while start < len(text):
    end = min(len(text), start + WINDOW_CHARS)
    if end < len(text):
      space = text.rfind(" ", start, end)
      end = space + 1 if space > start else end
    yield text[start:end]
    start = end


def _pieces(sentence, counts, continued):
  """`cut_long`'s pieces, each with whether it continues a sentence (not its first piece)."""
  return [(piece, continued or i > 0)
          for i, piece in enumerate(cut_long(sentence, counts, continued))]


def bounded_sentences(text, counts, split=split_sentences):
  """One paragraph -> its sentences, holding at most a window of it and a sentence's last
  WINDOW_CHARS characters at a time.

  A paragraph of at most WINDOW_CHARS characters is split as a whole (`split_sentences`); a
  longer one window by window (`_windows`), the last sentence of each window split again with the
  next window. Every sentence is cut to MAX_SENTENCE_WORDS words at most (`cut_long`).

  Args:
    text: str, one paragraph.
    counts: `SentenceCounts`, updated.
    split: the split of one window: str -> list of str.

  Yields:
    (sentence, continued): str, the sentences (or pieces of a sentence cut) in order, none empty;
    bool, whether it continues a cut sentence (a piece after its first).
  """
  carried, continued = "", False
  for window in _windows(text):
    sentences = split(carried + window)
    if not sentences:
      continue
    last = sentences.pop()
    for sentence in sentences:
      yield from _pieces(sentence, counts, continued)
      continued = False
    if len(last) > WINDOW_CHARS:  # held back for the next window: its last piece only
      pieces = _pieces(last, counts, continued)
      yield from pieces[:-1]
      last, continued = pieces[-1][0], True
    # The window's own space after its last sentence, if any (blingfire strips it).
    carried = last + (" " if window[-1].isspace() else "")
  if carried.strip():
    yield from _pieces(carried.strip(), counts, continued)
