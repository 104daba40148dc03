"""A synthetic MediaWiki dump of a chosen size, for bench/prepare_corpus_speed.py.

The text is generated: sentences are walks of a word-bigram model (`bigram_model` of
bench/create_data_speed.py, from the standard library's docstrings, or `sample_model`, from the
hand-labelled sentences of bench/data/sentences_labelled.txt: smaller, and read in milliseconds),
dressed in the markup of encyclopedia articles at about the density of English Wikipedia's:

  articles    an infobox (most), a lead with the title in bold and a pronunciation template, links
              ([[Target]], [[Target|label]]) on about one word in twelve, italics, <ref>s holding
              citation templates after about one sentence in three (and named re-uses of them),
              inline templates ({{convert}}, {{efn}}, {{citation needed}}), sections and
              subsections, bullet and numbered lists, pictures with captions, tables, comments,
              HTML entities; then "See also", "References" ({{Reflist}}), "External links", a
              navigation box, {{DEFAULTSORT}}, categories and interlanguage links. Lengths vary:
              stubs of a paragraph or two, most of a few sections, a few long ones;
  redirects   about a third of the pages ("#REDIRECT [[Target]]" and a <redirect/> element);
  other pages talk, user, template and category pages (namespaces 1, 2, 10, 14), about one in ten.

Each page has the revision fields of a real export (schema 0.11): ids, timestamp, contributor,
comment, model, format, the text's byte count and a SHA-1. The output depends on the seed and size
only.

  bench.synthetic_wiki.write_dump("dump.xml", 8_000_000, synthetic_wiki.sample_model(), seed=17)
"""

import hashlib
import os
import random
import re
from xml.sax import saxutils

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO_ROOT, "bench", "data", "sentences_labelled.txt")

_HEADER = """\
<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
xsi:schemaLocation="http://www.mediawiki.org/xml/export-0.11/ \
http://www.mediawiki.org/xml/export-0.11.xsd" version="0.11" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <generator>MediaWiki 1.42.0-wmf.5</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="0" case="first-letter" />
      <namespace key="1" case="first-letter">Talk</namespace>
      <namespace key="2" case="first-letter">User</namespace>
      <namespace key="6" case="first-letter">File</namespace>
      <namespace key="10" case="first-letter">Template</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""
_FOOTER = "</mediawiki>\n"
_PAGE = """\
  <page>
    <title>%(title)s</title>
    <ns>%(ns)d</ns>
    <id>%(id)d</id>%(redirect)s
    <revision>
      <id>%(revision)d</id>
      <parentid>%(parent)d</parentid>
      <timestamp>20%(year)02d-%(month)02d-%(day)02dT%(hour)02d:%(minute)02d:07Z</timestamp>
      <contributor>
        <username>Editor %(editor)d</username>
        <id>%(editor)d</id>
      </contributor>
      <comment>%(comment)s</comment>
      <model>wikitext</model>
      <format>text/x-wiki</format>
      <text bytes="%(bytes)d" sha1="%(sha1)s" xml:space="preserve">%(text)s</text>
      <sha1>%(sha1)s</sha1>
    </revision>
  </page>
"""
# Words that would read as markup (brackets, pipes, tags, entities, list or heading marks, quotes
# that make italics) or as a bare URL are left out of the models.
_MARKUP_WORD = re.compile(r"[\[\]{}|<>=&*#~_\\]|''|://")
_OTHER_NAMESPACES = ((1, "Talk:"), (2, "User:"), (10, "Template:"), (14, "Category:"))
_COMMENTS = ("copyedit", "Reverted edits", "/* History */ expanded", "added citation",
             "fix links", "infobox update")


def sample_model():
  """A bigram model of bench/data/sentences_labelled.txt's sentences: (sentence-start words,
  word -> list of following words, None ending a sentence)."""
  with open(SAMPLE, encoding="utf-8") as reader:
    sentences = [line.strip() for line in reader if line.strip()]
  return model_of(sentences)


def model_of(sentences):
  """(start words, word -> list of following words or None) of `sentences`, the words that read
  as markup left out."""
  starts, following = [], {}
  for sentence in sentences:
    words = [word for word in sentence.split() if not _MARKUP_WORD.search(word)]
    if len(words) < 3:
      continue
    starts.append(words[0])
    for word, next_word in zip(words, words[1:] + [None]):
      following.setdefault(word, []).append(next_word)
  return starts, following


def clean_model(model):
  """A bigram model (bench/create_data_speed.py's) without the words that read as markup."""
  starts, following = model
  clean = lambda word: word is None or not _MARKUP_WORD.search(word)
  following = {word: [n for n in nexts if clean(n)] or [None]
               for word, nexts in following.items() if clean(word)}
  return [word for word in starts if word in following], following


def _sentence_words(rng, model):
  """A walk of the model: a list of 3 to 40 words, the last ending in . ! or ?"""
  starts, following = model
  words = [rng.choice(starts)]
  while len(words) < 40:
    next_word = rng.choice(following[words[-1]])
    if next_word is None:
      if len(words) >= 3:
        break
      next_word = rng.choice(starts)
    words.append(next_word)
  if words[-1][-1] not in ".!?":
    words[-1] += "."
  return words


class _Article(object):
  """The generator of one dump's articles: the model, the random source, the titles so far."""

  def __init__(self, rng, model):
    self.rng, self.model, self.titles, self.refs = rng, model, ["Main Page"], []

  def title(self):
    """A new title of one to three capitalised words."""
    words = [w.strip(".,;:!?()\"") for w in _sentence_words(self.rng, self.model)[:3]]
    title = " ".join(w[:1].upper() + w[1:] for w in words[:self.rng.randint(1, 3)] if w)
    return title or "Untitled"

  def words(self, count=None):
    """A phrase of `count` plain words (a sentence's, its end mark stripped)."""
    words = _sentence_words(self.rng, self.model)
    return " ".join(words[:count or len(words)]).rstrip(".!?")

  def sentence(self):
    """A sentence with links, italics, inline templates and maybe a <ref> after it."""
    rng, out = self.rng, []
    for word in _sentence_words(rng, self.model):
      roll = rng.random()
      if roll < 0.05:
        out.append("[[%s]]" % word)
      elif roll < 0.085:
        out.append("[[%s|%s]]" % (rng.choice(self.titles), word))
      elif roll < 0.095:
        out.append("''%s''" % word)
      elif roll < 0.1:
        out.append("{{convert|%d|km|mi}} %s" % (rng.randint(2, 900), word))
      else:
        out.append(word)
    text = " ".join(out)
    roll = rng.random()
    if roll < 0.3:
      text += self.ref()
    elif roll < 0.33:
      text += "{{citation needed|date=%s 20%02d}}" % (rng.choice(("May", "June")),
                                                     rng.randint(10, 24))
    elif roll < 0.35:
      text += "{{efn|%s.}}" % self.words(8)
    return text

  def ref(self):
    """A <ref> with a citation template, or a named re-use of an earlier one."""
    rng = self.rng
    if self.refs and rng.random() < 0.25:
      return '<ref name="%s" />' % rng.choice(self.refs)
    name = "r%d" % rng.randint(1, 10 ** 6)
    self.refs.append(name)
    if rng.random() < 0.5:
      cite = ("{{cite web |url=https://www.example.org/%s/%d |title=%s |publisher=%s |date=%d "
              "%s %d |access-date=%d May 2023}}" % (
                  name, rng.randint(1, 9999), self.words(6), self.title(), rng.randint(1, 28),
                  rng.choice(("March", "April")), rng.randint(1950, 2023), rng.randint(1, 28)))
    else:
      cite = ("{{cite book |last=%s |first=%s |title=%s |publisher=%s |year=%d |isbn=978-%d "
              "|page=%d}}" % (self.title(), self.title(), self.words(7), self.title(),
                              rng.randint(1900, 2023), rng.randint(10 ** 9, 10 ** 10 - 1),
                              rng.randint(1, 600)))
    return '<ref name="%s">%s</ref>' % (name, cite)

  def paragraph(self):
    """A paragraph of 2 to 8 sentences."""
    return " ".join(self.sentence() for _ in range(self.rng.randint(2, 8)))

  def infobox(self, title):
    """An infobox of 6 to 20 fields, some with nested templates."""
    rng = self.rng
    fields = ["| name = %s" % title, "| image = %s.jpg" % self.title(),
              "| caption = %s" % self.words(8)]
    for _ in range(rng.randint(3, 17)):
      value = rng.choice((self.words(4), "[[%s]]" % rng.choice(self.titles),
                          "{{birth date and age|19%02d|%d|%d}}" % (
                              rng.randint(10, 99), rng.randint(1, 12), rng.randint(1, 28)),
                          "{{convert|%d|km2|sqmi}}" % rng.randint(1, 9999),
                          "%d<br />%s" % (rng.randint(1, 10 ** 6), self.words(3))))
      fields.append("| %s = %s" % (self.words(2).lower().replace(" ", "_"), value))
    return "{{Infobox %s\n%s\n}}" % (self.words(1).lower(), "\n".join(fields))

  def table(self):
    """A wikitable of 2 to 4 columns and 3 to 12 rows."""
    rng, columns = self.rng, self.rng.randint(2, 4)
    rows = ['{| class="wikitable sortable"', "! " + " !! ".join(
        self.words(2) for _ in range(columns))]
    for _ in range(rng.randint(3, 12)):
      rows += ["|-", "| " + " || ".join(
          rng.choice((str(rng.randint(1, 99999)), self.words(3), "[[%s]]" % self.title()))
          for _ in range(columns))]
    return "\n".join(rows + ["|}"])

  def section(self, level):
    """A heading and its body: paragraphs, maybe a picture, a list, a table, subsections."""
    rng, mark = self.rng, "=" * level
    parts = ["%s %s %s" % (mark, self.title(), mark)]
    if rng.random() < 0.2:
      parts.append("[[File:%s.jpg|thumb|%s [[%s]].]]" % (self.title(), self.words(6),
                                                          rng.choice(self.titles)))
    parts += [self.paragraph() for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.25:
      bullet = rng.choice("*#")
      parts.append("\n".join("%s [[%s]] (%d)" % (bullet, self.title(), rng.randint(1800, 2023))
                             for _ in range(rng.randint(3, 10))))
    if rng.random() < 0.15:
      parts.append(self.table())
    if rng.random() < 0.05:
      parts.append("<!-- %s -->" % self.words(6))
    if level == 2 and rng.random() < 0.3:
      parts += [self.section(3) for _ in range(rng.randint(1, 3))]
    return "\n\n".join(parts)

  def wikitext(self, title):
    """An article's markup: infobox, lead, sections by a length drawn per article, end matter."""
    rng, self.refs = self.rng, []
    sections = rng.choice((0, 0, 1, 1, 2, 2, 3, 3, 4, 5, 6, 8, 12, 16))
    parts = ["{{Short description|%s}}" % self.words(5)]
    if rng.random() < 0.6:
      parts.append(self.infobox(title))
    parts.append("'''%s''' ({{IPA-en|%s|lang}}) %s" % (title, self.words(1).lower(),
                                                         self.paragraph()))
    parts += [self.section(2) for _ in range(sections)]
    parts.append("== See also ==\n" + "\n".join("* [[%s]]" % rng.choice(self.titles)
                                                for _ in range(rng.randint(1, 5))))
    parts.append("== References ==\n{{Reflist}}")
    parts.append("== External links ==\n* [https://www.example.org/%d %s]"
                 % (rng.randint(1, 10 ** 6), self.words(4)))
    parts.append("{{%s navbox}}\n{{Authority control}}\n{{DEFAULTSORT:%s}}" % (self.title(),
                                                                              title))
    parts.append("\n".join("[[Category:%s]]" % self.title() for _ in range(rng.randint(1, 6))))
    parts.append("[[de:%s]]\n[[fr:%s]]" % (title, title))
    return "\n\n".join(parts).replace(" and ", " and&nbsp;", 1)


def _page_xml(rng, page_id, title, namespace, text, redirect=None):
  """One <page> of the export, its fields escaped."""
  raw = text.encode("utf-8")
  year = rng.randint(10, 24)
  return _PAGE % dict(
      title=saxutils.escape(title), ns=namespace, id=page_id,
      redirect='\n    <redirect title=%s />' % saxutils.quoteattr(redirect) if redirect else "",
      revision=10 ** 9 + page_id, parent=10 ** 9 + page_id - 1, year=year,
      month=rng.randint(1, 12), day=rng.randint(1, 28), hour=rng.randint(0, 23),
      minute=rng.randint(0, 59), editor=rng.randint(1, 99999), comment=rng.choice(_COMMENTS),
      bytes=len(raw), sha1=hashlib.sha1(raw).hexdigest()[:31], text=saxutils.escape(text))


def _next_page(rng, article, page_id):
  """(the XML of page `page_id`, whether it is an article)."""
  roll = rng.random()
  if roll < 0.33 and len(article.titles) > 1:
    target = rng.choice(article.titles[1:])
    return _page_xml(rng, page_id, article.title(), 0, "#REDIRECT [[%s]]" % target,
                     redirect=target), False
  if roll < 0.43:
    namespace, prefix = rng.choice(_OTHER_NAMESPACES)
    return _page_xml(rng, page_id, prefix + article.title(), namespace,
                     article.paragraph()), False
  title = article.title()
  while title in article.titles:
    title += " (%s)" % article.words(1).strip(".,;:!?()\"").lower()
  article.titles.append(title)
  return _page_xml(rng, page_id, title, 0, article.wikitext(title)), True


def write_dump(path, target_bytes, model, seed=17):
  """Writes a synthetic dump of at least `target_bytes` bytes (UTF-8 XML, the last page the one
  that reaches the size).

  Args:
    path: the .xml file to write.
    target_bytes: int, its size at least.
    model: a bigram model (`sample_model`, `model_of`, `clean_model`).
    seed: of the random source; the dump depends on it, the size and the model only.

  Returns:
    dict: bytes, pages, articles (namespace 0, not a redirect).
  """
  rng = random.Random(seed)
  article = _Article(rng, model)
  pages = articles = 0
  with open(path, "w", encoding="utf-8", newline="\n") as writer:
    writer.write(_HEADER)
    written = len(_HEADER.encode("utf-8"))
    while written < target_bytes:
      pages += 1
      xml, is_article = _next_page(rng, article, 1000 + pages)
      articles += is_article
      writer.write(xml)
      written += len(xml.encode("utf-8"))
    writer.write(_FOOTER)
  return dict(bytes=written + len(_FOOTER), pages=pages, articles=articles)
