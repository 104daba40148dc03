"""Names of the graph tensors the training graph exposes and the hooks read.

The model_fn and `optimization.create_optimizer` name these tensors; `utils/training/hooks.py`
(and tests) look them up with `graph.get_tensor_by_name(name + ":0")`. Both sides import the names
from here, so a rename cannot leave a reader behind. No TensorFlow import: any tool may read this
list.
"""

# The model_fn: fp32 scalars of this micro-batch.
TOTAL_LOSS = "total_loss"
MLM_LOSS = "mlm_loss"
NSP_LOSS = "nsp_loss"
# The pretraining model_fn, packed or not (fine-tuning graphs have neither): float32 scalars of
# this micro-batch on this worker. The real sequences (packed: the sum of next_sentence_weights;
# unpacked: the batch's rows) and the real tokens (the count of input_mask > 0).
BATCH_SEQUENCES = "batch_sequences"
BATCH_TOKENS = "batch_tokens"

# create_optimizer.
# float32 scalar: the learning rate of this step's update.
LEARNING_RATE = "learning_rate"
# int64 scalar: the global step after this micro-step (unchanged when no update was applied).
STEP_UPDATE = "step_update"
# bool scalar, with gradient accumulation only: this micro-step completed an update.
UPDATE_STEP = "update_step"
# float32 scalar, with loss scaling only: the loss scale this step's loss was multiplied by.
LOSS_SCALE = "loss_scale"
# float32 scalar: the update's gradient norm, unscaled and before clipping (NaN on a micro-step
# that applies no update; non-finite on a skipped update).
GLOBAL_NORM = "global_norm"
# int64 scalar, with loss scaling only: non-finite updates skipped so far (after this step).
SKIPPED_UPDATES = "skipped_updates"
# The train op (a group of the step's work).
TRAIN_OP = "train_op"


def tensor_name(name):
  """The name of the first output of op `name`, as `Graph.get_tensor_by_name` takes it."""
  return name + ":0"

