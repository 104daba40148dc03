"""The encoding of XML told by its first bytes, and XML in any encoding turned into UTF-8 as it is
read (`wikidump.py` cuts and parses UTF-8).

  codec = xml_encoding.of_head(first_bytes)   # "utf-8", "utf-16", "iso8859-7", ...
  stream = xml_encoding.Utf8Stream(path)
  for utf8, error in stream.decode(chunk): ...
"""

import codecs
import re

from utils.corpus import bad_input

# The bytes the encoding is decided from: a byte order mark, an XML declaration.
DECLARATION_BYTES = 256
_XML_DECLARATION = re.compile(rb"""^<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


def of_head(head):
  """The codec of XML whose first bytes are `head`: by its byte order mark, else the encoding of
  its declaration, else UTF-8 (a codec name of Python's, e.g. "utf-8", "utf-16")."""
  if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
    return "utf-16"
  if head.startswith(b"<\x00?\x00"):
    return "utf-16-le"
  if head.startswith(b"\x00<\x00?"):
    return "utf-16-be"
  declared = _XML_DECLARATION.match(head.lstrip(codecs.BOM_UTF8))
  if declared:
    try:
      return codecs.lookup(declared.group(1).decode("ascii")).name
    except LookupError:
      return "utf-8"  # expat would refuse it too: read as UTF-8, its errors named there
  return "utf-8"


class Utf8Stream:
  """An XML file's bytes, fed in chunks, as UTF-8: checked when the XML is UTF-8, else decoded
  in the encoding its byte order mark or declaration names (`of_head` of its first
  DECLARATION_BYTES) and encoded as UTF-8. Counts lines and columns to place a bad byte."""

  def __init__(self, path):
    self._path = path
    self._head = b""
    self._encoding = None
    self._decoder = None
    self._undecoded = b""
    self._line, self._column = 1, 0

  def restart(self):
    """After lost bytes: the next ones start afresh (a character cut by the loss is lost)."""
    self._undecoded = b""
    if self._decoder is not None:
      self._decoder.reset()

  def decode(self, data, final=False):
    """Yields (UTF-8 bytes, None) pieces of `data` and (b"", BadInput) for each bad byte (read
    past)."""
    if self._encoding is None:
      self._head += data
      if len(self._head) < DECLARATION_BYTES and not final:
        return
      data, self._head = self._head, b""
      self._encoding = of_head(data)
      if self._encoding != "utf-8":
        self._decoder = codecs.getincrementaldecoder(self._encoding)("strict")
      elif data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    if self._decoder is not None:
      yield from self._transcoded(data, final)
      return
    data = self._undecoded + data if self._undecoded else data
    while True:
      try:
        text, used = codecs.utf_8_decode(data, "strict", final)
      except UnicodeDecodeError as error:
        good = data[:error.start]
        self._advance(good.decode("utf-8"))
        yield good, self._not_valid(data[error.start:error.end])
        data = data[error.end:]
        continue
      self._advance(text)
      self._undecoded = data[used:]
      yield data[:used], None
      return

  def _transcoded(self, data, final):
    try:
      text = self._decoder.decode(data, final)
    except UnicodeDecodeError as error:
      self._decoder.reset()
      yield b"", self._not_valid(error.object[error.start:error.end])
      return
    self._advance(text)
    yield text.lstrip("\ufeff").encode("utf-8"), None

  def _advance(self, text):
    newlines = text.count("\n")
    if newlines:
      self._line += newlines
      self._column = len(text) - text.rfind("\n") - 1
    else:
      self._column += len(text)

  def _not_valid(self, bad):
    return bad_input.BadInput(self._path, "line %d, column %d" % (self._line, self._column + 1),
                              "not %s (byte %s)" % (self._encoding.upper().replace("_", "-"),
                                                    bad.hex(" ")))
