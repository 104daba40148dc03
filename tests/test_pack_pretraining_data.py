"""pack_pretraining_data.py: packed rows obey every rule of the packed record (checked here, one
rule at a time, on protobuf-parsed output), unpacking them gives back the input records exactly
(ours and the original release's), the padding on the demo corpus, determinism and independence
of --num_workers, memory bounded by a chunk, and bad input refused in one line with nothing left.
"""

import collections
import os
import re
import sys
import tracemalloc

import numpy as np
import pytest
import tensorflow as tf

import create_pretraining_data as cpd
import pack_pretraining_data as ppd
from tests import helpers
from tests import test_create_pretraining_data as data_tests
from tests import test_create_pretraining_data_failures as failure_tests
from utils.data import instances
from utils.data import packed_records
from utils.data import vocabulary

SCRIPT = "pack_pretraining_data.py"
K = 3


def parse_file(path):
  """Every record of a TFRecord file as dict name -> (kind, list of values), by protobuf."""
  rows = []
  for record in tf.compat.v1.io.tf_record_iterator(path):
    feature = tf.train.Example.FromString(record).features.feature
    rows.append({name: (feature[name].WhichOneof("kind"),
                        list(getattr(feature[name], feature[name].WhichOneof("kind")).value))
                 for name in feature})
  return rows


def canonical(row):
  """A parsed record as a hashable value: sorted (name, kind, values)."""
  return tuple(sorted((name, kind, tuple(values)) for name, (kind, values) in row.items()))


def check_row(row, s, k, p):
  """Asserts every rule of a packed record (the packed-record table of docs/DATA.md)."""
  lengths = dict(input_ids=s, input_mask=s, segment_ids=s, positions=s, masked_lm_positions=p,
                 masked_lm_ids=p, masked_lm_weights=p, next_sentence_positions=k,
                 next_sentence_labels=k, next_sentence_weights=k)
  assert sorted(row) == sorted(lengths)
  for name, length in lengths.items():
    kind = "float_list" if name.endswith("weights") else "int64_list"
    assert row[name][0] == kind and len(row[name][1]) == length, name
  v = {name: values for name, (_, values) in row.items()}
  count = int(sum(v["next_sentence_weights"]))
  assert 1 <= count <= k
  assert v["next_sentence_weights"] == [1.0] * count + [0.0] * (k - count)  # no gap
  # Sequence i's tokens: one block from its [CLS] offset, blocks back to back from 0.
  offset = 0
  for i in range(count):
    assert v["next_sentence_positions"][i] == offset
    length = v["input_mask"].count(i + 1)
    assert length > 0
    assert v["input_mask"][offset:offset + length] == [i + 1] * length
    assert v["positions"][offset:offset + length] == list(range(length))
    for slot, number in enumerate(v["masked_lm_weights"]):
      if number == i + 1:
        assert offset <= v["masked_lm_positions"][slot] < offset + length
    offset += length
  for name in ("input_ids", "input_mask", "segment_ids", "positions"):
    assert v[name][offset:] == [0] * (s - offset), name
  assert v["next_sentence_positions"][count:] == [0] * (k - count)
  assert v["next_sentence_labels"][count:] == [0] * (k - count)
  # Predictions: sequence 1's first, then 2's, ...; then padding.
  numbers = [int(w) for w in v["masked_lm_weights"]]
  real = sum(1 for w in numbers if w)
  assert numbers[:real] == sorted(numbers[:real]) and all(numbers[:real])
  assert real <= p and numbers[real:] == [0] * (p - real)
  assert all(w == int(w) for w in v["masked_lm_weights"])
  assert v["masked_lm_positions"][real:] == [0] * (p - real)
  assert v["masked_lm_ids"][real:] == [0] * (p - real)
  return count, offset


def unpack_file(path, s_in, w):
  """The records a packed file holds, unpacked (`packed_records.unpack_row`), as parsed dicts."""
  rows = []
  for row in parse_file(path):
    arrays = {name: np.array(values) for name, (_, values) in row.items()}
    for record in packed_records.unpack_row(arrays, s_in, w):
      rows.append({name: ("float_list" if values.dtype == np.float32 else "int64_list",
                          values.tolist()) for name, values in record.items()})
  return rows


def check_round_trip(inputs, outputs, s, k, w, s_in=None, w_in=None):
  """Asserts the outputs are valid packs (S = s, K = k, P = w + k) holding exactly the input
  records (of widths s_in, w_in: default s, w); returns (rows, sequences, real tokens)."""
  expected = collections.Counter(canonical(r) for path in inputs for r in parse_file(path))
  got = collections.Counter()
  rows = sequences = tokens = 0
  for path in outputs:
    for row in parse_file(path):
      count, used = check_row(row, s, k, w + k)
      rows, sequences, tokens = rows + 1, sequences + count, tokens + used
    got.update(canonical(r) for r in unpack_file(path, s_in or s, w_in or w))
  assert got == expected
  assert sequences == sum(expected.values())
  return rows, sequences, tokens


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
  """(input record files, vocabulary) made by our generator: 3 files, seq 64, W 10."""
  directory = tmp_path_factory.mktemp("ours")
  corpus = data_tests.make_corpus(directory, num_files=3, documents_per_file=40, seed=3)
  vocab_file = str(directory / "vocab.txt")
  vocabulary.build_vocab(corpus, 300, vocab_file, min_frequency=2)
  records = data_tests.generate(corpus, vocab_file, directory / "records", dupe_factor=2)
  return records, vocab_file


def test_round_trip_of_our_records_in_chunks_across_files(ours, tmp_path):
  inputs, _ = ours
  outputs = [str(tmp_path / "a"), str(tmp_path / "b")]
  result = ppd.pack_files(inputs, outputs, chunk_sequences=150, num_workers=1)
  rows, sequences, tokens = check_round_trip(inputs, outputs, 64, K, 10)
  assert (rows, sequences, tokens) == (result["packs"], result["sequences"], result["tokens"])
  assert sequences > 600 and rows < sequences
  assert sorted(os.listdir(str(tmp_path))) == ["a", "b"]  # no part left


def test_a_longer_row_and_more_sequences_per_pack(ours, tmp_path):
  inputs, _ = ours
  output = str(tmp_path / "packed")
  ppd.pack_files(inputs[:1], [output], max_seq_length=200, max_sequences_per_pack=5,
                 max_predictions_per_seq=40, num_workers=1)
  rows, sequences, _ = check_round_trip(inputs[:1], [output], 200, 5, 40, s_in=64, w_in=10)
  # A pack of fewer than 3 sequences of <= 64 tokens and <= 10 predictions has room for one more
  # (72 tokens, 25 predictions): only the last one opened can be left so.
  assert sequences >= 3 * (rows - 1)


def test_output_depends_on_the_seed_only_not_on_the_workers(ours, tmp_path):
  inputs, _ = ours

  def pack(name, **overrides):
    """The bytes of the three outputs of a run with `overrides`."""
    outputs = [str(tmp_path / name / n) for n in ("x", "y", "z")]
    arguments = dict(chunk_sequences=200, num_workers=1, random_seed=5)
    arguments.update(overrides)
    ppd.pack_files(inputs, outputs, **arguments)
    return [open(path, "rb").read() for path in outputs]

  one = pack("one")
  assert pack("two", num_workers=2) == one
  assert pack("again", num_workers=2) == one
  other = pack("seed", random_seed=6)
  assert other != one
  as_set = lambda files: collections.Counter(  # noqa: E731
      canonical(r) for i in range(3) for r in parse_file(str(tmp_path / files / "xyz"[i])))
  assert as_set("seed") == as_set("one")  # the same packs, in another order


def test_memory_is_bounded_by_a_chunk(ours, tmp_path):
  inputs, _ = ours
  # The same records four times over: four times the input, the same chunks.
  many = []
  for copy in range(4):
    for index, path in enumerate(inputs):
      many.append(str(tmp_path / ("copy%d-%d" % (copy, index))))
      with open(path, "rb") as reader, open(many[-1], "wb") as writer:
        writer.write(reader.read())

  def peak(files, name):
    """Traced memory's peak while `files` are packed in chunks of 200."""
    tracemalloc.start()
    try:
      ppd.pack_files(files, [str(tmp_path / name)], chunk_sequences=200, num_workers=1)
      return tracemalloc.get_traced_memory()[1]
    finally:
      tracemalloc.stop()

  small, large = peak(inputs, "small"), peak(many, "large")
  size = lambda files: sum(os.path.getsize(f) for f in files)  # noqa: E731
  assert size(many) == 4 * size(inputs)
  assert large < 1.25 * small, (small, large)
  assert os.path.getsize(str(tmp_path / "large")) > 3 * os.path.getsize(str(tmp_path / "small"))


def test_summary_line_figures():
  limits = packed_records.PackLimits(100, 3, 23)
  # 10 sequences of 100-token rows holding 400 tokens (60% padding), in 5 packs (500: 20%).
  line = ppd.summary_line(dict(sequences=10, packs=5, tokens=400, input_length=100,
                               limits=limits))
  assert line == ("packed 10 sequences into 5 packs of 100 tokens: padding 60.0% -> 20.0%, "
                  "2.00 sequences per pack")


def test_a_bad_record_in_a_later_file_leaves_nothing(ours, tmp_path):
  inputs, _ = ours
  bad = str(tmp_path / "bad.tfrecord")
  features = packed_records.read_features(inputs[0], 0, 30)
  short = int(np.flatnonzero(features["input_mask"][:, -1] == 0)[0])  # a record with padding
  features["input_mask"][short, -1] = 1  # a 1 after the padding began
  with open(bad, "wb") as writer:
    writer.write(packed_records.encode(features, cpd.Crc32c()).tobytes())
  out = tmp_path / "out" / "new"
  expected = r"^%s: record %d: input_mask must be 1s then 0s" % (re.escape(bad), short)
  with pytest.raises(packed_records.PackingInputError, match=expected):
    ppd.pack_files(inputs + [bad], [str(out / "a"), str(out / "b")], chunk_sequences=100,
                   num_workers=2)
  assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_round_trip_of_the_original_release_records(tmp_path):
  original, _ = data_tests.original_release_records(tmp_path, 64, 10)
  proc = helpers.run_python([SCRIPT, "--input_file=%s" % original,
                             "--output_file=%s" % (tmp_path / "packed")], timeout=300)
  rows, sequences, tokens = check_round_trip([original], [str(tmp_path / "packed")], 64, K, 10)
  before = 100.0 * (1 - tokens / (64.0 * sequences))
  after = 100.0 * (1 - tokens / (64.0 * rows))
  assert proc.stdout.splitlines()[-1] == (
      "packed %d sequences into %d packs of 64 tokens: padding %.1f%% -> %.1f%%, %.2f sequences "
      "per pack" % (sequences, rows, before, after, sequences / float(rows)))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
  """The demo data (`make data`'s build, seq 128) and its corpus as seq-512 records."""
  directory = tmp_path_factory.mktemp("demo")
  helpers.run_python(["scripts/build_demo_data.py", "--output_dir=%s" % directory], timeout=600)
  corpus = sorted(str(p) for p in (directory / "corpus").glob("train-*.txt"))
  seq512 = [str(directory / "seq512" / ("train-%d.tfrecord" % i)) for i in range(len(corpus))]
  cpd.create_pretraining_data(corpus, seq512, str(directory / "vocab.txt"),
                              instances.GeneratorOptions(
                                  max_seq_length=512, max_predictions_per_seq=80,
                                  masked_lm_prob=0.15, short_seq_prob=0.1, dupe_factor=1,
                                  do_whole_word_mask=False, random_seed=12345))
  seq128 = sorted(str(p) for p in (directory / "seq128" / "train").glob("*"))
  return seq128, seq512


def _padding(outputs, s, k, w):
  """(padding % of the packed rows, sequences per pack), counted on the rows themselves."""
  rows = tokens = sequences = 0
  for path in outputs:
    for row in parse_file(path):
      count, used = check_row(row, s, k, w + k)
      rows, tokens, sequences = rows + 1, tokens + used, sequences + count
  return 100.0 * (1 - tokens / float(rows * s)), sequences / float(rows)


@pytest.mark.e2e
def test_padding_on_the_demo_corpus_at_128(demo, tmp_path):
  seq128, _ = demo
  outputs = [str(tmp_path / os.path.basename(p)) for p in seq128]
  ppd.pack_files(seq128, outputs, num_workers=2)
  padding, per_pack = _padding(outputs, 128, K, 20)
  assert padding <= 3.0 and per_pack > 1.1


@pytest.mark.e2e
def test_padding_on_the_demo_corpus_at_512(demo, tmp_path):
  _, seq512 = demo
  outputs = [str(tmp_path / os.path.basename(p)) for p in seq512]
  ppd.pack_files(seq512, outputs, num_workers=2)
  padding, per_pack = _padding(outputs, 512, K, 80)
  assert padding <= 3.0 and per_pack > 1.5


def _error_lines(stderr):
  """The lines of stderr that are not absl log records."""
  return [line for line in stderr.splitlines() if not re.match(r"[IWEF]\d{4} \d\d:", line)]


@pytest.mark.e2e
def test_bad_input_is_one_line_exit_2_and_nothing_left(ours, tmp_path):
  inputs, vocab_file = ours
  packed = str(tmp_path / "packed.tfrecord")
  ppd.pack_files(inputs[:1], [packed], num_workers=1)
  corpus = data_tests.make_corpus(tmp_path, num_files=1, documents_per_file=8, seed=4)
  wide = data_tests.generate(corpus, vocab_file, tmp_path / "wide", max_seq_length=96)[0]
  missing = str(tmp_path / "nothing-*.tfrecord")
  cases = [
      (["--input_file=%s" % packed], re.escape(
          "%s: record 0: the input is already packed (it has next_sentence_positions, "
          "positions); give unpacked records" % packed)),
      (["--input_file=%s" % inputs[0], "--max_seq_length=32"],
       "%s: record \\d+: a sequence of \\d+ tokens is longer than --max_seq_length=32"
       % re.escape(inputs[0])),
      (["--input_file=%s,%s" % (inputs[0], wide)],
       "%s: record 0: the widths of input_ids, input_mask, segment_ids are 96, 96, 96, but 64, "
       "64, 64 in %s" % (re.escape(wide), re.escape(inputs[0]))),
      (["--input_file=%s" % missing], "--input_file: no file matches %s" % re.escape(missing)),
  ]
  for arguments, expected in cases:
    out = tmp_path / "out" / "new"
    proc = helpers.run_python([SCRIPT, "--output_file=%s,%s" % (out / "a", out / "b")]
                              + arguments, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1 and re.fullmatch("%s: error: %s.*" % (SCRIPT, expected), lines[0]), (
        lines)
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.e2e
def test_a_packer_killed_outright_leaves_no_partial_file_and_no_process(demo, tmp_path):
  seq128, _ = demo
  out = tmp_path / "out"
  out.mkdir()
  failure_tests.kill_mid_run_and_expect_nothing_left(
      [sys.executable, SCRIPT, "--input_file=%s" % ",".join(seq128), "--output_dir=%s" % out,
       "--chunk_sequences=1000", "--num_workers=2"], out, tmp_path / "stderr.txt")


@pytest.mark.e2e
def test_the_command_packs_and_unpacks_back_to_the_same_records(ours, tmp_path):
  inputs, _ = ours
  packed = tmp_path / "packed"
  proc = helpers.run_python([SCRIPT, "--input_file=%s" % ",".join(inputs),
                             "--output_dir=%s" % packed, "--max_seq_length=128",
                             "--chunk_sequences=300"], timeout=300)
  rows = sum(len(parse_file(str(p))) for p in packed.iterdir())
  assert re.match(r"packed (\d+) sequences into %d packs of 128 tokens" % rows,
                  proc.stdout.splitlines()[-1])
  unpacked = tmp_path / "unpacked"
  proc = helpers.run_python([SCRIPT, "--unpack", "--input_file=%s/*" % packed,
                             "--output_dir=%s" % unpacked, "--max_seq_length=64"], timeout=300)
  expected = collections.Counter(canonical(r) for p in inputs for r in parse_file(p))
  got = collections.Counter(canonical(r) for p in unpacked.iterdir() for r in parse_file(str(p)))
  assert got == expected
  assert proc.stdout.splitlines()[-1] == "unpacked %d packs into %d sequences" % (
      rows, sum(expected.values()))
  # Unpacking what is not packed, or into rows too short: one line naming the file and record.
  proc = helpers.run_python([SCRIPT, "--unpack", "--input_file=%s" % inputs[0],
                             "--output_dir=%s" % (tmp_path / "again")], check=False, timeout=300)
  assert proc.returncode == 2
  assert _error_lines(proc.stderr) == ["%s: error: %s: record 0: not a packed record: no int64 "
                                       "list positions" % (SCRIPT, inputs[0])]
  proc = helpers.run_python([SCRIPT, "--unpack", "--input_file=%s/*" % packed,
                             "--output_dir=%s" % (tmp_path / "short"), "--max_seq_length=8"],
                            check=False, timeout=300)
  assert proc.returncode == 2
  assert re.fullmatch(r"%s: error: %s/\S+: record \d+: a sequence of \d+ tokens and \d+ "
                      r"predictions does not fit --max_seq_length=8, --max_predictions_per_seq=10"
                      % (SCRIPT, re.escape(str(packed))), _error_lines(proc.stderr)[0])
  assert not (tmp_path / "again").exists() and not (tmp_path / "short").exists()


def test_empty_files_are_passed_over_and_no_record_at_all_is_refused(ours, tmp_path):
  inputs, _ = ours
  empty = tmp_path / "empty.tfrecord"
  empty.write_bytes(b"")
  output = str(tmp_path / "out" / "packed")
  ppd.pack_files([str(empty), inputs[0]], [output], num_workers=1)
  check_round_trip([inputs[0]], [output], 64, K, 10)
  with pytest.raises(packed_records.PackingInputError,
                     match="^no record in the input files %s$" % re.escape(str(empty))):
    ppd.pack_files([str(empty)], [str(tmp_path / "none" / "packed")], num_workers=1)
  assert not (tmp_path / "none").exists()
