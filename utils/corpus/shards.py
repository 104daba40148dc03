"""Documents to shards: each document's sentences, its bucket and its split, both from a hash of
its text, and the shards' text without exact duplicates.

  extract:  documents of one input  -> bucket files 0..B-1 (`write_buckets`)
  shard:    bucket j of every input -> train and held-out text of shard j (`merge_buckets`)

A document's key is the SHA-256 of its normalised text (`document_digest`: its sentences joined
by a space, whitespace collapsed, Unicode NFC). Its first 8 bytes give the bucket, the next 8 the
split, so both are the same whoever reads the document and whenever: every copy of a document
lands in one bucket, where the first is kept and the others dropped; a document is held out
whole or not at all, never some of its sentences. Files are written in the generator's format:
one sentence a line, a blank line after each document.

Memory is bounded by design, not by the input: a paragraph is split a window at a time and a
sentence is cut at `sentences.MAX_SENTENCE_WORDS` words (`sentences.bounded_sentences`), and a
document of more than MAX_DOCUMENT_CHARS characters of sentences is written in parts of at most
that size, each a document with its own key (the generator reads them as separate documents).
"""

import hashlib
import unicodedata

from utils.corpus import documents as documents_lib
from utils.corpus import sentences as sentences_lib
from utils.corpus import template_holes

# The formats whose paragraphs are split into sentences (the generator's own is taken as it is).
_SEGMENTED_FORMATS = ("wikidump", "directory", "documents_per_line")
# The most text (characters of its sentences) of one document held at once: a longer document is
# cut into parts of at most this size. Wikipedia's longest articles hold well under 1 MB of text.
MAX_DOCUMENT_CHARS = 4 << 20


class SentenceCounts(sentences_lib.SentenceCounts):
  """What the extract step did to sentences, beside `sentences.SentenceCounts`' long_sentences.

  Attributes:
    template_holes: sentences of wiki text whose template holes were repaired
      (`template_holes.repair`).
    headless_sentences: sentences of wiki text dropped for opening with their verb
      (`template_holes.is_headless`), or left empty by the repair.
    long_documents: documents cut into parts of at most MAX_DOCUMENT_CHARS characters.
  """

  def __init__(self):
    super().__init__()
    self.template_holes = 0
    self.headless_sentences = 0
    self.long_documents = 0

  def as_dict(self):
    """The counts by name."""
    return {key: getattr(self, key) for key in SENTENCE_COUNTS}


# The counts of `SentenceCounts.as_dict`, and how the summary line names them.
SENTENCE_COUNTS = ("long_sentences", "template_holes", "headless_sentences", "long_documents")
_SENTENCE_TEXTS = ("%%d over %d words cut" % sentences_lib.MAX_SENTENCE_WORDS,
                   "%d with template holes repaired", "%d without a subject dropped",
                   "%%d documents over %d characters cut" % MAX_DOCUMENT_CHARS)


def sentence_summary(counts):
  """What the extract step did to sentences: dict with SENTENCE_COUNTS (missing: 0) -> "sentences:
  2 over 512 words cut, 5 with template holes repaired; " (the counts above 0), or ""."""
  parts = [text % counts[key] for key, text in zip(SENTENCE_COUNTS, _SENTENCE_TEXTS)
           if counts.get(key)]
  return "sentences: %s; " % ", ".join(parts) if parts else ""


def _wiki_sentence(sentence, continued, counts):
  """A sentence of wiki text (or a piece of one cut at the word limit: `continued` for all but
  its first), its template holes repaired; None when it is dropped (counted)."""
  repaired = template_holes.repair(sentence)
  counts.template_holes += repaired != sentence
  if not repaired or (not continued and template_holes.is_headless(repaired)):
    counts.headless_sentences += 1
    return None
  return repaired


def iter_document_sentences(document, fmt, counts):
  """The sentences of a document, streaming: its paragraphs split by the segmenter (within the
  bounds of `sentences.bounded_sentences`), or, for "sentences_per_line", its lines as they are
  (cut at the word limit too); whitespace collapsed, empty ones dropped; in wiki text, template
  holes repaired and sentences without a subject dropped.

  Args:
    document: `documents.Document`.
    fmt: the input's format.
    counts: `SentenceCounts`, updated.

  Yields:
    str without newlines.
  """
  for paragraph in document.paragraphs:
    if fmt in _SEGMENTED_FORMATS:
      pieces = sentences_lib.bounded_sentences(paragraph, counts)
    else:
      pieces = ((piece, False) for piece in sentences_lib.cut_long(paragraph, counts))
    for piece, continued in pieces:
      sentence = " ".join(piece.split())
      if sentence and fmt == "wikidump":
        sentence = _wiki_sentence(sentence, continued, counts)
      if sentence:
        yield sentence


def document_sentences(document, fmt, counts=None):
  """The sentences of a document (`iter_document_sentences`), as a list."""
  return list(iter_document_sentences(document, fmt, counts or SentenceCounts()))


def document_parts(document, fmt, counts):
  """A document's sentences in parts of at most MAX_DOCUMENT_CHARS characters (a sentence longer
  than that is a part by itself): one part for any ordinary document; a longer one is counted in
  `counts.long_documents`.

  Yields:
    non-empty lists of str.
  """
  part, size, cut = [], 0, False
  for sentence in iter_document_sentences(document, fmt, counts):
    if part and size + len(sentence) > MAX_DOCUMENT_CHARS:
      counts.long_documents += not cut
      cut = True
      yield part
      part, size = [], 0
    part.append(sentence)
    size += len(sentence) + 1
  if part:
    yield part


def document_digest(sentences):
  """The SHA-256 digest (32 bytes) of a document's normalised text: its sentences joined by a
  space, whitespace collapsed, NFC. The same text split into other sentences has the same key."""
  text = unicodedata.normalize("NFC", " ".join(" ".join(sentences).split()))
  return hashlib.sha256(text.encode("utf-8")).digest()


def bucket_of(digest, num_buckets):
  """The bucket (0 .. num_buckets - 1) of a document, from the first 8 bytes of its digest."""
  return int.from_bytes(digest[:8], "big") % num_buckets


def is_held_out(digest, eval_fraction):
  """Whether a document is held out: bytes 8..15 of its digest as a fraction in [0, 1) below
  `eval_fraction` (independent of the bucket)."""
  return int.from_bytes(digest[8:16], "big") < eval_fraction * 2.0**64


def format_document(sentences):
  """A document in the generator's format: one sentence a line, then a blank line."""
  return "".join(sentence + "\n" for sentence in sentences) + "\n"


class _LazyFiles(object):
  """Text files opened at their first write, so that no empty file is made."""

  def __init__(self, path_of):
    self._path_of = path_of
    self._files = {}

  def write(self, key, text):
    """Appends `text` to the file of `key`."""
    if key not in self._files:
      self._files[key] = open(self._path_of(key), "w", encoding="utf-8", newline="\n")
    self._files[key].write(text)

  def close(self):
    """Closes every file; returns the keys written, sorted."""
    for writer in self._files.values():
      writer.close()
    return sorted(self._files)


def write_buckets(document_iter, fmt, num_buckets, bucket_path):
  """The extract step: writes the sentences of each document to its bucket's file.

  Args:
    document_iter: iterable of `documents.Document`.
    fmt: their input's format (`document_sentences`).
    num_buckets: B.
    bucket_path: function bucket index -> the path to write it to; only buckets that receive a
      document are written.

  Returns:
    (list of the buckets written, dict of counts: "documents" (with a sentence), "sentences",
    "empty_documents" (without one), "bytes" written, and those of `SentenceCounts`).
  """
  counts = dict(documents=0, sentences=0, empty_documents=0, bytes=0)
  sentence_counts = SentenceCounts()
  files = _LazyFiles(bucket_path)
  try:
    for document in document_iter:
      parts = 0
      for sentences in document_parts(document, fmt, sentence_counts):
        text = format_document(sentences)
        files.write(bucket_of(document_digest(sentences), num_buckets), text)
        parts += 1
        counts["sentences"] += len(sentences)
        counts["bytes"] += len(text.encode("utf-8"))
      counts["documents" if parts else "empty_documents"] += 1
  finally:
    written = files.close()
  counts.update(sentence_counts.as_dict())
  return written, counts


def merge_buckets(bucket_files, eval_fraction, split_path):
  """The shard step: the documents of bucket files, in the given order, to the train and
  held-out files of one shard; an exact duplicate (same `document_digest`) of a document seen
  before is dropped.

  Args:
    bucket_files: the bucket files of one shard index, in the order of the extract units that
      wrote them (`stages`): a duplicate of an earlier file's document is dropped.
    eval_fraction: the held-out fraction (`is_held_out`).
    split_path: function "train" / "eval" -> the path to write that split to; a split without a
      document is not written.

  Returns:
    (list of the splits written, dict of counts: "documents" read, "duplicates" dropped,
    "train_documents", "eval_documents", "train_bytes", "eval_bytes").
  """
  counts = dict(documents=0, duplicates=0, train_documents=0, eval_documents=0, train_bytes=0,
                eval_bytes=0)
  seen = set()
  files = _LazyFiles(split_path)
  try:
    for path in bucket_files:
      for document in documents_lib.iter_documents(path, "sentences_per_line"):
        counts["documents"] += 1
        digest = document_digest(document.paragraphs)
        if digest in seen:
          counts["duplicates"] += 1
          continue
        seen.add(digest)
        split = "eval" if is_held_out(digest, eval_fraction) else "train"
        text = format_document(document.paragraphs)
        files.write(split, text)
        counts[split + "_documents"] += 1
        counts[split + "_bytes"] += len(text.encode("utf-8"))
  finally:
    written = files.close()
  return written, counts
