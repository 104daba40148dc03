"""The evaluation's timing hook: per-batch times and the evaluation throughput.

`EvalTimingHook` times every batch of an evaluation or a prediction (`job.evaluate`,
`job.predict`) and logs one summary line at the end through a `dllogger_setup.RunLogger`, which
writes on rank 0 only.
"""

import collections
import time

from absl import logging
import numpy as np
import tensorflow as tf

from utils.core import checks
from utils.core import graph_names
from utils.runlog import dllogger_setup

_tf1 = tf.compat.v1

# Evaluation batches left out of the evaluation throughput.
DEFAULT_EVAL_WARMUP_BATCHES = 2


class EvalTimingHook(tf.estimator.SessionRunHook):
  """Times every evaluation batch; logs the evaluation throughput at the end.

  The first `warmup_batches` batches are left out. The summary line (step []) holds
  `throughput_val` (sequences/s over the measured batches), the batch counts, the measured time and
  the mean, median, 90th and 99th percentile batch latencies in milliseconds.
  """

  def __init__(self, logger, eval_batch_size, warmup_batches=DEFAULT_EVAL_WARMUP_BATCHES,
               clock=time.perf_counter, packed=False):
    """Configures the hook.

    Args:
      logger: `dllogger_setup.RunLogger`.
      eval_batch_size: sequences per evaluation batch (rows, for packed input).
      warmup_batches: batches left out of the throughput.
      clock: function returning seconds; `time.perf_counter` by default.
      packed: packed input: each batch's sequences are counted (the graph tensor
        `batch_sequences`), not taken as `eval_batch_size`.

    Raises:
      ValueError: for a bad argument, naming it.
    """
    dllogger_setup.check_run_logger(logger)
    checks.check_integer("eval_batch_size", eval_batch_size, 1)
    checks.check_integer("warmup_batches", warmup_batches, 0)
    self._logger = logger
    self._eval_batch_size = eval_batch_size
    self._warmup_batches = warmup_batches
    self._clock = clock
    self._packed = packed
    self._reset()

  def _reset(self):
    """Clears the measurements."""
    self._run_start = None
    # Seconds of every batch, in order (warm-up included).
    self.batch_times = []
    self._timed_times = []
    self._timed_sequences = 0.0

  def begin(self):
    """Clears the measurements of an earlier evaluation."""
    self._reset()

  def before_run(self, run_context):
    self._run_start = self._clock()
    if self._packed:
      return _tf1.train.SessionRunArgs(graph_names.tensor_name(graph_names.BATCH_SEQUENCES))
    return None

  def after_run(self, run_context, run_values):
    elapsed = self._clock() - self._run_start
    self.batch_times.append(elapsed)
    if len(self.batch_times) <= self._warmup_batches:
      return
    self._timed_times.append(elapsed)
    self._timed_sequences += (float(run_values.results) if self._packed
                              else self._eval_batch_size)

  def summary(self):
    """Evaluation timing so far.

    Returns:
      OrderedDict: throughput_val (sequences/s over the measured batches, or None), eval_batches,
      timed_eval_batches, eval_time (seconds of the measured batches), latency_avg_ms,
      latency_p50_ms, latency_p90_ms, latency_p99_ms (None without measured batches).
    """
    timed = np.asarray(self._timed_times, dtype=np.float64)
    eval_time = float(timed.sum())
    throughput = (self._timed_sequences / eval_time if timed.size and eval_time > 0 else None)
    summary = collections.OrderedDict([
        ("throughput_val", throughput),
        ("eval_batches", len(self.batch_times)),
        ("timed_eval_batches", int(timed.size)),
        ("eval_time", eval_time),
    ])
    summary["latency_avg_ms"] = float(timed.mean() * 1000.0) if timed.size else None
    for percent in (50, 90, 99):
      summary["latency_p%d_ms" % percent] = (float(np.percentile(timed, percent) * 1000.0)
                                              if timed.size else None)
    return summary

  def end(self, session):
    """Logs the summary line (step [])."""
    del session  # unused
    summary = self.summary()
    self._logger.log(step=dllogger_setup.SUMMARY_STEP, data=summary)
    if self._logger.enabled and summary["throughput_val"] is not None:
      logging.info("Evaluation throughput (sequences/s) = %.2f over %d batches",
                   summary["throughput_val"], summary["timed_eval_batches"])
