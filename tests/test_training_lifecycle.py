"""The script lifecycle (`utils/training/lifecycle.py`):

- its config reading (`lifecycle.load_bert_config`): every Estimator script refuses a config
  whose values do not fit together when it reads it, before any graph;
- the line every script starts with (`lifecycle.start_line`): exact strings for each precision,
  with the CPU's bf16 units given as arguments, not read from this machine. The scripts' end-to-end
  tests check that a real run prints it once (tests/test_run_pretraining.py,
  tests/test_run_finetuning.py).
"""

import json
import os
import subprocess
import sys

import pytest

import gpu_environment
from tests import helpers
from utils.training import lifecycle

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.e2e
def test_every_script_refuses_heads_that_do_not_divide_the_hidden_size(tmp_path):
  config = tmp_path / "heads.json"
  config.write_text(json.dumps(dict(
      vocab_size=100, hidden_size=128, num_hidden_layers=2, num_attention_heads=3,
      intermediate_size=256, max_position_embeddings=64, type_vocab_size=2)))
  common = ["--bert_config_file=%s" % config, "--max_seq_length=64", "--do_train"]
  # The data flags name files that are never read: the config is refused first.
  scripts = {
      "run_pretraining.py": ["--input_file=%s" % (tmp_path / "none.tfrecord"),
                             "--max_predictions_per_seq=5"],
      "run_classifier.py": ["--task_name=mrpc", "--data_dir=%s" % tmp_path,
                            "--vocab_file=%s" % (tmp_path / "vocab.txt")],
      "run_squad.py": ["--train_file=%s" % (tmp_path / "train.json"), "--max_query_length=12",
                       "--vocab_file=%s" % (tmp_path / "vocab.txt")],
  }
  procs = {script: subprocess.Popen(
      [sys.executable, script, "--output_dir=%s" % (tmp_path / script)] + common + extra,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
           for script, extra in scripts.items()}
  for script, proc in procs.items():
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 2, (script, stderr[-3000:])
    assert ("%s: error: --bert_config_file: %s: bert config: 'hidden_size' (128) must be a "
            "multiple of 'num_attention_heads' (3)" % (script, config)) in stderr, stderr[-3000:]
    assert "Traceback" not in stderr and "Running training" not in stderr
    assert not (tmp_path / script).exists()


# ---------------------------------------------------------------------------------------------
# The start line (`lifecycle.start_line`): one format for the three scripts, in process.

# The sizes of every line below: 2 per worker x 3 accumulation x 2 workers, 5e-05 per worker.
SIZES = ["--train_batch_size=2", "--num_accumulation_steps=3", "--learning_rate=5e-5"]
TAIL = ("device CPU; 2 workers; global batch 12 = 2 x 3 accumulation x 2 workers; learning rate "
        "0.0001 = 5e-05 per worker x 2 workers; 6 updates, 1 of warmup")


def _start_line(flags, cpu_bf16_units, device="CPU", num_workers=2, program="run_squad.py"):
  return lifecycle.start_line(program, helpers.job_config(flags + SIZES), num_workers, device,
                              cpu_bf16_units, num_train_steps=6, num_warmup_steps=1)


@pytest.mark.parametrize("flags,precision", [
    ([], "fp32 (default)"), (["--manual_fp16"], "fp16 (--manual_fp16)"),
    (["--amp"], "amp (--amp; no effect without a GPU: computes in fp32)")])
@pytest.mark.parametrize("units", [["amx_bf16", "avx512_bf16"], [], None])
def test_start_line_names_the_precision_and_its_flag(flags, precision, units):
  # The CPU's bf16 units matter to bf16 only: the other precisions' lines do not mention them.
  assert _start_line(flags, units) == "run_squad.py: precision %s; %s" % (precision, TAIL)


@pytest.mark.parametrize("units,note", [
    (["amx_bf16", "avx512_bf16"], "CPU has amx_bf16, avx512_bf16"),
    (["avx512_bf16"], "CPU has avx512_bf16"),
    ([], "CPU has no bf16 units: emulated, no faster than fp32"),
    (None, "the CPU's bf16 units are unknown")])
def test_bf16_start_line_says_whether_the_cpu_has_bf16_units(units, note):
  assert _start_line(["--bf16"], units, program="run_pretraining.py") == (
      "run_pretraining.py: precision bf16 (--bf16; %s); %s" % (note, TAIL))


def test_start_line_on_a_gpu_and_on_one_worker():
  # On a GPU the CPU's units do not decide bf16's speed, and AMP takes effect: no notes.
  gpu = "GPU (NVIDIA A100-SXM4-80GB)"
  one = ("device %s; 1 worker; global batch 6 = 2 x 3 accumulation x 1 worker; learning rate "
         "5e-05 = 5e-05 per worker x 1 worker; 6 updates, 1 of warmup" % gpu)
  for flags, precision in (([], "fp32 (default)"), (["--bf16"], "bf16 (--bf16)"),
                           (["--amp"], "amp (--amp)")):
    assert _start_line(flags, [], device=gpu, num_workers=1, program="run_classifier.py") == (
        "run_classifier.py: precision %s; %s" % (precision, one))


def test_compute_device_on_this_machine():
  assert lifecycle.compute_device(True, "my-tpu", 0) == "TPU my-tpu"
  assert lifecycle.compute_device(True, None, 0) == "TPU"
  name = gpu_environment.local_gpu_name(0)
  assert lifecycle.compute_device(False, None, 0) == (
      lifecycle.CPU_DEVICE if name is None else "GPU (%s)" % name)


def test_start_line_of_packed_input_counts_rows():
  # 2 rows per worker x 3 accumulation x 2 workers = 12 rows per update, up to 3 sequences each.
  line = lifecycle.start_line("run_pretraining.py", helpers.job_config(SIZES), 2, "CPU", [],
                              num_train_steps=6, num_warmup_steps=1, max_sequences_per_pack=3)
  assert line == ("run_pretraining.py: precision fp32 (default); device CPU; 2 workers; global "
                  "batch 12 rows per update = 2 x 3 accumulation x 2 workers (packed: up to 3 "
                  "sequences per row); learning rate 0.0001 = 5e-05 per worker x 2 workers; "
                  "6 updates, 1 of warmup")
  # Unpacked (0, the default): the line is today's.
  assert lifecycle.start_line("run_pretraining.py", helpers.job_config(SIZES), 2, "CPU", [],
                              6, 1, max_sequences_per_pack=0) == (
      "run_pretraining.py: precision fp32 (default); " + TAIL)
