"""SQuAD and classifier data: our examples, features and answers equal the original release's.

The original's run_squad.py / run_classifier.py functions run in a subprocess
(tests/reference/original_bert.py) on the same files; answers are compared for the same random
logits.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tokenization
from tests import conftest
from tests import finetuning_data
from utils.finetuning import classifier_data
from utils.finetuning import squad_data

pytestmark = pytest.mark.e2e

MAX_SEQ_LENGTH = 48
# Low enough that random logits answer some questions with nothing, and some not.
NULL_THRESHOLD = -2.0
SQUAD_FLAGS = dict(max_seq_length=MAX_SEQ_LENGTH, doc_stride=16, max_query_length=12,
                   n_best_size=10, max_answer_length=10)


def _original(command, own_args, script_flags):
  args = [sys.executable, "-m", "tests.reference.original_bert", command] + own_args + ["--"] + [
      "--%s=%s" % (name, value) for name, value in script_flags.items()]
  subprocess.run(args, cwd=conftest.REPO_ROOT, check=True, timeout=300,
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _feature_dict(feature):
  row = {name: getattr(feature, name) for name in (
      "unique_id", "example_index", "doc_span_index", "tokens", "input_ids", "input_mask",
      "segment_ids", "start_position", "end_position", "is_impossible")}
  row["token_to_orig_map"] = {str(k): v for k, v in feature.token_to_orig_map.items()}
  row["token_is_max_context"] = {str(k): v for k, v in feature.token_is_max_context.items()}
  return row


@pytest.mark.parametrize("version_2", [False, True])
def test_squad_examples_features_and_answers_equal_the_originals(tmp_path, version_2):
  vocab = str(tmp_path / "vocab.txt")
  finetuning_data.write_vocab(vocab)
  data = str(tmp_path / "squad.json")
  finetuning_data.write_squad(data, version_2)
  out = tmp_path / "original"
  out.mkdir()
  seed = 7
  _original("squad_features", ["--out", str(out / "features.json"), "--logits_seed", str(seed)],
            dict(SQUAD_FLAGS, vocab_file=vocab, output_dir=out, train_file=data,
                 predict_file=data, version_2_with_negative=version_2,
                 null_score_diff_threshold=NULL_THRESHOLD))
  with open(out / "features.json") as reader:
    expected = json.load(reader)

  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  for is_training, split in ((True, "train"), (False, "predict")):
    examples = squad_data.read_squad_examples(data, is_training, version_2)
    features = []
    squad_data.convert_examples_to_features(examples, tokenizer, MAX_SEQ_LENGTH, 16, 12,
                                            is_training, features.append)
    assert [vars(e) for e in examples] == expected[split]["examples"], split
    assert [_feature_dict(f) for f in features] == expected[split]["features"], split
    # The data set exercises what it is meant to: several windows; answers inside a window.
    assert max(f.doc_span_index for f in features) >= 2
    if is_training:
      assert any(f.start_position > 0 for f in features)

  rng = np.random.RandomState(seed)
  results = [squad_data.RawResult(f.unique_id,
                                  [float(x) for x in rng.normal(size=MAX_SEQ_LENGTH)],
                                  [float(x) for x in rng.normal(size=MAX_SEQ_LENGTH)])
             for f in features]
  predictions, nbest, null_odds = squad_data.compute_predictions(
      examples, features, results, SQUAD_FLAGS["n_best_size"], SQUAD_FLAGS["max_answer_length"],
      True, version_2, NULL_THRESHOLD)
  outputs = [("predictions", predictions), ("nbest_predictions", nbest)]
  if version_2:
    outputs.append(("null_odds", null_odds))
    assert "" in predictions.values() and any(predictions.values())
  for name, ours in outputs:
    with open(out / (name + ".json")) as reader:
      assert json.load(reader) == json.loads(json.dumps(ours)), name


def test_final_text_maps_tokens_back_to_the_original_characters():
  assert squad_data.get_final_text("steve smith", "Steve Smith's", True) == "Steve Smith"
  assert squad_data.get_final_text("1895", "(1895-1943).", True) == "1895"
  # Not found: the whole original text.
  assert squad_data.get_final_text("paris", "London", True) == "London"


def test_doc_spans_and_max_context_by_hand():
  # 10 tokens, windows of 4, stride 3: [0,4), [3,7), [6,10).
  spans = squad_data.doc_spans(10, 4, 3)
  assert spans == [(0, 4), (3, 4), (6, 4)]
  # Token 3: window 0 gives min(3, 0) = 0, window 1 gives min(0, 3) = 0: the first wins.
  assert squad_data.max_context_span(spans, 3) == 0
  # Token 4: window 1 gives min(1, 2) = 1.
  assert squad_data.max_context_span(spans, 4) == 1


CLASSIFIER_CASES = [("mrpc", "train"), ("mrpc", "test"), ("cola", "dev"), ("cola", "test"),
                    ("mnli", "dev"), ("mnli", "test"), ("xnli", "train"), ("xnli", "dev")]


def test_classifier_examples_and_features_equal_the_originals(tmp_path):
  vocab = str(tmp_path / "vocab.txt")
  finetuning_data.write_vocab(vocab)
  cases = []
  for task in sorted({task for task, _ in CLASSIFIER_CASES}):
    finetuning_data.write_glue(str(tmp_path / task), task, finetuning_data.rng(3), n_train=12,
                               n_dev=6)
  cases = ["%s:%s:%s" % (task, split, tmp_path / task) for task, split in CLASSIFIER_CASES]
  out = str(tmp_path / "features.json")
  # 16 tokens: long pairs are truncated.
  _original("classifier_features", ["--cases"] + cases + ["--out", out],
            dict(vocab_file=vocab, max_seq_length=16))
  with open(out) as reader:
    expected = json.load(reader)

  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  for (task, split), want in zip(CLASSIFIER_CASES, expected):
    data_dir = str(tmp_path / task)
    processor = classifier_data.get_processor(task, data_dir)
    examples = getattr(processor, "get_%s_examples" % split)(data_dir)
    features = [vars(classifier_data.convert_single_example(e, processor.get_labels(), 16,
                                                            tokenizer)) for e in examples]
    assert [vars(e) for e in examples] == want["examples"], (task, split)
    assert features == want["features"], (task, split)
    assert len(examples) >= 3


def test_unknown_task_and_label_are_named(tmp_path):
  with pytest.raises(ValueError, match="unknown task 'sst'"):
    classifier_data.get_processor("sst")
  vocab = str(tmp_path / "vocab.txt")
  finetuning_data.write_vocab(vocab)
  tokenizer = tokenization.FullTokenizer(vocab, do_lower_case=True)
  example = classifier_data.InputExample("dev-3", "a cat", label="2")
  with pytest.raises(ValueError, match="example dev-3: label '2' is not one of 0, 1"):
    classifier_data.convert_single_example(example, ["0", "1"], 16, tokenizer)
  with pytest.raises(ValueError, match="does not exist"):
    classifier_data.MrpcProcessor().get_train_examples(str(tmp_path / "missing"))
