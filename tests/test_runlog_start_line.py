"""utils/runlog/start_line.py: the line every Estimator script starts with, exact strings for each
precision, with what was measured about it given as arguments, not measured on this machine.
The scripts' end-to-end tests check that a real run prints it once (tests/test_run_pretraining.py,
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


def _start_line(precision_name, device="CPU", sizes=SIZES, program="run_squad.py", **kwargs):
  return start_line.start_line(program, precision_name, device, sizes, **kwargs)


@pytest.mark.parametrize("precision_name,precision", [
    ("fp32", "fp32 (default)"), ("fp16", "fp16 (--manual_fp16)"),
    ("amp", "amp (--amp; no effect without a GPU: computes in fp32)")])
def test_start_line_names_the_precision_and_its_flag(precision_name, precision):
  # Nothing measured (only bf16 and --precision=auto measure): no note.
  assert _start_line(precision_name) == "run_squad.py: precision %s; %s" % (precision, TAIL)


@pytest.mark.parametrize("precision_name,auto,note,precision", [
    # An explicit --bf16 where bf16 is faster, and where it is slower: it runs, and says the cost.
    ("bf16", False, "bf16 products 1.66x fp32 here",
     "bf16 (--bf16; bf16 products 1.66x fp32 here)"),
    ("bf16", False, "bf16 products run at 0.54x fp32 on this CPU: fp32 is faster here",
     "bf16 (--bf16; bf16 products run at 0.54x fp32 on this CPU: fp32 is faster here)"),
    # --precision=auto names itself, the choice and its measured reason.
    ("bf16", True, "bf16 products 1.90x fp32 here",
     "bf16 (--precision=auto; bf16 products 1.90x fp32 here)"),
    ("fp32", True, "bf16 products run at 0.54x fp32 on this CPU",
     "fp32 (--precision=auto; bf16 products run at 0.54x fp32 on this CPU)"),
    # bf16 whose ratio could not be measured: the flag only.
    ("bf16", False, None, "bf16 (--bf16)")])
def test_start_line_says_what_was_measured_about_the_precision(precision_name, auto, note,
                                                                precision):
  assert _start_line(precision_name, program="run_pretraining.py", note=note, auto=auto) == (
      "run_pretraining.py: precision %s; %s" % (precision, TAIL))


def test_start_line_on_a_gpu_and_on_one_worker():
  # On a GPU nothing is measured for an explicit --bf16, and AMP takes effect: no notes.
  gpu = "GPU (NVIDIA A100-SXM4-80GB)"
  one_worker = SIZES._replace(num_workers=1, global_batch_size=6, job_learning_rate=5e-5)
  one = ("device %s; 1 worker; global batch 6 = 2 x 3 accumulation x 1 worker; learning rate "
         "5e-05 = 5e-05 per worker x 1 worker; 6 updates, 1 of warmup" % gpu)
  for precision_name, precision in (("fp32", "fp32 (default)"), ("bf16", "bf16 (--bf16)"),
                                    ("amp", "amp (--amp)")):
    assert _start_line(precision_name, device=gpu, sizes=one_worker,
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
  line = _start_line("fp32", sizes=SIZES._replace(max_sequences_per_pack=3),
                     program="run_pretraining.py")
  assert line == ("run_pretraining.py: precision fp32 (default); device CPU; 2 workers; global "
                  "batch 12 rows per update = 2 x 3 accumulation x 2 workers (packed: up to 3 "
                  "sequences per row); learning rate 0.0001 = 5e-05 per worker x 2 workers; "
                  "6 updates, 1 of warmup")
  # Unpacked (0): the line is today's.
  assert _start_line("fp32", program="run_pretraining.py") == (
      "run_pretraining.py: precision fp32 (default); " + TAIL)
