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
"""

import hashlib
import unicodedata

from utils.corpus import documents as documents_lib
from utils.corpus import sentences as sentences_lib

# The formats whose paragraphs are split into sentences (the generator's own is taken as it is).
_SEGMENTED_FORMATS = ("wikidump", "directory", "documents_per_line")


def document_sentences(document, fmt):
  """The sentences of a document: its paragraphs split by the segmenter, or, for
  "sentences_per_line", its lines as they are; whitespace collapsed, empty ones dropped.

  Args:
    document: `documents.Document`.
    fmt: the input's format.

  Returns:
    list of str without newlines.
  """
  if fmt in _SEGMENTED_FORMATS:
    pieces = [s for paragraph in document.paragraphs
              for s in sentences_lib.split_sentences(paragraph)]
  else:
    pieces = document.paragraphs
  collapsed = (" ".join(piece.split()) for piece in pieces)
  return [sentence for sentence in collapsed if sentence]


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
    "empty_documents" (without one), "bytes" written).
  """
  counts = dict(documents=0, sentences=0, empty_documents=0, bytes=0)
  files = _LazyFiles(bucket_path)
  try:
    for document in document_iter:
      sentences = document_sentences(document, fmt)
      if not sentences:
        counts["empty_documents"] += 1
        continue
      text = format_document(sentences)
      files.write(bucket_of(document_digest(sentences), num_buckets), text)
      counts["documents"] += 1
      counts["sentences"] += len(sentences)
      counts["bytes"] += len(text.encode("utf-8"))
  finally:
    written = files.close()
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
