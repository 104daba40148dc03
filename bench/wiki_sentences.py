"""Sentences of real Wikipedia text, ours beside NVIDIA's route: how often they are right, on a
sample labelled by hand, and the markup they leave, on a real dump fragment.

The fragment, `bench/data/enwiki-table-markup.xml.bz2` (5 English Wikipedia articles; bench/data/
README.md says where it comes from), is read by both routes:
  ours    `utils/corpus/wikidump.py` and `wikitext.py` (the markup), `shards.document_sentences`
          (the sentences: `sentences.py` and the template-hole repairs), as prepare_corpus.py's
          extract step does;
  NVIDIA  WikiExtractor (`python -m wikiextractor.WikiExtractor`), one article a line
          (`bench/nvidia_wiki_route.format_articles`), NLTK's punkt split of each article
          (`nvidia_wiki_route.punkt_tokenizer`: the English model is a download, the stand-in is
          punkt trained on the fragment's extracted articles themselves).

Segmentation: `bench/data/sentences_wikipedia.txt` holds 129 paragraphs of four of the articles
as our markup removal gives them, split into sentences by hand (candidate breaks at every full
stop, question or exclamation mark before a space, each judged; the README gives the rules). Both
segmenters split the same paragraphs, one at a time (punkt in NVIDIA's route sees a whole
article as one line, where a paragraph without a final full stop runs into the next: not counted
against it here). Figures as bench/sentence_split.py computes them: sentences exactly right,
precision and recall of the boundaries inside a paragraph. blingfire alone is shown too.

Residue: per pattern, the sentences of each route's whole output that hold it: markup ("[[",
"{{", "&lt;", "&amp;", "|"), the holes of removed templates ("(, ", "( )" or "()", ",."), a
sentence that is only a title or an initial ("Maj.", "S."), a sentence that opens with its verb
("is a ...").

Prints the tables as Markdown (docs/DATA.md, "Sentences of real Wikipedia text"), then one JSON
line.

  PY=$(make -s python-path | tail -n1); $PY bench/wiki_sentences.py
"""

import argparse
import bz2
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from bench import nvidia_wiki_route  # noqa: E402
from bench import sentence_split  # noqa: E402

SAMPLE = os.path.join(REPO_ROOT, "bench", "data", "sentences_wikipedia.txt")
DUMP = os.path.join(REPO_ROOT, "bench", "data", "enwiki-table-markup.xml.bz2")
# (name, pattern): a sentence holding the pattern counts once.
RESIDUE = (("[[", re.compile(re.escape("[["))), ("{{", re.compile(re.escape("{{"))),
           ("&lt;", re.compile(re.escape("&lt;"))), ("&amp;", re.compile(re.escape("&amp;"))),
           ("|", re.compile(re.escape("|"))), ("(, ", re.compile(r"\(\s*[,;:]")),
           ("( )", re.compile(r"\(\s*\)")), (",.", re.compile(r",\s*\.")),
           ("a title or initial alone", re.compile(r"^(?:[A-Z][a-z]{0,4}\.\s*)+$")),
           ("opens with its verb", re.compile(r"^(?:is|was|are|were)\s")))


# The header of a dump as far as WikiExtractor reads it, line by line: the site's address, and
# the name of namespace 10 (without one it takes every title for a template's).
_SITEINFO = """
  <siteinfo>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
      <namespace key="10" case="first-letter">Template</namespace>
  </siteinfo>"""


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--sample", default=SAMPLE, help="the hand-labelled paragraphs")
  parser.add_argument("--dump", default=DUMP, help="the dump fragment both routes read")
  return parser.parse_args(argv)


def our_sentences(dump):
  """[(title, its sentences)] of the dump's articles, as prepare_corpus.py's extract step gives
  them."""
  from utils.corpus import documents  # pylint: disable=g-import-not-at-top
  from utils.corpus import shards  # pylint: disable=g-import-not-at-top
  from utils.corpus import wikidump  # pylint: disable=g-import-not-at-top
  from utils.corpus import wikitext  # pylint: disable=g-import-not-at-top
  articles = []
  for page in wikidump.iter_articles(dump):
    document = documents.Document(dump, page.title, wikitext.article_paragraphs(page.text))
    articles.append((page.title, shards.document_sentences(document, "wikidump")))
  return articles


def with_siteinfo(dump, path):
  """Writes `dump` (bz2) to `path` (XML) with a <siteinfo> after its root's start tag when it has
  none: WikiExtractor reads every line up to </siteinfo> as the header (a fragment without one
  gives no article at all); a published dump always has one."""
  with bz2.open(dump, "rt", encoding="utf-8") as reader:
    text = reader.read()
  if "<siteinfo>" not in text:
    root_end = text.index(">", text.index("<mediawiki")) + 1
    text = text[:root_end] + _SITEINFO + text[root_end:]
  with open(path, "w", encoding="utf-8") as writer:
    writer.write(text)


def nvidia_articles(dump, work_dir):
  """The articles of WikiExtractor's output, one line each (`format_articles`)."""
  extracted = os.path.join(work_dir, "extracted")
  xml = os.path.join(work_dir, "dump.xml")
  with_siteinfo(dump, xml)
  subprocess.run([sys.executable, "-m", "wikiextractor.WikiExtractor", xml, "-o", extracted,
                  "--processes", "1", "-q"], check=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
  formatted = os.path.join(work_dir, "formatted.txt")
  nvidia_wiki_route.format_articles(extracted, formatted)
  return nvidia_wiki_route.read_articles(formatted)


def residue(sentences):
  """{pattern name: how many of `sentences` hold it}."""
  return {name: sum(bool(pattern.search(s)) for s in sentences) for name, pattern in RESIDUE}


def measure(args):
  """{route: {"segmentation": figures on the sample, "residue": counts, "sentences": n}}."""
  from utils.corpus import sentences  # pylint: disable=g-import-not-at-top
  labelled = sentence_split.read_labelled(args.sample)
  work_dir = tempfile.mkdtemp(prefix="wiki_sentences-")
  try:
    articles = nvidia_articles(args.dump, work_dir)
  finally:
    shutil.rmtree(work_dir, ignore_errors=True)
  punkt = nvidia_wiki_route.punkt_tokenizer("\n".join(articles))
  nvidia = [s.strip() for article in articles for s in punkt(article) if s.strip()]
  ours = [s for _, article in our_sentences(args.dump) for s in article]
  results = {}
  for route, split, output in (("ours", sentences.split_sentences, ours),
                               ("NVIDIA", punkt, nvidia),
                               ("blingfire alone", sentence_split.blingfire_split(), None)):
    figures, _ = sentence_split.accuracy(split, labelled)
    results[route] = dict(segmentation=figures)
    if output is not None:
      results[route].update(residue=residue(output), sentences=len(output))
  return results


def print_tables(results):
  """The two Markdown tables: segmentation on the sample, residue in each route's output."""
  print("| route | sentences exactly right | boundary precision | boundary recall |")
  print("|---|---|---|---|")
  for route, result in results.items():
    figures = result["segmentation"]
    print("| %s | %d/%d | %.3f | %.3f |" % (route, figures["exact"], figures["sentences"],
                                            figures["precision"], figures["recall"]))
  routes = [route for route in results if "residue" in results[route]]
  print("\n| sentences holding | %s |" % " | ".join(routes))
  print("|---|%s" % ("---|" * len(routes)))
  print("| (sentences in all) | %s |" % " | ".join(str(results[r]["sentences"]) for r in routes))
  for name, _ in RESIDUE:
    label = name if name[0].isalpha() else "`%s`" % name.replace("|", "\\|")
    print("| %s | %s |" % (label, " | ".join(str(results[r]["residue"][name]) for r in routes)))


def main(argv=None):
  results = measure(parse_args(argv))
  print_tables(results)
  print(json.dumps(results, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
