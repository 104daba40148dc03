"""The training step: learning-rate schedule, LAMB / AdamWeightDecay, loss scaling, accumulation,
Horovod allreduce, and the global-step ordering that LAMB's bias correction needs.

Everything `build_train_op` (and `create_optimizer`, its interface of the BERT releases) builds
follows one gradient path, one module-level step each (`scaled_gradients`, `gradient_reduction`,
`_accumulate`, `apply_if_finite`):

  gradients of loss * loss_scale / num_accumulation_steps
  -> drop None gradients -> IndexedSlices made dense
  -> allreduce (Average) of each micro-step's gradients      [Horovod, not post-accumulation]
  -> accumulate into fp32 `<var>/accum`                       [num_accumulation_steps > 1]
  -> allreduce (Average) of the accumulated gradients         [Horovod, post-accumulation]
  -> unscale -> finiteness check -> clip by global norm 1.0
  -> global_step += 1, then apply (the optimizer reads the incremented step)

Stages in brackets are present only in that configuration; there is no second copy of the path.
All allreduces come before the finiteness check, so every worker sees the same values and takes the
same decision: a non-finite update changes no weight and no step anywhere and halves the loss scale.
The learning rate of an update is `Schedule.learning_rate_at` of the step read before it, and the
optimizer applying it is `Schedule.optimizer` (its moments are the slots `Schedule.slot_names`).
A bf16 step takes the fp32 path from the gradients on (no loss scale; the gradients of the fp32
master variables are fp32): a non-finite update is skipped as in fp32, and the NaN loss that
comes with it stops the job (docs/DESIGN.md, "bf16").

How it is computed (docs/PERFORMANCE.md): the global norm of the gradients is the one pass that
both the finiteness check and the clipping need (`apply_if_finite`); unscaling and clipping are a
single factor; and each variable's update (moments, bias correction, weight decay, trust ratio,
the three writes) is one XLA-compiled function that also applies that factor
(`_AdamFamilyOptimizer._fused_update` says why).

The settings travel in four small objects built once by the caller: `Schedule` (the one description
of the optimizer: which one, its learning-rate schedule, adam_beta2 and adam_epsilon, its slots),
`Precision` (fp16 or bf16, and loss scaling), `Accumulation` (micro-steps and where the allreduce
happens) and `Distribution` (Horovod or TPU cores). Their checks are the module-level `check_*`
functions, which the training script's flag validation also calls.

Ref variables (TF1 behaviour: `disable_v2_behavior`, or `use_resource=False`) cannot be written
from a compiled function: for them the same compiled arithmetic returns the new values, and three
assign ops write them (same numbers, bit for bit). Our own step variables (`local_step`,
`<var>/accum`) are always resource variables.
"""

import collections
import re

from absl import logging
import tensorflow as tf

import gpu_environment
import modeling
from utils.core import graph_names

_tf1 = tf.compat.v1

OPTIMIZER_TYPES = ("adam", "lamb")
# Hyper-parameters of the BERT recipes (Google's AdamWeightDecay and NVIDIA's LAMB).
WEIGHT_DECAY_RATE = 0.01
BETA_1 = 0.9
BETA_2 = 0.999
EPSILON = 1e-6
# The decays after warmup (`Schedule.lr_schedule`): "recipe", each optimizer's own in the BERT
# recipes (`RECIPE_DECAYS`); "linear", linearly to 0 at num_train_steps from the peak at the end of
# warmup, for either optimizer.
LR_SCHEDULES = ("recipe", "linear")
EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
CLIP_NORM = 1.0
LOSS_SCALE_INCREMENT_PERIOD = 1000
LOSS_SCALE_MULTIPLIER = 2.0


class Decay(collections.namedtuple("Decay", ["power", "through_peak_at_warmup_end"])):
  """The learning rate's decay to 0 at num_train_steps after warmup: `start * (1 - step / T) **
  power`, where start is the peak rate, or with `through_peak_at_warmup_end` the rate that makes
  the curve pass through the peak at the end of warmup (for power 1: `peak * (T - step) / (T -
  warmup)`)."""
  __slots__ = ()


# --lr_schedule=linear, for either optimizer.
LINEAR_DECAY = Decay(1.0, True)


def lr_decay(optimizer_type, lr_schedule="recipe"):
  """The `Decay` of `optimizer_type` ("adam" or "lamb") under `lr_schedule` (LR_SCHEDULES)."""
  check_optimizer_type(optimizer_type)
  check_lr_schedule(lr_schedule)
  return LINEAR_DECAY if lr_schedule == "linear" else OPTIMIZERS[optimizer_type].recipe_decay


def learning_rate_schedule(global_step, init_lr, num_train_steps, num_warmup_steps,
                           optimizer_type, lr_schedule="recipe"):
  """The learning rate after `global_step` completed updates.

  Linear warmup `init_lr * step / num_warmup_steps`, then the decay to 0 at `num_train_steps` of
  `lr_decay(optimizer_type, lr_schedule)`. The recipes': power 0.5 from `init_lr` for LAMB; power
  1.0 for Adam, started from an adjusted rate so that the decay passes through `init_lr` exactly
  at the end of warmup. "linear": Adam's recipe, for either optimizer.

  Args:
    global_step: integer scalar Tensor, the number of updates done so far (update k reads k - 1).
    init_lr: peak learning rate (already multiplied by the number of workers).
    num_train_steps: total optimizer updates.
    num_warmup_steps: warmup updates (0 for none).
    optimizer_type: "adam" or "lamb".
    lr_schedule: "recipe" or "linear" (`LR_SCHEDULES`).

  Returns:
    float32 scalar Tensor.
  """
  check_schedule(init_lr, num_train_steps, num_warmup_steps, optimizer_type, lr_schedule)
  decay = lr_decay(optimizer_type, lr_schedule)
  step = tf.cast(global_step, tf.float32)
  decay_start_lr = init_lr
  if decay.through_peak_at_warmup_end:
    decay_start_lr = init_lr / (1.0 - float(num_warmup_steps) / float(num_train_steps))
  progress = tf.minimum(step, float(num_train_steps)) / float(num_train_steps)
  decayed = decay_start_lr * tf.pow(1.0 - progress, decay.power)
  if num_warmup_steps == 0:
    return decayed
  warmup = init_lr * step / float(num_warmup_steps)
  return tf.where(step < float(num_warmup_steps), warmup, decayed)


def is_ref_variable(var):
  """True for a TF1 reference variable (its dtype is a `_ref` type, e.g. float32_ref), False for a
  resource variable."""
  return var.dtype != var.dtype.base_dtype


class _AdamFamilyOptimizer(_tf1.train.Optimizer):
  """Adam moments with decoupled weight decay; the shared core of both optimizers.

  Slots `<var>/adam_m` and `<var>/adam_v` (fp32). Subclasses choose the update direction (bias
  correction or not) and a per-variable scale of the update (LAMB's trust ratio).
  """

  # The slots: (key of `get_slot`, the variable's suffix in a checkpoint), in order.
  MOMENT_SLOTS = (("m", "adam_m"), ("v", "adam_v"))

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=None, name="AdamFamily"):
    """See the subclasses. `learning_rate` is a float or a float32 scalar Tensor."""
    super().__init__(use_locking=False, name=name)
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = list(exclude_from_weight_decay or [])
    self._fused_update_fn = None
    self._fused_new_values_fn = None

  def create_slots(self, var_list):
    """Creates the moment slots (`MOMENT_SLOTS`) of `var_list` (idempotent; safe inside control
    flow)."""
    with tf.init_scope():
      for var in var_list:
        for key, suffix in self.MOMENT_SLOTS:
          self._zeros_slot(var, key, suffix)

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """Applies one update to every variable.

    Args:
      grads_and_vars: list of (gradient, variable); gradients dense or IndexedSlices, not None.
      global_step: optional int64 variable holding the number of updates *including* this one.
        Read (never changed) by optimizers that need the update count.
      name: name of the returned op.

    Returns:
      An op that applies the update.

    Raises:
      ValueError: for a None gradient.
    """
    return self.apply_scaled_gradients(grads_and_vars, global_step=global_step, name=name)

  def apply_scaled_gradients(self, grads_and_vars, grad_scale=None, global_step=None,
                             name=None):
    """`apply_gradients` of `grad_scale * gradient` (e.g. the global-norm clipping factor).

    The scaling happens inside the fused per-variable update, so clipping costs no pass of its
    own over the gradients. The result equals `apply_gradients([(g * grad_scale, v), ...])`.

    Args:
      grads_and_vars: as `apply_gradients`.
      grad_scale: optional float32 scalar Tensor multiplying every gradient.
      global_step: as `apply_gradients`.
      name: name of the returned op.

    Returns:
      An op that applies the update.

    Raises:
      ValueError: for a None gradient.
    """
    grads_and_vars = list(grads_and_vars)
    for grad, var in grads_and_vars:
      if grad is None:
        raise ValueError("no gradient for variable %s" % var.op.name)
    var_list = [var for _, var in grads_and_vars]
    self.create_slots(var_list)
    step_constants = self._step_constants(self._update_count(global_step))
    learning_rate = tf.cast(tf.convert_to_tensor(self.learning_rate), tf.float32)

    updates = []
    for grad, var in grads_and_vars:
      grad = tf.cast(tf.convert_to_tensor(grad), tf.float32)
      m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
      # A compiled function can write resource variables but not ref variables (TF1 behaviour,
      # `disable_v2_behavior` or `use_resource=False`): those get their values computed by the
      # same compiled arithmetic and written by assign ops.
      apply_update = self._ref_variable_update if is_ref_variable(var) else self._fused_update
      updates.append(apply_update(
          var, m, v, grad, learning_rate, grad_scale, step_constants,
          self._uses_weight_decay(var.op.name)))
    return tf.group(*updates, name=name or self.get_name())

  @property
  def _fused_update(self):
    """The per-variable update as one XLA-compiled function (see `_variable_update`).

    The update is element-wise and memory bound: as separate TF ops it makes ~20 passes over
    every weight-sized tensor (each op reads and writes the whole tensor), a large share of a
    BERT-base step on a CPU. Compiled, it fuses into about two passes (one for the norms, one for
    the writes), and the graph holds one call op per variable instead of ~40 ops. Variables of
    the same shape and decay setting share one traced function (and one compilation).
    """
    if self._fused_update_fn is None:
      self._fused_update_fn = tf.function(self._variable_update, jit_compile=True,
                                          autograph=False)
    return self._fused_update_fn

  @property
  def _fused_new_values(self):
    """`_new_values` followed by the variable's new value, as one XLA-compiled function: the
    arithmetic of `_fused_update` (including `var - delta`, so the compiler can contract it the
    same way), for variables it cannot write."""
    if self._fused_new_values_fn is None:
      def new_values(var, *args):
        delta, next_m, next_v, scale = self._new_values(var, *args)
        return var - delta, next_m, next_v, scale
      self._fused_new_values_fn = tf.function(new_values, jit_compile=True, autograph=False)
    return self._fused_new_values_fn

  def _variable_update(self, var, m, v, grad, learning_rate, grad_scale, step_constants,
                       decay):
    """One resource variable's update: moments, direction, weight decay, per-tensor scale, the
    writes.

    Args:
      var: the variable; m, v: its moment slots.
      grad: float32 Tensor, the variable's gradient (before `grad_scale`).
      learning_rate: float32 scalar Tensor.
      grad_scale: float32 scalar Tensor or None.
      step_constants: tuple of float32 scalar Tensors from `_step_constants`.
      decay: Python bool, apply decoupled weight decay.

    Returns:
      The per-tensor scale applied to the update (float32 scalar; 1.0 for AdamWeightDecay).
    """
    delta, next_m, next_v, scale = self._new_values(
        var, m, v, grad, learning_rate, grad_scale, step_constants, decay)
    var.assign_sub(delta)
    m.assign(next_m)
    v.assign(next_v)
    return scale

  def _ref_variable_update(self, var, m, v, grad, learning_rate, grad_scale, step_constants,
                           decay):
    """`_variable_update` for a ref variable (and its ref slots): the compiled `_new_values`
    computes the three new values from snapshots, then assign ops write them.

    Args and return value as `_variable_update`; the scale is returned once the writes are done.
    """
    next_var, next_m, next_v, scale = self._fused_new_values(
        var.value(), m.value(), v.value(), grad, learning_rate, grad_scale, step_constants,
        decay)
    writes = [_tf1.assign(var, next_var), _tf1.assign(m, next_m), _tf1.assign(v, next_v)]
    with tf.control_dependencies(writes):
      return tf.identity(scale)

  def _new_values(self, var, m, v, grad, learning_rate, grad_scale, step_constants, decay):
    """The arithmetic of one variable's update, without writing anything.

    Args:
      var: the variable or its value [any shape]; m, v: the moment slots or their values.
      grad, learning_rate, grad_scale, step_constants, decay: as `_variable_update`.

    Returns:
      (delta, next_m, next_v, scale): the amount to subtract from the variable, the new moments
      (each shaped like `var`) and the per-tensor scale (float32 scalar; 1.0 for
      AdamWeightDecay).
    """
    if grad_scale is not None:
      grad = grad * grad_scale
    next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
    next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
    update = self._direction(next_m, next_v, step_constants)
    if decay:
      update += self.weight_decay_rate * var
    scale = self._update_scale(var, update)
    if scale is not None:
      update *= scale
    return (learning_rate * update, next_m, next_v,
            tf.constant(1.0) if scale is None else scale)

  def _uses_weight_decay(self, param_name):
    if not self.weight_decay_rate:
      return False
    return not any(re.search(pattern, param_name) for pattern in self.exclude_from_weight_decay)

  def _update_count(self, global_step):
    """The update count t the direction needs, or None."""
    del global_step
    return None

  def _step_constants(self, update_count):
    """Scalars of this update shared by all variables (computed once, outside the fused calls)."""
    del update_count
    return ()

  def _direction(self, next_m, next_v, step_constants):
    raise NotImplementedError

  def _update_scale(self, var, update):
    """Per-tensor factor of the update, or None for none."""
    del var, update
    return None

  # The base class's slot machinery is used for slot creation; these abstract hooks of
  # tf.compat.v1.train.Optimizer are never called because apply_gradients is overridden.
  def _apply_dense(self, grad, var):
    raise NotImplementedError("use apply_gradients")

  def _resource_apply_dense(self, grad, handle):
    raise NotImplementedError("use apply_gradients")

  def _apply_sparse(self, grad, var):
    raise NotImplementedError("use apply_gradients")

  def _resource_apply_sparse(self, grad, handle, indices):
    raise NotImplementedError("use apply_gradients")


class AdamWeightDecayOptimizer(_AdamFamilyOptimizer):
  """Adam with decoupled weight decay and no bias correction, as in the original BERT."""

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=None, name="AdamWeightDecayOptimizer"):
    """Args: learning rate, decoupled weight decay rate, Adam betas and epsilon, regexes of
    variable names that get no weight decay, and the optimizer's name."""
    super().__init__(learning_rate, weight_decay_rate, beta_1, beta_2, epsilon,
                     exclude_from_weight_decay, name)

  def _direction(self, next_m, next_v, step_constants):
    del step_constants
    return next_m / (tf.sqrt(next_v) + self.epsilon)


class LAMBOptimizer(_AdamFamilyOptimizer):
  """LAMB (You et al., 2019): bias-corrected Adam direction plus weight decay, scaled per tensor by
  the trust ratio ||w|| / ||update|| (1.0 when either norm is 0).

  The update count t for the bias correction is read from `global_step`, which the caller must
  have incremented for this update (t >= 1; t = 0 would divide by 1 - beta^0 = 0).
  """

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=None, name="LAMBOptimizer"):
    """Args as `AdamWeightDecayOptimizer`; weight decay skips the excluded names but the trust
    ratio applies to every variable."""
    super().__init__(learning_rate, weight_decay_rate, beta_1, beta_2, epsilon,
                     exclude_from_weight_decay, name)

  def _update_count(self, global_step):
    if global_step is None:
      raise ValueError("LAMBOptimizer.apply_gradients needs global_step: it reads the update "
                       "count for its bias correction")
    t = tf.cast(tf.convert_to_tensor(global_step), tf.float32)
    check = tf.debugging.assert_greater_equal(
        t, 1.0, message="LAMB read global_step < 1: increment the step before applying")
    with tf.control_dependencies([check]):
      return tf.identity(t)

  def _step_constants(self, update_count):
    # The bias corrections 1 - beta^t.
    return (1.0 - tf.pow(self.beta_1, update_count), 1.0 - tf.pow(self.beta_2, update_count))

  def _direction(self, next_m, next_v, step_constants):
    correction_1, correction_2 = step_constants
    m_hat = next_m / correction_1
    v_hat = next_v / correction_2
    return m_hat / (tf.sqrt(v_hat) + self.epsilon)

  def _update_scale(self, var, update):
    w_norm = tf.norm(var)
    u_norm = tf.norm(update)
    both_positive = tf.logical_and(w_norm > 0.0, u_norm > 0.0)
    safe_u_norm = tf.where(both_positive, u_norm, 1.0)
    return tf.where(both_positive, w_norm / safe_u_norm, 1.0)


# The optimizers of the BERT recipes: each one's class and the decay of its recipe's learning rate
# (Google's AdamWeightDecay linearly through the peak at the end of warmup, NVIDIA's LAMB with
# power 0.5 from the peak).
OptimizerKind = collections.namedtuple("OptimizerKind", ["optimizer_class", "recipe_decay"])
OPTIMIZERS = {"adam": OptimizerKind(AdamWeightDecayOptimizer, Decay(1.0, True)),
              "lamb": OptimizerKind(LAMBOptimizer, Decay(0.5, False))}


def make_optimizer(optimizer_type, learning_rate, beta_2=BETA_2, epsilon=EPSILON):
  """The BERT recipe's optimizer of `optimizer_type` ("adam" or "lamb") at `learning_rate`, with
  the recipe's weight decay and beta_1 and the given `beta_2` and `epsilon`."""
  check_optimizer_type(optimizer_type)
  check_moments(beta_2, epsilon)
  cls = OPTIMIZERS[optimizer_type].optimizer_class
  return cls(learning_rate=learning_rate, weight_decay_rate=WEIGHT_DECAY_RATE, beta_1=BETA_1,
             beta_2=beta_2, epsilon=epsilon,
             exclude_from_weight_decay=list(EXCLUDE_FROM_WEIGHT_DECAY))


def drop_none_gradients(grads_and_vars):
  """Removes variables without a gradient, warning with their names.

  Args:
    grads_and_vars: list of (gradient or None, variable).

  Returns:
    The list without the None entries.

  Raises:
    ValueError: naming the variables, when no gradient is left.
  """
  kept = [(g, v) for g, v in grads_and_vars if g is not None]
  dropped = [v.op.name for g, v in grads_and_vars if g is None]
  if not kept:
    raise ValueError("the loss has no gradient with respect to any trainable variable: %s"
                     % ", ".join(dropped))
  if dropped:
    logging.warning("no gradient for %d variable(s), they will not be trained: %s",
                    len(dropped), ", ".join(dropped))
  return kept


def _allreduce_average(hvd, tensors, dtype):
  """Horovod allreduce (Average) of every tensor, communicated in `dtype`, returned as fp32."""
  reduced = []
  for tensor in tensors:
    out = hvd.allreduce(tf.cast(tensor, dtype), op=hvd.Average)
    reduced.append(tf.cast(out, tf.float32))
  return reduced


def _accumulate(grads, tvars, num_accumulation_steps):
  """Adds this micro-step's gradients to fp32 accumulators.

  Args:
    grads: list of dense fp32 gradients.
    tvars: the variables, for the accumulator names `<var>/accum`.
    num_accumulation_steps: micro-steps per update N.

  Returns:
    (is_update, accumulated, accumulate_op): a bool scalar, True on the micro-step that completes
    a cycle; the accumulated values after this micro-step (the tensors written to `<var>/accum`,
    so readers depend on them by data, not by a control edge); and the op writing them and the
    counter. The counter `local_step` runs 1, 2, ..., N - 1, 0: it is 0 after the micro-step that
    completes a cycle.
  """
  # Resource variables also under TF1 behaviour: a ref variable's read shares its buffer, which
  # the write below would overwrite before every reader of `current` is guaranteed to have run.
  with tf.init_scope():
    local_step = _tf1.get_variable("local_step", shape=[], dtype=tf.int32, trainable=False,
                                   initializer=_tf1.zeros_initializer(), use_resource=True)
    accumulators = [
        _tf1.get_variable(var.op.name + "/accum", shape=var.shape, dtype=tf.float32,
                          trainable=False, initializer=_tf1.zeros_initializer(),
                          use_resource=True)
        for var in tvars]
  current = local_step.read_value()
  # The first micro-step of a cycle overwrites, so no separate zeroing pass (and no NaN left
  # over from a skipped non-finite update can leak into the next cycle).
  starts_cycle = tf.equal(current, 0)
  accumulated = [tf.where(starts_cycle, grad, acc.read_value() + grad)
                 for acc, grad in zip(accumulators, grads)]
  next_step = tf.math.floormod(current + 1, num_accumulation_steps)
  writes = [acc.assign(value, read_value=False) for acc, value in zip(accumulators, accumulated)]
  writes.append(local_step.assign(next_step, read_value=False))
  return tf.equal(next_step, 0), accumulated, tf.group(*writes)


class Schedule(collections.namedtuple(
    "Schedule", ["optimizer_type", "learning_rate", "num_train_steps", "num_warmup_steps",
                 "lr_schedule", "adam_beta2", "adam_epsilon"])):
  """The one description of the optimizer: which one, its learning-rate schedule (see
  `learning_rate_schedule`), its hyper-parameters and its slots. The training step asks it for the
  rate of an update (`learning_rate_at`) and the optimizer (`optimizer`); the memory estimate and
  the checkpoint checks ask it for the slots (`slot_names`).

  Fields: optimizer_type ("adam" or "lamb"); learning_rate, the effective peak rate (per-worker
  rate x number of workers); num_train_steps, total optimizer updates; num_warmup_steps;
  lr_schedule, the decay after warmup ("recipe": each optimizer's own; "linear"); adam_beta2 and
  adam_epsilon, the second moment's decay and the denominator's epsilon of either optimizer (the
  recipes': 0.999 and 1e-6).
  """
  __slots__ = ()

  def __new__(cls, optimizer_type, learning_rate, num_train_steps, num_warmup_steps,
              lr_schedule="recipe", adam_beta2=BETA_2, adam_epsilon=EPSILON):
    return super().__new__(cls, optimizer_type, learning_rate, num_train_steps, num_warmup_steps,
                           lr_schedule, adam_beta2, adam_epsilon)

  def check(self):
    check_schedule(self.learning_rate, self.num_train_steps, self.num_warmup_steps,
                   self.optimizer_type, self.lr_schedule)
    check_moments(self.adam_beta2, self.adam_epsilon)

  def learning_rate_at(self, global_step):
    """float32 scalar Tensor: the rate of the update after `global_step` (integer scalar Tensor)
    completed updates."""
    return learning_rate_schedule(global_step, self.learning_rate, self.num_train_steps,
                                  self.num_warmup_steps, self.optimizer_type, self.lr_schedule)

  def optimizer(self, learning_rate):
    """The optimizer (`_AdamFamilyOptimizer`) applying updates at `learning_rate` (float or
    float32 scalar Tensor)."""
    return make_optimizer(self.optimizer_type, learning_rate, self.adam_beta2, self.adam_epsilon)

  @property
  def slot_names(self):
    """The suffixes of the optimizer's slots in a checkpoint (`<var>/<suffix>`), in order."""
    return slot_names(self.optimizer_type)


def slot_names(optimizer_type):
  """The suffixes of the slots optimizer `optimizer_type` keeps per variable, in order (both:
  their two moments, adam_m and adam_v)."""
  check_optimizer_type(optimizer_type)
  return tuple(suffix for _, suffix in OPTIMIZERS[optimizer_type].optimizer_class.MOMENT_SLOTS)


class Precision(collections.namedtuple(
    "Precision", ["manual_fp16", "amp", "init_loss_scale", "loss_scale_increment_period",
                  "bf16"])):
  """Reduced precision and its dynamic loss scaling.

  Fields: manual_fp16, the model computes in fp16; amp, automatic mixed precision (a session-config
  rewrite that only a GPU applies); init_loss_scale, the initial dynamic loss scale;
  loss_scale_increment_period, finite updates after which the scale doubles; bf16, the model
  computes in bf16 (fp32 master variables, no loss scaling: bf16 has fp32's exponent range, so
  gradients neither overflow nor underflow where fp32 ones would not; gradients stay fp32 from the
  variables' casts on, and are allreduced, accumulated and applied in fp32).
  """
  __slots__ = ()

  def __new__(cls, manual_fp16=False, amp=False, init_loss_scale=2**32,
              loss_scale_increment_period=LOSS_SCALE_INCREMENT_PERIOD, bf16=False):
    return super().__new__(cls, manual_fp16, amp, init_loss_scale, loss_scale_increment_period,
                           bf16)

  def check(self):
    check_precision(self.manual_fp16, self.amp, self.init_loss_scale, bf16=self.bf16)

  @property
  def compute_type(self):
    """The encoder's compute type: tf.float16 with manual_fp16, tf.bfloat16 with bf16, else
    tf.float32."""
    if self.manual_fp16:
      return tf.float16
    return tf.bfloat16 if self.bf16 else tf.float32

  @property
  def compute_precision(self):
    """What each part of the model computes in: the `modeling.ComputePrecision` of
    `compute_type`."""
    return modeling.ComputePrecision.of(self.compute_type)

  @property
  def name(self):
    """"fp16", "amp", "bf16" or "fp32", for messages and logs."""
    for name, on in (("fp16", self.manual_fp16), ("amp", self.amp), ("bf16", self.bf16)):
      if on:
        return name
    return "fp32"

  def scales_loss(self):
    """Whether gradients are computed in fp16 here, so the loss must be scaled (the one place that
    decides it: a model computing in fp16, `ComputePrecision.needs_loss_scaling`, or AMP on a
    machine where the rewrite takes effect; never bf16)."""
    return (self.compute_precision.needs_loss_scaling
            or gpu_environment.amp_takes_effect(self.amp))


class Accumulation(collections.namedtuple(
    "Accumulation", ["num_accumulation_steps", "allreduce_post_accumulation"])):
  """Gradient accumulation and where the allreduce happens.

  Fields: num_accumulation_steps, micro-steps per update N; allreduce_post_accumulation, allreduce
  once per update (the accumulated gradients) instead of once per micro-step.
  """
  __slots__ = ()

  def __new__(cls, num_accumulation_steps=1, allreduce_post_accumulation=False):
    return super().__new__(cls, num_accumulation_steps, allreduce_post_accumulation)

  def check(self):
    check_accumulation(self.num_accumulation_steps)


class Distribution(collections.namedtuple("Distribution", ["hvd", "use_tpu", "tpu_estimator"])):
  """How the job is spread over devices.

  Fields: hvd, the `horovod.tensorflow` module under Horovod, else None; use_tpu, TPU cores (the
  gradients are summed across cores); tpu_estimator, a TPUEstimator without TPU (its CPU/GPU path).
  """
  __slots__ = ()

  def __new__(cls, hvd=None, use_tpu=False, tpu_estimator=False):
    return super().__new__(cls, hvd, use_tpu, tpu_estimator)

  @property
  def uses_tpu_estimator(self):
    """Whether the job runs under a TPUEstimator (with TPU cores or on its CPU/GPU path)."""
    return bool(self.use_tpu or self.tpu_estimator)

  def check(self, num_accumulation_steps):
    check_distribution(self.use_tpu, self.hvd is not None, num_accumulation_steps)


def check_optimizer_type(optimizer_type):
  """Raises ValueError unless `optimizer_type` is one of OPTIMIZER_TYPES."""
  if optimizer_type not in OPTIMIZER_TYPES:
    raise ValueError("optimizer_type must be one of %s, got %r"
                     % (OPTIMIZER_TYPES, optimizer_type))


def check_lr_schedule(lr_schedule):
  """Raises ValueError unless `lr_schedule` is one of LR_SCHEDULES."""
  if lr_schedule not in LR_SCHEDULES:
    raise ValueError("lr_schedule must be one of %s, got %r" % (LR_SCHEDULES, lr_schedule))


def check_moments(adam_beta2, adam_epsilon):
  """Raises ValueError unless 0 <= adam_beta2 < 1 and adam_epsilon > 0 (see `Schedule`)."""
  if not 0.0 <= adam_beta2 < 1.0:
    raise ValueError("adam_beta2 must be in [0, 1), got %r" % (adam_beta2,))
  if not adam_epsilon > 0.0:
    raise ValueError("adam_epsilon must be positive, got %r" % (adam_epsilon,))


def check_schedule(learning_rate, num_train_steps, num_warmup_steps, optimizer_type,
                   lr_schedule="recipe"):
  """Raises ValueError naming the bad value of a learning-rate schedule.

  Args:
    learning_rate, num_train_steps, num_warmup_steps, optimizer_type, lr_schedule: see `Schedule`.
  """
  check_optimizer_type(optimizer_type)
  check_lr_schedule(lr_schedule)
  if not learning_rate > 0:
    raise ValueError("learning_rate must be positive, got %r" % (learning_rate,))
  if num_train_steps < 1:
    raise ValueError("num_train_steps must be >= 1, got %r" % (num_train_steps,))
  if num_warmup_steps < 0:
    raise ValueError("num_warmup_steps must be >= 0, got %r" % (num_warmup_steps,))
  if (lr_decay(optimizer_type, lr_schedule).through_peak_at_warmup_end
      and num_warmup_steps >= num_train_steps):
    raise ValueError("num_warmup_steps (%d) must be smaller than num_train_steps (%d) with "
                     "optimizer_type=%s and lr_schedule=%s: the decay starts at the end of "
                     "warmup" % (num_warmup_steps, num_train_steps, optimizer_type, lr_schedule))


def check_precision(manual_fp16, amp, init_loss_scale, bf16=False):
  """Raises ValueError for a non-positive loss scale or two precisions at once (manual fp16, AMP,
  bf16), naming both."""
  if not init_loss_scale > 0:
    raise ValueError("init_loss_scale must be positive, got %r" % (init_loss_scale,))
  if manual_fp16 and amp:
    raise ValueError("amp and manual_fp16 cannot be combined")
  for other, given in (("manual_fp16", manual_fp16), ("amp", amp)):
    if bf16 and given:
      raise ValueError("bf16 and %s cannot be combined: choose one precision" % other)


def check_accumulation(num_accumulation_steps):
  """Raises ValueError unless `num_accumulation_steps` is an integer >= 1."""
  if isinstance(num_accumulation_steps, bool) or not isinstance(num_accumulation_steps, int):
    raise ValueError("num_accumulation_steps must be an integer, got %r"
                     % (num_accumulation_steps,))
  if num_accumulation_steps < 1:
    raise ValueError("num_accumulation_steps must be >= 1, got %d" % num_accumulation_steps)


def check_distribution(use_tpu, uses_horovod, num_accumulation_steps):
  """Raises ValueError for TPU cores combined with Horovod or with gradient accumulation."""
  if use_tpu and uses_horovod:
    raise ValueError("use_tpu and horovod cannot be combined: the TPU optimizer reduces "
                     "gradients across cores itself")
  if use_tpu and num_accumulation_steps > 1:
    raise ValueError("use_tpu with num_accumulation_steps > 1 is not supported: TPU runs "
                     "accumulate through a larger per-core batch instead")


class LossScaling(object):
  """Dynamic loss scaling of the training step: the loss is multiplied by `scale`, the gradients
  divided by it, and the scale halves after a non-finite update and doubles after
  `increment_period` finite ones. Gradients are allreduced in fp16."""

  allreduce_dtype = tf.float16

  def __init__(self, init_loss_scale, increment_period):
    """Creates the scale variable; `scale` is the float32 scalar this step's loss is scaled by
    (graph name `loss_scale`)."""
    self._scaler = _tf1.mixed_precision.DynamicLossScale(
        initial_loss_scale=init_loss_scale, increment_period=increment_period,
        multiplier=LOSS_SCALE_MULTIPLIER)
    self.scale = tf.identity(self._scaler(), name=graph_names.LOSS_SCALE)
    with tf.init_scope():
      # Updates skipped as non-finite, saved in checkpoints so that a resumed run keeps counting.
      self._skipped_count = _tf1.get_variable(
          "skipped_update_count", shape=[], dtype=tf.int64, trainable=False,
          initializer=_tf1.zeros_initializer(), use_resource=True)

  def unscale(self, value):
    """`value` (float32 Tensor computed from scaled gradients) / the scale."""
    return value / self.scale

  def update(self, global_norm):
    """The op updating the scale from the finiteness of `global_norm` (float32 scalar)."""
    scale_update, _ = self._scaler.update([global_norm])
    return scale_update

  def count_skip(self):
    """The op adding one to the skipped-update count (run in the non-finite branch)."""
    return self._skipped_count.assign_add(1, read_value=False)

  def skipped_updates(self):
    """int64 scalar Tensor: the updates skipped so far (read after this step's update)."""
    return self._skipped_count.read_value()


class NoLossScaling(object):
  """The fp32 step: scale 1.0, nothing to unscale or update, gradients allreduced in fp32."""

  allreduce_dtype = tf.float32

  def __init__(self):
    self.scale = tf.constant(1.0)

  def unscale(self, value):
    return value

  def update(self, global_norm):
    del global_norm
    return None

  def count_skip(self):
    """None: an fp32 step keeps no count (a skip shows as a non-finite `global_norm`)."""
    return None

  def skipped_updates(self):
    return None


def scaled_gradients(loss, optimizer, loss_scale, num_accumulation_steps, use_tpu):
  """Gradients of `loss * loss_scale / num_accumulation_steps`, dense, fp32, without Nones.

  Args:
    loss: float scalar Tensor, the mean loss of this worker's micro-batch.
    optimizer: the optimizer (its `compute_gradients`; on TPU cores its CrossShardOptimizer's).
    loss_scale: float32 scalar Tensor.
    num_accumulation_steps: micro-steps per update N.
    use_tpu: compute through `CrossShardOptimizer` (scales by 1 / number of cores).

  Returns:
    (grads, tvars): lists of fp32 Tensors shaped like their variables, and those variables.

  Raises:
    ValueError: naming the variables, when the loss has no gradient at all.
  """
  compute_gradients = optimizer.compute_gradients
  if use_tpu:
    # The wrapper's compute_gradients scales by 1 / num_shards (MEAN). Its apply_gradients would
    # sum across cores inside our finiteness cond, where cores could disagree and deadlock, so
    # the cross-core sum runs in the reduction step, before the check, like every other one.
    cross_shard = _tf1.tpu.CrossShardOptimizer(optimizer, reduction=_tf1.losses.Reduction.MEAN)
    compute_gradients = cross_shard.compute_gradients
  scaled_loss = tf.cast(loss, tf.float32) * (loss_scale / float(num_accumulation_steps))
  grads_and_vars = compute_gradients(scaled_loss, var_list=_tf1.trainable_variables(),
                                     gate_gradients=_tf1.train.Optimizer.GATE_NONE)
  grads_and_vars = drop_none_gradients(grads_and_vars)
  tvars = [var for _, var in grads_and_vars]
  grads = [tf.cast(tf.convert_to_tensor(grad), tf.float32) for grad, _ in grads_and_vars]
  return grads, tvars


def gradient_reduction(distribution, allreduce_dtype):
  """The cross-worker reduction of a list of gradients, or None for a single worker.

  Args:
    distribution: `Distribution`.
    allreduce_dtype: dtype Horovod communicates in.

  Returns:
    None, or a function list of fp32 Tensors -> list of fp32 Tensors of the same shapes: the
    cross-core sum on TPU cores (each already scaled by 1 / cores), the Horovod Average otherwise.
  """
  if distribution.use_tpu:
    return lambda grads: [_tf1.tpu.cross_replica_sum(g) for g in grads]
  if distribution.hvd is not None:
    return lambda grads: _allreduce_average(distribution.hvd, grads, allreduce_dtype)
  return None


def apply_if_finite(grads, tvars, optimizer, global_step, step_before, loss_scaling):
  """Unscale, finiteness check, clip, increment, apply: the optimizer update of one cycle.

  One pass over the gradients (an L2Loss each) gives both the clipping norm and the finiteness
  check: the norm is finite exactly when every element is and the sum of squares does not overflow
  (an overflowing norm would turn the clipped update into NaN, so that update is skipped as well).
  Unscaling and clipping are one factor, applied inside the optimizer's fused update.

  Args:
    grads: list of fp32 Tensors (scaled by the loss scale), reduced across workers.
    tvars: their variables.
    optimizer: `_AdamFamilyOptimizer` with its slots created.
    global_step: the int64 global step variable.
    step_before: int64 scalar Tensor, the step read before this update.
    loss_scaling: `LossScaling` or `NoLossScaling`.

  Returns:
    (step_after, global_norm): int64 scalar Tensor, the global step after this update (unchanged
    when it was skipped), which depends on the update and on the loss-scale update; and float32
    scalar Tensor, the update's gradient norm, unscaled and before clipping.
  """
  global_norm = loss_scaling.unscale(tf.linalg.global_norm(grads, name="gradient_norm"))
  all_finite = tf.math.is_finite(global_norm)
  # The scaler decides on the same finiteness as the update (is_finite of the norm).
  scale_update = loss_scaling.update(global_norm)

  def skip_update():
    count_skip = loss_scaling.count_skip()
    with tf.control_dependencies([count_skip] if count_skip is not None else []):
      return tf.identity(step_before)

  step_after = tf.cond(
      all_finite,
      lambda: _apply_clipped(grads, tvars, optimizer, global_step, step_before, global_norm,
                             loss_scaling),
      skip_update)
  with tf.control_dependencies([scale_update] if scale_update is not None else []):
    return tf.identity(step_after), global_norm


def _apply_clipped(grads, tvars, optimizer, global_step, step_before, global_norm, loss_scaling):
  """Increments the step, then applies the gradients scaled by 1 / loss scale and the clipping
  factor of their (finite, unscaled) `global_norm`. Returns the step after (int64 scalar)."""
  # tf.clip_by_global_norm's factor (the norm is finite here).
  grad_scale = loss_scaling.unscale(CLIP_NORM * tf.minimum(1.0 / global_norm, 1.0 / CLIP_NORM))
  # Update k used the LR of step k - 1 (computed from step_before); the optimizer reads the step
  # after the increment (t = k).
  step_after = step_before + 1
  # A ref global step (TF1 behaviour, or one the caller made) is read by sharing its buffer, which
  # the increment overwrites in place: the LR must be computed before it. (A resource read is a
  # copy; there the data edge from `step_before` suffices.)
  lr_first = [optimizer.learning_rate] if is_ref_variable(global_step) else []
  with tf.control_dependencies(lr_first):
    increment = global_step.assign(step_after, read_value=False)
  with tf.control_dependencies([increment]):
    apply_op = optimizer.apply_scaled_gradients(
        list(zip(grads, tvars)), grad_scale=grad_scale, global_step=global_step)
  with tf.control_dependencies([apply_op]):
    return tf.identity(step_after)


def _reduce_and_apply(grads, tvars, reduce_gradients, optimizer, global_step, step_before,
                      loss_scaling):
  """`apply_if_finite` of `grads` after `reduce_gradients` (None: no reduction): (step, norm)."""
  if reduce_gradients is not None:
    grads = reduce_gradients(grads)
  return apply_if_finite(grads, tvars, optimizer, global_step, step_before, loss_scaling)


def build_train_op(loss, schedule, precision=Precision(), accumulation=Accumulation(),
                   distribution=Distribution()):
  """Builds the training op: one micro-step, and an optimizer update every N micro-steps.

  The gradient path of the module docstring, top to bottom.

  Args:
    loss: float scalar Tensor, the mean loss of this worker's micro-batch.
    schedule: `Schedule`.
    precision: `Precision`.
    accumulation: `Accumulation`.
    distribution: `Distribution`.

  Returns:
    The train op. Named tensors (utils/core/graph_names.py): `learning_rate` (the rate of this
    step's update), `step_update` (global step after this step), `update_step` (bool, with N > 1:
    this micro-step completed a cycle), `global_norm` (the update's gradient norm, unscaled and
    before clipping; NaN on micro-steps that apply no update), and with loss scaling `loss_scale`
    (the scale this step's loss used) and `skipped_updates` (int64, non-finite updates skipped so
    far, counted by the variable `skipped_update_count`).

  Raises:
    ValueError: for invalid settings or a loss without gradients.
  """
  schedule.check()
  precision.check()
  accumulation.check()
  distribution.check(accumulation.num_accumulation_steps)
  global_step = _tf1.train.get_or_create_global_step()
  # The one read of the step before this update: the LR and the increment are both computed from
  # it, so the increment cannot be reordered before the LR read (a data edge, which graph
  # rewrites preserve; a bare control edge into a functional cond was seen to be dropped).
  step_before = global_step.read_value()
  learning_rate = tf.identity(schedule.learning_rate_at(step_before),
                              name=graph_names.LEARNING_RATE)
  optimizer = schedule.optimizer(learning_rate)
  loss_scaling = NoLossScaling()
  if precision.scales_loss():
    loss_scaling = LossScaling(precision.init_loss_scale, precision.loss_scale_increment_period)

  num_accumulation_steps = accumulation.num_accumulation_steps
  grads, tvars = scaled_gradients(loss, optimizer, loss_scaling.scale, num_accumulation_steps,
                                  distribution.use_tpu)
  optimizer.create_slots(tvars)
  reduce_gradients = gradient_reduction(distribution, loss_scaling.allreduce_dtype)
  reduce_after_accumulation = None
  if accumulation.allreduce_post_accumulation:
    reduce_after_accumulation = reduce_gradients
  elif reduce_gradients is not None:
    grads = reduce_gradients(grads)

  if num_accumulation_steps == 1:
    step_after, global_norm = _reduce_and_apply(grads, tvars, reduce_after_accumulation,
                                                optimizer, global_step, step_before,
                                                loss_scaling)
  else:
    is_update, accumulated, accumulate_op = _accumulate(grads, tvars, num_accumulation_steps)
    is_update = tf.identity(is_update, name=graph_names.UPDATE_STEP)
    with tf.control_dependencies([accumulate_op]):
      # A micro-step that applies no update has no norm: NaN.
      step_after, global_norm = tf.cond(
          is_update,
          lambda: _reduce_and_apply(accumulated, tvars, reduce_after_accumulation, optimizer,
                                    global_step, step_before, loss_scaling),
          lambda: (tf.identity(step_before), tf.constant(float("nan"))))
  tf.identity(global_norm, name=graph_names.GLOBAL_NORM)
  step_update = tf.identity(step_after, name=graph_names.STEP_UPDATE)
  with tf.control_dependencies([step_update]):  # the count after this step's update
    skipped_updates = loss_scaling.skipped_updates()
  if skipped_updates is not None:
    tf.identity(skipped_updates, name=graph_names.SKIPPED_UPDATES)
  return tf.group(step_update, name=graph_names.TRAIN_OP)


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps, hvd=None,
                     manual_fp16=False, use_fp16=False, num_accumulation_steps=1,
                     optimizer_type="adam", allreduce_post_accumulation=False,
                     init_loss_scale=2**32, use_tpu=False,
                     loss_scale_increment_period=LOSS_SCALE_INCREMENT_PERIOD, bf16=False):
  """`build_train_op` with the settings as arguments (the interface of the BERT releases).

  Args:
    loss: float scalar Tensor, the mean loss of this worker's micro-batch.
    init_lr, num_train_steps, num_warmup_steps, optimizer_type: see `Schedule`.
    hvd, use_tpu: see `Distribution`.
    manual_fp16, init_loss_scale, loss_scale_increment_period, bf16: see `Precision` (the
      model must have been built in the matching compute type).
    use_fp16: automatic mixed precision (`Precision.amp`): loss scaling on a GPU; on a machine
      without a GPU the rewrite does nothing, so training stays fp32.
    num_accumulation_steps, allreduce_post_accumulation: see `Accumulation`.

  Returns:
    The train op (see `build_train_op`).

  The original release's positional call `create_optimizer(loss, init_lr, num_train_steps,
  num_warmup_steps, use_tpu)` (its run_classifier.py and run_squad.py) is recognised by a bool
  where `hvd` goes: it means `use_tpu`, without Horovod, with the defaults above (AdamWeightDecay,
  fp32, no accumulation).

  Raises:
    ValueError: for invalid arguments or a loss without gradients.
  """
  if isinstance(hvd, bool):
    # The release's signature ends in `use_tpu` where ours has `hvd` (a module or None).
    if use_tpu:
      raise ValueError("create_optimizer: use_tpu given twice, positionally as in the original "
                       "release (after num_warmup_steps) and by keyword")
    hvd, use_tpu = None, hvd
  return build_train_op(
      loss, Schedule(optimizer_type, init_lr, num_train_steps, num_warmup_steps),
      Precision(manual_fp16, use_fp16, init_loss_scale, loss_scale_increment_period, bf16),
      Accumulation(num_accumulation_steps, allreduce_post_accumulation),
      Distribution(hvd, use_tpu))
