"""Raw-text inputs for the corpus tests (tests/test_corpus_*.py, tests/test_prepare_corpus.py):
one of every format but the dump, with duplicates across them and one file that is not UTF-8; a
MediaWiki dump of generated articles with duplicates among them; and a configuration of
prepare_corpus.py's settings at small sizes."""

import bz2
import gzip
import os
import random
import unicodedata
from xml.sax import saxutils

from tests import wiki_dump_data
from utils.corpus import config as config_lib

# The syllables of the words: WordPiece splits them into "##" pieces.
_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "pen", "dor", "al", "ex", "qua",
              "zin", "ber", "tol", "mun", "gra"]
# Small sizes: two phases, three shards, a fifth held out.
PHASES = (config_lib.Phase(32, 5), config_lib.Phase(64, 10))
NUM_SHARDS = 3
EVAL_FRACTION = 0.2
VOCAB_SIZE = 300


def _sentences(rng, words, count):
  """Sentences that any segmenter splits alike: capitalised words, a full stop, no abbreviation."""
  out = []
  for _ in range(count):
    sentence = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
    out.append(sentence[0].upper() + sentence[1:] + ".")
  return out


def _write(path, text, data=None):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  data = text.encode("utf-8") if data is None else data
  opener = gzip.open if path.endswith(".gz") else bz2.open if path.endswith(".bz2") else open
  with opener(path, "wb") as writer:
    writer.write(data)


def write_inputs(root, num_documents=90, seed=0):
  """Writes the inputs under `root`.

  A folder of documents (a file each, .txt / .gz / .bz2, one of them in a subdirectory, two
  paragraphs each, plus one file that is not UTF-8), a file of one document a line (blank lines
  between, NVIDIA's formatted text) and a file in the generator's format. Three documents occur
  twice: documents[1] in the folder and again in the one-a-line file, documents[40] twice in that
  file, documents[70] in the generator file and again in the folder.

  Returns:
    dict: "inputs" (the folder, the one-a-line file, the generator file), "documents" (each a list
    of sentences, every distinct document once), "duplicates" (3), "bad_file" (the file that is
    not UTF-8).
  """
  rng = random.Random(seed)
  words = sorted({"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3)))
                  for _ in range(120)})
  docs = [_sentences(rng, words, rng.randint(2, 9)) for _ in range(num_documents)]
  folder = os.path.join(root, "folder")
  third = num_documents // 3
  for i, doc in enumerate(docs[:third] + [docs[70]]):
    half = (len(doc) + 1) // 2
    name = os.path.join("sub" if i % 5 == 4 else "", "doc-%03d%s" % (i, (".txt", ".gz", ".bz2")[
        i % 3]))
    _write(os.path.join(folder, name), " ".join(doc[:half]) + "\n\n" + " ".join(doc[half:]))
  bad_file = os.path.join(folder, "doc-bad.txt")
  _write(bad_file, None, b"Good words.\nA bad \xff byte.\n")
  per_line = os.path.join(root, "formatted.txt")
  lines = [" ".join(doc) for doc in docs[third:2 * third] + [docs[1], docs[40]]]
  _write(per_line, "".join(line + "\n\n" for line in lines))
  generator = os.path.join(root, "sentences.txt.gz")
  _write(generator, "".join("\n".join(doc) + "\n\n" for doc in docs[2 * third:]))
  return dict(inputs=[folder, per_line, generator], documents=docs, duplicates=3,
              bad_file=bad_file)


def _page(title, namespace, page_id, text, redirect=None):
  """One <page> of an export (`wiki_dump_data.page`): one revision of `text`, XML-escaped."""
  return wiki_dump_data.page(title, namespace, page_id, [
      (page_id + 1000, "2024-01-01T00:00:00Z", wiki_dump_data.EDITOR, saxutils.escape(text))],
                             redirect=redirect)


def write_dump(path, num_articles=30, seed=1):
  """Writes a MediaWiki dump (tests/wiki_dump_data.py's header) of generated articles.

  Article i holds document i in light markup (an infobox, a <ref> with a citation template, a
  category); a redirect and a talk page follow the first. Articles 5, 6 and 7 come again at the
  end under other titles (exact duplicates once the markup is removed), and so does article 8,
  whose last sentence ends in "café", with its "é" decomposed (U+0065 U+0301): the same text
  once normalised (a duplicate), other bytes.

  Returns:
    dict: "path", "documents" (each a list of sentences, every distinct article once, in the
    dump's order), "duplicates" (4).
  """
  rng = random.Random(seed)
  words = sorted({"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3)))
                  for _ in range(120)})
  docs = [_sentences(rng, words, rng.randint(2, 9)) for _ in range(num_articles)]
  docs[8][-1] = docs[8][-1][:-1] + " café."

  def markup(i, doc):
    return ("{{Infobox thing|name=%d}}\n%s<ref>{{cite web|title=%d}}</ref> %s\n\n"
            "[[Category:Things]]" % (i, doc[0], i, " ".join(doc[1:])))

  pages = [_page("Article %d" % i, 0, 10 + i, markup(i, doc)) for i, doc in enumerate(docs)]
  pages[1:1] = [_page("Another name", 0, 5, "#REDIRECT [[Article 0]]", "Article 0"),
                _page("Talk:Article 0", 1, 6, "A talk page. It is not an article.")]
  for i in (5, 6, 7):
    pages.append(_page("Copy of %d" % i, 0, 100 + i, markup(i, docs[i])))
  pages.append(_page("Copy of 8", 0, 108, unicodedata.normalize("NFD", markup(8, docs[8]))))
  _write(path, wiki_dump_data.DUMP_HEADER + "".join(pages) + wiki_dump_data.DUMP_FOOTER)
  return dict(path=path, documents=docs, duplicates=4)


def make_config(inputs, output_dir, **overrides):
  """A `config.CorpusConfig` of the tests' small sizes, with `overrides`."""
  values = dict(
      inputs=tuple(inputs), input_formats=("auto",) * len(inputs), output_dir=str(output_dir),
      vocab_file=None, vocab_size=VOCAB_SIZE, phases=PHASES, num_shards=NUM_SHARDS,
      num_workers=1, eval_fraction=EVAL_FRACTION, skip_bad_documents=True, stage="all",
      task_index=0, num_tasks=1, pack=False, barrier_timeout_secs=60.0, do_lower_case=True,
      do_whole_word_mask=False, random_seed=12345, dupe_factor=2, masked_lm_prob=0.15,
      short_seq_prob=0.1)
  values.update(overrides)
  return config_lib.CorpusConfig(**values)


def output_files(output_dir, manifest_too=False):
  """{relative path: bytes} of every file under `output_dir` (the manifest's left out unless
  `manifest_too`: its entries hold times)."""
  found = {}
  for directory, _, names in os.walk(str(output_dir)):
    for name in names:
      path = os.path.join(directory, name)
      relative = os.path.relpath(path, str(output_dir))
      if manifest_too or not relative.startswith("manifest" + os.sep):
        with open(path, "rb") as reader:
          found[relative] = reader.read()
  return found


def read_text_documents(path):
  """The documents of a text shard (the generator's format): a list of sentence lists."""
  with open(path, encoding="utf-8") as reader:
    blocks = reader.read().split("\n\n")
  return [block.split("\n") for block in blocks if block.strip()]
