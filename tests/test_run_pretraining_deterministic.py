"""--deterministic_run end to end: bit-identical per-step losses run after run, dropout on, and
exact resume after a kill.

The matrix: {fp32, --manual_fp16, --bf16} x {one process, 2 workers}, each with accumulation and
UPDATES updates, the two runs' losses compared with the golden-loss tool (utils/regression.py) at
tolerance 0; the 2-worker command runs once under horovodrun --gloo and once under mpirun. The fp16 one-process command doubles as the uninterrupted run
of the kill-and-resume test: its third copy is killed and resumed. Runs of a test start together,
their output goes to files (a full pipe would stall a run).
"""

import json
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf

import pack_pretraining_data
from tests import helpers
from tests import test_data_input_pipeline_masks as mask_tests
from tests import test_run_pretraining as job
from tests import test_run_pretraining_launchers as launchers
from utils import regression
from utils.runlog import dllogger_setup
from utils.runlog import golden

pytestmark = pytest.mark.e2e

UPDATES = 50
ACCUMULATION = 2
# The smallest model that still has dropout at every site of its layer: one encoder layer, short
# sequences, few distinct variable shapes (each shape compiles its own optimizer update). A
# process's cost is almost all start-up, and most of that grows with the variables.
SEQ, PRED = 16, 3
CONFIG = dict(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=32, max_position_embeddings=SEQ, type_vocab_size=2)
# A start scale that overflows fp16: the first updates are skipped (the global step stays) while
# the scale comes down, so micro-steps and updates part ways.
FP16 = dict(manual_fp16=True, init_loss_scale=2**32)
BF16 = dict(bf16=True)
PRECISIONS = {"fp32": {}, "fp16": FP16, "bf16": BF16}
# The kill-and-resume test kills its run once this update is logged.
KILL_AFTER = 12


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("deterministic")
  configs = {}
  for name, prob in (("dropout", 0.1), ("no_dropout", 0.0)):
    path = root / ("%s.json" % name)
    path.write_text(json.dumps(dict(CONFIG, hidden_act="gelu", hidden_dropout_prob=prob,
                                    attention_probs_dropout_prob=prob, initializer_range=0.02)))
    configs[name] = str(path)
  train_dir = root / "train"
  train_dir.mkdir()
  rng = np.random.RandomState(5)
  # Two files (one per Horovod worker), 24 distinct records each.
  for index in range(2):
    helpers.write_batch_records(train_dir / ("part-%d.tfrecord" % index),
                                helpers.random_batch(rng, 24, SEQ, CONFIG["vocab_size"], PRED))
  # Short sequences packed two or three to a row (pack_pretraining_data.py), two files.
  short_dir, packed_dir = root / "short", root / "packed"
  short_dir.mkdir()
  for index in range(2):
    helpers.write_batch_records(short_dir / ("part-%d.tfrecord" % index),
                                helpers.random_batch(rng, 24, SEQ, CONFIG["vocab_size"], PRED,
                                                     max_length=7))
  pack_pretraining_data.pack_files(
      sorted(str(p) for p in short_dir.glob("*.tfrecord")),
      [str(packed_dir / ("part-%d.tfrecord" % index)) for index in range(2)], num_workers=1)
  # Records without masks (the pipeline draws them), two files, and the model's vocabulary.
  unmasked_dir = root / "unmasked"
  unmasked_dir.mkdir()
  for index in range(2):
    batch = helpers.random_batch(rng, 24, SEQ, CONFIG["vocab_size"], PRED)
    helpers.write_batch_records(unmasked_dir / ("part-%d.tfrecord" % index),
                                {k: v for k, v in batch.items() if k not in mask_tests.MASKED})
  vocab_file = mask_tests.write_vocab(root / "vocab.txt", size=CONFIG["vocab_size"])
  return {"root": root, "configs": configs, "train_dir": str(train_dir),
          "packed_dir": str(packed_dir), "unmasked_dir": str(unmasked_dir),
          "vocab_file": vocab_file}


def command(data, out, launcher=(), config="dropout", **overrides):
  """The deterministic training command (the same for every run of a configuration)."""
  values = {"bert_config_file": data["configs"][config], "input_files_dir": data["train_dir"],
            "output_dir": out, "max_seq_length": SEQ, "max_predictions_per_seq": PRED,
            "train_batch_size": 2, "num_accumulation_steps": ACCUMULATION,
            "learning_rate": 1e-3, "num_warmup_steps": 5, "num_train_steps": UPDATES,
            "save_checkpoints_steps": 5, "display_loss_steps": 1, "do_train": True,
            "deterministic_run": True}
  values.update(overrides)
  return (list(launcher) + [sys.executable, job.SCRIPT]
          + ["--%s=%s" % (k, v) for k, v in values.items() if v is not None])


def start(cmd, output):
  """Starts `cmd` in its own process group, stdout and stderr into the file `output`.

  Returns:
    (cmd, output, Popen), as `finish` takes them.
  """
  with open(output, "w") as sink:
    proc = subprocess.Popen(cmd, cwd=job.REPO_ROOT, stdout=sink, stderr=subprocess.STDOUT,
                            start_new_session=True)
  return cmd, output, proc


def finish(started, timeout=600):
  """Waits for every run of `started` (from `start`); raises with the output of any that fails,
  killing the others."""
  deadline = time.time() + timeout
  try:
    for cmd, output, proc in started:
      code = proc.wait(timeout=max(1.0, deadline - time.time()))
      with open(output) as reader:
        assert code == 0, "exit %d: %s\n%s" % (code, " ".join(cmd), reader.read()[-6000:])
  finally:
    for _, _, proc in started:
      helpers.kill_session(proc)


def run_together(runs, timeout=600):
  """Runs the commands {output file: command} at the same time; raises with the output of any
  that fails."""
  finish([start(cmd, output) for output, cmd in runs.items()], timeout)


def assert_same_losses(golden_log, new_log, cmd, tmp_path):
  """The two logs' per-step values are identical floats (the golden-loss tool, tolerance 0)."""
  golden = tmp_path / "golden.json"
  assert regression.main(["record", "--log", str(golden_log), "--output", str(golden),
                          "--command", " ".join(cmd)]) == 0
  entries = json.loads(golden.read_text())["entries"]
  assert len(entries) >= UPDATES
  assert all("total_loss" in e and "learning_rate" in e for e in entries)
  assert regression.main(["compare", "--golden", str(golden), "--log", str(new_log),
                          "--tolerance", "0"]) == 0
  return entries


def assert_counters(entries, directory, fp16):
  """The final checkpoint's counters agree with the logged updates.

  The counter and the weights of a checkpoint belong to the same micro-step; fp16 updates skipped
  for overflow consumed micro-steps too (and have no step line).
  """
  values = job.checkpoint_values(directory)
  assert values["global_step"] == UPDATES
  skipped = int(values["skipped_update_count"]) if fp16 else 0
  assert values["micro_step"] == (UPDATES + skipped) * ACCUMULATION
  if fp16:
    assert skipped > 0  # 2^32 overflows fp16: the first updates are skipped, each halving it
    # The scale each logged update's loss used is 2^32 halved once per update skipped before it,
    # and never rises again within the run.
    scales = [e["loss_scaler"] for e in entries]
    exponents = [32 - np.log2(scale) for scale in scales]
    assert all(k == int(k) and 1 <= k <= skipped for k in exponents), scales
    assert exponents == sorted(exponents)


def _mpirun():
  """mpirun of 2 workers whose ranks yield the core while they wait in a collective.

  The two launches of a test (4 workers) share 2 cores: without yielding, a rank polling in a
  collective starves the one it waits for (docs/MULTINODE.md, Horovod settings: more workers than
  cores).
  """
  launch = launchers._mpirun()  # pylint: disable=protected-access
  return launch + ["--mca", "mpi_yield_when_idle", "1"]


LAUNCHERS = {"gloo": launchers._horovodrun, "mpirun": _mpirun}  # pylint: disable=protected-access


def test_fp32_one_process_bit_identical_with_dropout_on(data, tmp_path):
  a, b, off, other = (tmp_path / name for name in ("a", "b", "off", "seed"))
  # Dropout is on: the same run with dropout probabilities 0 has another first loss (same
  # initial weights and batches); another seed (other weights, batches, masks) too. Those two
  # one-update runs start with the pair.
  run_together({tmp_path / "a.out": command(data, a), tmp_path / "b.out": command(data, b),
                tmp_path / "off.out": command(data, off, config="no_dropout", num_train_steps=1),
                tmp_path / "seed.out": command(data, other, seed=7, num_train_steps=1)})
  entries = assert_same_losses(a / "bert_dllog.json", b / "bert_dllog.json",
                               command(data, "OUT"), tmp_path)
  assert_counters(entries, a, fp16=False)
  first_off = job.read_dllog(off / "bert_dllog.json")[0]["data"]["total_loss"]
  assert abs(first_off - entries[0]["total_loss"]) > 1e-4
  assert job.read_dllog(other / "bert_dllog.json")[0]["data"]["total_loss"] != \
      entries[0]["total_loss"]


@pytest.mark.e2e
def test_bf16_one_process_bit_identical(data, tmp_path):
  a, b = tmp_path / "a", tmp_path / "b"
  run_together({tmp_path / "a.out": command(data, a, **BF16),
                tmp_path / "b.out": command(data, b, **BF16)})
  entries = assert_same_losses(a / "bert_dllog.json", b / "bert_dllog.json",
                               command(data, "OUT", **BF16), tmp_path)
  assert_counters(entries, a, fp16=False)  # no loss scale: no update skipped
  assert "loss_scaler" not in entries[0]


class RunEndedFirst(AssertionError):
  """The run ended before the update a test waited for was logged."""


def _wait_for_step(log, proc, step, timeout=300):
  """Waits until the run log has a line of `step` or more."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    if proc.poll() is not None:
      raise RunEndedFirst("the run ended (exit %d) before update %d was logged"
                          % (proc.returncode, step))
    if log.exists():
      # Only whole lines: the writer may be part-way through the last one.
      text = log.read_text()
      lines = text.splitlines()[:text.count("\n")]
      steps = [r["step"] for r in map(json.loads, (l[5:] for l in lines if l.startswith("DLLL ")))]
      if any(isinstance(s, int) and s >= step for s in steps):
        return
    time.sleep(0.05)
  raise AssertionError("step %d never logged" % step)


def newest_readable_checkpoint(directory):
  """The step of the newest checkpoint in `directory` whose every tensor reads back, whatever the
  `checkpoint` index names: a kill may land between a save's files and the index update, or in
  the middle of the save."""
  steps = sorted((int(re.fullmatch(r"model\.ckpt-(\d+)\.index", path.name).group(1))
                  for path in directory.glob("model.ckpt-*.index")), reverse=True)
  for step in steps:
    try:
      reader = tf.train.load_checkpoint(str(directory / ("model.ckpt-%d" % step)))
      for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)
    except (tf.errors.OpError, ValueError):
      continue
    return step
  raise AssertionError("no readable checkpoint in %s" % directory)


def three_runs_one_killed(data, root, **overrides):
  """The one-process command run three times at once: "a" and "b" to the end; "killed" is
  killed once update KILL_AFTER is logged (`_killed_mid_run`) and resumed (the same command
  again) while a and b still train.

  Returns:
    dict: the output dirs "a", "b", "killed"; "newest_saved", the global step of the newest
    readable checkpoint at the kill; "resumed_output" and "a_output", the resumed run's and a's
    stdout and stderr.
  """
  dirs = {name: root / name for name in ("a", "b", "killed")}
  started = {name: start(command(data, out, **overrides), root / ("%s.out" % name))
             for name, out in dirs.items() if name != "killed"}
  try:
    newest_saved = _killed_mid_run(command(data, dirs["killed"], **overrides), dirs["killed"],
                                   root / "killed.out")
    resumed = start(command(data, dirs["killed"], **overrides), root / "resumed.out")
    finish([started["a"], started["b"], resumed])
  finally:
    for _, _, proc in started.values():
      helpers.kill_session(proc)
  return dict(dirs, newest_saved=newest_saved,
              resumed_output=(root / "resumed.out").read_text(),
              a_output=(root / "a.out").read_text())


def _killed_mid_run(cmd, out, output, attempts=3):
  """Runs `cmd` (into `out`) and SIGKILLs it once update KILL_AFTER is logged.

  The run's last updates take about a second: a test process stalled that long by a loaded
  machine can find the run already ended (or see it end under the kill), which kills nothing.
  Such an attempt is started again from an empty `out`, up to `attempts` times.

  Returns:
    the global step of the newest readable checkpoint at the kill.
  """
  for _ in range(attempts):
    shutil.rmtree(out, ignore_errors=True)
    _, _, proc = start(cmd, output)
    try:
      _wait_for_step(out / "bert_dllog.json", proc, KILL_AFTER)
    except RunEndedFirst:
      continue
    finally:
      helpers.kill_session(proc)
    if proc.returncode == -signal.SIGKILL:
      return newest_readable_checkpoint(out)
  raise AssertionError("the run ended before the kill %d times: %s" % (attempts,
                                                                       output.read_text()[-3000:]))


def test_a_run_that_ends_before_the_kill_is_started_again(tmp_path, monkeypatch):
  """`_killed_mid_run` itself, on a stand-in for the script: an attempt that ends before update
  KILL_AFTER is logged is run again from an empty directory; one killed mid-run is the result;
  a run that never lasts until the kill fails the test with its output."""
  attempts, out = tmp_path / "attempts", tmp_path / "out"
  stand_in = textwrap.dedent("""
      import json, os, sys, time
      attempts, log = sys.argv[1], sys.argv[2]
      with open(attempts, "a") as f:
        f.write("x")
      if os.path.getsize(attempts) == 1 or sys.argv[3] == "never":
        sys.exit(0)  # over before the kill
      os.makedirs(os.path.dirname(log), exist_ok=True)
      with open(log, "w") as f:
        f.write("DLLL " + json.dumps({"step": %d, "data": {}}) + "\\n")
      time.sleep(60)
  """ % KILL_AFTER)
  monkeypatch.setattr(sys.modules[__name__], "newest_readable_checkpoint", lambda directory: 10)
  cmd = [sys.executable, "-c", stand_in, str(attempts), str(out / "bert_dllog.json")]
  assert _killed_mid_run(cmd + ["once"], out, tmp_path / "killed.out") == 10
  assert attempts.read_text() == "xx"
  attempts.unlink()
  with pytest.raises(AssertionError, match="the run ended before the kill 3 times"):
    _killed_mid_run(cmd + ["never"], out, tmp_path / "killed.out")
  assert attempts.read_text() == "xxx"


def assert_resumed_exactly(runs):
  """The killed and resumed run of `three_runs_one_killed` is the full run "a": it restarted from
  the newest checkpoint saved before the kill, its log reads as one history with a's values, and
  its final checkpoint holds a's values bit for bit.

  Returns:
    the step it restarted from.
  """
  full, killed = runs["a"], runs["killed"]
  # The resumed run says where it started: the newest checkpoint saved before the kill, on either
  # side of the index update (tests/test_checkpoints_recovery.py forces both).
  restarts = [record["data"]["resumed_from_step"]
              for record in job.read_dllog(killed / "bert_dllog.json")
              if record["step"] == dllogger_setup.RESTART_STEP]
  assert restarts == [runs["newest_saved"]]
  full_entries = golden.log_entries(str(full / "bert_dllog.json"))
  # The killed run's log holds both runs (appended at the restart), and reads as one history: the
  # lines the first run logged after its checkpoint give way to the resumed run's.
  resumed_entries = golden.log_entries(str(killed / "bert_dllog.json"))
  assert [e["step"] for e in resumed_entries] == [e["step"] for e in full_entries]
  assert golden.differences(full_entries, resumed_entries, tolerance=0) == []
  final_full, final_resumed = job.checkpoint_values(full), job.checkpoint_values(killed)
  assert set(final_full) == set(final_resumed)
  for name, value in final_full.items():
    np.testing.assert_array_equal(final_resumed[name], value, err_msg=name)
  return restarts[0]


@pytest.fixture(scope="module")
def fp16_runs(data, tmp_path_factory):
  """`three_runs_one_killed` of the fp16 command."""
  return three_runs_one_killed(data, tmp_path_factory.mktemp("fp16"), **FP16)


def test_fp16_one_process_bit_identical(data, fp16_runs, tmp_path):
  entries = assert_same_losses(fp16_runs["a"] / "bert_dllog.json",
                               fp16_runs["b"] / "bert_dllog.json", command(data, "OUT", **FP16),
                               tmp_path)
  assert_counters(entries, fp16_runs["a"], fp16=True)


def test_killed_run_resumes_exactly(fp16_runs):
  # fp16 with accumulation: weights, LAMB slots, accumulators, loss scale, the micro-step (dropout
  # keys) and the input position must all come back for the losses to continue unchanged.
  restart = assert_resumed_exactly(fp16_runs)
  assert 10 <= restart < UPDATES and restart % 5 == 0
  assert "the input continues after" in fp16_runs["resumed_output"]


@pytest.fixture(scope="module")
def unmasked_runs(data, tmp_path_factory):
  """`three_runs_one_killed` of the fp32 command on records without masks, whole words."""
  return three_runs_one_killed(data, tmp_path_factory.mktemp("unmasked"),
                               input_files_dir=data["unmasked_dir"], vocab_file=data["vocab_file"],
                               whole_word_masking=True)


def test_masks_drawn_in_the_pipeline_rerun_and_resume_bit_for_bit(data, unmasked_runs, tmp_path):
  # 48 records, 4 a micro-step pair: the 50 updates read 4 epochs, each with new masks drawn from
  # (seed, record, epoch); the resumed run skips the records done and draws the same ones.
  assert_same_losses(unmasked_runs["a"] / "bert_dllog.json",
                     unmasked_runs["b"] / "bert_dllog.json",
                     command(data, "OUT", input_files_dir=data["unmasked_dir"]), tmp_path)
  restart = assert_resumed_exactly(unmasked_runs)
  assert 10 <= restart < UPDATES and restart % 5 == 0
  assert ("Training on 2 file(s) of unpacked records (%d tokens, no masks: %d predictions drawn)"
          % (SEQ, PRED)) in unmasked_runs["a_output"]


# Every precision, and both places of the allreduce (every micro-step, or once per update after
# the accumulation). The same command under each launcher: horovodrun --gloo and mpirun sum the
# two workers' gradients alike, so their runs are bit-identical too, and two runs that agree to
# the last bit show that each run repeats itself. The last trains on packed records.
@pytest.mark.parametrize("precision,allreduce_post_accumulation,packed", [
    ("fp32", False, False), ("fp16", True, False), ("bf16", True, False), ("bf16", False, True)])
def test_two_workers_bit_identical_under_either_launcher(data, tmp_path, precision,
                                                         allreduce_post_accumulation, packed):
  overrides = dict(PRECISIONS[precision], horovod=True,
                   allreduce_post_accumulation=allreduce_post_accumulation)
  if packed:
    overrides["input_files_dir"] = data["packed_dir"]
  gloo, mpi = tmp_path / "gloo", tmp_path / "mpirun"
  run_together({tmp_path / "gloo.out": command(data, gloo, LAUNCHERS["gloo"](), **overrides),
                tmp_path / "mpirun.out": command(data, mpi, LAUNCHERS["mpirun"](), **overrides)})
  entries = assert_same_losses(gloo / "bert_dllog.json", mpi / "bert_dllog.json",
                               command(data, "OUT", LAUNCHERS["gloo"](), **overrides), tmp_path)
  assert_counters(entries, gloo, fp16=precision == "fp16")
  logged = [r["data"] for r in job.read_dllog(gloo / "bert_dllog.json")
            if isinstance(r["step"], int)]
  # Packed: 2 rows x 2 micro-steps x 2 workers per update hold 8 to 24 sequences.
  assert all(("sequences_per_update" in d) == packed for d in logged)
  assert all(8 <= d["sequences_per_update"] <= 24 for d in logged if packed)
  final_gloo, final_mpi = job.checkpoint_values(gloo), job.checkpoint_values(mpi)
  assert set(final_gloo) == set(final_mpi)
  for name, value in final_gloo.items():
    np.testing.assert_array_equal(final_mpi[name], value, err_msg=name)


def test_deterministic_resume_refuses_a_checkpoint_without_the_counter(data, tmp_path):
  out = tmp_path / "out"
  with tf.Graph().as_default():  # what a run without --deterministic_run saves: no micro_step
    step = tf.compat.v1.train.get_or_create_global_step()
    with tf.compat.v1.Session() as sess:
      sess.run(step.initializer)
      tf.compat.v1.train.Saver().save(sess, str(out / "model.ckpt"), global_step=step)
  proc = job.run_job(command(data, out)[2:], check=False, timeout=120)
  assert proc.returncode == 2
  assert "written without --deterministic_run" in proc.stderr
