"""Checks a checkpoint already in --output_dir against the model the flags describe.

The Estimator resumes from the newest checkpoint of its model directory. When that checkpoint was
written by another model (another width, depth or vocabulary), TensorFlow fails deep inside the
first step ("Input to reshape is a tensor with 16384 values ..."); when it lacks a variable of the
graph, the restore fails with a bare NotFoundError. `check_output_dir` runs before the Estimator
builds anything and decides (docs/DECISIONS.md, "Resuming from --output_dir"):

  model weights missing, extra or of another shape      refuse, naming variable and shapes
  no optimizer moments (a weights-only checkpoint)      refuse
  no moments of some weights (a run that did not train  refuse
  them: --nonext_sentence_loss)
  no global_step, or another variable of the graph      refuse
  optimizer switched (adam <-> lamb)                    continue: same moments, log line
  accumulation turned on                                continue: accumulators and local_step
                                                        added at their initial values, log line
  accumulation turned off                               continue: accumulators not restored
  loss scaling turned on / off                          continue: scale starts at
                                                        --init_loss_scale / is not restored

The optimizer a run trains with is recorded in `<output_dir>/optimizer.json` (the checkpoint's
variable names are the same for both), so that a later run can say when it switches.
"""

import json
import logging as std_logging
import os

from absl import logging
import tensorflow as tf

import optimization
from utils.checkpoints import contents as ckpt

OPTIMIZER_RECORD = "optimizer.json"
# Variables listed in full in a message; the rest are counted.
MAX_LISTED = 5


class CheckpointMismatch(ValueError):
  """The checkpoint in the output directory cannot be resumed by the model the flags describe."""


class Decision(object):
  """What resuming a checkpoint with a model means.

  Attributes:
    refusal: None, or the message explaining why the checkpoint cannot be resumed.
    notes: log lines, one per allowed change.
    additions: names of variables the model has and the checkpoint lacks, safe to add with their
      initial values.
  """

  def __init__(self, refusal=None, notes=(), additions=()):
    self.refusal = refusal
    self.notes = list(notes)
    self.additions = list(additions)


def list_some(lines):
  """The first MAX_LISTED of `lines` and a count of the rest, one per indented line."""
  listed = list(lines[:MAX_LISTED])
  if len(lines) > MAX_LISTED:
    listed.append("... and %d more" % (len(lines) - MAX_LISTED))
  return "\n  ".join(listed)


def _count_names(names):
  """'local_step and 206 <var>/accum' style summary of variable names."""
  accumulators = [name for name in names if name.endswith(ckpt.ACCUMULATOR_SUFFIX)]
  others = [name for name in names if name not in accumulators]
  parts = others + (["%d <weight>%s" % (len(accumulators), ckpt.ACCUMULATOR_SUFFIX)]
                    if accumulators else [])
  return " and ".join(parts)


def weight_mismatches(checkpoint_shapes, model_shapes):
  """One line per model weight missing from either side or of a different shape.

  Args:
    checkpoint_shapes: dict name -> shape of the checkpoint's variables.
    model_shapes: dict name -> shape of the model's variables.

  Returns:
    list of strings, e.g. "bert/embeddings/word_embeddings: checkpoint [120, 32], model [120, 64]".
  """
  stored = ckpt.by_role(checkpoint_shapes, ckpt.ROLE_WEIGHT)
  wanted = ckpt.by_role(model_shapes, ckpt.ROLE_WEIGHT)
  lines = []
  for name, shape in wanted.items():
    if name not in stored:
      lines.append("%s %s: not in the checkpoint" % (name, shape))
    elif stored[name] != shape:
      lines.append("%s: checkpoint %s, model %s" % (name, stored[name], shape))
  lines.extend("%s %s: in the checkpoint, not in the model" % (name, shape)
               for name, shape in stored.items() if name not in wanted)
  return lines


def decide(checkpoint, checkpoint_shapes, model_shapes, optimizer_type=None,
           recorded_optimizer=None):
  """Decides whether a model can resume a checkpoint, and what changes.

  Args:
    checkpoint: the checkpoint prefix (for the messages).
    checkpoint_shapes: dict name -> shape of the checkpoint's variables.
    model_shapes: dict name -> shape of the variables the job's graph will have.
    optimizer_type: "lamb" / "adam" the job trains with; None when it does not train.
    recorded_optimizer: the optimizer recorded for the checkpoint's run, or None if unknown.

  Returns:
    `Decision`.
  """
  refusal = _refusal(checkpoint, checkpoint_shapes, model_shapes)
  if refusal is not None:
    return Decision(refusal=refusal)
  notes, additions = _changes(checkpoint, checkpoint_shapes, model_shapes, optimizer_type,
                              recorded_optimizer)
  return Decision(notes=notes, additions=additions)


def _not_in(shapes, role, other_shapes):
  """Names of the variables of `role` in `shapes` (dict name -> shape) absent from
  `other_shapes`."""
  return [name for name in ckpt.by_role(shapes, role) if name not in other_shapes]


def _refusal(checkpoint, checkpoint_shapes, model_shapes):
  """The message saying why the model cannot resume `checkpoint` (the arguments are `decide`'s),
  or None when it can."""
  fresh_start = ("To start this model from the checkpoint's weights, use "
                 "--init_checkpoint=%s with a fresh --output_dir (matching variables are loaded, "
                 "the others initialised)" % checkpoint)
  mismatches = weight_mismatches(checkpoint_shapes, model_shapes)
  if mismatches:
    if any(": checkpoint " in line for line in mismatches):
      # --init_checkpoint refuses variables of another shape: it is no way out here.
      way_out = ("To train this model, use a fresh --output_dir (--init_checkpoint loads "
                 "variables of the same shape only, so not from this checkpoint)")
    else:
      way_out = fresh_start
    return ("--output_dir holds a checkpoint of another model: %s does not match the model of "
            "--bert_config_file (%d difference(s)):\n  %s\n%s; to resume that run, use the "
            "--bert_config_file it was trained with." % (
                checkpoint, len(mismatches), list_some(mismatches), way_out))
  missing_moments = _not_in(model_shapes, ckpt.ROLE_MOMENT, checkpoint_shapes)
  if missing_moments and ckpt.by_role(checkpoint_shapes, ckpt.ROLE_MOMENT):
    return ("%s holds optimizer moments, but not %d of this job's (%s ...): its run did not "
            "train those variables (run_pretraining.py's --nonext_sentence_loss trains neither "
            "the next-sentence head nor the pooler); resume it with the flags it was trained "
            "with. %s." % (checkpoint, len(missing_moments), missing_moments[0], fresh_start))
  if missing_moments:
    return ("%s holds no optimizer moments (%s ... not in it): it is a weights-only checkpoint "
            "(e.g. an exported bert_model.ckpt), which cannot be resumed. %s." % (
                checkpoint, missing_moments[0], fresh_start))
  unknown = (_not_in(model_shapes, ckpt.ROLE_STEP, checkpoint_shapes)
             + _not_in(model_shapes, ckpt.ROLE_OTHER, checkpoint_shapes))
  if unknown:
    return ("%s lacks variable(s) the job's graph restores:\n  %s\nIt is not a training "
            "checkpoint of this job. %s." % (checkpoint, list_some(unknown), fresh_start))
  # Every model weight, moment and step is there and of the right shape; what is left are the
  # optimizer's own state variables, which the job may add or leave behind.
  common = [name for name in model_shapes if name in checkpoint_shapes]
  for name in common:
    if model_shapes[name] != checkpoint_shapes[name]:
      return "%s: variable %s has shape %s in the checkpoint but %s in the model. %s." % (
          checkpoint, name, checkpoint_shapes[name], model_shapes[name], fresh_start)
  return None


def _changes(checkpoint, checkpoint_shapes, model_shapes, optimizer_type, recorded_optimizer):
  """What resuming `checkpoint` changes (the arguments are `decide`'s), once `_refusal` found
  nothing: (log lines, one per change; names of the variables added at their initial values)."""
  notes, additions = [], []
  if (optimizer_type and recorded_optimizer in optimization.OPTIMIZER_TYPES
      and recorded_optimizer != optimizer_type and ckpt.by_role(model_shapes, ckpt.ROLE_MOMENT)):
    # The slots of both optimizers have the same names and meanings (`optimization.slot_names`);
    # _refusal has already refused a checkpoint without the job's slots.
    notes.append(
        "resuming %s (trained with --optimizer_type=%s) with --optimizer_type=%s: the moments "
        "%s are the same moving averages for both and are restored as they are"
        % (checkpoint, recorded_optimizer, optimizer_type,
           " / ".join(optimization.slot_names(optimizer_type))))
  added = _not_in(model_shapes, ckpt.ROLE_ACCUMULATION, checkpoint_shapes)
  if added:
    additions += added
    notes.append(
        "accumulation turned on: %s has no gradient accumulators; %s are added at their initial "
        "values (zero: the first micro-step starts a cycle)" % (checkpoint, _count_names(added)))
  elif _not_in(checkpoint_shapes, ckpt.ROLE_ACCUMULATION, model_shapes):
    notes.append(
        "accumulation turned off: the accumulators of %s (the sums of an update already applied) "
        "are not restored" % checkpoint)
  added = _not_in(model_shapes, ckpt.ROLE_LOSS_SCALE, checkpoint_shapes)
  if added:
    additions += added
    notes.append("loss scaling turned on: %s has no loss scale; it starts at --init_loss_scale "
                 "as in a fresh run" % checkpoint)
  elif _not_in(checkpoint_shapes, ckpt.ROLE_LOSS_SCALE, model_shapes):
    notes.append("loss scaling turned off: the loss scale of %s is not restored (fp32 training)"
                 % checkpoint)
  return notes, additions


def read_recorded_optimizer(model_dir):
  """The optimizer recorded in `model_dir` by `record_optimizer`, or None."""
  path = os.path.join(model_dir, OPTIMIZER_RECORD)
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      return json.load(f).get("optimizer_type")
  except (ValueError, AttributeError) as e:
    logging.warning("%s cannot be read (%s): the optimizer of the checkpoint is unknown", path, e)
    return None


def record_optimizer(model_dir, optimizer_type):
  """Writes `<model_dir>/optimizer.json`: the optimizer this directory's checkpoints train with."""
  with tf.io.gfile.GFile(os.path.join(model_dir, OPTIMIZER_RECORD), "w") as f:
    json.dump({"optimizer_type": optimizer_type}, f)
    f.write("\n")


def add_variables(checkpoint, values):
  """Rewrites `checkpoint` in place with `values` added; its own tensors are kept bit-exactly.

  Written to a temporary prefix first, so an interruption leaves the original intact until the
  files are swapped.
  """
  tensors = ckpt.read_tensors(checkpoint, ckpt.checkpoint_shapes(checkpoint))
  tensors.update(values)
  temporary = checkpoint + ".resume_tmp"
  ckpt.write_checkpoint(temporary, tensors)
  for path in ckpt.checkpoint_files(checkpoint):
    tf.io.gfile.remove(path)
  for path in ckpt.checkpoint_files(temporary):
    tf.io.gfile.rename(path, checkpoint + path[len(temporary):])


def check_output_dir(model_dir, model_fn, training, max_seq_length, max_predictions_per_seq,
                     optimizer_type, sequences_per_row=0):
  """Checks the newest checkpoint of `model_dir` (if any) against the job's graph.

  Call before the Estimator builds anything. Builds `model_fn` once in a throw-away graph (only
  when there is a checkpoint), refuses what cannot be resumed, logs each allowed change and adds
  the optimizer-state variables the checkpoint lacks.

  Args:
    model_dir: the Estimator's model directory.
    model_fn: the Estimator's model_fn.
    training: the job trains (TRAIN graph, with optimizer state); else it only evaluates.
    max_seq_length, max_predictions_per_seq: feature widths.
    optimizer_type: "lamb" or "adam".
    sequences_per_row: K when the job reads packed rows of up to K sequences, else 0.

  Returns:
    the checkpoint that will be resumed, or None.

  Raises:
    CheckpointMismatch: with the message of `decide`.
  """
  checkpoint = ckpt.latest_checkpoint(model_dir)
  if not checkpoint:
    return None
  mode = tf.estimator.ModeKeys.TRAIN if training else tf.estimator.ModeKeys.EVAL
  # The throw-away build would repeat the model_fn's own log lines; the real build logs them.
  absl_logger = logging.get_absl_logger()
  level = absl_logger.level
  absl_logger.setLevel(std_logging.ERROR)
  try:
    model = ckpt.model_fn_variables(model_fn, mode, max_seq_length, max_predictions_per_seq,
                                    sequences_per_row)
  finally:
    absl_logger.setLevel(level)
  decision = decide(checkpoint, ckpt.checkpoint_shapes(checkpoint), model.shapes,
                    optimizer_type=optimizer_type if training else None,
                    recorded_optimizer=read_recorded_optimizer(model_dir))
  if decision.refusal:
    raise CheckpointMismatch(decision.refusal)
  for note in decision.notes:
    logging.info("%s", note)
  if decision.additions:
    add_variables(checkpoint, model.initial_values(decision.additions))
    logging.info("added %d variable(s) to %s; its other tensors are unchanged",
                 len(decision.additions), checkpoint)
  return checkpoint
