"""Reduced-precision variable storage, the hardware it runs fast on, and device pinning.

Small pieces the model and the training script need for reduced precision and accelerators:

* `get_custom_getter(compute_type)`: a variable-scope custom getter that stores every trainable
  variable in fp32 (the "master" copy the optimizer updates) and hands the model an fp16 or bf16
  cast of it when the model asks for one (the fp16 model does; the bf16 model asks for fp32 and
  casts per product, `modeling.dense_layer`). Checkpoints therefore always hold fp32 values under
  the original names, whatever the compute type.
* `bf16_units(cpuinfo_path)` / `warn_if_bf16_is_emulated(...)`: whether this CPU has bf16 units
  (AVX512-BF16 or AMX-BF16); without them (and without a GPU) TensorFlow emulates bf16, slowly.
* `pin_to_local_gpu(session_config, local_rank)`: makes a process see only the GPU of its local
  rank, the usual one-process-per-GPU Horovod layout. On a machine without GPUs it changes nothing.
"""

import os

from absl import logging
import tensorflow as tf

_tf1 = tf.compat.v1

# The compute types whose models keep fp32 master variables behind the custom getter.
REDUCED_PRECISION_TYPES = (tf.float16, tf.bfloat16)


def float32_variable_storage_getter(getter, name, shape=None, dtype=None, initializer=None,
                                    regularizer=None, trainable=True, *args, **kwargs):
  """Custom getter that creates trainable variables in fp32 and casts them on read.

  Args:
    getter: the underlying variable getter (passed by `tf.compat.v1.variable_scope`).
    name: variable name, e.g. "bert/encoder/layer_0/attention/self/query/kernel".
    shape: variable shape.
    dtype: the dtype the model asked for (fp16 or bf16 inside a reduced-precision model).
    initializer, regularizer, trainable, *args, **kwargs: passed through to `getter`.

  Returns:
    The fp32 variable itself when `dtype` is fp32 or the variable is not trainable; otherwise a
    `tf.cast` of it to `dtype`. The variable stored in the graph (and in checkpoints) is fp32.
  """
  storage_dtype = tf.float32 if trainable else dtype
  variable = getter(name, shape, dtype=storage_dtype, initializer=initializer,
                    regularizer=regularizer, trainable=trainable, *args, **kwargs)
  if trainable and dtype is not None and tf.as_dtype(dtype) != tf.float32:
    return tf.cast(variable, dtype)
  return variable


def get_custom_getter(compute_type):
  """Returns the custom getter a model built in `compute_type` needs, or None.

  Args:
    compute_type: `tf.float32`, `tf.float16` or `tf.bfloat16`.

  Returns:
    `float32_variable_storage_getter` for fp16 or bf16 compute, None for fp32 (no getter needed).
  """
  if tf.as_dtype(compute_type) in REDUCED_PRECISION_TYPES:
    return float32_variable_storage_getter
  if tf.as_dtype(compute_type) == tf.float32:
    return None
  raise ValueError("compute_type must be tf.float32, tf.float16 or tf.bfloat16, got %s"
                   % compute_type)


# The CPU flags (/proc/cpuinfo) of bf16 arithmetic units: AVX512-BF16 (AMD Zen 4 and later, Intel
# Cooper Lake) and AMX-BF16 (Intel Sapphire Rapids and later). oneDNN runs bf16 matmuls on them.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO_PATH = "/proc/cpuinfo"


def cpu_flags(cpuinfo_path=CPUINFO_PATH):
  """The feature flags of the first processor in `cpuinfo_path` (Linux's /proc/cpuinfo format).

  Args:
    cpuinfo_path: the file to read.

  Returns:
    set of flag names (e.g. {"avx2", "avx512_bf16", ...}); None when the file is missing or holds
    no "flags" line (not Linux, or not an x86 CPU), so that "unknown" is not mistaken for "absent".
  """
  if not os.path.exists(cpuinfo_path):
    return None
  with open(cpuinfo_path) as reader:
    for line in reader:
      key, _, value = line.partition(":")
      if key.strip() == "flags":
        return set(value.split())
  return None


def bf16_units(cpuinfo_path=CPUINFO_PATH):
  """The bf16 flags of `BF16_CPU_FLAGS` this CPU has: a sorted list (empty: none), or None when
  the CPU's flags cannot be read."""
  flags = cpu_flags(cpuinfo_path)
  if flags is None:
    return None
  return sorted(flags.intersection(BF16_CPU_FLAGS))


def fastest_cpu_precision(cpuinfo_path=CPUINFO_PATH):
  """The precision that trains fastest on this CPU: "bf16" where it has bf16 units, else "fp32"
  (fp16 on a CPU is emulated and slow; bf16 without bf16 units is no faster than fp32)."""
  return "bf16" if bf16_units(cpuinfo_path) else "fp32"


def bf16_emulated_warning(bf16, cpuinfo_path=CPUINFO_PATH, gpu_count=None):
  """The warning a bf16 run prints when the CPU it computes on has no bf16 units, or None.

  Args:
    bf16: bf16 compute was asked for (--bf16).
    cpuinfo_path: the CPU description to read.
    gpu_count: GPUs this process sees; None: ask TensorFlow. With a GPU the matmuls run there.

  Returns:
    str, or None when bf16 was not asked for, a GPU computes, the CPU has bf16 units, or its flags
    cannot be read.
  """
  if not bf16:
    return None
  if (local_gpu_count() if gpu_count is None else gpu_count) > 0:
    return None
  units = bf16_units(cpuinfo_path)
  if units is None or units:
    return None
  return ("--bf16 on a CPU without bf16 units (%s has none of the flags %s): TensorFlow emulates "
          "bf16, so training is correct but not faster than fp32; bf16 is fast on CPUs with %s "
          "(AMD Zen 4 and later, Intel Cooper Lake, Sapphire Rapids and later)"
          % (cpuinfo_path, ", ".join(BF16_CPU_FLAGS), " or ".join(BF16_CPU_FLAGS)))


def warn_if_bf16_is_emulated(bf16, cpuinfo_path=CPUINFO_PATH):
  """Logs `bf16_emulated_warning` once, if there is one; returns it (or None)."""
  message = bf16_emulated_warning(bf16, cpuinfo_path)
  if message:
    logging.warning(message)
  return message


def local_gpu_count():
  """Number of GPUs this process can see (0 on a CPU-only machine)."""
  return len(tf.config.list_physical_devices("GPU"))


def amp_takes_effect(amp):
  """Whether automatic mixed precision changes the computation on this machine.

  The AMP graph rewrite only rewrites GPU kernels: without a GPU it does nothing and training stays
  fp32 (a warning says so). The one place that decides it.

  Args:
    amp: AMP was asked for (--amp).

  Returns:
    True when `amp` and this process sees a GPU.
  """
  if not amp:
    return False
  if local_gpu_count() > 0:
    return True
  logging.warning("automatic mixed precision has no effect without a GPU: training in fp32")
  return False


def pin_to_local_gpu(session_config, local_rank):
  """Restricts a session to the GPU whose index is the process's local rank.

  Args:
    session_config: a `tf.compat.v1.ConfigProto`, modified in place.
    local_rank: this process's rank among the processes on its node.

  Returns:
    `session_config`. Unchanged when the machine has no GPU.
  """
  if local_gpu_count() > 0:
    session_config.gpu_options.visible_device_list = str(local_rank)
    session_config.gpu_options.allow_growth = True
  return session_config
