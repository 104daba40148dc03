"""utils/runtime/bf16_probe.py: the choice between fp32 and bf16 from the probe's two outcomes
(injected: a CPU where bf16 products are slower, one where they are faster), the cache (a hit
measures nothing, a changed machine or a corrupt file measures again) and one real measurement
in TensorFlow at small shapes."""

import json

import pytest

from utils.runtime import bf16_probe

SHAPES = bf16_probe.ProductShapes.of_model(768, 3072, 8 * 128)
KEY = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_flags": "0123", "tensorflow": "2.15.1",
       "gpu": "none"}


class Probe:
  """A measurement that returns `ratio` and counts its calls."""

  def __init__(self, ratio):
    self.ratio, self.calls = ratio, 0

  def __call__(self, shapes):
    self.calls += 1
    return self.ratio


def test_shapes_are_the_models_products_rows_capped():
  assert SHAPES == bf16_probe.ProductShapes(512, 768, 3072)
  assert bf16_probe.ProductShapes.of_model(128, 512, 300).rows == 300
  # 2 x rows x (768 x 2304 + 768 x 3072 + 3072 x 768) multiply-adds.
  assert SHAPES.flops == 2 * 512 * (768 * 2304 + 2 * 768 * 3072)


@pytest.mark.parametrize("ratio,precision,reason", [
    # A Xeon with AVX512-BF16 and no AMX (the 152-164 against 256-315 GFLOP/s).
    (0.54, "fp32", "bf16 products run at 0.54x fp32 on this CPU"),
    # Just above 1: the casts and fp32 element-wise work would eat it.
    (1.1, "fp32", "bf16 products run at 1.10x fp32 on this CPU"),
    # Zen 4 (1.66x) and a Xeon with AMX (1.97x).
    (1.66, "bf16", "bf16 products 1.66x fp32 here"),
    (1.97, "bf16", "bf16 products 1.97x fp32 here"),
    (None, "fp32", "bf16 products could not be run on this CPU")])
def test_choice_follows_the_measured_ratio(ratio, precision, reason):
  assert bf16_probe.choose_precision(ratio) == bf16_probe.PrecisionChoice(precision, ratio, reason)


def test_explicit_bf16_is_told_what_it_costs():
  assert bf16_probe.bf16_cost_note(0.54) == (
      "bf16 products run at 0.54x fp32 on this CPU: fp32 is faster here")
  assert bf16_probe.bf16_cost_note(1.66) == "bf16 products 1.66x fp32 here"
  assert bf16_probe.bf16_cost_note(0.8, "GPU") == (
      "bf16 products run at 0.80x fp32 on this GPU: fp32 is faster here")
  assert bf16_probe.bf16_cost_note(None) is None


def test_ratio_is_fp32_time_over_bf16_time():
  # The clock injected: fp32's products take 0.2 s, bf16's 0.1 s -> bf16 runs at 2x.
  assert bf16_probe.measure_bf16_ratio(SHAPES, time_products=lambda s, t: (0.2, 0.1)) == 2.0

  def broken(shapes, seconds):
    raise RuntimeError("no bf16 MatMul kernel")
  assert bf16_probe.measure_bf16_ratio(SHAPES, time_products=broken) is None


def test_cache_measures_once_per_machine_and_shapes(tmp_path):
  path = str(tmp_path / "cache" / "probe.json")
  slower = Probe(0.54)
  assert bf16_probe.cached_bf16_ratio(SHAPES, path, KEY, slower) == 0.54
  assert bf16_probe.cached_bf16_ratio(SHAPES, path, KEY, slower) == 0.54
  assert slower.calls == 1
  # Another CPU model, other flags, another TensorFlow, other shapes: each measured again.
  faster = Probe(1.66)
  for key in (dict(KEY, cpu="AMD EPYC"), dict(KEY, cpu_flags="4567"),
              dict(KEY, tensorflow="2.16.1")):
    assert bf16_probe.cached_bf16_ratio(SHAPES, path, key, faster) == 1.66
  assert bf16_probe.cached_bf16_ratio(SHAPES._replace(rows=256), path, KEY, faster) == 1.66
  assert faster.calls == 4
  # ... while the first machine's answer stays.
  assert bf16_probe.cached_bf16_ratio(SHAPES, path, KEY, faster) == 0.54
  assert faster.calls == 4


@pytest.mark.parametrize("content", [
    "{not json", "[]", json.dumps({"version": 1, "entries": []}),
    json.dumps({"version": 0, "entries": {}}), ""])
def test_corrupt_cache_is_measured_again_and_rewritten(tmp_path, content):
  path = tmp_path / "probe.json"
  path.write_text(content)
  probe = Probe(1.66)
  assert bf16_probe.cached_bf16_ratio(SHAPES, str(path), KEY, probe) == 1.66
  assert probe.calls == 1
  assert bf16_probe.cached_bf16_ratio(SHAPES, str(path), KEY, probe) == 1.66
  assert probe.calls == 1


def test_corrupt_entry_and_unwritable_cache_are_measured_again(tmp_path):
  path = tmp_path / "probe.json"
  probe = Probe(0.54)
  bf16_probe.cached_bf16_ratio(SHAPES, str(path), KEY, probe)
  content = json.loads(path.read_text())
  (name,) = content["entries"]
  content["entries"][name]["bf16_ratio"] = "fast"
  path.write_text(json.dumps(content))
  assert bf16_probe.cached_bf16_ratio(SHAPES, str(path), KEY, probe) == 0.54
  assert probe.calls == 2
  # A cache in a place that cannot be written: measured every time, no error.
  (tmp_path / "file").write_text("")
  unwritable = str(tmp_path / "file" / "probe.json")
  assert bf16_probe.cached_bf16_ratio(SHAPES, unwritable, KEY, probe) == 0.54
  assert bf16_probe.cached_bf16_ratio(SHAPES, unwritable, KEY, probe) == 0.54
  assert probe.calls == 4
  # A failed measurement is not cached: asked again next time.
  failed = Probe(None)
  other = str(tmp_path / "other.json")
  assert bf16_probe.cached_bf16_ratio(SHAPES, other, KEY, failed) is None
  assert bf16_probe.cached_bf16_ratio(SHAPES, other, KEY, failed) is None
  assert failed.calls == 2


def test_machine_key_reads_the_cpu_model_and_flags(tmp_path):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx512_bf16\n")
  key = bf16_probe.machine_key(str(cpuinfo), tf_version="2.15.1")
  assert key["cpu"] == "Some CPU" and key["tensorflow"] == "2.15.1" and key["gpu"] == "none"
  # The flags in any order give one key; one flag more gives another.
  cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: avx512_bf16 fpu\n")
  assert bf16_probe.machine_key(str(cpuinfo), tf_version="2.15.1") == key
  cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx512_bf16 "
                     "amx_bf16\n")
  assert bf16_probe.machine_key(str(cpuinfo), tf_version="2.15.1")["cpu_flags"] != \
      key["cpu_flags"]


def test_default_cache_path():
  assert bf16_probe.default_cache_path({"BERT_PRECISION_CACHE": "/c/p.json"}) == "/c/p.json"
  assert bf16_probe.default_cache_path({"XDG_CACHE_HOME": "/x"}) == (
      "/x/bert-tf1-pretraining/bf16_probe.json")


def test_tensorflow_runs_both_precisions_products():
  # Tiny shapes, one run each: the two times are real and positive (their ratio is this
  # machine's: measured by bench/, not asserted here).
  ticks = iter(range(1000))
  fp32_seconds, bf16_seconds = bf16_probe.time_products_in_tensorflow(
      bf16_probe.ProductShapes(8, 16, 64), 0.0, clock=lambda: float(next(ticks)))
  # The injected clock advances 1 per reading: each run took exactly 1 "second".
  assert fp32_seconds == bf16_seconds == 1.0


@pytest.mark.parametrize("ratio,line", [
    (0.54, "fp32 bf16 products run at 0.54x fp32 on this CPU"),
    (1.66, "bf16 bf16 products 1.66x fp32 here")])
def test_the_demos_choice_is_the_measured_one(monkeypatch, capsys, ratio, line):
  # scripts/demo.sh reads "<precision> <reason>" from `main` (its model at batch 16 x seq 128)
  # and trains with --precision=auto, which takes the same cached measurement.
  measured = []
  monkeypatch.setattr(bf16_probe, "cached_bf16_ratio",
                      lambda shapes: measured.append(shapes) or ratio)
  assert bf16_probe.main(["bf16_probe", "bert_configs/tiny.json", "16", "128"]) == 0
  assert capsys.readouterr().out == line + "\n"
  # bert_configs/tiny.json: hidden 128, intermediate 512; 16 x 128 rows, capped.
  assert measured == [(bf16_probe.MAX_PROBE_ROWS, 128, 512)]


def test_jobs_started_together_measure_once(tmp_path):
  # Two processes asking at once: the second waits for the first's measurement and takes it (so
  # the two start lines agree, and the probes do not disturb each other's timing).
  import multiprocessing  # pylint: disable=import-outside-toplevel
  path = str(tmp_path / "probe.json")
  with multiprocessing.get_context("fork").Pool(2) as pool:
    ratios = pool.starmap(_slow_probe_ratio, [(path, 1.66), (path, 0.54)])
  assert ratios[0] == ratios[1] and ratios[0] in (1.66, 0.54)
  assert bf16_probe.cached_bf16_ratio(SHAPES, path, KEY, Probe(2.0)) == ratios[0]


def _slow_probe_ratio(path, ratio):
  """`cached_bf16_ratio` with a measurement that takes 0.5 s and returns `ratio`."""
  import time  # pylint: disable=import-outside-toplevel

  def measure(shapes):
    time.sleep(0.5)
    return ratio
  return bf16_probe.cached_bf16_ratio(SHAPES, path, KEY, measure)
