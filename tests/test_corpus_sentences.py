"""utils/corpus/sentences.py: a paragraph's sentences (blingfire and its repairs) and the bounds
on what is held at once.

The expected sentences were written by hand, not taken from the segmenter; none of these
paragraphs is in the benchmarks' samples (bench/data/sentences_labelled.txt,
sentences_wikipedia.txt), though several are shaped after sentences of English Wikipedia. What it
gets wrong is listed in docs/DECISIONS.md (section Data), not tested.
"""

import importlib.metadata
import os

import pytest

from bench import sentence_split
from utils.corpus import sentences

TRICKY_PARAGRAPHS = [
    # Abbreviations and initials inside a sentence, a sentence ending with one.
    ("The treaty was signed by the U.S. and the U.K. in 1921. It was replaced in 1947.",
     ["The treaty was signed by the U.S. and the U.K. in 1921.", "It was replaced in 1947."]),
    ("Corvane Instruments Inc. bought Pellow & Sons Ltd. in 1988. The firm was renamed Corvane "
     "Ltd. The name disappeared in 2012.",
     ["Corvane Instruments Inc. bought Pellow & Sons Ltd. in 1988.",
      "The firm was renamed Corvane Ltd.", "The name disappeared in 2012."]),
    ("The novel by J. R. Hartwell appeared in 1934. It sold well.",
     ["The novel by J. R. Hartwell appeared in 1934.", "It sold well."]),
    ("She lived on Baker St. The house is red.", ["She lived on Baker St.", "The house is red."]),
    ("Wading birds, e.g. the redshank, feed at low tide. They nest on higher ground, i.e. the salt "
     "meadows.",
     ["Wading birds, e.g. the redshank, feed at low tide.",
      "They nest on higher ground, i.e. the salt meadows."]),
    ("The ferry leaves at 9 a.m. on weekdays (at 11 a.m. on Sundays). It takes an hour.",
     ["The ferry leaves at 9 a.m. on weekdays (at 11 a.m. on Sundays).", "It takes an hour."]),
    ("Symphony No. 5 was first played in 1911. Its finale is long; its slow movement is short.",
     ["Symphony No. 5 was first played in 1911.",
      "Its finale is long; its slow movement is short."]),
    # Numbers, versions, URLs and e-mail addresses.
    ("Version 2.1 fixed a crash in v2.0.3. It needs 4.5 GB of memory.",
     ["Version 2.1 fixed a crash in v2.0.3.", "It needs 4.5 GB of memory."]),
    ("The code is at https://example.org/src/v3.0/index.html and on a mirror. Reports go to "
     "bugs@example.org or the tracker.",
     ["The code is at https://example.org/src/v3.0/index.html and on a mirror.",
      "Reports go to bugs@example.org or the tracker."]),
    # Quotations, brackets, an ellipsis, questions.
    ('The engineer replied, "Because we had green paint." The answer became a joke.',
     ['The engineer replied, "Because we had green paint."', "The answer became a joke."]),
    ("The canal (completed 1796) has 42 locks. (A 43rd lock was removed in 1840.) The towpath is "
     "a cycle route.",
     ["The canal (completed 1796) has 42 locks.", "(A 43rd lock was removed in 1840.)",
      "The towpath is a cycle route."]),
    ("The poem ends with an ellipsis... Later editions dropped it.",
     ["The poem ends with an ellipsis...", "Later editions dropped it."]),
    ("Why do birds migrate at night? One theory points to predators: hawks hunt by day!",
     ["Why do birds migrate at night?", "One theory points to predators: hawks hunt by day!"]),
    # Greek, Cyrillic and CJK words.
    ("The river is called Ульмея in Russian. Its Greek name is Ουλμεία. The temple is 白鷺寺.",
     ["The river is called Ульмея in Russian.", "Its Greek name is Ουλμεία.",
      "The temple is 白鷺寺."]),
]

# The three repairs: blingfire alone gets each of these wrong.
REPAIRED_PARAGRAPHS = [
    # 1. a break before a title opening a sentence (blingfire: one sentence).
    ("The chapel is small. St. Kessog's Church is larger.",
     ["The chapel is small.", "St. Kessog's Church is larger."]),
    # 2. a title on its own joined to its name (blingfire: "Mr." | "Holmes replied at once.").
    ("He wrote to Dr. Watson. Mr. Holmes replied at once.",
     ["He wrote to Dr. Watson.", "Mr. Holmes replied at once."]),
    # 1 and 2 (blingfire: "... in 1850." | "St." | "Mary's is older.").
    ("It was built in 1850. St. Mary's is older.", ["It was built in 1850.", "St. Mary's is older."]),
    ("The regiment came home in 1919. Lt. Col. Dana Ruiz took command.",
     ["The regiment came home in 1919.", "Lt. Col. Dana Ruiz took command."]),
    ("The painter was born c. 1520 in Ghent. Prof. Amara Whitby wrote his life.",
     ["The painter was born c. 1520 in Ghent.", "Prof. Amara Whitby wrote his life."]),
    # 3. a quoted question and its lower-case reporting clause (blingfire: split after the quote).
    ('"Is it far?" she asked. "Two miles," he said.',
     ['"Is it far?" she asked.', '"Two miles," he said.']),
    # 2. titles before a name (blingfire: "... Columbus." | "Maj." | "Gen." | "Polk ignored ...").
    ("In September 1861, Maj. Gen. Leonidas Polk occupied Columbus. Maj. Gen. Polk ignored the "
     "problems of the forts when he took command.",
     ["In September 1861, Maj. Gen. Leonidas Polk occupied Columbus.",
      "Maj. Gen. Polk ignored the problems of the forts when he took command."]),
    # 3. a list item's number (blingfire: "1." | "The Congress ...").
    ("1. The Congress of Deputies may require political responsibility from the Government.",
     ["1. The Congress of Deputies may require political responsibility from the Government."]),
]

# Repair 2, rule by rule, on the pieces blingfire gives: (pieces, the sentences they make).
JOINED_PIECES = [
    # A title: joined unless the next sentence opens with a common opening word.
    (["The fort was held by Brig.", "Gen. Lloyd Tilghman, who surrendered it."],
     ["The fort was held by Brig. Gen. Lloyd Tilghman, who surrendered it."]),
    (["Maj.", "Gen. Polk ignored the problems of the forts."],
     ["Maj. Gen. Polk ignored the problems of the forts."]),
    (["She lived on Baker St.", "The house is red."],
     ["She lived on Baker St.", "The house is red."]),
    # Initials, alone or in a group, and capitals with full stops.
    (["The novel by J. K.", "Rowling appeared in 1997."],
     ["The novel by J. K. Rowling appeared in 1997."]),
    (["She called herself Susan B.", "Anthony, approached Michael's brother and left."],
     ["She called herself Susan B. Anthony, approached Michael's brother and left."]),
    (["Nick, Veronica and L.J.", "return to New Glarus."],
     ["Nick, Veronica and L.J. return to New Glarus."]),
    (["It was ratified by the U.S.", "Senate in 1921."],
     ["It was ratified by the U.S. Senate in 1921."]),
    (["He moved to the U.S.", "In 1990 he became a citizen."],
     ["He moved to the U.S.", "In 1990 he became a citizen."]),
    (["The vitamin is called B.", "It is found in yeast."],
     ["The vitamin is called B.", "It is found in yeast."]),
    (["The border was drawn after World War I.", "Germany lost its colonies."],
     ["The border was drawn after World War I.", "Germany lost its colonies."]),
    # Latin abbreviations: always joined.
    (["Esters are formed with alcohols e.g.", "Methanol and ethanol."],
     ["Esters are formed with alcohols e.g. Methanol and ethanol."]),
    (["The house, i.e.", "The main building, burned in 1901."],
     ["The house, i.e. The main building, burned in 1901."]),
    # A reference abbreviation before a number, Arabic or Roman; not before a word.
    (["It was dissolved according to Article 68, Par.", "2 of the Basic Law."],
     ["It was dissolved according to Article 68, Par. 2 of the Basic Law."]),
    (["In accordance with the Amendment No.", "I of the Basic Law, the system changed."],
     ["In accordance with the Amendment No. I of the Basic Law, the system changed."]),
    (["The answer was no.", "Nobody came."], ["The answer was no.", "Nobody came."]),
    # 3. a list item's number.
    (["2.", "The motion may not be voted on for five days."],
     ["2. The motion may not be voted on for five days."]),
]


@pytest.mark.parametrize("paragraph, expected", TRICKY_PARAGRAPHS)
def test_tricky_paragraphs_split_as_written_by_hand(paragraph, expected):
  assert sentences.split_sentences(paragraph) == expected


@pytest.mark.parametrize("paragraph, expected", REPAIRED_PARAGRAPHS)
def test_the_repairs_mend_what_blingfire_gets_wrong(paragraph, expected):
  # Still needed: blingfire alone splits each differently (a new release may make one moot).
  assert sentences.blingfire.text_to_sentences(paragraph).split("\n") != expected
  assert sentences.split_sentences(paragraph) == expected


@pytest.mark.parametrize("pieces, expected", JOINED_PIECES)
def test_a_break_after_a_title_initial_or_abbreviation_is_removed_unless_a_sentence_opens(
    pieces, expected):
  assert sentences._joined(pieces) == expected  # pylint: disable=protected-access


def test_segmenter_names_blingfire_and_its_installed_version():
  assert sentences.SEGMENTER == "blingfire %s, repairs %d" % (
      importlib.metadata.version("blingfire"), sentences.REPAIRS_REVISION)


@pytest.mark.parametrize("blank", ["", " ", "  \t ", "\u00a0"])
def test_an_empty_or_blank_paragraph_has_no_sentence(blank):
  assert sentences.split_sentences(blank) == []


def _sample_paragraphs():
  """The benchmark sample's paragraphs, each joined into one line, and the tricky ones."""
  path = os.path.join(sentence_split.REPO_ROOT, "bench", "data", "sentences_labelled.txt")
  return ([" ".join(truth) for truth in sentence_split.read_labelled(path)]
          + [paragraph for paragraph, _ in TRICKY_PARAGRAPHS + REPAIRED_PARAGRAPHS])


def test_sentences_keep_the_text_and_none_is_empty():
  paragraphs = _sample_paragraphs()
  assert len(paragraphs) > 60
  for paragraph in paragraphs + ["  Leading and trailing spaces. Two  spaces inside.  "]:
    split = sentences.split_sentences(paragraph)
    assert split and all(s and s == s.strip() for s in split), split
    assert "".join("".join(split).split()) == "".join(paragraph.split()), paragraph


def test_a_paragraph_blingfire_does_not_give_back_is_returned_whole(monkeypatch):
  # blingfire turns a NUL into a space: the text is not kept, so the paragraph stays whole.
  assert sentences.split_sentences("One a\x00b. Two c d.") == ["One a\x00b. Two c d."]
  # Its failed call (an output buffer too small) returns nothing at all.
  monkeypatch.setattr(sentences.blingfire, "text_to_sentences", lambda text: "")
  assert sentences.split_sentences(" One. Two. ") == ["One. Two."]
  assert sentences.split_sentences("  ") == []


def _all_sample_text():
  """The sentences of both benchmark samples, joined into one paragraph of some 90 kB."""
  return " ".join(" ".join(truth) for name in ("sentences_labelled.txt", "sentences_wikipedia.txt")
                  for truth in sentence_split.read_labelled(
                      os.path.join(sentence_split.REPO_ROOT, "bench", "data", name)))


@pytest.mark.parametrize("window", [1000, 5000, 1 << 16])
def test_a_paragraph_split_window_by_window_gives_the_sentences_of_the_whole(monkeypatch, window):
  text = _all_sample_text()
  whole = sentences.split_sentences(text)
  monkeypatch.setattr(sentences, "WINDOW_CHARS", window)
  counts = sentences.SentenceCounts()
  assert list(sentences.bounded_sentences(text, counts)) == [(s, False) for s in whole]
  assert counts.long_sentences == 0 and len(whole) > 600


def test_a_paragraph_without_punctuation_is_cut_every_512_words_and_counted_once(monkeypatch):
  monkeypatch.setattr(sentences, "WINDOW_CHARS", 5000)  # 4 windows for the paragraph
  words = ["word%d" % (i % 97) for i in range(3000)]
  counts = sentences.SentenceCounts()
  pieces, continued = zip(*sentences.bounded_sentences(" ".join(words), counts))
  assert [len(piece.split()) for piece in pieces] == [512] * 5 + [3000 - 5 * 512]
  assert continued == (False,) + (True,) * 5
  assert " ".join(pieces).split() == words
  assert counts.long_sentences == 1


def test_a_paragraph_without_a_space_is_cut_into_windows(monkeypatch):
  monkeypatch.setattr(sentences, "WINDOW_CHARS", 100)
  counts = sentences.SentenceCounts()
  assert list(sentences.bounded_sentences("x" * 250, counts)) == [
      ("x" * 100, False), ("x" * 100, True), ("x" * 50, True)]
  assert counts.long_sentences == 1


def test_a_sentence_over_the_word_limit_is_cut_and_a_shorter_one_kept_as_it_is():
  counts = sentences.SentenceCounts()
  short = "A  sentence of " + "many " * 500 + "words."
  assert sentences.cut_long(short, counts) == [short] and counts.long_sentences == 0
  long_one = " ".join(str(i) for i in range(1100))
  assert sentences.cut_long(long_one, counts) == [
      " ".join(str(i) for i in range(start, min(1100, start + 512))) for start in (0, 512, 1024)]
  assert counts.long_sentences == 1
