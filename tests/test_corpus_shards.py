"""utils/corpus/shards.py: a document's sentences, key, bucket and split; bucket files; shards
without exact duplicates, held out by document."""

import os
import random

from utils.corpus import documents
from utils.corpus import runner
from utils.corpus import shards

Document = documents.Document


def read(path):
  with open(path, encoding="utf-8") as reader:
    return reader.read()


def test_sentences_are_split_except_in_the_generators_format():
  document = Document("in.txt", "line 1", ["One here. Two  here.", "Three."])
  assert shards.document_sentences(document, "documents_per_line") == [
      "One here.", "Two here.", "Three."]
  assert shards.document_sentences(document, "sentences_per_line") == [
      "One here. Two here.", "Three."]
  assert shards.document_sentences(Document("d", "x", ["  ", ""]), "directory") == []


def test_wiki_text_gets_its_template_holes_repaired_and_headless_sentences_dropped():
  document = Document("dump.xml", "page 1 'Aikido'", [
      "is a modern Japanese martial art. Asphalt (, occasionally ), also known as bitumen, is "
      "black.", "Its founder was born in 1883,."])
  counts = shards.SentenceCounts()
  assert shards.document_sentences(document, "wikidump", counts) == [
      "Asphalt (occasionally), also known as bitumen, is black.", "Its founder was born in 1883."]
  assert counts.as_dict() == dict(long_sentences=0, template_holes=2, headless_sentences=1,
                                  long_documents=0)
  # Text of other formats is only split: "f()" is code, not a hole.
  plain = Document("in.txt", "line 1", ["Call f() first, then g( ) ,."])
  assert shards.document_sentences(plain, "documents_per_line") == [
      "Call f() first, then g( ) ,."]


def test_a_piece_of_a_cut_sentence_is_not_taken_for_a_sentence_without_its_subject():
  words = ["alpha"] * 512 + ["was", "cut", "here"]  # the second piece opens with "was"
  counts = shards.SentenceCounts()
  assert shards.document_sentences(Document("dump.xml", "page 1", [" ".join(words)]),
                                   "wikidump", counts) == [" ".join(words[:512]),
                                                           "was cut here"]
  assert counts.headless_sentences == 0 and counts.long_sentences == 1


def test_a_line_of_the_generators_format_over_the_word_limit_is_cut_too():
  counts = shards.SentenceCounts()
  line = " ".join("w%d" % i for i in range(600))
  assert shards.document_sentences(Document("s.txt", "line 1", [line]), "sentences_per_line",
                                   counts) == [" ".join(line.split()[:512]),
                                               " ".join(line.split()[512:])]
  assert counts.long_sentences == 1


def test_a_document_over_the_bound_is_cut_into_parts_and_counted_once(monkeypatch):
  monkeypatch.setattr(shards, "MAX_DOCUMENT_CHARS", 25)
  sentences = ["Sentence number %d." % i for i in range(5)]  # 19 characters each
  counts = shards.SentenceCounts()
  parts = list(shards.document_parts(Document("in", "line 1", [" ".join(sentences)]),
                                     "documents_per_line", counts))
  assert parts == [[sentence] for sentence in sentences]
  assert counts.long_documents == 1
  monkeypatch.setattr(shards, "MAX_DOCUMENT_CHARS", 40)  # two sentences and their newlines
  assert list(shards.document_parts(Document("in", "line 1", [" ".join(sentences)]),
                                    "documents_per_line", counts)) == [
                                        sentences[0:2], sentences[2:4], sentences[4:]]
  assert counts.long_documents == 2


def test_the_summary_names_what_was_done_to_sentences_only_when_something_was():
  assert shards.sentence_summary(dict(long_sentences=0, template_holes=0)) == ""
  assert shards.sentence_summary(dict(long_sentences=2, headless_sentences=1)) == (
      "sentences: 2 over 512 words cut, 1 without a subject dropped; ")


def test_the_summary_line_carries_the_sentence_counts():
  result = dict(documents=3, input_bytes=2e6, shards=2, train_documents=3, records={},
                seconds=1.0, bytes_read=0, units_done_earlier=0, long_sentences=1,
                template_holes=4, long_documents=1)
  assert ("3 documents read (2.0 MB), 0 duplicates dropped, 0 bad documents skipped; sentences: "
          "1 over 512 words cut, 4 with template holes repaired, 1 documents over 4194304 "
          "characters cut; 2 shards of 3 training") in runner.summary_line(result)
  assert "sentences:" not in runner.summary_line(dict(result, long_sentences=0, template_holes=0,
                                                      long_documents=0))


def test_the_key_is_the_normalised_text_whatever_its_sentences():
  key = shards.document_digest(["One here.", "Two here."])
  assert len(key) == 32
  assert shards.document_digest(["One here. Two here."]) == key
  assert shards.document_digest(["One  here.\t", " Two here."]) == key
  assert shards.document_digest(["One here.", "Two here!"]) != key
  # Unicode NFC: a composed and a decomposed e-acute are one text.
  assert shards.document_digest(["Caf\u00e9."]) == shards.document_digest(["Cafe\u0301."])


def test_buckets_and_splits_come_from_independent_parts_of_the_key():
  rng = random.Random(5)
  keys = [shards.document_digest(["doc %d %f" % (i, rng.random())]) for i in range(4000)]
  buckets = [shards.bucket_of(key, 4) for key in keys]
  assert sorted(set(buckets)) == [0, 1, 2, 3]
  assert all(900 < buckets.count(b) < 1100 for b in range(4))
  held_out = [shards.is_held_out(key, 0.1) for key in keys]
  assert 320 < sum(held_out) < 480
  # Every bucket has its share of held-out documents.
  for b in range(4):
    in_bucket = [h for h, k in zip(held_out, buckets) if k == b]
    assert 0.06 < sum(in_bucket) / len(in_bucket) < 0.14
  assert not any(shards.is_held_out(key, 0.0) for key in keys)
  assert shards.bucket_of(keys[0], 1) == 0


def test_write_buckets_puts_each_document_in_its_keys_bucket(tmp_path):
  docs = [Document("in", "line %d" % i, ["Doc %d, sentence one. And two." % i]) for i in range(12)]
  docs.append(Document("in", "line 99", [" "]))  # no sentence: counted, not written
  path = lambda j: str(tmp_path / ("bucket-%d.txt" % j))
  written, counts = shards.write_buckets(iter(docs), "documents_per_line", 3, path)
  assert counts == dict(documents=12, sentences=24, empty_documents=1, bytes=sum(
      os.path.getsize(path(j)) for j in written), long_sentences=0, template_holes=0,
                        headless_sentences=0, long_documents=0)
  assert written == sorted(written) and set(written) <= {0, 1, 2}
  for j in range(3):
    expected = "".join("Doc %d, sentence one.\nAnd two.\n\n" % i for i in range(12)
                       if shards.bucket_of(shards.document_digest(
                           ["Doc %d, sentence one. And two." % i]), 3) == j)
    if j in written:
      assert read(path(j)) == expected
    else:
      assert expected == "" and not os.path.exists(path(j))


def test_merge_drops_exact_duplicates_keeping_the_first(tmp_path):
  first = tmp_path / "a.txt"
  first.write_text("Alpha one.\nAlpha two.\n\nBeta.\n\nBeta.\n\n")
  second = tmp_path / "b.txt"
  # A new document, and the first one's text again, in other lines: a duplicate all the same.
  second.write_text("Gamma  first.\n\nAlpha one. Alpha two.\n\n")
  path = lambda split: str(tmp_path / ("%s.txt" % split))
  written, counts = shards.merge_buckets([str(first), str(second)], 0.0, path)
  assert written == ["train"]
  assert read(path("train")) == "Alpha one.\nAlpha two.\n\nBeta.\n\nGamma first.\n\n"
  assert counts == dict(documents=5, duplicates=2, train_documents=3, eval_documents=0,
                        train_bytes=os.path.getsize(path("train")), eval_bytes=0)
  assert not os.path.exists(path("eval"))


def test_merge_holds_out_whole_documents_by_their_key(tmp_path):
  rng = random.Random(7)
  docs = [["Document %d sentence %d %d." % (d, s, rng.randrange(10**6)) for s in range(3)]
          for d in range(300)]
  bucket = tmp_path / "bucket.txt"
  bucket.write_text("".join(shards.format_document(d) for d in docs))
  path = lambda split: str(tmp_path / ("%s.txt" % split))
  written, counts = shards.merge_buckets([str(bucket)], 0.2, path)
  assert written == ["eval", "train"]
  held = [d for d in docs if shards.is_held_out(shards.document_digest(d), 0.2)]
  kept = [d for d in docs if not shards.is_held_out(shards.document_digest(d), 0.2)]
  assert 30 < len(held) < 90
  assert read(path("eval")) == "".join(shards.format_document(d) for d in held)
  assert read(path("train")) == "".join(shards.format_document(d) for d in kept)
  assert (counts["train_documents"], counts["eval_documents"]) == (len(kept), len(held))
