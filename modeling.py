"""The BERT model (Devlin et al., 2018) as a TF1-compat graph.

The public interface, variable names and fp32 numerics are those of the original BERT release, so
code written against it works unchanged and the released checkpoints load and reproduce their
outputs. On top of it, `BertModel(..., compute_type=tf.float16)` builds the same graph in half
precision: variables stay fp32 (see `gpu_environment.py`), the encoder's matmuls run in fp16, layer
norms use the fused kernel (`fused_layer_norm.py`) and the GELU is evaluated in fp32.
`compute_type=tf.bfloat16` runs only the encoder's matrix products in bf16 (each with its bias
add; the query/key/value projections and the two attention products stay in bf16 between them)
and keeps the activations, and every element-wise op on them (dropout, residual sums, layer norm,
the attention softmax, GELU), in fp32: bf16 keeps 8 bits of mantissa, too few for a mean over the
hidden width or a sum of exponentials, and on CPUs only the products gain from bf16 units
(docs/PRECISION.md). `ComputePrecision` holds these choices, made once from the compute type; the
layers' functions take it and ask it what to compute in.
"""

import collections
import copy
import dataclasses
import json
import math
import re
import typing

from absl import logging
import numpy as np
import tensorflow as tf

import fused_blocks
import fused_layer_norm
import gpu_environment

_tf1 = tf.compat.v1

# Layer norm epsilon of the original release (fp32 path; --bf16's compiled kernels are handed it).
LAYER_NORM_EPSILON = 1e-12
# Added to the attention scores of padding positions before the softmax: after it, padding weighs
# ~nothing.
ATTENTION_MASK_ADDER = -10000.0


def _shown(value, limit=60):
  """`repr(value)` cut to `limit` characters, for a one-line message about a bad value."""
  text = repr(value)
  return text if len(text) <= limit else text[:limit - 3] + "..."


class BertConfig(object):
  """Configuration of a `BertModel`; the keys of `bert_config.json`."""

  # Keys of bert_config.json with their defaults (vocab_size has none).
  _DEFAULTS = collections.OrderedDict([
      ("hidden_size", 768),
      ("num_hidden_layers", 12),
      ("num_attention_heads", 12),
      ("intermediate_size", 3072),
      ("hidden_act", "gelu"),
      ("hidden_dropout_prob", 0.1),
      ("attention_probs_dropout_prob", 0.1),
      ("max_position_embeddings", 512),
      ("type_vocab_size", 16),
      ("initializer_range", 0.02),
  ])
  _POSITIVE_INTS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "type_vocab_size")
  _PROBABILITIES = ("hidden_dropout_prob", "attention_probs_dropout_prob")
  _MAX_SIZE = 2 ** 31 - 1

  def __init__(self, vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
               intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1, max_position_embeddings=512,
               type_vocab_size=16, initializer_range=0.02):
    """Builds a configuration; each value is checked on its own here, the configuration as a
    whole (`validate`) when a model is built from it, as in the original release; `from_dict`
    and `from_json_file` validate it as a whole when they read it.

    Args:
      vocab_size: size of the WordPiece vocabulary (rows of `word_embeddings`).
      hidden_size: width H of the encoder.
      num_hidden_layers: number of Transformer layers L.
      num_attention_heads: attention heads per layer; must divide `hidden_size`.
      intermediate_size: width I of the feed-forward layer.
      hidden_act: activation of the feed-forward layer ("gelu", "relu", "tanh", "linear").
      hidden_dropout_prob: dropout on embeddings, attention output and feed-forward output.
      attention_probs_dropout_prob: dropout on the attention probabilities.
      max_position_embeddings: longest sequence the model supports.
      type_vocab_size: number of segment (token type) ids.
      initializer_range: stddev of the truncated-normal initialiser.

    Raises:
      ValueError: naming the key, when a value is invalid by itself.
    """
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.intermediate_size = intermediate_size
    self.hidden_act = hidden_act
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range
    self._check_values()

  def validate(self):
    """Raises ValueError naming the first invalid key, or the keys that do not fit together."""
    self._check_values()
    if self.hidden_size % self.num_attention_heads != 0:
      raise ValueError(
          "bert config: 'hidden_size' (%d) must be a multiple of 'num_attention_heads' (%d)"
          % (self.hidden_size, self.num_attention_heads))

  def _check_values(self):
    """Raises ValueError naming the first key whose value is invalid by itself."""
    for key in self._POSITIVE_INTS:
      value = getattr(self, key)
      # Sizes are int32 in the graph (shapes, ids): a larger one could never be built.
      if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
          or not 1 <= value <= self._MAX_SIZE):
        raise ValueError("bert config: %r must be a positive integer up to %d, got %s"
                         % (key, self._MAX_SIZE, _shown(value)))
    for key in self._PROBABILITIES:
      value = getattr(self, key)
      if (isinstance(value, bool) or not isinstance(value, (int, float))
          or not 0.0 <= value < 1.0):
        raise ValueError("bert config: %r must be a probability in [0, 1), got %s"
                         % (key, _shown(value)))
    value = self.initializer_range
    if (isinstance(value, bool) or not isinstance(value, (int, float))
        or not 0 < value < float("inf")):
      raise ValueError("bert config: 'initializer_range' must be a finite positive number, got %s"
                       % (_shown(value),))
    if self.hidden_act is not None and not isinstance(self.hidden_act, str):
      if not callable(self.hidden_act):
        raise ValueError("bert config: 'hidden_act' must be an activation name, got %s"
                         % (_shown(self.hidden_act),))
    else:
      try:
        get_activation(self.hidden_act)
      except ValueError as e:
        raise ValueError("bert config: 'hidden_act': %s" % e)

  @classmethod
  def from_dict(cls, json_object, source="config"):
    """Builds a `BertConfig` from a dict of `bert_config.json` keys.

    The size keys (`_POSITIVE_INTS`: vocab_size, hidden_size, num_hidden_layers, ...) are
    required: a config file that lacks one would otherwise build BERT-base sizes for it without a
    word (the original release's behaviour). The release's defaults stay available through an
    explicit `BertConfig(vocab_size=...)` call. The other keys (activation, dropout, initializer
    range) default to the release's values, logged. Unknown keys (released multilingual configs
    carry some) are logged as a warning and ignored.

    Args:
      json_object: dict with at least the size keys.
      source: where the dict came from (a file name), used in messages.

    Returns:
      A validated `BertConfig` (`validate`: each value, and the values together).

    Raises:
      ValueError: naming `source` and the key, when a size key is missing, a value is invalid or
        the values do not fit together (hidden_size not a multiple of num_attention_heads).
    """
    if not isinstance(json_object, dict):
      raise ValueError("%s: a BERT config must be a JSON object, got %s"
                       % (source, type(json_object).__name__))
    known = set(cls._DEFAULTS) | {"vocab_size"}
    unknown = sorted(set(json_object) - known)
    if unknown:
      logging.warning("%s: ignoring unknown BERT config keys: %s", source, ", ".join(unknown))
    missing = [key for key in cls._POSITIVE_INTS if key not in json_object]
    if missing:
      raise ValueError("%s: bert config: missing required key%s %s (the model sizes are never "
                       "guessed)" % (source, "s" if len(missing) > 1 else "",
                                     ", ".join(repr(key) for key in missing)))
    defaulted = [key for key in cls._DEFAULTS if key not in json_object]
    if defaulted:
      logging.info("%s: bert config keys not given, the original release's defaults used: %s",
                   source, ", ".join("%s=%r" % (key, cls._DEFAULTS[key]) for key in defaulted))
    kwargs = {key: json_object[key] for key in known if key in json_object}
    try:
      config = cls(**kwargs)
      # As a whole too (heads divide the hidden size), so a script refuses a bad file when it
      # reads it, before any graph is built.
      config.validate()
    except ValueError as e:
      raise ValueError("%s: %s" % (source, e))
    return config

  @classmethod
  def from_json_file(cls, json_file):
    """Builds a `BertConfig` from a `bert_config.json` file."""
    try:
      with tf.io.gfile.GFile(json_file, "rb") as reader:
        data = reader.read()
    except tf.errors.NotFoundError:
      raise ValueError("bert config file not found: %s" % json_file)
    except tf.errors.OpError as e:
      raise ValueError("%s: cannot read the bert config: %s" % (json_file, e.message))
    try:
      text = data.decode("utf-8")
    except UnicodeDecodeError as e:
      raise ValueError("%s: not UTF-8 text at byte %d" % (json_file, e.start))
    try:
      json_object = json.loads(text)
    except ValueError as e:
      raise ValueError("%s: not valid JSON: %s" % (json_file, e))
    except RecursionError:
      raise ValueError("%s: not a BERT config: JSON nested too deeply" % json_file)
    return cls.from_dict(json_object, source=json_file)

  def to_dict(self):
    """Returns the configuration as a dict (a deep copy)."""
    return copy.deepcopy(self.__dict__)

  def to_json_string(self):
    """Returns the configuration as a JSON string, keys sorted."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


@dataclasses.dataclass(frozen=True)
class ComputePrecision:
  """What each part of a `BertModel` computes in, decided once from its compute type.

  `ComputePrecision.of(compute_type)` is a model's. The layers' functions take it and ask it
  wherever the type decides what they build, instead of each branching on dtypes:

    part of the model                        fp32   fp16                      bf16
    variables: stored / read by the layers   fp32   fp32 / fp16 (getter)      fp32 / fp32
    embeddings: lookup, sums, layer norm     fp32   fp32                      fp32
    activations: the residual stream         fp32   fp16                      fp32
    dense layers, attention products         fp32   fp16                      bf16, bias adds too
    attention scale, mask, softmax, dropout  fp32   fp16                      fp32, compiled
    dropout + residual sum + layer norm      fp32   fp16, the layer norm's    fp32, compiled
                                                    statistics fp32
    GELU                                     fp32   fp32 between two casts    fp32, compiled
    heads: inputs, logits, losses            fp32   fp32                      fp32
    loss scaling                             no     yes                       no

  "compiled": one XLA kernel each way that reads and writes bf16 and computes in fp32
  (`fused_blocks.py`, `gelu_fused_in_fp32`). Under bf16 each product casts its operands (fp32
  variables, fp32 activations) to bf16, and its output stays bf16 where another product or a
  compiled kernel reads it (docs/PRECISION.md: bf16's 8-bit mantissa is too coarse for the
  residual stream's statistics, and on CPUs only the products gain from bf16 units).

  Fields:
    activations: dtype of the residual stream (the embeddings are cast to it) and of the encoder's
      outputs; the layers ask their variables in it (`variable_getter`).
    products: dtype of the dense layers' and the attention's matrix products and bias adds.
    compiled_blocks: the element-wise work between two products runs in compiled kernels;
      False: op by op, in the dtype of its input.
  """
  activations: tf.DType
  products: tf.DType
  compiled_blocks: bool = False

  # The heads compute in fp32 in every precision: reduced-precision logits would lose the loss's
  # precision (TF's official BERT does the same for fp16).
  HEADS: typing.ClassVar[tf.DType] = tf.float32

  @classmethod
  def of(cls, compute_type):
    """The `ComputePrecision` of a model built in `compute_type` (tf.float32, tf.float16 or
    tf.bfloat16): a column of the table above. Raises ValueError for another dtype."""
    precision = _MODEL_PRECISIONS.get(tf.as_dtype(compute_type))
    if precision is None:
      raise ValueError("compute_type must be tf.float32, tf.float16 or tf.bfloat16, got %s"
                       % compute_type)
    return precision

  @classmethod
  def of_tensor(cls, tensor):
    """Everything in `tensor`'s dtype, op by op: what the layers' functions compute in when they
    are called without a precision (the original release's calls)."""
    return cls(tensor.dtype.base_dtype, tensor.dtype.base_dtype)

  @classmethod
  def to_heads(cls, tensor):
    """`tensor` (an encoder output, logits) cast to the heads' dtype, `HEADS`."""
    return tf.cast(tensor, cls.HEADS)

  @property
  def needs_loss_scaling(self):
    """Whether the gradients are fp16, whose range small gradients underflow unless the loss is
    scaled (bf16 has fp32's exponent range)."""
    return self.products == tf.float16

  def variable_getter(self):
    """The custom getter of the model's variable scope: fp32 variables read in `activations`
    (`gpu_environment.get_custom_getter`); None when that is fp32."""
    return gpu_environment.get_custom_getter(self.activations)

  def to_products(self, tensor):
    """`tensor` cast to `products`; the tensor itself (no op) when it is in that dtype."""
    return _cast_to(tensor, self.products)

  def to_activations(self, tensor):
    """`tensor` cast to `activations`; the tensor itself (no op) when it is in that dtype."""
    return _cast_to(tensor, self.activations)

  def attention_probabilities(self, scores, attention_mask, size_per_head, dropout_prob, seed):
    """dropout(softmax(scores / sqrt(size_per_head) + (1 - mask) * ATTENTION_MASK_ADDER)).

    Args:
      scores: Tensor [batch_size, heads, from_seq_length, to_seq_length] in `products`.
      attention_mask: optional Tensor [batch_size, from_seq_length, to_seq_length], 1 = attend.
      size_per_head: width of each head; dropout_prob, seed: see `dropout`.

    Returns:
      Tensor like `scores`: in fp32 in one compiled kernel each way with `compiled_blocks`
      (`fused_blocks.masked_softmax_dropout`), else op by op in the scores' dtype.
    """
    scale = 1.0 / math.sqrt(float(size_per_head))
    if self.compiled_blocks:
      return fused_blocks.masked_softmax_dropout(scores, attention_mask, scale,
                                                 ATTENTION_MASK_ADDER, dropout_prob, seed=seed)
    scores = scores * tf.cast(scale, scores.dtype)
    if attention_mask is not None:
      mask = tf.cast(tf.expand_dims(attention_mask, axis=1), scores.dtype)
      scores += (1.0 - mask) * tf.cast(ATTENTION_MASK_ADDER, scores.dtype)
    return dropout(tf.nn.softmax(scores), dropout_prob, seed=seed)

  def dropout_residual_layer_norm(self, output, residual, dropout_prob, seed):
    """A sub-layer's end: layer_norm(dropout(output) + residual), variables
    `LayerNorm/{beta,gamma}` in the current scope.

    Args:
      output: Tensor [rows, hidden_size] in `products`, the sub-layer's last product.
      residual: Tensor [rows, hidden_size] in `activations`; dropout_prob, seed: see `dropout`.

    Returns:
      Tensor [rows, hidden_size] in `activations`: in fp32 in one compiled kernel each way with
      `compiled_blocks` (`fused_blocks.dropout_residual_layer_norm`), else op by op.
    """
    if self.compiled_blocks:
      return fused_blocks.dropout_residual_layer_norm(output, residual, dropout_prob,
                                                      LAYER_NORM_EPSILON, seed=seed)
    output = dropout(self.to_activations(output), dropout_prob, seed=seed)
    return layer_norm(output + residual)

  def fuses_activation(self, activation):
    """Whether `activation` runs in a compiled kernel between the feed-forward layer's two
    products (GELU with `compiled_blocks`), which reads and writes `products`."""
    return self.compiled_blocks and activation is gelu

  def feed_forward_activation(self, activation, tensor):
    """The feed-forward layer's `activation` (a function, or None: linear) on `tensor` [rows,
    intermediate_size], the intermediate product's output: in `products` when
    `fuses_activation` (then `gelu_fused_in_fp32`), else in `activations` (an fp16 one is cast
    to fp32 and back: GELU's cube overflows fp16 for |x| > ~40). Returns a Tensor like `tensor`.
    """
    if self.fuses_activation(activation):
      return gelu_fused_in_fp32(tensor)
    if activation is None:
      return tensor
    if self.activations == tf.float32:
      return activation(tensor)
    return tf.cast(activation(tf.cast(tensor, tf.float32)), tensor.dtype)


# `ComputePrecision.of`: the compute type of a model -> what its parts compute in.
_MODEL_PRECISIONS = {
    tf.float32: ComputePrecision(activations=tf.float32, products=tf.float32),
    tf.float16: ComputePrecision(activations=tf.float16, products=tf.float16),
    tf.bfloat16: ComputePrecision(activations=tf.float32, products=tf.bfloat16,
                                  compiled_blocks=True),
}


class BertModel(object):
  """BERT encoder: embeddings, Transformer layers and the pooler.

  Example:

    input_ids = tf.constant([[31, 51, 99], [15, 5, 0]])
    input_mask = tf.constant([[1, 1, 1], [1, 1, 0]])
    token_type_ids = tf.constant([[0, 0, 1], [0, 2, 0]])
    config = modeling.BertConfig(vocab_size=32000, hidden_size=512, num_hidden_layers=8,
                                 num_attention_heads=8, intermediate_size=1024)
    model = modeling.BertModel(config=config, is_training=True, input_ids=input_ids,
                               input_mask=input_mask, token_type_ids=token_type_ids)
    pooled_output = model.get_pooled_output()
  """

  def __init__(self, config, is_training, input_ids, input_mask=None, token_type_ids=None,
               use_one_hot_embeddings=False, scope=None, compute_type=tf.float32,
               dropout_key=None, position_ids=None, packed_sequences=False, cls_positions=None):
    """Builds the model graph.

    Args:
      config: `BertConfig`.
      is_training: True applies dropout; False disables it.
      input_ids: int32 Tensor [batch_size, seq_length].
      input_mask: optional int32 Tensor [batch_size, seq_length], 1 for real tokens.
      token_type_ids: optional int32 Tensor [batch_size, seq_length].
      use_one_hot_embeddings: look the word embeddings up with a one-hot matmul (faster on TPU)
        instead of a gather.
      scope: variable scope; default "bert".
      compute_type: tf.float32, or tf.float16 / tf.bfloat16 for reduced precision (variables stay
        fp32; `ComputePrecision` says what each part computes in).
      dropout_key: optional int64 Tensor [2]: every dropout mask becomes a pure function of this
        key, the layer and the dropout site (stateless random ops), independent of op scheduling
        and thread count; None keeps TensorFlow's stateful dropout.
      position_ids: optional int32 Tensor [batch_size, seq_length]: each token's position in its
        own sequence (packed rows restart at 0 for each sequence); None: 0 .. seq_length - 1.
      packed_sequences: True: `input_mask` holds each token's sequence number (1..k, 0 for
        padding) and a token attends only to the tokens of its own sequence
        (`create_attention_mask_from_sequence_ids`); False: the release's padding mask.
      cls_positions: optional int32 Tensor [batch_size, num_sequences]: the pooled output is taken
        at each of these positions (each packed sequence's [CLS]), [batch_size * num_sequences,
        hidden_size]; None: at position 0, [batch_size, hidden_size].

    Raises:
      ValueError: for an invalid config, input shape or compute type.
    """
    config = copy.deepcopy(config)
    config.validate()
    # Heads that drop out values of their own key their masks on it too (`HEADS_LAYER`).
    self.dropout_key = dropout_key
    if not is_training:
      config.hidden_dropout_prob = 0.0
      config.attention_probs_dropout_prob = 0.0

    batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
    if input_mask is None:
      input_mask = tf.ones([batch_size, seq_length], dtype=tf.int32)
    if token_type_ids is None:
      token_type_ids = tf.zeros([batch_size, seq_length], dtype=tf.int32)

    precision = ComputePrecision.of(compute_type)
    with _tf1.variable_scope(scope, default_name="bert",
                             custom_getter=precision.variable_getter()):
      with _tf1.variable_scope("embeddings"):
        self.embedding_output, self.embedding_table = _embeddings(
            config, input_ids, token_type_ids, position_ids, use_one_hot_embeddings, dropout_key)

      with _tf1.variable_scope("encoder"):
        if packed_sequences:
          attention_mask = create_attention_mask_from_sequence_ids(input_mask)
        else:
          attention_mask = create_attention_mask_from_input_mask(input_ids, input_mask)
        self.all_encoder_layers = _encoder(config, self.embedding_output, attention_mask,
                                           dropout_key, precision)
      self.sequence_output = self.all_encoder_layers[-1]

      with _tf1.variable_scope("pooler"):
        self.pooled_output = pooler(self.sequence_output, config, cls_positions, precision)

  def get_pooled_output(self):
    """Pooled [CLS] representation, [batch_size, hidden_size] ([batch_size * num_sequences,
    hidden_size] with `cls_positions`), in `ComputePrecision.activations`: fp16 with fp16
    compute, else fp32."""
    return self.pooled_output

  def get_sequence_output(self):
    """Final encoder layer, [batch_size, seq_length, hidden_size], in
    `ComputePrecision.activations`: fp16 with fp16 compute, else fp32."""
    return self.sequence_output

  def get_all_encoder_layers(self):
    """List of every encoder layer's output, each [batch_size, seq_length, hidden_size]."""
    return self.all_encoder_layers

  def get_embedding_output(self):
    """Embeddings after sum, layer norm and dropout, [batch_size, seq_length, hidden_size], fp32."""
    return self.embedding_output

  def get_embedding_table(self):
    """The fp32 word embedding table, [vocab_size, hidden_size]."""
    return self.embedding_table


def _embeddings(config, input_ids, token_type_ids, position_ids, use_one_hot_embeddings,
                dropout_key):
  """`BertModel`'s embeddings in the current variable scope: looked up, summed, normalised and
  dropped out in fp32 (whatever the compute type; the encoder casts them).

  Args:
    config: `BertConfig`; input_ids, token_type_ids, position_ids: int32 Tensors [batch_size,
    seq_length] (position_ids optional); use_one_hot_embeddings, dropout_key: see `BertModel`.

  Returns:
    (output [batch_size, seq_length, hidden_size], word table [vocab_size, hidden_size]), fp32.
  """
  output, table = embedding_lookup(
      input_ids=input_ids, vocab_size=config.vocab_size, embedding_size=config.hidden_size,
      initializer_range=config.initializer_range, word_embedding_name="word_embeddings",
      use_one_hot_embeddings=use_one_hot_embeddings)
  output = embedding_postprocessor(
      input_tensor=output, use_token_type=True, token_type_ids=token_type_ids,
      token_type_vocab_size=config.type_vocab_size,
      token_type_embedding_name="token_type_embeddings", use_position_embeddings=True,
      position_embedding_name="position_embeddings", initializer_range=config.initializer_range,
      max_position_embeddings=config.max_position_embeddings,
      dropout_prob=config.hidden_dropout_prob,
      dropout_seed=dropout_site_key(dropout_key, EMBEDDINGS_LAYER, _EMBEDDINGS_SITE),
      position_ids=position_ids)
  return output, table


def _encoder(config, embedding_output, attention_mask, dropout_key, precision):
  """`BertModel`'s Transformer layers in the current variable scope.

  Args:
    config: `BertConfig`.
    embedding_output: fp32 Tensor [batch_size, seq_length, hidden_size].
    attention_mask: float32 Tensor [batch_size, seq_length, seq_length], 1 = may attend.
    dropout_key: see `BertModel`.
    precision: `ComputePrecision`; the embeddings and the mask are cast to its activations.

  Returns:
    list of every layer's output, each [batch_size, seq_length, hidden_size] in
    `precision.activations`.
  """
  return transformer_model(
      input_tensor=precision.to_activations(embedding_output),
      attention_mask=precision.to_activations(attention_mask), hidden_size=config.hidden_size,
      num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
      intermediate_size=config.intermediate_size,
      intermediate_act_fn=get_activation(config.hidden_act),
      hidden_dropout_prob=config.hidden_dropout_prob,
      attention_probs_dropout_prob=config.attention_probs_dropout_prob,
      initializer_range=config.initializer_range, do_return_all_layers=True,
      dropout_key=dropout_key, precision=precision)


def pooler(sequence_output, config, cls_positions=None, precision=None):
  """The pooled output: a tanh dense layer (variables `dense/{kernel,bias}` of the current scope)
  on the hidden state of each [CLS], which summarises its pair for classification.

  Args:
    sequence_output: float Tensor [batch_size, seq_length, hidden_size].
    config: `BertConfig`.
    cls_positions: optional int32 Tensor [batch_size, num_sequences], each packed sequence's
      [CLS]; None: the first token of each row.
    precision: optional `ComputePrecision` of the dense layer (see `dense_layer`).

  Returns:
    Tensor [batch_size, hidden_size], or [batch_size * num_sequences, hidden_size], in
    `precision.activations` (without one: the dtype of `sequence_output`).
  """
  if cls_positions is None:
    first_tokens = tf.squeeze(sequence_output[:, 0:1, :], axis=1)
  else:
    first_tokens = tf.gather(sequence_output, cls_positions, batch_dims=1)
    first_tokens = tf.reshape(first_tokens, [-1, config.hidden_size])
  return dense_layer(first_tokens, config.hidden_size, activation=tf.tanh, name="dense",
                     initializer_range=config.initializer_range, precision=precision)


_GELU_SCALE = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715


def gelu(x):
  """Gaussian Error Linear Unit, tanh approximation (as the original).

  The gradient is written out and recomputes tanh from `x`, so backpropagation keeps only the
  input alive: autodiff of the formula would keep about five [rows, intermediate_size]
  intermediates per layer until the backward pass (~0.5 GB for BERT-base at batch 8).

  Args:
    x: float Tensor.

  Returns:
    `x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`, same shape and dtype.
  """
  return _gelu_recomputing_gradient(x)


def _gelu_tanh(x):
  """tanh(sqrt(2/pi) * (x + 0.044715 x^3)); x * x * x rather than the generic power kernel."""
  return tf.tanh(_GELU_SCALE * (x + _GELU_CUBIC * (x * x * x)))


def _gelu_formula(x):
  """x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), in x's dtype."""
  return x * (0.5 * (1.0 + _gelu_tanh(x)))


def _gelu_recomputing_gradient(x):
  """GELU whose gradient (`_gelu_gradient`) is computed from `x` alone."""
  return fused_blocks.with_registered_gradient(_GELU_GRADIENT, _gelu_formula(x), [x])


_GELU_GRADIENT = "BertGeluRecomputingGradient"


@tf.RegisterGradient(_GELU_GRADIENT)
def _gelu_gradient(op, dy, *unused_dinputs):
  """Gradient of `_gelu_recomputing_gradient`; op.inputs are (gelu(x), x)."""
  x = op.inputs[1]
  # d/dx [x/2 (1 + t)] = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
  # The control edge holds the recomputation back until the backward pass reaches this layer;
  # otherwise the executor would run it during the forward pass (it only needs x) and keep
  # its results alive, which is what the recomputation is meant to avoid.
  with tf.control_dependencies([dy]):
    return [None, dy * _gelu_derivative(x)]


def _gelu_derivative(x):
  """d gelu(x) / dx = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t as in
  `_gelu_tanh`."""
  t = _gelu_tanh(x)
  inner_derivative = _GELU_SCALE * (1.0 + (3.0 * _GELU_CUBIC) * (x * x))
  return 0.5 * (1.0 + t) + (0.5 * x) * ((1.0 - t * t) * inner_derivative)


def _gelu_in_fp32_forward(x):
  """gelu(x) for a reduced-precision x, evaluated in fp32 and rounded once to x's dtype."""
  return tf.cast(_gelu_formula(tf.cast(x, tf.float32)), x.dtype)


def _gelu_in_fp32_backward(x, dy):
  """dy * gelu'(x) for reduced-precision x and dy, evaluated in fp32, rounded once."""
  return tf.cast(tf.cast(dy, tf.float32) * _gelu_derivative(tf.cast(x, tf.float32)), x.dtype)


# XLA compiles each into one element-wise loop: the casts and the ~10 element-wise ops of the
# formula become one pass over the [rows, intermediate_size] tensor instead of ten
# (docs/PERFORMANCE.md, "bf16").
_GELU_IN_FP32_FORWARD = tf.function(_gelu_in_fp32_forward, jit_compile=True, autograph=False)
_GELU_IN_FP32_BACKWARD = tf.function(_gelu_in_fp32_backward, jit_compile=True, autograph=False)


def gelu_fused_in_fp32(x):
  """GELU (as `gelu`) of a bf16 or fp16 Tensor, computed in fp32 inside one compiled kernel
  forward and one backward, each reading and writing x's dtype.

  Args:
    x: bf16 or fp16 Tensor.

  Returns:
    Tensor of x's shape and dtype: gelu(x) evaluated in fp32, rounded once.
  """
  return fused_blocks.with_registered_gradient(_GELU_FUSED_GRADIENT, _GELU_IN_FP32_FORWARD(x),
                                               [x])


_GELU_FUSED_GRADIENT = "BertGeluFusedInFp32Gradient"


@tf.RegisterGradient(_GELU_FUSED_GRADIENT)
def _gelu_fused_gradient(op, dy, *unused_dinputs):
  """Gradient of `gelu_fused_in_fp32`; op.inputs are (gelu(x), x)."""
  return [None, _GELU_IN_FP32_BACKWARD(op.inputs[1], dy)]


def get_activation(activation_string):
  """Maps an activation name to its function.

  Args:
    activation_string: "linear" (or None / "") -> None, "relu", "gelu", "tanh"; a callable is
      returned as is.

  Returns:
    The activation function, or None for linear.

  Raises:
    ValueError: for an unknown name.
  """
  if not isinstance(activation_string, str):
    return activation_string
  if not activation_string:
    return None
  activations = {"linear": None, "relu": tf.nn.relu, "gelu": gelu, "tanh": tf.tanh}
  name = activation_string.lower()
  if name not in activations:
    raise ValueError("unsupported activation %r (expected one of: %s)"
                     % (activation_string, ", ".join(sorted(activations))))
  return activations[name]


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
  """Matches graph variables to the variables of a checkpoint by name.

  Args:
    tvars: list of graph variables (usually the trainable ones).
    init_checkpoint: checkpoint path or prefix.

  Returns:
    (assignment_map, initialized_variable_names): an OrderedDict checkpoint name -> graph name for
    every variable present in both, and a dict whose keys are those names with and without ":0".

  Raises:
    ValueError: when a variable present in both has different shapes (it could not be loaded).
  """
  name_to_variable = collections.OrderedDict()
  for var in tvars:
    name = re.sub(r":\d+$", "", var.name)
    name_to_variable[name] = var

  assignment_map = collections.OrderedDict()
  initialized_variable_names = {}
  for name, shape in tf.train.list_variables(init_checkpoint):
    if name not in name_to_variable:
      continue
    graph_shape = name_to_variable[name].shape.as_list()
    if list(shape) != graph_shape:
      raise ValueError("%s: variable %s has shape %s in the checkpoint but %s in the graph"
                       % (init_checkpoint, name, list(shape), graph_shape))
    assignment_map[name] = name
    initialized_variable_names[name] = 1
    initialized_variable_names[name + ":0"] = 1
  return assignment_map, initialized_variable_names


# The layer index of the embeddings' dropout in `dropout_site_key` (encoder layers are 0..L-1).
EMBEDDINGS_LAYER = -1
# The layer index of a task head's dropout (the classifier's, on the pooled output).
HEADS_LAYER = -2
# Dropout sites of a layer, for `dropout_site_key`.
_EMBEDDINGS_SITE = 0
_ATTENTION_PROBS_SITE = 1
_ATTENTION_OUTPUT_SITE = 2
_LAYER_OUTPUT_SITE = 3
# The counter-based generator of the stateless masks: the same numbers on every device.
_DROPOUT_RNG = "philox"


def dropout(input_tensor, dropout_prob, seed=None):
  """Dropout with a drop probability (not a keep probability).

  Each value is kept with probability 1 - dropout_prob and scaled by 1 / (1 - dropout_prob), the
  mask semantics of `tf.nn.dropout` in both modes.

  Args:
    input_tensor: float Tensor.
    dropout_prob: probability of dropping each value; None or 0.0 returns the input.
    seed: optional int Tensor [2] (see `dropout_site_key`): the mask is a pure function of it
      (stateless random op); None draws it from TensorFlow's stateful generator.

  Returns:
    Tensor of the same shape and dtype.
  """
  if dropout_prob is None or dropout_prob == 0.0:
    return input_tensor
  if seed is None:
    return tf.nn.dropout(input_tensor, rate=dropout_prob)
  return tf.nn.experimental.stateless_dropout(input_tensor, rate=dropout_prob, seed=seed,
                                              rng_alg=_DROPOUT_RNG)


def dropout_site_key(dropout_key, layer, site):
  """The seed of one dropout site's mask, derived from the model's dropout key.

  Args:
    dropout_key: int Tensor [2], or None.
    layer: encoder layer index, `EMBEDDINGS_LAYER` or `HEADS_LAYER`.
    site: the dropout site within the layer (a module constant `_*_SITE`).

  Returns:
    int64 Tensor [2], distinct for every (key, layer, site); None when `dropout_key` is None.
  """
  if dropout_key is None:
    return None
  key = tf.random.experimental.stateless_fold_in(dropout_key, layer, alg=_DROPOUT_RNG)
  return tf.random.experimental.stateless_fold_in(key, site, alg=_DROPOUT_RNG)


def layer_norm(input_tensor, name=None):
  """Layer norm over the last axis, variables `<name or LayerNorm>/{beta,gamma}`.

  fp32 input uses the original formula (epsilon 1e-12); fp16 input uses the fused kernel with fp32
  statistics; bf16 input is cast to fp32, normalised by the original formula and cast back.

  Args:
    input_tensor: float Tensor [..., hidden].
    name: variable scope; default "LayerNorm".

  Returns:
    Tensor of the same shape and dtype.
  """
  if input_tensor.dtype == tf.bfloat16:
    return tf.cast(layer_norm(tf.cast(input_tensor, tf.float32), name), tf.bfloat16)
  if input_tensor.dtype != tf.float32:
    return fused_layer_norm.fused_layer_norm(input_tensor, scope=name or "LayerNorm")
  with _tf1.variable_scope(name, default_name="LayerNorm"):
    beta, gamma = fused_layer_norm.layer_norm_variables(
        tf.compat.dimension_value(input_tensor.shape[-1]))
    # The centred input is computed once and reused for the variance and the output: fewer
    # full-size passes forward and backward than tf.nn.moments + tf.nn.batch_normalization
    # (which also recentres through the mean), with the same formula. The fused batch-norm
    # kernel the fp16 path uses is slower than this on CPUs in fp32 (docs/PERFORMANCE.md).
    mean = tf.reduce_mean(input_tensor, axis=-1, keepdims=True)
    centered = input_tensor - mean
    variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
    return centered * (tf.math.rsqrt(variance + LAYER_NORM_EPSILON) * gamma) + beta


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None, dropout_seed=None):
  """Layer norm followed by dropout (`dropout_seed`: see `dropout`)."""
  return dropout(layer_norm(input_tensor, name), dropout_prob, seed=dropout_seed)


def create_initializer(initializer_range=0.02):
  """Truncated-normal initialiser with stddev `initializer_range`."""
  return _tf1.truncated_normal_initializer(stddev=initializer_range)


def dense_layer(input_tensor, units, activation=None, name=None, initializer_range=0.02,
                precision=None, keep_product_type=False):
  """Fully connected layer with variables `<name>/kernel` [in, units] and `<name>/bias` [units].

  Args:
    input_tensor: float Tensor [rows, in].
    units: output width.
    activation: optional function applied to the output.
    name: variable scope of the layer.
    initializer_range: stddev of the kernel's truncated-normal initialiser.
    precision: optional `ComputePrecision`: the variables are asked in its activations' dtype,
      and the input, kernel and bias cast to its products' (no op where they are in it). None:
      everything in the dtype of `input_tensor`.
    keep_product_type: the output stays in `precision.products`, for a product or a compiled
      kernel that reads it next; False: cast to `precision.activations`.

  Returns:
    Tensor [rows, units] in `precision.products` or `precision.activations` (see
    `keep_product_type`), `activation` applied.
  """
  precision = precision or ComputePrecision.of_tensor(input_tensor)
  width = tf.compat.dimension_value(input_tensor.shape[-1])
  with _tf1.variable_scope(name, default_name="dense"):
    kernel, bias = _dense_variables(width, units, precision.activations, initializer_range)
    x, kernel, bias = (precision.to_products(t) for t in (input_tensor, kernel, bias))
    if units > width:
      output = _widening_dense(x, kernel, bias)
    else:
      output = tf.nn.bias_add(tf.matmul(x, kernel), bias)
    if not keep_product_type:
      output = precision.to_activations(output)
  if activation is not None:
    output = activation(output)
  return output


def _cast_to(tensor, dtype):
  """`tensor` cast to `dtype`; the tensor itself (no op) when it is in `dtype` already (a ref
  variable's dtype is its value's)."""
  if tensor.dtype.base_dtype == tf.as_dtype(dtype):
    return tensor
  return tf.cast(tensor, dtype)


def _dense_variables(width, units, dtype, initializer_range):
  """Creates `kernel` [width, units] (truncated normal) and `bias` [units] (zeros), in that
  order and in `dtype`, in the current variable scope; returns (kernel, bias)."""
  kernel = _tf1.get_variable("kernel", [width, units], dtype=dtype,
                             initializer=create_initializer(initializer_range))
  bias = _tf1.get_variable("bias", [units], dtype=dtype, initializer=_tf1.zeros_initializer())
  return kernel, bias


def _widening_dense(x, kernel, bias):
  """`x kernel + bias` for a layer with more outputs than inputs (intermediate layer, fused QKV).

  Autodiff computes the input gradient as `MatMul(dy, kernel, transpose_b=True)`; with the long
  reduction axis of a widening layer (dy [rows, 3072] x kernel^T) oneDNN runs that op 20-40%
  slower than the same product as a `BatchMatMulV2` with `adj_y` (docs/PERFORMANCE.md). (An
  explicit transpose of the kernel does not help: Grappler folds it back into `transpose_b`.)
  The forward pass and the other gradients (`_widening_dense_gradient`) are what autodiff builds.

  Args:
    x: [rows, in]; kernel: [in, units]; bias: [units]; all in the product's dtype.

  Returns:
    Tensor [rows, units].
  """
  output = tf.nn.bias_add(tf.matmul(x, kernel), bias)
  return fused_blocks.with_registered_gradient(_WIDENING_DENSE_GRADIENT, output,
                                               [x, kernel, bias])


_WIDENING_DENSE_GRADIENT = "BertWideningDenseGradient"


@tf.RegisterGradient(_WIDENING_DENSE_GRADIENT)
def _widening_dense_gradient(op, dy, *unused_dinputs):
  """Gradient of `_widening_dense`; op.inputs are (output, x, kernel, bias)."""
  x, kernel = op.inputs[1], op.inputs[2]
  dx = tf.raw_ops.BatchMatMulV2(x=dy, y=kernel, adj_y=True)
  dkernel = tf.matmul(x, dy, transpose_a=True)
  dbias = tf.raw_ops.BiasAddGrad(out_backprop=dy)
  return [None, dx, dkernel, dbias]


def embedding_lookup(input_ids, vocab_size, embedding_size=128, initializer_range=0.02,
                     word_embedding_name="word_embeddings", use_one_hot_embeddings=False):
  """Looks up word embeddings (always fp32).

  Args:
    input_ids: int32 Tensor [batch_size, seq_length] (a trailing axis of size 1 is accepted).
    vocab_size: rows of the table.
    embedding_size: width of the table.
    initializer_range: stddev of the table's initialiser.
    word_embedding_name: name of the table variable.
    use_one_hot_embeddings: one-hot matmul instead of a gather.

  Returns:
    (output [batch_size, seq_length, embedding_size] fp32, table [vocab_size, embedding_size]).
  """
  if input_ids.shape.ndims == 3:
    input_ids = tf.squeeze(input_ids, axis=[2])
  embedding_table = _tf1.get_variable(
      name=word_embedding_name, shape=[vocab_size, embedding_size], dtype=tf.float32,
      initializer=create_initializer(initializer_range))
  batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
  flat_input_ids = tf.reshape(input_ids, [-1])
  if use_one_hot_embeddings:
    one_hot_input_ids = tf.one_hot(flat_input_ids, depth=vocab_size)
    output = tf.matmul(one_hot_input_ids, embedding_table)
  else:
    output = tf.gather(embedding_table, flat_input_ids)
  output = tf.reshape(output, [batch_size, seq_length, embedding_size])
  return output, embedding_table


def embedding_postprocessor(input_tensor, use_token_type=False, token_type_ids=None,
                            token_type_vocab_size=16, token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True, position_embedding_name="position_embeddings",
                            initializer_range=0.02, max_position_embeddings=512, dropout_prob=0.1,
                            dropout_seed=None, position_ids=None):
  """Adds token type and position embeddings, then layer norm and dropout.

  Args:
    input_tensor: float Tensor [batch_size, seq_length, width] (word embeddings).
    use_token_type: add token type (segment) embeddings.
    token_type_ids: int32 Tensor [batch_size, seq_length]; required with `use_token_type`.
    token_type_vocab_size: rows of the token type table.
    token_type_embedding_name: name of that table.
    use_position_embeddings: add absolute position embeddings.
    position_embedding_name: name of the position table.
    initializer_range: stddev of the initialisers.
    max_position_embeddings: rows of the position table; at least `seq_length`.
    dropout_prob: dropout after the layer norm.
    dropout_seed: optional seed of the stateless mask (see `dropout`).
    position_ids: optional int32 Tensor [batch_size, seq_length], each token's row of the position
      table (packed sequences restart at 0); None: rows 0 .. seq_length - 1.

  Returns:
    Tensor of the shape and dtype of `input_tensor`.

  Raises:
    ValueError: when token type ids are missing or the sequence is longer than the position table.
  """
  batch_size, seq_length, width = get_shape_list(input_tensor, expected_rank=3)
  output = input_tensor

  if use_token_type:
    if token_type_ids is None:
      raise ValueError("token_type_ids must be given when use_token_type is True")
    token_type_table = _tf1.get_variable(
        name=token_type_embedding_name, shape=[token_type_vocab_size, width], dtype=tf.float32,
        initializer=create_initializer(initializer_range))
    # The table is tiny: a one-hot matmul is faster than a gather on every device.
    one_hot_ids = tf.one_hot(tf.reshape(token_type_ids, [-1]), depth=token_type_vocab_size)
    token_type_embeddings = tf.matmul(one_hot_ids, token_type_table)
    output += tf.reshape(token_type_embeddings, [batch_size, seq_length, width])

  if use_position_embeddings:
    if isinstance(seq_length, int) and seq_length > max_position_embeddings:
      raise ValueError("sequence length %d exceeds max_position_embeddings %d"
                       % (seq_length, max_position_embeddings))
    full_position_embeddings = _tf1.get_variable(
        name=position_embedding_name, shape=[max_position_embeddings, width], dtype=tf.float32,
        initializer=create_initializer(initializer_range))
    if position_ids is None:
      position_embeddings = tf.slice(full_position_embeddings, [0, 0], [seq_length, -1])
      # [seq_length, width] broadcasts over the batch.
      output += tf.expand_dims(position_embeddings, 0)
    else:
      output += tf.gather(full_position_embeddings, position_ids)

  return layer_norm_and_dropout(output, dropout_prob, dropout_seed=dropout_seed)


def create_attention_mask_from_input_mask(from_tensor, to_mask):
  """Builds the 3D attention mask from a 2D padding mask.

  Args:
    from_tensor: Tensor [batch_size, from_seq_length, ...] (only its shape is used).
    to_mask: int32 Tensor [batch_size, to_seq_length], 1 for real tokens.

  Returns:
    float32 Tensor [batch_size, from_seq_length, to_seq_length]: 1 where the key is a real token.
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  batch_size, from_seq_length = from_shape[0], from_shape[1]
  to_shape = get_shape_list(to_mask, expected_rank=2)
  to_seq_length = to_shape[1]
  to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)
  # Every query position attends to the same keys: broadcast along the query axis.
  broadcast_ones = tf.ones(shape=[batch_size, from_seq_length, 1], dtype=tf.float32)
  return broadcast_ones * to_mask


def create_attention_mask_from_sequence_ids(sequence_ids):
  """Builds the block-diagonal attention mask of packed rows.

  Args:
    sequence_ids: int Tensor [batch_size, seq_length]: each token's sequence number within its row
      (1..k), 0 for padding.

  Returns:
    float32 Tensor [batch_size, seq_length, seq_length]: 1 where the query and the key belong to
    the same sequence, 0 elsewhere and for padding keys.
  """
  sequence_ids = tf.cast(sequence_ids, tf.int32)
  same_sequence = tf.equal(sequence_ids[:, :, None], sequence_ids[:, None, :])
  real_key = tf.greater(sequence_ids, 0)[:, None, :]
  return tf.cast(tf.logical_and(same_sequence, real_key), tf.float32)


def _fused_projection(input_2d, units, names, initializer_range, precision):
  """Dense layers `names` on the same input as one matmul; their variables stay separate.

  The kernels `<name>/kernel` [in, units] and biases `<name>/bias` [units] are created by
  `_dense_variables`, as in `dense_layer` (same names, shapes, initialisers and creation order), so
  checkpoints are unchanged; the graph concatenates them for the matmul, and the gradient of the
  concatenation hands each variable its own slice.

  Args:
    input_2d: float Tensor [rows, in] in `precision.activations`.
    units: output width of each layer.
    names: variable scope names of the layers, in output order.
    initializer_range: stddev of the kernels' truncated-normal initialiser.
    precision: `ComputePrecision` of the product (see `dense_layer`).

  Returns:
    Tensor [rows, len(names) * units]: the layers' outputs side by side, in `precision.products`.
  """
  width = tf.compat.dimension_value(input_2d.shape[-1])
  kernels, biases = [], []
  for name in names:
    with _tf1.variable_scope(name):
      kernel, bias = _dense_variables(width, units, precision.activations, initializer_range)
    kernels.append(kernel)
    biases.append(bias)
  return _widening_dense(precision.to_products(input_2d),
                         precision.to_products(tf.concat(kernels, axis=1)),
                         precision.to_products(tf.concat(biases, axis=0)))


def _split_heads(tensor_2d, batch_size, seq_length, num_heads, head_size):
  """[batch*seq, heads*head_size] -> [batch, heads, seq, head_size]."""
  tensor_4d = tf.reshape(tensor_2d, [batch_size, seq_length, num_heads, head_size])
  return tf.transpose(tensor_4d, [0, 2, 1, 3])


def attention_layer(from_tensor, to_tensor, attention_mask=None, num_attention_heads=1,
                    size_per_head=512, query_act=None, key_act=None, value_act=None,
                    attention_probs_dropout_prob=0.0, initializer_range=0.02,
                    do_return_2d_tensor=False, batch_size=None, from_seq_length=None,
                    to_seq_length=None, dropout_seed=None, precision=None):
  """Multi-head scaled dot-product attention from `from_tensor` to `to_tensor`.

  Args:
    from_tensor: float Tensor [batch_size, from_seq_length, width], or 2D [batch*from_seq, width]
      with `batch_size` and `from_seq_length` given.
    to_tensor: float Tensor [batch_size, to_seq_length, width], or 2D likewise.
    attention_mask: optional Tensor [batch_size, from_seq_length, to_seq_length], 1 = may attend.
    num_attention_heads: number of heads N.
    size_per_head: width D of each head.
    query_act, key_act, value_act: optional activations of the projections.
    attention_probs_dropout_prob: dropout on the attention probabilities.
    initializer_range: stddev of the projection initialisers.
    do_return_2d_tensor: return [batch*from_seq, N*D] instead of [batch, from_seq, N*D].
    batch_size, from_seq_length, to_seq_length: needed for 2D inputs.
    dropout_seed: optional seed of the stateless attention-probability mask (see `dropout`).
    precision: optional `ComputePrecision`: the projections (with their bias adds) and the two
      attention products run in its products' dtype, the probabilities are computed as its
      `attention_probabilities` says. None: everything in the dtype of `from_tensor`.

  Returns:
    float Tensor [batch_size, from_seq_length, N*D] (or 2D, see above), in `precision.products`
    (the next product reads it).

  Raises:
    ValueError: for inconsistent shapes.
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])
  if len(from_shape) != len(to_shape):
    raise ValueError("the rank of from_tensor must match the rank of to_tensor")
  if len(from_shape) == 3:
    batch_size, from_seq_length, to_seq_length = from_shape[0], from_shape[1], to_shape[1]
  elif batch_size is None or from_seq_length is None or to_seq_length is None:
    raise ValueError("for 2D inputs, batch_size, from_seq_length and to_seq_length are required")

  precision = precision or ComputePrecision.of_tensor(from_tensor)
  from_2d = reshape_to_matrix(from_tensor)
  to_2d = reshape_to_matrix(to_tensor)
  width = num_attention_heads * size_per_head

  if from_2d is to_2d and from_seq_length == to_seq_length:
    # Self-attention: one matmul against the three kernels side by side (a wider matmul uses
    # the cores better than three narrow ones), one bias add, and one transpose that puts the
    # projection axis first, so that unstacking it costs no copy.
    qkv = _fused_projection(from_2d, width, ("query", "key", "value"), initializer_range,
                            precision)
    qkv = tf.reshape(qkv, [batch_size, from_seq_length, 3, num_attention_heads, size_per_head])
    query, key, value = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]), axis=0)
    query, key, value = (act(t) if act is not None else t
                         for act, t in ((query_act, query), (key_act, key), (value_act, value)))
  else:
    query, key, value = (
        dense_layer(tensor, width, act, name, initializer_range, precision,
                    keep_product_type=True)
        for tensor, act, name in ((from_2d, query_act, "query"), (to_2d, key_act, "key"),
                                  (to_2d, value_act, "value")))
    query = _split_heads(query, batch_size, from_seq_length, num_attention_heads, size_per_head)
    key = _split_heads(key, batch_size, to_seq_length, num_attention_heads, size_per_head)
    value = _split_heads(value, batch_size, to_seq_length, num_attention_heads, size_per_head)

  # [batch, heads, from_seq, to_seq], the probabilities in the scores' dtype.
  scores = tf.matmul(query, key, transpose_b=True)
  probs = precision.attention_probabilities(scores, attention_mask, size_per_head,
                                            attention_probs_dropout_prob, dropout_seed)
  context = tf.matmul(probs, value)
  context = tf.transpose(context, [0, 2, 1, 3])  # [batch, from_seq, heads, D]
  if do_return_2d_tensor:
    return tf.reshape(context, [batch_size * from_seq_length, width])
  return tf.reshape(context, [batch_size, from_seq_length, width])


def transformer_model(input_tensor, attention_mask=None, hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                      initializer_range=0.02, do_return_all_layers=False, dropout_key=None,
                      precision=None):
  """The Transformer encoder of "Attention is All You Need" as BERT uses it.

  Args:
    input_tensor: float Tensor [batch_size, seq_length, hidden_size] in the activations' dtype.
    attention_mask: optional Tensor [batch_size, seq_length, seq_length], 1 = may attend.
    hidden_size: width H.
    num_hidden_layers: number of layers L.
    num_attention_heads: heads per layer; must divide H.
    intermediate_size: feed-forward width I.
    intermediate_act_fn: feed-forward activation, applied as
      `precision.feed_forward_activation` says (in reduced precision, evaluated in fp32).
    hidden_dropout_prob: dropout on the attention and feed-forward outputs.
    attention_probs_dropout_prob: dropout on the attention probabilities.
    initializer_range: stddev of the initialisers.
    do_return_all_layers: return every layer's output instead of the last one.
    dropout_key: optional int Tensor [2]: stateless dropout, each layer's and site's mask seeded
      by `dropout_site_key(dropout_key, layer, site)`; None: stateful dropout.
    precision: optional `ComputePrecision` whose activations' dtype `input_tensor` is in; None:
      everything in the dtype of `input_tensor`.

  Returns:
    Tensor [batch_size, seq_length, H] (the last layer), or a list of L of them, in the dtype of
    `input_tensor`.

  Raises:
    ValueError: for an H not divisible by the number of heads or a mismatched input width.
  """
  if hidden_size % num_attention_heads != 0:
    raise ValueError("hidden size (%d) is not a multiple of the number of attention heads (%d)"
                     % (hidden_size, num_attention_heads))
  size_per_head = hidden_size // num_attention_heads
  batch_size, seq_length, input_width = get_shape_list(input_tensor, expected_rank=3)
  if input_width != hidden_size:
    raise ValueError("the width of the input tensor (%d) != hidden size (%d)"
                     % (input_width, hidden_size))

  precision = precision or ComputePrecision.of_tensor(input_tensor)
  # The layers work on [batch*seq, H] matrices, which avoids a reshape per dense layer.
  prev_output = reshape_to_matrix(input_tensor)
  all_layer_outputs = []
  for layer_idx in range(num_hidden_layers):
    with _tf1.variable_scope("layer_%d" % layer_idx):
      layer_input = prev_output
      with _tf1.variable_scope("attention"):
        with _tf1.variable_scope("self"):
          attention_output = attention_layer(
              from_tensor=layer_input, to_tensor=layer_input, attention_mask=attention_mask,
              num_attention_heads=num_attention_heads, size_per_head=size_per_head,
              attention_probs_dropout_prob=attention_probs_dropout_prob,
              initializer_range=initializer_range, do_return_2d_tensor=True,
              batch_size=batch_size, from_seq_length=seq_length, to_seq_length=seq_length,
              dropout_seed=dropout_site_key(dropout_key, layer_idx, _ATTENTION_PROBS_SITE),
              precision=precision)
        with _tf1.variable_scope("output"):
          attention_output = _output_dropout_residual_layer_norm(
              attention_output, layer_input, hidden_size, initializer_range, precision,
              hidden_dropout_prob,
              dropout_site_key(dropout_key, layer_idx, _ATTENTION_OUTPUT_SITE))

      with _tf1.variable_scope("intermediate"):
        intermediate_output = precision.feed_forward_activation(intermediate_act_fn, dense_layer(
            attention_output, intermediate_size, name="dense", initializer_range=initializer_range,
            precision=precision,
            keep_product_type=precision.fuses_activation(intermediate_act_fn)))

      with _tf1.variable_scope("output"):
        layer_output = _output_dropout_residual_layer_norm(
            intermediate_output, attention_output, hidden_size, initializer_range, precision,
            hidden_dropout_prob, dropout_site_key(dropout_key, layer_idx, _LAYER_OUTPUT_SITE))
      prev_output = layer_output
      all_layer_outputs.append(layer_output)

  input_shape = [batch_size, seq_length, hidden_size]
  if do_return_all_layers:
    return [reshape_from_matrix(output, input_shape) for output in all_layer_outputs]
  return reshape_from_matrix(prev_output, input_shape)


def _output_dropout_residual_layer_norm(x, residual, hidden_size, initializer_range, precision,
                                        dropout_prob, dropout_seed):
  """A sub-layer's end: layer_norm(dropout(dense(x)) + residual), variables `dense/{kernel,bias}`
  and `LayerNorm/{beta,gamma}` in the current scope; the product's output goes to
  `precision.dropout_residual_layer_norm` in the products' dtype.

  Args:
    x: Tensor [rows, width], in the activations' or the products' dtype; residual: Tensor [rows,
      hidden_size] in the activations'.
    hidden_size, initializer_range, precision: see `transformer_model`.
    dropout_prob, dropout_seed: see `dropout`.

  Returns:
    Tensor [rows, hidden_size] in the dtype of `residual`.
  """
  output = dense_layer(x, hidden_size, name="dense", initializer_range=initializer_range,
                       precision=precision, keep_product_type=True)
  return precision.dropout_residual_layer_norm(output, residual, dropout_prob, dropout_seed)


def get_shape_list(tensor, expected_rank=None, name=None):
  """Returns the shape of a tensor, static dimensions as ints and dynamic ones as scalar Tensors.

  Args:
    tensor: a Tensor.
    expected_rank: optional int or list of ints; raises when the rank differs.
    name: name used in the error message.

  Returns:
    list with one entry per dimension.
  """
  if expected_rank is not None:
    assert_rank(tensor, expected_rank, name)
  shape = tensor.shape.as_list()
  dynamic_indexes = [index for index, dim in enumerate(shape) if dim is None]
  if not dynamic_indexes:
    return shape
  dynamic_shape = tf.shape(tensor)
  for index in dynamic_indexes:
    shape[index] = dynamic_shape[index]
  return shape


def reshape_to_matrix(input_tensor):
  """Reshapes a tensor of rank >= 2 to [-1, width] (rank 2 is returned as is)."""
  ndims = input_tensor.shape.ndims
  if ndims < 2:
    raise ValueError("input tensor must have at least rank 2, shape = %s" % input_tensor.shape)
  if ndims == 2:
    return input_tensor
  width = tf.compat.dimension_value(input_tensor.shape[-1])
  return tf.reshape(input_tensor, [-1, width])


def reshape_from_matrix(output_tensor, orig_shape_list):
  """Reshapes a [-1, width] matrix back to `orig_shape_list[:-1] + [width]`."""
  if len(orig_shape_list) == 2:
    return output_tensor
  output_shape = get_shape_list(output_tensor)
  return tf.reshape(output_tensor, orig_shape_list[0:-1] + [output_shape[-1]])


def assert_rank(tensor, expected_rank, name=None):
  """Raises ValueError when the rank of `tensor` is not (one of) `expected_rank`."""
  if name is None:
    name = tensor.name
  expected = {expected_rank} if isinstance(expected_rank, int) else set(expected_rank)
  actual_rank = tensor.shape.ndims
  if actual_rank not in expected:
    raise ValueError("for the tensor %s the actual rank %s (shape %s) is not the expected rank %s"
                     % (name, actual_rank, tensor.shape, sorted(expected)))
