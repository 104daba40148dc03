"""utils/datafiles/generator.py, in this process: the options' and the vocabulary's checks name
the flag, a run writes each input's records to its output (the records themselves are checked in
tests/test_create_pretraining_data.py, on the same function), and a run that fails leaves no file
nor directory of its own making."""

import os

import pytest

import create_pretraining_data
from tests import test_create_pretraining_data as data_tests
from tests.test_create_pretraining_data import corpus  # noqa: F401  (a fixture)
from utils.data import instances
from utils.datafiles import generator


@pytest.mark.parametrize("overrides, message", [
    (dict(max_seq_length=4), r"--max_seq_length must be an integer >= 5 \(\[CLS\] A \[SEP\] B "
                             r"\[SEP\]\), got 4"),
    (dict(max_predictions_per_seq=200), "--max_predictions_per_seq must be at most "
                                        "--max_seq_length, got 200"),
    (dict(masked_lm_prob=0.0), r"--masked_lm_prob must be in \(0, 1\], got 0.0"),
    (dict(dupe_factor=0), "--dupe_factor must be an integer >= 1, got 0"),
])
def test_an_option_out_of_range_names_its_flag(overrides, message):
  with pytest.raises(ValueError, match=message):
    generator.validate_options(data_tests.options(**overrides))
  generator.validate_options(data_tests.options())  # the defaults pass


def test_a_vocabulary_without_the_special_tokens_is_refused(tmp_path):
  with pytest.raises(ValueError, match="--vocab_file: vocabulary file not found"):
    generator.load_tokenizer(str(tmp_path / "missing.txt"), True)
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\nhello\n")
  with pytest.raises(ValueError, match=r"\[CLS\]"):
    generator.load_tokenizer(str(vocab), True)


def test_each_input_goes_to_its_output_and_a_failed_run_leaves_nothing(
    corpus, tmp_path):  # noqa: F811
  inputs, vocab_file = corpus
  outputs = [str(tmp_path / "out" / ("%d.tfrecord" % i)) for i in range(len(inputs))]
  totals = generator.create_pretraining_data(inputs, outputs, vocab_file, data_tests.options(),
                                             num_workers=2)
  assert list(totals) == outputs and all(count > 0 for count in totals.values())
  assert [len(data_tests.read_examples([path])) for path in outputs] == list(totals.values())
  assert create_pretraining_data.create_pretraining_data is generator.create_pretraining_data
  empty = tmp_path / "empty.txt"
  empty.write_text("\n \n\n")
  with pytest.raises(instances.InputDataError, match="no documents in the input files"):
    generator.create_pretraining_data([str(empty)], [str(tmp_path / "new" / "a.tfrecord")],
                                      vocab_file, data_tests.options())
  assert sorted(os.listdir(str(tmp_path))) == ["empty.txt", "out"]
