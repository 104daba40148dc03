"""Horovod helpers: the only module of the project that imports Horovod.

Horovod is optional. Until `hvd_init()` has run, every helper answers as a single process would
(size 1, rank 0, local rank 0), and none of them imports Horovod, so single-process runs never load
it:

  from utils.runtime import hvd_utils
  hvd = hvd_utils.hvd_init()                 # under mpirun / horovodrun
  if hvd_utils.hvd_rank() == 0: ...
  hooks = [hvd_utils.broadcast_global_variables_hook(0)]

Output directories and checkpoint saving follow docs/DESIGN.md section 7: rank 0 writes to
`output_dir`, every other rank to `output_dir/worker_<rank>`; with `node_local_output_dir`, each
node's local rank 0 also writes to `output_dir` (a node-local disk) and saves checkpoints there.
"""

import collections
import importlib
import os
import socket
import sys

from absl import logging
import psutil
import tensorflow as tf

from utils.core import checks

_HOROVOD_MODULE = "horovod.tensorflow"
# A rank's process: the host it runs on and its pid there.
RankProcess = collections.namedtuple("RankProcess", ["host", "pid"])
# Every rank's `RankProcess`, by rank, once `hvd_init` has gathered them (a job has one Horovod).
_RANK_PROCESSES = []
_tf1 = tf.compat.v1


def _import_horovod():
  """Imports `horovod.tensorflow`; returns None when Horovod is not installed."""
  try:
    return importlib.import_module(_HOROVOD_MODULE)
  except ImportError:
    return None


def gloo_built():
  """True when Horovod is installed with its Gloo controller (what `horovodrun --gloo` needs);
  imports it, as `horovodrun --check-build` does, but in this process (one TensorFlow import, not
  one per framework it checks)."""
  module = _import_horovod()
  return bool(module is not None and module.gloo_built())


def _initialised_horovod():
  """`horovod.tensorflow` when it is already imported and initialised, else None (never imports)."""
  module = sys.modules.get(_HOROVOD_MODULE)
  if module is None:
    return None
  return module if module.is_initialized() else None


def hvd_init():
  """Imports and initialises Horovod.

  Returns:
    The `horovod.tensorflow` module, initialised.

  Raises:
    ImportError: when Horovod is not installed (the message says how to run without it).
  """
  module = _import_horovod()
  if module is None:
    raise ImportError(
        "Horovod is not installed (import of %s failed): install it (see README, `make env`) "
        "or run a single process without --horovod" % _HOROVOD_MODULE)
  module.init()
  if module.size() == 1:
    # Started without a launcher, --horovod trains silently as one worker: say so.
    logging.warning("Horovod runs 1 worker: started without horovodrun / mpirun (or with -np 1)? "
                    "Training as a single worker.")
  else:
    # Who every rank is, gathered while all are alive: once one is gone, Horovod only says that
    # it shut down, and the others name the lost rank from this (`lost_ranks`).
    _RANK_PROCESSES[:] = _gather(module, RankProcess(socket.gethostname(), os.getpid()))
  return module


def _gather(module, value):
  """[`value` of every rank] by rank (a collective), in a graph and session of its own: the
  caller's may be in eager or graph mode, and Horovod's object collectives run their ops in the
  default session in graph mode."""
  with tf.Graph().as_default(), _tf1.Session():
    return [RankProcess(*item) for item in module.allgather_object(tuple(value))]


def horovod_enabled():
  """True when Horovod is imported and initialised (after `hvd_init()`), False otherwise."""
  return _initialised_horovod() is not None


def hvd_size():
  """Number of workers; 1 without an initialised Horovod."""
  module = _initialised_horovod()
  return module.size() if module is not None else 1


def hvd_rank():
  """Global rank of this worker; 0 without an initialised Horovod."""
  module = _initialised_horovod()
  return module.rank() if module is not None else 0


def comm_local_rank():
  """Rank of this worker among the workers of its node (Horovod's local rank); 0 without Horovod."""
  module = _initialised_horovod()
  return module.local_rank() if module is not None else 0


def comm_local_size():
  """Number of workers on this worker's node; 1 without Horovod."""
  module = _initialised_horovod()
  return module.local_size() if module is not None else 1


def broadcast_global_variables_hook(root_rank=0):
  """Hook that copies every global variable from `root_rank` to all workers after initialisation.

  Args:
    root_rank: rank whose values win (0: the chief).

  Returns:
    Horovod's `BroadcastGlobalVariablesHook(root_rank)`, or None without an initialised Horovod.
  """
  module = _initialised_horovod()
  if module is None:
    return None
  return module.BroadcastGlobalVariablesHook(root_rank)


def average_variables_op(variables, name="weight_sync"):
  """Builds an op that replaces each variable by its average over all workers.

  Must be built in the graph that will run it (e.g. in a hook's `begin()`), identically on every
  worker: the allreduces are collectives.

  Args:
    variables: list of variables (usually the trainable ones).
    name: name scope of the new ops.

  Returns:
    A grouped op: for every variable, allreduce (Average) of its value, assigned back.

  Raises:
    RuntimeError: without an initialised Horovod.
    ValueError: for an empty list.
  """
  module = _initialised_horovod()
  if module is None:
    raise RuntimeError("averaging variables across workers needs Horovod: call hvd_init() first")
  if not variables:
    raise ValueError("average_variables_op: no variables to average")
  with _tf1.name_scope(name):
    assigns = [var.assign(module.allreduce(var.read_value(), op=module.Average))
               for var in variables]
    return tf.group(*assigns, name="average_variables")


# What Horovod's collectives raise on the other ranks once one rank has failed or exited.
SHUTDOWN_MESSAGE = "Horovod has been shut down"
# What a Horovod op's Gloo transport raises when the rank at the other end is gone.
LOST_CONNECTION_MESSAGES = ("Connection reset by peer", "Connection closed by peer")
# The source file such an error names (Horovod's copy of Gloo: .../gloo/transport/tcp/pair.cc).
GLOO_TRANSPORT_SOURCE = "gloo/transport/"


def _names_a_horovod_op(text):
  """Whether an op error's `text` comes from a Horovod op: a default op name (HorovodAllreduce_*)
  or, for a collective given its own name, the source path of Horovod's Gloo transport."""
  return "Horovod" in text or GLOO_TRANSPORT_SOURCE in text


def is_shutdown_error(error):
  """Whether `error` (or an error it was raised from) says that a collective of this rank failed
  because another rank had failed or exited first: Horovod's "has been shut down", or a Horovod
  op's Gloo connection to a rank that is gone (its process killed: the op can fail with the
  socket's error before Horovod's background loop has shut down)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    text = getattr(error, "message", None) or str(error)
    if SHUTDOWN_MESSAGE in text or (_names_a_horovod_op(text) and any(
        lost in text for lost in LOST_CONNECTION_MESSAGES)):
      return True
    error = error.__cause__ or error.__context__
  return False


def rank_processes():
  """[`RankProcess`] of every rank, by rank, gathered by `hvd_init` ([] for a single process)."""
  return list(_RANK_PROCESSES)


def own_rank(processes, host=None, pid=None):
  """This process's rank among `processes` (gathered while Horovod ran: it stays known after a
  shutdown, when Horovod no longer answers), else `hvd_rank()`."""
  me = RankProcess(host or socket.gethostname(), pid or os.getpid())
  return processes.index(me) if me in processes else hvd_rank()


def _process_gone(pid):
  """Whether process `pid` of this host has ended (a zombie, not yet reaped, has ended)."""
  try:
    return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return True


def lost_ranks(processes, host, process_gone=_process_gone):
  """The ranks of `host` whose process has ended.

  Args:
    processes: [`RankProcess`] by rank (`rank_processes()`).
    host: this host's name: only its processes can be looked at.
    process_gone: pid -> whether that process has ended.

  Returns:
    [rank], ascending.
  """
  return [rank for rank, process in enumerate(processes)
          if process.host == host and process_gone(process.pid)]


def describe_lost_ranks(processes, host, process_gone=_process_gone):
  """Which rank ended first, for the line a surviving rank ends with once Horovod shut down.

  Args:
    processes, host, process_gone: as `lost_ranks`.

  Returns:
    e.g. "rank 1 (pid 4242 on nodeA) ended", "ranks 2, 3 (on nodeB) may have ended" when no rank
    of this host did (the others' processes cannot be looked at from here), or "another rank
    ended" without the ranks' processes.
  """
  lost = lost_ranks(processes, host, process_gone)
  if lost:
    return "%s %s ended" % ("rank" if len(lost) == 1 else "ranks", ", ".join(
        "%d (pid %d on %s)" % (rank, processes[rank].pid, host) for rank in lost))
  others = collections.OrderedDict()
  for rank, process in enumerate(processes):
    if process.host != host:
      others.setdefault(process.host, []).append(str(rank))
  if not others:
    return "another rank ended"
  return "; ".join("rank%s %s (on %s) may have ended" % (
      "s" if len(ranks) > 1 else "", ", ".join(ranks), other) for other, ranks in others.items())


def broadcast_value(value, root_rank=0):
  """`value` (a picklable object) of rank `root_rank` on every rank; also a barrier.

  Without Horovod (or before `hvd_init()`), returns `value`.
  """
  module = _initialised_horovod()
  if module is None or module.size() == 1:
    return value
  return module.broadcast_object(value, root_rank=root_rank, name="broadcast_value")


def max_over_workers(tensor, name):
  """The element-wise maximum of `tensor` over all workers (a collective: every worker must run
  it, in the same order); `tensor` itself without an initialised Horovod.

  Args:
    tensor: a numeric Tensor, the same shape on every worker.
    name: the collective's name (unique in the graph, the same on every worker).

  Returns:
    a Tensor of `tensor`'s shape and dtype.
  """
  module = _initialised_horovod()
  if module is None:
    return tf.identity(tensor, name=name)
  return module.allreduce(tensor, op=module.Max, name=name)


def worker_output_dir(output_dir, rank, local_rank, node_local_output_dir):
  """The directory this worker writes to (docs/DESIGN.md section 7).

  Args:
    output_dir: the job's `--output_dir`.
    rank: global rank of the worker.
    local_rank: rank of the worker on its node.
    node_local_output_dir: True when `output_dir` is on a node-local disk (one per node).

  Returns:
    `output_dir` for rank 0, and for each node's local rank 0 with `node_local_output_dir`;
    `<output_dir>/worker_<rank>` for every other worker.

  Raises:
    ValueError: for an empty output_dir or negative ranks.
  """
  _check_ranks(rank, local_rank)
  if not output_dir:
    raise ValueError("output_dir must be a non-empty path")
  if rank == 0 or (node_local_output_dir and local_rank == 0):
    return output_dir
  return os.path.join(output_dir, "worker_%d" % rank)


def saves_checkpoints(rank, local_rank, node_local_output_dir):
  """Whether this worker saves checkpoints (docs/DESIGN.md section 7).

  Rank 0 always does. With `node_local_output_dir`, each node's local rank 0 does too, into its own
  node-local `output_dir`, so the next phase finds a checkpoint on every node. Every other worker
  saves none (its weights equal rank 0's).

  Args:
    rank: global rank of the worker.
    local_rank: rank of the worker on its node.
    node_local_output_dir: True when `output_dir` is on a node-local disk.

  Returns:
    bool.
  """
  _check_ranks(rank, local_rank)
  return rank == 0 or bool(node_local_output_dir and local_rank == 0)


def _check_ranks(rank, local_rank):
  """Raises ValueError for ranks that are not non-negative integers."""
  for key, value in (("rank", rank), ("local_rank", local_rank)):
    checks.check_integer(key, value, 0)
