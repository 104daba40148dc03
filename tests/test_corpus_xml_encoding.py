"""utils/corpus/xml_encoding.py: the encoding of XML told by its first bytes, and XML in any
encoding given as UTF-8, its bad bytes named by line and column."""

import codecs

from utils.corpus import xml_encoding

XML = '<?xml version="1.0" encoding="%s"?>\n<mediawiki>Αθήνα\nΑθήνα</mediawiki>\n'


def test_the_encoding_is_told_by_the_byte_order_mark_or_the_declaration():
  assert xml_encoding.of_head(codecs.BOM_UTF16_LE + (XML % "UTF-16").encode("utf-16-le")) == (
      "utf-16")
  assert xml_encoding.of_head((XML % "UTF-16").encode("utf-16-be")) == "utf-16-be"
  assert xml_encoding.of_head((XML % "UTF-16").encode("utf-16-le")) == "utf-16-le"
  assert xml_encoding.of_head((XML % "ISO-8859-7").encode("iso-8859-7")) == "iso8859-7"
  assert xml_encoding.of_head(codecs.BOM_UTF8 + (XML % "UTF-8").encode()) == "utf-8"
  assert xml_encoding.of_head(b"<mediawiki>") == "utf-8"
  assert xml_encoding.of_head((XML % "no-such-codec").encode()) == "utf-8"


def _utf8(data, chunk):
  stream = xml_encoding.Utf8Stream("x.xml")
  out, errors = [], []
  for start in range(0, len(data), chunk):
    for piece, error in stream.decode(data[start:start + chunk]):
      out.append(piece)
      errors += [error] if error is not None else []
  for piece, error in stream.decode(b"", final=True):
    out.append(piece)
    errors += [error] if error is not None else []
  return b"".join(out), errors


def test_any_encoding_is_given_as_utf8_whatever_the_chunks():
  for codec in ("UTF-16", "UTF-8", "ISO-8859-7"):
    text = XML % codec
    for chunk in (1, 7, 1000):
      utf8, errors = _utf8(text.encode(codec), chunk)
      assert (utf8.decode("utf-8"), errors) == (text, []), (codec, chunk)


def test_a_bad_byte_is_named_by_line_and_column_and_read_past():
  data = (XML % "UTF-8").encode("utf-8").replace("\nΑθήνα<".encode(), "\nΑθ".encode()
                                                 + b"\xff" + "ήνα<".encode())
  utf8, errors = _utf8(data, 5)
  assert utf8.decode("utf-8") == (XML % "UTF-8")
  assert [(e.position, e.problem) for e in errors] == [("line 3, column 3", "not UTF-8 (byte ff)")]
