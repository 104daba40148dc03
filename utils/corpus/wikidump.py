"""MediaWiki XML dumps as published (.xml, .xml.bz2, multistream .xml.bz2), read page by page.

The dump is read with expat as a stream of events: no element tree is built and each page's fields
are dropped once its `Page` is handed on, so memory is that of one page and one chunk of input
whatever the dump's size. Any export schema is read (0.10 and 0.11 are the current ones): the
element names are taken in the namespace of the root <mediawiki> element, whatever its URI.

Bad input raises `bad_input.BadInput` naming the file and where: a bz2 file that ends early (after
which whole page, and how many compressed bytes there were), data that is not bz2, XML that is not
well formed (line and column), text that is not UTF-8 (line and column), a page without a title
or with a namespace or id that is not a number.
"""

import bz2
import codecs
import collections
import os
import re
from xml.parsers import expat

from utils.corpus import bad_input

Page = collections.namedtuple("Page", ("title", "namespace", "page_id", "redirect", "text",
                                       "line"))
Page.__doc__ = """One <page> of a dump.

Attributes:
  title: str, the page's <title>, e.g. "Paris" or "Talk:Paris".
  namespace: int, its <ns> number: 0 for articles, 1 for talk pages, 2 for user pages...
  page_id: int, its <id>.
  redirect: str, the target of its <redirect title="..."/> ("" when the element has no title);
    None when the page is not a redirect.
  text: str, the wikitext of its last <revision> (the latest, as dumps list them oldest first);
    "" when that revision has no text (or its text was deleted).
  line: int, the 1-based line of the <page> start tag in the decompressed XML.
"""

# Bytes read from the file at a time, and the most decompressed bytes taken from bz2 at a time:
# the input held in memory at once.
CHUNK_BYTES = 1 << 20

# A page whose wikitext starts with the redirect magic word is a redirect even when the dump has
# no <redirect> element for it (MediaWiki matches the word in any letter case).
_REDIRECT_TEXT = re.compile(r"\s*#redirect", re.IGNORECASE)

# The elements read, by their path under <mediawiki>; all others are skipped.
_PAGE = ("page",)
_PAGE_FIELDS = {("page", "title"): "title", ("page", "ns"): "ns", ("page", "id"): "id",
                ("page", "revision", "text"): "text"}
_REDIRECT = ("page", "redirect")
_REVISION = ("page", "revision")


def iter_pages(path):
  """Every page of a MediaWiki XML dump, in the dump's order, read as a stream.

  Args:
    path: str or os.PathLike, a dump: XML (any name) or bz2-compressed XML (a name ending in ".bz2"), one bz2
      stream or several concatenated (the "multistream" dumps).

  Yields:
    `Page`s, each as soon as its </page> is read.

  Raises:
    bad_input.BadInput: the file cannot be opened, its bz2 data ends early or is not bz2, or its
      XML is not a well-formed MediaWiki export in UTF-8. The pages before the error have been
      yielded.
  """
  path = os.fspath(path)
  reader = _DumpReader(path)
  try:
    with open(path, "rb") as raw:
      chunks = _bz2_chunks(raw) if path.endswith(".bz2") else _plain_chunks(raw)
      for chunk in chunks:
        yield from reader.feed(chunk)
      yield from reader.close()
  except _Bz2EndsEarly as error:
    raise bad_input.BadInput(
        path, "%s (byte %d of the compressed file)" % (reader.after_last_page(), error.size),
        "the bz2 stream ends early") from None
  except _NotBz2 as error:
    raise bad_input.BadInput(path, "compressed bytes %d to %d" % (error.start, error.end),
                             "not bz2 data (%s)" % error.reason) from None
  except OSError as error:
    raise bad_input.BadInput(path, "the file", "cannot be read (%s)" % (
        error.strerror or error)) from None


def iter_articles(path):
  """The articles of a dump: pages of namespace 0 that are not redirects and have text.

  Args:
    path: str, a dump, as for `iter_pages`.

  Yields:
    `Page`s of namespace 0 with no <redirect>, whose text is neither blank nor starts with
    "#REDIRECT" (any letter case).

  Raises:
    bad_input.BadInput: as `iter_pages`.
  """
  for page in iter_pages(path):
    if (page.namespace == 0 and page.redirect is None and page.text.strip()
        and not _REDIRECT_TEXT.match(page.text)):
      yield page


class _Bz2EndsEarly(Exception):
  """The compressed file ended inside a bz2 stream, after `size` bytes."""

  def __init__(self, size):
    super().__init__(size)
    self.size = size


class _NotBz2(Exception):
  """The compressed bytes from `start` to `end` of the file hold data that is not bz2."""

  def __init__(self, start, end, reason):
    super().__init__(start, end, reason)
    self.start, self.end, self.reason = start, end, reason


def _plain_chunks(raw):
  """Chunks of at most CHUNK_BYTES of a binary file, until its end."""
  while True:
    chunk = raw.read(CHUNK_BYTES)
    if not chunk:
      return
    yield chunk


def _bz2_chunks(raw):
  """The decompressed bytes of a binary file of one or more concatenated bz2 streams, in chunks
  of at most CHUNK_BYTES.

  Raises:
    _Bz2EndsEarly: the file ends inside a stream (nothing of its unfinished block is yielded: bz2
      decompresses whole blocks).
    _NotBz2: a stream (the first, or one after a finished stream) is not bz2 data.
  """
  decompressor = bz2.BZ2Decompressor()
  size = 0  # compressed bytes read so far
  start = 0  # where the compressed bytes last handed to the decompressor start
  while True:
    if decompressor.eof or decompressor.needs_input:
      # The next stream starts with what the last one left, else with the file's next bytes.
      data = decompressor.unused_data if decompressor.eof else b""
      if not data:
        data = raw.read(CHUNK_BYTES)
        size += len(data)
      if not data:
        if decompressor.eof:
          return
        raise _Bz2EndsEarly(size)
      if decompressor.eof:
        decompressor = bz2.BZ2Decompressor()
      start = size - len(data)
    else:
      data = b""  # output is left from the input already given
    try:
      out = decompressor.decompress(data, CHUNK_BYTES)
    except OSError as error:
      raise _NotBz2(start, size, error) from None
    if out:
      yield out


class _DumpReader:
  """Turns a dump's decompressed bytes, fed chunk by chunk, into `Page`s.

  expat reads the XML; the input is first checked to be UTF-8 here (expat would call a bad byte a
  "not well-formed" token), counting lines and columns as it goes to place a bad byte.
  """

  def __init__(self, path):
    self._path = path
    self._expat = expat.ParserCreate(encoding="UTF-8", namespace_separator=" ")
    self._expat.buffer_text = True
    self._expat.StartElementHandler = self._start
    self._expat.EndElementHandler = self._end
    self._expat.CharacterDataHandler = self._characters
    self._names = None  # {expanded element name: local name} once the root is read
    self._path_stack = []  # local names of the open elements below the root (None: not ours)
    self._field = None  # the page field whose characters are being read
    self._characters_read = []
    self._page = None  # the fields of the page being read
    self._finished = []  # pages ended by the current chunk, not yet handed on
    self._pages_read = 0
    self._last_title = None
    self._undecoded = b""  # the start of a UTF-8 sequence cut by the chunk's end
    self._line = 1  # line and 0-based column (in characters) of the next byte fed
    self._column = 0

  def feed(self, data):
    """Reads the next bytes of the XML; yields the pages they end.

    Raises:
      bad_input.BadInput: the bytes are not UTF-8 (after yielding the pages before the bad
        byte), not well-formed XML, or not a MediaWiki export.
    """
    data = self._undecoded + data if self._undecoded else data
    try:
      text, used = codecs.utf_8_decode(data, "strict", False)
    except UnicodeDecodeError as error:
      yield from self._parse(data[:error.start], False)
      raise self._not_utf8(data, error) from None
    self._undecoded = data[used:]
    self._advance(text)
    yield from self._parse(data[:used] if self._undecoded else data, False)

  def close(self):
    """Ends the XML; yields the pages it ends.

    Raises:
      bad_input.BadInput: the input ends inside a UTF-8 character or before the XML's end.
    """
    if self._undecoded:
      try:
        codecs.utf_8_decode(self._undecoded, "strict", True)
      except UnicodeDecodeError as error:
        raise self._not_utf8(self._undecoded, error) from None
    yield from self._parse(b"", True)

  def after_last_page(self):
    """Where the last whole page read is, e.g. "after page 3 'Paris'" (3: the third page)."""
    if not self._pages_read:
      return "before the end of the first page"
    return "after page %d '%s'" % (self._pages_read, self._last_title)

  def _parse(self, data, final):
    """Gives `data` to expat; yields the pages it ended, also those before an error in it."""
    failure = None
    try:
      self._expat.Parse(data, final)
    except expat.ExpatError as error:
      problem = "not well-formed XML: %s" % expat.ErrorString(error.code)
      if final:
        problem += " (the XML ends early, %s)" % self.after_last_page()
      failure = bad_input.BadInput(
          self._path, "line %d, column %d" % (error.lineno, error.offset + 1), problem)
    except bad_input.BadInput as error:  # raised by a handler: not a MediaWiki page
      failure = error
    yield from self._hand_on_finished()
    if failure is not None:
      raise failure

  def _hand_on_finished(self):
    finished, self._finished = self._finished, []
    return finished

  def _advance(self, text):
    """Moves the line and column past `text`, the decoded bytes just checked."""
    newlines = text.count("\n")
    if newlines:
      self._line += newlines
      self._column = len(text) - text.rfind("\n") - 1
    else:
      self._column += len(text)

  def _not_utf8(self, data, error):
    """The BadInput of `data`, whose `error.start`th byte is not UTF-8; `data` follows the input
    already counted by `_advance`."""
    self._advance(data[:error.start].decode("utf-8"))
    return bad_input.BadInput(
        self._path, "line %d, column %d" % (self._line, self._column + 1),
        "not UTF-8 (byte %s), %s" % (data[error.start:error.end].hex(" "), self._current_page()))

  def _current_page(self):
    """The page being read, e.g. "in page 4 'Paris' (line 120)", else `after_last_page`."""
    if self._page is None:
      return self.after_last_page()
    title = " '%s'" % self._page["title"] if self._page["title"] is not None else ""
    return "in page %d%s (line %d)" % (self._pages_read + 1, title, self._page["line"])

  def _start(self, name, attributes):
    if self._names is None:
      self._read_root(name)
      return
    self._path_stack.append(self._names.get(name))
    path = tuple(self._path_stack)
    if path == _PAGE:
      self._page = {"line": self._expat.CurrentLineNumber, "title": None, "ns": None,
                    "id": None, "redirect": None, "text": ""}
    elif self._page is None:
      return
    elif path in _PAGE_FIELDS:
      self._field = _PAGE_FIELDS[path]
      self._characters_read = []
    elif path == _REDIRECT:
      self._page["redirect"] = attributes.get("title", "")
    elif path == _REVISION:
      self._page["text"] = ""  # the last revision's text, even when it has none

  def _characters(self, data):
    if self._field is not None:
      self._characters_read.append(data)

  def _end(self, name):
    if not self._path_stack:  # the root's end
      return
    path = tuple(self._path_stack)
    self._path_stack.pop()
    if self._page is None:
      return
    if self._field is not None and path in _PAGE_FIELDS:
      self._page[self._field] = "".join(self._characters_read)
      self._field = None
      self._characters_read = []
    elif path == _PAGE:
      self._finished.append(self._make_page(self._page))
      self._pages_read += 1
      self._last_title = self._page["title"]
      self._page = None

  def _read_root(self, name):
    """Takes the element names in the root's namespace; refuses a root that is not <mediawiki>."""
    namespace, _, local = name.rpartition(" ")
    if local != "mediawiki":
      raise bad_input.BadInput(
          self._path, "line %d, column %d" % (self._expat.CurrentLineNumber,
                                              self._expat.CurrentColumnNumber + 1),
          "not a MediaWiki XML export: the root element is <%s>, not <mediawiki>" % local)
    prefix = namespace + " " if namespace else ""
    self._names = {prefix + local: local
                   for local in ("page", "title", "ns", "id", "redirect", "revision", "text")}

  def _make_page(self, fields):
    """The `Page` of a page's fields, once its </page> is read."""
    where = "page %d (line %d)" % (self._pages_read + 1, fields["line"])
    if fields["title"] is None:
      raise bad_input.BadInput(self._path, where, "the page has no <title>")
    where = "page %d '%s' (line %d)" % (self._pages_read + 1, fields["title"], fields["line"])
    numbers = {}
    for field in ("ns", "id"):
      try:
        numbers[field] = int(fields[field])
      except (TypeError, ValueError):
        raise bad_input.BadInput(self._path, where, "the page's <%s> is %s, not a number" % (
            field, "missing" if fields[field] is None else "'%s'" % fields[field])) from None
    return Page(title=fields["title"], namespace=numbers["ns"], page_id=numbers["id"],
                redirect=fields["redirect"], text=fields["text"], line=fields["line"])
