"""What a pretraining checkpoint holds, the variables a model expects, and writing checkpoints.

A training checkpoint holds, besides the model's weights (`bert/...`, `cls/predictions/...`,
`cls/seq_relationship/...`, the names of the original release), the optimizer's state:

  <weight>/adam_m, <weight>/adam_v   moments of LAMB and AdamWeightDecay (same names for both)
  <weight>/accum, local_step         gradient accumulators and the micro-step counter
                                     (--num_accumulation_steps > 1)
  current_loss_scale, good_steps     the dynamic loss scale (--manual_fp16, --amp on a GPU) and
  skipped_update_count               the updates it skipped as non-finite
  micro_step                         micro-steps done (--deterministic_run)
  global_step                        optimizer updates done

The variables a model expects come from a throw-away graph in which the real `model_fn` (or model)
is built, so they cannot drift from modeling.py and optimization.py.
"""

import numpy as np
import tensorflow as tf

import optimization

_tf1 = tf.compat.v1

ROLE_WEIGHT = "weight"
ROLE_MOMENT = "moment"
ROLE_ACCUMULATION = "accumulation"
ROLE_LOSS_SCALE = "loss scale"
ROLE_STEP = "step"
ROLE_OTHER = "other"

MODEL_SCOPES = ("bert/", "cls/")
# The optimizers' slots (`optimization.slot_names`), whichever optimizer wrote the checkpoint.
MOMENT_SUFFIXES = tuple(sorted({"/" + name for optimizer_type in optimization.OPTIMIZER_TYPES
                                for name in optimization.slot_names(optimizer_type)}))
ACCUMULATOR_SUFFIX = "/accum"
ACCUMULATION_COUNTER = "local_step"
LOSS_SCALE_VARIABLES = ("current_loss_scale", "good_steps", "skipped_update_count")
GLOBAL_STEP = "global_step"


def variable_role(name):
  """The role of a checkpoint variable (one of the ROLE_* names) from its name."""
  if name.endswith(MOMENT_SUFFIXES):
    return ROLE_MOMENT
  if name.endswith(ACCUMULATOR_SUFFIX) or name == ACCUMULATION_COUNTER:
    return ROLE_ACCUMULATION
  if name in LOSS_SCALE_VARIABLES:
    return ROLE_LOSS_SCALE
  if name == GLOBAL_STEP:
    return ROLE_STEP
  if name.startswith(MODEL_SCOPES):
    return ROLE_WEIGHT
  return ROLE_OTHER


def by_role(shapes, role):
  """The entries of a name -> shape dict whose role is `role`, same order."""
  return {name: shape for name, shape in shapes.items() if variable_role(name) == role}


def checkpoint_shapes(checkpoint):
  """dict name -> shape (list of ints) of the variables in a checkpoint prefix."""
  return {name: list(shape) for name, shape in tf.train.list_variables(checkpoint)}


def checkpoint_files(checkpoint):
  """The files of a V2 checkpoint prefix (index and data shards), sorted."""
  return sorted(tf.io.gfile.glob(checkpoint + ".index") + tf.io.gfile.glob(checkpoint + ".data-*"))


def checkpoint_size(checkpoint):
  """Bytes on disk of a checkpoint prefix's index and data files."""
  return sum(tf.io.gfile.stat(path).length for path in checkpoint_files(checkpoint))


def data_files(checkpoint):
  """The data shards of a V2 checkpoint prefix (`<prefix>.data-0000i-of-0000n`), sorted."""
  return sorted(tf.io.gfile.glob(checkpoint + ".data-*"))


def check_data_files(checkpoint):
  """Checks, without reading the values, that a checkpoint's data files can hold its tensors.

  A V2 checkpoint's data shards hold every tensor's bytes back to back; the index lists each
  tensor's dtype and shape. Shards that together hold fewer bytes than the index's fixed-size
  tensors need were cut short (a copy or an upload that did not finish).

  Args:
    checkpoint: a checkpoint prefix.

  Returns:
    the bytes the index's fixed-size tensors need.

  Raises:
    ValueError: naming the data file(s), the bytes they hold and the bytes needed, or a missing
      shard.
  """
  reader = tf.train.load_checkpoint(checkpoint)
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  needed = sum(int(np.prod(shapes[name], dtype=np.int64)) * dtypes[name].size
               for name in shapes if dtypes[name] != tf.string)
  files = data_files(checkpoint)
  if not files:
    raise ValueError("%s: no data file (%s.data-*) beside the index" % (checkpoint, checkpoint))
  expected_count = int(files[0].rsplit("-of-", 1)[1])
  if len(files) != expected_count:
    raise ValueError("%s: %d of its %d data files are present (%s)"
                     % (checkpoint, len(files), expected_count, ", ".join(files)))
  held = sum(tf.io.gfile.stat(path).length for path in files)
  if held < needed:
    raise ValueError("%s has %d bytes, its index lists %d bytes of tensors: the data file is "
                     "truncated" % (" + ".join(files), held, needed))
  return needed


def read_tensors(checkpoint, names):
  """dict name -> numpy value of `names` in a checkpoint, values exactly as stored.

  Raises:
    ValueError: naming the data file(s) and the tensor, when a value cannot be read (a corrupt
      or truncated data file).
  """
  reader = tf.train.load_checkpoint(checkpoint)
  values = {}
  for name in names:
    try:
      values[name] = reader.get_tensor(name)
    except (IndexError, tf.errors.OpError) as e:
      raise ValueError("%s: cannot read %r: %s" % (" + ".join(data_files(checkpoint)), name,
                                                   getattr(e, "message", str(e)).strip()))
  return values


def write_checkpoint(prefix, tensors):
  """Writes a V2 checkpoint (`prefix`.index, `prefix`.data-00000-of-00001) holding `tensors`.

  Args:
    prefix: the checkpoint prefix, e.g. ".../bert_model.ckpt".
    tensors: dict name -> numpy array, written bit-exactly under those names and dtypes.
  """
  names = sorted(tensors)
  with tf.Graph().as_default():
    # Values enter through placeholders: as constants, BERT-large would exceed the 2 GB GraphDef.
    feeds = {_tf1.placeholder(tf.as_dtype(tensors[name].dtype), np.shape(tensors[name])):
             tensors[name] for name in names}
    save = tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                             tensors=list(feeds))
    with _tf1.Session() as session:
      session.run(save, feed_dict=feeds)


def placeholder_features(max_seq_length, max_predictions_per_seq, batch_size=1,
                         sequences_per_row=0):
  """Placeholders for the parsed features of a pretraining batch (int32 ids, float32 weights);
  with `sequences_per_row` K > 0, those of packed rows of up to K sequences."""
  def ids(width):
    return _tf1.placeholder(tf.int32, [batch_size, width])
  features = {
      "input_ids": ids(max_seq_length),
      "input_mask": ids(max_seq_length),
      "segment_ids": ids(max_seq_length),
      "masked_lm_positions": ids(max_predictions_per_seq),
      "masked_lm_ids": ids(max_predictions_per_seq),
      "masked_lm_weights": _tf1.placeholder(tf.float32, [batch_size, max_predictions_per_seq]),
      "next_sentence_labels": ids(max(1, sequences_per_row)),
  }
  if sequences_per_row:
    features.update(positions=ids(max_seq_length), next_sentence_positions=ids(sequences_per_row),
                    next_sentence_weights=_tf1.placeholder(tf.float32,
                                                           [batch_size, sequences_per_row]))
  return features


class GraphVariables(object):
  """The global variables (what a checkpoint saves) of a graph built once by `build_fn`.

  Attributes:
    shapes: dict name -> shape (list of ints), in creation order.
  """

  def __init__(self, build_fn):
    """Builds `build_fn()` in a fresh tf.Graph (never the caller's default graph)."""
    self._graph = tf.Graph()
    with self._graph.as_default():
      # With op determinism on (--deterministic_run) random initializers need a graph seed; the
      # Estimator sets its own in the real graph.
      _tf1.set_random_seed(0)
      build_fn()
      self._variables = {var.op.name: var for var in _tf1.global_variables()}
    self.shapes = {name: var.shape.as_list() for name, var in self._variables.items()}

  def initial_values(self, names):
    """dict name -> numpy value the initializers of `names` give (as in a fresh run)."""
    if not names:
      return {}
    variables = [self._variables[name] for name in names]
    with self._graph.as_default(), _tf1.Session() as session:
      session.run([var.initializer for var in variables])
      values = session.run(variables)
    return dict(zip(names, values))


def model_fn_variables(model_fn, mode, max_seq_length, max_predictions_per_seq,
                       sequences_per_row=0):
  """The variables the Estimator's `model_fn` creates in `mode` (TRAIN: with optimizer state).

  Args:
    model_fn: model_fn(features, labels, mode, params) as given to the Estimator.
    mode: tf.estimator.ModeKeys.TRAIN or EVAL.
    max_seq_length, max_predictions_per_seq: feature widths.
    sequences_per_row: K for a model_fn of packed rows of up to K sequences, else 0.

  Returns:
    `GraphVariables`.
  """
  def build():
    # The Estimator creates the global step before it calls model_fn, in every mode.
    _tf1.train.get_or_create_global_step()
    model_fn(placeholder_features(max_seq_length, max_predictions_per_seq,
                                  sequences_per_row=sequences_per_row), None, mode, {})
  return GraphVariables(build)


def latest_checkpoint(directory):
  """The newest checkpoint prefix of `directory`, or None (also for a missing directory)."""
  if not tf.io.gfile.isdir(directory):
    return None
  return tf.train.latest_checkpoint(directory)


def resolve_checkpoint(path):
  """A checkpoint prefix from a prefix or a directory (its newest checkpoint).

  Raises:
    ValueError: naming `path` when it is neither.
  """
  if tf.io.gfile.isdir(path):
    checkpoint = tf.train.latest_checkpoint(path)
    if not checkpoint:
      raise ValueError("%s holds no checkpoint (no 'checkpoint' file naming one)" % path)
    return checkpoint
  if not tf.io.gfile.exists(path + ".index"):
    raise ValueError("%s is not a checkpoint: %s.index does not exist" % (path, path))
  return path


def describe_size(num_bytes):
  """'1.34 GB' / '12.3 MB' / '512 B'."""
  for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
    if num_bytes >= scale:
      return "%.3g %s" % (num_bytes / scale, unit)
  return "%d B" % num_bytes

