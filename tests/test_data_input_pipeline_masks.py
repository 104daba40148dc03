"""The input pipeline on records without masks (utils/data/input_pipeline.py, `InputPlan.masking`):
masks drawn per (seed, record, epoch), so a new mask each epoch, the same on a rerun, on an exact
resume and whatever the worker count; evaluation masks fixed whatever the training flags; the
TPUEstimator's params batch size; run_pretraining.py's usage errors of the masking flags.

What each mask holds is checked against the records as written here (the original tokens at the
predicted positions, n = round(real tokens x rate) predictions); the masking rules themselves are
tested against numpy in test_data_dynamic_masks.py.
"""

import types

import numpy as np
import pytest

import run_pretraining
from tests import helpers
from tests import test_data_input_pipeline as pipeline_tests
from utils.data import dynamic_masks
from utils.data import input_pipeline
from utils.data import record_layout

SEQ = 32  # 30 real tokens a record (`pipeline_tests.record_values`)
REAL = SEQ - 2
WIDTH = 6  # P
MASKED = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
LAYOUT = record_layout.Layout(False, SEQ, WIDTH, 1, dynamic_masks=True)
VOCAB_SIZE = 50  # record ids are below 50


def write_vocab(path, size=VOCAB_SIZE, special=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")):
  """A vocab.txt of `size` tokens: `special`, then words and "##" pieces in turn; returns str."""
  tokens = list(special)
  tokens += ["##p%d" % i if i % 3 == 2 else "w%d" % i for i in range(len(tokens), size)]
  path.write_text("\n".join(tokens) + "\n")
  return str(path)


def write_unmasked_files(directory, records_per_file):
  """`pipeline_tests.write_files` without the masked_lm_* features: record r holds
  `record_values(r, SEQ)`'s input_ids (r in input_ids[0]). Returns the paths."""
  paths, start = [], 0
  for index, count in enumerate(records_per_file):
    path = directory / ("part-%d.tfrecord" % index)
    with pipeline_tests.tf.io.TFRecordWriter(str(path)) as writer:
      for number in range(start, start + count):
        values = pipeline_tests.record_values(number, seq=SEQ)
        example = pipeline_tests.make_example(
            {name: value for name, value in values.items() if name not in MASKED})
        writer.write(example.SerializeToString())
    paths.append(str(path))
    start += count
  return paths


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  root = tmp_path_factory.mktemp("unmasked")
  vocab_file = write_vocab(root / "vocab.txt")
  return {"records": write_unmasked_files(root, [4, 6]), "vocab_file": vocab_file,
          "vocabulary": dynamic_masks.MaskVocabulary.from_file(vocab_file)}


def training(files, rate=0.15, **kwargs):
  """The deterministic training plan of the test records, masked at `rate`."""
  options = dynamic_masks.MaskingOptions(rate, WIDTH, whole_word=False, mask_token_only=False)
  values = dict(is_training=True, deterministic=True, seed=3, vocab_size=VOCAB_SIZE,
                masking=input_pipeline.Masking(options, files["vocabulary"]))
  values.update(kwargs)
  return input_pipeline.InputPlan(files["records"], LAYOUT, **values)


def rows(plan, batch_size=2, batches=None, params=None):
  """Every row the plan's input_fn gives (or those of the first `batches` batches): a list of
  dicts name -> numpy row."""
  got, _ = pipeline_tests.run_dataset(input_pipeline.input_fn_builder(plan, batch_size),
                                      params=params, max_batches=batches)
  return [{name: value[i] for name, value in batch.items()}
          for batch in got for i in range(len(batch["input_ids"]))]


def number_and_masks(row, rate=0.15):
  """(record number, its masks) of a masked row, after checking the row against the record it
  was made from: n = round(REAL x rate) predictions, each the original token of a real position,
  the input changed at predicted positions only, the rest of the slots padding."""
  used = row["masked_lm_weights"] > 0
  assert used.sum() == min(WIDTH, max(1, round(REAL * rate)))
  np.testing.assert_array_equal(row["masked_lm_weights"][used], 1.0)
  positions = row["masked_lm_positions"][used]
  assert list(positions) == sorted(set(positions)) and positions.max() < REAL
  original = row["input_ids"].copy()
  original[positions] = row["masked_lm_ids"][used]
  number = int(original[0])
  np.testing.assert_array_equal(original, pipeline_tests.record_values(number, seq=SEQ)[
      "input_ids"])
  assert not np.any(row["masked_lm_positions"][~used]) and not np.any(row["masked_lm_ids"][~used])
  return number, (tuple(positions), tuple(row["input_ids"][positions]))


def test_masks_change_each_epoch_and_repeat_on_a_rerun_and_a_resume(files):
  plan = training(files)
  full = rows(plan, batches=15)  # 3 epochs of the 10 records
  epochs = [dict(map(number_and_masks, full[e * 10:(e + 1) * 10])) for e in range(3)]
  assert all(sorted(epoch) == list(range(10)) for epoch in epochs)
  for number in range(10):  # a new mask every epoch
    assert len({epoch[number] for epoch in epochs}) == 3, number
  # The same plan again: the same rows; resumed after 3 batches: the rows from the 7th on.
  again = rows(plan, batches=15)
  resumed = rows(plan._replace(skip_records=6), batches=12)
  for first, second in list(zip(full, again)) + list(zip(full[6:], resumed)):
    assert first.keys() == second.keys()
    for name in first:
      np.testing.assert_array_equal(first[name], second[name], err_msg=name)
  # Another seed, other masks.
  other = dict(map(number_and_masks, rows(training(files, seed=4), batches=5)))
  assert sum(other[n] != epochs[0][n] for n in range(10)) >= 9


def test_masks_are_the_same_for_one_process_and_two_workers(files):
  one = dict(map(number_and_masks, rows(training(files), batches=5)))
  # Two workers: a file each, shuffled with their own seeds; the masks use the job's seed.
  two = {}
  for worker, count in ((0, 4), (1, 6)):
    plan = training(files, num_workers=2, worker_index=worker)
    two.update(map(number_and_masks, rows(plan, batch_size=1, batches=count)))
  assert two == one


class _Flags(types.SimpleNamespace):
  """Parsed flags as `run_pretraining._decide_masking` reads them: values, and f[name].present
  (every masking flag given)."""

  def __getitem__(self, name):
    return types.SimpleNamespace(present=name in run_pretraining.MASKING_FLAGS)


def test_evaluation_masks_are_fixed_whatever_the_training_flags(files):
  """run_pretraining.py's masking decision: the training rate applies to training records; the
  evaluation records get 15% from the fixed seed, the same rows for any rate or --seed."""
  layouts = record_layout.Layouts(record_layout.Layout(False, SEQ, 0, 1, True),
                                  record_layout.Layout(False, SEQ, 0, 1, True))

  def decided(rate):
    f = _Flags(masked_lm_prob=rate, max_predictions_per_seq=WIDTH, max_seq_length=SEQ,
               whole_word_masking=False, mask_token_only=False, vocab_file=files["vocab_file"])
    return run_pretraining._decide_masking(f, layouts, (files["records"], files["records"]),
                                           VOCAB_SIZE)

  (low_layouts, (_, low_eval)), (high_layouts, (high_train, high_eval)) = (
      decided(0.15), decided(0.2))
  assert low_eval == high_eval == input_pipeline.Masking(dynamic_masks.eval_options(WIDTH),
                                                         files["vocabulary"])
  assert high_train.options.masked_lm_prob == 0.2 and low_layouts == high_layouts
  assert high_layouts.eval.predictions == WIDTH

  def evaluation(masking, seed):
    return rows(input_pipeline.InputPlan(files["records"], high_layouts.eval, is_training=False,
                                         seed=seed, masking=masking), batch_size=4)

  fixed = evaluation(high_eval, 1)
  assert [number_and_masks(row)[0] for row in fixed] == list(range(10))  # in order, once
  for row, other in zip(fixed, evaluation(low_eval, 7)):
    for name in row:
      np.testing.assert_array_equal(row[name], other[name], err_msg=name)
  # Training at 0.2: round(30 x 0.2) = 6 predictions a record.
  trained = rows(training(files, masking=high_train), batches=5)
  assert sorted(number_and_masks(row, 0.2)[0] for row in trained) == list(range(10))


def test_packed_rows_draw_their_sequences_predictions_and_masked_records_keep_theirs(files):
  packed = record_layout.Layout(True, 16, 0, 3, dynamic_masks=True)
  unmasked = record_layout.Layouts(packed, packed._replace(dynamic_masks=False, predictions=6))
  f = _Flags(masked_lm_prob=0.3, max_predictions_per_seq=2, max_seq_length=16,
             whole_word_masking=True, mask_token_only=True, vocab_file=files["vocab_file"])
  layouts, (train, evaluation) = run_pretraining._decide_masking(
      f, unmasked, (files["records"], files["records"]), VOCAB_SIZE)
  # P = min(16, round(16 x 0.3) + 3) = 8: room for every sequence's own n; no error although
  # round(16 x 0.3) = 5 > --max_predictions_per_seq = 2 (that cap is per sequence).
  assert layouts.train == packed._replace(predictions=8)
  assert train.options == dynamic_masks.MaskingOptions(0.3, 2, True, True)
  # Evaluation records with masks: read as they are.
  assert layouts.eval == unmasked.eval and evaluation is None


def test_tpu_params_batch_size_and_static_shapes(files):
  got, structure = pipeline_tests.run_dataset(
      input_pipeline.input_fn_builder(training(files), 2), params={"batch_size": 3},
      max_batches=2)
  assert [len(batch["input_ids"]) for batch in got] == [3, 3]
  assert structure["masked_lm_positions"][1] == [3, WIDTH]
  assert structure["masked_lm_weights"][1] == [3, WIDTH]
  assert structure["input_ids"][1] == [3, SEQ]


def test_a_plan_without_its_masking_is_refused(files):
  with pytest.raises(ValueError, match="records without masks need a masking"):
    input_pipeline.input_fn_builder(training(files, masking=None), 2)
  with pytest.raises(ValueError, match="the records hold their masks"):
    input_pipeline.input_fn_builder(training(files)._replace(
        layout=record_layout.unpacked(SEQ, WIDTH)), 2)


@pytest.mark.parametrize("overrides,message", [
    (dict(vocab_file=None), "--vocab_file is required: {records} holds records without masks"),
    (dict(vocab_file="{small_vocab}"),
     "--vocab_file={small_vocab} holds 50 tokens but --bert_config_file's vocab_size is 120"),
    (dict(vocab_file="{no_mask_vocab}"), "{no_mask_vocab} lacks the special token(s) [MASK]"),
    (dict(masked_lm_prob=0.25),
     "--masked_lm_prob=0.25 masks round(32 x 0.25) = 8 tokens of a --max_seq_length=32 sequence, "
     "more than --max_predictions_per_seq=6"),
    (dict(masked_lm_prob=0), "--masked_lm_prob must be in (0, 1), got 0.0"),
])
def test_masking_flags_usage_errors(files, tmp_path, overrides, message):
  names = {"records": files["records"][0],
           "small_vocab": files["vocab_file"],
           "no_mask_vocab": write_vocab(tmp_path / "no_mask.txt", size=120,
                                        special=("[PAD]", "[UNK]", "[CLS]", "[SEP]")),
           "vocab": write_vocab(tmp_path / "vocab.txt", size=120)}
  values = {"bert_config_file": helpers.write_bert_config(tmp_path / "bert_config.json"),
            "input_file": ",".join(files["records"]), "output_dir": tmp_path / "out",
            "vocab_file": names["vocab"], "max_seq_length": SEQ, "max_predictions_per_seq": WIDTH,
            "train_batch_size": 2, "do_train": True, "num_train_steps": 1}
  values.update(overrides)
  args = ["--%s=%s" % (k, str(v).format(**names)) for k, v in values.items() if v is not None]
  status, stderr = helpers.run_script_in_process(run_pretraining, args)
  last = stderr.strip().splitlines()[-1]
  assert status == 2 and last.startswith("run_pretraining.py: error: "), stderr[-3000:]
  assert message.format(**names) in last, last
  assert not (tmp_path / "out").exists()
