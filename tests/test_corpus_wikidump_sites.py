"""utils/corpus/wikidump.py and wikitext.py on any site's dump: the namespaces of <siteinfo> name
the links that show nothing; XML in UTF-16 or another declared encoding is read.

tests/data/wiki/bgwiki-latest-pages-articles-shortened.xml.bz2 is a real Bulgarian fragment in
UTF-16 (its README says where it comes from); what is expected of it was read off its text by
hand.
"""

import bz2
import os

from tests import wiki_dump_data as dump_data
from utils.corpus import page_xml
from utils.corpus import wikidump
from utils.corpus import wikitext

BULGARIAN = os.path.join(os.path.dirname(__file__), "data", "wiki",
                         "bgwiki-latest-pages-articles-shortened.xml.bz2")
ARTICLE = "Григориански календар"


def _bulgarian_xml():
  with bz2.open(BULGARIAN) as reader:
    return reader.read()


def test_the_bulgarian_fragment_in_utf16_is_read_with_its_pages():
  assert _bulgarian_xml()[:2] == b"\xff\xfe"  # UTF-16 with a byte order mark, as stored
  pages = list(wikidump.iter_pages(BULGARIAN))
  assert [(p.title, p.namespace, p.page_id) for p in pages] == [
      (ARTICLE, 0, 558), ("Уикипедия:Редактиране на страници", 4, 559),
      ("Уикипедия:Разговори/Архив/2005/октомври-ноември-декември", 4, 560)]
  assert [p.title for p in wikidump.iter_articles(BULGARIAN)] == [ARTICLE]
  # Its <siteinfo> names key 6 "Файл" and key 14 "Категория".
  assert pages[0].hidden_link_prefixes == {"file", "image", "category", "файл", "категория"}


def test_the_same_xml_in_utf8_and_utf16_reads_the_same(tmp_path):
  text = _bulgarian_xml().decode("utf-16")
  utf8 = tmp_path / "bg.xml"
  utf8.write_bytes(text.encode("utf-8"))
  big_endian = tmp_path / "bg-be.xml"  # no byte order mark: a declaration says it
  big_endian.write_bytes(('<?xml version="1.0" encoding="UTF-16BE"?>\n' + text).encode(
      "utf-16-be"))
  pages = list(wikidump.iter_pages(BULGARIAN))
  assert list(wikidump.iter_pages(str(utf8))) == pages
  # (a line more before every page: the declaration's)
  assert list(wikidump.iter_pages(str(big_endian))) == [p._replace(line=p.line + 1)
                                                        for p in pages]


def test_a_declared_single_byte_encoding_is_read(tmp_path):
  text = "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας."
  xml = dump_data.DUMP_HEADER + dump_data.page("Αθήνα", 0, 1, [
      (1, "2024-01-01T00:00:00Z", dump_data.EDITOR, text)]) + dump_data.DUMP_FOOTER
  path = tmp_path / "greek.xml"
  path.write_bytes(('<?xml version="1.0" encoding="ISO-8859-7"?>\n' + xml).encode("iso-8859-7"))
  assert [(p.title, p.text) for p in wikidump.iter_pages(str(path))] == [("Αθήνα", text)]


def test_the_sites_category_links_show_nothing_in_its_articles():
  article = next(wikidump.iter_articles(BULGARIAN))
  assert "[[Категория:Календари]]" in article.text
  english_only = "\n".join(wikitext.article_paragraphs(article.text))
  assert "Категория:Календари" in english_only  # what an English-only reader leaves
  paragraphs = wikitext.article_paragraphs(article.text, article.hidden_link_prefixes)
  text = "\n".join(paragraphs)
  assert "Категория" not in text and "Файл" not in text and "File:" not in text
  assert paragraphs[0].startswith("Григорианският календар (понякога наричан и Грегориански "
                                  "календар, „нов стил“) е съвременният международно признат "
                                  "светски календар, на който се основава")


def test_localized_names_and_aliases_hide_file_and_category_links():
  hidden = page_xml.ENGLISH_HIDDEN_LINK_PREFIXES | {"файл", "категория"}
  text = ("Начало [[Файл:Карта.png|thumb|Надпис]] на [[категория:Календари|х]] текста "
          "[[Image:Old.jpg]] [[:Категория:Календари|списък]] [[Медия:Звук.ogg|звук]].")
  assert wikitext.article_paragraphs(text, hidden) == ["Начало на текста списък звук."]


def test_a_page_without_ns_takes_its_namespace_from_its_titles_prefix(tmp_path):
  xml = "".join(line + "\n" for line in dump_data.DUMP.split("\n")[:-1]
                if not line.strip().startswith("<ns>"))
  path = tmp_path / "old.xml"
  path.write_bytes(xml.encode("utf-8"))
  # The header's <namespaces> name 1 "Talk" and 2 "User"; the expected numbers are the dump's.
  assert [(p.title, p.namespace) for p in wikidump.iter_pages(str(path))] == [
      (title, namespace) for title, namespace, _, _ in dump_data.EXPECTED_PAGES]
