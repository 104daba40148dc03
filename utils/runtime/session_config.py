"""The `tf.compat.v1.ConfigProto` of the training and evaluation sessions.

  config = session_config.build_session_config(
      use_horovod=True, local_rank=hvd_utils.comm_local_rank(), use_xla=FLAGS.use_xla,
      amp=FLAGS.amp, enable_scoped_allocator=FLAGS.enable_scoped_allocator)
  run_config = tf.estimator.RunConfig(session_config=config, ...)

Scoped allocator: Grappler's scoped-allocator rewrite makes the inputs of the `HorovodAllreduce` ops
of one device share one buffer. Horovod 0.28.1's allreduce kernel allocates its own output, which
the rewritten graph forbids, so with the rewrite every step fails with "Explicit allocate_output
call where input forwarding required" (docs/DECISIONS.md). It is therefore opt-in here
(`enable_scoped_allocator=True`) and the environment variable TF_DISABLE_SCOPED_ALLOCATOR=1 always
turns it off.

oneDNN bf16 rewrite: with the environment variable ONEDNN_BF16_REWRITE=1 the session config turns
on Grappler's `auto_mixed_precision_onednn_bfloat16` rewrite (MatMul / BatchMatMul and the ops
around them converted to bf16 on the CPU). It is the other bf16 mechanism of docs/PRECISION.md, kept
selectable for measurement on CPUs with bf16 units (`bench/throughput.py --onednn_bf16_rewrite`);
`--bf16` itself builds the bf16 graph and does not need it.
"""

from absl import logging
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

import gpu_environment
from utils.core import checks
from utils.core import env_flags

# Environment variable that turns the scoped allocator off whatever the arguments say.
DISABLE_SCOPED_ALLOCATOR_ENV = "TF_DISABLE_SCOPED_ALLOCATOR"
# Ops the scoped-allocator rewrite applies to.
SCOPED_ALLOCATOR_OPS = ("HorovodAllreduce",)
# Environment variable that turns on the oneDNN bf16 auto-mixed-precision rewrite.
ONEDNN_BF16_REWRITE_ENV = "ONEDNN_BF16_REWRITE"


def scoped_allocator_enabled(use_horovod, enable_scoped_allocator, environ=None):
  """Whether the session config turns on the scoped allocator for `HorovodAllreduce`.

  Args:
    use_horovod: the job runs under Horovod.
    enable_scoped_allocator: the caller asks for it (`--enable_scoped_allocator`).
    environ: environment mapping; `os.environ` when None.

  Returns:
    True under Horovod when asked for and TF_DISABLE_SCOPED_ALLOCATOR is not true.

  Raises:
    ValueError: for a TF_DISABLE_SCOPED_ALLOCATOR value that is not a boolean.
  """
  disabled = env_flags.env_flag(DISABLE_SCOPED_ALLOCATOR_ENV, environ)
  return bool(use_horovod) and bool(enable_scoped_allocator) and not disabled


def build_session_config(use_horovod=False, local_rank=0, enable_scoped_allocator=False,
                         use_xla=False, amp=False, intra_op_threads=0, inter_op_threads=0,
                         environ=None):
  """Builds the session configuration.

  Args:
    use_horovod: the job runs under Horovod (one process per device).
    local_rank: the process's rank on its node; pins the process to that GPU when there are GPUs.
    enable_scoped_allocator: turn on the scoped allocator for `HorovodAllreduce` (under Horovod,
      unless TF_DISABLE_SCOPED_ALLOCATOR is true). See the module docstring before using it.
    use_xla: XLA JIT compilation of the whole graph (`global_jit_level` ON_1).
    amp: automatic mixed precision graph rewrite (`auto_mixed_precision` ON); only GPUs use it
      (`gpu_environment.amp_takes_effect`).
    intra_op_threads: threads inside one op; 0 lets TensorFlow choose.
    inter_op_threads: ops run in parallel; 0 lets TensorFlow choose.
    environ: environment mapping; `os.environ` when None (TF_DISABLE_SCOPED_ALLOCATOR,
      ONEDNN_BF16_REWRITE).

  Returns:
    A `tf.compat.v1.ConfigProto`.

  Raises:
    ValueError: for negative thread counts or a non-boolean TF_DISABLE_SCOPED_ALLOCATOR or
      ONEDNN_BF16_REWRITE.
  """
  for name, value in (("intra_op_threads", intra_op_threads),
                      ("inter_op_threads", inter_op_threads)):
    checks.check_integer(name, value, 0, note=" (0 lets TensorFlow choose)")
  config = tf.compat.v1.ConfigProto(allow_soft_placement=True,
                                    intra_op_parallelism_threads=intra_op_threads,
                                    inter_op_parallelism_threads=inter_op_threads)
  rewrite_options = config.graph_options.rewrite_options
  # One pass of the Grappler optimizers: the Estimator's own default session config does the same.
  rewrite_options.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
  if scoped_allocator_enabled(use_horovod, enable_scoped_allocator, environ):
    rewrite_options.scoped_allocator_optimization = rewriter_config_pb2.RewriterConfig.ON
    rewrite_options.scoped_allocator_opts.enable_op.extend(SCOPED_ALLOCATOR_OPS)
    logging.warning("scoped allocator for %s is on; if a step fails with \"Explicit "
                    "allocate_output call where input forwarding required\", this Horovod's "
                    "allreduce kernel does not support it: set %s=1",
                    ", ".join(SCOPED_ALLOCATOR_OPS), DISABLE_SCOPED_ALLOCATOR_ENV)
  if use_xla:
    config.graph_options.optimizer_options.global_jit_level = tf.compat.v1.OptimizerOptions.ON_1
  if amp:
    rewrite_options.auto_mixed_precision = rewriter_config_pb2.RewriterConfig.ON
  if env_flags.env_flag(ONEDNN_BF16_REWRITE_ENV, environ):
    rewrite_options.auto_mixed_precision_onednn_bfloat16 = rewriter_config_pb2.RewriterConfig.ON
    logging.info("%s: the oneDNN bf16 auto-mixed-precision rewrite is on", ONEDNN_BF16_REWRITE_ENV)
  if use_horovod:
    gpu_environment.pin_to_local_gpu(config, local_rank)
  return config
