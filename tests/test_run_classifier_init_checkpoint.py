"""run_classifier.py's --init_checkpoint end to end: real processes, the tiny model and task of
tests/test_run_finetuning.py.

- A directory stands for its newest checkpoint, and the run says which prefix it loads.
- A checkpoint of another hidden size is refused before anything is written: one line naming
  the checkpoint, the first variable that differs and both shapes, exit 2, no --output_dir.
"""

import json
import shutil
import sys

import pytest

from tests import helpers
from tests.test_run_finetuning import files  # pylint: disable=unused-import  (the fixture)
from tests.test_run_finetuning import flag_list

pytestmark = pytest.mark.e2e


def _classifier_command(files, out, **overrides):  # pylint: disable=redefined-outer-name
  values = dict(task_name="MRPC", data_dir=files["mrpc"], vocab_file=files["vocab"],
                bert_config_file=files["config"], init_checkpoint=files["checkpoint"],
                output_dir=out, do_eval=True, max_seq_length=32, eval_batch_size=5)
  values.update(overrides)
  return [sys.executable, "run_classifier.py"] + flag_list(values)


def _checkpoint_directory(files, directory):  # pylint: disable=redefined-outer-name
  """Copies the fixture's checkpoint into `directory` as model.ckpt-1 and model.ckpt-2, the
  index file naming model.ckpt-2 the newest. Returns the newest prefix."""
  directory.mkdir()
  source = files["checkpoint"]
  for step in (1, 2):
    for suffix in (".index", ".data-00000-of-00001"):
      shutil.copy(source + suffix, str(directory / ("model.ckpt-%d%s" % (step, suffix))))
  (directory / "checkpoint").write_text(
      'model_checkpoint_path: "model.ckpt-2"\nall_model_checkpoint_paths: "model.ckpt-1"\n'
      'all_model_checkpoint_paths: "model.ckpt-2"\n')
  return str(directory / "model.ckpt-2")


def test_init_checkpoint_directory_is_named_and_a_wider_one_is_refused_before_any_write(
    files, tmp_path):  # pylint: disable=redefined-outer-name
  newest = _checkpoint_directory(files, tmp_path / "pretrained")
  wide_config = tmp_path / "wide_config.json"
  with open(files["config"]) as reader:
    values = json.load(reader)
  assert values["hidden_size"] == 32  # the fixture's checkpoint
  wide_config.write_text(json.dumps(dict(values, hidden_size=64)))
  from_directory, refused = tmp_path / "from_directory", tmp_path / "refused"
  (code, _, stderr), (wide_code, _, wide_stderr) = helpers.run_side_by_side([
      _classifier_command(files, from_directory, init_checkpoint=tmp_path / "pretrained"),
      _classifier_command(files, refused, bert_config_file=wide_config, do_train=True)],
      timeout=300)

  assert code == 0, stderr[-4000:]
  said = [line for line in stderr.splitlines() if "run_classifier.py: initialising from" in line]
  assert len(said) == 1, stderr[-4000:]
  assert said[0].endswith("run_classifier.py: initialising from checkpoint %s (the newest in "
                          "--init_checkpoint=%s)" % (newest, tmp_path / "pretrained")), said
  start = helpers.start_lines(stderr, "run_classifier.py")
  lines = stderr.splitlines()
  assert len(start) == 1 and lines.index(said[0]) == lines.index(start[0]) + 1

  assert wide_code == 2, wide_stderr[-4000:]
  # The variables in name order: the embeddings' layer norm comes first; hidden 32 against 64.
  assert wide_stderr.strip().splitlines() == [
      "run_classifier.py: error: --init_checkpoint=%s: variable bert/embeddings/LayerNorm/beta "
      "has shape [32] in the checkpoint but [64] in the model of --bert_config_file=%s"
      % (files["checkpoint"], wide_config)], wide_stderr[-4000:]
  assert not refused.exists()
