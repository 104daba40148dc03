"""Sentences of a paragraph: blingfire's sentence breaker and three repairs of its mistakes.

blingfire was chosen by measurement (`bench/sentence_split.py` on the hand-labelled sample
`bench/data/sentences_labelled.txt`; docs/DECISIONS.md, section Data): near pysbd's accuracy at
about a hundred times its speed and in time linear in the paragraph's length. It needs no
download (its model ships in the wheel).

Its one systematic mistake with ordinary encyclopedia prose is a sentence that opens with a title
or a place name's abbreviation (`Dr.`, `Mr.`, `St.`, `Mt.`, ...): it either makes the abbreviation
a sentence of its own (`... in 1850.` | `St.` | `Mary's is older.`) or misses the sentence's start
(`... is old. St. Mary's is older.`). The repairs, each measured on the sample (the decision entry
gives the figures):
  1. a break is added before such an abbreviation right after a word ending a sentence;
  2. a sentence that is only such an abbreviation is joined to the next;
  3. a sentence starting with a lower-case letter is joined to the one before it when that one
     ends with a quoted question or exclamation (`"Why?" she asked.` is one sentence).
A paragraph whose text blingfire does not give back (it turns a NUL into a space, and returns
nothing when its output buffer is too small) is returned whole, as one sentence.
"""

import importlib.metadata
import re

import blingfire

# The repairs' revision: raise it with any change of the rules below, so that the pipeline's
# settings hash (which includes SEGMENTER) redoes the sentences they split.
REPAIRS_REVISION = 1
SEGMENTER = "blingfire %s, repairs %d" % (importlib.metadata.version("blingfire"),
                                          REPAIRS_REVISION)

# Abbreviations written before a name that never end an encyclopedia sentence as written there.
_TITLES = ("Capt", "Col", "Dr", "Fr", "Gen", "Lt", "Messrs", "Mr", "Mrs", "Ms", "Mt", "Prof",
           "Rev", "Sgt", "St")
_TITLE = r"(?:%s)\." % "|".join(_TITLES)
# A sentence's end followed by a title and a capitalised name; the end is a sentence's when two
# letters or digits come before it (not an initial, not "U.S.": checked in `_break_before_titles`,
# out of the pattern, which is then fast to scan).
_STOP_BEFORE_TITLE = re.compile(r"[.!?] (?=%s [^\W\d_])" % _TITLE)
_TITLES_ALONE = re.compile(r"(?:%s )*%s$" % (_TITLE, _TITLE))
# A question or exclamation closed by a quote: ?" !" ?' !' and the typographic quotes.
_QUOTED_QUESTION_END = re.compile(r"[?!][\"'\u201d\u2019]$")


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


def _joined(pieces):
  """Repairs 2 and 3: list of sentences -> list with the wrongly broken ones joined."""
  sentences = []
  for piece in pieces:
    if sentences and (_TITLES_ALONE.match(sentences[-1]) or (
        piece[0].islower() and _QUOTED_QUESTION_END.search(sentences[-1]))):
      sentences[-1] += " " + piece
    else:
      sentences.append(piece)
  return sentences


def split_sentences(text):
  """One paragraph -> its sentences.

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
