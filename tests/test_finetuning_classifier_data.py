"""The classification data's checks: a bad row of any split is named (file, line, expected and
found) when it is read, and run_classifier.py reads every split before it trains."""

import os
import subprocess
import sys

import pytest

from tests import finetuning_data
from utils.core import errors
from utils.finetuning import classifier_data

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _lines(path):
  with open(path) as reader:
    return reader.read().splitlines()


def _rewrite_line(path, line_number, change):
  """Replaces line `line_number` (1-based) of a file by change(its columns) joined by tabs."""
  lines = _lines(path)
  lines[line_number - 1] = "\t".join(change(lines[line_number - 1].split("\t")))
  with open(path, "w") as writer:
    writer.write("\n".join(lines) + "\n")


@pytest.mark.parametrize("task,split,getter,line,columns,wanted", [
    ("mrpc", "train.tsv", "get_train_examples", 4, 4, 5),
    ("mrpc", "dev.tsv", "get_dev_examples", 2, 4, 5),
    ("mrpc", "test.tsv", "get_test_examples", 9, 4, 5),
    ("cola", "dev.tsv", "get_dev_examples", 1, 3, 4),
    ("mnli", "dev_matched.tsv", "get_dev_examples", 3, 10, 11),
    ("xnli", "xnli.dev.tsv", "get_dev_examples", 5, 7, 8),
])
def test_row_without_a_column_names_file_line_and_counts(tmp_path, task, split, getter, line,
                                                         columns, wanted):
  data_dir = str(tmp_path / task)
  finetuning_data.write_glue(data_dir, task, finetuning_data.rng(1), n_train=8, n_dev=8)
  path = os.path.join(data_dir, split)
  _rewrite_line(path, line, lambda row: row[:columns])
  with pytest.raises(ValueError) as raised:
    getattr(classifier_data.get_processor(task, data_dir), getter)(data_dir)
  message = str(raised.value)
  assert message.startswith("%s: line %d: " % (path, line)), message
  assert "%d tab-separated column(s)" % columns in message
  assert "at least %d" % wanted in message


def test_unknown_label_names_file_line_label_and_the_known_labels(tmp_path):
  data_dir = str(tmp_path / "mrpc")
  finetuning_data.write_glue(data_dir, "mrpc", finetuning_data.rng(2), n_train=8, n_dev=8)
  path = os.path.join(data_dir, "dev.tsv")
  _rewrite_line(path, 6, lambda row: ["2"] + row[1:])
  with pytest.raises(ValueError) as raised:
    classifier_data.MrpcProcessor().get_dev_examples(data_dir)
  assert str(raised.value) == ("%s: line 6: label '2' is not one of the task's labels: 0, 1"
                               % path)
  # Test rows carry no label: their first column is not checked.
  _rewrite_line(os.path.join(data_dir, "test.tsv"), 3, lambda row: ["whatever"] + row[1:])
  assert len(classifier_data.MrpcProcessor().get_test_examples(data_dir)) == 8


def test_good_files_read_as_before(tmp_path):
  # Every task's generated files pass the checks, with one example per data row.
  for task in ("mrpc", "cola", "mnli"):
    data_dir = str(tmp_path / task)
    finetuning_data.write_glue(data_dir, task, finetuning_data.rng(3), n_train=8, n_dev=6)
    processor = classifier_data.get_processor(task, data_dir)
    assert len(processor.get_train_examples(data_dir)) == 8
    assert len(processor.get_dev_examples(data_dir)) == 6
    assert len(processor.get_test_examples(data_dir)) == 6


def test_a_file_that_is_not_utf8_is_refused_naming_the_byte_and_offset(tmp_path):
  data_dir = str(tmp_path / "mrpc")
  finetuning_data.write_glue(data_dir, "mrpc", finetuning_data.rng(3), n_train=4, n_dev=2)
  path = os.path.join(data_dir, "train.tsv")
  with open(path, "rb") as f:
    content = f.read()
  with open(path, "wb") as f:
    f.write(content[:40] + b"\xe9t\xe9" + content[40:])  # Latin-1 "\u00e9t\u00e9"
  with pytest.raises(errors.UsageError) as raised:
    classifier_data.MrpcProcessor().get_train_examples(data_dir)
  assert str(raised.value) == "%s: not UTF-8 text: byte 233 (0xe9) at offset 40" % path


def test_a_field_over_the_csv_size_limit_is_refused_naming_the_line(tmp_path):
  data_dir = str(tmp_path / "cola")
  finetuning_data.write_glue(data_dir, "cola", finetuning_data.rng(3), n_train=4, n_dev=2)
  _rewrite_line(os.path.join(data_dir, "train.tsv"), 3,
                lambda row: row[:3] + ["x" * 200000])
  with pytest.raises(errors.UsageError, match=r"train.tsv: line 3: field larger than field "
                                              r"limit \(131072\)"):
    classifier_data.ColaProcessor().get_train_examples(data_dir)


def _regression_input(name):
  """A saved fuzz input: its first byte the target's task and split, then the files."""
  with open(os.path.join(REPO_ROOT, "fuzz", "regressions", "glue_tsv", name), "rb") as f:
    return f.read()


def test_a_stdlib_labels_file_without_a_label_is_refused(tmp_path):
  content = _regression_input("stdlib-empty-labels")
  assert b"\x1e" not in content  # no labels part: an empty labels.txt
  (tmp_path / "labels.txt").write_text("")
  (tmp_path / "test.tsv").write_bytes(content[1:])
  with pytest.raises(errors.UsageError) as raised:
    classifier_data.get_processor("stdlib", str(tmp_path)).get_test_examples(str(tmp_path))
  assert str(raised.value) == ("%s: no label (expected one label a line)"
                               % (tmp_path / "labels.txt"))


def _run_classifier(data_dir, out, tmp_path, **extra):
  vocab = str(tmp_path / "vocab.txt")
  vocab_size = finetuning_data.write_vocab(vocab)
  config = str(tmp_path / "bert_config.json")
  finetuning_data.write_bert_config(config, vocab_size)
  values = dict(task_name="mrpc", data_dir=data_dir, vocab_file=vocab, bert_config_file=config,
                output_dir=out, max_seq_length=32, train_batch_size=4, num_train_epochs=1,
                do_train=True, do_eval=True, do_predict=True)
  values.update(extra)
  args = ["--%s=%s" % (k, v) for k, v in values.items()]
  return subprocess.run([sys.executable, "run_classifier.py"] + args, capture_output=True,
                        text=True, timeout=180, cwd=REPO_ROOT)


@pytest.mark.e2e
@pytest.mark.parametrize("split,line,change,expected", [
    ("dev.tsv", 5, lambda row: row[:3], "line 5: 3 tab-separated column(s)"),
    ("test.tsv", 2, lambda row: row[:4], "line 2: 4 tab-separated column(s)"),
    ("train.tsv", 7, lambda row: ["yes"] + row[1:], "line 7: label 'yes' is not one of"),
    ("train.tsv", 4, lambda row: row[:4], "line 4: 4 tab-separated column(s)"),
])
def test_bad_row_of_any_split_ends_the_run_before_training(tmp_path, split, line, change,
                                                           expected):
  data_dir = str(tmp_path / "mrpc")
  finetuning_data.write_glue(data_dir, "mrpc", finetuning_data.rng(4), n_train=8, n_dev=8)
  _rewrite_line(os.path.join(data_dir, split), line, change)
  out = tmp_path / "out"
  proc = _run_classifier(data_dir, out, tmp_path)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert os.path.join(data_dir, split) + ": " + expected in proc.stderr, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr
  assert "Running training" not in proc.stderr  # found before training, not after it
  assert not out.exists()  # nothing written
