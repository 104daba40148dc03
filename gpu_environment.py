"""Reduced-precision variable storage, the hardware it runs fast on, and device pinning.

Small pieces the model and the training script need for reduced precision and accelerators:

* `get_custom_getter(compute_type)`: a variable-scope custom getter that stores every trainable
  variable in fp32 (the "master" copy the optimizer updates) and hands the model an fp16 or bf16
  cast of it when the model asks for one. `modeling.ComputePrecision` decides what the model asks
  for (its activations' dtype): the fp16 model asks for fp16; the bf16 model asks for fp32 and
  casts per product. Checkpoints therefore always hold fp32 values under the original names,
  whatever the compute type.
* `local_gpu_count()` / `local_gpu_name(index)` / `amp_takes_effect(amp)`: the GPUs this process
  sees, the name of one, and whether NVIDIA's automatic mixed precision changes anything on them.
  (Whether the CPU has bf16 units is the process's business: `utils/runtime/cpu.py`.)
* `pin_to_local_gpu(session_config, local_rank)`: makes a process see only the GPU of its local
  rank, the usual one-process-per-GPU Horovod layout. On a machine without GPUs it changes nothing.
"""

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


def local_gpu_count():
  """Number of GPUs this process can see (0 on a CPU-only machine)."""
  return len(tf.config.list_physical_devices("GPU"))


def local_gpu_name(index=0):
  """The name of a GPU this process sees, for messages.

  Args:
    index: which of them: a Horovod worker's local rank (`pin_to_local_gpu` gives it that GPU);
      out of range, the first.

  Returns:
    the device's name as its driver reports it (e.g. "NVIDIA A100-SXM4-80GB"), else TensorFlow's
    ("/physical_device:GPU:0"); None on a machine without GPUs.
  """
  gpus = tf.config.list_physical_devices("GPU")
  if not gpus:
    return None
  gpu = gpus[index] if 0 <= index < len(gpus) else gpus[0]
  return tf.config.experimental.get_device_details(gpu).get("device_name") or gpu.name


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
