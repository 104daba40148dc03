"""The script lifecycle (`utils/training/lifecycle.py`):

- its config reading (`lifecycle.load_bert_config`): every Estimator script refuses a config
  whose values do not fit together when it reads it, before any graph;
- the sizes of the line every script starts with, from its config (the line's text:
  tests/test_runlog_start_line.py).
"""

import json
import os
import subprocess
import sys

import pytest

from tests import helpers
from utils.runlog import start_line
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


def test_the_start_line_sizes_are_the_configs():
  # 2 per worker x 3 accumulation x 2 workers, 5e-05 per worker (the start line's own tests,
  # tests/test_runlog_start_line.py, have the text of these sizes).
  config = helpers.job_config(["--train_batch_size=2", "--num_accumulation_steps=3",
                               "--learning_rate=5e-5"])
  sizes = lifecycle.start_line_sizes(config, 2, 6, 1, max_sequences_per_pack=3)
  assert sizes == start_line.Sizes(num_workers=2, batch_size=2, accumulation_steps=3,
                                   global_batch_size=12, learning_rate=5e-5,
                                   job_learning_rate=1e-4, num_train_steps=6,
                                   num_warmup_steps=1, max_sequences_per_pack=3)
  line = start_line.start_line("run_squad.py", config.precision.name, start_line.CPU_DEVICE,
                               [], lifecycle.start_line_sizes(config, 2, 6, 1))
  assert line == ("run_squad.py: precision fp32 (default); device CPU; 2 workers; global batch "
                  "12 = 2 x 3 accumulation x 2 workers; learning rate 0.0001 = 5e-05 per worker "
                  "x 2 workers; 6 updates, 1 of warmup")
