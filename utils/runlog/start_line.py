"""The line every Estimator script starts with: what it computes in, where, and its sizes.

  device = compute_device(use_tpu, tpu_name, local_rank)
  line = start_line("run_squad.py", "bf16", device, Sizes(...),
                    note="bf16 products 1.66x fp32 here")

Everything comes in as a plain value: the precision's name, the device, the job's sizes and what
was measured about the precision here (the training layer computes them from its configuration
and `utils/runtime/bf16_probe.py`).
"""

import collections

import gpu_environment

# The device name of a run on the CPU (`compute_device`): whether bf16 is fast there is measured.
CPU_DEVICE = "CPU"
# The flag that chose each reduced precision (`optimization.Precision.name`); fp32 is the default.
PRECISION_FLAGS = {"fp16": "--manual_fp16", "amp": "--amp", "bf16": "--bf16"}

Sizes = collections.namedtuple("Sizes", [
    "num_workers", "batch_size", "accumulation_steps", "global_batch_size", "learning_rate",
    "job_learning_rate", "num_train_steps", "num_warmup_steps", "max_sequences_per_pack"])
Sizes.__doc__ = """The sizes a job reports on its start line.

Fields: num_workers, the job's workers; batch_size, rows per worker and micro-step;
accumulation_steps, micro-steps per update; global_batch_size, rows per update over all workers;
learning_rate, the rate per worker; job_learning_rate, the schedule's peak rate over all workers;
num_train_steps, optimizer updates (0 when the run does not train); num_warmup_steps, warmup
updates; max_sequences_per_pack, 0 for unpacked input, K > 0 for records packed with up to K
sequences per row."""


def compute_device(use_tpu, tpu_name, local_rank):
  """Where this worker's products run, for the start line.

  Args:
    use_tpu, tpu_name: the flags of the same names.
    local_rank: this worker's rank on its node (a Horovod worker computes on that GPU).

  Returns:
    "TPU" (with --tpu_name's value), "GPU (<its name>)" when this process sees a GPU, else
    `CPU_DEVICE`.
  """
  if use_tpu:
    return "TPU %s" % tpu_name if tpu_name else "TPU"
  gpu_name = gpu_environment.local_gpu_name(local_rank)
  return CPU_DEVICE if gpu_name is None else "GPU (%s)" % gpu_name


def precision_text(precision_name, device, note=None, auto=False):
  """The precision a job computes in and where that came from.

  Args:
    precision_name: `optimization.Precision.name`: "fp32", "fp16", "amp" or "bf16".
    device: from `compute_device`.
    note: what was measured about it here (`bf16_probe.PrecisionChoice.reason`), or None.
    auto: --precision=auto chose it.

  Returns:
    e.g. "fp32 (default)", "bf16 (--bf16; bf16 products 1.66x fp32 here)", "fp32
    (--precision=auto; bf16 products run at 0.54x fp32 on this CPU)".
  """
  notes = ["--precision=auto" if auto else PRECISION_FLAGS.get(precision_name, "default")]
  if precision_name == "amp" and not device.startswith("GPU"):
    # The rewrite applies to GPU kernels only (gpu_environment.amp_takes_effect).
    notes.append("no effect without a GPU: computes in fp32")
  if note:
    notes.append(note)
  return "%s (%s)" % (precision_name, "; ".join(notes))


def _count(number, noun):
  """The count with its noun: "1 worker", "2 workers"."""
  return "%d %s%s" % (number, noun, "" if number == 1 else "s")


def start_line(program, precision_name, device, sizes, note=None, auto=False):
  """The line every Estimator script starts with.

  One format for the three scripts, e.g. "run_squad.py: precision bf16 (--bf16; bf16 products
  1.66x fp32 here); device CPU; 1 worker; global batch 8 = 8 x 1 accumulation x 1 worker; learning
  rate 3e-05 = 3e-05 per worker x 1 worker; 6 updates, 0 of warmup". Packed input counts the
  batch in rows: "...; global batch 8 rows per update = 8 x 1 accumulation x 1 worker (packed:
  up to 3 sequences per row); learning rate ...".

  Args:
    program: the script's name, e.g. "run_squad.py".
    precision_name: see `precision_text`.
    device: from `compute_device`.
    sizes: `Sizes`.
    note, auto: see `precision_text`.

  Returns:
    str, one line.
  """
  workers = _count(sizes.num_workers, "worker")
  # A packed row holds several sequences: the batch sizes count rows, and the line says so.
  rows, packing = "", ""
  if sizes.max_sequences_per_pack:
    rows = " rows per update"
    packing = " (packed: up to %d sequences per row)" % sizes.max_sequences_per_pack
  return ("%s: precision %s; device %s; %s; global batch %d%s = %d x %d accumulation x %s%s; "
          "learning rate %g = %g per worker x %s; %s, %d of warmup" % (
              program, precision_text(precision_name, device, note, auto),
              device, workers, sizes.global_batch_size, rows,
              sizes.batch_size, sizes.accumulation_steps, workers, packing,
              sizes.job_learning_rate, sizes.learning_rate, workers,
              _count(sizes.num_train_steps, "update"), sizes.num_warmup_steps))
