"""create_pretraining_data.py: the records, their sampling invariants, determinism and errors, and
what a failed or killed run leaves behind (nothing: no partial file, no empty directory of its own,
no process).

Records are read back with protobuf (`tf.train.Example.FromString`), independently of our writer;
the corpus is tokenised again with `tokenization.FullTokenizer.tokenize` to check where the segments
come from. Expected counts are computed here with Python's own round().
"""

import logging
import os
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import create_pretraining_data as cpd
import tokenization
from tests import helpers
from utils.core import errors
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


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """(input files, vocabulary file) of a small generated corpus."""
  directory = tmp_path_factory.mktemp("corpus")
  paths = make_corpus(directory)
  vocab_file = str(directory / "vocab.txt")
  vocabulary.build_vocab(paths, 300, vocab_file, min_frequency=2)
  return paths, vocab_file


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


def test_errors_name_the_problem(corpus, tmp_path):
  inputs, vocab_file = corpus
  with pytest.raises(ValueError, match="no file matches .*nothing-here-\\*.txt, .*also-not"):
    cpd.resolve_input_files(str(tmp_path / "nothing-here-*.txt") + "," + str(tmp_path / "also-not"))
  assert cpd.resolve_input_files(",".join([inputs[1], inputs[0], inputs[1]])) == [inputs[1],
                                                                                  inputs[0]]
  with pytest.raises(ValueError, match="vocabulary file not found: .*missing.txt"):
    cpd.load_tokenizer(str(tmp_path / "missing.txt"), True)
  no_special = tmp_path / "plain_vocab.txt"
  no_special.write_text("[UNK]\n[CLS]\nthe\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"plain_vocab.txt lacks the special token\(s\) \[SEP\] "
                                       r"\[MASK\]"):
    generate(inputs, str(no_special), tmp_path / "x")
  blank = tmp_path / "blank.txt"
  blank.write_text("\n\n  \n\x05\n", encoding="utf-8")
  with pytest.raises(instances.InputDataError,
                     match="^no documents in the input files .*blank.txt: no line holds a token"):
    generate([str(blank)], vocab_file, tmp_path / "blank_out")
  assert not os.listdir(str(tmp_path / "blank_out"))  # it existed before: kept
  with pytest.raises(ValueError, match="--output_file lists 2 files but only 1 input"):
    cpd.resolve_output_files("a,b", 1)
  with pytest.raises(ValueError, match="--max_seq_length must be an integer >= 5"):
    generate(inputs, vocab_file, tmp_path / "y", max_seq_length=4)
  with pytest.raises(ValueError, match="--masked_lm_prob must be in"):
    generate(inputs, vocab_file, tmp_path / "y", masked_lm_prob=0.0)
  latin1 = tmp_path / "latin1.txt"
  latin1.write_bytes(b"caf\xe9\n")
  not_utf8 = r"^%s: not UTF-8 text at byte offset 3 \(line 1\): convert the file to UTF-8$" % (
      re.escape(str(latin1)))
  with pytest.raises(instances.InputDataError, match=not_utf8):
    generate([str(latin1)], vocab_file, tmp_path / "z")
  with pytest.raises(instances.InputDataError, match=not_utf8):  # from a worker
    generate([inputs[0], str(latin1)], vocab_file, tmp_path / "z2", num_workers=2)
  assert not os.listdir(str(tmp_path / "z2"))


def test_a_failed_run_removes_the_directories_it_created_and_only_those(corpus, tmp_path,
                                                                         monkeypatch):
  inputs, vocab_file = corpus
  latin1 = tmp_path / "latin1.txt"
  latin1.write_bytes(b"caf\xe9\n")
  existing = tmp_path / "existing"
  existing.mkdir()
  kept = tmp_path / "kept" / "new"  # created by the run, but another file lands in it
  outputs = [str(tmp_path / "new" / "deeper" / "a.tfrecord"), str(existing / "b.tfrecord"),
             str(kept / "c.tfrecord")]
  real_process_file = instances.process_file

  def writes_beside_the_output(task):
    (kept / "theirs.txt").write_text("not the run's")
    return real_process_file(task)

  monkeypatch.setattr(instances, "process_file", writes_beside_the_output)
  with pytest.raises(instances.InputDataError, match="latin1.txt: not UTF-8"):
    cpd.create_pretraining_data([inputs[0], inputs[1], str(latin1)], outputs, vocab_file,
                                options(dupe_factor=1), num_workers=2)
  assert sorted(os.listdir(tmp_path)) == ["existing", "kept", "latin1.txt"]
  assert os.listdir(existing) == [] and os.listdir(kept) == ["theirs.txt"]


@pytest.mark.timeout(120)
def test_a_dead_worker_stops_the_run_with_the_file_named(corpus, tmp_path, monkeypatch):
  inputs, vocab_file = corpus
  real_process_file = instances.process_file

  def dies_on_second_file(task):
    if task[0] == 1:
      os._exit(9)  # as if killed (the workers are forked: they run this patched function)
    return real_process_file(task)

  monkeypatch.setattr(instances, "process_file", dies_on_second_file)
  with pytest.raises(RuntimeError, match="worker process of input file .*corpus-1.txt died "
                                         "\\(exit code 9"):
    generate(inputs, vocab_file, tmp_path, num_workers=2)
  assert not os.listdir(str(tmp_path))  # no output, no partial file


def test_a_rerun_removes_the_leftovers_of_an_interrupted_run(corpus, tmp_path, caplog,
                                                             monkeypatch):
  inputs, vocab_file = corpus
  reference = generate(inputs, vocab_file, tmp_path / "reference", num_workers=2)
  out = tmp_path / "out"
  out.mkdir()
  outputs = [str(out / "a.tfrecord"), str(out / "b.tfrecord")]  # 3 inputs -> 2 outputs: parts
  leftovers = [outputs[0] + ".partial", outputs[1] + ".part-00001.partial",
               outputs[0] + ".part-00002"]
  for path in leftovers + [outputs[1]]:
    with open(path, "wb") as writer:
      writer.write(b"from an interrupted run")
  # What a reader of the directory sees while the rerun writes (the workers are forked: they
  # append to a file). Neither the interrupted run's finished-looking b.tfrecord nor its other
  # files may be seen next to the new ones: the rerun removes them before it starts.
  seen = tmp_path / "seen_mid_run.txt"
  real_process_file = instances.process_file

  def recording(task):
    with open(str(seen), "a") as writer:
      writer.write(" ".join(sorted(os.listdir(str(out)))) + "\n")
    return real_process_file(task)

  monkeypatch.setattr(instances, "process_file", recording)
  with caplog.at_level(logging.WARNING):
    generate(inputs, vocab_file, out, num_workers=2, outputs=outputs)
  # Names the rerun itself writes only after every input is done (or never).
  stale = {"b.tfrecord", "a.tfrecord.partial", "a.tfrecord.part-00002"}
  listings = [set(line.split()) for line in seen.read_text().splitlines()]
  assert len(listings) == 3
  assert all(not names & stale for names in listings), listings
  assert sorted(os.listdir(str(out))) == ["a.tfrecord", "b.tfrecord"]
  assert all(path in caplog.text for path in leftovers)
  assert read_examples(outputs) == read_examples([reference[0], reference[2], reference[1]])


def test_outputs_are_published_only_when_the_whole_set_is_written(corpus, tmp_path, monkeypatch):
  inputs, vocab_file = corpus
  real_process_file = instances.process_file
  published = []

  def recording(task):
    result = real_process_file(task)
    published.append(sorted(os.listdir(str(tmp_path))))  # what a reader sees mid-run
    return result

  monkeypatch.setattr(instances, "process_file", recording)
  outputs = generate(inputs, vocab_file, tmp_path)
  assert len(published) == 3
  assert all(not name.endswith(".tfrecord") for names in published for name in names), published
  assert sorted(os.listdir(str(tmp_path))) == sorted(os.path.basename(p) for p in outputs)


@pytest.mark.e2e
def test_output_directories_are_created_and_a_file_in_the_way_is_named(corpus, tmp_path):
  inputs, vocab_file = corpus
  nested = tmp_path / "new" / "dir" / "out.tfrecord"
  cpd.create_pretraining_data(inputs[:1], [str(nested)], vocab_file, options(dupe_factor=1))
  assert len(read_examples([str(nested)])) > 0
  regular = tmp_path / "results"
  regular.write_text("a file")
  args = [sys.executable, "create_pretraining_data.py", "--input_file=%s" % inputs[0],
          "--output_file=%s" % (regular / "out.tfrecord"), "--vocab_file=%s" % vocab_file]
  proc = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert "--output_file=%s" % regular in proc.stderr and "is a regular file" in proc.stderr
  assert "Traceback" not in proc.stderr


@pytest.mark.e2e
def test_command_line_progress_and_errors(corpus, tmp_path):
  inputs, vocab_file = corpus
  out = tmp_path / "cli.tfrecord"
  args = [sys.executable, "create_pretraining_data.py", "--input_file=%s" % inputs[0],
          "--output_file=%s" % out, "--vocab_file=%s" % vocab_file, "--max_seq_length=64",
          "--max_predictions_per_seq=10", "--dupe_factor=1", "--random_seed=7"]
  proc = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert "1/1 files" in proc.stderr and "instances/s" in proc.stderr
  assert len(read_examples([str(out)])) > 0
  missing = subprocess.run(args[:3] + ["--output_file=%s" % out, "--vocab_file=/no/vocab.txt"],
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert missing.returncode == 2 and "/no/vocab.txt" in missing.stderr
  assert "Traceback" not in missing.stderr


def _error_lines(stderr):
  """The lines of a run's stderr that are not absl log records ("I1126 20:27:42.975300 ...")."""
  return [line for line in stderr.splitlines() if not re.match(r"[IWEF]\d{4} \d\d:", line)]


@pytest.mark.e2e
@pytest.mark.parametrize("problem", ["not UTF-8", "no documents"])
def test_bad_input_data_is_named_with_its_fix_and_leaves_no_directory(corpus, tmp_path, problem):
  inputs, vocab_file = corpus
  if problem == "not UTF-8":
    data = b"A first line.\n\nThen caf\xe9 au lait.\n"
    bad = tmp_path / "latin1.txt"
    offset = data.index(b"\xe9")
    expected = "%s: not UTF-8 text at byte offset %d (line 3): convert the file to UTF-8" % (
        bad, offset)
    input_files = [inputs[0], str(bad)]  # the bad file is read by a worker process
  else:
    data = b"\n  \n\t\n\n\x05\n"
    bad = tmp_path / "blank.txt"
    expected = ("no documents in the input files %s: no line holds a token (only blank lines, "
                "spaces or control characters); give text with one sentence per line and a "
                "blank line between documents" % bad)
    input_files = [str(bad)]
  bad.write_bytes(data)
  out = tmp_path / "out" / "new"
  proc = helpers.run_python(
      ["create_pretraining_data.py", "--input_file=%s" % ",".join(input_files),
       "--output_file=%s" % ",".join(str(out / ("%d.tfrecord" % i))
                                     for i in range(len(input_files))),
       "--vocab_file=%s" % vocab_file, "--num_workers=2", "--dupe_factor=1"],
      check=False, timeout=120)
  assert proc.returncode == errors.USAGE_EXIT_CODE, proc.stderr[-3000:]
  # One line naming the file and the fix: no hint to the flags (the flags were right).
  assert _error_lines(proc.stderr) == ["create_pretraining_data.py: error: " + expected]
  assert not (tmp_path / "out").exists()  # the run created it, wrote nothing: removed


def _process_status(pid):
  """(state letter, parent pid) of process `pid` from /proc, None when there is none."""
  try:
    with open("/proc/%d/stat" % pid) as reader:
      fields = reader.read().rsplit(")", 1)[1].split()
  except OSError:
    return None
  return fields[0], int(fields[1])


def _alive(pid):
  """Whether process `pid` runs (a zombie has ended: it waits only to be reaped)."""
  status = _process_status(pid)
  return status is not None and status[0] != "Z"


def _children(pid):
  """Pids of the live processes whose parent is `pid`."""
  return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()
          and _alive(int(entry)) and (_process_status(int(entry)) or ("", 0))[1] == pid]


def _command_line(pid):
  """The command line of process `pid` (bytes, NUL-separated), None when there is none."""
  try:
    with open("/proc/%d/cmdline" % pid, "rb") as reader:
      return reader.read()
  except OSError:
    return None


def kill_mid_run_and_expect_nothing_left(command, out, stderr_path, check_processes=None):
  """Starts a data tool, kills it with SIGKILL once a ".partial" file appears in `out`, and
  checks that within 10 s no file is left in `out` and none of its processes lives.

  Args:
    command: the tool's argv, run from the repository root in its own session.
    out: the (empty) directory its outputs go to.
    stderr_path: where its stderr goes (shown when it ends before writing).
    check_processes: optional check_processes(parent_pid, pids) on the run's processes, before
      the kill.
  """
  with open(stderr_path, "w") as stderr:
    parent = subprocess.Popen(command, cwd=REPO_ROOT, stderr=stderr, start_new_session=True)
  try:
    deadline = time.time() + 90
    while not any(name.endswith(".partial") for name in os.listdir(out)):
      assert parent.poll() is None, "ended before writing:\n" + stderr_path.read_text()[-3000:]
      assert time.time() < deadline, "no .partial file after 90 s"
      time.sleep(0.005)
    run = _children(parent.pid)
    if check_processes is not None:
      check_processes(parent.pid, run)
    parent.send_signal(signal.SIGKILL)
    assert parent.wait(timeout=30) == -signal.SIGKILL  # killed mid-run, not ended by itself
    deadline = time.time() + 10
    while os.listdir(out) or any(_alive(pid) for pid in run):
      assert time.time() < deadline, "10 s after kill -9: files %s, processes %s" % (
          os.listdir(out), [pid for pid in run if _alive(pid)])
      time.sleep(0.05)
  finally:
    try:
      os.killpg(parent.pid, signal.SIGKILL)  # what is left of the run, should the test fail
    except ProcessLookupError:
      pass
    parent.wait()


def _has_its_workers(parent_pid, run):
  forks = [pid for pid in run if _command_line(pid) == _command_line(parent_pid)]
  assert len(forks) >= 2, "expected its worker processes: %s" % run


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_a_generator_killed_outright_leaves_no_partial_file_and_no_process(tmp_path):
  inputs = make_corpus(tmp_path, num_files=8, documents_per_file=150)
  vocab_file = str(tmp_path / "vocab.txt")
  vocabulary.build_vocab(inputs, 300, vocab_file, min_frequency=2)
  out = tmp_path / "out"
  out.mkdir()
  outputs = [str(out / ("%d.tfrecord" % i)) for i in range(len(inputs))]
  kill_mid_run_and_expect_nothing_left(
      [sys.executable, "create_pretraining_data.py", "--input_file=%s" % ",".join(inputs),
       "--output_file=%s" % ",".join(outputs), "--vocab_file=%s" % vocab_file,
       "--max_seq_length=%d" % MAX_SEQ_LENGTH, "--max_predictions_per_seq=%d" % MAX_PREDICTIONS,
       "--dupe_factor=10", "--num_workers=2"],
      out, tmp_path / "stderr.txt", check_processes=_has_its_workers)
