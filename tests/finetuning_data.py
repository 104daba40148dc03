"""Small fine-tuning data sets written by the tests: a vocabulary, a tiny BERT config, SQuAD json
(v1.1 / v2.0) and the GLUE / XNLI tsv layouts of the original release's processors."""

import json
import os

import numpy as np

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Whole words of the vocabulary. Words of the texts missing here ("japanese", "televisions",
# "fondly", ...) are split into the pieces below.
WORDS = """the a an of in on and was is to he it for by his what who where when which how did
year born leader john smith lived live paris france worked work japan electronics industry largest
world company acme corp built radios fifty years before closed close cafe owners zurich remember him
python created guido van rossum first released capital mars country top exporter s
good bad movie film plot actors great terrible boring fun story ending music liked hated
cat dog sat mat ran park""".split()
PIECES = (list("abcdefghijklmnopqrstuvwxyz0123456789.,()-'?!") +
          ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"] + ["##ese", "##ion", "##s"])


def write_vocab(path):
  """Writes the vocabulary; returns its size."""
  tokens = SPECIAL + WORDS + [p for p in PIECES if p not in WORDS]
  with open(path, "w") as writer:
    writer.write("\n".join(tokens) + "\n")
  return len(tokens)


def write_bert_config(path, vocab_size, max_position_embeddings=64, dropout=0.1):
  """A BERT config small enough for CPU tests (hidden 32, 2 layers, 4 heads)."""
  config = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=37, hidden_act="gelu",
                hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                max_position_embeddings=max_position_embeddings, type_vocab_size=2,
                initializer_range=0.02)
  with open(path, "w") as writer:
    json.dump(config, writer)


LONG_PARAGRAPH = (
    "The leader was John Smith (1895-1943). He lived in Paris, France, and worked on the "
    "Japanese electronics industry, which is the largest in the world. Smith's company, Acme "
    "Corp., built radios and televisions for fifty years before it closed in 1960. Caf\u00e9 "
    "owners in Z\u00fcrich\u202fremember him fondly.")
SHORT_PARAGRAPH = "Python was created by Guido van Rossum and first released in 1991."
QUESTIONS = [
    (LONG_PARAGRAPH, "What year was John Smith born?", "1895"),
    (LONG_PARAGRAPH, "What country is the top exporter of electronics?", "Japan"),
    (LONG_PARAGRAPH, "Where did he live?", "Paris, France"),
    (LONG_PARAGRAPH, "When did the company close?", "1960"),
    (LONG_PARAGRAPH, "Who do cafe owners in Zurich remember?", "him"),
    (LONG_PARAGRAPH, "What is the capital of Mars?", None),
    (SHORT_PARAGRAPH, "Who created Python?", "Guido van Rossum"),
    (SHORT_PARAGRAPH, "When was Python first released?", "1991"),
    (SHORT_PARAGRAPH, "What did the dog do?", None),
]


def squad_dataset(version_2, repeat=1):
  """The SQuAD "data" list: both paragraphs, one answer per answerable question; with
  `version_2` the unanswerable questions too (is_impossible set on every question)."""
  paragraphs = {}
  for copy in range(repeat):
    for index, (context, question, answer) in enumerate(QUESTIONS):
      if answer is None and not version_2:
        continue
      qa = {"id": "q%d-%d" % (copy, index), "question": question,
            "answers": [] if answer is None else [
                {"text": answer, "answer_start": context.index(answer)}]}
      if version_2:
        qa["is_impossible"] = answer is None
      paragraphs.setdefault((copy, context), []).append(qa)
  return [{"title": "t", "paragraphs": [{"context": context, "qas": qas}
                                        for (_, context), qas in paragraphs.items()]}]


def write_squad(path, version_2, repeat=1):
  with open(path, "w") as writer:
    json.dump({"version": "2.0" if version_2 else "1.1",
               "data": squad_dataset(version_2, repeat)}, writer)


_SENTIMENT_WORDS = "movie film plot actors story ending music".split()


def sentiment_sentence(rng, label):
  """A sentence that says good/great/fun when `label` is 1, bad/terrible/boring when it is 0."""
  adjective = rng.choice(["good", "great", "fun"] if label else ["bad", "terrible", "boring"])
  words = list(rng.choice(_SENTIMENT_WORDS, size=rng.randint(3, 7)))
  words.insert(rng.randint(len(words) + 1), adjective)
  return "the " + " ".join(words) + "."


def sentiment_rows(rng, n):
  """n (label, sentence) rows of a learnable task: "1" when the sentence says good/great/fun."""
  rows = []
  for _ in range(n):
    label = int(rng.randint(2))
    rows.append((str(label), sentiment_sentence(rng, label)))
  return rows


def _write_tsv(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as writer:
    for row in rows:
      writer.write("\t".join(row) + "\n")


def write_glue(data_dir, task, rng, n_train=16, n_dev=8):
  """The files of `task` (mrpc, cola, mnli, xnli) in the original's column layouts."""
  def sentences(n):
    return [s for _, s in sentiment_rows(rng, n)]

  if task == "cola":
    for split, n in (("train", n_train), ("dev", n_dev)):
      _write_tsv(os.path.join(data_dir, split + ".tsv"),
                 [("src", label, "", text) for label, text in sentiment_rows(rng, n)])
    _write_tsv(os.path.join(data_dir, "test.tsv"),
               [("index", "sentence")] + [(str(i), s) for i, s in enumerate(sentences(n_dev))])
  elif task == "mrpc":
    # Learnable: both sentences of a pair have the same sentiment, the label ("Quality").
    header = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
    for split, n in (("train", n_train), ("dev", n_dev), ("test", n_dev)):
      rows = [(label, a, sentiment_sentence(rng, int(label)))
              for label, a in sentiment_rows(rng, n)]
      _write_tsv(os.path.join(data_dir, split + ".tsv"), [header] + [
          (label, str(i), str(i + 1000), a, b) for i, (label, a, b) in enumerate(rows)])
  elif task == "mnli":
    labels = ["contradiction", "entailment", "neutral"]
    for split, n in (("train", n_train), ("dev_matched", n_dev), ("test_matched", n_dev)):
      a, b = sentences(n), sentences(n)
      _write_tsv(os.path.join(data_dir, split + ".tsv"), [("h",) * 12] + [
          (str(i), "p", "q", "g", "", "", "", "", a[i], b[i], "x", labels[rng.randint(3)])
          for i in range(n)])
  elif task == "xnli":
    labels = ["contradictory", "entailment", "neutral"]
    a, b = sentences(n_train), sentences(n_train)
    _write_tsv(os.path.join(data_dir, "multinli", "multinli.train.zh.tsv"),
               [("premise", "hypo", "label")] + [(a[i], b[i], labels[rng.randint(3)])
                                                 for i in range(n_train)])
    a, b = sentences(2 * n_dev), sentences(2 * n_dev)
    _write_tsv(os.path.join(data_dir, "xnli.dev.tsv"), [("h",) * 8] + [
        ("zh" if i % 2 else "en", labels[1 + rng.randint(2)], "", "", "", "", a[i], b[i])
        for i in range(2 * n_dev)])
  else:
    raise ValueError(task)


def write_sentiment(data_dir, rng, n_train, n_dev):
  """The learnable task in the CoLA layout (train.tsv, dev.tsv, no header)."""
  for split, n in (("train", n_train), ("dev", n_dev)):
    _write_tsv(os.path.join(data_dir, split + ".tsv"),
               [("src", label, "", text) for label, text in sentiment_rows(rng, n)])


def rng(seed=0):
  return np.random.RandomState(seed)
