"""The holes a removed template leaves in a sentence of wiki text, repaired, and the sentences that
lost their subject to one, recognised (docs/DECISIONS.md, section Data).

Text that a template writes into a sentence ({{convert|5|km}}, {{lang|fr|...}}, {{IPA-en|...}},
{{Nihongo|Aikido|合気道}}) is not rendered (`wikitext.py`), so its punctuation is left around
nothing: "Asphalt (, occasionally ), also known as bitumen", "was born ( ) in Lyon", "in the
north,." Each repair removes what the hole leaves and nothing else:

  "(, " "(; " "(: "   -> "("       a bracket opened on a separator:  "(, occasionally )"
  " ,)" ", )"         -> ")"       a separator closing a bracket:    "(born 1950, )"
  "word )"            -> "word)"   a space before a closing bracket
  " ( )" " ()"        -> ""        an empty bracket, with the space before it
  ",." ", ."          -> "."       a separator before the full stop
  ", ," ",,"          -> ","       a separator repeated
  "word ,"            -> "word,"   a space before a comma or semicolon

A sentence that opens with a lower-case "is", "was", "are" or "were" lost its subject (the lead of
an article whose {{Nihongo}} template held its name: "is a modern Japanese martial art"): it is
dropped and counted by the caller (`is_headless`).
"""

import re

# (pattern, replacement), applied in this order.
_REPAIRS = tuple((re.compile(pattern), replacement) for pattern, replacement in (
    (r"\(\s*[,;:](?:\s*[,;:])*\s*", "("),
    (r"\s*[,;:](?:\s*[,;:])*\s*\)", ")"),
    (r"(?<=\w) +\)", ")"),
    (r"\s*\(\s*\)", ""),
    (r"\s*[,;:](?:\s*[,;:])*\s*\.", "."),
    (r",(?:\s*,)+", ","),
    (r"(?<=\w) +(?=[,;](?:\s|$))", ""),
))
# Quick test: a sentence without any of these characters has no hole.
_HOLE_SIGNS = re.compile(r"\(\s*[,;:)]|[,;:]\s*[).,]|\w +[),;]")
_HEADLESS = re.compile(r"(?:is|was|are|were)\s")


def repair(sentence):
  """A sentence -> the same with its template holes repaired (itself when it has none).

  Args:
    sentence: str, one sentence, whitespace collapsed.

  Returns:
    str, stripped; may be empty (a sentence that was only a hole, "( )").
  """
  if not _HOLE_SIGNS.search(sentence):
    return sentence
  for pattern, replacement in _REPAIRS:
    sentence = pattern.sub(replacement, sentence)
  return sentence.strip()


def is_headless(sentence):
  """Whether a sentence opens with its verb, its subject lost with a template: str -> bool."""
  return bool(_HEADLESS.match(sentence))
