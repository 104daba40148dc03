"""utils/data/instances.py: the data generator's library, in process: a corpus read into token
offsets, the original's truncation, the serialised features, the per-file random streams.
The whole generator (sampling, masking statistics, files and workers) is tested end to end in
tests/test_create_pretraining_data.py."""

import numpy as np
import tensorflow as tf

import tokenization
from utils.data import instances


def test_read_corpus_keeps_sentences_with_tokens_and_splits_documents_at_blank_lines(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]) + "\n")
  text = tmp_path / "corpus.txt"
  # Document 0: two sentences (stripped); a blank line; document 1, whose only line is a
  # zero-width space (not blank, but the tokenizer drops it: no token, so neither the sentence
  # nor its document is kept); spaces (blank); document 2, one sentence.
  text.write_text("  a b \nc\n\n\u200b\n   \nb b a\n", encoding="utf-8")
  tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
  corpus = instances.read_corpus(str(text), tokenizer)
  ids = {name: index for index, name in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                   "a", "b", "c"])}
  assert corpus.tokens.tolist() == [ids["a"], ids["b"], ids["c"], ids["b"], ids["b"], ids["a"]]
  assert corpus.sentence_starts.tolist() == [0, 2, 3, 6]
  # Sentences 0-1 are the first document, sentence 2 the second (the empty one is dropped).
  assert corpus.document_starts.tolist() == [0, 2, 3]


def test_each_file_has_its_own_reproducible_random_streams():
  first = instances.file_random_generators(12345, 0)
  again = instances.file_random_generators(12345, 0)
  other_file = instances.file_random_generators(12345, 1)
  draws = [(python.random(), numpy.random()) for python, numpy in (first, again, other_file)]
  assert draws[0] == draws[1]
  assert draws[2][0] != draws[0][0] and draws[2][1] != draws[0][1]


def test_truncation_counts_match_token_by_token_truncation():
  for max_tokens in (2, 5, 9):
    for length_a in range(1, 14):
      for length_b in range(1, 14):
        a, b = length_a, length_b
        removed = [0, 0]
        while a + b > max_tokens:  # the original's loop: the longer side, B on ties
          if a > b:
            a, removed[0] = a - 1, removed[0] + 1
          else:
            b, removed[1] = b - 1, removed[1] + 1
        assert instances.truncation_counts(length_a, length_b, max_tokens) == tuple(removed)


def test_serialize_examples_writes_the_pretraining_features():
  # The encoder itself (every feature kind, framing, CRC) is tested in test_data_record_encoder.py.
  rng = np.random.RandomState(3)
  n = 37
  features = {
      "input_ids": rng.randint(0, 120000, size=(n, 16)),  # 1- to 3-byte varints
      "input_mask": rng.randint(0, 2, size=(n, 16)),
      "segment_ids": rng.randint(0, 2, size=(n, 16)),
      "masked_lm_positions": rng.randint(0, 16, size=(n, 4)),
      "masked_lm_ids": rng.choice([0, 1, 127, 128, 16383, 16384, 2 ** 21, 2 ** 31 - 1],
                                  size=(n, 4)),
      "masked_lm_weights": rng.choice([0.0, 1.0, 0.5], size=(n, 4)).astype(np.float32),
      "next_sentence_labels": rng.randint(0, 2, size=(n, 1)),
  }
  flat, lengths = instances.serialize_examples(features)
  records = np.split(flat, np.cumsum(lengths)[:-1])
  for i, record in enumerate(records):
    parsed = tf.train.Example.FromString(record.tobytes()).features.feature
    assert sorted(parsed) == sorted(features)
    key_offsets = [record.tobytes().find(name.encode()) for name in instances.FEATURE_NAMES]
    assert 0 < key_offsets[0] and key_offsets == sorted(key_offsets)  # the original's order
    for name, values in features.items():
      got = (parsed[name].float_list.value if name == "masked_lm_weights"
             else parsed[name].int64_list.value)
      assert list(got) == values[i].tolist(), name
