"""utils/training/eval_timing.py: the evaluation timing hook in a real `MonitoredSession`, every
batch timed by a scripted clock (tests/test_training_hooks.py's)."""

import numpy as np
import pytest
import tensorflow as tf

from tests.test_training_hooks import clock_for
from tests.test_training_hooks import read_records
from utils.core import graph_names
from utils.runlog import dllogger_setup
from utils.training import eval_timing

_tf1 = tf.compat.v1


def build_eval_graph():
  """An eval graph whose runs take a feed; returns (op, placeholder)."""
  examples = _tf1.placeholder(tf.int32, [], name="examples_value")
  return tf.identity(examples * 2), examples


def test_eval_hook_throughput_skips_warmup_batches(graph, tmp_path):
  rng = np.random.RandomState(6)
  durations = [2.0, 1.0] + list(rng.uniform(0.05, 0.2, 5))
  log_path = str(tmp_path / "eval.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = eval_timing.EvalTimingHook(logger, eval_batch_size=16, warmup_batches=2,
                                    clock=clock_for(durations))
  op, examples = build_eval_graph()
  with _tf1.train.MonitoredSession(hooks=[hook]) as session:
    for _ in durations:
      session.run(op, feed_dict={examples: 16})
  records = read_records(log_path)
  assert [r["step"] for r in records] == [[]]
  data = records[0]["data"]
  timed = np.array(durations[2:])
  assert data["throughput_val"] == pytest.approx(16 * 5 / timed.sum())
  assert data["eval_batches"] == 7 and data["timed_eval_batches"] == 5
  assert data["eval_time"] == pytest.approx(timed.sum())
  assert data["latency_avg_ms"] == pytest.approx(timed.mean() * 1000)
  assert data["latency_p90_ms"] == pytest.approx(np.percentile(timed, 90) * 1000)
  assert hook.batch_times == pytest.approx(durations)


def test_eval_hook_of_packed_input_counts_each_batchs_sequences(graph, tmp_path):
  durations = [2.0, 0.5, 0.25, 0.25]
  log_path = str(tmp_path / "eval.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = eval_timing.EvalTimingHook(logger, eval_batch_size=4, warmup_batches=1,
                                    clock=clock_for(durations), packed=True)
  sequences = _tf1.placeholder(tf.float32, [], name="sequences_value")
  counted = tf.identity(sequences, name=graph_names.BATCH_SEQUENCES)
  with _tf1.train.MonitoredSession(hooks=[hook]) as session:
    for count in (9, 7, 5, 6):
      session.run(counted, feed_dict={sequences: count})
  data = read_records(log_path)[0]["data"]
  # Rows of 4 holding 7, 5 and 6 sequences in the measured 0.5 + 0.25 + 0.25 s.
  assert data["throughput_val"] == pytest.approx(18.0)


def test_eval_hook_without_measured_batches(graph, tmp_path):
  log_path = str(tmp_path / "eval.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = eval_timing.EvalTimingHook(logger, eval_batch_size=4, clock=clock_for([0.3]))
  op, examples = build_eval_graph()
  with _tf1.train.MonitoredSession(hooks=[hook]) as session:
    session.run(op, feed_dict={examples: 4})
  data = read_records(log_path)[0]["data"]
  assert data["throughput_val"] is None and data["latency_p99_ms"] is None
  assert data["eval_batches"] == 1

