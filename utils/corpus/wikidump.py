"""MediaWiki XML dumps as published (.xml, .bz2, multistream .bz2, split parts), read page by page.

The decompressed XML is cut at its <page> and </page> tags and each page is parsed alone by expat
(in the root element's namespace, whatever the export schema), fed as it is read: no element tree
is built, and memory is that of one page's fields (at most MAX_DOCUMENT_BYTES characters: a page
with more is read past) and one chunk of input. So a page that is not well-formed, never closed or
too long, bytes between pages that are not a page, and a bz2 block that is corrupt
(`bz2_blocks`) cost only themselves: each is a `bad_input.BadInput` naming the page (its title,
id, line and byte offset) or the compressed bytes, handed to `on_bad` and skipped, or raised.

The XML may be in any encoding its declaration or byte order mark names (UTF-16 too); it is
turned into UTF-8 as it is read. The <namespaces> of <siteinfo> give every page the names its
site gives to file and category links (`Page.hidden_link_prefixes`), beside English's.
"""

import collections
import os
import re
from xml.parsers import expat

from utils.corpus import bad_input
from utils.corpus import bz2_blocks
from utils.corpus import page_xml
from utils.corpus import xml_encoding

Page = collections.namedtuple("Page", ("title", "namespace", "page_id", "redirect", "text",
                                       "line", "hidden_link_prefixes"))
Page.__doc__ = """One <page> of a dump.

Attributes:
  title: str, the page's <title>, e.g. "Paris" or "Talk:Paris".
  namespace: int, its <ns> number (0 for articles, 1 for talk pages...); without <ns>, that of
    its title's prefix among the site's namespaces (0 when it has none).
  page_id: int, its <id>.
  redirect: str, the target of its <redirect title="..."/> ("" when the element has no title);
    None when the page is not a redirect.
  text: str, the wikitext of its last <revision> (the latest, as dumps list them oldest first);
    "" when that revision has no text (or its text was deleted).
  line: int, the 1-based line of the <page> start tag in the decompressed XML.
  hidden_link_prefixes: frozenset of str, lower case: the names of the namespaces whose links
    show nothing in an article on its site (files and categories:
    page_xml.HIDDEN_LINK_NAMESPACES).
"""

# Bytes read from the file at a time, and about the most decompressed bytes taken at a time.
CHUNK_BYTES = 1 << 20
# What the format detection reads of a file.
HEAD_BYTES = 4096

# A page whose wikitext starts with the redirect magic word is a redirect even when the dump has
# no <redirect> element for it (MediaWiki matches the word in any letter case).
_REDIRECT_TEXT = re.compile(r"\s*#redirect", re.IGNORECASE)
# The tags the XML is cut at: MediaWiki writes them so; in text, "<" is always escaped.
_PAGE_TAG = re.compile(rb"<(/?)page>")
_LONGEST_TAG = len(b"</page>")
_DUMP_START = re.compile(r"^\s*(<\?xml[^>]*>)?\s*(<!--.*?-->\s*)*<mediawiki[\s>/]", re.DOTALL)


def looks_like_dump(head):
  """Whether the first bytes of a file (decompressed) start a MediaWiki export: a <mediawiki>
  root, after an optional XML declaration (in any encoding) and comments."""
  text = head.decode(xml_encoding.of_head(head), errors="replace").lstrip("\ufeff")
  return _DUMP_START.match(text) is not None


def iter_pages(path, on_bad=None):
  """Every page of a MediaWiki XML dump, in the dump's order, read as a stream.

  Args:
    path: str or os.PathLike, a dump: XML (any name) or bz2-compressed XML (a name ending in
      ".bz2"), one bz2 stream or several concatenated (the "multistream" dumps).
    on_bad: None to raise at the first bad page; else called with each `BadInput` (a bad page,
      a lost bz2 block, bytes between pages that are not a page), which is then skipped.

  Yields:
    `Page`s, each as soon as its </page> is read.

  Raises:
    bad_input.BadInput: the file cannot be read, is not bz2 (a ".bz2" name) or ends inside a bz2
      stream; or (without `on_bad`) a bad page. The pages before the error have been yielded.
  """
  path = os.fspath(path)
  splitter = _PageSplitter(path, on_bad)
  try:
    with open(path, "rb") as raw:
      items = (bz2_blocks.iter_blocks(raw, CHUNK_BYTES) if path.endswith(".bz2")
               else iter(lambda: raw.read(CHUNK_BYTES), b""))
      for item in items:
        yield from _pages_of(splitter, splitter.lose if isinstance(item, bz2_blocks.Lost)
                             else splitter.feed, item)
      yield from _pages_of(splitter, splitter.close)
  except bz2_blocks.EndsEarly as error:
    raise bad_input.BadInput(
        path, "%s (byte %d of the compressed file)" % (splitter.after_last_page(), error.size),
        "the bz2 stream ends early") from None
  except bz2_blocks.NotBz2 as error:
    raise bad_input.BadInput(path, "compressed bytes %d to %d" % (error.start, error.end),
                             "not bz2 data (%s)" % error.reason) from None
  except OSError as error:
    raise bad_input.BadInput(path, "the file", "cannot be read (%s)" % (
        error.strerror or error)) from None


def _may_end_the_root(between):
  """Whether the bytes after a dump's last page (blanks stripped before them) are the root's end
  tag, or its start, and blanks: the XML's end, not bytes between pages."""
  return page_xml.ROOT_END.startswith(between.rstrip()) or (
      between.startswith(page_xml.ROOT_END) and not between[len(page_xml.ROOT_END):].strip())


def _pages_of(splitter, step, *args):
  """Yields the pages `step(*args)` of the splitter ends, also when it raises."""
  try:
    step(*args)
  except bad_input.BadInput:
    yield from splitter.take_pages()
    raise
  yield from splitter.take_pages()


def iter_articles(path, on_bad=None):
  """The articles of a dump: pages of namespace 0 that are not redirects and have text.

  Args:
    path, on_bad: as for `iter_pages`.

  Yields:
    `Page`s of namespace 0 with no <redirect>, whose text is neither blank nor starts with
    "#REDIRECT" (any letter case).

  Raises:
    bad_input.BadInput: as `iter_pages`.
  """
  for page in iter_pages(path, on_bad):
    if (page.namespace == 0 and page.redirect is None and page.text.strip()
        and not _REDIRECT_TEXT.match(page.text)):
      yield page


class _PageSplitter:
  """The decompressed bytes of a dump, fed chunk by chunk, cut into pages: the header before the
  first page, each page from its <page> to its </page> (parsed alone), what lies between pages
  (whitespace, the root's end tag).

  Positions are counted in the XML as UTF-8 (as read, for a dump in UTF-8): lines, and bytes.
  """

  def __init__(self, path, on_bad):
    self._path, self._on_bad = path, on_bad
    self._decoder = xml_encoding.Utf8Stream(path)
    self._header = page_xml.Header()
    self._hidden = None
    self._carry = b""
    self._offset = 0  # bytes of XML before the data being fed
    self._line = 1  # the line of the data being fed
    self._page = None  # the _PageParser of the page being read
    self._page_start = None  # (ordinal, line, byte, column) of the page being read
    self._skipping = False  # a bad page's rest, read past until the next tag
    self._between = b""  # what follows the last page, from its first non-blank byte (a start)
    self._line_begin = 0  # the byte offset where the current line starts
    self._between_at = None  # (line, byte) where `_between` starts
    self._pages_seen = 0
    self._last_title = None  # (ordinal, title) of the last page ended
    self._pages = []  # pages ended by the current chunk, not yet handed on

  def feed(self, data, final=False):
    """Reads the next bytes of the XML; the pages they end are kept for `take_pages`."""
    for text, error in self._decoder.decode(data, final):
      if text:
        self._split(text)
      if error is not None:
        self._bad_page(error.position, error.problem)

  def close(self):
    """Ends the XML (a page never closed, the root's end missing: bad)."""
    self.feed(b"", True)
    self._route(self._carry)
    self._carry = b""
    ends_in_page = self._page is not None or self._skipping
    if self._page is not None:
      self._bad_page(None, "not well-formed XML: the page is never closed (the XML ends early, "
                           "%s)" % self.after_last_page())
    if not self._pages_seen:
      self._close_header()
    elif self._between.strip() != page_xml.ROOT_END and not ends_in_page:
      self._report("line %d (byte %d of the XML)" % (self._line, self._offset),
                   "not well-formed XML: no element found (the XML ends early, %s)" % (
                       self.after_last_page()), documents=0)

  def lose(self, lost):
    """A bz2 block lost: the page being read is lost with it, the next whole page is read.

    Its pages are counted from the XML it held and the size of the pages before it: the XML of
    a block that failed its CRC is known (its text is not: the check failed), that of a block
    that did not decompress is its compressed size times the ratio so far.
    """
    self._route(self._carry)
    self._carry = b""
    xml_lost = lost.size or (lost.end - lost.start) * self._offset // max(
        1, lost.start)
    pages = round(xml_lost * self._pages_seen / max(1, self._offset))
    pages = max(pages, 1 if self._page is not None else 0)
    where = "compressed bytes %d to %d (%s)" % (lost.start, lost.end, self._current_page())
    self._page, self._skipping, self._between = None, True, b""
    self._decoder.restart()
    self._report(where, "%s: about %d pages lost (about %d bytes of XML)" % (
        lost.reason, pages, xml_lost), documents=pages)

  def after_last_page(self):
    """Where the last page read is, e.g. "after page 3 'Paris'" (3: the third page)."""
    if self._last_title is None:
      return "before the end of the first page"
    return "after page %d '%s'" % self._last_title

  def take_pages(self):
    """The pages ended since the last call."""
    pages, self._pages = self._pages, []
    return pages

  def _current_page(self):
    """The page being read, e.g. "in page 4 'Paris' (id 7, line 120, byte 5000)", else
    `after_last_page`."""
    if self._page is None:
      return self.after_last_page()
    ordinal, line, byte, _ = self._page_start
    fields = self._page.fields
    title = " '%s'" % fields["title"] if fields["title"] is not None else ""
    page_id = "id %s, " % fields["id"].strip() if fields["id"] else ""
    return "in page %d%s (%sline %d, byte %d of the XML)" % (ordinal, title, page_id, line, byte)

  def _split(self, data):
    """Hands the data to what it belongs to, cut at the page tags (a tag cut by the chunk's end
    is kept for the next)."""
    data = self._carry + data if self._carry else data
    at = 0
    for tag in _PAGE_TAG.finditer(data):
      self._route(data[at:tag.start()])
      at = tag.end()
      if tag.group(1):
        self._end_page(data[tag.start():at])
      else:
        self._start_page(data[tag.start():at])
    keep = max(at, len(data) - _LONGEST_TAG + 1)
    self._route(data[at:keep])
    self._carry = data[keep:]

  def _advance(self, data):
    newlines = data.count(b"\n")
    if newlines:
      self._line += newlines
      self._line_begin = self._offset + data.rfind(b"\n") + 1
    self._offset += len(data)

  def _route(self, data):
    """Data between tags: to the page being read, the header, or what lies between pages."""
    if not data:
      return
    if self._page is not None:
      self._parse(data)
    elif self._skipping:
      pass
    elif self._pages_seen:
      if not self._between and data.strip():  # where what follows the last page starts
        blank = len(data) - len(data.lstrip())
        self._between_at = (self._line + data.count(b"\n", 0, blank), self._offset + blank)
      self._between = (self._between + data).lstrip()[:64]
      if not _may_end_the_root(self._between):
        self._report("line %d (byte %d of the XML)" % self._between_at, (
            "bytes between pages that are not a page (%r), %s" % (
                self._between[:40].decode("utf-8", "replace"), self.after_last_page())),
                     documents=0)
        self._skipping, self._between = True, b""
    else:
      self._parse_header(data)
    self._advance(data)

  def _parse_header(self, data):
    try:
      self._header.expat.Parse(data, False)
    except expat.ExpatError as error:
      self._header_error(error)
    if self._header.root is not None and self._header.root.rpartition(" ")[2] != "mediawiki":
      raise bad_input.BadInput(self._path, "line 1", (
          "not a MediaWiki XML export: the root element is <%s>, not <mediawiki>" %
          self._header.root.rpartition(" ")[2]))

  def _header_error(self, error):
    problem = "not well-formed XML: %s" % expat.ErrorString(error.code)
    raise bad_input.BadInput(self._path, "line %d, column %d" % (error.lineno, error.offset + 1),
                             problem)

  def _close_header(self):
    try:
      self._header.expat.Parse(b"", True)
    except expat.ExpatError as error:
      self._header_error(error)

  def _start_page(self, tag):
    if self._page is not None:
      self._bad_page(None, "the page is never closed: a <page> starts at line %d (byte %d of "
                           "the XML) before its </page>" % (self._line, self._offset))
    if self._header.root is None:
      self._header_error_at_page()
    if self._hidden is None:
      self._hidden = self._header.hidden_link_prefixes()
    self._between, self._skipping = b"", False
    self._pages_seen += 1
    self._page_start = (self._pages_seen, self._line, self._offset,
                        self._offset - self._line_begin)
    self._page = page_xml.PageParser(self._header.root)
    self._parse(tag)
    self._advance(tag)

  def _header_error_at_page(self):
    raise bad_input.BadInput(self._path, "line %d" % self._line,
                             "not a MediaWiki XML export: a <page> before any <mediawiki> root")

  def _end_page(self, tag):
    if self._page is None:
      if self._skipping:  # the end of a bad page
        self._skipping = False
        self._advance(tag)
      else:
        self._route(tag)  # an end tag without its page: bytes between pages
      return
    self._parse(tag, final=True)
    self._advance(tag)
    if self._page is not None:
      page = self._make_page()
      if page is not None:
        self._pages.append(page)
      self._page = None
    self._between, self._skipping = b"", False

  def _parse(self, data, final=False):
    """Feeds the page being read; a page that is not well-formed is bad (reported, skipped)."""
    try:
      self._page.feed(data, final)
    except expat.ExpatError as error:
      line, column = self._page.error_place(error)
      if line == 1:
        column += self._page_start[3]
      self._bad_page("line %d, column %d" % (self._page_start[1] + line - 1, column),
                     "not well-formed XML: %s" % expat.ErrorString(error.code))

  def _bad_page(self, position, problem):
    """Reports the page being read (or, outside a page, the position) as bad; skips its rest."""
    if self._page is None:
      self._report(position, problem + ", " + self.after_last_page(), documents=0)
      return
    where = self._current_page()
    if position is None:
      position, where = where[len("in "):], None
    self._last_title = (self._page_start[0], self._page.fields["title"] or "")
    self._page, self._skipping = None, True
    self._report(position, problem + (", " + where if where else ""))

  def _report(self, position, problem, documents=1):
    error = bad_input.BadInput(self._path, position, problem, documents=documents)
    if self._on_bad is None:
      raise error
    self._on_bad(error)

  def _make_page(self):
    """The `Page` of the page just ended; None for a bad one (reported)."""
    fields = self._page.fields
    if self._page.reader.too_long:
      self._bad_page(None, "longer than %d characters: read past" % bad_input.MAX_DOCUMENT_BYTES)
      return None
    if fields["title"] is None:
      self._bad_page(None, "the page has no <title>")
      return None
    numbers = {}
    for field in ("ns", "id"):
      try:
        numbers[field] = int(fields[field])
      except (TypeError, ValueError):
        if field == "ns" and fields[field] is None:
          numbers[field] = self._title_namespace(fields["title"])
          continue
        self._bad_page(None, "the page's <%s> is %s, not a number" % (
            field, "missing" if fields[field] is None else "'%s'" % fields[field]))
        return None
    self._last_title = (self._page_start[0], fields["title"])
    return Page(title=fields["title"], namespace=numbers["ns"], page_id=numbers["id"],
                redirect=fields["redirect"], text=fields["text"], line=self._page_start[1],
                hidden_link_prefixes=self._hidden)

  def _title_namespace(self, title):
    """The namespace of a title by its prefix among the site's namespaces; 0 without one."""
    prefix, colon, _ = title.partition(":")
    if colon:
      for key, name in self._header.namespaces.items():
        if name and name.lower() == prefix.strip().lower():
          return key
    return 0
