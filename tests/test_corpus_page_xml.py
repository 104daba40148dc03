"""utils/corpus/page_xml.py: a dump's header (its root and the site's namespaces) and one page
parsed alone, fed in pieces: its fields, a page over the bound, XML that is not well-formed.

The XML is tests/wiki_dump_data.py's; the fields expected are read off it by hand."""

from xml.parsers import expat

import pytest

from tests import wiki_dump_data as dump_data
from utils.corpus import bad_input
from utils.corpus import page_xml

ROOT = dump_data.EXPORT_0_11 + " mediawiki"


def _parsed(xml, piece=7):
  parser = page_xml.PageParser(ROOT)
  data = xml.encode("utf-8")
  for start in range(0, len(data), piece):
    parser.feed(data[start:start + piece])
  parser.feed(b"", final=True)
  return parser


def test_the_header_gives_the_root_and_the_sites_hidden_link_names():
  header = page_xml.Header()
  header.expat.Parse(dump_data.DUMP_HEADER.encode("utf-8"), False)
  assert header.root == ROOT
  assert header.namespaces == {-2: "Media", 0: "", 1: "Talk", 2: "User", 6: "File",
                               14: "Category"}
  assert header.hidden_link_prefixes() == {"file", "image", "category"}


def test_a_pages_fields_are_read_from_pieces_of_any_size():
  for piece in (1, 7, 1 << 20):
    fields = _parsed(dump_data.ATHENS, piece).fields
    assert fields == {"title": "Athens", "ns": "0", "id": "1216", "redirect": None,
                      "text": "'''Athens''' ({{lang-el|Αθήνα}}, ''Athína'') is the capital and "
                              "largest city of [[Greece]]. Η Αθήνα είναι η πρωτεύουσα της "
                              "Ελλάδας."}
  assert _parsed(dump_data.LUTETIA_REDIRECT).fields["redirect"] == "Paris"


def test_a_page_over_the_bound_keeps_none_of_its_text(monkeypatch):
  monkeypatch.setattr(bad_input, "MAX_DOCUMENT_BYTES", 100)
  parser = _parsed(dump_data.ATHENS)
  assert parser.reader.too_long and parser.fields["text"] == ""
  assert not _parsed(dump_data.TALK_PAGE).reader.too_long  # 46 characters of text


def test_a_page_that_is_not_well_formed_is_placed_by_its_own_lines():
  broken = dump_data.TALK_PAGE.replace("<ns>1</ns>", "<ns>1</nz>")
  with pytest.raises(expat.ExpatError) as raised:
    _parsed(broken)
  line = broken.split("\n").index("    <ns>1</nz>") + 1
  parser = page_xml.PageParser(ROOT)
  assert parser.error_place(raised.value) == (line, len("    <ns>1</") + 1)
