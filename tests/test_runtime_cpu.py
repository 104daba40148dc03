"""utils/runtime/cpu.py: the CPU's flags and bf16 units read from a cpuinfo file written here."""

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
  # The demo's choice (scripts/demo.sh): bf16 exactly where the CPU has bf16 units.
  assert cpu.fastest_cpu_precision(str(cpuinfo)) == ("bf16" if expected else "fp32")
  warning = cpu.bf16_emulated_warning(True, str(cpuinfo), gpu_count=0)
  if expected:
    assert warning is None
  else:
    assert "avx512_bf16" in warning and "amx_bf16" in warning and "emulates" in warning
  assert cpu.bf16_emulated_warning(False, str(cpuinfo), gpu_count=0) is None
  # With a GPU the matmuls run there: no CPU warning.
  assert cpu.bf16_emulated_warning(True, str(cpuinfo), gpu_count=1) is None


def test_unreadable_cpu_flags_give_no_warning(tmp_path):
  assert cpu.bf16_units(str(tmp_path / "missing")) is None
  (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
  assert cpu.bf16_units(str(tmp_path / "arm")) is None
  assert cpu.fastest_cpu_precision(str(tmp_path / "missing")) == "fp32"
  assert cpu.bf16_emulated_warning(True, str(tmp_path / "arm"), gpu_count=0) is None


def test_model_name_is_the_first_processors(tmp_path):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU  \nflags\t\t: fpu\n\n"
                     "processor\t: 1\nmodel name\t: Other CPU\nflags\t\t: fpu\n")
  assert cpu.cpu_model_name(str(cpuinfo)) == "Some CPU"
  (tmp_path / "no_name").write_text("processor\t: 0\nflags\t\t: fpu\n")
  assert cpu.cpu_model_name(str(tmp_path / "no_name")) is None
  assert cpu.cpu_model_name(str(tmp_path / "missing")) is None
