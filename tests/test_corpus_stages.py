"""utils/corpus/stages.py: the plan of a build (its units and their chained settings hashes, which
settings redo which stages), the units of a directory and of a dump, each unit's outputs. Whole
builds: test_corpus_runner.py."""

import os

import pytest

from tests import corpus_data
from utils.corpus import bad_input
from utils.corpus import config as config_lib
from utils.corpus import stages


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
  return corpus_data.write_inputs(str(tmp_path_factory.mktemp("inputs")))["inputs"]


def hashes(config):
  """{(stage, unit name): settings hash} of a plan."""
  return {(u.stage, u.name): u.settings_hash
          for units in stages.plan(config).values() for u in units}


def changed_stages(before, after):
  """The stages with a unit whose hash changed or that is new or gone."""
  return sorted({key[0] for key in set(before) | set(after) if before.get(key) != after.get(key)})


def test_the_plan_of_a_build(inputs, tmp_path):
  config = corpus_data.make_config(inputs, tmp_path)
  plan = stages.plan(config)
  assert list(plan) == ["extract", "shard", "vocab", "records", "check"]
  assert [u.name for u in plan["extract"]] == [
      stages.input_id(inputs[0]) + "-00000", stages.input_id(inputs[1]),
      stages.input_id(inputs[2])]
  assert [u.spec["fmt"] for u in plan["extract"]] == [
      "directory", "documents_per_line", "sentences_per_line"]
  assert [u.name for u in plan["shard"]] == ["shard-00000", "shard-00001", "shard-00002"]
  assert [u.name for u in plan["records"]][:4] == [
      "seq32-train-shard-00000", "seq32-train-shard-00001", "seq32-train-shard-00002",
      "seq32-eval-shard-00000"]
  assert len(plan["records"]) == 2 * 2 * 3
  for units in plan.values():  # each unit's index is its place: task i takes i mod n
    assert [u.index for u in units] == list(range(len(units)))
  # The same settings, the same hashes; the workers and tasks are not part of them.
  assert hashes(config) == hashes(corpus_data.make_config(inputs, tmp_path, num_workers=2,
                                                          num_tasks=2, task_index=1))


@pytest.mark.parametrize("overrides, redone", [
    (dict(phases=(config_lib.Phase(32, 5), config_lib.Phase(48, 8))), ["check", "records"]),
    (dict(dupe_factor=3), ["check", "records"]),
    (dict(do_whole_word_mask=True), ["check", "records"]),
    (dict(vocab_size=350), ["check", "records", "vocab"]),
    (dict(eval_fraction=0.1), ["check", "records", "shard", "vocab"]),
    (dict(num_shards=4), ["check", "extract", "records", "shard", "vocab"]),
    (dict(skip_bad_documents=False), ["check", "extract", "records", "shard", "vocab"]),
    (dict(pack=True), ["check", "pack"]),
])
def test_a_changed_setting_changes_the_stages_it_affects_and_those_after(inputs, tmp_path,
                                                                          overrides, redone):
  before = hashes(corpus_data.make_config(inputs, tmp_path))
  after = hashes(corpus_data.make_config(inputs, tmp_path, **overrides))
  assert changed_stages(before, after) == redone


def test_only_the_changed_phase_has_new_record_units(inputs, tmp_path):
  before = hashes(corpus_data.make_config(inputs, tmp_path))
  after = hashes(corpus_data.make_config(
      inputs, tmp_path, phases=(config_lib.Phase(32, 5), config_lib.Phase(48, 8))))
  changed = {name for stage, name in set(before) | set(after)
             if stage == "records" and before.get((stage, name)) != after.get((stage, name))}
  assert changed and all(name.startswith(("seq48-", "seq64-")) for name in changed)


def test_a_changed_input_file_redoes_its_extract_unit_only(tmp_path):
  written = corpus_data.write_inputs(str(tmp_path / "inputs"))
  config = corpus_data.make_config(written["inputs"], tmp_path / "out")
  before = hashes(config)
  with open(written["inputs"][1], "a") as writer:
    writer.write("One more document.\n")
  after = hashes(config)
  changed = sorted(key for key in after if before[key] != after[key])
  assert [key for key in changed if key[0] == "extract"] == [
      ("extract", stages.input_id(written["inputs"][1]))]


def test_a_directory_is_read_in_groups_of_files(inputs, tmp_path, monkeypatch):
  files = [os.path.getsize(f) for f in stages.documents.directory_files(inputs[0])]
  monkeypatch.setattr(stages, "GROUP_BYTES", sum(files) // 3)
  units = stages.plan(corpus_data.make_config(inputs[:1], tmp_path))["extract"]
  assert [u.name for u in units] == [stages.input_id(inputs[0]) + "-%05d" % k for k in range(3)]
  grouped = [f for u in units for f in u.spec["files"]]
  assert grouped == stages.documents.directory_files(inputs[0])
  assert all(u.settings["files"] for u in units)


def test_a_dump_is_cleaned_in_shares_as_many_as_its_size_asks(tmp_path, monkeypatch):
  dump = corpus_data.write_dump(str(tmp_path / "inputs" / "dump.xml"))["path"]
  size = os.path.getsize(dump)
  monkeypatch.setattr(stages, "DUMP_SHARE_BYTES", size // 3 + 1)
  other = corpus_data.write_inputs(str(tmp_path / "inputs"))["inputs"][1]
  config = corpus_data.make_config([other, dump], tmp_path / "out")
  plan = stages.plan(config)
  names = [stages.input_id(dump) + "-%05d" % k for k in range(3)]
  assert [u.name for u in plan["extract"]] == [stages.input_id(other)] + names
  assert [u.index for u in plan["extract"]] == [0, 1, 2, 3]
  assert [u.spec["share"] for u in plan["extract"][1:]] == [[0, 3], [1, 3], [2, 3]]
  assert [u.settings["share"] for u in plan["extract"][1:]] == [[0, 3], [1, 3], [2, 3]]
  # The shard stage reads the buckets of the units in their order: the first copy is kept.
  assert plan["shard"][0].spec["extract"] == [stages.input_id(other)] + names
  # The shares come from the dump's size alone: not from the workers or tasks.
  assert hashes(config) == hashes(corpus_data.make_config(
      [other, dump], tmp_path / "out", num_workers=3, num_tasks=2, task_index=1))
  # A .bz2 dump counts as the XML it holds, about BZ2_XML_RATIO times its size.
  monkeypatch.setattr(stages, "DUMP_SHARE_BYTES", size)
  assert stages.dump_shares(dump) == 1
  compressed = str(tmp_path / "dump.xml.bz2")
  with open(compressed, "wb") as writer:
    writer.write(b"x" * (size // stages.BZ2_XML_RATIO + 1))
  assert stages.dump_shares(compressed) == 2
  monkeypatch.setattr(stages, "DUMP_SHARE_BYTES", 1)
  assert stages.dump_shares(dump) == stages.MAX_DUMP_SHARES


def test_a_missing_input_is_named(tmp_path):
  with pytest.raises(bad_input.BadInput, match="nothing.txt: the input: no such file"):
    stages.plan(corpus_data.make_config([str(tmp_path / "nothing.txt")], tmp_path))
  with pytest.raises(bad_input.BadInput, match=r"nothing.txt: the input: no such file \(format "
                                               r"documents_per_line\)"):
    stages.plan(corpus_data.make_config([str(tmp_path / "nothing.txt")], tmp_path,
                                        input_formats=("documents_per_line",)))


def test_each_units_outputs(inputs, tmp_path):
  config = corpus_data.make_config(inputs, tmp_path, pack=True)
  plan = stages.plan(config)
  first = plan["extract"][0]
  assert stages.unit_outputs(config, first) == [
      os.path.join("extracted", first.name, "bucket-%05d.txt" % j) for j in range(3)]
  assert stages.unit_outputs(config, plan["shard"][1]) == [
      os.path.join("text", "train", "shard-00001.txt"),
      os.path.join("text", "eval", "shard-00001.txt")]
  assert stages.unit_outputs(config, plan["vocab"][0]) == ["vocab.txt"]
  assert stages.unit_outputs(config, plan["records"][4]) == [
      os.path.join("seq32", "eval", "shard-00001.tfrecord")]
  assert stages.unit_outputs(config, plan["pack"][4]) == [
      os.path.join("seq32_packed", "eval", "shard-00001.tfrecord")]
  assert stages.unit_outputs(config, plan["check"][0]) == []
  given = corpus_data.make_config(inputs, tmp_path, vocab_file=__file__)
  assert stages.unit_outputs(given, plan["vocab"][0]) == []
  assert stages.vocab_path(given) == __file__
  assert stages.vocab_path(config) == os.path.join(str(tmp_path), "vocab.txt")


def test_input_ids_are_readable_and_tell_paths_apart():
  assert stages.input_id("/data/wiki/enwiki.xml.bz2").startswith("enwiki.xml.bz2-")
  assert stages.input_id("/data/my books/").startswith("my_books-")
  assert stages.input_id("/a/books") != stages.input_id("/b/books")
  assert stages.shard_file(7, ".txt") == "shard-00007.txt"
