"""utils/training/hooks.py: the training log hook (packed input: test_training_hooks_packed.py).

The training log hook runs inside a real `MonitoredSession` on a small graph that has the named
tensors of docs/DESIGN.md section 5: the losses, learning rate, gradient norm, loss scale and
skipped-update count are fed per micro-step, the global step and `update_step` come from real
accumulation-counter variables. A scripted clock gives every micro-step a known duration; the
expected log lines (and TensorBoard scalars) are computed here from those numbers.
"""

import json
import logging

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tests.helpers import ScriptedClock
from utils.runlog import dllogger_setup
from utils.training import hooks

_tf1 = tf.compat.v1
FED_TENSORS = ("total_loss", "mlm_loss", "nsp_loss", "learning_rate", "global_norm",
               "loss_scale", "skipped_updates")
# The tensors the optimizer creates only when it scales the loss.
LOSS_SCALING = ("loss_scale", "skipped_updates")


def clock_for(durations, gap=0.25):
  """Times for before_run/after_run pairs so that micro-step i lasts durations[i]."""
  times = []
  now = 1000.0
  for duration in durations:
    times += [now, now + duration]
    now += duration + gap  # time between runs is not part of any step
  return ScriptedClock(times)


def build_graph(num_accumulation_steps, initial_global_step=0, with_update_step=True,
                omit=()):
  """A train graph with the docs/DESIGN.md section 5 tensors; returns (train_op, placeholders)."""
  placeholders = {}
  for name in FED_TENSORS:
    if name in omit:
      continue
    dtype = tf.int64 if name == "skipped_updates" else tf.float32
    placeholders[name] = _tf1.placeholder(dtype, [], name=name + "_value")
    tf.identity(placeholders[name], name=name)
  global_step = _tf1.get_variable(
      "global_step", [], tf.int64, initializer=_tf1.constant_initializer(initial_global_step),
      trainable=False,
      collections=[_tf1.GraphKeys.GLOBAL_VARIABLES, _tf1.GraphKeys.GLOBAL_STEP])
  local_step = _tf1.get_variable("local_step", [], tf.int64, initializer=_tf1.zeros_initializer(),
                                 trainable=False)
  new_local_step = local_step.assign_add(1)
  update = tf.equal(new_local_step % num_accumulation_steps, 0)
  new_global_step = global_step.assign_add(tf.cast(update, tf.int64))
  tf.identity(new_global_step, name="step_update")
  if with_update_step:
    tf.identity(update, name="update_step")
  return tf.group(new_global_step), placeholders


def log_hook(logger, accumulation=1, **kwargs):
  """A TrainingLogHook reading a fresh `hooks.UpdateSource` of `accumulation` (its `updates`)."""
  return hooks.TrainingLogHook(logger, hooks.UpdateSource(accumulation), **kwargs)


def run_micro_steps(hook, train_op, placeholders, feeds):
  """Runs one MonitoredSession run per dict of `feeds` (name -> value), the hook after its update
  source; closes the session."""
  with _tf1.train.MonitoredSession(hooks=[hook.updates, hook]) as session:
    for feed in feeds:
      session.run(train_op, feed_dict={placeholders[k]: v for k, v in feed.items()
                                       if k in placeholders})


def read_records(path):
  """The decoded `DLLL` lines of a log file (every line must be one)."""
  with open(path) as f:
    lines = f.read().splitlines()
  records = []
  for line in lines:
    assert line.startswith("DLLL "), line
    records.append(json.loads(line[len("DLLL "):]))
  return records


def random_feeds(rng, count):
  """Per-micro-step values of the fed tensors."""
  return [{"total_loss": float(rng.uniform(5, 9)), "mlm_loss": float(rng.uniform(4, 8)),
           "nsp_loss": float(rng.uniform(0.3, 0.9)),
           "learning_rate": float(rng.uniform(1e-5, 1e-3)),
           "global_norm": float(rng.uniform(0.5, 3.0)),
           "loss_scale": float(2 ** rng.randint(10, 16)),
           "skipped_updates": int(rng.randint(0, 5))} for _ in range(count)]


def expected_lines(feeds, durations, accumulation, global_batch, display, first_step=0,
                   fp16=False):
  """Expected per-update log data, computed from the fed values and the scripted durations."""
  lines = []
  updates = len(feeds) // accumulation
  for k in range(1, updates + 1):
    micro = range((k - 1) * accumulation, k * accumulation)
    step = first_step + k
    if not (k == 1 or step % display == 0):
      continue
    last = feeds[micro[-1]]
    data = {
        "throughput_train": global_batch / sum(durations[i] for i in micro),
        "mlm_loss": last["mlm_loss"],
        "nsp_loss": last["nsp_loss"],
        "total_loss": last["total_loss"],
        "avg_loss_step": float(np.mean([feeds[i]["total_loss"] for i in micro])),
        "learning_rate": last["learning_rate"],
    }
    if fp16:
      data["loss_scaler"] = last["loss_scale"]
    data["global_norm"] = last["global_norm"]
    if fp16:
      data["skipped_updates"] = last["skipped_updates"]
    lines.append((step, data))
  return lines


def assert_data_close(got, expected):
  assert list(got) == list(expected), (list(got), list(expected))
  for key, value in expected.items():
    assert got[key] == pytest.approx(value, rel=1e-6), key


def test_training_hook_without_accumulation_logs_each_update(graph, tmp_path):
  rng = np.random.RandomState(0)
  num_updates, global_batch = 9, 16
  feeds = random_feeds(rng, num_updates)
  durations = [3.0, 2.0, 1.5] + list(rng.uniform(0.2, 0.4, num_updates - 3))
  log_path = str(tmp_path / "log.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=global_batch, accumulation=1,
                  display_loss_steps=1, clock=clock_for(durations))
  train_op, placeholders = build_graph(1, with_update_step=False, omit=LOSS_SCALING)
  run_micro_steps(hook, train_op, placeholders, feeds)
  logger.close()

  records = read_records(log_path)
  expected = expected_lines(feeds, durations, 1, global_batch, display=1)
  assert [r["step"] for r in records] == [s for s, _ in expected] + [[]]
  for record, (_, data) in zip(records, expected):
    assert record["type"] == "LOG"
    assert_data_close(record["data"], data)
  summary = records[-1]["data"]
  steady = durations[6:]  # the first 6 updates are warm-up
  assert summary["throughput_train"] == pytest.approx(global_batch * len(steady) / sum(steady))
  assert summary["update_steps"] == num_updates
  assert summary["steady_update_steps"] == len(steady)
  assert summary["total_time"] == pytest.approx(sum(durations))
  assert summary["steady_time"] == pytest.approx(sum(steady))
  assert hook.update_times == pytest.approx(durations)


def test_training_hook_with_accumulation_and_fp16(graph, tmp_path):
  rng = np.random.RandomState(1)
  accumulation, num_updates, display = 3, 8, 2
  global_batch = 4 * accumulation * 2
  feeds = random_feeds(rng, accumulation * num_updates)
  durations = list(rng.uniform(0.1, 0.5, len(feeds)))
  log_path = str(tmp_path / "log.json")
  summary_dir = str(tmp_path / "train")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=global_batch,
                  accumulation=accumulation, display_loss_steps=display,
                  log_loss_scale=True, summary_dir=summary_dir,
                  clock=clock_for(durations))
  train_op, placeholders = build_graph(accumulation)
  run_micro_steps(hook, train_op, placeholders, feeds)

  records = read_records(log_path)
  expected = expected_lines(feeds, durations, accumulation, global_batch, display, fp16=True)
  assert [s for s, _ in expected] == [1, 2, 4, 6, 8]
  assert [r["step"] for r in records] == [1, 2, 4, 6, 8, []]
  for record, (_, data) in zip(records, expected):
    assert_data_close(record["data"], data)
  # TensorBoard: each tag at the logged steps with the logged value (the loss scale under its
  # graph name; simple_value is a float32).
  scalars = helpers.read_scalars(summary_dir)
  assert set(scalars) == set(helpers.SCALAR_LOG_KEYS)
  for tag, key in helpers.SCALAR_LOG_KEYS.items():
    assert [step for step, _ in scalars[tag]] == [1, 2, 4, 6, 8], tag
    for (step, value), (_, data) in zip(scalars[tag], expected):
      assert value == pytest.approx(data[key], rel=1e-6), (tag, step)
  update_times = [sum(durations[i:i + accumulation]) for i in range(0, len(feeds), accumulation)]
  steady = update_times[6:]
  assert records[-1]["data"]["throughput_train"] == pytest.approx(
      global_batch * len(steady) / sum(steady))


def test_training_hook_counts_updates_without_update_step_tensor(graph, tmp_path):
  rng = np.random.RandomState(2)
  feeds = random_feeds(rng, 8)
  durations = list(rng.uniform(0.1, 0.5, 8))
  log_path = str(tmp_path / "log.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=8, accumulation=2,
                  clock=clock_for(durations))
  train_op, placeholders = build_graph(2, with_update_step=False, omit=LOSS_SCALING)
  run_micro_steps(hook, train_op, placeholders, feeds)
  records = read_records(log_path)
  expected = expected_lines(feeds, durations, 2, 8, display=1)
  assert [r["step"] for r in records] == [1, 2, 3, 4, []]
  for record, (_, data) in zip(records, expected):
    assert_data_close(record["data"], data)


def test_training_hook_resumed_run_skips_checkpoint_steps_in_average(graph, tmp_path):
  # The run resumes at global step 5 and saves a checkpoint every 3 steps (steps 8, 11, 14, 17):
  # updates 3, 6, 9, 12 of the run carry the save and stay out of the average.
  rng = np.random.RandomState(3)
  num_updates, global_batch = 12, 8
  feeds = random_feeds(rng, num_updates)
  durations = list(rng.uniform(0.1, 0.5, num_updates))
  log_path = str(tmp_path / "log.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=global_batch, display_loss_steps=4,
                  save_checkpoints_steps=3, clock=clock_for(durations))
  train_op, placeholders = build_graph(1, initial_global_step=5, omit=LOSS_SCALING)
  run_micro_steps(hook, train_op, placeholders, feeds)
  records = read_records(log_path)
  # First update of the run (step 6), then steps divisible by 4.
  assert [r["step"] for r in records] == [6, 8, 12, 16, []]
  expected = dict(expected_lines(feeds, durations, 1, global_batch, 4, first_step=5))
  for record in records[:-1]:
    assert_data_close(record["data"], expected[record["step"]])
  steady = [durations[k - 1] for k in (7, 8, 10, 11)]
  summary = records[-1]["data"]
  assert summary["steady_update_steps"] == 4
  assert summary["throughput_train"] == pytest.approx(global_batch * 4 / sum(steady))


@pytest.mark.parametrize("log_loss_scale,graph_has_loss_scale,logged", [
    (None, True, True),     # default: logged whenever the optimizer scales the loss
    (None, False, False),
    (False, True, False),
    (True, False, False),   # expected but missing: a warning, no crash
])
def test_training_hook_loss_scale(graph, tmp_path, log_loss_scale, graph_has_loss_scale, logged):
  feeds = random_feeds(np.random.RandomState(9), 2)
  log_path = str(tmp_path / "log.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=8, log_loss_scale=log_loss_scale,
                  clock=clock_for([0.1, 0.2]))
  omit = () if graph_has_loss_scale else LOSS_SCALING
  train_op, placeholders = build_graph(1, omit=omit)
  run_micro_steps(hook, train_op, placeholders, feeds)
  records = read_records(log_path)[:-1]
  assert [r["step"] for r in records] == [1, 2]
  for record, feed in zip(records, feeds):
    assert ("loss_scaler" in record["data"]) is logged
    assert ("skipped_updates" in record["data"]) is logged
    if logged:
      assert record["data"]["loss_scaler"] == feed["loss_scale"]
      assert record["data"]["skipped_updates"] == feed["skipped_updates"]


@pytest.mark.parametrize("num_updates", [0, 1, 3, 6])
def test_training_hook_short_run_ends_cleanly(graph, tmp_path, num_updates):
  rng = np.random.RandomState(4)
  feeds = random_feeds(rng, 2 * num_updates)
  durations = list(rng.uniform(0.1, 0.5, len(feeds)))
  log_path = str(tmp_path / "log.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=8, accumulation=2,
                  clock=clock_for(durations))
  train_op, placeholders = build_graph(2, omit=LOSS_SCALING)
  run_micro_steps(hook, train_op, placeholders, feeds)
  records = read_records(log_path)
  assert [r["step"] for r in records] == list(range(1, num_updates + 1)) + [[]]
  summary = records[-1]["data"]
  assert summary["throughput_train"] is None
  assert summary["update_steps"] == num_updates
  assert summary["steady_update_steps"] == 0
  assert summary["total_time"] == pytest.approx(sum(durations))


def test_training_hook_logs_skipped_updates_apart_from_the_steps(graph, tmp_path):
  # The global step advances only when `apply` is fed True (as the optimizer does for finite
  # gradients). Skipped updates must not be written as (repeated) step lines.
  for name in FED_TENSORS:
    tf.identity(_tf1.placeholder(tf.float32, [], name=name + "_value"), name=name)
  apply = _tf1.placeholder(tf.bool, [], name="apply")
  global_step = _tf1.train.get_or_create_global_step()
  new_step = global_step.assign_add(tf.cast(apply, tf.int64))
  tf.identity(new_step, name="step_update")
  applied_pattern = [False, False, False, True, False, True, True]  # 4 skipped, 3 applied
  log_path = str(tmp_path / "log.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=8, display_loss_steps=1,
                  clock=clock_for([0.1] * len(applied_pattern)))
  graph_tensor = lambda name: graph.get_tensor_by_name(name + "_value:0")  # noqa: E731
  with _tf1.train.MonitoredSession(hooks=[hook.updates, hook]) as session:
    for k, applies in enumerate(applied_pattern):
      feed = {graph_tensor(name): 1.0 + k for name in FED_TENSORS}
      feed[apply] = applies
      session.run(new_step, feed_dict=feed)
  records = read_records(log_path)
  assert [r["step"] for r in records] == [1, 2, 3, []]
  assert [r["data"]["total_loss"] for r in records[:3]] == [4.0, 6.0, 7.0]
  assert records[-1]["data"]["skipped_updates"] == 4
  assert records[-1]["data"]["update_steps"] == 7


def test_training_hook_skip_lines_give_the_loss_scale_after_the_skip(graph, tmp_path, caplog):
  # The `loss_scale` tensor is the scale the step's loss used; a skip halves it (dynamic loss
  # scaling), and the line reports the halved scale, the one the next update uses.
  for name in FED_TENSORS:
    dtype = tf.int64 if name == "skipped_updates" else tf.float32
    tf.identity(_tf1.placeholder(dtype, [], name=name + "_value"), name=name)
  apply = _tf1.placeholder(tf.bool, [], name="apply")
  global_step = _tf1.train.get_or_create_global_step()
  new_step = global_step.assign_add(tf.cast(apply, tf.int64))
  tf.identity(new_step, name="step_update")
  scales = [2.0 ** 32, 2.0 ** 31, 2.0 ** 30, 2.0 ** 30]
  applied_pattern = [False, False, True, False]
  logger = dllogger_setup.RunLogger(str(tmp_path / "log.json"), backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=8, clock=clock_for([0.1] * 4))
  graph_tensor = lambda name: graph.get_tensor_by_name(name + "_value:0")  # noqa: E731
  with caplog.at_level(logging.INFO):
    with _tf1.train.MonitoredSession(hooks=[hook.updates, hook]) as session:
      for k, (scale, applies) in enumerate(zip(scales, applied_pattern)):
        feed = {graph_tensor(name): 1.0 for name in FED_TENSORS}
        feed[graph_tensor("loss_scale")] = scale
        feed[graph_tensor("skipped_updates")] = k + 1 - sum(applied_pattern[:k + 1])
        feed[apply] = applies
        session.run(new_step, feed_dict=feed)
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("update skipped")]
  # 2^31 = 2147483648, 2^30 = 1073741824, 2^29 = 536870912 in %g's six significant digits.
  assert lines == ["update skipped at step 0 (non-finite gradients); loss scale now 2.14748e+09",
                   "update skipped at step 0 (non-finite gradients); loss scale now 1.07374e+09",
                   "update skipped at step 1 (non-finite gradients); loss scale now 5.36871e+08"]
  records = read_records(str(tmp_path / "log.json"))
  assert records[0]["step"] == 1 and records[0]["data"]["loss_scaler"] == 2.0 ** 30


def test_training_hook_on_rank1_writes_nothing(graph, tmp_path, capsys):
  rng = np.random.RandomState(5)
  feeds = random_feeds(rng, 3)
  log_path = tmp_path / "rank1" / "log.json"
  logger = dllogger_setup.RunLogger(str(log_path), rank=1, backend="builtin")
  hook = log_hook(logger, global_batch_size=8, clock=clock_for([0.1, 0.2, 0.3]))
  train_op, placeholders = build_graph(1, omit=LOSS_SCALING)
  run_micro_steps(hook, train_op, placeholders, feeds)
  assert not log_path.exists() and not log_path.parent.exists()
  assert "DLL" not in capsys.readouterr().out
  assert hook.update_times == pytest.approx([0.1, 0.2, 0.3])  # it still measured


def test_training_hook_of_a_job_without_pretraining_losses(graph, tmp_path):
  # Fine-tuning: the graph has total_loss but no mlm_loss / nsp_loss; the lines leave them out.
  rng = np.random.RandomState(6)
  feeds = random_feeds(rng, 4)
  durations = [0.5, 0.25, 0.2, 0.4]
  log_path = str(tmp_path / "log.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=8, display_loss_steps=2, loss_names=(),
                  clock=clock_for(durations))
  train_op, placeholders = build_graph(1, with_update_step=False,
                                       omit=LOSS_SCALING + ("mlm_loss", "nsp_loss"))
  run_micro_steps(hook, train_op, placeholders, feeds)
  logger.close()
  records = read_records(log_path)
  expected = expected_lines(feeds, durations, 1, 8, display=2)
  assert [r["step"] for r in records] == [1, 2, 4, []]
  for record, (_, data) in zip(records, expected):
    del data["mlm_loss"], data["nsp_loss"]
    assert_data_close(record["data"], data)


def test_training_hook_names_missing_tensors(graph, tmp_path):
  logger = dllogger_setup.RunLogger(None, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=8)
  build_graph(1, omit=("nsp_loss", "learning_rate"))
  hook.updates.begin()
  with pytest.raises(ValueError, match="nsp_loss, learning_rate"):
    hook.begin()


def test_training_hook_rejects_bad_arguments():
  logger = dllogger_setup.RunLogger(None, backend="builtin", stdout=False)
  with pytest.raises(ValueError, match="global_batch_size"):
    log_hook(logger, global_batch_size=0)
  with pytest.raises(ValueError, match="num_accumulation_steps"):
    hooks.UpdateSource(0)
  with pytest.raises(ValueError, match="display_loss_steps"):
    log_hook(logger, global_batch_size=8, display_loss_steps=1.5)
  with pytest.raises(ValueError, match="logger"):
    log_hook("log.json", global_batch_size=8)


def test_training_hook_on_rank1_writes_no_events_file(graph, tmp_path):
  logger = dllogger_setup.RunLogger(None, rank=1, backend="builtin")
  summary_dir = tmp_path / "train"
  hook = log_hook(logger, global_batch_size=8, summary_dir=str(summary_dir),
                  clock=clock_for([0.1, 0.2]))
  train_op, placeholders = build_graph(1)
  run_micro_steps(hook, train_op, placeholders, random_feeds(np.random.RandomState(11), 2))
  assert not summary_dir.exists()


def test_progress_message():
  assert hooks.format_duration(0.9) == "0:00:00"
  assert hooks.format_duration(3 * 3600 + 25 * 60 + 7.6) == "3:25:07"
  assert hooks.format_duration(50 * 3600) == "50:00:00"
  assert (hooks.progress_message(20, 600, 62.5, 0.5)
          == "update 20 of 600 (3.3%), elapsed 0:01:02, ETA 0:04:50")
  assert (hooks.progress_message(1, 600, 9.0, None)
          == "update 1 of 600 (0.2%), elapsed 0:00:09, ETA unknown")
  assert hooks.progress_message(20, None, 62.5, 0.5) == "update 20, elapsed 0:01:02"
  assert (hooks.progress_message(600, 600, 3600.0, 2.0)
          == "update 600 of 600 (100.0%), elapsed 1:00:00, ETA 0:00:00")


def test_training_hook_logs_progress_with_eta(graph, tmp_path, caplog):
  # Micro-steps of 30 s (compilation), then 10 s each, 0.25 s apart (clock_for): the first update
  # ends 40.25 s after the run started, the next 20.5 s later (two micro-steps and two gaps).
  logger = dllogger_setup.RunLogger(None, backend="builtin", stdout=False)
  hook = log_hook(logger, global_batch_size=8, accumulation=2,
                  display_loss_steps=2, num_train_steps=100,
                  clock=clock_for([30.0, 10.0, 10.0, 10.0, 10.0, 10.0]))
  train_op, placeholders = build_graph(2, initial_global_step=40, omit=LOSS_SCALING)
  with caplog.at_level(logging.INFO):
    run_micro_steps(hook, train_op, placeholders, random_feeds(np.random.RandomState(12), 6))
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("update ")]
  # Updates end at steps 41 (the first of the run), 42 and 43 (not a multiple of 2).
  assert lines == [
      "update 41 of 100 (41.0%), elapsed 0:00:40, ETA unknown",
      # 58 updates left x 20.5 s = 1189 s.
      "update 42 of 100 (42.0%), elapsed 0:01:00, ETA 0:19:49",
  ]
