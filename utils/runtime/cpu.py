"""What this machine's CPU is: its model name, feature flags and bf16 units.

* `cpu_flags`, `cpu_model_name`: read from /proc/cpuinfo (what the bf16 probe's cache is keyed
  by, and what a benchmark names the box by).
* `bf16_units(cpuinfo_path)`: the bf16 flags this CPU has (AVX512-BF16 or AMX-BF16), for the
  benchmarks' notes. They say that bf16 instructions exist, not that they are fast: on a Xeon with
  AVX512-BF16 but no AMX bf16 products are slower than fp32's, so which precision is faster is
  measured (`utils/runtime/bf16_probe.py`), never read from these flags.
"""

import os


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
