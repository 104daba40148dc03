"""utils/training/estimator.py: the Estimator calls on a one-weight linear model, numbers from
numpy."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.client import session as session_lib

from tests import helpers
from utils.checkpoints import contents as ckpt
from utils.runlog import dllogger_setup
from utils.core import errors
from utils.runtime import hvd_utils
from utils.runtime import workers as workers_lib
from utils.training import estimator as estimator_lib
from utils.training import flags as job_flags
from utils.training import hooks as hooks_lib
from utils.training import watched_training

_tf1 = tf.compat.v1
X = np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)
Y = 2.0 * X
LEARNING_RATE = 0.01


def model_fn(features, labels, mode, params):
  """y = w x, squared error, plain gradient descent."""
  del params
  w = _tf1.get_variable("w", [], tf.float32, initializer=_tf1.zeros_initializer())
  prediction = w * features["x"]
  if mode == tf.estimator.ModeKeys.PREDICT:
    return tf.estimator.EstimatorSpec(mode=mode, predictions={"y": prediction})
  loss = tf.reduce_mean(tf.square(prediction - labels))
  if mode == tf.estimator.ModeKeys.EVAL:
    return tf.estimator.EstimatorSpec(mode=mode, loss=loss)
  train_op = _tf1.train.GradientDescentOptimizer(LEARNING_RATE).minimize(
      loss, global_step=_tf1.train.get_global_step())
  return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)


def input_fn(params=None):
  del params
  return tf.data.Dataset.from_tensors(({"x": X}, Y)).repeat()


def numpy_weight(steps):
  w = 0.0
  for _ in range(steps):
    w -= LEARNING_RATE * np.mean(2.0 * (w * X - Y) * X)
  return w


def _estimator_in(directory):
  """A one-worker job's (workers, output directory, Estimator) writing to `directory`."""
  environ = {}
  workers = workers_lib.start_workers(False, environ=environ)
  assert workers == workers_lib.Workers(hvd=None, rank=0, size=1, local_rank=0, local_size=1)
  assert environ == {"TF_OVERRIDE_GLOBAL_THREADPOOL": "1"}
  output_dir, saves, _ = workers_lib.worker_output_dir(workers, str(directory), False, False)
  assert output_dir == str(directory) and saves
  assert tf.io.gfile.isdir(output_dir)
  estimator = estimator_lib.build_estimator(_config(), workers, model_fn, output_dir, saves)
  assert estimator.config.tf_random_seed == job_flags.DEFAULT_SEED
  assert estimator.config.keep_checkpoint_max == 3
  return workers, output_dir, estimator


def _config():
  """The job's configuration: checkpoints every 2 steps, 3 kept, a deterministic run's seed."""
  return helpers.job_config(["--save_checkpoints_steps=2", "--keep_checkpoint_max=3",
                             "--deterministic_run", "--intra_op_threads=1",
                             "--inter_op_threads=1"])


def _hooks(workers, output_dir, **kwargs):
  """The training hooks of a one-worker job saving into `output_dir` (`kwargs`: its own hooks)."""
  return watched_training.training_hooks(_config(), workers.size, hooks_lib.UpdateSource(),
                                         output_dir, **kwargs).in_order()


@pytest.fixture
def single_worker_job(tmp_path):
  return _estimator_in(tmp_path / "out")


def test_train_evaluate_predict(single_worker_job, tmp_path, caplog):
  workers, output_dir, estimator = single_worker_job
  hooks = _hooks(workers, output_dir)
  estimator_lib.train(estimator, input_fn, 4, output_dir, hooks)
  assert estimator_lib.checkpoint_step(output_dir) == 4
  assert tf.io.gfile.exists(output_dir + "/model.ckpt-2.index")
  w = numpy_weight(4)
  assert tf.train.load_variable(output_dir, "w") == pytest.approx(w, rel=1e-6)

  # The checkpoints already hold the step: nothing is trained.
  with caplog.at_level("INFO"):
    estimator_lib.train(estimator, input_fn, 4, output_dir, hooks)
  assert "nothing to train" in caplog.text

  log_path = str(tmp_path / "log.json")
  logger = dllogger_setup.RunLogger(log_path, backend="builtin", stdout=False)
  result = estimator_lib.evaluate(estimator, input_fn, 3, logger, 4, output_dir)
  loss = np.mean((w * X - Y) ** 2)
  assert result["loss"] == pytest.approx(loss, rel=1e-5) and result["global_step"] == 4
  lines = open(output_dir + "/eval_results.txt").read().splitlines()
  assert [line.split(" = ")[0] for line in lines] == ["global_step", "loss"]
  assert float(lines[1].split(" = ")[1]) == pytest.approx(loss, rel=1e-5)

  predictions = list(estimator_lib.predict(estimator, lambda params: tf.data.Dataset.from_tensors(
      {"x": X}), logger, 4))
  assert [p["y"][0] for p in predictions] == pytest.approx(list(w * X[:, 0]), rel=1e-6)
  logger.close()
  # One timing summary each for the evaluation and the prediction.
  records = [dllogger_setup.parse_log_line(line) for line in open(log_path)]
  assert [(r["step"], r["data"]["eval_batches"]) for r in records] == [([], 3), ([], 1)]


def test_input_errors_are_explained(single_worker_job, tmp_path):
  _, output_dir, estimator = single_worker_job
  broken = tmp_path / "broken.tfrecord"
  broken.write_bytes(b"\x00" * 40)

  def broken_input_fn(params):
    del params
    records = tf.data.TFRecordDataset(str(broken))
    return records.map(lambda r: ({"x": tf.zeros([1, 1])}, tf.zeros([1, 1])))

  explain = lambda error: ValueError("named: " + type(error).__name__)  # noqa: E731
  with pytest.raises(ValueError, match="named: DataLossError"):
    estimator_lib.train(estimator, broken_input_fn, 2, output_dir, [], explain_input_error=explain)
  logger = dllogger_setup.RunLogger(None, backend="builtin", stdout=False)
  with pytest.raises(ValueError, match="named: DataLossError"):
    estimator_lib.evaluate(estimator, broken_input_fn, 1, logger, 1, output_dir,
                 explain_input_error=explain)


def test_run_reporting_errors_turns_usage_errors_into_exit_code_2(capsys):
  def failing(flag_values):
    errors.require(flag_values > 1, "--flag must be > 1, got %d", flag_values)
    return 0

  assert errors.run_reporting_errors("script.py", failing, 5) == 0
  assert errors.run_reporting_errors("script.py", failing, 0) == 2
  assert capsys.readouterr().err == "script.py: error: --flag must be > 1, got 0\n"


def test_verbose_adds_the_traceback_and_a_stopped_worker_prints_one_line(capsys):
  def failing():
    try:
      raise KeyError("inner")
    except KeyError as e:
      raise errors.UsageError("bad input record: f: record 3: x") from e

  assert errors.run_reporting_errors("script.py", failing, verbose=True) == 2
  err = capsys.readouterr().err
  assert err.startswith("Traceback") and "KeyError: 'inner'" in err
  assert err.endswith("\nscript.py: error: bad input record: f: record 3: x\n")

  def stopped():
    raise errors.StoppedByAnotherWorker("rank 0 stopped: another rank ended")

  assert errors.run_reporting_errors("script.py", stopped) == 1
  assert capsys.readouterr().err == "script.py: error: rank 0 stopped: another rank ended\n"


def test_horovod_shutdown_stops_training_quietly(tmp_path):
  # The error a rank's collective raises once another rank has ended (Horovod's own text).
  shutdown = tf.errors.UnknownError(
      None, None, "Horovod has been shut down. This was caused by an exception on one of the "
      "ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks "
      "finished execution.")

  class Estimator(object):
    def train(self, **unused_kwargs):
      raise shutdown

  with pytest.raises(errors.StoppedByAnotherWorker) as raised:
    estimator_lib.train(Estimator(), None, 2, str(tmp_path), [],
              explain_input_error=lambda e: AssertionError("not an input error"))
  assert raised.value.__cause__ is shutdown
  assert str(raised.value).endswith(", and Horovod shut down with it (a line of that rank, if it "
                                    "printed one, says why); no checkpoint was saved yet")


def test_the_line_of_a_rank_whose_peer_ended_names_it_and_the_checkpoint(tmp_path):
  here, there = "nodeA", "nodeB"
  processes = [hvd_utils.RankProcess(here, os.getpid()), hvd_utils.RankProcess(here, 4242),
               hvd_utils.RankProcess(there, 5151), hvd_utils.RankProcess(there, 5252)]
  gone = {4242}
  assert hvd_utils.lost_ranks(processes, here, process_gone=gone.__contains__) == [1]
  assert hvd_utils.describe_lost_ranks(processes, here, gone.__contains__) == (
      "rank 1 (pid 4242 on nodeA) ended")
  # No rank of this host ended: the others are named as those that may have.
  assert hvd_utils.describe_lost_ranks(processes, here, lambda pid: False) == (
      "ranks 2, 3 (on nodeB) may have ended")
  assert hvd_utils.describe_lost_ranks([], here) == "another rank ended"
  assert hvd_utils.own_rank(processes, here, os.getpid()) == 0
  assert hvd_utils.own_rank(processes, there, 5252) == 3
  # A rank whose own process is gone (this test's fake pid) is named; the checkpoint a rerun
  # resumes from is the directory's newest.
  ckpt.write_checkpoint(str(tmp_path / "model.ckpt-40"), {"global_step": np.int64(40)})
  tf.compat.v1.train.update_checkpoint_state(str(tmp_path), str(tmp_path / "model.ckpt-40"))
  error = estimator_lib.another_worker_ended(str(tmp_path), [processes[0], hvd_utils.RankProcess(
      here, 2 ** 22 + 17)], here)
  assert str(error) == ("rank 0 stopped: rank 1 (pid %d on nodeA) ended, and Horovod shut down "
                        "with it (a line of that rank, if it printed one, says why); nothing was "
                        "saved after checkpoint 40, which the same command resumes from"
                        % (2 ** 22 + 17))


def test_a_gloo_connection_lost_in_a_horovod_op_is_a_lost_rank():
  lost = tf.errors.UnknownError(None, None, "[gloo/transport/tcp/pair.cc:589] Read error "
                                "[127.0.0.1]:58261: Connection reset by peer\n\t [[{{node "
                                "HorovodAllreduce_gradients_x_0}}]]")
  assert hvd_utils.is_shutdown_error(lost)
  # A collective with a name of its own (hooks.StopOnSignalHook's) names no Horovod op: the source
  # path of Horovod's Gloo says where it came from (the words of a failed CI run).
  named = tf.errors.UnknownError(None, None, "[/tmp/pip-install-nf81qluq/horovod_7a0f6ae15f7d4b13a"
                                 "c7fa29189e91ff6/third_party/compatible17_gloo/gloo/transport/tcp/"
                                 "pair.cc:589] Read error [127.0.0.1]:3482: Connection reset by "
                                 "peer\n\t [[{{node stop_signal_combined}}]]")
  assert hvd_utils.is_shutdown_error(named)
  # The same words from something that is not a Horovod op: not a lost rank.
  assert not hvd_utils.is_shutdown_error(OSError("Connection reset by peer"))


class _Recorder(tf.estimator.SessionRunHook):
  """Notes ("logged", global step after the update) after every run, as a log hook writes its
  line: the step read once at the session's start, plus one a run (each run is one update here).
  The global step is not fetched with the run: that read races with the update's increment
  (nothing orders them), so it gives the step before or after the update by chance."""

  def __init__(self, events):
    self.events = events
    self.step = None

  def after_create_session(self, session, coord):
    self.step = int(session.run(_tf1.train.get_global_step()))

  def after_run(self, run_context, run_values):
    self.step += 1
    self.events.append(("logged", self.step))


class _SaveRecorder(tf.estimator.SessionRunHook):
  """A checkpoint health hook's stand-in: its listener notes ("saved", step) at every save."""

  def __init__(self, events):
    recorder = self

    class Listener(_tf1.train.CheckpointSaverListener):
      def after_save(self, session, global_step_value):
        recorder.events.append(("saved", int(global_step_value)))

    self.events = events
    self.listener = Listener()


def test_an_update_is_logged_before_its_checkpoint_is_saved(single_worker_job):
  # A run killed between the two then resumes from the checkpoint before, and its log has every
  # update's line (tests/test_run_pretraining_deterministic.py kills a real run).
  workers, output_dir, estimator = single_worker_job
  events = []
  hooks = _hooks(workers, output_dir, log=_Recorder(events), health=_SaveRecorder(events))
  estimator_lib.train(estimator, input_fn, 4, output_dir, hooks)
  saved = [event for event in events if event[0] == "saved"]
  assert [step for _, step in saved] == [2, 4]
  for event in saved:
    assert events.index(("logged", event[1])) < events.index(event), events


def _training_runs_fetches(monkeypatch, estimator, output_dir, hooks, steps):
  """Trains to `steps`; returns, per training run (one whose targets hold the train op), the set
  of tensor names the session fetched, as the session saw them (after every hook added its own)."""
  runs = []
  original = session_lib.BaseSession._do_run

  def recording(self, handle, target_list, fetch_list, *args):
    targets = {op.name for op in target_list}
    if "GradientDescent" in targets:
      runs.append(frozenset(t.name for t in fetch_list) | targets)
    return original(self, handle, target_list, fetch_list, *args)

  monkeypatch.setattr(session_lib.BaseSession, "_do_run", recording)
  estimator_lib.train(estimator, input_fn, steps, output_dir, hooks)
  monkeypatch.undo()
  return runs


def test_every_training_run_fetches_the_same_tensors(single_worker_job, tmp_path, monkeypatch):
  # The session then builds one executor for training instead of one per combination of what
  # the Estimator's summary saver (every 2 steps here) and loss logger fetch.
  workers, output_dir, estimator = single_worker_job
  hooks = _hooks(workers, output_dir)
  assert sum(isinstance(h, hooks_lib.SteadyFetchesHook) for h in hooks) == 1
  runs = _training_runs_fetches(monkeypatch, estimator, output_dir, hooks, 6)
  assert len(runs) == 6 and len(set(runs)) == 1, runs
  # The summary saver still wrote its loss at the steps it writes it at (the runs of global steps
  # 0, 2 and 4, recorded after them) and the weights are plain gradient descent's.
  events = helpers.read_scalars(output_dir)
  assert [step for step, _ in events["loss"]] == [1, 3, 5]
  assert tf.train.load_variable(output_dir, "w") == pytest.approx(numpy_weight(6), rel=1e-6)

  # Without the hook the same job fetches three different sets: what it is there for.
  _, other_dir, other = _estimator_in(tmp_path / "without")
  runs = _training_runs_fetches(
      monkeypatch, other, other_dir,
      [h for h in _hooks(workers, other_dir) if not isinstance(h, hooks_lib.SteadyFetchesHook)],
      6)
  assert len(runs) == 6 and len(set(runs)) == 3, runs


def test_init_checkpoint_that_cannot_be_read(tmp_path):
  missing = str(tmp_path / "none")
  message = "--init_checkpoint=%s cannot be read" % missing
  with pytest.raises(errors.UsageError, match=re.escape(message)):
    estimator_lib.check_init_checkpoint(missing)


def test_eval_results_read_back_what_was_written(tmp_path):
  path = str(tmp_path / "eval_results.txt")
  estimator_lib.write_eval_results(path, {"masked_lm_accuracy": 0.25, "global_step": 600, "loss": 6.5})
  with open(path) as f:
    assert f.read() == "global_step = 600\nloss = 6.5\nmasked_lm_accuracy = 0.25\n"
  assert estimator_lib.read_eval_results(path) == {"global_step": 600.0, "loss": 6.5,
                                         "masked_lm_accuracy": 0.25}
