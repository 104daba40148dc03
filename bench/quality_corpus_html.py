"""The English prose of an HTML page (a documentation page Debian ships as HTML), read with Python's
own `html.parser`: the text of its prose elements (`p`, `li`, `dd`, `blockquote`, ...), without
code blocks, tables, headings, navigation, headers, footers, sidebars or scripts.

  paragraphs = prose_paragraphs(open("sql-select.html").read())

A paragraph is the text directly inside the innermost prose element (a list item's own sentence
and each paragraph inside it are two paragraphs); inline markup (`code`, `em`, links) keeps its
text, but a paragraph that is code only (`<p><code>ls -l</code></p>`) is dropped. Whatever is
inside a skipped element (`pre`, `table`, `h1`-`h6`, `nav`, `script`, `style`, and any element
whose class or id names navigation, a header, a footer, a sidebar, a table of contents or a code
listing) is left out whole. A paragraph is kept when it reads as English prose (`quality_corpus_rest.is_prose`).
"""

import html.parser
import re

from bench import quality_corpus_rest

# The elements whose own text is a paragraph.
PROSE_ELEMENTS = frozenset(["p", "li", "dd", "blockquote", "figcaption", "caption"])
# The elements left out with everything inside them.
SKIPPED_ELEMENTS = frozenset([
    "pre", "table", "h1", "h2", "h3", "h4", "h5", "h6", "nav", "header", "footer", "aside",
    "script", "style", "head", "title", "noscript", "svg", "math", "form", "button", "select",
    "textarea"])
# Inline elements whose text is code: a paragraph with nothing else is no prose.
CODE_ELEMENTS = frozenset(["code", "tt", "samp", "kbd", "var"])
# An element with one of these classes is navigation or code, not text ...
SKIPPED_CLASSES = frozenset([
    "nav", "navbar", "navigation", "navheader", "navfooter", "header", "footer", "sidebar",
    "sphinxsidebar", "sphinxsidebarwrapper", "related", "breadcrumb", "breadcrumbs", "toc",
    "toctree-wrapper", "menu", "headerlink", "copyright", "highlight", "literal-block",
    "listingblock", "programlisting", "screen", "synopsis", "cmdsynopsis", "funcsynopsis"])
# ... and so is one whose id has one of these words (split at "-" and "_"; a section's id is made
# of its title's words, hence so few).
SKIPPED_ID_WORDS = frozenset(["header", "footer", "nav", "navigation", "sidebar", "toc"])
# Elements without an end tag.
_VOID_ELEMENTS = frozenset(["area", "base", "br", "col", "embed", "hr", "img", "input", "link",
                            "meta", "param", "source", "track", "wbr"])
# Elements an HTML page may leave open: a new one (or the end of their parent) closes them.
_IMPLICITLY_CLOSED = frozenset(["p", "li", "dd"])


def _is_navigation_or_code(attrs):
  """Whether an element's attributes (HTMLParser's [(name, value)]) name navigation or code."""
  for name, value in attrs:
    if name == "class" and not SKIPPED_CLASSES.isdisjoint(
        re.sub(r"^highlight-.*", "highlight", c) for c in (value or "").lower().split()):
      return True
    if name == "id" and not SKIPPED_ID_WORDS.isdisjoint(re.split(r"[-_]", (value or "").lower())):
      return True
  return False


class _ProseParser(html.parser.HTMLParser):
  """Collects the paragraphs of a page (`paragraphs`: lists of (text, is_code) pieces)."""

  def __init__(self):
    super().__init__(convert_charrefs=True)
    self.paragraphs = []
    self._open = []  # [(tag, skipped, prose)] of the open elements, outermost first
    self._pieces = []  # the current paragraph's [(text, is_code)]
    self._skipped = 0  # how many open elements are skipped
    self._code = 0  # how many open elements are code
    self._prose = 0  # how many open elements are prose

  def _flush(self):
    """Ends the current paragraph (its text so far)."""
    if self._pieces:
      self.paragraphs.append(self._pieces)
    self._pieces = []

  def _close_top(self):
    tag, skipped, prose = self._open.pop()
    self._skipped -= skipped
    self._prose -= prose
    self._code -= tag in CODE_ELEMENTS
    if prose and not self._skipped:
      self._flush()

  def handle_starttag(self, tag, attrs):
    if tag in _VOID_ELEMENTS:
      if tag == "br":
        self.handle_data(" ")
      return
    if tag in _IMPLICITLY_CLOSED:  # <p>one<p>two: the first ends where the second starts
      while self._open and self._open[-1][0] == tag:
        self._close_top()
    skipped = tag in SKIPPED_ELEMENTS or _is_navigation_or_code(attrs)
    prose = tag in PROSE_ELEMENTS
    if prose and not self._skipped:
      self._flush()  # the text before a nested paragraph is one of its own
    self._open.append((tag, skipped, prose))
    self._skipped += skipped
    self._prose += prose
    self._code += tag in CODE_ELEMENTS

  def handle_startendtag(self, tag, attrs):
    if tag == "br":
      self.handle_data(" ")

  def handle_endtag(self, tag):
    if not any(open_tag == tag for open_tag, _, _ in self._open):
      return  # an end tag without its start: ignored
    while self._open[-1][0] != tag:
      self._close_top()
    self._close_top()

  def handle_data(self, data):
    if self._prose and not self._skipped:
      self._pieces.append((data, self._code > 0))

  def close(self):
    super().close()
    while self._open:
      self._close_top()
    self._flush()


def prose_paragraphs(text):
  """The prose paragraphs of an HTML page, in order.

  Args:
    text: the page (str).

  Returns:
    list of str: each paragraph's text on one line, whitespace collapsed.
  """
  parser = _ProseParser()
  parser.feed(text)
  parser.close()
  kept = []
  for pieces in parser.paragraphs:
    if all(is_code or not piece.strip() for piece, is_code in pieces):
      continue
    line = " ".join("".join(piece for piece, _ in pieces).split())
    if quality_corpus_rest.is_prose(line):
      kept.append(line)
  return kept
