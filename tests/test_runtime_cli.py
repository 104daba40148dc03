"""utils/runtime/cli.py: exit code 2 for usage errors, quiet logs by default, --verbose shows
everything.

The training runs here are real `run_pretraining.py` processes started without the test suite's
TF_CPP_MIN_LOG_LEVEL, so they print what a user's terminal shows.
"""

import gc
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests import helpers
from utils.core import errors
from utils.runtime import cli

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, PRED = 32, 5
CONFIG = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
              hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
              initializer_range=0.02)
# A warning or error line of TensorFlow or absl: Python logging in absl's format (W1123 12:00:00...)
# or TensorFlow's own (WARNING:tensorflow:...), native logging (2024-01-01 12:00:00.1: W ...), and
# absl's C++ announcement.
WARNING_LINE = re.compile(r"^([WEF]\d{4} |(WARNING|ERROR):tensorflow|"
                          r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [WEF] |WARNING: All log messages)")
# TensorFlow's native INFO lines (oneDNN, CPU features, XLA service), hidden unless --verbose.
NATIVE_INFO_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: I ")
# The README's one-process example prints fewer lines than this at 20 updates.
MAX_QUIET_LINES = 40


def user_environment():
  """The environment a user's shell has: without the test suite's TF_CPP_MIN_LOG_LEVEL."""
  env = dict(os.environ)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  return env


def run_script(args, timeout=120):
  return subprocess.run([sys.executable] + list(args), cwd=REPO_ROOT, capture_output=True,
                        text=True, timeout=timeout, env=user_environment())


# ---------------------------------------------------------------------------------------------
# Exit codes

@pytest.mark.e2e
@pytest.mark.parametrize("args, named", [
    (["run_pretraining.py", "--optimizer_type=sgd", "--do_train"], "--optimizer_type=sgd"),
    (["run_pretraining.py", "--no_such_flag=1"], "no_such_flag"),
    (["run_pretraining.py", "--train_batch_size=eight"], "--train_batch_size=eight"),
    (["run_pretraining.py", "--do_train", "stray_argument"], "stray_argument"),
    (["create_pretraining_data.py", "--input_file=a.txt"], "--output_file"),
    (["create_pretraining_data.py", "--input_file=a.txt", "--output_file=b",
      "--vocab_file=/no/vocab.txt"], "/no/vocab.txt"),
    (["-m", "utils.data.vocabulary", "--input_file=x", "--output_file=y", "--vocab_size=big"],
     "--vocab_size=big"),
    (["-m", "utils.data.vocabulary", "--input_file=/no/such/*.txt", "--output_file=y"],
     "/no/such/*.txt"),
    (["scripts/build_demo_data.py", "--no_such_flag"], "no_such_flag"),
    (["scripts/build_demo_task.py", "--output_dir=x"], "output_dir"),
])
def test_usage_errors_exit_2_naming_the_flag(args, named):
  proc = run_script(args)
  assert proc.returncode == errors.USAGE_EXIT_CODE, proc.stderr
  first = proc.stderr.splitlines()[0]
  # A script is named by its file, a command run with -m as it is typed.
  program = "python -m " + args[1] if args[0] == "-m" else os.path.basename(args[0])
  assert first.startswith(program + ": error: "), proc.stderr
  assert named in first, proc.stderr
  assert "Traceback" not in proc.stderr


def test_exit_handler_is_registered_once_and_collects_before_it_freezes(monkeypatch):
  registered = []
  monkeypatch.setattr(cli.atexit, "register", registered.append)
  monkeypatch.setattr(cli, "_FREEZE_REGISTERED", False)
  cli.freeze_objects_at_exit()
  cli.freeze_objects_at_exit()
  assert registered == [cli._collect_and_freeze]

  finalized = []

  class Node:

    def __del__(self):
      finalized.append(True)

  was_enabled = gc.isenabled()
  gc.disable()  # so that only the handler's own collection can find the cycle
  try:
    node = Node()
    node.itself = node
    del node
    assert not finalized
    cli._collect_and_freeze()
    assert finalized == [True]  # garbage already at exit is finalized, as before
    assert gc.get_freeze_count() > 0  # the rest is left out of the interpreter's collections
  finally:
    gc.unfreeze()
    if was_enabled:
      gc.enable()


def test_run_main_registers_the_exit_handler(monkeypatch):
  calls = []
  monkeypatch.setattr(cli, "freeze_objects_at_exit", lambda: calls.append("registered"))
  monkeypatch.setattr(cli.app, "run", lambda main, argv=None, flags_parser=None: calls.append(
      "ran"))
  cli.run_main(lambda argv: 0, argv=["prog"])
  assert calls == ["registered", "ran"]


def test_verbose_is_read_before_the_flags_are_parsed():
  assert not cli.verbose_requested(["prog"])
  assert cli.verbose_requested(["prog", "--verbose"])
  assert cli.verbose_requested(["prog", "-verbose=true"])
  assert not cli.verbose_requested(["prog", "--verbose", "--noverbose"])
  assert not cli.verbose_requested(["prog", "--verbose=false"])
  assert not cli.verbose_requested(["prog", "--", "--verbose"])
  assert not cli.verbose_requested(["prog", "--verbose_logging"])


def test_native_log_level_is_quiet_unless_verbose_or_set():
  env = {}
  assert cli.quiet_native_log_level(["prog"], env) == cli.QUIET_NATIVE_LOG_LEVEL
  assert cli.quiet_native_log_level(["prog", "--verbose"], {}) is None
  assert cli.quiet_native_log_level(["prog"], {"TF_CPP_MIN_LOG_LEVEL": "0"}) == "0"


@pytest.mark.e2e
def test_native_filter_drops_benign_and_reported_lines_and_keeps_the_rest_even_after_a_crash():
  program = textwrap.dedent("""
      import os, sys
      sys.path.insert(0, %r)
      from utils.runtime import cli
      cli.filter_native_stderr()
      os.write(2, b"2024-01-01 00:00:00.1: E x.h:1] SetPriority unimplemented for this stream.\\n")
      os.write(2, b"2024-01-01 00:00:00.2: E y.cc:2] a real error\\n")
      # A failed op's status, which is raised into Python as well (a full disk's save).
      os.write(2, b"2024-01-01 00:00:00.3: W op_kernel.cc:1839] OP_REQUIRES failed at "
                  b"save_restore_v2_ops.cc:162 : RESOURCE_EXHAUSTED: out.ckpt_temp; No space "
                  b"left on device\\n")
      sys.stderr.write("python line\\n")
      sys.stderr.flush()
      os.write(2, b"last words\\n")
      os._exit(7)  # no atexit handlers: as a crash
  """ % REPO_ROOT)
  proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                        timeout=60)
  assert proc.returncode == 7
  assert proc.stderr.splitlines() == ["2024-01-01 00:00:00.2: E y.cc:2] a real error",
                                      "python line", "last words"]


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM, signal.SIGINT])
def test_native_filter_outlives_a_stop_signal_sent_to_the_whole_process_group(signum):
  # Ctrl-C, `scancel --signal` and Slurm's `--signal` reach every process of the group or job
  # step, the filter included. Seen under Slurm with SIGUSR1: the filter died, the job's last lines
  # were lost and it exited 1 instead of 75.
  program = textwrap.dedent("""
      import os, signal, sys, time
      sys.path.insert(0, %r)
      from utils.runtime import cli
      signal.signal(%d, lambda *_: None)
      cli.filter_native_stderr()
      os.write(2, b"before\\n")
      os.killpg(0, %d)
      time.sleep(0.5)
      os.write(2, b"after the signal\\n")
      sys.exit(75)
  """ % (REPO_ROOT, signum, signum))
  proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                        timeout=60, start_new_session=True)
  assert proc.returncode == 75, proc.stderr
  assert proc.stderr.splitlines() == ["before", "after the signal"]


# ---------------------------------------------------------------------------------------------
# What a short run prints

@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("cli_data")
  config_path = root / "bert_config.json"
  config_path.write_text(json.dumps(CONFIG))
  rng = np.random.RandomState(0)
  helpers.write_batch_records(root / "train.tfrecord",
                              helpers.random_batch(rng, 32, SEQ, CONFIG["vocab_size"], PRED))
  return {"config": str(config_path), "train": str(root / "train.tfrecord")}


def training_args(data, out, *extra):
  """The README's one-process example at a tiny size: 20 updates of 2 micro-batches, evaluation."""
  return ["run_pretraining.py", "--bert_config_file=" + data["config"],
          "--input_file=" + data["train"], "--output_dir=" + str(out), "--do_train", "--do_eval",
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PRED,
          "--train_batch_size=4", "--num_accumulation_steps=2", "--learning_rate=1e-4",
          "--optimizer_type=lamb", "--num_train_steps=20", "--num_warmup_steps=2",
          "--save_checkpoints_steps=10", "--eval_batch_size=4", "--max_eval_steps=3"] + list(extra)


@pytest.mark.e2e
def test_a_short_run_prints_its_own_lines_only(data, tmp_path):
  proc = run_script(training_args(data, tmp_path / "out"), timeout=300)
  assert proc.returncode == 0, proc.stderr[-4000:]
  lines = (proc.stdout + proc.stderr).splitlines()
  assert len(lines) < MAX_QUIET_LINES, "\n".join(lines)
  noise = [line for line in lines if WARNING_LINE.match(line) or NATIVE_INFO_LINE.match(line)]
  assert not noise, "\n".join(noise)
  assert not [line for line in lines if "global step (tf.train.get_global_step)" in line]
  # What the user needs: the configuration, one line per logged update, the summaries, the outputs.
  assert any("run_pretraining.py: precision fp32 (default); device " in line
             and "; 1 worker; global batch 8 = 4 x 2 accumulation x 1 worker; " in line
             for line in lines)
  logged_steps = [int(m.group(1)) for m in
                  (re.match(r"DLL \S+ \S+ - (\d+) throughput_train", line) for line in lines) if m]
  assert logged_steps == [1, 10, 20]
  assert any("Throughput Average" in line for line in lines)
  assert any("throughput_val" in line for line in lines)
  assert any(re.search(r"\]   masked_lm_accuracy = [0-9.]+$", line) for line in lines)
  assert any("outputs: checkpoints in %s" % (tmp_path / "out") in line for line in lines)


@pytest.mark.e2e
def test_verbose_shows_tensorflow_lines_once_and_no_global_step_warning(data, tmp_path):
  proc = run_script(training_args(data, tmp_path / "out", "--verbose"), timeout=300)
  assert proc.returncode == 0, proc.stderr[-4000:]
  lines = proc.stderr.splitlines()
  deprecations = [line for line in lines if "is deprecated and will be removed" in line]
  assert deprecations, "--verbose shows TensorFlow's deprecation notices"
  # Each printed once (no second copy through a second handler), by absl's handler.
  messages = [line.split("] ", 1)[1] for line in deprecations]
  assert len(messages) == len(set(messages)), "\n".join(deprecations)
  assert not [line for line in lines if line.startswith("WARNING:tensorflow")]
  assert any("Calling model_fn" in line for line in lines)
  # Accumulation leaves the global step unchanged on every other run, by design: no warning.
  assert not [line for line in lines if "global step (tf.train.get_global_step)" in line]
