"""bench/wiki_sentences.py (sentences of real Wikipedia text, ours beside NVIDIA's route) and
bench/corpus_memory.py (peak memory per stage on a dump with one huge page): their pieces by
hand, and their quick runs."""

import bz2
import json
import os

import pytest

from bench import corpus_memory
from bench import sentence_split
from bench import wiki_sentences
from utils.corpus import wikidump
from utils.corpus import wikitext


def test_the_hand_labelled_sample_is_the_fragments_text_split_into_sentences():
  labelled = sentence_split.read_labelled(wiki_sentences.SAMPLE)
  assert len(labelled) == 129 and sum(len(p) for p in labelled) == 396
  # Every line a sentence: none empty, none with a line break or a leading or trailing space.
  assert all(s and s == s.strip() for paragraph in labelled for s in paragraph)
  # Each labelled paragraph is one of the fragment's paragraphs as the markup removal gives them.
  paragraphs = {paragraph for page in wikidump.iter_articles(wiki_sentences.DUMP)
                for paragraph in wikitext.article_paragraphs(page.text)}
  for sentences in labelled:
    assert " ".join(sentences) in paragraphs, sentences[0]


def test_residue_counts_each_sentence_once_per_pattern():
  counts = wiki_sentences.residue([
      "A [[link]] and [[another]].", "Asphalt (, occasionally ), also known as bitumen.",
      "Maj.", "is a modern Japanese martial art.", "Caf&amp;eacute; ( ) is here,.",
      "A clean sentence."])
  assert counts == {"[[": 1, "{{": 0, "&lt;": 0, "&amp;": 1, "|": 0, "(, ": 1, "( )": 1,
                    ",.": 1, "a title or initial alone": 1, "opens with its verb": 1}


def test_a_fragment_without_siteinfo_gets_one_for_wikiextractor(tmp_path):
  path = str(tmp_path / "dump.xml")
  wiki_sentences.with_siteinfo(wiki_sentences.DUMP, path)
  with open(path, encoding="utf-8") as reader:
    text = reader.read()
  with bz2.open(wiki_sentences.DUMP, "rt", encoding="utf-8") as reader:
    original = reader.read()
  siteinfo = wiki_sentences._SITEINFO  # pylint: disable=protected-access
  assert text.replace(siteinfo, "", 1) == original
  assert text.index("</siteinfo>") < text.index("<page>")


@pytest.mark.e2e
def test_the_wikipedia_sentence_tables_of_both_routes(capsys):
  assert wiki_sentences.main([]) == 0
  lines = capsys.readouterr().out.splitlines()
  results = json.loads(lines[-1])
  assert set(results) == {"ours", "NVIDIA", "blingfire alone"}
  for route, result in results.items():
    figures = result["segmentation"]
    assert figures["sentences"] == 396 and figures["kept"] == figures["paragraphs"] == 129
    row = "| %s | %d/396 | %.3f | %.3f |" % (route, figures["exact"], figures["precision"],
                                            figures["recall"])
    assert row in lines, row
  # The tables of docs/DATA.md are this run's (the figures do not depend on the machine).
  with open(os.path.join(sentence_split.REPO_ROOT, "docs", "DATA.md"), encoding="utf-8") as reader:
    doc = reader.read()
  assert [line for line in lines[:-1] if line.startswith("|") and line not in doc] == []
  # Both routes read all five articles; ours leaves no markup (the finding).
  assert results["ours"]["sentences"] > 600 and results["NVIDIA"]["sentences"] > 600
  assert all(results["ours"]["residue"][name] == 0 for name in ("[[", "{{", "&lt;", "&amp;"))


@pytest.mark.e2e
def test_corpus_memory_quick_run_measures_every_stage_on_the_page(tmp_path, capsys):
  assert corpus_memory.main(["--quick", "--work_dir=%s" % tmp_path]) == 0
  lines = capsys.readouterr().out.splitlines()
  result = json.loads(lines[-1])
  assert set(result["stages"]) == set(corpus_memory.STAGES)
  assert all(stage["peak_rss_mb"] > 0 for stage in result["stages"].values())
  # The page of 0.3 MB without punctuation: one long sentence, cut at 512 words.
  assert "sentences: 1 over 512 words cut" in result["stages"]["check"]["summary"]
  with open(os.path.join(str(tmp_path), "dump.xml"), encoding="utf-8") as reader:
    page = reader.read().split('<text xml:space="preserve">')[-1].split("</text>")[0]
  assert len(page.split()) == result["page_words"] and not set(page) & set(".!?,;:")
