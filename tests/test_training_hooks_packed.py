"""utils/training/hooks.py: the training log hook of packed input, which counts sequences from the
graph's batch_sequences and batch_tokens (the set-up of tests/test_training_hooks.py)."""

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tests.test_training_hooks import assert_data_close
from tests.test_training_hooks import build_graph
from tests.test_training_hooks import clock_for
from tests.test_training_hooks import expected_lines
from tests.test_training_hooks import log_hook
from tests.test_training_hooks import random_feeds
from tests.test_training_hooks import read_records
from tests.test_training_hooks import run_micro_steps
from utils.runlog import dllogger_setup

_tf1 = tf.compat.v1

COUNT_TENSORS = ("batch_sequences", "batch_tokens")
# 2 workers x 4 rows x 2 accumulation = 16 rows per update, rows of 128 tokens. Per micro-step
# this worker's sequences and tokens, and its seconds: updates of 1.5 + 2.5 = 4 s and 1 + 1 = 2 s.
PACKED_COUNTS = [{"batch_sequences": 7.0, "batch_tokens": 480.0},
                 {"batch_sequences": 9.0, "batch_tokens": 504.0},
                 {"batch_sequences": 6.0, "batch_tokens": 384.0},
                 {"batch_sequences": 8.0, "batch_tokens": 448.0}]
PACKED_DURATIONS = [1.5, 2.5, 1.0, 1.0]


def build_graph_with_counts(num_accumulation_steps):
  """`build_graph` (fp16 tensors included) plus the fed count tensors of the pretraining graph."""
  train_op, placeholders = build_graph(num_accumulation_steps)
  for name in COUNT_TENSORS:
    placeholders[name] = _tf1.placeholder(tf.float32, [], name=name + "_value")
    tf.identity(placeholders[name], name=name)
  return train_op, placeholders


def packed_feeds():
  feeds = random_feeds(np.random.RandomState(5), len(PACKED_COUNTS))
  return [dict(feed, **counts) for feed, counts in zip(feeds, PACKED_COUNTS)]


def test_training_hook_packed_logs_sequences_rows_and_padding(graph, tmp_path):
  feeds = packed_feeds()
  log_path = str(tmp_path / "log.json")
  summary_dir = str(tmp_path / "train")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=16, accumulation=2, warmup_steps=0,
                  summary_dir=summary_dir, clock=clock_for(PACKED_DURATIONS),
                  max_sequences_per_pack=3, num_workers=2, seq_length=128)
  train_op, placeholders = build_graph_with_counts(2)
  run_micro_steps(hook, train_op, placeholders, feeds)
  records = read_records(log_path)
  assert [r["step"] for r in records] == [1, 2, []]
  expected = expected_lines(feeds, PACKED_DURATIONS, 2, 16, display=1, fp16=True)
  # Sequences: (7 + 9) x 2 workers = 32 in 4 s, (6 + 8) x 2 = 28 in 2 s; rows: 16 per update;
  # tokens (480 + 504) x 2 = 1968 and (384 + 448) x 2 = 1664 of 16 x 128 = 2048 slots.
  for (_, data), sequences, rows_per_sec, empty in zip(expected, (32.0, 28.0), (4.0, 8.0),
                                                       (80.0, 384.0)):
    data["throughput_train"] = rows_per_sec * sequences / 16
    data.update(sequences_per_update=sequences, rows_per_sec=rows_per_sec, padding=empty / 2048)
  for record, (_, data) in zip(records, expected):
    assert_data_close(record["data"], data)
  assert records[0]["data"]["throughput_train"] == 8.0
  summary = records[-1]["data"]
  assert summary["throughput_train"] == 10.0  # 60 sequences in 6 s
  assert summary["rows_per_sec"] == pytest.approx(32 / 6.0)
  assert summary["sequences_per_row"] == 60 / 32.0
  assert summary["padding"] == pytest.approx(464.0 / 4096)
  # TensorBoard: sequences/s (throughput_train) beside rows/s and the padding share.
  scalars = helpers.read_scalars(summary_dir)
  assert set(scalars) == set(helpers.SCALAR_LOG_KEYS) | {"rows_per_sec", "padding"}
  assert scalars["throughput_train"] == [(1, 8.0), (2, 14.0)]
  assert scalars["rows_per_sec"] == [(1, 4.0), (2, 8.0)]
  assert [step for step, _ in scalars["padding"]] == [1, 2]
  assert [v for _, v in scalars["padding"]] == pytest.approx([80.0 / 2048, 0.1875], rel=1e-6)


def test_training_hook_unpacked_line_unchanged_with_the_count_tensors(graph, tmp_path):
  # Every pretraining graph has the count tensors; an unpacked run logs exactly today's lines
  # and TensorBoard tags: global batch / time, no new keys.
  feeds = packed_feeds()
  log_path = str(tmp_path / "log.json")
  summary_dir = str(tmp_path / "train")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=16, accumulation=2, warmup_steps=0,
                  summary_dir=summary_dir, clock=clock_for(PACKED_DURATIONS),
                  num_workers=2, seq_length=128)
  train_op, placeholders = build_graph_with_counts(2)
  asked = []
  before_run = hook.before_run
  hook.before_run = lambda context: asked.append(before_run(context)) or asked[-1]
  run_micro_steps(hook, train_op, placeholders, feeds)
  records = read_records(log_path)
  expected = expected_lines(feeds, PACKED_DURATIONS, 2, 16, display=1, fp16=True)
  assert [r["step"] for r in records] == [1, 2, []]
  for record, (_, data) in zip(records, expected):
    assert_data_close(record["data"], data)
  assert [r["data"]["throughput_train"] for r in records[:2]] == [4.0, 8.0]  # 16 rows / 4 s, 2 s
  assert list(records[-1]["data"]) == ["throughput_train", "total_time", "update_steps",
                                       "steady_update_steps", "steady_time", "skipped_updates"]
  assert set(helpers.read_scalars(summary_dir)) == set(helpers.SCALAR_LOG_KEYS)
  # Nor does it fetch (or compute) the counts: the hook's runs ask for nothing of their own.
  assert len(asked) == 4 and asked == [None] * 4


def test_training_hook_packed_needs_the_count_tensors(graph, tmp_path):
  logger = dllogger_setup.RunLogger(str(tmp_path / "log.json"), backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=16, accumulation=2, max_sequences_per_pack=3,
                  num_workers=2, seq_length=128)
  train_op, placeholders = build_graph(2)
  with pytest.raises(ValueError, match="training log hook: packed input, but the graph has no "
                                       "tensor named batch_sequences, batch_tokens"):
    run_micro_steps(hook, train_op, placeholders, packed_feeds())
  with pytest.raises(ValueError, match="seq_length must be an integer >= 1"):
    log_hook(logger, global_batch_size=16, max_sequences_per_pack=3)
  logger.close()
