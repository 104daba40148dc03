"""utils/corpus/runner.py: whole builds in this process, on inputs of every format
(tests/corpus_data.py): what the text shards hold, the records the input pipeline reads, the
same bytes for any number of tasks and workers (a dump's shares too), reruns, changed settings,
bad input. The command itself, a kill, mpirun and the original release:
test_prepare_corpus.py."""

import collections
import os
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from tests import corpus_data
from utils.core import errors
from utils.corpus import config as config_lib
from utils.corpus import manifest
from utils.corpus import runner
from utils.corpus import shards
from utils.corpus import stages
from utils.data import input_pipeline
from utils.data import record_layout


@pytest.fixture(scope="module")
def written(tmp_path_factory):
  return corpus_data.write_inputs(str(tmp_path_factory.mktemp("inputs")))


@pytest.fixture(scope="module")
def reference(written, tmp_path_factory):
  """(output directory, summary) of one build: one task, one worker."""
  out = tmp_path_factory.mktemp("reference")
  config = corpus_data.make_config(written["inputs"], out)
  return str(out), runner.run(config)


def build(written, out, **overrides):
  return runner.run(corpus_data.make_config(written["inputs"], out, **overrides))


def entry_times(out):
  """{entry file: mtime in ns} of the manifest."""
  root = os.path.join(str(out), "manifest")
  return {os.path.relpath(os.path.join(d, n), root): os.stat(os.path.join(d, n)).st_mtime_ns
          for d, _, names in os.walk(root) for n in names}


def test_the_text_holds_every_document_once_split_by_document(written, reference):
  out, summary = reference
  assert (summary["documents"], summary["duplicates"], summary["bad_documents"]) == (93, 3, 1)
  # Documents compared as their text: where a sentence ends is the segmenter's business.
  expected = {" ".join(doc) for doc in written["documents"]}
  seen = []
  for split in ("train", "eval"):
    for j in range(corpus_data.NUM_SHARDS):
      path = os.path.join(out, "text", split, stages.shard_file(j, ".txt"))
      for doc in corpus_data.read_text_documents(path):
        key = shards.document_digest(doc)
        assert shards.bucket_of(key, corpus_data.NUM_SHARDS) == j
        assert shards.is_held_out(key, corpus_data.EVAL_FRACTION) == (split == "eval")
        seen.append(" ".join(doc))
  assert len(seen) == len(expected) == 90 and set(seen) == expected
  assert summary["train_documents"] + summary["eval_documents"] == 90
  assert 5 <= summary["eval_documents"] <= 35
  entry = manifest.read_entry(out, "extract", stages.input_id(written["inputs"][0]) + "-00000")
  assert entry["counts"]["bad_documents"] == 1 and entry["counts"]["documents"] == 31


def test_the_input_pipeline_reads_every_record(reference):
  out, summary = reference
  vocab_size = len(open(os.path.join(out, "vocab.txt")).read().split())
  assert vocab_size == corpus_data.VOCAB_SIZE
  for phase in corpus_data.PHASES:
    for split in ("train", "eval"):
      files = input_pipeline.resolve_input_files(input_files_dir=os.path.join(
          out, config_lib.phase_name(phase), split))
      layout = record_layout.unpacked(phase.max_seq_length, phase.max_predictions_per_seq)
      input_fn = input_pipeline.input_fn_builder(
          input_pipeline.InputPlan(files, layout, is_training=False, vocab_size=vocab_size), 16)
      count = 0
      with tf.Graph().as_default():
        batch = tf.compat.v1.data.make_one_shot_iterator(input_fn({})).get_next()
        with tf.compat.v1.Session() as session:
          while True:
            try:
              values = session.run(batch)
            except tf.errors.OutOfRangeError:
              break
            count += len(values["input_ids"])
            assert values["input_ids"].shape[1] == phase.max_seq_length
            assert np.all(values["input_ids"][:, 0] == 2)  # [CLS]
      key = "%s %s" % (config_lib.phase_name(phase), split)
      assert count == summary["records"][key] > 0, key


def test_tasks_and_workers_do_not_change_the_bytes(written, reference, tmp_path):
  expected = corpus_data.output_files(reference[0])
  assert any(name.endswith(".tfrecord") for name in expected)
  build(written, tmp_path / "workers", num_workers=2)
  assert corpus_data.output_files(tmp_path / "workers") == expected
  # Two tasks, run one after the other stage by stage (as a Slurm array job per stage).
  for stage in config_lib.STAGES:
    if stage == "pack":
      continue
    for task in (0, 1):
      build(written, tmp_path / "tasks", stage=stage, task_index=task, num_tasks=2)
  assert corpus_data.output_files(tmp_path / "tasks") == expected


def test_a_dump_in_shares_keeps_the_first_copy_and_the_same_bytes_for_any_workers_or_tasks(
    tmp_path, monkeypatch):
  dump = corpus_data.write_dump(str(tmp_path / "inputs" / "dump.xml"))
  monkeypatch.setattr(stages, "DUMP_SHARE_BYTES", os.path.getsize(dump["path"]) // 3 + 1)
  config = corpus_data.make_config([dump["path"]], tmp_path / "one")
  assert len(stages.plan(config)["extract"]) == 3
  summary = runner.run(config)
  assert (summary["documents"], summary["duplicates"]) == (34, dump["duplicates"])
  assert summary["input_bytes"] == os.path.getsize(dump["path"])  # the shares' parts add up
  texts = []
  for split in ("train", "eval"):
    for j in range(corpus_data.NUM_SHARDS):
      path = os.path.join(str(tmp_path / "one"), "text", split, stages.shard_file(j, ".txt"))
      if os.path.exists(path):
        texts += [" ".join(doc) for doc in corpus_data.read_text_documents(path)]
  assert sorted(unicodedata.normalize("NFC", text) for text in texts) == sorted(
      " ".join(doc) for doc in dump["documents"])
  # The first copy in the order of the units is kept: article 8 is in share 2 (8 mod 3), its
  # decomposed copy (article 33) in share 0.
  assert any("cafe\u0301." in text for text in texts)
  assert not any("café" in text for text in texts)
  expected = corpus_data.output_files(tmp_path / "one")
  runner.run(corpus_data.make_config([dump["path"]], tmp_path / "workers", num_workers=2))
  assert corpus_data.output_files(tmp_path / "workers") == expected
  for stage in config_lib.STAGES:
    if stage == "pack":
      continue
    for task in (0, 1):
      runner.run(corpus_data.make_config([dump["path"]], tmp_path / "tasks", stage=stage,
                                         task_index=task, num_tasks=2))
  assert corpus_data.output_files(tmp_path / "tasks") == expected


def test_a_rerun_redoes_nothing_and_a_changed_setting_only_its_stages(written, tmp_path):
  out = tmp_path / "out"
  build(written, out)
  first = entry_times(out)
  summary = build(written, out)
  assert entry_times(out) == first
  assert summary["units_done_earlier"] == len(first) and summary["bytes_read"] == 0
  # Another second phase: only its records (and the check) are done again; the old phase's go.
  phases = (config_lib.Phase(32, 5), config_lib.Phase(48, 8))
  build(written, out, phases=phases)
  second = entry_times(out)
  redone = sorted(name for name in second if first.get(name) != second[name])
  assert redone == ["check/check.json"] + sorted(
      os.path.join("records", "seq48-%s-shard-%05d.json" % (split, j))
      for split in ("train", "eval") for j in range(3))
  assert not os.path.exists(str(out / "seq64")) and os.path.isdir(str(out / "seq48"))
  assert not [name for name in second if "seq64" in name]
  # Another held-out fraction: the shards and all after them, not the extraction.
  build(written, out, phases=phases, eval_fraction=0.3)
  third = entry_times(out)
  assert sorted({name.split(os.sep)[0] for name in third if second[name] != third[name]}) == [
      "check", "records", "shard", "vocab"]


def test_a_bad_input_stops_its_unit_and_the_tasks_waiting_for_it(written, tmp_path):
  out = tmp_path / "out"
  with pytest.raises(stages.DataError) as caught:
    build(written, out, skip_bad_documents=False, num_tasks=2, task_index=0, stage="extract")
  assert str(caught.value) == "%s: line 2 (byte 18): not UTF-8 text" % written["bad_file"]
  name = stages.input_id(written["inputs"][0]) + "-00000"
  assert manifest.read_entry(str(out), "extract", name)["status"] == "failed"
  # Task 1 does its extract units, then finds task 0's unit failed instead of waiting.
  with pytest.raises(manifest.StageIncomplete, match="extract: unit %s of task 0 failed: .*"
                     "doc-bad.txt: line 2" % name):
    build(written, out, skip_bad_documents=False, num_tasks=2, task_index=1,
          barrier_timeout_secs=600)


def test_a_single_stage_needs_the_stages_before_it(written, tmp_path):
  with pytest.raises(errors.UsageError, match=(
      r"^--stage=records: the stage extract is not done with these settings: 3 units missing "
      r"\(.* \(task 0\), .* \(task 1\), .* \(task 0\)\); run --stage=extract first")):
    build(written, tmp_path / "out", stage="records", num_tasks=2)


def test_the_summary_line(written, reference):
  line = runner.summary_line(dict(reference[1], seconds=2.0, bytes_read=4e6,
                                  units_done_earlier=0))
  assert line.startswith("prepare_corpus: 93 documents read (")
  assert ("3 duplicates dropped, 1 bad documents skipped; 3 shards of %d training and %d "
          "held-out documents; records: seq32 train " % (
              reference[1]["train_documents"], reference[1]["eval_documents"])) in line
  assert line.endswith("; 2.0 s, 2.00 MB/s of input")
  assert runner.summary_line(dict(reference[1], seconds=0.5, bytes_read=0,
                                  units_done_earlier=20)).endswith("; 0.5 s, 20 units done "
                                                                   "earlier")


def test_few_inputs_are_named_with_their_formats():
  formats = collections.OrderedDict([("/d/enwiki-1.xml-p1p30.bz2", "wikidump"),
                                     ("/d/books", "directory")])
  assert runner.formats_summary(formats) == ("enwiki-1.xml-p1p30.bz2 as wikidump, books as "
                                             "directory")
  line = runner.summary_line(dict(formats=formats, records={}, shards=1, seconds=1.0,
                                  bytes_read=0, units_done_earlier=0))
  assert "(0.0 MB: enwiki-1.xml-p1p30.bz2 as wikidump, books as directory)" in line


def test_many_inputs_are_counted_by_format_and_the_rare_ones_named():
  parts = ["/d/enwiki-pages-articles%d.xml-p%dp%d.bz2" % (i, 10 * i, 10 * i + 9)
           for i in range(1, 63)]
  formats = collections.OrderedDict([(path, "wikidump") for path in parts[:30]] +
                                    [("/d/notes.txt", "documents_per_line")] +
                                    [(path, "wikidump") for path in parts[30:]])
  summary = runner.formats_summary(formats)
  assert summary == "63 inputs: 62 wikidump, 1 documents_per_line (notes.txt)"
  line = runner.summary_line(dict(formats=formats, records={}, shards=1, seconds=1.0,
                                  bytes_read=0, units_done_earlier=0))
  assert "(0.0 MB: 63 inputs: 62 wikidump, 1 documents_per_line (notes.txt))" in line
  assert "enwiki" not in line
  # Two inputs of the same base name in different folders are two inputs.
  assert runner.formats_summary(collections.OrderedDict(
      [("/a/x.txt", "documents_per_line"), ("/b/x.txt", "documents_per_line"),
       ("/c/y", "directory"), ("/c/z", "directory")])) == (
           "4 inputs: 2 documents_per_line (x.txt, x.txt), 2 directory (y, z)")
