"""utils/corpus/wikidump.py and bz2_blocks.py on damaged dumps: one bad page costs that page, one
bad bz2 block or stream the pages inside it; the errors name the page (title, id, line, byte) or
the compressed bytes; a page longer than the bound is read past without holding it.

The dumps are tests/wiki_dump_data.py's village articles; what is expected is counted on the
dump's text and compressed bytes here, not taken from the reader.
"""

import bz2
import gc
import os
import re
import tracemalloc

import pytest

from tests import corpus_data
from tests import wiki_dump_data as dump_data
from utils.corpus import bad_input
from utils.corpus import bz2_blocks
from utils.corpus import manifest
from utils.corpus import runner
from utils.corpus import stages
from utils.corpus import wikidump

VILLAGES = 1200  # about 530 KB of XML: six bz2 blocks of 100 KB at compresslevel=1


def _village_dump(numbers=range(VILLAGES)):
  return dump_data.DUMP_HEADER + "".join(map(dump_data.village_page, numbers)) + (
      dump_data.DUMP_FOOTER)


def _write(path, data):
  path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
  return str(path)


def _read(path):
  """(titles of the pages read, BadInputs skipped)."""
  skipped = []
  titles = [page.title for page in wikidump.iter_pages(path, on_bad=skipped.append)]
  return titles, skipped


def _bit_string(data):
  return "".join(format(byte, "08b") for byte in data)


def _flip_inside_a_block(data):
  """The bz2 data with a byte flipped halfway between its third and fourth block magics (found
  on the bits as a string), and that byte's offset."""
  bits = _bit_string(data)
  magic = format(bz2_blocks.BLOCK_MAGIC, "048b")
  starts = [bits.find(magic)]
  while len(starts) < 4:
    starts.append(bits.find(magic, starts[-1] + 1))
  flipped = (starts[2] + starts[3]) // 16
  damaged = bytearray(data)
  damaged[flipped] ^= 0x40
  return bytes(damaged), flipped, (starts[2] // 8, (starts[3] + 7) // 8)


def test_a_flipped_byte_in_a_multi_block_bz2_costs_the_pages_of_its_block(tmp_path):
  text = _village_dump()
  data = bz2.compress(text.encode("utf-8"), 1)
  damaged, flipped, block = _flip_inside_a_block(data)
  path = _write(tmp_path / "villages.xml.bz2", damaged)
  titles, skipped = _read(path)
  every = ["Village %d" % n for n in range(VILLAGES)]
  # What is read is every page but a run of consecutive ones, no more than a block's 100 KB
  # (a village page is about 440 bytes) and the page cut at each of its ends.
  lost = [title for title in every if title not in titles]
  assert titles == [title for title in every if title in titles]
  first = every.index(lost[0])
  assert lost == every[first:first + len(lost)]
  # (a block holds 100 KB of bz2's first run-length encoding: a little more of the XML)
  assert 100 <= len(lost) <= 110000 // len(dump_data.village_page(500)) + 2
  assert len(skipped) == 1
  error = skipped[0]
  start, end = (int(n) for n in error.position.split(" (")[0].split()[2::2])
  assert (start, end) == block and start <= flipped < end
  assert error.problem.startswith(("a bz2 block that fails its CRC: ", "a corrupt bz2 block"))
  # The pages counted: its XML's size over the size of the pages before it (its text is lost).
  assert abs(error.documents - len(lost)) <= 0.1 * len(lost), (error.documents, len(lost))
  with pytest.raises(bad_input.BadInput) as raised:
    list(wikidump.iter_pages(path))
  assert str(raised.value) == str(error)


def test_a_stream_cut_short_in_a_multistream_bz2_costs_its_pages_only(tmp_path):
  groups = [range(0, 100), range(100, 200), range(200, 300)]
  texts = [dump_data.DUMP_HEADER + "".join(map(dump_data.village_page, groups[0])),
           "".join(map(dump_data.village_page, groups[1])),
           "".join(map(dump_data.village_page, groups[2])) + dump_data.DUMP_FOOTER]
  streams = [bz2.compress(text.encode("utf-8")) for text in texts]
  cut = streams[0] + streams[1][:len(streams[1]) // 2] + streams[2]
  titles, skipped = _read(_write(tmp_path / "cut-multistream.xml.bz2", cut))
  assert titles == ["Village %d" % n for n in list(groups[0]) + list(groups[2])]
  # The block, after its stream's 4-byte header, up to the next stream's block.
  block = (len(streams[0]) + 4, len(cut) - len(streams[2]) + 4)
  assert [error.position for error in skipped] == [
      "compressed bytes %d to %d (after page 100 'Village 99')" % block]
  assert skipped[0].problem.startswith("a bz2 block that ")
  # Its pages counted from its compressed size: half the stream's 100 pages is in the file.
  assert 25 <= skipped[0].documents <= 100


def test_a_page_never_closed_is_skipped_alone_or_named(tmp_path):
  pages = [dump_data.village_page(n) for n in range(6)]
  pages[3] = pages[3].replace("  </page>\n", "")
  xml = dump_data.DUMP_HEADER + "".join(pages) + dump_data.DUMP_FOOTER
  path = _write(tmp_path / "dump.xml", xml)
  titles, skipped = _read(path)
  assert titles == ["Village %d" % n for n in (0, 1, 2, 4, 5)]
  line = xml[:xml.index("<title>Village 3<")].count("\n")  # the <page> line, 1-based
  byte = xml.encode("utf-8").index(pages[3].encode("utf-8")) + 2
  next_line = xml[:xml.index("<title>Village 4<")].count("\n")
  assert [str(error) for error in skipped] == [
      "%s: page 4 'Village 3' (id 90003, line %d, byte %d of the XML): the page is never "
      "closed: a <page> starts at line %d (byte %d of the XML) before its </page>" % (
          path, line, byte, next_line, xml.encode("utf-8").index(pages[4].encode("utf-8")) + 2)]
  assert skipped[0].documents == 1
  with pytest.raises(bad_input.BadInput, match="page 4 'Village 3' .id 90003,"):
    list(wikidump.iter_pages(path))


def test_a_page_that_is_not_well_formed_is_skipped_alone(tmp_path):
  pages = [dump_data.village_page(n) for n in range(4)]
  pages[1] = pages[1].replace("<ns>0</ns>", "<ns>0</nz>")
  path = _write(tmp_path / "dump.xml", dump_data.DUMP_HEADER + "".join(pages)
                + dump_data.DUMP_FOOTER)
  titles, skipped = _read(path)
  assert titles == ["Village 0", "Village 2", "Village 3"]
  assert len(skipped) == 1 and skipped[0].problem.startswith(
      "not well-formed XML: mismatched tag, in page 2 'Village 1' (line ")


def test_garbage_between_pages_costs_no_page(tmp_path):
  pages = [dump_data.village_page(n) for n in range(4)]
  xml = (dump_data.DUMP_HEADER + "".join(pages[:2]) + "?? junk <b>bold</b>\n"
         + "".join(pages[2:]) + dump_data.DUMP_FOOTER)
  path = _write(tmp_path / "dump.xml", xml)
  titles, skipped = _read(path)
  assert titles == ["Village %d" % n for n in range(4)]
  line = xml[:xml.index("??")].count("\n") + 1
  assert len(skipped) == 1 and skipped[0].documents == 0
  assert skipped[0].position.startswith("line %d " % line)
  assert skipped[0].problem.startswith("bytes between pages that are not a page")
  with pytest.raises(bad_input.BadInput, match="not a page"):
    list(wikidump.iter_pages(path))


def test_a_page_longer_than_the_bound_is_read_past_in_flat_memory(tmp_path, monkeypatch):
  monkeypatch.setattr(bad_input, "MAX_DOCUMENT_BYTES", 64 << 10)
  monkeypatch.setattr(wikidump, "CHUNK_BYTES", 16 << 10)  # expat's buffer: 4 chunks at most

  def dump_with_a_long_page(words):
    long_page = dump_data.page("Long", 0, 7, [(7, "2024-01-01T00:00:00Z", dump_data.EDITOR,
                                               "word " * words)])
    return _write(tmp_path / ("long-%d.xml" % words), dump_data.DUMP_HEADER
                  + dump_data.village_page(1) + long_page + dump_data.village_page(2)
                  + dump_data.DUMP_FOOTER)

  peaks = []
  for words in (400_000, 1_600_000):  # 2 MB and 8 MB of text
    path = dump_with_a_long_page(words)
    gc.collect()
    tracemalloc.start()
    try:
      titles, skipped = _read(path)
      peaks.append(tracemalloc.get_traced_memory()[1])
    finally:
      tracemalloc.stop()
    assert titles == ["Village 1", "Village 2"]
    assert [(e.position.split(" (")[0], e.problem) for e in skipped] == [
        ("page 2 'Long'", "longer than 65536 characters: read past")]
  # Holding the long page would add 6 MB; the peaks differ by where the chunks' ends fall.
  assert peaks[1] - peaks[0] < 128 << 10, peaks


def test_a_damaged_part_file_counts_its_pages_lost_in_the_summary_and_manifest(tmp_path):
  # A split dump's part under Wikipedia's name, one page never closed, one bz2 block flipped.
  pages = [dump_data.village_page(n) for n in range(VILLAGES)]
  pages[5] = pages[5].replace("  </page>\n", "")
  text = dump_data.DUMP_HEADER + "".join(pages) + dump_data.DUMP_FOOTER
  damaged, _, _ = _flip_inside_a_block(bz2.compress(text.encode("utf-8"), 1))
  path = _write(tmp_path / "enwiki-latest-pages-articles1.xml-p000000010p000030302.bz2",
                damaged)
  out = tmp_path / "out"
  summary = runner.run(corpus_data.make_config([path], out, stage="extract", num_shards=1))
  titles, skipped = _read(path)
  assert [error.documents for error in skipped][0] == 1 and len(skipped) == 2
  assert summary["formats"] == {os.path.abspath(path): "wikidump"}
  assert summary["documents"] == len(titles)
  assert summary["bad_documents"] == sum(error.documents for error in skipped) > 100
  line = runner.summary_line(dict(summary, seconds=1.0))
  assert line.startswith("prepare_corpus: %d documents read (%.1f MB: %s as wikidump), 0 "
                         "duplicates dropped, %d bad documents skipped;" % (
                             len(titles), len(damaged) / 1e6, os.path.basename(path),
                             summary["bad_documents"]))
  entry = manifest.read_entry(str(out), "extract", stages.input_id(path) + "-00000")
  assert entry["counts"]["bad_documents"] == summary["bad_documents"]
  with open(os.path.join(str(out), "extracted", stages.input_id(path) + "-00000",
                         "bucket-00000.txt"), encoding="utf-8") as reader:
    extracted = reader.read()
  assert "[[" not in extracted and "{{" not in extracted and "&lt;" not in extracted
  assert "Village 6 is a village in Ruritania" in extracted


def test_a_dump_forced_to_plain_text_is_warned_about_by_name(tmp_path, caplog):
  path = _write(tmp_path / "pages.txt", _village_dump(range(20)))
  config = corpus_data.make_config([path], tmp_path / "out", stage="extract", num_shards=1,
                                   input_formats=("documents_per_line",))
  with caplog.at_level("WARNING"):
    summary = runner.run(config)
  assert summary["formats"] == {os.path.abspath(str(path)): "documents_per_line"}
  warnings = [r.getMessage() for r in caplog.records if "look like XML or wiki markup" in
              r.getMessage()]
  assert len(warnings) == 1 and warnings[0].startswith("prepare_corpus: %s is read as plain "
                                                       "text, but " % path)


def test_the_warnings_of_skipped_input_say_what_it_cost(tmp_path, caplog):
  pages = [dump_data.village_page(n) for n in range(VILLAGES)]
  pages[5] = pages[5].replace("  </page>\n", "")  # a bad document
  xml = (dump_data.DUMP_HEADER + "".join(pages[:20]) + "?? junk <b>bold</b>\n"
         + "".join(pages[20:]) + dump_data.DUMP_FOOTER)
  damaged, _, _ = _flip_inside_a_block(bz2.compress(xml.encode("utf-8"), 1))
  path = _write(tmp_path / "dump.xml.bz2", damaged)
  with caplog.at_level("WARNING"):
    runner.run(corpus_data.make_config([path], tmp_path / "out", stage="extract",
                                       num_shards=1))
  warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipped ")]
  assert len(warnings) == 3, warnings
  assert warnings[0].startswith("skipped a bad document: %s: page 6 'Village 5'" % path)
  assert warnings[1].startswith("skipped bytes that are not a page (no document lost): %s: "
                                "line " % path)
  assert "'?? junk" in warnings[1]
  lost = int(re.search(r"^skipped (\d+) documents: .*: about (\d+) pages lost", warnings[2])[1])
  assert lost > 100 and "about %d pages lost" % lost in warnings[2]
