"""utils/corpus/documents.py: each format's documents, written out by hand; format detection; bad
input named by file and position, or skipped and counted; compressed files cut short; a dump's
articles in shares."""

import bz2
import gzip
import os
import random

import pytest

from tests import corpus_data
from tests import wiki_dump_data
from utils.corpus import bad_input
from utils.corpus import documents

GENERATOR_TEXT = ("First sentence of one.\nSecond  sentence of one.\n\n"
                  "Only sentence of two.\n\n\n"
                  "Two, first.\nTwo,\tsecond.\nTwo, third.\n")
PER_LINE_TEXT = ("An article on one line. It has two sentences.\n\n"
                 "The second article.\n\n"
                 "  The third, indented.  \n\n")


def write(path, data, mode="wb"):
  os.makedirs(os.path.dirname(str(path)), exist_ok=True)
  extension = os.path.splitext(str(path))[1]
  if extension == ".bz2":  # blocks of 100 kB: a file cut in the middle keeps some
    writer = bz2.open(str(path), mode, compresslevel=1)
  else:
    writer = {".gz": gzip.open}.get(extension, open)(str(path), mode)
  with writer:
    writer.write(data.encode("utf-8") if isinstance(data, str) else data)
  return str(path)


def as_tuples(docs):
  return [(d.position, d.paragraphs) for d in docs]


def document_folder(root):
  """A folder of documents: .txt, .gz, .bz2 (one in a subdirectory), one not UTF-8, a hidden file
  and a file of another kind (both left out)."""
  write(root / "a.txt", "\ufeffFirst paragraph,\nits second line.\n\n\n  Second paragraph.\n")
  write(root / "sub" / "b.txt.gz", "Compressed with gzip.\n\nTwo paragraphs.")
  write(root / "c.bz2", "Compressed with bzip2, one paragraph.\n")
  write(root / "d.txt", b"Good line.\nBad \xff byte.\n")
  write(root / "e.txt", "\n  \n")  # no text: no document
  write(root / ".hidden.txt", "Hidden.")
  write(root / "notes.md", "Not a document.")
  return str(root)


def test_a_folder_gives_one_document_per_file_in_sorted_order(tmp_path):
  root = document_folder(tmp_path / "docs")
  assert documents.detect_format(root) == "directory"
  assert [os.path.relpath(p, root) for p in documents.directory_files(root)] == [
      "a.txt", "c.bz2", "d.txt", "e.txt", os.path.join("sub", "b.txt.gz")]
  skipped = []
  docs = list(documents.iter_documents(root, "directory", on_bad=skipped.append))
  assert as_tuples(docs) == [
      ("a.txt", ["First paragraph, its second line.", "Second paragraph."]),
      ("c.bz2", ["Compressed with bzip2, one paragraph."]),
      (os.path.join("sub", "b.txt.gz"), ["Compressed with gzip.", "Two paragraphs."]),
  ]
  assert all(d.source == root for d in docs)
  assert [str(e) for e in skipped] == ["%s: line 2 (byte 15): not UTF-8 text"
                                       % os.path.join(root, "d.txt")]


def test_a_bad_file_of_a_folder_stops_the_reading_naming_the_file(tmp_path):
  root = document_folder(tmp_path / "docs")
  reader = documents.iter_documents(root, "directory")
  assert next(reader).position == "a.txt"
  assert next(reader).position == "c.bz2"
  with pytest.raises(bad_input.BadInput) as caught:
    next(reader)
  assert (caught.value.path, caught.value.position) == (os.path.join(root, "d.txt"),
                                                         "line 2 (byte 15)")


def test_the_generators_format_keeps_its_sentences_as_they_are(tmp_path):
  path = write(tmp_path / "corpus.txt", GENERATOR_TEXT)
  assert documents.detect_format(path) == "sentences_per_line"
  assert as_tuples(documents.iter_documents(path, "sentences_per_line")) == [
      ("line 1", ["First sentence of one.", "Second sentence of one."]),
      ("line 4", ["Only sentence of two."]),
      ("line 7", ["Two, first.", "Two, second.", "Two, third."]),
  ]


def test_one_document_per_line_with_or_without_blank_lines(tmp_path):
  path = write(tmp_path / "formatted.txt", PER_LINE_TEXT)
  expected = [("line 1", ["An article on one line. It has two sentences."]),
              ("line 3", ["The second article."]), ("line 5", ["The third, indented."])]
  assert documents.detect_format(path) == "documents_per_line"
  assert as_tuples(documents.iter_documents(path, "documents_per_line")) == expected
  # Without blank lines between them (and the last line without its newline).
  packed = write(tmp_path / "packed.txt.bz2", "One.\nTwo.\nThree.")
  assert documents.detect_format(packed) == "documents_per_line"
  assert as_tuples(documents.iter_documents(packed, "documents_per_line")) == [
      ("line 1", ["One."]), ("line 2", ["Two."]), ("line 3", ["Three."])]


def test_format_detection_by_kind_and_extension(tmp_path):
  assert documents.detect_format(write(tmp_path / "dump.xml", "<mediawiki/>")) == "wikidump"
  assert documents.detect_format(write(tmp_path / "d.xml.bz2", "<mediawiki/>")) == "wikidump"
  assert documents.detect_format(write(tmp_path / "g.txt.gz", GENERATOR_TEXT)) == (
      "sentences_per_line")
  # A two-line block after the blank line decides as well as one before it.
  assert documents.detect_format(write(tmp_path / "late.txt", "A.\n\nB.\nC.\n")) == (
      "sentences_per_line")
  with pytest.raises(bad_input.BadInput, match="missing.txt: the input: no such file"):
    documents.detect_format(str(tmp_path / "missing.txt"))
  with pytest.raises(ValueError, match="unknown input format 'csv'"):
    documents.iter_documents(str(tmp_path / "late.txt"), "csv")


def test_a_line_that_is_not_utf8_spoils_its_document_only_when_skipped(tmp_path):
  data = b"Good one.\nStill one.\n\nBad \xc3 two.\nRest of two.\n\nThree.\n"
  path = write(tmp_path / "corpus.txt.gz", data)
  with pytest.raises(bad_input.BadInput) as caught:
    list(documents.iter_documents(path, "sentences_per_line"))
  assert str(caught.value) == ("%s: line 4 (byte 26 of the decompressed text): not UTF-8 text"
                               % path)
  skipped = []
  docs = documents.iter_documents(path, "sentences_per_line", on_bad=skipped.append)
  assert as_tuples(docs) == [("line 1", ["Good one.", "Still one."]), ("line 7", ["Three."])]
  assert len(skipped) == 1
  per_line = write(tmp_path / "lines.txt", b"One.\nT\xffwo.\nThree.\n")
  skipped = []
  assert as_tuples(documents.iter_documents(per_line, "documents_per_line", skipped.append)) == [
      ("line 1", ["One."]), ("line 3", ["Three."])]
  assert [e.position for e in skipped] == ["line 2 (byte 6)"]


def _many_documents_text(count, seed=3):
  """Documents of random words, hard to compress, so a cut falls among them."""
  rng = random.Random(seed)
  words = ["w%d" % rng.randrange(10**6) for _ in range(3000)]
  return "".join("%s.\n%s.\n\n" % (" ".join(rng.sample(words, 8)), " ".join(rng.sample(words, 5)))
                 for _ in range(count))


@pytest.mark.parametrize("extension, kind", [(".gz", "gzip"), (".bz2", "bz2")])
def test_a_compressed_file_cut_short_keeps_the_documents_before_the_cut(tmp_path, extension,
                                                                        kind):
  text = _many_documents_text(4000)
  whole = write(tmp_path / ("whole.txt" + extension), text)
  expected = as_tuples(documents.iter_documents(whole, "sentences_per_line"))
  assert len(expected) == 4000
  data = open(whole, "rb").read()
  cut = write(tmp_path / ("cut.txt" + extension), b"")
  with open(cut, "wb") as writer:
    writer.write(data[:len(data) // 2])
  with pytest.raises(bad_input.BadInput,
                     match=r"cut.txt%s: after line \d+ \(byte \d+ of the compressed file\): the "
                     r"%s stream ends early" % (extension, kind)):
    list(documents.iter_documents(cut, "sentences_per_line"))
  skipped = []
  kept = as_tuples(documents.iter_documents(cut, "sentences_per_line", on_bad=skipped.append))
  assert 0 < len(kept) < 4000 and kept == expected[:len(kept)]
  assert len(skipped) == 1 and isinstance(skipped[0], documents.CutShort)
  # A document file of a folder cut short is one bad document.
  folder = tmp_path / "folder"
  os.makedirs(str(folder))
  os.rename(cut, str(folder / ("cut" + extension)))
  write(folder / "fine.txt", "Fine.")
  skipped = []
  docs = documents.iter_documents(str(folder), "directory", on_bad=skipped.append)
  assert as_tuples(docs) == [("fine.txt", ["Fine."])]
  assert "stream ends early" in str(skipped[0])


def test_a_file_that_is_not_gzip_is_named_as_corrupt(tmp_path):
  path = write(tmp_path / "fake.txt", "Not compressed at all.\n")
  os.rename(path, path + ".gz")
  with pytest.raises(bad_input.BadInput, match=r"fake.txt.gz: after line 0 \(byte \d+ of the "
                                               r"compressed file\): the gzip data is corrupt"):
    list(documents.iter_documents(path + ".gz", "documents_per_line"))


def test_text_paragraphs_split_at_blank_lines_and_collapse_whitespace():
  assert documents.text_paragraphs("a\nb\n \n\n c \t d \n") == ["a b", "c d"]
  assert documents.text_paragraphs("") == []


def test_a_file_that_cannot_be_read_is_named(tmp_path):
  folder = tmp_path / "folder"
  write(folder / "fine.txt", "Fine.")
  os.symlink(str(tmp_path / "gone.txt"), str(folder / "dangling.txt"))
  skipped = []
  docs = documents.iter_documents(str(folder), "directory", on_bad=skipped.append)
  assert as_tuples(docs) == [("fine.txt", ["Fine."])]
  assert [str(e) for e in skipped] == ["%s: the document: cannot be read: No such file or "
                                       "directory" % (folder / "dangling.txt")]
  with pytest.raises(bad_input.BadInput, match="folder: the file: cannot be read: Is a "
                                               "directory"):
    list(documents.iter_documents(str(folder), "documents_per_line"))


def test_a_dumps_share_holds_the_articles_of_its_index_mod_the_shares(tmp_path):
  path = corpus_data.write_dump(str(tmp_path / "dump.xml"))["path"]
  whole = as_tuples(documents.iter_documents(path, "wikidump"))
  assert len(whole) == 34  # every article has prose: article i is document i
  assert as_tuples(documents.iter_documents(path, "wikidump", share=[0, 1])) == whole
  for count in (2, 3):
    for k in range(count):
      assert as_tuples(documents.iter_documents(path, "wikidump", share=[k, count])) == (
          whole[k::count])


def test_every_share_of_a_dump_cut_short_keeps_its_articles_before_the_cut(tmp_path):
  path = corpus_data.write_dump(str(tmp_path / "dump.xml"))["path"]
  whole = as_tuples(documents.iter_documents(path, "wikidump"))
  with open(path, "rb") as reader:
    data = reader.read()
  cut = write(tmp_path / "cut.xml", data[:len(data) // 2])
  for k in (0, 1):
    with pytest.raises(bad_input.BadInput, match="the XML ends early"):
      list(documents.iter_documents(cut, "wikidump", share=[k, 2]))
  # Skipping: each share keeps its articles before the cut; share 0 alone reports the cut.
  kept = []
  for k in (0, 1):
    skipped = []
    kept.append(as_tuples(documents.iter_documents(cut, "wikidump", skipped.append,
                                                   share=[k, 2])))
    assert len(skipped) == (1 if k == 0 else 0)
  before = whole[:len(kept[0]) + len(kept[1])]
  assert 0 < len(before) < len(whole) and kept == [before[0::2], before[1::2]]


# Wikipedia's names of a split dump's parts, a multistream dump's parts and their index.
PART_NAMES = ("enwiki-latest-pages-articles1.xml-p000000010p000030302.bz2",
              "enwiki-latest-pages-articles-multistream1.xml-p1p41242.bz2")
INDEX_NAME = "enwiki-latest-pages-articles-multistream-index1.txt-p1p41242.bz2"


def test_a_dump_is_told_by_its_first_bytes_whatever_its_name(tmp_path):
  xml = wiki_dump_data.DUMP.encode("utf-8")
  for name in PART_NAMES:
    path = write(tmp_path / name, xml)
    assert documents.detect_format(path) == "wikidump", name
    assert [d.position.split(" (")[0] for d in documents.iter_documents(path, "wikidump")] == [
        "page 22989 'Paris'", "page 1216 'Athens'", "page 30057 'Tokyo'"]
  declared = '<?xml version="1.0" encoding="UTF-16"?>\n' + wiki_dump_data.DUMP
  assert documents.detect_format(write(tmp_path / "pages.txt", declared.encode("utf-16"))) == (
      "wikidump")
  commented = write(tmp_path / "export", "<!-- exported -->\n" + wiki_dump_data.DUMP)
  assert documents.detect_format(commented) == "wikidump"
  # Text that mentions the root is text.
  assert documents.detect_format(write(tmp_path / "notes.txt", "About <mediawiki> roots.\n")) == (
      "documents_per_line")


def test_a_multistream_index_is_refused_with_what_to_give_instead(tmp_path):
  path = write(tmp_path / INDEX_NAME, "616:10:AccessibleComputing\n616:12:Anarchism\n"
                                      "616:13:AfghanistanHistory\n")
  with pytest.raises(bad_input.BadInput, match="a multistream dump's index .lines offset:page "
                                               "id:title., which holds no text: give the dump"):
    documents.detect_format(path)


def test_plain_text_that_looks_like_markup_is_warned_about(tmp_path):
  lines = wiki_dump_data.DUMP.split("\n")
  looks = write(tmp_path / "looks.txt", wiki_dump_data.DUMP)
  warning = documents.markup_warning(looks)
  markup = sum(1 for line in lines if line.lstrip().startswith(("<", "{|")) or "[[" in line
               or "{{" in line or "&lt;" in line)  # tags, links, templates, tables
  assert warning == ("%s is read as plain text, but %d of its first %d lines look like XML or "
                     "wiki markup: if it is a MediaWiki dump, give --input_format=wikidump" % (
                         looks, markup, sum(1 for line in lines if line.strip())))
  assert documents.markup_warning(write(tmp_path / "plain.txt", GENERATOR_TEXT)) is None


def test_a_line_or_a_document_file_over_the_bound_is_read_past(tmp_path, monkeypatch):
  monkeypatch.setattr(bad_input, "MAX_DOCUMENT_BYTES", 100)
  long_line = "word " * 30 + "\n"  # 151 bytes
  path = write(tmp_path / "lines.txt.gz", "Short one.\n" + long_line + "Short two.\n")
  skipped = []
  assert as_tuples(documents.iter_documents(path, "documents_per_line", skipped.append)) == [
      ("line 1", ["Short one."]), ("line 3", ["Short two."])]
  assert [str(e) for e in skipped] == [
      "%s: line 2 (byte 11 of the decompressed text): longer than 100 bytes: read past" % path]
  folder = tmp_path / "folder"
  write(folder / "a.txt", "Fine.\n")
  write(folder / "b.txt", long_line)
  skipped = []
  assert as_tuples(documents.iter_documents(str(folder), "directory", skipped.append)) == [
      ("a.txt", ["Fine."])]
  assert [e.problem for e in skipped] == ["longer than 100 bytes: not read"]


def test_a_block_of_sentences_over_the_bound_is_not_held(tmp_path, monkeypatch):
  monkeypatch.setattr(bad_input, "MAX_DOCUMENT_BYTES", 100)
  block = "".join("Sentence number %d of the long one.\n" % n for n in range(10))  # 360 chars
  path = write(tmp_path / "blocks.txt", "Short one.\nIts second.\n\n" + block + "\nLast.\nOne.\n")
  skipped = []
  assert as_tuples(documents.iter_documents(path, "sentences_per_line", skipped.append)) == [
      ("line 1", ["Short one.", "Its second."]), ("line 15", ["Last.", "One."])]
  assert [str(e) for e in skipped] == [
      "%s: line 4: a document of more than 100 characters: read past" % path]
