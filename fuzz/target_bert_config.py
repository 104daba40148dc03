"""Fuzz target: `modeling.BertConfig.from_json_file` on a bert_config.json, then the memory
estimate of `utils/model/size.py` and its refusal.

Property: a file that loads gives every field its documented type and range, the parameter count
is a positive int, and the estimate (every term) is a finite number of bytes; the fit check
either returns or refuses with one line naming the file.
"""

import json
import math
import os

import modeling
from fuzz import harness
from utils.model import size

_REPO_ROOT = os.path.dirname(harness.FUZZ_DIR)
_SIZE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "max_position_embeddings", "type_vocab_size")
_NUMBERS = (int, float)


def _check_config(config, data):
  """Asserts the loaded `config`'s fields against the file's JSON (`data`, bytes)."""
  values = json.loads(data.decode("utf-8"))
  for key in _SIZE_KEYS:
    value = getattr(config, key)
    # A bool is an int to isinstance; a JSON number with a fraction is not a size.
    assert isinstance(value, int) and not isinstance(value, bool), (key, value)
    assert 1 <= value < 2 ** 31, (key, value)
    assert value == values[key], key
  for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
    value = getattr(config, key)
    assert isinstance(value, _NUMBERS) and not isinstance(value, bool), key
    assert 0 <= value < 1, (key, value)
  assert (isinstance(config.initializer_range, _NUMBERS)
          and math.isfinite(config.initializer_range) and config.initializer_range > 0)
  assert config.hidden_act is None or isinstance(config.hidden_act, str)
  modeling.get_activation(config.hidden_act)
  assert config.hidden_size % config.num_attention_heads == 0


def _check_estimate(config, path):
  """Asserts the estimate's terms are finite non-negative ints and the check refuses in one
  line naming `path`."""
  count = size.parameter_count(config)
  assert isinstance(count, int) and count > 0
  memory = size.estimate_memory(config, batch_size=8, seq_length=128, half_precision=True,
                                accumulation_steps=2, optimizer_slots=2)
  assert all(isinstance(term, int) and term >= 0 for term in memory), memory
  assert math.isfinite(float(sum(memory)))
  try:
    size.check_fits(config, 24 << 30, path, batch_size=8, seq_length=128, optimizer_slots=2)
  except ValueError as e:
    message = str(e)
    assert message.startswith(path + ": ") and "\n" not in message, message
    assert len(message) < len(path) + 400, message


def read(data):
  """Loads `data` as a bert_config.json file; checks what it returns."""
  with harness.input_file(data, "bert_config.json") as path:
    try:
      config = modeling.BertConfig.from_json_file(path)
    except ValueError as e:
      assert "\n" not in str(e)[:2000] and path in str(e), str(e)[:300]
      raise
    _check_config(config, data)
    _check_estimate(config, path)


def seeds():
  """The project's bert_configs/*.json, and one with extra keys and a null activation."""
  found = []
  for name in ("tiny", "mini", "small", "medium", "base", "large"):
    with open(os.path.join(_REPO_ROOT, "bert_configs", name + ".json"), "rb") as f:
      found.append(f.read())
  values = json.loads(found[0])
  values.update(hidden_act=None, directionality="bidi", pooler_fc_size=128)
  found.append(json.dumps(values).encode("utf-8"))
  return found


TARGET = harness.Target("bert_config", read, (ValueError,), seeds, max_len=4096)
