"""utils/runtime/cpu.py: the CPU's flags and bf16 units read from a cpuinfo file written here.
Which precision is faster is measured, not read from them: tests/test_runtime_bf16_probe.py."""

import pytest

from utils.runtime import cpu


@pytest.mark.parametrize("flags,expected", [
    (("avx2", "avx512f"), []), (("avx2", "avx512_bf16"), ["avx512_bf16"]),
    (("amx_bf16", "amx_tile", "avx512_bf16"), ["amx_bf16", "avx512_bf16"])])
def test_bf16_units_read_from_cpuinfo(tmp_path, flags, expected):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu %s\n\n"
                     "processor\t: 1\nflags\t\t: fpu\n" % " ".join(flags))
  assert cpu.bf16_units(str(cpuinfo)) == expected
  # The first processor's flags, all of them (what the bf16 probe's cache is keyed by).
  assert cpu.cpu_flags(str(cpuinfo)) == {"fpu"} | set(flags)


def test_unreadable_cpu_flags_are_unknown_not_absent(tmp_path):
  assert cpu.bf16_units(str(tmp_path / "missing")) is None
  (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
  assert cpu.bf16_units(str(tmp_path / "arm")) is None
  assert cpu.cpu_flags(str(tmp_path / "arm")) is None


def test_model_name_is_the_first_processors(tmp_path):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU  \nflags\t\t: fpu\n\n"
                     "processor\t: 1\nmodel name\t: Other CPU\nflags\t\t: fpu\n")
  assert cpu.cpu_model_name(str(cpuinfo)) == "Some CPU"
  (tmp_path / "no_name").write_text("processor\t: 0\nflags\t\t: fpu\n")
  assert cpu.cpu_model_name(str(tmp_path / "no_name")) is None
  assert cpu.cpu_model_name(str(tmp_path / "missing")) is None
