"""utils/training/precision.py: the precision a job computes in, from the bf16 probe's two
outcomes injected (bf16 products slower than fp32's here, or faster), and when the probe runs at
all. tests/test_training_job.py opens a job with --precision=auto; tests/test_runtime_bf16_probe.py
has the probe itself."""

import pytest

from tests import helpers
from utils.training import flags as job_flags  # noqa: F401  (defines the shared flags)
from utils.training import precision as precision_lib


class Probe:
  """The bf16 probe's outcome injected: bf16 products at `ratio` x fp32; records its shapes."""

  def __init__(self, ratio):
    self.ratio, self.shapes = ratio, []

  def __call__(self, shapes):
    self.shapes.append(shapes)
    return self.ratio


@pytest.mark.parametrize("ratio,precision,reason", [
    # A Xeon with AVX512-BF16 and no AMX: fp32, and why.
    (0.54, "fp32", "bf16 products run at 0.54x fp32 on this CPU"),
    # Zen 4 with AVX512-BF16, or a Xeon with AMX: bf16.
    (1.66, "bf16", "bf16 products 1.66x fp32 here")])
def test_auto_precision_is_the_probes_choice(ratio, precision, reason):
  probe = Probe(ratio)
  config = helpers.job_config(["--precision=auto", "--train_batch_size=2",
                               "--max_seq_length=64"])
  chosen, choice = precision_lib.decide_precision(config, helpers.tiny_config(), "CPU", 0, probe)
  assert chosen.precision.name == precision and chosen.bf16 == (precision == "bf16")
  assert choice == (precision, ratio, reason)
  # The model's own products at the job's rows (batch x sequence length).
  tiny = helpers.tiny_config()
  assert probe.shapes == [(2 * 64, tiny.hidden_size, tiny.intermediate_size)]


def test_explicit_precisions_run_as_asked_and_bf16_says_its_cost():
  slower = Probe(0.54)
  config = helpers.job_config(["--bf16"])
  chosen, choice = precision_lib.decide_precision(config, helpers.tiny_config(), "CPU", 0, slower)
  assert chosen == config and choice.precision == "bf16"
  assert choice.reason == "bf16 products run at 0.54x fp32 on this CPU: fp32 is faster here"
  faster = Probe(1.66)
  _, choice = precision_lib.decide_precision(config, helpers.tiny_config(), "CPU", 0, faster)
  assert choice.reason == "bf16 products 1.66x fp32 here"
  # Measured for the start line only, which rank 0 writes; on a GPU, and for the other
  # precisions, nothing is measured.
  for args, device, rank in ((["--bf16"], "CPU", 1), (["--bf16"], "GPU (A100)", 0),
                             ([], "CPU", 0), (["--manual_fp16"], "CPU", 0)):
    config = helpers.job_config(args)
    never = Probe(0.54)
    chosen, choice = precision_lib.decide_precision(config, helpers.tiny_config(), device, rank,
                                                    never)
    assert chosen == config and choice == (config.precision.name, None, None)
    assert never.shapes == []
