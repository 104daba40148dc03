"""utils/training/job.py: the job every Estimator script opens, in process (its output directory,
run log, start line, Estimator and the checks before them), and the model configuration every
script refuses before any graph (end to end, the three scripts).

The scripts' end-to-end tests train, evaluate and predict with real jobs
(tests/test_run_pretraining.py, tests/test_run_finetuning.py).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tests.test_training_precision import Probe
from utils.checkpoints import contents
from utils.core import errors
from utils.runlog import start_line
from utils.runtime import bf16_probe
from utils.runtime import output_lock
from utils.runtime import workers as workers_lib
from utils.training import job as job_lib

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ONE_WORKER = workers_lib.Workers(hvd=None, rank=0, size=1, local_rank=0, local_size=1)


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
  sizes = job_lib.start_line_sizes(config, 2, job_lib.Plan(6, 1, max_sequences_per_pack=3))
  assert sizes == start_line.Sizes(num_workers=2, batch_size=2, accumulation_steps=3,
                                   global_batch_size=12, learning_rate=5e-5,
                                   job_learning_rate=1e-4, num_train_steps=6,
                                   num_warmup_steps=1, max_sequences_per_pack=3)
  line = start_line.start_line("run_squad.py", config.precision.name, start_line.CPU_DEVICE,
                               job_lib.start_line_sizes(config, 2, job_lib.Plan(6, 1)))
  assert line == ("run_squad.py: precision fp32 (default); device CPU; 2 workers; global batch "
                  "12 = 2 x 3 accumulation x 2 workers; learning rate 0.0001 = 5e-05 per worker "
                  "x 2 workers; 6 updates, 1 of warmup")


def _model():
  """A tiny BERT whose head is never built: opening a job builds no graph."""
  return job_lib.Model(head_fn=None, bert_config=helpers.tiny_config())


def _open(out, *args, resume_check=None):
  """`Job.open` of one worker training 6 updates into `out`, with the shared flags `args`."""
  config = helpers.job_config(["--output_dir=%s" % out, "--do_train", "--learning_rate=1e-3"]
                              + list(args))
  return job_lib.Job.open(config, "run_pretraining.py", ONE_WORKER, _model(),
                          job_lib.Plan(6, 1), resume_check=resume_check)


def test_open_takes_the_output_dir_and_logs_the_start_line_then_close(tmp_path, caplog):
  out = tmp_path / "out"
  with caplog.at_level("INFO"):
    job = _open(out, "--save_checkpoints_steps=2", "--keep_checkpoint_max=3")
  try:
    assert job.output_dir == str(out) and job.saves_checkpoints and job.checkpoint_dir == str(out)
    assert job.is_chief and job.micro_steps_done == 0 and job.plan == job_lib.Plan(6, 1)
    assert os.path.exists(out / output_lock.LOCK_FILE_NAME)
    assert job.log_path == str(out / "bert_dllog.json")
    assert job.estimator.model_dir == str(out)
    assert job.estimator.config.save_checkpoints_steps == 2
    assert job.estimator.config.keep_checkpoint_max == 3
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("run_pretraining.py: precision ")]
    assert len(lines) == 1 and lines[0].endswith(
        "; 1 worker; global batch 32 = 32 x 1 accumulation x 1 worker; learning rate 0.001 = "
        "0.001 per worker x 1 worker; 6 updates, 1 of warmup"), lines
  finally:
    job.output_lock.release()
    with caplog.at_level("INFO"):
      job.close()
  assert "outputs: checkpoints in %s, dllogger log %s" % (out, job.log_path) in caplog.text


def test_a_deterministic_resume_from_a_checkpoint_without_micro_steps_is_refused(tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  contents.write_checkpoint(str(out / "model.ckpt-4"), {"global_step": np.int64(4)})
  tf.compat.v1.train.update_checkpoint_state(str(out), str(out / "model.ckpt-4"))
  with pytest.raises(errors.UsageError, match="^--deterministic_run: checkpoint .*model.ckpt-4 "
                     "has no 'micro_step' variable"):
    _open(out, "--deterministic_run", resume_check=job_lib.ResumeCheck(2))


def test_the_init_checkpoint_must_have_the_models_shapes(tmp_path):
  helpers.write_checkpoints(tmp_path / "init", [3])
  contents.write_checkpoint(str(tmp_path / "init" / "model.ckpt-3"), {
      "bert/embeddings/word_embeddings": np.zeros([5, 8], np.float32),
      "global_step": np.int64(3)})
  config = helpers.job_config(["--init_checkpoint=%s" % (tmp_path / "init"),
                               "--bert_config_file=bert_config.json"])
  with pytest.raises(errors.UsageError) as raised:
    job_lib.checked_init_checkpoint(config, helpers.tiny_config())
  assert str(raised.value) == (
      "--init_checkpoint=%s: variable bert/embeddings/word_embeddings has shape [5, 8] in the "
      "checkpoint but [99, 32] in the model of --bert_config_file=bert_config.json"
      % (tmp_path / "init" / "model.ckpt-3"))
  assert job_lib.checked_init_checkpoint(helpers.job_config(), helpers.tiny_config()) is None


@pytest.mark.parametrize("hidden,head,counts,seed", [
    (0.1, 0.0, False, 7), (0.0, 0.0, False, None), (0.0, 0.1, False, 7), (0.0, 0.0, True, 7)])
def test_dropout_seed_of_a_deterministic_run(hidden, head, counts, seed):
  bert_config = helpers.tiny_config(hidden_dropout_prob=hidden, attention_probs_dropout_prob=0.0)
  config = helpers.job_config(["--deterministic_run", "--seed=7"])
  assert job_lib.dropout_seed(config, bert_config, head, counts) == seed
  assert job_lib.dropout_seed(helpers.job_config(), bert_config, head, counts) is None



@pytest.mark.parametrize("ratio,precision", [
    (0.54, "fp32 (--precision=auto; bf16 products run at 0.54x fp32 on this CPU)"),
    (1.66, "bf16 (--precision=auto; bf16 products 1.66x fp32 here)")])
def test_open_runs_the_auto_choice_and_names_it_on_the_start_line(tmp_path, caplog, monkeypatch,
                                                                  ratio, precision):
  monkeypatch.setattr(bf16_probe, "cached_bf16_ratio", Probe(ratio))
  with caplog.at_level("INFO"):
    job = _open(tmp_path / "out", "--precision=auto")
  try:
    # The job's configuration (its training settings and Estimator) computes in the choice.
    assert job.config.precision.name == precision.split()[0]
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("run_pretraining.py: precision ")]
    assert len(lines) == 1 and lines[0].startswith(
        "run_pretraining.py: precision %s; device " % precision), lines
  finally:
    job.output_lock.release()
    job.close()
