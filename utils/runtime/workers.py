"""The workers of a job as one process sees them: Horovod start-up, output directories, threads.

  workers = workers_lib.start_workers(use_horovod)    # environment, Horovod, quiet ranks > 0
  output_dir, saves, lock = workers_lib.worker_output_dir(workers, output_dir, ...)
  config = workers_lib.session_config(workers, ...)   # threads shared by a node's workers

Everything here takes plain arguments; errors in what a user gave are `errors.UsageError`s.
"""

import collections
import os

from absl import logging

import gpu_environment
from utils.core import errors
from utils.runtime import hvd_utils
from utils.runtime import output_lock
from utils.runtime import session_config as session_config_lib

# Horovod cycle time (ms) on machines without a GPU, unless the launch sets one.
CPU_HOROVOD_CYCLE_TIME_MS = 5


Workers = collections.namedtuple("Workers", ["hvd", "rank", "size", "local_rank", "local_size"])
Workers.__doc__ = """The workers of the job as this process sees them.

Fields: hvd, the `horovod.tensorflow` module under Horovod, else None; rank, size, local_rank,
local_size: Horovod's (0, 1, 0, 1 for a single process)."""


def start_workers(use_horovod, environ=None):
  """Prepares the process environment and starts Horovod; ranks > 0 log warnings only.

  Args:
    use_horovod: run under Horovod (--horovod).
    environ: the environment mapping to adjust; `os.environ` when None.

  Returns:
    `Workers`.
  """
  environ = os.environ if environ is None else environ
  # Per-session thread pools: without this, the first device TF creates (XLA-compiled functions
  # create one while the graph is built) fixes a process-wide pool of one thread per core and
  # --intra_op_threads is silently ignored, so workers sharing a node oversubscribe its cores.
  environ.setdefault("TF_OVERRIDE_GLOBAL_THREADPOOL", "1")
  if use_horovod and gpu_environment.local_gpu_count() == 0:
    # Horovod's background thread coordinates the workers every cycle (1 ms by default) even
    # when nothing is pending; on CPU-only nodes that polling takes cycles from the compute
    # threads (docs/PERFORMANCE.md). horovodrun --cycle-time-ms or the variable still decide.
    environ.setdefault("HOROVOD_CYCLE_TIME", str(CPU_HOROVOD_CYCLE_TIME_MS))
  hvd = hvd_utils.hvd_init() if use_horovod else None
  workers = Workers(hvd=hvd, rank=hvd_utils.hvd_rank(), size=hvd_utils.hvd_size(),
                    local_rank=hvd_utils.comm_local_rank(),
                    local_size=hvd_utils.comm_local_size())
  if workers.rank != 0:
    logging.set_verbosity(logging.WARNING)
  return workers


def worker_output_dir(workers, output_dir, node_local_output_dir, checkpoint_all_workers):
  """Creates this worker's output directory (see `hvd_utils.worker_output_dir`; only `output_dir`
  for a worker that saves no checkpoints) and, in the process that writes `output_dir` itself,
  takes the directory's lock (`output_lock`).

  Args:
    workers: `Workers`.
    output_dir: the job's --output_dir.
    node_local_output_dir: output_dir is on a node-local disk.
    checkpoint_all_workers: every worker saves checkpoints.

  Returns:
    (directory, saves_checkpoints, lock): where this worker writes, whether it saves checkpoints,
    and the `output_lock.OutputDirLock` this process took (None when it writes elsewhere).
  """
  directory = hvd_utils.worker_output_dir(output_dir, workers.rank, workers.local_rank,
                                          node_local_output_dir)
  saves = checkpoint_all_workers or hvd_utils.saves_checkpoints(
      workers.rank, workers.local_rank, node_local_output_dir)
  # The directory (a usage error when it cannot be made), then one job per --output_dir: the
  # process that writes --output_dir holds its lock until it exits. A worker that saves nothing
  # writes nothing in its worker_<rank>/ (every Horovod run left it empty): only --output_dir is
  # made for it; TensorFlow creates the directory should it write there after all.
  lock = None
  try:
    output_lock.make_directory(directory if saves or directory == output_dir else output_dir)
    if directory == output_dir:
      lock = output_lock.lock_output_dir(output_dir)
  except ValueError as e:
    raise errors.UsageError(str(e))
  return directory, saves, lock


def threads_per_worker(requested, workers_on_node, cores=None):
  """Intra-op threads for one worker: the flag's value, else the node's cores shared by its workers.

  Args:
    requested: --intra_op_threads (0: choose).
    workers_on_node: Horovod local size (1 without Horovod).
    cores: cores of the node; os.cpu_count() when None.

  Returns:
    the thread count for the session config (0 lets TensorFlow use every core).
  """
  if requested > 0 or workers_on_node <= 1:
    return requested
  return max(1, (cores or os.cpu_count() or 1) // workers_on_node)


def session_config(workers, intra_op_threads=0, inter_op_threads=0, use_xla=False, amp=False,
                   enable_scoped_allocator=False):
  """The session config of this worker (see `session_config.build_session_config`).

  Args:
    workers: `Workers`.
    intra_op_threads: --intra_op_threads (0: the node's cores shared by its workers).
    inter_op_threads, use_xla, amp, enable_scoped_allocator: the flags of the same names.

  Returns:
    `tf.compat.v1.ConfigProto`.
  """
  threads = threads_per_worker(intra_op_threads, workers.local_size)
  if threads != intra_op_threads:
    logging.info("%d workers on this node: %d intra-op threads each (set --intra_op_threads to "
                 "override)", workers.local_size, threads)
  return session_config_lib.build_session_config(
      use_horovod=workers.hvd is not None, local_rank=workers.local_rank,
      enable_scoped_allocator=enable_scoped_allocator, use_xla=use_xla, amp=amp,
      intra_op_threads=threads, inter_op_threads=inter_op_threads)
