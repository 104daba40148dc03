"""utils/runlog/start_line.py: the line every Estimator script starts with, exact strings for each
precision, with the CPU's bf16 units given as arguments, not read from this machine. The scripts'
end-to-end tests check that a real run prints it once (tests/test_run_pretraining.py,
tests/test_run_finetuning.py); tests/test_training_job.py, that a job's configuration gives these
values.
"""

import pytest

import gpu_environment
from utils.runlog import start_line

# The sizes of every line below: 2 per worker x 3 accumulation x 2 workers, 5e-05 per worker.
SIZES = start_line.Sizes(num_workers=2, batch_size=2, accumulation_steps=3, global_batch_size=12,
                         learning_rate=5e-5, job_learning_rate=1e-4, num_train_steps=6,
                         num_warmup_steps=1, max_sequences_per_pack=0)
TAIL = ("device CPU; 2 workers; global batch 12 = 2 x 3 accumulation x 2 workers; learning rate "
        "0.0001 = 5e-05 per worker x 2 workers; 6 updates, 1 of warmup")


def _start_line(precision_name, cpu_bf16_units, device="CPU", sizes=SIZES, program="run_squad.py"):
  return start_line.start_line(program, precision_name, device, cpu_bf16_units, sizes)


@pytest.mark.parametrize("precision_name,precision", [
    ("fp32", "fp32 (default)"), ("fp16", "fp16 (--manual_fp16)"),
    ("amp", "amp (--amp; no effect without a GPU: computes in fp32)")])
@pytest.mark.parametrize("units", [["amx_bf16", "avx512_bf16"], [], None])
def test_start_line_names_the_precision_and_its_flag(precision_name, precision, units):
  # The CPU's bf16 units matter to bf16 only: the other precisions' lines do not mention them.
  assert _start_line(precision_name, units) == "run_squad.py: precision %s; %s" % (precision, TAIL)


@pytest.mark.parametrize("units,note", [
    (["amx_bf16", "avx512_bf16"], "CPU has amx_bf16, avx512_bf16"),
    (["avx512_bf16"], "CPU has avx512_bf16"),
    ([], "CPU has no bf16 units: emulated, no faster than fp32"),
    (None, "the CPU's bf16 units are unknown")])
def test_bf16_start_line_says_whether_the_cpu_has_bf16_units(units, note):
  assert _start_line("bf16", units, program="run_pretraining.py") == (
      "run_pretraining.py: precision bf16 (--bf16; %s); %s" % (note, TAIL))


def test_start_line_on_a_gpu_and_on_one_worker():
  # On a GPU the CPU's units do not decide bf16's speed, and AMP takes effect: no notes.
  gpu = "GPU (NVIDIA A100-SXM4-80GB)"
  one_worker = SIZES._replace(num_workers=1, global_batch_size=6, job_learning_rate=5e-5)
  one = ("device %s; 1 worker; global batch 6 = 2 x 3 accumulation x 1 worker; learning rate "
         "5e-05 = 5e-05 per worker x 1 worker; 6 updates, 1 of warmup" % gpu)
  for precision_name, precision in (("fp32", "fp32 (default)"), ("bf16", "bf16 (--bf16)"),
                                    ("amp", "amp (--amp)")):
    assert _start_line(precision_name, [], device=gpu, sizes=one_worker,
                       program="run_classifier.py") == (
                           "run_classifier.py: precision %s; %s" % (precision, one))


def test_compute_device_on_this_machine():
  assert start_line.compute_device(True, "my-tpu", 0) == "TPU my-tpu"
  assert start_line.compute_device(True, None, 0) == "TPU"
  name = gpu_environment.local_gpu_name(0)
  assert start_line.compute_device(False, None, 0) == (
      start_line.CPU_DEVICE if name is None else "GPU (%s)" % name)


def test_start_line_of_packed_input_counts_rows():
  # 2 rows per worker x 3 accumulation x 2 workers = 12 rows per update, up to 3 sequences each.
  line = _start_line("fp32", [], sizes=SIZES._replace(max_sequences_per_pack=3),
                     program="run_pretraining.py")
  assert line == ("run_pretraining.py: precision fp32 (default); device CPU; 2 workers; global "
                  "batch 12 rows per update = 2 x 3 accumulation x 2 workers (packed: up to 3 "
                  "sequences per row); learning rate 0.0001 = 5e-05 per worker x 2 workers; "
                  "6 updates, 1 of warmup")
  # Unpacked (0): the line is today's.
  assert _start_line("fp32", [], program="run_pretraining.py") == (
      "run_pretraining.py: precision fp32 (default); " + TAIL)
