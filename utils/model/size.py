"""How big a BERT model is before any graph is built: its parameter count (exact) and the memory
a training or evaluation process needs for it (an estimate of the main terms), so that a script
refuses a configuration this machine cannot hold in a second, with one line, instead of spending
minutes and gigabytes building a graph that cannot run.

  params = size.parameter_count(bert_config)                       # exact, with both heads
  need = size.estimate_memory(bert_config, batch_size=32, seq_length=128, optimizer_slots=2)
  size.check_fits(bert_config, machine_bytes, "bert_config.json", 32, 128, optimizer_slots=2)

Only plain attributes of a `modeling.BertConfig` are read; no TensorFlow.
"""

import collections

# The sizes a training job is compared against to say which key makes a configuration too big:
# BERT-base's (the release's defaults), with its vocabulary. A key above its reference value
# whose reduction to it saves the most memory is the one a refusal names.
REFERENCE_SIZES = collections.OrderedDict([
    ("num_hidden_layers", 12),
    ("hidden_size", 768),
    ("intermediate_size", 3072),
    ("vocab_size", 30522),
    ("num_attention_heads", 12),
    ("max_position_embeddings", 512),
    ("type_vocab_size", 16),
])

FP32_BYTES = 4
HALF_BYTES = 2
# What a process needs, in bytes, by term (all ints).
#   weights: fp32 variables; gradients: one fp32 gradient per variable; slots: the optimizer's
#   fp32 slots (`optimizer_slots` per variable); accumulation: the fp32 `<var>/accum` buffers;
#   half_copies: the fp16/bf16 casts of the weights a reduced-precision step reads; activations:
#   what the forward pass keeps for the backward pass (or the largest layer's outputs when not
#   training).
Memory = collections.namedtuple("Memory", ["weights", "gradients", "slots", "accumulation",
                                           "half_copies", "activations"])


def embedding_parameters(config):
  """Parameters of the embeddings: word, position and token-type tables and their layer norm.

  Args:
    config: a `modeling.BertConfig` (or anything with its size attributes).

  Returns:
    int.
  """
  width = config.hidden_size
  tables = config.vocab_size + config.max_position_embeddings + config.type_vocab_size
  return tables * width + 2 * width


def layer_parameters(config):
  """Parameters of one Transformer layer.

  Query, key, value and the attention output: 4 x (H x H + H); the two layer norms: 2 x 2H;
  the feed-forward layer: H x I + I, then I x H + H.

  Args:
    config: a `modeling.BertConfig`.

  Returns:
    int.
  """
  width, inner = config.hidden_size, config.intermediate_size
  return 4 * (width * width + width) + 4 * width + (width * inner + inner) + (inner * width + width)


def parameter_count(config, heads=True):
  """Every trainable parameter of the encoder (embeddings, layers, pooler) and, with `heads`,
  of the pretraining heads (masked LM: transform H x H + H, layer norm 2H, output bias V; the
  output matrix is the word table, shared; next sentence: 2 x H + 2).

  Args:
    config: a `modeling.BertConfig`.
    heads: count the two pretraining heads too.

  Returns:
    int, exact: the sum of the variables' sizes of the graph `modeling.BertModel` and
    `utils/model/pretraining.py` build.
  """
  width = config.hidden_size
  count = (embedding_parameters(config) + config.num_hidden_layers * layer_parameters(config)
           + width * width + width)
  if heads:
    count += (width * width + width + 2 * width + config.vocab_size) + (2 * width + 2)
  return count


def layer_activation_elements(config, batch_size, seq_length):
  """Elements one Transformer layer keeps from its forward pass for the backward pass.

  Per token (N = batch x seq tokens), in units of H: the layer's input, query, key and value, the
  attention context, the attention output's dropout mask, the residual sum and the layer norm's
  output (8); the output's dropout mask, residual sum and layer norm output (3); in units of I:
  the feed-forward layer's input to the activation and its output (2). Per head and pair of
  positions: the attention probabilities, their dropout mask and the dropped probabilities (3).
  This is an estimate of the main terms (layer-norm statistics, biases and other per-token
  vectors are left out); each term is the size of a saved tensor, not a guess.

  Args:
    config: a `modeling.BertConfig`.
    batch_size: sequences per micro-step.
    seq_length: tokens per sequence.

  Returns:
    int.
  """
  tokens = batch_size * seq_length
  return (tokens * (11 * config.hidden_size + 2 * config.intermediate_size)
          + 3 * batch_size * config.num_attention_heads * seq_length * seq_length)


def head_activation_elements(config, batch_size, predictions_per_seq):
  """Elements the masked-LM head keeps for the backward pass, in fp32 whatever the encoder's
  type: per prediction, the gathered encoder output, the transform's output and its layer norm
  (3 x H), and the logits, their softmax and the logits' gradient (3 x V).

  Args:
    config: a `modeling.BertConfig`.
    batch_size: sequences per micro-step.
    predictions_per_seq: masked positions per sequence (--max_predictions_per_seq); 0 for a job
      without the pretraining heads.

  Returns:
    int.
  """
  return batch_size * predictions_per_seq * 3 * (config.hidden_size + config.vocab_size)


def estimate_memory(config, batch_size, seq_length, training=True, half_precision=False,
                    accumulation_steps=1, predictions_per_seq=0, optimizer_slots=None):
  """The memory one process needs for the model: an estimate of the main terms.

  Training holds the fp32 weights, a gradient per weight, the optimizer's slots, the
  accumulation buffers when accumulating, the reduced-precision copies of the weights, and the
  activations of every layer (`layer_activation_elements` x layers, plus the embeddings' output,
  its dropout mask and layer norm: 3 x N x H) in the compute type's bytes, and the masked-LM
  head's (`head_activation_elements`, fp32). Evaluation holds the weights, the activations of
  one layer at a time and the head's. TensorFlow's own memory (the library, the graph: about
  0.7 GB for BERT-mini) and the input pipeline are not counted. For BERT-mini at 128 tokens and
  20 predictions, the estimated activations grow by 617 MiB from batch 1 to batch 32; the peak
  resident memory of run_pretraining.py (measured with /usr/bin/time) grows by 592 MiB.

  Args:
    config: a `modeling.BertConfig`.
    batch_size: sequences per micro-step (per worker).
    seq_length: tokens per sequence.
    training: the process trains (else it only evaluates or predicts).
    half_precision: the encoder computes in fp16 or bf16.
    accumulation_steps: micro-steps per update; > 1 adds the accumulation buffers.
    predictions_per_seq: masked-LM predictions per sequence; 0 without the pretraining heads.
    optimizer_slots: training: the fp32 slots the optimizer keeps per variable (the length of
      `optimization.Schedule.slot_names`: 2, Adam's moments, for both of ours).

  Returns:
    A `Memory` of ints (bytes per term); `sum(memory)` is the total.

  Raises:
    ValueError: training without `optimizer_slots`.
  """
  params = parameter_count(config)
  value_bytes = HALF_BYTES if half_precision else FP32_BYTES
  per_layer = layer_activation_elements(config, batch_size, seq_length)
  embeddings = 3 * batch_size * seq_length * config.hidden_size
  head = FP32_BYTES * head_activation_elements(config, batch_size, predictions_per_seq)
  if not training:
    return Memory(weights=FP32_BYTES * params, gradients=0, slots=0, accumulation=0,
                  half_copies=HALF_BYTES * params if half_precision else 0,
                  activations=value_bytes * (per_layer + embeddings) + head)
  if optimizer_slots is None:
    raise ValueError("estimate_memory: training needs optimizer_slots (the optimizer's slots per "
                     "variable)")
  return Memory(
      weights=FP32_BYTES * params, gradients=FP32_BYTES * params,
      slots=optimizer_slots * FP32_BYTES * params,
      accumulation=FP32_BYTES * params if accumulation_steps > 1 else 0,
      half_copies=HALF_BYTES * params if half_precision else 0,
      activations=value_bytes * (config.num_hidden_layers * per_layer + embeddings) + head)


def culprit(config, estimate_fn):
  """The size key whose value, brought down to BERT-base's (`REFERENCE_SIZES`), saves the most
  memory: the key a refusal names.

  Args:
    config: a `modeling.BertConfig`.
    estimate_fn: callable(config-like object) -> total bytes (int).

  Returns:
    The key (str), or None when no size is above BERT-base's.
  """
  sizes = collections.namedtuple("Sizes", list(REFERENCE_SIZES))
  values = {key: getattr(config, key) for key in REFERENCE_SIZES}
  total = estimate_fn(sizes(**values))
  best, best_saving = None, 0
  for key, reference in REFERENCE_SIZES.items():
    if values[key] <= reference:
      continue
    saving = total - estimate_fn(sizes(**dict(values, **{key: reference})))
    if saving > best_saving:
      best, best_saving = key, saving
  return best


def check_fits(config, machine_bytes, source, batch_size, seq_length, **estimate_args):
  """Refuses a configuration whose estimated memory (`estimate_memory`) exceeds the machine's.

  Args:
    config: a `modeling.BertConfig`.
    machine_bytes: this machine's memory in bytes.
    source: where the configuration came from (its file), first in the message.
    batch_size, seq_length: as for `estimate_memory`.
    **estimate_args: `training`, `half_precision`, `accumulation_steps`,
      `predictions_per_seq`, `optimizer_slots` of `estimate_memory`.

  Returns:
    The `Memory` estimate, when it fits.

  Raises:
    ValueError: one line naming `source`, the key that makes it too big and its value (or the
      model's main sizes when none is above BERT-base's), the estimate and the machine's memory.
  """
  def total(sizes):
    return sum(estimate_memory(sizes, batch_size, seq_length, **estimate_args))

  memory = estimate_memory(config, batch_size, seq_length, **estimate_args)
  if sum(memory) <= machine_bytes:
    return memory
  key = culprit(config, total)
  named = ("%s=%d" % (key, getattr(config, key)) if key else
           "num_hidden_layers=%d, hidden_size=%d" % (config.num_hidden_layers,
                                                     config.hidden_size))
  raise ValueError(
      "%s: %s does not fit this machine: the model needs about %s (%d parameters: weights, "
      "gradients and optimizer state %s; activations at batch %d x %d tokens %s), more than "
      "this machine's %s of memory" % (
          source, named, gigabytes(sum(memory)), parameter_count(config),
          gigabytes(sum(memory) - memory.activations), batch_size, seq_length,
          gigabytes(memory.activations), gigabytes(machine_bytes)))


def gigabytes(num_bytes):
  """`num_bytes` (int) as text in GiB: "23.4 GB", or "1.2e+07 GB" from a million GiB on."""
  value = num_bytes / (1 << 30)
  return ("%.1f GB" if value < 1e6 else "%.1e GB") % value
