"""The state of a deterministic run (--deterministic_run): a micro-step counter, dropout keys, and
where the input resumes.

The global step counts optimizer updates (and stays put on a skipped fp16 update) and `local_step`
only counts within an accumulation cycle, so neither names a micro-step. The int64 variable
`micro_step` counts every micro-step (session run of the train op) since the start of training.
It is saved in every checkpoint with the weights it belongs to: the train op advances it in the
same run that updates them, and checkpoints are written after a run completes. From it come

  * the dropout key of the micro-step: (seed, micro-step, worker rank) -> int64 [2], from which
    `modeling.dropout_site_key` derives each layer's and site's mask seed; workers draw different
    masks, as in normal training;
  * the records a worker has consumed: micro-steps x per-worker batch, which the input skips on
    resume so training continues exactly where the checkpoint left it.
"""

import tensorflow as tf

from utils.checkpoints import contents as checkpoints

_tf1 = tf.compat.v1

MICRO_STEP_NAME = "micro_step"
# Counter-based generator of the key derivation (the same numbers on every device).
_KEY_RNG = "philox"


def micro_step_counter():
  """The int64 `micro_step` variable of the default graph (created at 0 on first call).

  Returns:
    A non-trainable global variable (saved in checkpoints, broadcast from rank 0 under Horovod).
  """
  with tf.init_scope():
    return _tf1.get_variable(MICRO_STEP_NAME, shape=[], dtype=tf.int64, trainable=False,
                             initializer=_tf1.zeros_initializer(), use_resource=True)


def dropout_key(seed, micro_step, rank):
  """The dropout key of one micro-step of one worker.

  Args:
    seed: Python int, the run's seed.
    micro_step: int64 scalar Tensor, the micro-steps done before this one.
    rank: Python int, the worker's rank.

  Returns:
    int64 Tensor [2].
  """
  key = tf.constant([seed, 0], dtype=tf.int64)
  key = tf.random.experimental.stateless_fold_in(key, micro_step, alg=_KEY_RNG)
  return tf.random.experimental.stateless_fold_in(key, rank, alg=_KEY_RNG)


def advance_micro_step(counter, micro_step):
  """The op setting `counter` to `micro_step + 1`.

  `micro_step` must be the one read of the counter this micro-step's dropout key came from: the
  write then depends on that read by a data edge, so no graph rewrite can run it before the read.
  """
  return counter.assign(micro_step + 1, read_value=False)


def checkpoint_micro_steps(checkpoint_dir):
  """The micro-steps done at the newest checkpoint of `checkpoint_dir` (0 when there is none).

  Raises:
    ValueError: naming the checkpoint, when it has no `micro_step` (written by a run without
      --deterministic_run, whose input position is unknown).
  """
  checkpoint = checkpoints.latest_checkpoint(checkpoint_dir)
  if not checkpoint:
    return 0
  names = {name for name, _ in tf.train.list_variables(checkpoint)}
  if MICRO_STEP_NAME not in names:
    raise ValueError("checkpoint %s has no '%s' variable: it was written without "
                     "--deterministic_run, so a deterministic run cannot resume from it (use "
                     "another --output_dir)" % (checkpoint, MICRO_STEP_NAME))
  return int(tf.train.load_variable(checkpoint, MICRO_STEP_NAME))


def begin_micro_step(seed, rank):
  """Reads the micro-step counter once for this micro-step.

  Args:
    seed: Python int, the run's seed.
    rank: Python int, the worker's rank.

  Returns:
    (dropout key int64 Tensor [2] of this micro-step, the op that advances the counter; run it
    in the train op).
  """
  counter = micro_step_counter()
  micro_step = counter.read_value()
  return dropout_key(seed, micro_step, rank), advance_micro_step(counter, micro_step)
