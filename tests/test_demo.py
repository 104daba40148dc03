"""`make demo`, the README's second command, run as a user runs it: in a fresh clone, through make.

Turned down to about a minute (DEMO_STEPS); everything else is the demo a user gets: `make data`,
two `horovodrun --gloo` workers, evaluation, the plot, the masked-LM accuracy beside the unigram
baseline, the line quoting bench/quality.py's recorded run, and the Hugging Face export command it
prints for the user to run.
"""

import collections
import glob
import json
import math
import re
import shlex

import pytest
import tensorflow as tf

from tests import helpers

pytestmark = pytest.mark.e2e

DEMO_STEPS = 20
TIMEOUT_SECONDS = 600


def announced(output, label):
  """The path the demo announces on its `demo: LABEL   PATH` line (exactly one such line)."""
  found = re.findall(r"^demo: %s +(\S+)" % re.escape(label), output, flags=re.MULTILINE)
  assert len(found) == 1, "want one 'demo: %s' line, got %r\n%s" % (label, found, output[-4000:])
  return found[0]


def mlm_losses(log_path):
  """The per-update mlm_loss values of a run log, read from its `DLLL {json}` lines."""
  losses = []
  with open(log_path) as f:
    for line in f:
      if not line.startswith("DLLL "):
        continue
      record = json.loads(line[len("DLLL "):])
      if isinstance(record.get("step"), int) and "mlm_loss" in record.get("data", {}):
        losses.append((record["step"], float(record["data"]["mlm_loss"])))
  return losses


def results(path):
  """`key = value` lines of an eval_results.txt as a dict of floats."""
  values = {}
  with open(path) as f:
    for line in f:
      key, value = line.split(" = ")
      values[key.strip()] = float(value)
  return values


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
  """(exit status, output, clone directory) of `make demo` in a fresh clone."""
  clone = str(tmp_path_factory.mktemp("demo") / "clone")
  helpers.fresh_clone(clone)
  returncode, output = helpers.run_as_user(
      "DEMO_STEPS=%d make demo" % DEMO_STEPS, clone, TIMEOUT_SECONDS)
  assert returncode is not None, "make demo still running after %d s:\n%s" % (
      TIMEOUT_SECONDS, output[-6000:])
  return returncode, output, clone


def test_make_demo_exits_0_without_a_traceback(demo):
  returncode, output, _ = demo
  assert returncode == 0, "make demo: exit %d\n%s" % (returncode, output[-6000:])
  assert "Traceback (most recent call last)" not in output, output[-6000:]


def test_every_announced_file_exists_and_holds_the_run(demo):
  returncode, output, clone = demo
  assert returncode == 0, output[-6000:]
  out_dir = clone + "/output/demo"

  checkpoint = announced(output, "checkpoints")
  assert checkpoint == "%s/model.ckpt-%d.*" % (out_dir, DEMO_STEPS)
  suffixes = sorted(path[len(checkpoint) - 2:] for path in glob.glob(checkpoint))
  assert {".data-00000-of-00001", ".index"} <= set(suffixes), suffixes

  log = announced(output, "dllogger log")
  losses = mlm_losses(log)
  assert [step for step, _ in losses][-1] == DEMO_STEPS, losses
  # The summary line quotes the log's first and last masked-LM losses and ln(vocabulary size).
  with open(clone + "/data/demo/vocab.txt") as f:
    vocab_size = sum(1 for _ in f)
  summary = re.search(r"^demo: masked-LM loss (\S+) at the first update -> (\S+) at the last "
                      r"\(ln\(vocab\) = (\S+)\)$", output, flags=re.MULTILINE)
  assert summary, output[-4000:]
  assert [float(x) for x in summary.groups()] == pytest.approx(
      [losses[0][1], losses[-1][1], math.log(vocab_size)], abs=0.006)

  with open(announced(output, "plot"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"

  evaluation = results(announced(output, "eval results"))
  assert evaluation["global_step"] == DEMO_STEPS
  assert 0 <= evaluation["masked_lm_accuracy"] <= 1 and evaluation["masked_lm_loss"] > 0



def unigram_accuracy_by_hand(eval_dir):
  """The share of the commonest real masked token among all real masked tokens of the records."""
  counts = collections.Counter()
  for path in glob.glob(eval_dir + "/*.tfrecord"):
    for record in tf.compat.v1.io.tf_record_iterator(path):
      features = tf.train.Example.FromString(record).features.feature
      ids = features["masked_lm_ids"].int64_list.value
      weights = features["masked_lm_weights"].float_list.value
      counts.update(i for i, w in zip(ids, weights) if w > 0)
  return counts.most_common(1)[0][1] / sum(counts.values())


def test_masked_lm_accuracy_is_printed_beside_the_unigram_baseline(demo):
  returncode, output, clone = demo
  assert returncode == 0, output[-6000:]
  line = re.search(r"^demo: masked-LM accuracy (\S+) on the held-out records; always predicting "
                   r"their commonest masked token \(the unigram baseline\) scores (\S+): (\S+)x$",
                   output, flags=re.MULTILINE)
  assert line, output[-4000:]
  accuracy, unigram, ratio = (float(x) for x in line.groups())
  evaluation = results(announced(output, "eval results"))
  assert accuracy == pytest.approx(evaluation["masked_lm_accuracy"], abs=0.0005)
  assert unigram == pytest.approx(unigram_accuracy_by_hand(clone + "/data/demo/seq128/eval"),
                                  abs=0.0005)
  assert ratio == pytest.approx(evaluation["masked_lm_accuracy"] / unigram, abs=0.06)


def test_the_benchmark_line_quotes_the_recorded_run_and_its_command(demo):
  returncode, output, clone = demo
  assert returncode == 0, output[-6000:]
  with open(clone + "/docs/quality.json") as f:
    recorded = json.load(f)
  line = re.search(r"^demo: what longer pretraining buys \(bench/quality.py, (\S+) minutes.*"
                   r"masked-LM accuracy (\S+) \(unigram (\S+)\), the stdlib classifier (\S+) "
                   r"fine-tuned from the checkpoint against (\S+) from random weights "
                   r"\(means over (\d+) seeds; .*time to quality today: (.*) "
                   r"\(docs/PERFORMANCE.md\)$", output, flags=re.MULTILINE)
  assert line, output[-4000:]
  assert [float(x) for x in line.groups()[:6]] == pytest.approx(
      [recorded["budget_minutes"], recorded["mlm_accuracy"], recorded["unigram_accuracy"],
       recorded["pretrained_dev_accuracy"], recorded["random_dev_accuracy"], recorded["seeds"]],
      abs=0.0005)
  command = shlex.split(line.group(7))
  assert command[1:] == ["bench/quality.py", "--output_dir=/tmp/quality"]


def test_the_printed_export_command_writes_a_transformers_directory(demo):
  returncode, output, clone = demo
  assert returncode == 0, output[-6000:]
  lines = output.splitlines()
  index = lines.index("demo: for Hugging Face transformers (BertForPreTraining.from_pretrained),"
                      " run:")
  command = lines[index + 1].strip()
  export_dir = shlex.split(command)[-1].split("=", 1)[1]
  returncode, export_output = helpers.run_as_user(command, clone, 300)
  assert returncode == 0, export_output[-4000:]
  with open(export_dir + "/config.json") as f:
    config = json.load(f)
  with open(clone + "/output/demo/bert_config.json") as f:
    assert config["hidden_size"] == json.load(f)["hidden_size"]
  assert glob.glob(export_dir + "/model.safetensors")
  assert glob.glob(export_dir + "/vocab.txt")
