"""--dynamic_masking: records without masks from create_pretraining_data.py and prepare_corpus.py
(the training split only), and their packed rows.

Records are read back with protobuf, independently of our writer. The unmasked records are checked
against the fixed-mask records of the same seed with their masks undone (masked_lm_ids put back at
masked_lm_positions), which the original release's layout defines.
"""

import collections
import json
import os
import subprocess
import sys

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

import create_pretraining_data as cpd
import tokenization
from tests import corpus_data
from tests import test_create_pretraining_data as generator_tests
from utils.corpus import config as config_lib
from utils.corpus import runner
from utils.data import packed_records
from utils.data import record_layout
from utils.datafiles import generator_flags
from utils.datafiles import packer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNMASKED = {"input_ids", "input_mask", "segment_ids", "next_sentence_labels"}
MASKS = {"masked_lm_positions", "masked_lm_ids", "masked_lm_weights"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """(input files, vocabulary file) of test_create_pretraining_data's small corpus."""
  return generator_tests.corpus_with_vocabulary(tmp_path_factory.mktemp("corpus"))


def read_records(paths):
  """Every record of `paths`: dict name -> list of values, the features each record has."""
  out = []
  for path in paths:
    for record in tf.compat.v1.io.tf_record_iterator(path):
      feature = tf.train.Example.FromString(record).features.feature
      out.append({name: list(getattr(feature[name], feature[name].WhichOneof("kind")).value)
                  for name in feature})
  return out


def unmasked(record):
  """A fixed-mask record's input_ids with its masks undone."""
  ids = list(record["input_ids"])
  for position, label, weight in zip(record["masked_lm_positions"], record["masked_lm_ids"],
                                     record["masked_lm_weights"]):
    if weight:
      ids[position] = label
  return ids


def generate(corpus, out_dir, **overrides):
  inputs, vocab_file = corpus
  return read_records(generator_tests.generate(inputs, vocab_file, out_dir, **overrides))


def test_records_without_masks_are_the_fixed_mask_records_with_their_masks_undone(corpus,
                                                                                 tmp_path):
  """Same seed, same --dupe_factor: the same records in the same order, the sequences unmasked,
  nothing of the masks left; the masking random streams are not drawn from."""
  fixed = generate(corpus, tmp_path / "fixed", dupe_factor=2)
  dynamic = generate(corpus, tmp_path / "dynamic", dupe_factor=2, dynamic_masking=True)
  mask_id = tokenization.load_vocab(corpus[1])["[MASK]"]
  assert len(dynamic) == len(fixed) > 100
  assert sum(ids.count(mask_id) for ids in (r["input_ids"] for r in fixed)) > 100
  for fixed_record, record in zip(fixed, dynamic):
    assert set(record) == UNMASKED
    assert record["input_ids"] == unmasked(fixed_record)
    assert mask_id not in record["input_ids"]
    for name in ("input_mask", "segment_ids", "next_sentence_labels"):
      assert record[name] == fixed_record[name]


def test_one_copy_holds_the_sentence_pairs_of_a_fixed_mask_runs_first_copy(corpus, tmp_path):
  """--dupe_factor=1 without masks: the sequences of a fixed-mask run with --dupe_factor=1 (the
  same order), and among those of one with --dupe_factor=3, whose first copy they are."""
  one = generate(corpus, tmp_path / "one", dupe_factor=1, dynamic_masking=True)
  fixed_one = generate(corpus, tmp_path / "fixed1", dupe_factor=1)
  fixed_three = generate(corpus, tmp_path / "fixed3", dupe_factor=3)
  assert [r["input_ids"] for r in one] == [unmasked(r) for r in fixed_one]
  key = lambda r, ids: (tuple(ids), tuple(r["segment_ids"]), r["next_sentence_labels"][0])
  copies = collections.Counter(key(r, unmasked(r)) for r in fixed_three)
  ours = collections.Counter(key(r, r["input_ids"]) for r in one)
  assert not ours - copies  # every sequence of the one copy is in the three
  assert 2.5 * len(one) < len(fixed_three) < 3.5 * len(one)


def _generator_flags(*argv):
  """The generator's flags (create_pretraining_data.py's masking ones too) parsed from argv."""
  values = flags.FlagValues()
  generator_flags.define_generator_flags(values)
  flags.DEFINE_integer("max_predictions_per_seq", 20, "", flag_values=values)
  values(["create_pretraining_data.py"] + list(argv))
  return values


def test_dupe_factor_is_one_by_default_with_dynamic_masking_and_as_given_otherwise(caplog):
  caplog.set_level("INFO")
  assert generator_flags.dupe_factor(_generator_flags()) == 10
  assert generator_flags.dupe_factor(_generator_flags("--dupe_factor=3")) == 3
  assert generator_flags.dupe_factor(_generator_flags("--dynamic_masking")) == 1
  assert not caplog.text
  assert generator_flags.dupe_factor(_generator_flags("--dynamic_masking", "--dupe_factor=4")) == 4
  assert "--dupe_factor=4 with --dynamic_masking" in caplog.text
  assert "differ only by their sentence pairing" in caplog.text


@pytest.mark.parametrize("argv", [["--do_whole_word_mask"], ["--masked_lm_prob=0.3"],
                                  ["--max_predictions_per_seq=20"]])
def test_masking_flags_are_refused_where_the_records_hold_no_masks(argv):
  cpd.check_masking_flags(_generator_flags(*argv))  # fixed masks: they apply
  with pytest.raises(ValueError, match=r"%s: no use with --dynamic_masking"
                     % argv[0].split("=")[0]):
    cpd.check_masking_flags(_generator_flags("--dynamic_masking", *argv))


@pytest.mark.e2e
def test_the_command_line_writes_one_copy_without_masks_and_refuses_masking_flags(corpus,
                                                                                  tmp_path):
  inputs, vocab_file = corpus
  out = tmp_path / "cli.tfrecord"
  args = [sys.executable, "create_pretraining_data.py", "--input_file=%s" % inputs[0],
          "--output_file=%s" % out, "--vocab_file=%s" % vocab_file, "--max_seq_length=64",
          "--random_seed=7", "--dynamic_masking"]
  proc = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  records = read_records([str(out)])
  assert records and all(set(r) == UNMASKED for r in records)
  one_copy = generator_tests.generate(inputs[:1], vocab_file, tmp_path / "one", dupe_factor=1,
                                     dynamic_masking=True)  # the same seed and length
  assert records == read_records(one_copy)
  refused = subprocess.run(args + ["--max_predictions_per_seq=20"], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=120)
  assert refused.returncode == 2
  assert "--max_predictions_per_seq: no use with --dynamic_masking" in refused.stderr


def _sequences(records):
  """Counter of (tokens, segment ids, next-sentence label) of unpacked records (real tokens)."""
  return collections.Counter(
      (tuple(np.asarray(r["input_ids"])[np.asarray(r["input_mask"]) > 0]),
       tuple(np.asarray(r["segment_ids"])[np.asarray(r["input_mask"]) > 0]),
       int(r["next_sentence_labels"][0])) for r in records)


def test_packed_rows_of_records_without_masks(corpus, tmp_path):
  """Each row: its sequences' tokens at positions 0..n-1 each, a next-sentence slot per
  sequence, no masked_lm_*; together the input's sequences, each once; unpacked, the input."""
  outputs = generator_tests.generate(corpus[0], corpus[1], tmp_path / "records", dupe_factor=1,
                                     dynamic_masking=True)
  packed_file = str(tmp_path / "packed.tfrecord")
  result = packer.pack_files(outputs, [packed_file], max_sequences_per_pack=3, num_workers=1)
  records = read_records(outputs)
  rows = read_records([packed_file])
  assert result["sequences"] == len(records) and result["packs"] == len(rows) < len(records)
  example = tf.train.Example.FromString(next(tf.compat.v1.io.tf_record_iterator(packed_file)))
  assert record_layout.layout_of(example) == record_layout.Layout(
      packed=True, seq_length=64, predictions=0, sequences_per_row=3, dynamic_masks=True)
  found = []
  for row in rows:
    assert set(row) == UNMASKED | {"positions", "next_sentence_positions",
                                   "next_sentence_weights"}
    assert record_layout.packed_row_problem(row) is None
    mask, positions = np.asarray(row["input_mask"]), np.asarray(row["positions"])
    numbers = sorted(set(mask[mask > 0].tolist()))
    assert row["next_sentence_weights"] == [1.0] * len(numbers) + [0.0] * (3 - len(numbers))
    for number in numbers:
      where = np.flatnonzero(mask == number)
      assert positions[where].tolist() == list(range(len(where)))
      assert row["next_sentence_positions"][number - 1] == where[0]
      found.append({"input_ids": np.asarray(row["input_ids"])[where],
                    "input_mask": np.ones(len(where)),
                    "segment_ids": np.asarray(row["segment_ids"])[where],
                    "next_sentence_labels": [row["next_sentence_labels"][number - 1]]})
  assert _sequences(found) == _sequences(records)
  unpacked = str(tmp_path / "unpacked.tfrecord")
  packer.unpack_files([packed_file], [unpacked])
  back = read_records([unpacked])
  assert all(set(r) == UNMASKED for r in back) and _sequences(back) == _sequences(records)


def test_the_packer_refuses_records_with_and_without_masks_together(corpus, tmp_path):
  masked = generator_tests.generate(corpus[0][:1], corpus[1], tmp_path / "m", dupe_factor=1)
  bare = generator_tests.generate(corpus[0][:1], corpus[1], tmp_path / "u", dupe_factor=1,
                                  dynamic_masking=True)
  with pytest.raises(packed_records.PackingInputError, match="record 0 has no masks, but .* has"):
    packer.pack_files(masked + bare, [str(tmp_path / "p.tfrecord")], num_workers=1)
  with pytest.raises(ValueError, match="--max_predictions_per_seq=20: the input records hold no "
                     "masks"):
    packer.pack_files(bare, [str(tmp_path / "p.tfrecord")], max_predictions_per_seq=20,
                      num_workers=1)


def test_prepare_corpus_writes_training_records_without_masks_and_keeps_the_held_out_masks(
    tmp_path):
  """The training split's records and packed rows have no masks; the held-out split's are the
  bytes a fixed-mask build writes (fixed masks, one copy) and keep their settings hash; the
  manifest says which records hold masks."""
  inputs = corpus_data.write_inputs(str(tmp_path / "inputs"))["inputs"]
  phases = (config_lib.Phase(32, 5),)
  runner.run(corpus_data.make_config(inputs, tmp_path / "fixed", phases=phases, pack=True))
  runner.run(corpus_data.make_config(inputs, tmp_path / "dynamic", phases=phases, pack=True,
                                     dynamic_masking=True))
  for split in ("train", "eval"):
    for directory in ("seq32", "seq32_packed"):
      names = sorted(os.listdir(str(tmp_path / "dynamic" / directory / split)))
      assert names
      for name in names:
        records = read_records([str(tmp_path / "dynamic" / directory / split / name)])
        with_masks = {bool(MASKS & set(r)) for r in records}
        assert with_masks == {split == "eval"}, (directory, split, name)
      if split == "eval":
        for name in names:
          assert ((tmp_path / "dynamic" / directory / split / name).read_bytes()
                  == (tmp_path / "fixed" / directory / split / name).read_bytes())
  for j in range(corpus_data.NUM_SHARDS):
    entries = {}
    for build in ("fixed", "dynamic"):
      for split in ("train", "eval"):
        path = tmp_path / build / "manifest" / "records" / ("seq32-%s-shard-%05d.json" % (split, j))
        entries[build, split] = json.loads(path.read_text())
    assert entries["dynamic", "train"]["settings"]["options"]["dynamic_masking"] is True
    assert "dynamic_masking" not in entries["dynamic", "eval"]["settings"]["options"]
    assert (entries["dynamic", "eval"]["settings_hash"]
            == entries["fixed", "eval"]["settings_hash"])
    assert (entries["dynamic", "train"]["settings_hash"]
            != entries["fixed", "train"]["settings_hash"])
