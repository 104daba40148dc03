"""utils/runtime/workers.py without Horovod: each rank's output directory, its lock and whether it
saves checkpoints; the intra-op threads a node's workers share; the session config they get."""

import json
import os

import pytest
from tensorflow.core.protobuf import rewriter_config_pb2

from utils.core import errors
from utils.runtime import output_lock
from utils.runtime import workers as workers_lib

RewriterConfig = rewriter_config_pb2.RewriterConfig


def _workers(rank=0, local_rank=0, local_size=1, hvd=None):
  return workers_lib.Workers(hvd=hvd, rank=rank, size=max(rank + 1, local_size),
                             local_rank=local_rank, local_size=local_size)


@pytest.fixture
def locks(monkeypatch):
  """The output-directory locks the test's calls take, released when it ends."""
  taken = []
  lock_output_dir = output_lock.lock_output_dir

  def recording(directory, command=None):
    lock = lock_output_dir(directory, command)
    taken.append(lock)
    return lock

  monkeypatch.setattr(output_lock, "lock_output_dir", recording)
  yield taken
  for lock in taken:
    lock.release()


def _lock_owner_pid(directory):
  with open(os.path.join(directory, output_lock.LOCK_FILE_NAME)) as f:
    return json.load(f)["pid"]


def test_rank_0_creates_and_locks_the_output_dir_and_saves(tmp_path, locks):
  out = str(tmp_path / "a" / "out")
  directory, saves, lock = workers_lib.worker_output_dir(_workers(), out, False, False)
  assert (directory, saves) == (out, True)
  assert os.path.isdir(out)
  assert [lock.directory for lock in locks] == [out] and locks[0].held
  assert lock is locks[0]  # returned: the job releases it on an exit at once (stop signals)
  assert _lock_owner_pid(out) == os.getpid()
  # One job per --output_dir: a second taker of the same directory is refused.
  with pytest.raises(errors.UsageError, match="is in use by another job"):
    workers_lib.worker_output_dir(_workers(), out, False, False)


@pytest.mark.parametrize("checkpoint_all_workers", [False, True])
def test_other_ranks_write_their_own_unlocked_directory(tmp_path, locks, checkpoint_all_workers):
  out = str(tmp_path / "out")
  directory, saves, lock = workers_lib.worker_output_dir(
      _workers(rank=2, local_rank=1, local_size=2), out, False, checkpoint_all_workers)
  assert directory == os.path.join(out, "worker_2")
  assert saves is checkpoint_all_workers
  assert locks == [] and lock is None
  # Only a worker that saves checkpoints gets its directory made: the others left an empty
  # worker_<rank>/ behind after every Horovod run.
  assert os.listdir(out) == (["worker_2"] if checkpoint_all_workers else [])
  if checkpoint_all_workers:
    assert os.listdir(directory) == []


def test_node_local_rank_0_of_each_node_writes_and_saves_in_the_output_dir(tmp_path, locks):
  out = str(tmp_path / "out")
  workers = _workers(rank=3, local_rank=0, local_size=3)
  assert workers_lib.worker_output_dir(workers, out, True, False) == (out, True, locks[0])
  assert [lock.directory for lock in locks] == [out]
  second = _workers(rank=4, local_rank=1, local_size=3)
  assert workers_lib.worker_output_dir(second, out, True, False) == (
      os.path.join(out, "worker_4"), False, None)


def test_an_output_dir_that_cannot_be_made_is_a_usage_error(tmp_path, locks):
  (tmp_path / "file").write_text("")
  with pytest.raises(errors.UsageError, match="cannot create the directory.*regular file"):
    workers_lib.worker_output_dir(_workers(), str(tmp_path / "file" / "out"), False, False)
  assert locks == []


@pytest.mark.parametrize("requested,workers_on_node,cpu_count,expected", [
    (0, 3, 12, 4),      # the node's cores shared by its workers
    (0, 5, 12, 2),      # rounded down
    (0, 24, 12, 1),     # at least one
    (0, 4, None, 1),    # core count unknown: one
    (0, 1, 12, 0),      # a single worker: TensorFlow's default
    (6, 4, 12, 6),      # the flag wins
])
def test_threads_per_worker_uses_the_cpu_count_when_cores_are_not_given(
    monkeypatch, requested, workers_on_node, cpu_count, expected):
  monkeypatch.setattr(os, "cpu_count", lambda: cpu_count)
  assert workers_lib.threads_per_worker(requested, workers_on_node) == expected
  assert workers_lib.threads_per_worker(requested, workers_on_node, cores=0) == expected


def test_session_config_shares_the_cores_and_passes_the_flags(monkeypatch):
  monkeypatch.setattr(os, "cpu_count", lambda: 8)
  for name in ("TF_DISABLE_SCOPED_ALLOCATOR", "ONEDNN_BF16_REWRITE"):
    monkeypatch.delenv(name, raising=False)
  config = workers_lib.session_config(_workers(local_size=4), inter_op_threads=3, use_xla=True,
                                      amp=True, enable_scoped_allocator=True)
  assert config.intra_op_parallelism_threads == 2 and config.inter_op_parallelism_threads == 3
  options = config.graph_options.rewrite_options
  assert config.graph_options.optimizer_options.global_jit_level == 1  # ON_1
  assert options.auto_mixed_precision == RewriterConfig.ON
  # Without Horovod there are no allreduces: no scoped allocator even when asked for.
  assert options.scoped_allocator_optimization == RewriterConfig.DEFAULT
  plain = workers_lib.session_config(_workers(local_size=4), intra_op_threads=5)
  assert plain.intra_op_parallelism_threads == 5 and plain.inter_op_parallelism_threads == 0
  assert plain.graph_options.optimizer_options.global_jit_level == 0
  assert plain.graph_options.rewrite_options.auto_mixed_precision == RewriterConfig.DEFAULT
  # A worker with a Horovod module (a stand-in here: nothing is started) asks for the allocator.
  under_horovod = workers_lib.session_config(_workers(local_size=2, hvd=object()),
                                             enable_scoped_allocator=True)
  assert under_horovod.intra_op_parallelism_threads == 4
  assert (under_horovod.graph_options.rewrite_options.scoped_allocator_optimization
          == RewriterConfig.ON)
