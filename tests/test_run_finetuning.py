"""run_squad.py and run_classifier.py end to end: real processes, a tiny model, outer timeouts.

- From the same random checkpoint, our predictions / eval numbers equal the original release's.
- fp16 fine-tuning reaches the fp32 run's accuracy within 1 point, with finite weights.
- 2 Horovod workers with batch B give the weights of one process with batch 2B; only rank 0
  writes predictions.
- The release's scripts, unchanged, train on our modules with a finite, falling loss.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import modeling
import run_classifier
import run_squad
from tests import finetuning_data
from tests import helpers
from utils.runlog import dllogger_setup

pytestmark = pytest.mark.e2e

_tf1 = tf.compat.v1
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN_DIR = os.path.dirname(sys.executable)
SEQ = 48
SQUAD = dict(max_seq_length=SEQ, doc_stride=16, max_query_length=12, n_best_size=10,
             max_answer_length=10)


def run_side_by_side(commands, timeout=300):
  """Runs python commands (argument lists) at once (`helpers.run_side_by_side`); returns
  [(returncode, stderr)] in order."""
  return [(code, err) for code, _, err in helpers.run_side_by_side(
      [[sys.executable] + list(args) for args in commands], timeout)]


def run(args, timeout=300, launcher=()):
  """Runs a command from the repository root; returns the CompletedProcess (raises on failure)."""
  proc = subprocess.run(list(launcher) + [sys.executable] + list(args), capture_output=True,
                        text=True, timeout=timeout, cwd=REPO_ROOT)
  if proc.returncode != 0:
    raise AssertionError("exit %d: %s\n%s\n%s" % (proc.returncode, args[:3], proc.stdout[-3000:],
                                                  proc.stderr[-6000:]))
  return proc


def flag_list(values):
  return ["--%s=%s" % (k, v) for k, v in values.items() if v is not None]


def ours(script, values, **kwargs):
  return run([script] + flag_list(values), **kwargs)


def all_succeed(commands, timeout=300):
  """Runs python commands side by side (`run_side_by_side`); raises naming one that failed.

  Returns:
    their stderr, in order.
  """
  results = run_side_by_side(commands, timeout)
  for args, (returncode, stderr) in zip(commands, results):
    if returncode != 0:
      raise AssertionError("exit %d: %s\n%s" % (returncode, args[:3], stderr[-6000:]))
  return [stderr for _, stderr in results]


def assert_start_line(stderr, script, command, precision, num_train_steps, num_warmup_steps):
  """The run of `command` (the script's file name, then its flags) printed its start line exactly
  once, naming `precision` and its flag, with this machine's device and CPU units
  (tests/test_runlog_start_line.py has the exact strings)."""
  lines = helpers.start_lines(stderr, script.PROGRAM)
  assert len(lines) == 1, stderr[-3000:]
  assert "] %s: precision %s" % (script.PROGRAM, precision) in lines[0], lines[0]
  assert lines[0].endswith(helpers.expected_start_line(script, command[1:], num_train_steps,
                                                       num_warmup_steps)), lines[0]


def original_and_ours(script, original_values, our_values):
  """The original release's `script` and ours (`script`.py), side by side; raises on a failure."""
  all_succeed([["-m", "tests.reference.original_bert", script, "--"]
               + flag_list(original_values), [script + ".py"] + flag_list(our_values)])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """Vocabulary, config (dropout 0.1), SQuAD v1.1 / v2.0, MRPC, and a random checkpoint with
  both heads (the classifier's for 2 labels)."""
  root = tmp_path_factory.mktemp("finetuning")
  vocab = str(root / "vocab.txt")
  vocab_size = finetuning_data.write_vocab(vocab)
  config = str(root / "bert_config.json")
  finetuning_data.write_bert_config(config, vocab_size, max_position_embeddings=64)
  config_no_dropout = str(root / "bert_config_no_dropout.json")
  finetuning_data.write_bert_config(config_no_dropout, vocab_size, max_position_embeddings=64,
                                    dropout=0.0)
  for version_2 in (False, True):
    finetuning_data.write_squad(str(root / ("squad%d.json" % version_2)), version_2, repeat=2)
  finetuning_data.write_glue(str(root / "mrpc"), "mrpc", finetuning_data.rng(5), n_train=16,
                             n_dev=12)
  checkpoint = str(root / "random" / "model.ckpt")
  with tf.Graph().as_default():
    ids = tf.zeros([2, SEQ], tf.int32)
    bert_config = modeling.BertConfig.from_json_file(config)
    run_squad.create_model(bert_config, False, ids, ids, ids, False)
    run_classifier.classifier_head(tf.zeros([2, bert_config.hidden_size]), tf.zeros([2], tf.int32),
                                   2)
    with _tf1.Session() as session:
      session.run(_tf1.global_variables_initializer())
      helpers.randomize_variables(session, _tf1.global_variables(), np.random.RandomState(0),
                                  scale=0.2)
      _tf1.train.Saver().save(session, checkpoint)
  return {"root": root, "vocab": vocab, "config": config, "config_no_dropout": config_no_dropout,
          "checkpoint": checkpoint,
          "squad": [str(root / "squad0.json"), str(root / "squad1.json")],
          "mrpc": str(root / "mrpc")}


def read_json(path):
  with open(path) as reader:
    return json.load(reader)


def checkpoint_values(directory):
  checkpoint = tf.train.latest_checkpoint(str(directory))
  assert checkpoint, "no checkpoint in %s" % directory
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name, _ in tf.train.list_variables(checkpoint)}


@pytest.mark.parametrize("version_2", [False, True])
def test_squad_predictions_equal_the_originals(files, tmp_path, version_2):
  values = dict(SQUAD, vocab_file=files["vocab"], bert_config_file=files["config"],
                init_checkpoint=files["checkpoint"], predict_file=files["squad"][version_2],
                do_predict=True, predict_batch_size=4, version_2_with_negative=version_2,
                null_score_diff_threshold=-1.0)
  original_and_ours("run_squad", dict(values, output_dir=tmp_path / "original"),
                    dict(values, output_dir=tmp_path / "ours"))
  names = ["predictions", "nbest_predictions"] + (["null_odds"] if version_2 else [])
  for name in names:
    want = read_json(tmp_path / "original" / (name + ".json"))
    got = read_json(tmp_path / "ours" / (name + ".json"))
    assert list(got) == list(want), name
    if name == "predictions":
      assert got == want
      assert len(set(got.values())) > 3  # the random model gives varied answers
    elif name == "null_odds":
      np.testing.assert_allclose([got[k] for k in want], list(want.values()), atol=1e-4)
    else:
      for qid, entries in want.items():
        assert [e["text"] for e in got[qid]] == [e["text"] for e in entries], qid
        for key in ("probability", "start_logit", "end_logit"):
          np.testing.assert_allclose([e[key] for e in got[qid]], [e[key] for e in entries],
                                     atol=1e-4, err_msg="%s %s" % (qid, key))
  assert not os.path.exists(tmp_path / "original" / "eval_results.txt")
  # Ours scores the answers (the predict file carries them), by the scorer's definition.
  scores = helpers.read_eval_results(tmp_path / "ours" / "eval_results.txt")
  from utils.finetuning import squad_eval  # pylint: disable=g-import-not-at-top
  expected = squad_eval.evaluate(read_json(files["squad"][version_2])["data"],
                                 read_json(tmp_path / "original" / "predictions.json"))
  assert scores["exact_match"] == pytest.approx(expected["exact_match"])
  assert scores["f1"] == pytest.approx(expected["f1"])


@pytest.mark.e2e
def test_squad_with_bf16_predicts_like_fp32_and_trains(files, tmp_path):
  values = dict(SQUAD, vocab_file=files["vocab"], bert_config_file=files["config"],
                init_checkpoint=files["checkpoint"], predict_file=files["squad"][0],
                do_predict=True, predict_batch_size=4)
  commands = [["run_squad.py"] + flag_list(dict(values, output_dir=tmp_path / "fp32")),
              ["run_squad.py"] + flag_list(dict(values, output_dir=tmp_path / "bf16", bf16=True)),
              ["run_squad.py"] + flag_list(dict(
                  values, output_dir=tmp_path / "bf16_train", bf16=True, do_train=True,
                  train_file=files["squad"][0], train_batch_size=4, num_train_epochs=1,
                  learning_rate=2e-3, warmup_proportion=0.0))]
  fp32_err, bf16_err, train_err = all_succeed(commands, timeout=600)
  fp32 = read_json(tmp_path / "fp32" / "nbest_predictions.json")
  bf16 = read_json(tmp_path / "bf16" / "nbest_predictions.json")
  assert list(bf16) == list(fp32)
  # The best span's logits from the same checkpoint: within bf16's rounding (tests/test_bf16.py
  # derives <= 19u on the encoder output of 2 layers; the span head sums it over the hidden
  # width with weights of norm ~1, so 32u of the largest logit is stated) and not identical.
  logits = {name: np.array([[e["start_logit"], e["end_logit"]]
                            for qid in fp32 for e in run[qid][:1]])
            for name, run in (("fp32", fp32), ("bf16", bf16))}
  scale = max(1.0, np.abs(logits["fp32"]).max())
  np.testing.assert_allclose(logits["bf16"], logits["fp32"], atol=32 * 2.0 ** -8 * scale)
  assert not np.array_equal(logits["bf16"], logits["fp32"])
  # Training with --bf16: the checkpoint keeps the release's fp32 variables, moved by training.
  trained = checkpoint_values(tmp_path / "bf16_train")
  initial = {name: tf.train.load_variable(files["checkpoint"], name)
             for name, _ in tf.train.list_variables(files["checkpoint"])}
  assert trained["global_step"] >= 1
  for name in ("bert/embeddings/word_embeddings", "cls/squad/output_weights"):
    assert trained[name].dtype == np.float32
  assert not np.array_equal(trained["bert/encoder/layer_0/output/dense/kernel"],
                            initial["bert/encoder/layer_0/output/dense/kernel"])
  assert os.path.exists(tmp_path / "bf16_train" / "predictions.json")
  # Each run says once what it computes in and why (fp32 by default, bf16 by its flag, with the
  # CPU's bf16 units), and its sizes: the updates of one epoch.
  assert_start_line(fp32_err, run_squad, commands[0], "fp32 (default); ", 0, 0)
  assert_start_line(bf16_err, run_squad, commands[1], "bf16 (--bf16; ", 0, 0)
  assert_start_line(train_err, run_squad, commands[2], "bf16 (--bf16; ",
                    int(trained["global_step"]), 0)


def test_classifier_eval_and_predictions_equal_the_originals(files, tmp_path):
  values = dict(task_name="MRPC", data_dir=files["mrpc"], vocab_file=files["vocab"],
                bert_config_file=files["config"], init_checkpoint=files["checkpoint"],
                do_eval=True, do_predict=True, max_seq_length=32, eval_batch_size=5,
                predict_batch_size=5)
  original_and_ours("run_classifier", dict(values, output_dir=tmp_path / "original"),
                    dict(values, output_dir=tmp_path / "ours"))
  want = helpers.read_eval_results(tmp_path / "original" / "eval_results.txt")
  got = helpers.read_eval_results(tmp_path / "ours" / "eval_results.txt")
  assert sorted(got) == sorted(want) == ["eval_accuracy", "eval_loss", "global_step", "loss"]
  for key in want:
    assert got[key] == pytest.approx(want[key], abs=1e-5), key
  np.testing.assert_allclose(np.loadtxt(tmp_path / "ours" / "test_results.tsv"),
                             np.loadtxt(tmp_path / "original" / "test_results.tsv"), atol=1e-5)


def _sentiment_command(files, data_dir, out, **extra):
  values = dict(task_name="cola", data_dir=data_dir, vocab_file=files["vocab"],
                bert_config_file=files["config"], init_checkpoint=files["checkpoint"],
                output_dir=out, do_train=True, do_eval=True, max_seq_length=16,
                train_batch_size=16, eval_batch_size=50, num_train_epochs=3, learning_rate=2e-3,
                deterministic_run=True, save_checkpoints_steps=1000)
  values.update(extra)
  return ["run_classifier.py"] + flag_list(values)


@pytest.mark.e2e
def test_fp16_and_bf16_fine_tuning_match_fp32_accuracy_and_updates_are_logged(files, tmp_path):
  data_dir = str(tmp_path / "sentiment")
  finetuning_data.write_sentiment(data_dir, finetuning_data.rng(11), n_train=320, n_dev=200)
  commands = [_sentiment_command(files, data_dir, tmp_path / "fp32"),
              _sentiment_command(files, data_dir, tmp_path / "fp16", manual_fp16=True),
              _sentiment_command(files, data_dir, tmp_path / "bf16", bf16=True)]
  errs = all_succeed(commands, timeout=900)
  # Each run's start line names its precision and the flag that chose it: 60 updates, 6 of
  # warmup (below).
  for err, command, precision in zip(errs, commands, ("fp32 (default); ", "fp16 (--manual_fp16); ",
                                                      "bf16 (--bf16; ")):
    assert_start_line(err, run_classifier, command, precision, 60, 6)
  fp32, fp16, bf16 = (
      helpers.read_eval_results(tmp_path / name / "eval_results.txt")["eval_accuracy"]
      for name in ("fp32", "fp16", "bf16"))
  assert fp32 >= 0.9  # the task was learnt (chance is 0.5)
  # One dllogger line per 10 updates (--display_loss_steps) and the first: 320 / 16 x 3 epochs =
  # 60 updates, 6 of warmup. Update k uses the rate of step k - 1: linear warmup 2e-3 * s / 6,
  # then linear decay to 0 at step 60, through 2e-3 at the end of warmup.
  lines = dict(dllogger_setup.read_log(str(tmp_path / "fp32" / "bert_dllog.json"))[0])
  assert sorted(lines) == [1, 10, 20, 30, 40, 50, 60]
  for step, data in lines.items():
    assert sorted(data) == ["avg_loss_step", "global_norm", "learning_rate", "throughput_train",
                            "total_loss"], step
    s = step - 1
    rate = 2e-3 * s / 6 if s < 6 else 2e-3 * (60 - s) / (60 - 6)
    assert data["learning_rate"] == pytest.approx(rate, rel=1e-5, abs=1e-12), step
    assert data["throughput_train"] > 0 and np.isfinite(data["total_loss"])
  assert lines[60]["total_loss"] < 0.5 * lines[1]["total_loss"]  # ln 2 at the start
  assert abs(fp16 - fp32) <= 0.01
  # bf16: 2 of the 200 dev examples may flip (a logit's relative error of a few 2^-8 moves the
  # examples nearest the decision boundary).
  assert abs(bf16 - fp32) <= 0.01
  fp32_values = checkpoint_values(tmp_path / "fp32")
  for precision in ("fp16", "bf16"):
    values = checkpoint_values(tmp_path / precision)
    if precision == "bf16":  # the same variables: no loss scale
      assert set(values) == set(fp32_values)
    for name, value in values.items():
      if np.issubdtype(np.asarray(value).dtype, np.floating):
        assert np.all(np.isfinite(value)), name
        assert np.asarray(value).dtype == np.float32, name


def _horovodrun():
  return [os.path.join(BIN_DIR, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo"]


def test_two_workers_equal_one_with_twice_the_batch_and_only_rank0_predicts(files, tmp_path):
  # Without dropout: each worker draws its own masks, one process other ones.
  values = dict(SQUAD, vocab_file=files["vocab"], bert_config_file=files["config_no_dropout"],
                init_checkpoint=files["checkpoint"], train_file=files["squad"][0],
                predict_file=files["squad"][0], do_train=True, do_predict=True,
                num_train_epochs=1, deterministic_run=True, warmup_proportion=0.0)
  ours("run_squad.py", dict(values, output_dir=tmp_path / "one", train_batch_size=4,
                            learning_rate=2e-3))
  ours("run_squad.py", dict(values, output_dir=tmp_path / "two", train_batch_size=2,
                            learning_rate=1e-3, horovod=True), launcher=_horovodrun(),
       timeout=600)
  one, two = checkpoint_values(tmp_path / "one"), checkpoint_values(tmp_path / "two")
  helpers_initial = {name: tf.train.load_variable(files["checkpoint"], name)
                     for name, _ in tf.train.list_variables(files["checkpoint"])}
  assert one["global_step"] == two["global_step"] == 3  # 14 questions / 4 per update
  # Equal up to the order of float sums (batch 4 vs two averaged batches of 2): an update
  # (learning rate 2e-3) on other examples would move the weights by ~1e-3.
  moved = max(np.abs(value - helpers_initial[name]).max() for name, value in one.items()
              if name in helpers_initial)
  assert moved > 1e-3
  for name, value in one.items():
    np.testing.assert_allclose(two[name], value, rtol=1e-4, atol=2e-5, err_msg=name)
  assert os.path.exists(tmp_path / "two" / "predictions.json")
  worker_files = os.listdir(tmp_path / "two" / "worker_1")
  assert not [n for n in worker_files if n.endswith(".json") or n.startswith("model.ckpt")]


def test_deterministic_fine_tuning_keeps_dropout_with_keyed_masks(files, tmp_path):
  """--deterministic_run trains the graph users train: dropout stays on (encoder and classifier
  head), each mask keyed on (seed, micro-step, rank, layer, site), so two runs are bit-identical;
  a dropout-free config gives other weights."""
  squad = dict(SQUAD, vocab_file=files["vocab"], init_checkpoint=files["checkpoint"],
               train_file=files["squad"][0], do_train=True, num_train_epochs=2,
               train_batch_size=4, learning_rate=2e-3, deterministic_run=True,
               save_checkpoints_steps=1000)
  data_dir = tmp_path / "mrpc"
  finetuning_data.write_glue(str(data_dir), "mrpc", finetuning_data.rng(9), n_train=16, n_dev=4)
  classifier = dict(task_name="MRPC", data_dir=data_dir, vocab_file=files["vocab"],
                    bert_config_file=files["config_no_dropout"],
                    init_checkpoint=files["checkpoint"], do_train=True, max_seq_length=32,
                    train_batch_size=4, num_train_epochs=2, learning_rate=2e-3,
                    deterministic_run=True, save_checkpoints_steps=1000)
  runs = {"squad_a": ("run_squad.py", dict(squad, bert_config_file=files["config"])),
          "squad_b": ("run_squad.py", dict(squad, bert_config_file=files["config"])),
          "squad_off": ("run_squad.py", dict(squad, bert_config_file=files["config_no_dropout"])),
          # The encoder without dropout: only the head's own dropout (0.1, the release's) acts.
          "head_a": ("run_classifier.py", classifier),
          "head_b": ("run_classifier.py", classifier),
          "head_seed": ("run_classifier.py", dict(classifier, seed=7))}
  all_succeed([[script] + flag_list(dict(values, output_dir=tmp_path / name))
               for name, (script, values) in runs.items()], timeout=600)
  got = {name: checkpoint_values(tmp_path / name) for name in runs}
  initial = {name: tf.train.load_variable(files["checkpoint"], name)
             for name, _ in tf.train.list_variables(files["checkpoint"])}
  for a, b, c in (("squad_a", "squad_b", "squad_off"), ("head_a", "head_b", "head_seed")):
    assert sorted(got[a]) == sorted(got[b])
    for name in got[a]:
      np.testing.assert_array_equal(got[a][name], got[b][name], err_msg="%s %s" % (a, name))
    kernel = "bert/encoder/layer_0/attention/self/query/kernel"
    assert np.abs(got[a][kernel] - initial[kernel]).max() > 1e-4  # trained
    # Other masks (dropout off, or another seed) give other weights.
    assert np.abs(got[a][kernel] - got[c][kernel]).max() > 1e-6, (a, c)
  # The micro-step counter keys the masks: it counted every micro-step.
  assert got["squad_a"]["micro_step"] == got["squad_a"]["global_step"] > 0
  assert "micro_step" not in got["squad_off"]  # no dropout anywhere: no counter


def training_losses(output_dir):
  """The per-step training loss summaries of the Estimator's event files, in step order."""
  losses = {}
  for path in sorted(output_dir.glob("events.out.tfevents.*")):
    for event in _tf1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        # "loss", or "loss_1" when the graph already has an op named loss.
        if re.fullmatch(r"loss(_\d+)?", value.tag):
          losses[event.step] = value.simple_value
  return [losses[step] for step in sorted(losses)]


# The release trains unseeded and with dropout, so each case needs a task its model learns every
# time: SQuAD's 14 answers; MRPC pairs whose two sentences both say the label's sentiment, from
# the random checkpoint (the release's 0.02 initialisation of this tiny model hardly moves in 64
# updates), which also takes the release's init_checkpoint path through our modeling. MRPC's loss
# drops to near 0 at a random update; at 2e-3 for 64 updates 2 runs of 12 stayed at chance (one
# of 20 for 128 updates), at 1e-3 for 128 updates none of 40 did (last thirds 0.001-0.021).
@pytest.mark.parametrize("script", ["run_squad", "run_classifier"])
def test_release_scripts_train_on_our_modules(files, tmp_path, script):
  values = dict(vocab_file=files["vocab"], bert_config_file=files["config"],
                output_dir=tmp_path / "out", do_train=True, train_batch_size=8,
                learning_rate=1e-3, num_train_epochs=12, warmup_proportion=0.1,
                save_checkpoints_steps=1000)
  if script == "run_squad":
    values.update(SQUAD, train_file=files["squad"][0])
  else:
    data_dir = tmp_path / "mrpc"
    finetuning_data.write_glue(str(data_dir), "mrpc", finetuning_data.rng(7), n_train=128,
                               n_dev=4)
    values.update(task_name="MRPC", data_dir=data_dir, max_seq_length=32,
                  init_checkpoint=files["checkpoint"], num_train_epochs=8, learning_rate=1e-3)
  run(["-m", "tests.reference.original_bert", "on_our_modules", script, "--"]
      + flag_list(values), timeout=600)
  losses = training_losses(tmp_path / "out")
  assert len(losses) >= 10, losses
  assert np.all(np.isfinite(losses))
  # Falling: the last third of the run's losses below the first third (thirds, not single points:
  # the release's scripts train with dropout and an unseeded initialisation).
  third = len(losses) // 3
  assert np.mean(losses[-third:]) < np.mean(losses[:third]), losses


def test_extract_features_runs_on_our_modules(files, tmp_path):
  input_file = tmp_path / "input.txt"
  input_file.write_text("the cat sat on the mat ||| the dog ran in the park\nPython was good.\n")
  output_file = tmp_path / "features.jsonl"
  run(["-m", "tests.reference.original_bert", "on_our_modules", "extract_features", "--"]
      + flag_list(dict(input_file=input_file, output_file=output_file, vocab_file=files["vocab"],
                       bert_config_file=files["config"], init_checkpoint=files["checkpoint"],
                       layers="-1,-2", max_seq_length=16, batch_size=2)))
  lines = [json.loads(line) for line in output_file.read_text().splitlines()]
  assert len(lines) == 2
  assert lines[0]["features"][0]["token"] == "[CLS]"
  assert len(lines[0]["features"][0]["layers"][0]["values"]) == 32


BAD_FLAGS = [
    ("run_squad.py", dict(), "one of --do_train, --do_predict, --export_dir is required"),
    ("run_squad.py", dict(do_predict=True), "--do_predict needs --predict_file"),
    ("run_classifier.py", dict(do_eval=True, task_name="sst"), "unknown task 'sst'"),
    # The rules of the typed configurations (`FinetuningConfig`, `SquadConfig`), in the scripts.
    ("run_squad.py", dict(do_train=True, do_eval=True), "--do_eval is not a flag of run_squad.py"),
    ("run_squad.py", dict(do_predict=True, predict_file="x.json", doc_stride=0),
     "--doc_stride must be >= 1, got 0"),
    ("run_squad.py", dict(do_predict=True, predict_file="x.json", max_seq_length=48,
                          max_query_length=45),
     "--max_seq_length (48) must be greater than --max_query_length (45) + 3"),
    ("run_classifier.py", dict(do_predict=True, task_name="mrpc", predict_batch_size=0),
     "--predict_batch_size must be >= 1, got 0"),
]


def test_bad_flags_exit_2_naming_the_problem(files, tmp_path):
  # In this process, before any graph (the scripts' end-to-end tests run the real processes).
  scripts = {"run_squad.py": run_squad, "run_classifier.py": run_classifier}
  for index, (script, values, message) in enumerate(BAD_FLAGS):
    status, stderr = helpers.run_script_in_process(scripts[script], flag_list(dict(
        vocab_file=files["vocab"], bert_config_file=files["config"],
        output_dir=tmp_path / str(index),
        data_dir=files["mrpc"] if script == "run_classifier.py" else None, **values)))
    assert status == 2, (script, values, stderr[-2000:])
    assert stderr.strip().splitlines()[-1].startswith("%s: error: " % script), stderr[-2000:]
    assert message in stderr, (script, values, stderr[-2000:])
