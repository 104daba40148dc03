"""The recipe's levers end to end (docs/TRAINING.md, "Recipe levers"): run_pretraining.py with
--pretraining_dropout=0, --nonext_sentence_loss, --lr_schedule=linear, --warmup_fraction,
--adam_beta2 and --adam_epsilon under horovodrun with accumulation and fp16 on records without
next_sentence_labels (and without masks: drawn with --vocab_file, --masked_lm_prob and
--whole_word_masking, beside evaluation records that hold theirs), and on packed rows in bf16 under the TPUEstimator's CPU path; the launcher
passes them to both phases; bad values exit 2 naming the flag. What each lever computes is
tested in process in test_training_recipe.py.
"""

import subprocess

import numpy as np
import pytest

import run_pretraining
from tests import helpers
from tests import test_data_input_pipeline_masks as mask_tests
from tests import test_run_pretraining as job
from tests import test_run_pretraining_launchers as launchers
from tests import test_run_pretraining_packed as packed

pytestmark = pytest.mark.e2e

LEVERS = {"pretraining_dropout": 0, "next_sentence_loss": False, "lr_schedule": "linear",
          "warmup_fraction": 0.25, "adam_beta2": 0.98, "adam_epsilon": 1e-8,
          "num_warmup_steps": None}
UPDATES = 4  # warmup: int(0.25 x 4) = 1 update


def _flags(values):
  """--name=value, and --noname for a False bool, of `values` (None: left out)."""
  return ["--no%s" % k if v is False else "--%s=%s" % (k, v)
          for k, v in values.items() if v is not None]


def _linear(step, peak):
  """The linear schedule by hand: warmup 1 update, then to 0 at UPDATES."""
  return peak * step if step < 1 else peak * (UPDATES - step) / (UPDATES - 1)


def _check_lever_run(out, peak):
  """The log of a run with LEVERS: the masked-LM loss alone, the linear schedule; evaluation
  without the next-sentence metrics."""
  steps = [l for l in job.read_dllog(out / "bert_dllog.json") if l["step"] not in ([], "RESTART")]
  assert [l["step"] for l in steps] == list(range(1, UPDATES + 1))
  for line in steps:
    assert "nsp_loss" not in line["data"]
    assert line["data"]["total_loss"] == line["data"]["mlm_loss"]
  # Update k is logged with the rate of its own update, that of step k - 1.
  np.testing.assert_allclose([l["data"]["learning_rate"] for l in steps],
                             [_linear(k - 1, peak) for k in range(1, UPDATES + 1)], rtol=1e-5)
  result = helpers.read_eval_results(out / "eval_results.txt")
  assert result["global_step"] == UPDATES and result["masked_lm_loss"] > 0
  assert not any(key.startswith("next_sentence") for key in result)


@pytest.fixture(scope="module")
def unlabelled(tmp_path_factory):
  """Training records without next_sentence_labels (contiguous text, no next-sentence task)."""
  root = tmp_path_factory.mktemp("unlabelled")
  rng = np.random.RandomState(5)
  for index in range(2):
    batch = helpers.random_batch(rng, 24, job.SEQ, job.CONFIG["vocab_size"], job.PRED)
    del batch["next_sentence_labels"]
    helpers.write_batch_records(root / ("part-%d.tfrecord" % index), batch)
  return str(root)


@pytest.fixture(scope="module")
def unmasked(tmp_path_factory):
  """Training records without next_sentence_labels and without masks (the input pipeline draws
  them), and the model's vocabulary."""
  root = tmp_path_factory.mktemp("unmasked")
  rng = np.random.RandomState(6)
  for index in range(2):
    batch = helpers.random_batch(rng, 24, job.SEQ, job.CONFIG["vocab_size"], job.PRED)
    helpers.write_batch_records(root / ("part-%d.tfrecord" % index),
                                {name: values for name, values in batch.items()
                                 if name not in mask_tests.MASKED + ("next_sentence_labels",)})
  vocab_file = mask_tests.write_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt",
                                      size=job.CONFIG["vocab_size"])
  return {"dir": str(root), "vocab_file": vocab_file}


def test_levers_under_horovod_with_accumulation_and_fp16_on_records_without_labels(
    job_data, unlabelled, unmasked, tmp_path):
  # Training records without masks (drawn whole words at 12%, round(32 x 0.12) = 4 a sequence),
  # evaluation records with theirs.
  out = tmp_path / "out"
  values = dict(LEVERS, bert_config_file=job_data["config"], input_files_dir=unmasked["dir"],
                vocab_file=unmasked["vocab_file"], masked_lm_prob=0.12, whole_word_masking=True,
                eval_files_dir=unlabelled, output_dir=out, max_seq_length=job.SEQ,
                max_predictions_per_seq=job.PRED, train_batch_size=4, eval_batch_size=4,
                num_accumulation_steps=2, learning_rate=1e-3, num_train_steps=UPDATES,
                save_checkpoints_steps=UPDATES, display_loss_steps=1, manual_fp16=True,
                init_loss_scale=2**10, horovod=True, do_train=True, do_eval=True,
                max_eval_steps=2)
  horovodrun = launchers._horovodrun()  # pylint: disable=protected-access
  proc = job.run_job(_flags(values), launcher=horovodrun, timeout=300)
  _check_lever_run(out, 2e-3)  # 1e-3 per worker x 2 workers
  output = proc.stdout + proc.stderr
  assert ("Training on 2 file(s) of unpacked records (%d tokens, no masks: %d predictions drawn)"
          % (job.SEQ, job.PRED)) in output
  assert ("Running evaluation on 2 file(s) of unpacked records (%d tokens, %d predictions)"
          % (job.SEQ, job.PRED)) in output
  values = job.checkpoint_values(out)
  # The next-sentence head and the pooler keep their initial values: no loss trains them, no
  # slots are kept for them; everything else was trained.
  assert "cls/seq_relationship/output_weights" in values
  assert "cls/seq_relationship/output_weights/adam_m" not in values
  assert "bert/pooler/dense/kernel/adam_v" not in values
  assert "bert/encoder/layer_0/output/dense/kernel/adam_v" in values


def test_levers_on_packed_rows_in_bf16_under_the_tpu_estimator(tmp_path):
  unpacked = packed.write_short_records(tmp_path / "unpacked", seed=12)
  rows = tmp_path / "packed"
  packed.pack(unpacked, rows)
  config = helpers.write_bert_config(tmp_path / "bert_config.json",
                                     vocab_size=packed.det.CONFIG["vocab_size"])
  out = tmp_path / "out"
  values = dict(LEVERS, bert_config_file=config, input_files_dir=rows, eval_files_dir=rows,
                output_dir=out, max_seq_length=packed.SEQ, max_predictions_per_seq=packed.PRED,
                train_batch_size=4, eval_batch_size=4, learning_rate=1e-3,
                num_train_steps=UPDATES, save_checkpoints_steps=UPDATES, display_loss_steps=1,
                bf16=True, tpu_estimator=True, do_train=True, do_eval=True, max_eval_steps=2)
  proc = job.run_job(_flags(values), timeout=300)
  _check_lever_run(out, 1e-3)
  assert ("recipe levers (docs/TRAINING.md, \"Recipe levers\"): --pretraining_dropout=0.0 "
          "--next_sentence_loss=False --lr_schedule=linear --warmup_fraction=0.25 "
          "--adam_beta2=0.98 --adam_epsilon=1e-08") in proc.stderr


@pytest.fixture(scope="module")
def job_data(tmp_path_factory):
  """test_run_pretraining.py's configuration."""
  root = tmp_path_factory.mktemp("config")
  return {"config": helpers.write_bert_config(root / "bert_config.json")}


def test_launcher_passes_the_levers_to_both_phases():
  proc = subprocess.run(
      ["bash", launchers.LAUNCHER, "--dry_run", "--launcher", "none", "--phase1_data", "/d/128",
       "--phase2_data=/d/512", "--output_dir", "/r", "--pretraining_dropout=0",
       "--next_sentence_loss=false", "--lr_schedule=linear", "--warmup_fraction", "0.06",
       "--adam_beta2=0.98", "--adam_epsilon=1e-6", "--vocab_file=/v/vocab.txt",
       "--masked_lm_prob=0.3", "--whole_word_masking=true", "--mask_token_only=true"],
      capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  commands = [line[2:].split() for line in proc.stderr.splitlines() if line.startswith("+ ")]
  assert len(commands) == 2
  for command in commands:
    for flag in ("--pretraining_dropout=0", "--nonext_sentence_loss", "--lr_schedule=linear",
                 "--warmup_fraction=0.06", "--adam_beta2=0.98", "--adam_epsilon=1e-6",
                 "--vocab_file=/v/vocab.txt", "--masked_lm_prob=0.3", "--whole_word_masking",
                 "--mask_token_only"):
      assert flag in command, flag
    # The fraction replaces the phase's warmup steps (the two exclude each other).
    assert not any(arg.startswith("--num_warmup_steps") for arg in command)


@pytest.mark.parametrize("overrides,message", [
    (dict(pretraining_dropout=1.0), "--pretraining_dropout must be in [0, 1), got 1.0"),
    (dict(warmup_fraction=0.1),
     "--warmup_fraction and --num_warmup_steps exclude each other: give one"),
    (dict(num_warmup_steps=None, warmup_fraction=1.5), "--warmup_fraction must be in [0, 1)"),
    (dict(adam_beta2=1.0), "--adam_beta2 must be in [0, 1), got 1.0"),
    (dict(adam_epsilon=0), "--adam_epsilon must be positive, got 0.0"),
    (dict(lr_schedule="linear", num_train_steps=1),
     "--num_warmup_steps (1) must be smaller than --num_train_steps (1) with "
     "--optimizer_type=lamb and --lr_schedule=linear"),
])
def test_bad_lever_values_fail_before_the_graph(job_data, tmp_path, overrides, message):
  args = job.common_flags(dict(job_data, train_dir=str(tmp_path)), tmp_path / "out",
                          do_train=True, **overrides)
  status, stderr = helpers.run_script_in_process(run_pretraining, args)
  last = stderr.strip().splitlines()[-1]
  assert status == 2 and last.startswith("run_pretraining.py: error: "), stderr[-3000:]
  assert message in last, last
  assert not (tmp_path / "out").exists()
