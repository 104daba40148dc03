"""Raw-text inputs read as documents, whatever their format, streaming.

  fmt = documents.detect_format(path)
  for document in documents.iter_documents(path, fmt):
    document.paragraphs  # list of str

The formats (`detect_format`; `prepare_corpus.py --input_format` forces one):
  "wikidump"            a MediaWiki XML dump, whatever its name (`wikidump.py`, markup removed by
                        `wikitext.py`): one document per article, its paragraphs.
  "directory"           a directory of plain-text documents, one a file: `.txt`, `.gz`, `.bz2`
                        (compressed text), walked recursively in sorted order of the relative
                        paths; a file's paragraphs are split at blank lines.
  "documents_per_line"  one document a line (NVIDIA's formatted text; blank lines between them
                        are allowed): each line is one document of one paragraph.
  "sentences_per_line"  the generator's own format: one sentence a line, a blank line between
                        documents; the document's paragraphs are its sentences, taken as they
                        are (not split again).
A plain file may be `.gz` or `.bz2` compressed (the extension says which). A multistream dump's
index (lines "offset:page id:title") is refused: it holds no text.

No reader holds more of one document than bad_input.MAX_DOCUMENT_BYTES: a longer line, document
file or dump page is read past and is a bad document.

Errors: an input that cannot be read raises `bad_input.BadInput` naming the file and the position
(line and byte offset, the member file of a directory): text that is not UTF-8, a compressed file
cut short or corrupt. Given `on_bad`, a bad document is passed to it and skipped instead; a
compressed file cut short keeps the documents before the cut and passes the rest as one bad item.
"""

import bz2
import collections
import gzip
import os
import re
import zlib

from absl import logging

from utils.corpus import bad_input
from utils.corpus import wikidump

FORMATS = ("wikidump", "directory", "documents_per_line", "sentences_per_line")
# The extensions of a directory's document files.
DOCUMENT_EXTENSIONS = (".txt", ".gz", ".bz2")
# What format detection reads of a plain file at most: bytes of (decompressed) text, lines.
SNIFF_BYTES = 4 << 20
SNIFF_LINES = 10000

# Lines of a multistream dump's index: "offset:page id:title".
_INDEX_LINE = re.compile(r"^\d+:\d+:.")
# Lines that are markup, not text: an XML tag at the line's start, a wiki link, template or
# table, an escaped tag. A plain-text input with more than MARKUP_SHARE of such lines among its
# first ones is read as asked, with a warning.
_MARKUP_LINE = re.compile(r"^\s*</?[A-Za-z][\w:.-]*[\s>/]|\[\[|\{\{|^\s*\{\||&lt;")
MARKUP_SHARE = 0.1

# One document. source: the input path; position: where it starts ("line 12", the relative path
# of a directory's file, "page 4 'Title' (line 120)"); paragraphs: list of str (for
# "sentences_per_line": the sentences, already split).
Document = collections.namedtuple("Document", ["source", "position", "paragraphs"])

# The errors of a compressed stream cut short or corrupt (gzip.BadGzipFile is an OSError).
_STREAM_ERRORS = (EOFError, OSError, zlib.error)


class CutShort(bad_input.BadInput):
  """A compressed input that ends early or is corrupt: what follows the cut cannot be read."""


def detect_format(path):
  """The format of an input (one of FORMATS), by its kind and content.

  A directory is "directory". A file whose first bytes (decompressed) start a MediaWiki export
  (`wikidump.looks_like_dump`: a <mediawiki> root, after an XML declaration in any encoding), or
  named `.xml` / `.xml.bz2`, is "wikidump". Any other file is read (decompressed) up to
  SNIFF_BYTES or SNIFF_LINES: when a run of consecutive non-blank lines (a block between blank
  lines) holds two lines or more, it is "sentences_per_line"; when every block is one line, or
  there is no blank line at all (one document a line without separators), it is
  "documents_per_line".

  Raises:
    bad_input.BadInput: the path does not exist or cannot be read, or is a multistream dump's
      index.
  """
  if os.path.isdir(path):
    return "directory"
  if not os.path.isfile(path):
    raise bad_input.BadInput(path, "the input", "no such file or directory")
  if path.endswith((".xml", ".xml.bz2")) or wikidump.looks_like_dump(_head(path)):
    return "wikidump"
  refuse_dump_index(path)
  has_blank_line = has_long_block = False
  block_lines = 0
  try:
    for line in _sniffed_lines(path):
      if line.strip():
        block_lines += 1
        has_long_block = has_long_block or block_lines >= 2
      else:
        has_blank_line = True
        block_lines = 0
      if has_blank_line and has_long_block:
        return "sentences_per_line"
  except OSError as e:  # opening it (a stream error ends the lines)
    raise bad_input.BadInput(path, "the input", "cannot be read: %s" % e.strerror)
  return "documents_per_line"


def _head(path):
  """The first wikidump.HEAD_BYTES of a file, decompressed (fewer when a stream error ends
  them: the real read reports it)."""
  with open(path, "rb") as raw:
    try:
      return _decompressed(raw, path).read(wikidump.HEAD_BYTES)
    except _STREAM_ERRORS:
      return b""


def refuse_dump_index(path):
  """Raises bad_input.BadInput for a multistream dump's index: its first lines all
  "offset:page id:title" (e.g. enwiki-latest-pages-articles-multistream-index1.txt-p1p41242.bz2),
  which holds no text; the dump it indexes is read instead."""
  lines = [line for line in _sniffed_lines(path, 20) if line.strip()]
  if lines and all(_INDEX_LINE.match(line) for line in lines):
    raise bad_input.BadInput(path, "the input", (
        "a multistream dump's index (lines offset:page id:title), which holds no text: give "
        "the dump it indexes instead (its name without '-index')"))


def markup_warning(path):
  """A warning (str) for a file read as plain text whose first lines look like XML or wiki
  markup (more than MARKUP_SHARE of them, `_MARKUP_LINE`), else None."""
  lines = [line for line in _sniffed_lines(path, 1000) if line.strip()]
  markup = sum(1 for line in lines if _MARKUP_LINE.search(line))
  if lines and markup > MARKUP_SHARE * len(lines):
    return ("%s is read as plain text, but %d of its first %d lines look like XML or wiki "
            "markup: if it is a MediaWiki dump, give --input_format=wikidump" % (
                path, markup, len(lines)))
  return None


def _sniffed_lines(path, most=SNIFF_LINES):
  """The first lines (at most `most`) of a plain (maybe compressed) file, decoded leniently,
  each cut to SNIFF_BYTES; a stream error ends them (the real read reports it)."""
  read = 0
  with open(path, "rb") as raw:
    stream = _decompressed(raw, path)
    try:
      for _ in range(most):
        line = stream.readline(SNIFF_BYTES)
        read += len(line)
        if not line or read > SNIFF_BYTES:
          return
        yield line.decode("utf-8", errors="replace")
    except _STREAM_ERRORS:
      return


def _decompressed(raw, path):
  """The decompressed stream of an open binary file, by the path's extension."""
  if path.endswith(".gz"):
    return gzip.GzipFile(fileobj=raw, mode="rb")
  if path.endswith(".bz2"):
    return bz2.BZ2File(raw)
  return raw


def _compression(path):
  """"gzip", "bz2" or None, by the path's extension."""
  if path.endswith(".gz"):
    return "gzip"
  return "bz2" if path.endswith(".bz2") else None


def iter_documents(path, fmt, on_bad=None, share=None):
  """The documents of one input, streaming (memory flat in the input's size).

  Args:
    path: the input (a file, or a directory for "directory").
    fmt: one of FORMATS (`detect_format`).
    on_bad: None to raise at the first bad document; else called with each `BadInput` (a bad
      document, or the rest of a compressed file cut short), which is then skipped.
    share: for "wikidump", [k, K]: only the articles whose index in the dump (0-based, in the
      dump's order) is k mod K, the others read past without cleaning their markup (one of K
      extract units of a dump); None: every article. Other formats are read whole.

  Yields:
    `Document`s with at least one paragraph, in input order.

  Raises:
    bad_input.BadInput: naming the file and position (without `on_bad`).
    ValueError: for an unknown format.
  """
  if fmt == "directory":
    return iter_directory_documents(path, directory_files(path), on_bad)
  if fmt == "documents_per_line":
    return _line_documents(path, on_bad)
  if fmt == "sentences_per_line":
    return _sentence_documents(path, on_bad)
  if fmt == "wikidump":
    return _wikidump_documents(path, on_bad, share or (0, 1))
  raise ValueError("unknown input format %r (one of %s)" % (fmt, ", ".join(FORMATS)))


def _report(error, on_bad):
  """Raises `error`, or hands it to `on_bad`."""
  if on_bad is None:
    raise error
  on_bad(error)


# ---------------------------------------------------------------------------------------------
# A directory of documents.
# ---------------------------------------------------------------------------------------------


def directory_files(directory):
  """The document files of a directory (DOCUMENT_EXTENSIONS), recursively, hidden files and
  directories left out, as paths under `directory` sorted by their relative path. Other files
  are left out with one warning that counts them."""
  found, ignored = [], 0
  for root, subdirectories, names in os.walk(directory):
    subdirectories[:] = [name for name in subdirectories if not name.startswith(".")]
    for name in names:
      if name.startswith("."):
        continue
      if name.endswith(DOCUMENT_EXTENSIONS):
        found.append(os.path.relpath(os.path.join(root, name), directory))
      else:
        ignored += 1
  if ignored:
    logging.warning("%s: %d files left out: not %s", directory, ignored,
                    " / ".join(DOCUMENT_EXTENSIONS))
  return [os.path.join(directory, relative) for relative in sorted(found)]


def iter_directory_documents(directory, files, on_bad=None):
  """The documents of some files of a directory (`directory_files`), one a file, in the given
  order; paragraphs split at blank lines, each paragraph's lines joined with a space.

  Yields:
    `Document(directory, relative path, paragraphs)`; files without text are passed over.
  """
  for path in files:
    try:
      text = _read_document_file(path)
    except bad_input.BadInput as error:
      _report(error, on_bad)
      continue
    paragraphs = text_paragraphs(text)
    if paragraphs:
      yield Document(directory, os.path.relpath(path, directory), paragraphs)


def text_paragraphs(text):
  """The paragraphs of a text: split at blank lines, whitespace collapsed, empty ones dropped."""
  paragraphs, lines = [], []
  for line in text.split("\n") + [""]:
    if line.strip():
      lines.append(line)
    elif lines:
      paragraphs.append(" ".join(" ".join(lines).split()))
      lines = []
  return paragraphs


def _read_document_file(path):
  """The whole text of one (maybe compressed) document file.

  Raises:
    bad_input.BadInput: naming the file: not UTF-8 (byte offset and line), a compressed stream
      cut short or corrupt.
  """
  try:
    raw = open(path, "rb")
  except OSError as e:
    raise bad_input.BadInput(path, "the document", "cannot be read: %s" % e.strerror)
  with raw:
    try:
      data = _decompressed(raw, path).read(bad_input.MAX_DOCUMENT_BYTES + 1)
    except _STREAM_ERRORS as e:
      raise _stream_error(path, raw, e, "the document")
  if len(data) > bad_input.MAX_DOCUMENT_BYTES:
    raise bad_input.BadInput(path, "the document", "longer than %d bytes%s: not read" % (
        bad_input.MAX_DOCUMENT_BYTES, _of_text(path)))
  try:
    return data.decode("utf-8").lstrip("\ufeff")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise bad_input.BadInput(path, "line %d (byte %d%s)" % (line, e.start, _of_text(path)),
                             "not UTF-8 text")


def _of_text(path):
  """How a byte offset is meant: of the decompressed text for a compressed file."""
  return " of the decompressed text" if _compression(path) else ""


def _stream_error(path, raw, error, where):
  """The BadInput of a compressed stream that ends early or is corrupt, at the compressed file's
  read position."""
  kind = _compression(path) or "compressed"
  try:
    offset = raw.tell()
  except (OSError, ValueError):
    offset = -1
  if isinstance(error, EOFError):
    problem = "the %s stream ends early (the file is cut short)" % kind
  else:
    problem = "the %s data is corrupt: %s" % (kind, error)
  return bad_input.BadInput(path, "%s (byte %d of the compressed file)" % (where, offset),
                            problem)


# ---------------------------------------------------------------------------------------------
# Files of lines: one document a line, one sentence a line.
# ---------------------------------------------------------------------------------------------


def _numbered_lines(path):
  """The lines of a (maybe compressed) file, as (line number, text, error).

  error is None for a good line; a `BadInput` with text None for a line that is not UTF-8 (the
  reader decides what it spoils); and for a compressed stream cut short or corrupt, a last item
  (number of the lines before, None, `CutShort`). A last line without its newline is given only
  once the stream has ended cleanly, so a line cut by a truncation is never taken as whole.
  """
  try:
    raw = open(path, "rb")
  except OSError as e:
    yield 0, None, CutShort(path, "the file", "cannot be read: %s" % e.strerror)
    return
  with raw:
    lines = _bounded_lines(_decompressed(raw, path))
    number, offset, held = 0, 0, None
    while True:
      try:
        line = next(lines, None)
      except _STREAM_ERRORS as e:
        error = _stream_error(path, raw, e, "after line %d" % number)
        yield number, None, CutShort(error.path, error.position, error.problem)
        return
      for whole in ([held] if held is not None else []) + ([line] if line is not None and (
          isinstance(line, int) or line.endswith(b"\n")) else []):
        number += 1
        if isinstance(whole, int):  # a line too long, its length
          yield number, None, bad_input.BadInput(path, "line %d (byte %d%s)" % (
              number, offset, _of_text(path)), "longer than %d bytes: read past" % (
                  bad_input.MAX_DOCUMENT_BYTES))
          offset += whole
          continue
        text, error = _decoded(path, whole, number, offset)
        yield number, text, error
        offset += len(whole)
      held = line if line is not None and not (
          isinstance(line, int) or line.endswith(b"\n")) else None
      if line is None:
        return


def _bounded_lines(stream):
  """The lines of a binary stream, each with its newline (the last maybe without), but a line
  longer than bad_input.MAX_DOCUMENT_BYTES, which is read past and given as its length (int)."""
  limit = bad_input.MAX_DOCUMENT_BYTES
  while True:
    line = stream.readline(limit + 1)
    if not line:
      return
    if len(line) <= limit:
      yield line
      continue
    length = len(line)
    while not line.endswith(b"\n"):
      line = stream.readline(limit)
      if not line:
        break
      length += len(line)
    yield length


def _decoded(path, line, number, offset):
  """(text, None) of a line (the first line without a byte order mark), or (None, BadInput) for
  a line that is not UTF-8."""
  try:
    text = line.decode("utf-8")
  except UnicodeDecodeError as e:
    return None, bad_input.BadInput(path, "line %d (byte %d%s)" % (
        number, offset + e.start, _of_text(path)), "not UTF-8 text")
  return (text.lstrip("\ufeff") if number == 1 else text), None


def _line_documents(path, on_bad):
  """"documents_per_line": every non-blank line a document of one paragraph."""
  for number, text, error in _numbered_lines(path):
    if error is not None:
      _report(error, on_bad)
      continue
    paragraph = " ".join(text.split())
    if paragraph:
      yield Document(path, "line %d" % number, [paragraph])


def _sentence_documents(path, on_bad):
  """"sentences_per_line": blocks of non-blank lines, one sentence a line. A document with a line
  that is not UTF-8, or of more than bad_input.MAX_DOCUMENT_BYTES characters (its sentences are
  not held past it), is bad as a whole; one cut by the end of a compressed stream is dropped with
  the rest of the file."""
  sentences, first, bad, size = [], None, False, 0
  for number, text, error in _numbered_lines(path):
    if isinstance(error, CutShort):
      _report(error, on_bad)
      return
    if error is not None:
      if not bad:
        _report(error, on_bad)
      bad = True
      continue
    sentence = " ".join(text.split())
    if sentence:
      first = number if first is None else first
      size += len(sentence) + 1
      if not bad and size > bad_input.MAX_DOCUMENT_BYTES:
        _report(bad_input.BadInput(path, "line %d" % first, "a document of more than %d "
                                   "characters: read past" % bad_input.MAX_DOCUMENT_BYTES),
                on_bad)
        sentences, bad = [], True
      if not bad:
        sentences.append(sentence)
      continue
    if sentences and not bad:
      yield Document(path, "line %d" % first, sentences)
    sentences, first, bad, size = [], None, False, 0
  if sentences and not bad:
    yield Document(path, "line %d" % first, sentences)


# ---------------------------------------------------------------------------------------------
# MediaWiki dumps.
# ---------------------------------------------------------------------------------------------


def _wikidump_documents(path, on_bad, share):
  """"wikidump": the articles of a dump (`wikidump.iter_articles`) in its share [k, K], each as
  the paragraphs of its markup (`wikitext.article_paragraphs`); a dump cut short keeps the
  articles before the cut. Every share meets a dump's bad pages; with `on_bad`, share 0 alone
  reports them, so that each is counted once."""
  # Imported here: only a dump needs it (and mwparserfromhell).
  from utils.corpus import wikitext  # pylint: disable=g-import-not-at-top
  k, count = share
  if on_bad is not None and k != 0:
    on_bad = lambda error: None  # pylint: disable=unnecessary-lambda-assignment
  try:
    for index, page in enumerate(wikidump.iter_articles(path, on_bad)):
      if index % count != k:
        continue
      paragraphs = wikitext.article_paragraphs(page.text, page.hidden_link_prefixes)
      if paragraphs:
        yield Document(path, "page %s '%s' (line %d)" % (page.page_id, page.title, page.line),
                       paragraphs)
  except bad_input.BadInput as error:
    if on_bad is None:
      raise
    on_bad(error)
