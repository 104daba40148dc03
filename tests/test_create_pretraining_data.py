"""create_pretraining_data.py: the records, their sampling invariants and determinism (errors, and
what a failed or killed run leaves behind: test_create_pretraining_data_failures.py).

Records are read back with protobuf (`tf.train.Example.FromString`), independently of our writer;
the corpus is tokenised again with `tokenization.FullTokenizer.tokenize` to check where the segments
come from. Expected counts are computed here with Python's own round().
"""

import os
import random

import numpy as np
import pytest
import tensorflow as tf

import create_pretraining_data as cpd
import tokenization
from tests import helpers
from utils.data import instances
from utils.data import vocabulary

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SEQ_LENGTH = 64
MAX_PREDICTIONS = 10

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "pen", "dor", "al", "ex", "qua",
              "zin", "ber", "tol", "mun", "gra"]


def make_corpus(directory, num_files=3, documents_per_file=24, seed=0):
  """Writes English-like random text: one sentence per line, blank lines between documents.

  Documents have 1 to 16 sentences; a few sentences are longer than max_seq_length (so pairs get
  truncated), and words are built from syllables so WordPiece splits them into ## pieces.
  """
  rng = random.Random(seed)
  words = sorted({"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))
                  for _ in range(400)})
  paths = []
  for f in range(num_files):
    documents = []
    for d in range(documents_per_file):
      sentences = []
      for _ in range(1 if d == 0 else rng.randint(2, 16)):
        length = rng.randint(3, 14) if rng.random() > 0.03 else rng.randint(60, 90)
        sentence = " ".join(rng.choice(words) for _ in range(length))
        sentences.append(sentence[0].upper() + sentence[1:] + rng.choice([".", "!", "?", "."]))
      documents.append("\n".join(sentences))
    path = os.path.join(str(directory), "corpus-%d.txt" % f)
    with open(path, "w", encoding="utf-8") as writer:
      writer.write("\n\n".join(documents) + "\n")
    paths.append(path)
  return paths


def original_release_records(directory, max_seq_length, max_predictions_per_seq):
  """The original release's create_pretraining_data (tests/reference) on a one-file corpus of
  `make_corpus` with its own 300-token vocabulary, --dupe_factor=2.

  Returns:
    (the TFRecord file, the vocabulary file).
  """
  corpus = make_corpus(directory, num_files=1, documents_per_file=30, seed=5)
  vocab_file = str(directory / "vocab.txt")
  vocabulary.build_vocab(corpus, 300, vocab_file)
  output = str(directory / "original.tfrecord")
  helpers.run_python(
      ["-m", "tests.reference.original_bert", "create_pretraining_data", "--",
       "--input_file=%s" % corpus[0], "--output_file=%s" % output, "--vocab_file=%s" % vocab_file,
       "--max_seq_length=%d" % max_seq_length,
       "--max_predictions_per_seq=%d" % max_predictions_per_seq, "--dupe_factor=2"], timeout=300)
  return output, vocab_file


def corpus_with_vocabulary(directory):
  """(input files, vocabulary file) of a small generated corpus in `directory`."""
  paths = make_corpus(directory)
  vocab_file = str(directory / "vocab.txt")
  vocabulary.build_vocab(paths, 300, vocab_file, min_frequency=2)
  return paths, vocab_file


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """(input files, vocabulary file) of a small generated corpus."""
  return corpus_with_vocabulary(tmp_path_factory.mktemp("corpus"))


def options(**overrides):
  values = dict(max_seq_length=MAX_SEQ_LENGTH, max_predictions_per_seq=MAX_PREDICTIONS,
                masked_lm_prob=0.15, short_seq_prob=0.1, dupe_factor=2, do_whole_word_mask=False,
                random_seed=7)
  values.update(overrides)
  return instances.GeneratorOptions(**values)


def generate(inputs, vocab_file, out_dir, num_workers=1, outputs=None, **overrides):
  """Runs the generator; returns the list of output files."""
  os.makedirs(str(out_dir), exist_ok=True)
  if outputs is None:
    outputs = [os.path.join(str(out_dir), "out-%d.tfrecord" % i) for i in range(len(inputs))]
  cpd.create_pretraining_data(inputs, outputs, vocab_file, options(**overrides),
                              num_workers=num_workers)
  return outputs


def read_examples(paths):
  """Every record of `paths` as a dict name -> list of values (protobuf parsing)."""
  examples = []
  for path in paths:
    for record in tf.compat.v1.io.tf_record_iterator(path):
      feature = tf.train.Example.FromString(record).features.feature
      examples.append({
          name: list(feature[name].float_list.value if name == "masked_lm_weights"
                     else feature[name].int64_list.value)
          for name in instances.FEATURE_NAMES})
  return examples


def tokenized_documents(path, tokenizer):
  """The documents of one input file as lists of ids, tokenised line by line (the original way)."""
  documents = [[]]
  with open(path, encoding="utf-8") as reader:
    for line in reader:
      line = line.strip()
      if not line:
        documents.append([])
        continue
      documents[-1].extend(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)))
  return [d for d in documents if d]


def find_span(documents, ids):
  """(document index, start) of the only occurrence of `ids` in `documents`, or None."""
  needle = "," + ",".join(map(str, ids)) + ","
  found = []
  for index, document in enumerate(documents):
    haystack = "," + ",".join(map(str, document)) + ","
    position = haystack.find(needle)
    while position >= 0:
      found.append((index, haystack[:position].count(",")))
      position = haystack.find(needle, position + 1)
  return found[0] if len(found) == 1 else None


@pytest.fixture(scope="module")
def generated(corpus, tmp_path_factory):
  """Outputs of one run over the corpus: (inputs, vocab_file, outputs, examples)."""
  inputs, vocab_file = corpus
  outputs = generate(inputs, vocab_file, tmp_path_factory.mktemp("out"))
  return inputs, vocab_file, outputs, read_examples(outputs)


def test_records_have_the_original_layout(generated):
  inputs, vocab_file, _, examples = generated
  vocab = tokenization.load_vocab(vocab_file)
  cls, sep, mask = vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]
  assert 300 <= len(examples) <= 2000
  for ex in examples:
    ids = np.array(ex["input_ids"])
    # The structure is checked on the unmasked sequence: a random replacement may be any
    # vocabulary token, [CLS] and [SEP] included (as the original).
    k = int(sum(ex["masked_lm_weights"]))
    ids[ex["masked_lm_positions"][:k]] = ex["masked_lm_ids"][:k]
    input_mask = np.array(ex["input_mask"])
    segments = np.array(ex["segment_ids"])
    assert len(ids) == len(input_mask) == len(segments) == MAX_SEQ_LENGTH
    n = int(input_mask.sum())
    assert input_mask.tolist() == [1] * n + [0] * (MAX_SEQ_LENGTH - n)
    # [CLS] A [SEP] B [SEP], zero padding.
    assert ids[0] == cls and ids[n - 1] == sep
    sep_positions = np.flatnonzero(ids[:n] == sep).tolist()
    assert len(sep_positions) == 2, sep_positions
    first_sep = sep_positions[0]
    assert 2 <= first_sep <= n - 3  # A and B both non-empty
    assert not ids[n:].any() and not segments[n:].any()
    assert segments[:first_sep + 1].tolist() == [0] * (first_sep + 1)
    assert segments[first_sep + 1:n].tolist() == [1] * (n - first_sep - 1)
    assert cls not in ids[1:n].tolist()
    # Predictions: ascending positions inside A or B, zero padded; weights 1.0 then 0.0.
    weights = np.array(ex["masked_lm_weights"])
    positions = np.array(ex["masked_lm_positions"])
    labels = np.array(ex["masked_lm_ids"])
    k = int(weights.sum())
    assert weights.tolist() == [1.0] * k + [0.0] * (MAX_PREDICTIONS - k)
    assert not positions[k:].any() and not labels[k:].any()
    real = positions[:k]
    assert (np.diff(real) > 0).all()
    assert ((real > 0) & (real < n - 1) & (real != first_sep)).all()
    # Never [CLS]/[SEP] masked: the labels are ordinary tokens.
    assert not set(labels[:k].tolist()) & {cls, sep}
    # num_to_predict = min(max_predictions, max(1, round(len(tokens) * prob))), Python's round.
    assert k == min(MAX_PREDICTIONS, max(1, int(round(n * 0.15))))
    assert ex["next_sentence_labels"] in ([0], [1])
    assert all(0 <= i < len(vocab) for i in ex["input_ids"])
    assert mask not in ids.tolist()


def test_masking_statistics(generated):
  _, vocab_file, _, examples = generated
  vocab = tokenization.load_vocab(vocab_file)
  masked = kept = replaced = total_predictions = total_tokens = 0
  for ex in examples:
    k = int(sum(ex["masked_lm_weights"]))
    total_tokens += sum(ex["input_mask"])
    for position, label in zip(ex["masked_lm_positions"][:k], ex["masked_lm_ids"][:k]):
      token = ex["input_ids"][position]
      total_predictions += 1
      if token == vocab["[MASK]"]:
        masked += 1
      elif token == label:
        kept += 1
      else:
        replaced += 1
  assert total_predictions > 1500
  assert 0.13 < total_predictions / total_tokens < 0.16
  # 80% [MASK], 10% unchanged, 10% random (a random token equal to the label counts as kept).
  assert abs(masked / total_predictions - 0.8) < 0.03
  assert abs(kept / total_predictions - 0.1) < 0.025
  assert abs(replaced / total_predictions - 0.1) < 0.025
  random_next = np.mean([ex["next_sentence_labels"][0] for ex in examples])
  # 50% random, plus the chunks of a single sentence that must take a random B (as the original).
  assert 0.42 < random_next < 0.65


def test_segments_come_from_the_corpus(generated):
  """A is contiguous text of a document; label 0: B follows A in it; label 1: B is elsewhere."""
  inputs, vocab_file, outputs, _ = generated
  tokenizer = tokenization.FullTokenizer(vocab_file)
  sep = tokenizer.vocab["[SEP]"]
  checked = {0: 0, 1: 0}
  short = 0
  for input_file, output_file in zip(inputs, outputs):
    documents = tokenized_documents(input_file, tokenizer)
    for ex in read_examples([output_file]):
      ids = list(ex["input_ids"])
      k = int(sum(ex["masked_lm_weights"]))
      for position, label in zip(ex["masked_lm_positions"][:k], ex["masked_lm_ids"][:k]):
        ids[position] = label  # undo the masking
      n = sum(ex["input_mask"])
      short += n < MAX_SEQ_LENGTH - 10
      first_sep = ids.index(sep)
      a, b = ids[1:first_sep], ids[first_sep + 1:n - 1]
      where_a, where_b = find_span(documents, a), find_span(documents, b)
      # The random words make every span occur once in its file.
      assert where_a is not None and where_b is not None
      label = ex["next_sentence_labels"][0]
      if label == 0:
        assert where_a[0] == where_b[0] and where_b[1] >= where_a[1] + len(a)
      else:
        assert where_a[0] != where_b[0]
      checked[label] += 1
  assert checked[0] > 100 and checked[1] > 100
  assert short > 10  # short_seq_prob and document ends give shorter sequences too


def test_deterministic_and_independent_of_worker_count(corpus, tmp_path):
  inputs, vocab_file = corpus
  one = generate(inputs, vocab_file, tmp_path / "one", num_workers=1)
  two = generate(inputs, vocab_file, tmp_path / "two", num_workers=2)
  again = generate(inputs, vocab_file, tmp_path / "again", num_workers=2)
  other_seed = generate(inputs, vocab_file, tmp_path / "seed", num_workers=1, random_seed=8)
  contents = lambda paths: [open(p, "rb").read() for p in paths]  # noqa: E731
  assert contents(one) == contents(two) == contents(again)
  assert all(a != b for a, b in zip(contents(one), contents(other_seed)))


def test_fewer_outputs_than_inputs_concatenate_in_input_order(corpus, tmp_path):
  inputs, vocab_file = corpus
  per_file = generate(inputs, vocab_file, tmp_path / "per_file")
  single = generate(inputs, vocab_file, tmp_path / "single",
                    outputs=[str(tmp_path / "single" / "all.tfrecord")], num_workers=2)
  assert open(single[0], "rb").read() == b"".join(open(p, "rb").read() for p in per_file)
  two = generate(inputs, vocab_file, tmp_path / "two",
                 outputs=[str(tmp_path / "two" / "a"), str(tmp_path / "two" / "b")])
  # Input i -> output i % 2.
  read = lambda path: open(path, "rb").read()  # noqa: E731
  assert read(two[0]) == read(per_file[0]) + read(per_file[2])
  assert read(two[1]) == read(per_file[1])
  assert sorted(os.listdir(str(tmp_path / "two"))) == ["a", "b"]  # no leftovers


def test_whole_word_masking(corpus, tmp_path):
  inputs, vocab_file = corpus
  tokenizer = tokenization.FullTokenizer(vocab_file)
  outputs = generate(inputs[:1], vocab_file, tmp_path, do_whole_word_mask=True)
  examples = read_examples(outputs)
  sep = tokenizer.vocab["[SEP]"]
  continuation = {i for t, i in tokenizer.vocab.items() if t.startswith("##")}
  pieces_masked = 0
  for ex in examples:
    ids = list(ex["input_ids"])
    k = int(sum(ex["masked_lm_weights"]))
    positions = ex["masked_lm_positions"][:k]
    for position, label in zip(positions, ex["masked_lm_ids"][:k]):
      ids[position] = label
    chosen = set(positions)
    n = sum(ex["input_mask"])
    assert k <= min(MAX_PREDICTIONS, max(1, int(round(n * 0.15))))
    for p in range(1, n - 1):
      if ids[p] == sep:
        continue
      # A piece and the token before it (same word, same segment) are masked together.
      if ids[p] in continuation and ids[p - 1] != sep and ids[p - 1] != tokenizer.vocab["[CLS]"]:
        assert (p in chosen) == (p - 1 in chosen), (p, ids[p - 2:p + 2])
        pieces_masked += p in chosen
  assert pieces_masked > 50
