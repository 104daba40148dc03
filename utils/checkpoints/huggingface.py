"""Hugging Face `transformers` BERT directories, written from and read into release checkpoints.

`export` writes what `transformers.BertForPreTraining.from_pretrained(dir)` and
`BertTokenizerFast.from_pretrained(dir)` load with no missing, unexpected or new weight:

  config.json              BertConfig fields, architectures ["BertForPreTraining"],
                           layer_norm_eps 1e-12, hidden_act "gelu_new" (the tanh GELU, ours)
  model.safetensors        fp32, transformers' names; the MLM decoder is tied to the word
                           embeddings (as in the release), so it is not stored
  vocab.txt, tokenizer_config.json, special_tokens_map.json   WordPiece with our casing

`import_directory` is the reverse: a transformers BERT directory (model.safetensors or
pytorch_model.bin) becomes a release bundle (bert_model.ckpt, bert_config.json, vocab.txt) that
run_pretraining.py --init_checkpoint and the fine-tuning scripts take. fp32 round trips are bit
for bit; dense kernels are transposed ([in, out] here, [out, in] in PyTorch's Linear).

Neither needs torch or the safetensors package (`safetensors.py`, `torch_pickle.py`). Both write
into a temporary directory renamed into place at the end (`staging.py`).
"""

import collections
import json
import os
import re
import shutil

import numpy as np

import modeling
from utils.checkpoints import contents as ckpt
from utils.checkpoints import release
from utils.checkpoints import safetensors
from utils.core import staging
from utils.checkpoints import torch_pickle
from utils.core import errors

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
PYTORCH_FILE = "pytorch_model.bin"
VOCAB_FILE = "vocab.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
TOKENIZER_JSON_FILE = "tokenizer.json"
ARCHITECTURE = "BertForPreTraining"
SPECIAL_TOKENS = collections.OrderedDict([
    ("unk_token", "[UNK]"), ("sep_token", "[SEP]"), ("pad_token", "[PAD]"),
    ("cls_token", "[CLS]"), ("mask_token", "[MASK]")])

# Our hidden_act -> transformers' name of the same function. Our "gelu" is the release's tanh
# approximation, transformers' "gelu_new"; transformers' "gelu" is the erf form (~1e-3 away).
_TO_HF_ACTIVATION = {"gelu": "gelu_new", "relu": "relu", "tanh": "tanh", "linear": "linear"}
_FROM_HF_ACTIVATION = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                       "gelu_python_tanh": "gelu", "relu": "relu", "tanh": "tanh",
                       "linear": "linear"}
# transformers' erf GELU: read as ours (the tanh form) with a note, since published BERTs
# converted from the release's checkpoints say "gelu" although the release trained with tanh.
_ERF_GELU = "gelu"
_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "hidden_act", "hidden_dropout_prob",
                "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                "initializer_range")
# The tied MLM decoder as PyTorch's state dict (pytorch_model.bin) stores it.
_TIED = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
         "cls.predictions.decoder.bias": "cls.predictions.bias"}
# Buffers that older transformers saved with the weights.
_BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")
# Parts of the pretraining model that `--init_missing_heads` may initialise afresh.
_HEAD_PREFIXES = ("cls/", "bert/pooler/")
_LAST_NAMES = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias",
               "output_weights": "weight", "output_bias": "bias"}


def hf_name(name):
  """transformers' name of a release weight, and whether its value is transposed.

  Args:
    name: e.g. "bert/encoder/layer_3/attention/self/query/kernel".

  Returns:
    (e.g. "bert.encoder.layer.3.attention.self.query.weight", True).
  """
  parts = name.split("/")
  parts = [re.sub(r"^layer_(\d+)$", r"layer.\1", part) for part in parts]
  last = parts[-1]
  if name == "cls/predictions/output_bias":
    return "cls.predictions.bias", False
  if last in _LAST_NAMES:
    parts[-1] = _LAST_NAMES[last]
  else:  # the embedding tables
    parts.append("weight")
  return ".".join(parts), last == "kernel"


def hf_config(bert_config):
  """config.json of transformers' BertForPreTraining for a `modeling.BertConfig` (a dict)."""
  config = collections.OrderedDict([("architectures", [ARCHITECTURE]), ("model_type", "bert")])
  values = bert_config.to_dict()
  for key in _CONFIG_KEYS:
    config[key] = values[key]
  if config["hidden_act"] not in _TO_HF_ACTIVATION:
    raise errors.UsageError("hidden_act %r has no transformers equivalent" % config["hidden_act"])
  config["hidden_act"] = _TO_HF_ACTIVATION[config["hidden_act"]]
  config.update([("layer_norm_eps", modeling.LAYER_NORM_EPSILON), ("pad_token_id", 0),
                 ("position_embedding_type", "absolute"), ("tie_word_embeddings", True),
                 ("dtype", "float32")])
  return config


def tokenizer_files(do_lower_case, model_max_length):
  """dict file name -> JSON object of the tokenizer files besides vocab.txt."""
  tokenizer_config = collections.OrderedDict([
      ("tokenizer_class", "BertTokenizer"), ("do_lower_case", bool(do_lower_case)),
      ("strip_accents", None), ("tokenize_chinese_chars", True),
      ("model_max_length", int(model_max_length))])
  tokenizer_config.update(SPECIAL_TOKENS)
  return {TOKENIZER_CONFIG_FILE: tokenizer_config, SPECIAL_TOKENS_FILE: dict(SPECIAL_TOKENS)}


def to_hf_tensors(weights):
  """dict transformers name -> contiguous float32 array, from release weights (name -> array)."""
  tensors = {}
  for name, value in weights.items():
    target, transposed = hf_name(name)
    tensors[target] = np.ascontiguousarray(value.T if transposed else value)
  return tensors


def cased_tokens(vocab_file):
  """The tokens of `vocab_file` with an upper-case letter, special tokens ([CLS], ...) aside.

  A lower-casing tokenizer never produces them: a vocabulary that has some was built for a cased
  model (the release's cased vocabularies have thousands; uncased ones none).
  """
  with open(vocab_file, encoding="utf-8") as f:
    tokens = [line.rstrip("\n") for line in f]
  return [t for t in tokens if not (t.startswith("[") and t.endswith("]"))
          and t != t.lower()]


def _write_json(path, value):
  with open(path, "w") as f:
    json.dump(value, f, indent=2)
    f.write("\n")


def export(checkpoint, bert_config_file, vocab_file, output_dir, do_lower_case=True):
  """Writes the transformers directory of a checkpoint of this project or of the release.

  Args:
    checkpoint: a checkpoint prefix or a directory (its newest checkpoint); training state
      (moments, accumulators, loss scale, step) is left out, fp16 weights widened exactly.
    bert_config_file: the bert_config.json of the checkpoint's model.
    vocab_file: the model's vocabulary (vocab_size lines).
    output_dir: the directory to create; it must be missing or empty.
    do_lower_case: the tokenizer's casing (as create_pretraining_data.py's --do_lower_case).

  Returns:
    dict with "checkpoint" (the source prefix), "output_dir", "tensors" (number written) and
    "cased_tokens" (those of `cased_tokens`: a lower-casing tokenizer never uses them).

  Raises:
    errors.UsageError: naming the file and the problem; nothing is left in `output_dir`.
  """
  staging.check_empty_or_missing(output_dir, "--output_dir")
  checkpoint, bert_config, weights = release.load_model_weights(checkpoint, bert_config_file)
  release.check_vocab(vocab_file, bert_config, bert_config_file)
  config = hf_config(bert_config)
  tensors = to_hf_tensors(weights)
  with staging.staged_directory(output_dir, "--output_dir") as tmp:
    _write_json(os.path.join(tmp, CONFIG_FILE), config)
    safetensors.write(os.path.join(tmp, SAFETENSORS_FILE), tensors, metadata={"format": "pt"})
    shutil.copyfile(vocab_file, os.path.join(tmp, VOCAB_FILE))
    for name, value in tokenizer_files(do_lower_case, bert_config.max_position_embeddings).items():
      _write_json(os.path.join(tmp, name), value)
  return {"checkpoint": checkpoint, "output_dir": output_dir, "tensors": len(tensors),
          "cased_tokens": cased_tokens(vocab_file)}


# ---------------------------------------------------------------------------------------------
# transformers -> release


def _read_json(path):
  try:
    with open(path) as f:
      return json.load(f)
  except ValueError as e:
    raise errors.UsageError("%s is not valid JSON: %s" % (path, e))


def bert_config_from_hf(config, config_path):
  """The `modeling.BertConfig` of a transformers config.json, and notes for the user.

  Args:
    config: the parsed config.json.
    config_path: its path, for messages.

  Returns:
    (BertConfig, list of note strings).

  Raises:
    errors.UsageError: another model type, or a BERT variant this project's model cannot run.
  """
  model_type = config.get("model_type")
  architectures = config.get("architectures") or []
  if model_type != "bert":
    raise errors.UsageError(
        "%s: model_type is %r (%s), not 'bert': only BERT directories convert (other models "
        "differ in names, embeddings and tokenizer)" % (
            config_path, model_type, ", ".join(architectures) or "no architectures"))
  notes = []
  problems = []
  eps = config.get("layer_norm_eps", modeling.LAYER_NORM_EPSILON)
  if eps != modeling.LAYER_NORM_EPSILON:
    problems.append("layer_norm_eps is %g, this project's layer norm uses %g"
                    % (eps, modeling.LAYER_NORM_EPSILON))
  if config.get("position_embedding_type", "absolute") != "absolute":
    problems.append("position_embedding_type is %r, only 'absolute' is supported"
                    % config["position_embedding_type"])
  if config.get("is_decoder") or config.get("add_cross_attention"):
    problems.append("is_decoder / add_cross_attention is set: a decoder is not BERT's encoder")
  missing = [key for key in _CONFIG_KEYS if key not in config]
  if missing:
    problems.append("missing key(s) %s" % ", ".join(missing))
  act = config.get("hidden_act")
  if act == _ERF_GELU:
    notes.append("%s: hidden_act 'gelu' is transformers' erf GELU; this project's (the "
                 "release's) is the tanh approximation, 'gelu_new': activations differ by up to "
                 "~1e-3" % config_path)
  elif act not in _FROM_HF_ACTIVATION and "hidden_act" not in missing:
    problems.append("hidden_act %r has no equivalent here (gelu_new, relu, tanh, linear)" % act)
  if problems:
    raise errors.UsageError("%s is a BERT this project's model cannot run: %s"
                            % (config_path, "; ".join(problems)))
  values = {key: config[key] for key in _CONFIG_KEYS}
  values["hidden_act"] = _FROM_HF_ACTIVATION.get(act, "gelu")
  try:
    return modeling.BertConfig.from_dict(values, source=config_path), notes
  except ValueError as e:
    raise errors.UsageError(str(e))


def read_hf_weights(hf_dir):
  """(path, OrderedDict name -> numpy array) of the weights file of a transformers directory.

  model.safetensors is preferred to pytorch_model.bin. Sharded checkpoints are refused.

  Raises:
    errors.UsageError: naming the file and the problem (none, sharded, unreadable, truncated).
  """
  for name in (SAFETENSORS_FILE, PYTORCH_FILE):
    path = os.path.join(hf_dir, name)
    if os.path.isfile(path):
      try:
        if name == SAFETENSORS_FILE:
          return path, safetensors.read(path)[0]
        return path, torch_pickle.read_state_dict(path)
      except (safetensors.FormatError, torch_pickle.FormatError) as e:
        raise errors.UsageError("%s is unreadable: %s" % (path, e))
  sharded = [n for n in sorted(os.listdir(hf_dir)) if n.endswith(".index.json")]
  if sharded:
    raise errors.UsageError("%s: sharded weights (%s) are not supported; save the model "
                            "unsharded" % (hf_dir, sharded[0]))
  raise errors.UsageError("%s holds neither %s nor %s" % (hf_dir, SAFETENSORS_FILE, PYTORCH_FILE))


def _normalised_names(tensors):
  """Renames a BertModel's unprefixed names and legacy LayerNorm gamma/beta; drops buffers."""
  if not any(name.startswith("bert.") for name in tensors):
    tensors = collections.OrderedDict(
        ("bert." + name if name.startswith(("embeddings.", "encoder.", "pooler.")) else name,
         value) for name, value in tensors.items())
  out = collections.OrderedDict()
  for name, value in tensors.items():
    name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", name)
    name = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name)
    if name not in _BUFFERS:
      out[name] = value
  return out


def _describe(names):
  names = sorted(names)
  return ", ".join(names[:6]) + (" and %d more" % (len(names) - 6) if len(names) > 6 else "")


def from_hf_tensors(tensors, bert_config, weights_path, init_missing_heads=False):
  """Release weights (name -> float32 array) from a transformers state dict.

  Args:
    tensors: dict transformers name -> numpy array.
    bert_config: the model's `modeling.BertConfig`.
    weights_path: the file they came from, for messages.
    init_missing_heads: initialise a missing pooler or pretraining head as a new run would, and
      drop other heads' weights (a classifier's), instead of refusing.

  Returns:
    (dict release name -> float32 array, list of notes).

  Raises:
    errors.UsageError: naming what is missing, unexpected or of the wrong shape.
  """
  tensors = _normalised_names(tensors)
  notes = []
  for tied, source in _TIED.items():
    if tied in tensors:
      if source in tensors and tensors[tied].tobytes() != tensors[source].tobytes():
        raise errors.UsageError("%s: %s differs from %s; the release ties the MLM decoder to "
                                "the word embeddings, so an untied model cannot be converted"
                                % (weights_path, tied, source))
      del tensors[tied]
  wanted = release.model_weight_shapes(bert_config)
  targets = {name: hf_name(name) for name in wanted}
  missing = [name for name in wanted if targets[name][0] not in tensors]
  known = {target for target, _ in targets.values()}
  unexpected = [name for name in tensors if name not in known]
  missing_heads = [name for name in missing if name.startswith(_HEAD_PREFIXES)]
  missing_encoder = [name for name in missing if not name.startswith(_HEAD_PREFIXES)]
  if missing_encoder or ((missing_heads or unexpected) and not init_missing_heads):
    parts = []
    if missing_encoder:
      parts.append("the encoder weights %s are missing (they cannot be initialised)"
                   % _describe(targets[n][0] for n in missing_encoder))
    if missing_heads:
      parts.append("it has no %s (not a BertForPreTraining); they can be initialised "
                   "afresh, as a new run would, with --init_missing_heads"
                   % _describe(targets[n][0] for n in missing_heads))
    if unexpected:
      parts.append("unexpected weights %s%s" % (
          _describe(unexpected), "" if missing_encoder else
          " (another model's head: --init_missing_heads drops them)"))
    raise errors.UsageError("%s is not a BertForPreTraining of %s: %s" % (
        weights_path, CONFIG_FILE, "; ".join(parts)))
  weights = {}
  for name in wanted:
    target, transposed = targets[name]
    if target not in tensors:
      continue
    value = tensors[target]
    if not np.issubdtype(value.dtype, np.floating):
      raise errors.UsageError("%s: %s is %s, not floating point" % (weights_path, target,
                                                                    value.dtype))
    value = value.T if transposed else value
    if list(value.shape) != list(wanted[name]):
      raise errors.UsageError("%s: %s has shape %s, %s says %s" % (
          weights_path, target, list(tensors[target].shape), CONFIG_FILE,
          list(wanted[name][::-1] if transposed else wanted[name])))
    weights[name] = np.ascontiguousarray(value, dtype=np.float32)
  widened = sorted({str(v.dtype) for v in tensors.values() if v.dtype != np.float32})
  if widened:
    notes.append("%s: %s weights widened to float32 (exactly)" % (weights_path,
                                                                   "/".join(widened)))
  if missing_heads:
    model = ckpt.GraphVariables(lambda: release.build_model(bert_config))
    weights.update(model.initial_values(missing_heads))
    notes.append("initialised afresh: %s" % _describe(missing_heads))
  if unexpected:
    notes.append("dropped: %s" % _describe(unexpected))
  return weights, notes


def _vocab_lines(hf_dir, vocab_size):
  """The vocabulary of a transformers directory as lines (vocab.txt, else tokenizer.json)."""
  path = os.path.join(hf_dir, VOCAB_FILE)
  if os.path.isfile(path):
    with open(path, encoding="utf-8") as f:
      lines = [line.rstrip("\n") for line in f if line.strip()]
  else:
    path = os.path.join(hf_dir, TOKENIZER_JSON_FILE)
    if not os.path.isfile(path):
      raise errors.UsageError("%s holds neither %s nor %s: the vocabulary is missing"
                              % (hf_dir, VOCAB_FILE, TOKENIZER_JSON_FILE))
    model = _read_json(path).get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
      raise errors.UsageError("%s: the tokenizer is %s, not WordPiece" % (path, model.get("type")))
    by_id = sorted(model["vocab"].items(), key=lambda item: item[1])
    lines = [token for token, _ in by_id]
  if len(lines) != vocab_size:
    raise errors.UsageError("%s has %d tokens but vocab_size is %d in %s"
                            % (path, len(lines), vocab_size, CONFIG_FILE))
  return lines


def do_lower_case_of(hf_dir):
  """The tokenizer's casing in a transformers directory: True, False, or None when unsaid."""
  path = os.path.join(hf_dir, TOKENIZER_CONFIG_FILE)
  if not os.path.isfile(path):
    return None
  return _read_json(path).get("do_lower_case")


def import_directory(hf_dir, output_dir, init_missing_heads=False):
  """Writes the release bundle (bert_model.ckpt, bert_config.json, vocab.txt) of a transformers
  BERT directory.

  Args:
    hf_dir: a directory with config.json, model.safetensors or pytorch_model.bin, and vocab.txt
      or tokenizer.json.
    output_dir: the bundle's directory to create; it must be missing or empty.
    init_missing_heads: see `from_hf_tensors`.

  Returns:
    dict with "source" (the weights file), "bundle" (the written prefix), "variables",
    "do_lower_case" (the tokenizer's casing or None), "notes" (list of strings).

  Raises:
    errors.UsageError: naming the file and the problem; nothing is left in `output_dir`.
  """
  staging.check_empty_or_missing(output_dir, "--output_dir")
  if not os.path.isdir(hf_dir):
    raise errors.UsageError("--from_huggingface=%s is not a directory" % hf_dir)
  config_path = os.path.join(hf_dir, CONFIG_FILE)
  if not os.path.isfile(config_path):
    raise errors.UsageError("%s does not exist: not a transformers model directory"
                            % config_path)
  bert_config, notes = bert_config_from_hf(_read_json(config_path), config_path)
  vocab = _vocab_lines(hf_dir, bert_config.vocab_size)
  weights_path, tensors = read_hf_weights(hf_dir)
  weights, weight_notes = from_hf_tensors(tensors, bert_config, weights_path, init_missing_heads)
  with staging.staged_directory(output_dir, "--output_dir") as tmp:
    release.write_bundle(tmp, bert_config, weights)
    with open(os.path.join(tmp, release.RELEASE_VOCAB), "w", encoding="utf-8") as f:
      f.write("".join(line + "\n" for line in vocab))
  return {"source": weights_path,
          "bundle": os.path.join(output_dir, release.RELEASE_CHECKPOINT),
          "variables": len(weights), "do_lower_case": do_lower_case_of(hf_dir),
          "notes": notes + weight_notes}
