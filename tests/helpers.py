"""Small helpers shared by the tests: random batches, weight randomisation, sessions, processes
(the Hugging Face hand-off's: helpers_hf.py)."""

import contextlib
import io
import json
import logging as std_logging
import os
import shutil
import signal
import subprocess
import sys

from absl import flags
from absl.testing import flagsaver
import numpy as np
import tensorflow as tf

import modeling
from utils.checkpoints import contents

_tf1 = tf.compat.v1
# The repository root: the working directory of the tests' subprocesses.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The tests' BERT (a bert_config.json's keys): two layers of width 32, small enough that a
# training process is mostly start-up. The scripts' end-to-end runs train it; modules override a
# few sizes where they need another shape.
TINY_CONFIG = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, hidden_act="gelu", hidden_dropout_prob=0.1,
                   attention_probs_dropout_prob=0.1, max_position_embeddings=64,
                   type_vocab_size=2, initializer_range=0.02)


def tiny_config(**overrides):
  """`TINY_CONFIG` as a modeling.BertConfig for the in-process graph tests, with four heads of
  width 8 and an intermediate size that is no multiple of the width (so that a mixed-up axis
  fails a shape check), then `overrides`."""
  values = dict(TINY_CONFIG, vocab_size=99, num_attention_heads=4, intermediate_size=37)
  values.update(overrides)
  return modeling.BertConfig(**values)


def write_bert_config(path, **overrides):
  """Writes `TINY_CONFIG` with `overrides` as a bert_config.json at `path`; returns str(path)."""
  with open(path, "w") as writer:
    json.dump(dict(TINY_CONFIG, **overrides), writer)
  return str(path)


def run_python(args, check=True, timeout=300, python=None, launcher=(), env=None):
  """Runs `[*launcher, python, *args]` from the repository root and waits for it (the tests'
  one way to run a script or a module end to end).

  Args:
    args: the program and its arguments, e.g. [SCRIPT, "--do_train"] or ["-m", "utils.x"].
    check: raise AssertionError (exit status, command, the output's tails) on a non-zero exit.
    timeout: seconds before subprocess.TimeoutExpired.
    python: the interpreter (default: this one).
    launcher: e.g. ["horovodrun", "-np", "2", ...], or () for none.
    env: the environment (default: this process's).

  Returns:
    subprocess.CompletedProcess with text stdout and stderr.
  """
  command = list(launcher) + [python or sys.executable] + [str(arg) for arg in args]
  proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                        cwd=REPO_ROOT, env=env)
  if check and proc.returncode != 0:
    raise AssertionError("exit %d: %s\n%s\n%s" % (proc.returncode, " ".join(command[:4]),
                                                   proc.stdout[-3000:], proc.stderr[-6000:]))
  return proc


def random_batch(rng, batch_size, seq_length, vocab_size, num_predictions, type_vocab_size=2,
                 max_length=None):
  """A batch of pretraining features as numpy arrays (docs/DESIGN.md section 3 dtypes after
  parsing).

  Every sequence has some padding at the end; masked positions are distinct, ascending and inside
  the real tokens; the last prediction slot of each sequence is padding (weight 0). Lengths are
  drawn from [max(num_predictions + 1, seq_length // 2), seq_length], or with `max_length` from
  [num_predictions + 1, max_length] (short sequences, several of which fit in one packed row).
  """
  input_ids = rng.randint(1, vocab_size, size=(batch_size, seq_length)).astype(np.int32)
  input_mask = np.ones((batch_size, seq_length), np.int32)
  segment_ids = np.zeros((batch_size, seq_length), np.int32)
  positions = np.zeros((batch_size, num_predictions), np.int32)
  ids = np.zeros((batch_size, num_predictions), np.int32)
  weights = np.zeros((batch_size, num_predictions), np.float32)
  for b in range(batch_size):
    if max_length is None:
      length = rng.randint(max(num_predictions + 1, seq_length // 2), seq_length + 1)
    else:
      length = rng.randint(num_predictions + 1, max_length + 1)
    input_ids[b, length:] = 0
    input_mask[b, length:] = 0
    segment_ids[b, length // 2:length] = rng.randint(0, type_vocab_size)
    real = num_predictions - 1
    positions[b, :real] = np.sort(rng.choice(np.arange(1, length), real, replace=False))
    ids[b, :real] = rng.randint(1, vocab_size, size=real)
    weights[b, :real] = 1.0
  return {
      "input_ids": input_ids,
      "input_mask": input_mask,
      "segment_ids": segment_ids,
      "masked_lm_positions": positions,
      "masked_lm_ids": ids,
      "masked_lm_weights": weights,
      "next_sentence_labels": rng.randint(0, 2, size=(batch_size, 1)).astype(np.int32),
  }


def constant_features(batch):
  """numpy feature dict -> dict of tf constants."""
  return {name: tf.constant(value) for name, value in batch.items()}


def randomize_variables(session, variables, rng, scale=0.3):
  """Assigns random values to `variables` so biases, betas and gammas all matter.

  gammas get 1 + noise, everything else `scale` * N(0, 1).

  Returns:
    dict checkpoint-style name -> the numpy value assigned.
  """
  values = {}
  for var in variables:
    name = var.op.name
    shape = var.shape.as_list()
    value = rng.normal(size=shape) * scale
    if name.endswith("gamma"):
      value = 1.0 + value
    values[name] = value.astype(var.dtype.base_dtype.as_numpy_dtype)
    var.load(values[name], session)
  return values


def variable(name):
  """The global variable of the default graph whose op name is `name`."""
  matches = [v for v in _tf1.global_variables() if v.op.name == name]
  if len(matches) != 1:
    raise KeyError("expected one variable named %s, found %d" % (name, len(matches)))
  return matches[0]


def softmax_regression_loss(features, labels, num_classes=3, compute_type=tf.float32):
  """A small model with every kind of gradient the optimizer must handle.

  Softmax regression over [embedding(ids) (4 wide), x (5 wide)]: variables `emb/table` [7, 4]
  (gathered: IndexedSlices gradient), `dense/kernel` [9, 3] and `dense/bias` [3] (excluded from
  weight decay). Deterministic initial values. With `compute_type` tf.bfloat16 the matmul and the
  bias add run in bf16 on casts of the fp32 variables (as the bf16 encoder does), the loss in fp32.

  Returns:
    the mean cross-entropy over the batch (float32 scalar).
  """
  table = _tf1.get_variable("emb/table", initializer=tf.constant(
      np.random.RandomState(0).normal(size=(7, 4)).astype(np.float32)))
  kernel = _tf1.get_variable("dense/kernel", initializer=tf.constant(
      np.random.RandomState(1).normal(size=(4 + 5, num_classes)).astype(np.float32)))
  bias = _tf1.get_variable("dense/bias", initializer=tf.zeros([num_classes]))
  x = tf.concat([tf.gather(table, features["ids"]), features["x"]], axis=1)
  logits = tf.matmul(tf.cast(x, compute_type), tf.cast(kernel, compute_type))
  logits = tf.cast(logits + tf.cast(bias, compute_type), tf.float32)
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                        logits=logits))


def softmax_regression_data(rng, n):
  """n random rows for `softmax_regression_loss`: ids, x (large enough to need clipping), y."""
  return {"ids": rng.randint(0, 7, size=n).astype(np.int32),
          "x": (rng.normal(size=(n, 5)) * 4).astype(np.float32),
          "y": rng.randint(0, 3, size=n).astype(np.int32)}


def example_from_arrays(values):
  """A tf.train.Example from one record's numpy arrays (floats -> float_list, ints -> int64_list)."""
  feature = {}
  for name, value in values.items():
    value = np.asarray(value).reshape(-1)
    if value.dtype.kind == "f":
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=value.tolist()))
    else:
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=value.tolist()))
  return tf.train.Example(features=tf.train.Features(feature=feature))


def write_batch_records(path, batch):
  """Writes every row of a `random_batch`-style dict as one TFRecord example to `path`."""
  num_rows = len(batch["input_ids"])
  with tf.io.TFRecordWriter(str(path)) as writer:
    for row in range(num_rows):
      values = {name: value[row] for name, value in batch.items()}
      writer.write(example_from_arrays(values).SerializeToString())


def outputs_in_two_precisions(build, config, batch, compute_type, checkpoint):
  """Builds the pretraining graph in fp32 and in `compute_type` on one set of random weights
  (scale 0.1, saved to `checkpoint` by the fp32 graph, restored by the other).

  Args:
    build: build(config, batch, compute_type) -> the dict of build_pretraining_model.
    compute_type: tf.float16 or tf.bfloat16.

  Returns:
    (weights: {variable name: value}, {tf.float32: outputs, compute_type: outputs}), each
    outputs a dict of fp32 arrays: sequence [batch, seq, hidden], pooled [batch, hidden],
    mlm_loss and nsp_loss (scalars).
  """
  results = {}
  for dtype in (tf.float32, compute_type):
    with tf.Graph().as_default():
      built = build(config, batch, dtype)
      with _tf1.Session() as sess:
        sess.run(_tf1.global_variables_initializer())
        if dtype == tf.float32:
          randomize_variables(sess, _tf1.trainable_variables(), np.random.RandomState(2),
                              scale=0.1)
          _tf1.train.Saver().save(sess, checkpoint)
          weights = {v.op.name: sess.run(v) for v in _tf1.global_variables()}
        else:
          _tf1.train.Saver().restore(sess, checkpoint)
        model = built["model"]
        results[dtype] = sess.run({
            "sequence": tf.cast(model.get_sequence_output(), tf.float32),
            "pooled": tf.cast(model.get_pooled_output(), tf.float32),
            "mlm_loss": built["mlm_loss"], "nsp_loss": built["nsp_loss"]})
  return weights, results


class ScriptedClock(object):
  """A clock that returns the given times, one per call (an IndexError when called once too
  often)."""

  def __init__(self, times):
    self._times = list(times)
    self.calls = 0

  def __call__(self):
    value = self._times[self.calls]
    self.calls += 1
    return value


def read_eval_results(path):
  """eval_results.txt (`key = value` lines) -> dict of floats."""
  result = {}
  with open(path) as f:
    for line in f:
      key, value = line.strip().split(" = ")
      result[key] = float(value)
  return result


def read_scalars(summary_dir):
  """{tag: [(step, value), ...]} of the one events file in `summary_dir`, in file order.

  Raises ValueError unless the directory holds exactly one events file."""
  (events_file,) = [os.path.join(summary_dir, n) for n in os.listdir(summary_dir)
                    if n.startswith("events.out.tfevents.")]
  scalars = {}
  for event in _tf1.train.summary_iterator(events_file):
    for value in event.summary.value:
      scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
  return scalars


# TensorBoard tag of the training scalars -> key of the log line with the same value.
SCALAR_LOG_KEYS = {"learning_rate": "learning_rate", "total_loss": "total_loss",
                   "mlm_loss": "mlm_loss", "nsp_loss": "nsp_loss",
                   "throughput_train": "throughput_train", "global_norm": "global_norm",
                   "loss_scale": "loss_scaler", "skipped_updates": "skipped_updates"}


def write_checkpoints(directory, steps, seed=0):
  """model.ckpt-<step> for each step (a weight and global_step), listed in the index."""
  rng = np.random.RandomState(seed)
  prefixes = []
  for step in steps:
    prefix = os.path.join(str(directory), "model.ckpt-%d" % step)
    contents.write_checkpoint(prefix, {"bert/w": rng.randn(64, 32).astype(np.float32),
                                       "global_step": np.int64(step)})
    prefixes.append(prefix)
  _tf1.train.update_checkpoint_state(str(directory), prefixes[-1],
                                     all_model_checkpoint_paths=prefixes)
  return prefixes


@contextlib.contextmanager
def parsed_flags(program, args, defaults=None):
  """Context: absl's flags parsed from `[program] + args`, after `defaults` (flag name -> value)
  are set; afterwards the flags and absl's logger level (which follows --verbosity: parsing or
  unparsing sets it, hiding later tests' INFO records from caplog) are put back.

  Yields:
    the argv absl leaves (the program and any positional arguments).
  """
  absl_logger = std_logging.getLogger("absl")
  level = absl_logger.level
  with flagsaver.flagsaver():
    try:
      for name, value in (defaults or {}).items():
        flags.FLAGS.set_default(name, value)
      yield flags.FLAGS([program] + list(args))
    finally:
      flags.FLAGS.unparse_flags()
      absl_logger.setLevel(level)


def job_config(args=(), defaults=None):
  """The `JobConfig` of the shared flags parsed from the command line `args` (e.g. ["--bf16"]),
  after a script's `defaults` (flag name -> value)."""
  # pylint: disable=import-outside-toplevel
  from utils.training import flags as job_flags  # noqa: F401  (defines the shared flags)
  from utils.training import job_config as job_config_lib
  with parsed_flags("prog", args, defaults):
    return job_config_lib.JobConfig.from_flags(flags.FLAGS)


def start_lines(output, program):
  """The lines of a script's output that hold its start line (`start_line.start_line`: after the
  log prefix, "<program>: precision ...")."""
  return [line for line in output.splitlines() if "] %s: precision " % program in line]


def expected_start_line(script, args, num_train_steps, num_warmup_steps, num_workers=1):
  """The start line an Estimator script prints on this machine (its device and CPU).

  Args:
    script: the imported script module (its PROGRAM and DEFAULTS; its flags defined).
    args: the flags it ran with.
    num_train_steps, num_warmup_steps: the updates it computed.
    num_workers: the job's workers.

  Returns:
    str, `start_line.start_line` of the command line.
  """
  from utils.runlog import start_line  # pylint: disable=import-outside-toplevel
  from utils.training import job as job_lib  # pylint: disable=import-outside-toplevel
  from utils.training import precision as precision_lib  # pylint: disable=import-outside-toplevel
  config = job_config(args, script.DEFAULTS)
  sizes = job_lib.start_line_sizes(config, num_workers,
                                   job_lib.Plan(num_train_steps, num_warmup_steps))
  device = start_line.compute_device(config.use_tpu, config.tpu_name, 0)
  # The ratio a bf16 or auto run measured is in the test run's probe cache (tests/conftest.py).
  config, choice = precision_lib.decide_precision(
      config, modeling.BertConfig.from_json_file(config.bert_config_file), device, 0)
  return start_line.start_line(script.PROGRAM, choice.precision, device, sizes,
                               note=choice.reason, auto=config.auto_precision)


def run_script_in_process(script, args):
  """Runs an Estimator script's `main` on the command line `args` in this process: what the
  script does until it fails, for usage errors, without starting TensorFlow again (the process
  itself, `cli.run_main`'s exit status and stderr filter, is what the scripts' end-to-end tests
  run). The absl flags are put back afterwards.

  Args:
    script: the imported script module (`run_pretraining`, `run_squad`, `run_classifier`): its
      PROGRAM, DEFAULTS and main.
    args: the flags, e.g. ["--do_train=True", ...].

  Returns:
    (exit status, what the run wrote to sys.stderr).
  """
  stderr = io.StringIO()
  with contextlib.redirect_stderr(stderr):
    with parsed_flags(script.PROGRAM, args, script.DEFAULTS) as remaining:
      status = script.main(remaining)
  return status, stderr.getvalue()


def run_side_by_side(commands, timeout=300):
  """Runs the commands (argument lists) at once from the repository root: end-to-end runs are
  mostly start-up, so two cores take two at the same time.

  Returns:
    [(returncode, stdout, stderr)] in the order of `commands`. What is still running when one
    times out is killed.
  """
  procs = [subprocess.Popen(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO_ROOT) for args in commands]
  results = []
  try:
    for proc in procs:
      out, err = proc.communicate(timeout=timeout)
      results.append((proc.returncode, out, err))
    return results
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()


def kill_session(proc, timeout=60):
  """SIGKILLs the session of `proc` (a Popen started with start_new_session=True: the process and
  what it started) if `proc` still runs, and reaps it; test clean-up."""
  if proc.poll() is None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=timeout)


def fresh_clone(destination):
  """`git clone` of this repository into `destination`, at HEAD, with the working tree's changes to
  tracked files copied in: what a user gets from a clone, plus the change under test."""
  subprocess.run(["git", "clone", "--quiet", REPO_ROOT, destination], check=True, timeout=120)
  head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, check=True,
                        capture_output=True, text=True).stdout.strip()
  subprocess.run(["git", "checkout", "--quiet", head], cwd=destination, check=True, timeout=60)
  changed = subprocess.run(["git", "diff", "--name-only", "HEAD"], cwd=REPO_ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
  for path in changed:
    if os.path.isfile(os.path.join(REPO_ROOT, path)):
      shutil.copyfile(os.path.join(REPO_ROOT, path), os.path.join(destination, path))


def run_as_user(script, cwd, timeout, env=None):
  """Runs a bash script as a user would type it: its own session, stdout and stderr together.

  Args:
    script: bash source.
    cwd: the directory it runs in.
    timeout: seconds; past them the script and everything it started are killed.
    env: the environment (default: this process's, less the suite's quiet TF_CPP_MIN_LOG_LEVEL).

  Returns:
    (returncode, output); returncode None when the script was killed at the timeout.
  """
  if env is None:
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True)
  try:
    output, _ = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)
    output, _ = proc.communicate()
    return None, output
  return proc.returncode, output


def launch_horovod_workers(worker, inputs, tmp_path, num_workers=2):
  """Runs the script `worker` on `num_workers` processes with horovodrun --gloo.

  The worker is called as `worker INPUTS_JSON OUT_DIR` and writes OUT_DIR/rank_<r>.json.
  Args:
    worker: path of a script under tests/workers.
    inputs: a JSON-serialisable object, written to INPUTS_JSON.
    tmp_path: a fresh directory (a pathlib.Path) for the inputs and outputs.
  Returns:
    the per-rank JSON results, a list of `num_workers` objects (rank and size checked).
  """
  inputs_path = tmp_path / "inputs.json"
  inputs_path.write_text(json.dumps(inputs))
  out_dir = tmp_path / "out"
  out_dir.mkdir()
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("TF_DISABLE_SCOPED_ALLOCATOR", None)
  env.pop("FORCE_WEIGHT_SYNC", None)
  horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
  proc = subprocess.run(
      [horovodrun, "-np", str(num_workers), "-H", "localhost:%d" % num_workers, "--gloo",
       sys.executable, worker, str(inputs_path), str(out_dir)],
      capture_output=True, text=True, timeout=180, cwd=REPO_ROOT, env=env)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  results = []
  for rank in range(num_workers):
    with open(out_dir / ("rank_%d.json" % rank)) as f:
      results.append(json.load(f))
    assert results[rank]["rank"] == rank and results[rank]["size"] == num_workers
  return results
