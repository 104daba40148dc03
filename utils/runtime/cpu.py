"""What this machine's CPU can do fast: its feature flags, and whether it has bf16 units.

* `bf16_units(cpuinfo_path)`: the bf16 flags this CPU has (AVX512-BF16 or AMX-BF16); without them
  (and without a GPU) TensorFlow emulates bf16, no faster than fp32.
* `fastest_cpu_precision()`: "bf16" or "fp32", what `make demo` trains in.
* `warn_if_bf16_is_emulated(bf16)`: the warning a --bf16 run logs on a CPU without bf16 units.
"""

import os

from absl import logging

import gpu_environment


# The CPU flags (/proc/cpuinfo) of bf16 arithmetic units: AVX512-BF16 (AMD Zen 4 and later, Intel
# Cooper Lake) and AMX-BF16 (Intel Sapphire Rapids and later). oneDNN runs bf16 matmuls on them.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
CPUINFO_PATH = "/proc/cpuinfo"


def _first_processor_field(name, cpuinfo_path):
  """The value of field `name` of the first processor in `cpuinfo_path` (Linux's /proc/cpuinfo
  format), stripped; None when the file is missing or has no such field."""
  if not os.path.exists(cpuinfo_path):
    return None
  with open(cpuinfo_path) as reader:
    for line in reader:
      key, _, value = line.partition(":")
      if key.strip() == name:
        return value.strip()
  return None


def cpu_flags(cpuinfo_path=CPUINFO_PATH):
  """The feature flags of the first processor in `cpuinfo_path` (Linux's /proc/cpuinfo format).

  Args:
    cpuinfo_path: the file to read.

  Returns:
    set of flag names (e.g. {"avx2", "avx512_bf16", ...}); None when the file is missing or holds
    no "flags" line (not Linux, or not an x86 CPU), so that "unknown" is not mistaken for "absent".
  """
  flags = _first_processor_field("flags", cpuinfo_path)
  return None if flags is None else set(flags.split())


def cpu_model_name(cpuinfo_path=CPUINFO_PATH):
  """The first processor's "model name" (e.g. "Intel(R) Xeon(R) Processor"), or None when
  `cpuinfo_path` is missing or has none: what a benchmark names the box by."""
  return _first_processor_field("model name", cpuinfo_path)


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
  if (gpu_environment.local_gpu_count() if gpu_count is None else gpu_count) > 0:
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
