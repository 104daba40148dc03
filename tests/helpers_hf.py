"""Helpers of the Hugging Face hand-off's tests: the transformers environment's python, the client
that serves commands in it, a transformers directory of random weights exported by the project,
and the demo corpus with its vocabularies."""

import functools
import json
import os
import subprocess

import numpy as np

import modeling
from scripts import build_demo_data
from tests import helpers
from utils.checkpoints import contents
from utils.data import vocabulary

HF_CLIENT = os.path.join(helpers.REPO_ROOT, "tests", "hf", "hf_client.py")


@functools.lru_cache(maxsize=None)
def hf_python():
  """The python of the transformers + PyTorch environment (`scripts/env_hf.sh`).

  `make test` passes it in BERT_HF_PYTHON; otherwise scripts/env_hf.sh builds or finds it (about
  1.5 minutes the first time on a machine, then cached).
  """
  path = os.environ.get("BERT_HF_PYTHON")
  if path:
    return path
  proc = subprocess.run(["bash", os.path.join(helpers.REPO_ROOT, "scripts", "env_hf.sh")],
                        capture_output=True, text=True, timeout=1800)
  if proc.returncode != 0:
    raise RuntimeError("scripts/env_hf.sh failed:\n%s" % proc.stderr[-5000:])
  return proc.stdout.strip().splitlines()[-1]


def exported_hf_directory(root, config):
  """Exports a checkpoint of random weights of the model `config` as a transformers directory.

  Args:
    root: pathlib.Path of an empty directory; the checkpoint, its config and vocabulary go there.
    config: dict of bert_config.json values.

  Returns:
    pathlib.Path of the directory (`root / "hf"`: model.safetensors, config.json, vocab.txt, ...).
  """
  # pylint: disable=import-outside-toplevel  (the hand-off tests only)
  from utils.checkpoints import huggingface
  from utils.checkpoints import release
  shapes = release.model_weight_shapes(modeling.BertConfig.from_dict(config))
  rng = np.random.RandomState(0)
  contents.write_checkpoint(str(root / "model.ckpt-1"), {
      name: rng.normal(0, 0.1, shape).astype(np.float32) for name, shape in shapes.items()})
  (root / "bert_config.json").write_text(json.dumps(config))
  (root / "vocab.txt").write_text("".join("t%d\n" % i for i in range(config["vocab_size"])))
  huggingface.export(str(root / "model.ckpt-1"), str(root / "bert_config.json"),
                     str(root / "vocab.txt"), str(root / "hf"))
  return root / "hf"


class HfClient(object):
  """tests/hf/hf_client.py serving commands in the transformers environment (one process for
  a test module: torch and transformers are imported once)."""

  def __init__(self):
    self.proc = None

  def __call__(self, *args):
    """Runs one command (hf_client.py's arguments); returns what it printed."""
    if self.proc is None:
      self.proc = subprocess.Popen([hf_python(), HF_CLIENT, "serve"], cwd=helpers.REPO_ROOT,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    self.proc.stdin.write(json.dumps(list(args)) + "\n")
    self.proc.stdin.flush()
    line = self.proc.stdout.readline()
    if not line:
      raise AssertionError("hf_client.py ended (exit %s) on %s" % (self.proc.wait(), args))
    answer = json.loads(line)
    if not answer["ok"]:
      raise AssertionError("hf_client.py %s failed:\n%s" % (args, answer["error"]))
    return answer["stdout"]

  def close(self):
    if self.proc is not None:
      self.proc.stdin.close()
      self.proc.wait(timeout=60)
      self.proc = None


# The client of the test module that runs: each module using it closes it at its end.
hf_client = HfClient()


def demo_corpus_and_vocabularies(root, num_lines, vocab_size):
  """The first `num_lines` sentences of the demo corpus (and a few of characters it rarely has), and
  WordPiece vocabularies trained on them, cased and uncased, of `vocab_size` tokens each, in
  `root`.

  Returns:
    {"text": the corpus file, "lines": its sentences, "vocab": {cased: the vocabulary file}}.
  """
  sentences = [sentence for _, document in build_demo_data.stdlib_documents()
               for sentence in document][:num_lines]
  # Characters the demo text rarely has: accents, CJK, punctuation runs, upper case.
  sentences += ["Café Déjà-vu naïve ÉLAN", "中文字符 and 日本語", "e.g. (x, y) -> [z]!?", "HTTPServer"]
  text = root / "corpus.txt"
  text.write_text("\n".join(sentences) + "\n", encoding="utf-8")
  vocabs = {}
  for cased in (False, True):
    path = root / ("vocab_%s.txt" % ("cased" if cased else "uncased"))
    vocabulary.build_vocab([str(text)], vocab_size, str(path), do_lower_case=not cased)
    vocabs[cased] = path
  return {"text": text, "lines": sentences, "vocab": vocabs}
