"""utils/corpus/manifest.py: settings hashes, files published whole, a unit's entry and when it is
done, the leftovers of a killed unit, the wait for other tasks' units, stale files."""

import collections
import hashlib
import os
import threading
import time

import pytest

from utils.corpus import manifest

Unit = collections.namedtuple("Unit", ["stage", "name", "index", "settings_hash", "settings"])


def unit(name, index=0, settings=None, stage="shard"):
  settings = settings or dict(name=name)
  return Unit(stage, name, index, manifest.settings_hash(settings), settings)


def write_temp(out, relative, data):
  path = os.path.join(str(out), relative)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(manifest.temp_name(path), "wb") as writer:
    writer.write(data)
  return path


def test_settings_hash_is_stable_and_independent_of_key_order():
  a = manifest.settings_hash(dict(x=1, y=[1, "b"], z=dict(p=0.5)))
  assert a == manifest.settings_hash(dict(z=dict(p=0.5), y=[1, "b"], x=1))
  assert a != manifest.settings_hash(dict(x=1, y=[1, "b"], z=dict(p=0.25)))
  assert len(a) == 64 and int(a, 16) >= 0


def test_a_published_unit_is_done_until_its_settings_or_outputs_change(tmp_path):
  out = str(tmp_path)
  u = unit("shard-00001")
  path = write_temp(out, "text/train/shard-00001.txt", b"Some text.\n\n")
  entry = manifest.publish_unit(out, u, ["text/train/shard-00001.txt"], dict(documents=1),
                                seconds=0.5)
  assert not os.path.exists(manifest.temp_name(path)) and open(path, "rb").read() == (
      b"Some text.\n\n")
  assert entry["outputs"] == [dict(path="text/train/shard-00001.txt", size=12,
                                   sha256=hashlib.sha256(b"Some text.\n\n").hexdigest())]
  assert manifest.read_entry(out, "shard", "shard-00001") == entry
  assert os.listdir(os.path.join(out, "manifest", "shard")) == ["shard-00001.json"]
  assert entry["counts"] == dict(documents=1) and entry["status"] == "done"
  assert manifest.is_done(out, entry, u.settings_hash)
  assert not manifest.is_done(out, entry, unit("shard-00001", settings=dict(x=2)).settings_hash)
  with open(path, "ab") as writer:  # another size
    writer.write(b"more")
  assert not manifest.is_done(out, entry, u.settings_hash)
  os.remove(path)
  assert not manifest.is_done(out, entry, u.settings_hash)
  assert not manifest.is_done(out, None, u.settings_hash)
  assert manifest.read_entry(out, "shard", "missing") is None


def test_a_failed_unit_is_not_done(tmp_path):
  out = str(tmp_path)
  u = unit("shard-00002")
  manifest.record_failure(out, u, ValueError("in.txt: line 3: not UTF-8 text"), task=1)
  entry = manifest.read_entry(out, "shard", "shard-00002")
  assert (entry["status"], entry["error"], entry["task"]) == (
      "failed", "in.txt: line 3: not UTF-8 text", 1)
  assert not manifest.is_done(out, entry, u.settings_hash)


def test_leftovers_of_a_killed_unit_are_removed_before_it_is_done_again(tmp_path):
  out = str(tmp_path)
  u = unit("seq128-train-shard-00000", stage="records")
  old = write_temp(out, "seq128/train/old-name.tfrecord", b"old")
  manifest.publish_unit(out, u, ["seq128/train/old-name.tfrecord"], {})
  current = write_temp(out, "seq128/train/shard-00000.tfrecord", b"half written")
  entry_temp = manifest.temp_name(manifest.entry_path(out, u.stage, u.name))
  open(entry_temp, "w").close()
  manifest.remove_unit_leftovers(out, u, ["seq128/train/shard-00000.tfrecord"])
  for path in (old, manifest.temp_name(current), entry_temp,
               manifest.entry_path(out, u.stage, u.name)):
    assert not os.path.exists(path), path


def test_the_wait_ends_when_every_unit_is_done(tmp_path):
  out = str(tmp_path)
  units = [unit("shard-%05d" % j, j) for j in range(3)]
  for u in units[:2]:
    manifest.publish_unit(out, u, [], {})

  def finish_later():
    time.sleep(0.3)
    manifest.publish_unit(out, units[2], [], {})

  thread = threading.Thread(target=finish_later)
  thread.start()
  start = time.time()
  manifest.wait_for_units(out, "shard", units, 2, timeout_secs=30, poll_secs=0.05)
  thread.join()
  assert 0.2 < time.time() - start < 10


def test_the_wait_names_the_missing_units_and_their_tasks_when_it_times_out(tmp_path):
  out = str(tmp_path)
  units = [unit("shard-%05d" % j, j) for j in range(14)]
  manifest.publish_unit(out, units[0], [], {})
  # A failure of other settings (an earlier run's) does not count.
  manifest.record_failure(out, unit("shard-00001", 1, settings=dict(old=1)), "old error")
  with pytest.raises(manifest.StageIncomplete) as caught:
    manifest.wait_for_units(out, "shard", units, 3, timeout_secs=0.2, poll_secs=0.05)
  assert str(caught.value) == (
      "shard: after 0 s, 13 units are not done: shard-00001 (task 1), shard-00002 (task 2), "
      "shard-00003 (task 0), shard-00004 (task 1), shard-00005 (task 2), shard-00006 (task 0), "
      "shard-00007 (task 1), shard-00008 (task 2), shard-00009 (task 0), shard-00010 (task 1) "
      "and 3 more (is every task running? a rerun does only what is missing)")


def test_the_wait_stops_at_once_when_a_unit_failed(tmp_path):
  out = str(tmp_path)
  units = [unit("shard-%05d" % j, j) for j in range(4)]
  manifest.record_failure(out, units[3], "books/b.txt: line 2 (byte 9): not UTF-8 text")
  start = time.time()
  with pytest.raises(manifest.StageIncomplete,
                     match=r"^shard: unit shard-00003 of task 1 failed: books/b.txt: line 2 "
                           r"\(byte 9\): not UTF-8 text$"):
    manifest.wait_for_units(out, "shard", units, 2, timeout_secs=60, poll_secs=0.05)
  assert time.time() - start < 5


def test_stale_files_are_removed_and_the_kept_ones_stay(tmp_path):
  out = str(tmp_path)
  for relative in ("text/train/shard-00000.txt", "text/train/shard-00001.txt",
                   "text/eval/shard-00001.txt.tmp", "seq64/train/shard-00000.tfrecord",
                   "manifest/shard/shard-00000.json", "other/kept.txt"):
    write_temp(out, relative, b"x")
    os.rename(manifest.temp_name(os.path.join(out, relative)), os.path.join(out, relative))
  removed = manifest.remove_stale(out, {"text/train/shard-00000.txt",
                                        "manifest/shard/shard-00000.json"},
                                  ["text", "manifest", "seq64", "missing"])
  assert removed == ["seq64/train/shard-00000.tfrecord", "text/eval/shard-00001.txt.tmp",
                     "text/train/shard-00001.txt"]
  assert sorted(os.listdir(out)) == ["manifest", "other", "text"]  # seq64 went, empty
  assert os.listdir(os.path.join(out, "text")) == ["train"]
