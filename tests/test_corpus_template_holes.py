"""utils/corpus/template_holes.py: what a removed template leaves in a sentence, repaired.

The holes are those seen in English Wikipedia text after the markup is removed (docs/DECISIONS.md,
section Data); the expected sentences were written by hand.
"""

import pytest

from utils.corpus import template_holes

REPAIRED = [
    # A bracket opened on a separator, then a space before the closing bracket.
    ("Asphalt (, occasionally ), also known as bitumen, is a sticky black liquid.",
     "Asphalt (occasionally), also known as bitumen, is a sticky black liquid."),
    ("Tokyo (; officially Tokyo Metropolis) is the capital of Japan.",
     "Tokyo (officially Tokyo Metropolis) is the capital of Japan."),
    # A separator closing a bracket.
    ("Ada Lovelace (born Augusta Ada Byron, ) was an English mathematician.",
     "Ada Lovelace (born Augusta Ada Byron) was an English mathematician."),
    # An empty bracket, with the space before it; one left empty by the first repair.
    ("Paris ( ) is the capital of France.", "Paris is the capital of France."),
    ("Aikido () is a martial art.", "Aikido is a martial art."),
    ("Lyon (, ) lies on the Rhône.", "Lyon lies on the Rhône."),
    # A separator before the full stop, a separator repeated, a space before a comma.
    ("It is isolated from the nearest population by a distance of more than,.",
     "It is isolated from the nearest population by a distance of more than."),
    ("The river is long, , and wide.", "The river is long, and wide."),
    ("The summit is high , and often covered in snow.",
     "The summit is high, and often covered in snow."),
]

UNTOUCHED = [
    "The constructive vote of no confidence (in German: konstruktives Misstrauensvotum) is a "
    "variation on the motion of no confidence.",
    "In the end, only 260 votes were cast: 247 with yes, 10 with no, 3 abstaining.",
    "Estonia exports machinery (33% of all exports annually), wood and paper.",
    "(1) One-fifth of the Members of the National Assembly may submit a motion.",
    "The 2013 edition of Ethnologue reports 4 million speakers; the number is disputed.",
]


@pytest.mark.parametrize("sentence, expected", REPAIRED)
def test_each_hole_a_removed_template_leaves_is_repaired(sentence, expected):
  assert template_holes.repair(sentence) == expected


@pytest.mark.parametrize("sentence", UNTOUCHED)
def test_a_sentence_without_a_hole_is_left_as_it_is(sentence):
  assert template_holes.repair(sentence) is sentence


def test_a_sentence_that_was_only_a_hole_becomes_empty():
  assert template_holes.repair("( , )") == ""


@pytest.mark.parametrize("sentence, headless", [
    ("is a modern Japanese martial art that is split into many different styles.", True),
    ("was an American general of the Civil War.", True),
    ("are a family of birds.", True),
    ("Aikido is a modern Japanese martial art.", False),
    ("island of Saaremaa in 1261 was the last to fall.", False),
    ("iPhone users can see the old mill sites.", False),
])
def test_a_sentence_that_opens_with_its_verb_has_lost_its_subject(sentence, headless):
  assert template_holes.is_headless(sentence) == headless
