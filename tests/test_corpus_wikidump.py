"""utils/corpus/wikidump.py: pages and articles of a MediaWiki XML dump, plain or bz2 (one stream
or several), and the errors of a cut, malformed or non-UTF-8 dump.

The dump is tests/wiki_dump_data.py's, written as MediaWiki's export writes one.
"""

import bz2
import gc
import tracemalloc

import pytest

from tests import wiki_dump_data as dump_data
from utils.corpus import bad_input
from utils.corpus import wikidump
from utils.corpus import wikitext

def _lines_of_pages(xml):
  """The 1-based line of each "<page>" line of `xml`, counted on the text itself."""
  return [number for number, line in enumerate(xml.split("\n"), 1) if line.strip() == "<page>"]


def _write(path, data):
  path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
  return str(path)


def _expect_bad_input(path, pages_before=None):
  """Reads every page of `path`; returns the BadInput raised (and checks the pages read first)."""
  read = []
  with pytest.raises(bad_input.BadInput) as raised:
    for page in wikidump.iter_pages(path):
      read.append(page.title)
  if pages_before is not None:
    assert read == pages_before
  assert raised.value.path == path
  return raised.value


def test_reads_every_page_with_its_fields(tmp_path):
  pages = list(wikidump.iter_pages(_write(tmp_path / "dump.xml", dump_data.DUMP)))
  assert [(p.title, p.namespace, p.page_id, p.redirect) for p in pages] == dump_data.EXPECTED_PAGES
  assert [p.line for p in pages] == _lines_of_pages(dump_data.DUMP)
  assert all(isinstance(p, wikidump.Page) for p in pages)


def test_a_path_object_is_read_like_its_string(tmp_path):
  path = tmp_path / "dump.xml"
  _write(path, dump_data.DUMP)
  assert list(wikidump.iter_pages(path)) == list(wikidump.iter_pages(str(path)))


def test_text_is_the_last_revisions_with_xml_entities_decoded(tmp_path):
  pages = {p.title: p for p in wikidump.iter_pages(_write(tmp_path / "dump.xml", dump_data.DUMP))}
  assert pages["Athens"].text.startswith("'''Athens''' ({{lang-el|Αθήνα}}")
  assert "old text" not in pages["Athens"].text
  assert '[[France]].<ref name="insee">{{cite web' in pages["Paris"].text
  assert "''fashion''&nbsp;and" in pages["Paris"].text  # an HTML entity of the wikitext itself
  assert pages["Paris"].text.endswith("[[fr:Paris]]")
  assert pages["Empty"].text == ""
  assert pages["Tokyo"].text.startswith("'''Tokyo''' (東京, ''Tōkyō'')")


def test_articles_are_namespace_0_pages_with_text_that_are_not_redirects(tmp_path):
  articles = list(wikidump.iter_articles(_write(tmp_path / "dump.xml", dump_data.DUMP)))
  assert [a.title for a in articles] == ["Paris", "Athens", "Tokyo"]


def test_articles_give_the_paragraphs_a_reader_sees(tmp_path):
  articles = wikidump.iter_articles(_write(tmp_path / "dump.xml", dump_data.DUMP))
  assert {a.title: wikitext.article_paragraphs(a.text) for a in articles} == dump_data.EXPECTED_PARAGRAPHS


def test_export_schema_0_10_reads_the_same(tmp_path):
  assert dump_data.EXPORT_0_11 in dump_data.DUMP
  old = dump_data.DUMP.replace(dump_data.EXPORT_0_11, dump_data.EXPORT_0_10).replace('version="0.11"', 'version="0.10"')
  assert (list(wikidump.iter_pages(_write(tmp_path / "old.xml", old)))
          == list(wikidump.iter_pages(_write(tmp_path / "new.xml", dump_data.DUMP))))


def test_bz2_reads_the_same_as_xml(tmp_path):
  plain = list(wikidump.iter_pages(_write(tmp_path / "dump.xml", dump_data.DUMP)))
  compressed = _write(tmp_path / "dump.xml.bz2", bz2.compress(dump_data.DUMP.encode("utf-8")))
  assert list(wikidump.iter_pages(compressed)) == plain
  assert [a.title for a in wikidump.iter_articles(compressed)] == ["Paris", "Athens", "Tokyo"]


def test_multistream_bz2_gives_the_pages_of_every_stream(tmp_path):
  first = dump_data.DUMP_HEADER + "".join(dump_data.PAGES[:3])
  second = "".join(dump_data.PAGES[3:]) + dump_data.DUMP_FOOTER
  path = _write(tmp_path / "dump-multistream.xml.bz2", dump_data.multistream([first, second]))
  pages = list(wikidump.iter_pages(path))
  assert [(p.title, p.namespace, p.page_id, p.redirect) for p in pages] == dump_data.EXPECTED_PAGES
  assert [p.line for p in pages] == _lines_of_pages(dump_data.DUMP)


def test_a_bz2_cut_in_the_middle_names_the_last_whole_page(tmp_path):
  first = dump_data.DUMP_HEADER + "".join(dump_data.PAGES[:3])
  second = "".join(dump_data.PAGES[3:]) + dump_data.DUMP_FOOTER
  data = dump_data.multistream([first, second])
  first_size = len(bz2.compress(first.encode("utf-8")))
  cut = first_size + (len(data) - first_size) // 2
  path = _write(tmp_path / "cut.xml.bz2", data[:cut])
  error = _expect_bad_input(path, pages_before=["Paris", "Lutetia", "Talk:Paris"])
  assert error.problem == "the bz2 stream ends early"
  assert error.position == "after page 3 'Talk:Paris' (byte %d of the compressed file)" % cut
  assert str(error).startswith(path + ": after page 3 'Talk:Paris'")


def test_a_one_stream_bz2_cut_in_the_middle_has_no_whole_page(tmp_path):
  data = bz2.compress(dump_data.DUMP.encode("utf-8"))
  error = _expect_bad_input(_write(tmp_path / "cut.xml.bz2", data[:len(data) // 2]),
                            pages_before=[])
  assert error.problem == "the bz2 stream ends early"
  assert error.position.startswith("before the end of the first page (byte ")


def test_data_that_is_not_bz2_is_bad_input(tmp_path):
  error = _expect_bad_input(_write(tmp_path / "dump.xml.bz2", dump_data.DUMP), pages_before=[])
  assert error.problem.startswith("not bz2 data")
  assert error.position.startswith("compressed bytes 0 to ")


def test_a_file_that_is_not_xml_is_bad_input_at_line_and_column(tmp_path):
  error = _expect_bad_input(_write(tmp_path / "notes.xml", "Just some notes.\n"))
  assert error.position == "line 1, column 1"
  assert error.problem.startswith("not well-formed XML")


def test_malformed_xml_is_named_by_line_and_column_after_the_pages_before_it(tmp_path):
  broken = dump_data.DUMP.replace("<title>Talk:Paris</title>", "<title>Talk:Paris</titel>")
  lines = broken.split("\n")
  line = next(n for n, text in enumerate(lines, 1) if "</titel>" in text)
  column = lines[line - 1].index("titel>") + 1  # expat places a mismatched tag at its name
  error = _expect_bad_input(_write(tmp_path / "dump.xml", broken),
                            pages_before=["Paris", "Lutetia"])
  assert error.position == "line %d, column %d" % (line, column)
  # The page is named by its place: its title is the element that is not closed.
  byte = dump_data.DUMP.encode("utf-8").index(dump_data.TALK_PAGE.encode("utf-8")) + 2
  assert error.problem == ("not well-formed XML: mismatched tag, in page 3 (line %d, byte %d of "
                           "the XML)" % (_lines_of_pages(dump_data.DUMP)[2], byte))


def test_xml_that_ends_early_names_the_last_whole_page(tmp_path):
  cut = dump_data.DUMP_HEADER + "".join(dump_data.PAGES[:2]) + dump_data.PAGES[2][:40]
  error = _expect_bad_input(_write(tmp_path / "dump.xml", cut),
                            pages_before=["Paris", "Lutetia"])
  assert error.problem == ("not well-formed XML: the page is never closed (the XML ends early, "
                           "after page 2 'Lutetia')")
  assert error.position.startswith("page 3 'Talk:Paris' (line %d, byte " % (
      _lines_of_pages(dump_data.DUMP)[2]))


def test_a_root_other_than_mediawiki_is_bad_input(tmp_path):
  error = _expect_bad_input(_write(tmp_path / "page.xml", "<html><body>Paris</body></html>"))
  assert error.problem == "not a MediaWiki XML export: the root element is <html>, not <mediawiki>"


def test_bytes_that_are_not_utf8_are_named_by_line_and_column(tmp_path):
  data = dump_data.DUMP.encode("utf-8").replace("Η Αθήνα".encode("utf-8"), b"H \xff\xfe")
  lines = dump_data.DUMP.split("\n")
  line = next(n for n, text in enumerate(lines, 1) if "Η Αθήνα" in text)
  column = lines[line - 1].index("Η Αθήνα") + 3
  for path in (_write(tmp_path / "dump.xml", data),
               _write(tmp_path / "dump.xml.bz2", bz2.compress(data))):
    error = _expect_bad_input(path, pages_before=["Paris", "Lutetia", "Talk:Paris",
                                                  "User:Example editor"])
    assert error.position == "line %d, column %d" % (line, column)
    byte = dump_data.DUMP.encode("utf-8").index(dump_data.ATHENS.encode("utf-8")) + 2
    assert error.problem == ("not UTF-8 (byte ff), in page 5 'Athens' (id 1216, line %d, byte %d "
                             "of the XML)" % (_lines_of_pages(dump_data.DUMP)[4], byte))


def test_a_utf8_character_cut_by_the_files_end_is_bad_input(tmp_path):
  data = (dump_data.DUMP_HEADER + dump_data.PARIS).encode("utf-8") + "Α".encode("utf-8")[:1]
  error = _expect_bad_input(_write(tmp_path / "dump.xml", data), pages_before=["Paris"])
  assert error.problem.startswith("not UTF-8")


def test_a_page_whose_namespace_is_not_a_number_is_bad_input(tmp_path):
  path = _write(tmp_path / "dump.xml", dump_data.DUMP.replace("<ns>1</ns>", "<ns>x</ns>"))
  error = _expect_bad_input(path, pages_before=["Paris", "Lutetia"])
  byte = dump_data.DUMP.encode("utf-8").index(dump_data.TALK_PAGE.encode("utf-8")) + 2
  assert error.position == "page 3 'Talk:Paris' (id 5002, line %d, byte %d of the XML)" % (
      _lines_of_pages(dump_data.DUMP)[2], byte)
  assert error.problem == "the page's <ns> is 'x', not a number"


def test_a_missing_file_is_bad_input(tmp_path):
  error = _expect_bad_input(str(tmp_path / "missing.xml.bz2"))
  assert error.problem.startswith("cannot be read")


def _generated_dump(pages):
  """A dump of `pages` small articles, each with a paragraph of its own."""
  body = "".join(
      "  <page>\n    <title>Article %d</title>\n    <ns>0</ns>\n    <id>%d</id>\n"
      "    <revision>\n      <id>%d</id>\n      <model>wikitext</model>\n"
      "      <format>text/x-wiki</format>\n      <text xml:space=\"preserve\">%s</text>\n"
      "    </revision>\n  </page>\n" % (i, i, i, "Article %d is about [[things]]. " % i * 12)
      for i in range(pages))
  return dump_data.DUMP_HEADER + body + dump_data.DUMP_FOOTER


def _peak_memory_reading(path):
  """The peak of memory allocated while every page of `path` is read (and dropped), in bytes."""
  gc.collect()
  tracemalloc.start()
  try:
    count = sum(1 for _ in wikidump.iter_pages(path))
    return count, tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()


def test_memory_stays_flat_whatever_the_dumps_size(tmp_path, monkeypatch):
  monkeypatch.setattr(wikidump, "CHUNK_BYTES", 16 << 10)
  # Both span whole bz2 blocks (900 KB of XML each), read one at a time.
  small = _write(tmp_path / "small.xml.bz2", bz2.compress(_generated_dump(2000).encode()))
  large_text = _generated_dump(8000).encode()
  large = _write(tmp_path / "large.xml.bz2", bz2.compress(large_text))
  assert len(large_text) > 4 << 20
  small_count, small_peak = _peak_memory_reading(small)
  large_count, large_peak = _peak_memory_reading(large)
  assert (small_count, large_count) == (2000, 8000)
  # 4 times the pages: keeping the 6,000 more pages' text would add 3 MB; the peak differs by
  # no more than where the chunks' ends happen to fall (a chunk is 16 KB).
  assert large_peak - small_peak < 64 << 10, (small_peak, large_peak)
