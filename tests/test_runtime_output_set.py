"""utils/runtime/output_set.py: outputs published whole, what an interrupted run left removed.
(The data tools' end-to-end uses: tests/test_create_pretraining_data_failures.py,
tests/test_pack_pretraining_data.py.)"""

from utils.runtime import output_set


def test_start_clean_makes_the_directory_and_removes_only_the_outputs_leftovers(tmp_path):
  out = tmp_path / "new" / "deeper" / "a.tfrecord"
  missing = output_set.missing_directories([str(out)])
  assert missing == [str(tmp_path / "new" / "deeper"), str(tmp_path / "new")]
  output_set.start_clean([str(out)])
  assert (tmp_path / "new" / "deeper").is_dir()
  # An earlier run's output, partial file and pieces go; a neighbour stays.
  for name in ("a.tfrecord", "a.tfrecord.partial", "a.tfrecord.part-00003", "b.tfrecord"):
    (out.parent / name).write_bytes(b"x")
  output_set.start_clean([str(out)])
  assert sorted(p.name for p in out.parent.iterdir()) == ["b.tfrecord"]


def test_remove_empty_directories_keeps_what_holds_files(tmp_path):
  kept, emptied = tmp_path / "kept", tmp_path / "emptied"
  kept.mkdir()
  emptied.mkdir()
  (kept / "user.txt").write_text("mine")
  output_set.remove_empty_directories([str(kept), str(emptied), str(tmp_path / "gone")])
  assert kept.is_dir() and not emptied.exists()


def test_concatenate_joins_the_parts_in_order_and_removes_them(tmp_path):
  parts = []
  for index, data in enumerate((b"first", b"", b"third")):
    part = tmp_path / ("part-%d" % index)
    part.write_bytes(data)
    parts.append(str(part))
  target = tmp_path / output_set.partial_name("out")
  output_set.concatenate(parts, str(target))
  assert target.read_bytes() == b"firstthird"
  assert target.name == "out.partial"
  assert sorted(p.name for p in tmp_path.iterdir()) == ["out.partial"]
