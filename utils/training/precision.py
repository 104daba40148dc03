"""The precision a job computes in and why, decided once before its graph (`decide_precision`):
--precision=auto measured by `utils/runtime/bf16_probe.py`, an explicit --bf16 told what it costs
on this CPU, every other precision as its flag says (docs/PRECISION.md)."""

from utils.runlog import start_line
from utils.runtime import bf16_probe
from utils.runtime import hvd_utils


def decide_precision(config, bert_config, device, rank, bf16_ratio=None):
  """The job's precision and its measured reason, decided once, before the graph.

  * --precision=auto: rank 0 measures the model's products in fp32 and bf16 here
    (`bf16_probe.cached_bf16_ratio`, cached per machine) and every worker takes its choice
    (`bf16_probe.choose_precision`: bf16 where its products are faster, else fp32).
  * --bf16 on the CPU: bf16 as asked; rank 0's start line says the measured ratio and, where bf16
    is slower, that fp32 is faster (`bf16_probe.bf16_cost_note`; from the cache after the
    machine's first bf16 or auto job, else measured once).
  * every other precision: as the flags say, nothing measured.

  Args:
    config: the `job_config.JobConfig`.
    bert_config: the `modeling.BertConfig` (the probe's product shapes).
    device: `start_line.compute_device`'s.
    rank: this worker's rank (0 measures).
    bf16_ratio: `bf16_probe.ProductShapes` -> bf16 products' rate / fp32's, or None;
      `bf16_probe.cached_bf16_ratio` when None.

  Returns:
    (the configuration computing in the chosen precision, `bf16_probe.PrecisionChoice`: its
    reason None when nothing was measured).
  """
  shapes = bf16_probe.model_shapes(bert_config, config.train_batch_size, config.max_seq_length)
  if config.auto_precision:
    kind = "GPU" if device.startswith("GPU") else "CPU"
    choice = bf16_probe.auto_precision(shapes, kind, bf16_ratio) if rank == 0 else None
    choice = hvd_utils.broadcast_value(choice)
    return config.with_precision(choice.precision), choice
  name = config.precision.name
  if name == "bf16" and device == start_line.CPU_DEVICE and rank == 0:
    ratio = (bf16_ratio or bf16_probe.cached_bf16_ratio)(shapes)
    return config, bf16_probe.PrecisionChoice(name, ratio, bf16_probe.bf16_cost_note(ratio))
  return config, bf16_probe.PrecisionChoice(name, None, None)
