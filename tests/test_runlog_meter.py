"""utils/runlog/meter.py: the training meter with a scripted clock, every figure worked out here.

The clock returns a list of times, two per session run (start, end); the expected throughputs,
averages, ETAs and lines below are written out by hand from those times and the fed values.
"""

import os
import subprocess
import sys

import pytest

from tests.helpers import ScriptedClock
from utils.core import updates as updates_lib
from utils.runlog import meter as meter_lib

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def values(step, total_loss=5.0, learning_rate=1e-3, **more):
  """The fetched values of one micro-step (graph names)."""
  result = {"total_loss": total_loss, "mlm_loss": total_loss - 1.0, "nsp_loss": 1.0,
            "learning_rate": learning_rate, "step_update": step}
  result.update(more)
  return result


class Metered(object):
  """A meter fed as the training log hook feeds it: each run's values through an
  `updates.UpdateTracker` (which says whether the run ended an update and whether it applied),
  started at the same step as the meter."""

  def __init__(self, global_batch_size, accumulation=1, **kwargs):
    self.meter = meter_lib.TrainingMeter(global_batch_size, **kwargs)
    self.tracker = updates_lib.UpdateTracker(accumulation)

  def start(self, initial_step):
    self.meter.start(initial_step)
    self.tracker.start(initial_step)

  def __getattr__(self, name):
    return getattr(self.meter, name)


def run(metered, fed):
  """Runs the meter over the fed values (one micro-step each); returns the non-None updates."""
  updates = []
  for value in fed:
    metered.meter.run_started()
    update = metered.meter.run_ended(metered.tracker.run_ended(value))
    if update is not None:
      updates.append(update)
  return updates


@pytest.mark.e2e
def test_meter_does_not_import_tensorflow():
  code = ("import sys; from utils.runlog import meter; "
          "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
  subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, timeout=60)


def test_throughput_per_update_warmup_and_eta():
  # Six updates of 4, 2, 1, 0.5, 0.25, 0.5 s, one second apart (the gaps are not timed).
  times = [100.0, 104.0, 105.0, 107.0, 108.0, 109.0, 110.0, 110.5, 111.5, 111.75, 112.75, 113.25]
  meter = Metered(32, warmup_steps=2, num_train_steps=10,
                                  clock=ScriptedClock(times))
  meter.start(0)
  updates = run(meter, [values(step, total_loss=10.0 - step) for step in range(1, 7)])
  assert [u.step for u in updates] == [1, 2, 3, 4, 5, 6]
  assert all(u.applied for u in updates)
  # 32 sequences / 4 s, / 2 s, ...
  assert [u.data["throughput_train"] for u in updates] == [8.0, 16.0, 32.0, 64.0, 128.0, 64.0]
  assert list(updates[0].data) == ["throughput_train", "mlm_loss", "nsp_loss", "total_loss",
                                   "avg_loss_step", "learning_rate"]
  assert updates[2].data["total_loss"] == 7.0 and updates[2].data["avg_loss_step"] == 7.0
  assert updates[2].data["mlm_loss"] == 6.0
  # Progress: elapsed from 100.0; the ETA from (now - 104.0) / (updates - 1) per update.
  assert updates[0].lines == ("update 1 of 10 (10.0%), elapsed 0:00:04, ETA unknown",)
  # Step 2 ends at 107: 3 s per update, 8 updates left: 24 s.
  assert updates[1].lines == ("update 2 of 10 (20.0%), elapsed 0:00:07, ETA 0:00:24",)
  # Step 6 ends at 113.25: 9.25 s / 5 = 1.85 s per update, 4 left: 7.4 s.
  assert updates[5].lines == ("update 6 of 10 (60.0%), elapsed 0:00:13, ETA 0:00:07",)
  assert meter.update_times == [4.0, 2.0, 1.0, 0.5, 0.25, 0.5]
  summary = meter.summary()
  # Warm-up: the first 2 updates are out; 4 updates in 1 + 0.5 + 0.25 + 0.5 = 2.25 s.
  assert summary["throughput_train"] == pytest.approx(32 * 4 / 2.25)
  assert summary["steady_update_steps"] == 4 and summary["steady_time"] == 2.25
  assert summary["update_steps"] == 6 and summary["total_time"] == 8.25
  assert summary["skipped_updates"] == 0
  assert meter.summary_lines() == (
      "Throughput Average (sequences/s) = 56.89 (4 of 6 update steps measured, 2.25 s)",)


@pytest.mark.parametrize("with_update_step", [True, False])
def test_averages_over_accumulation_micro_steps(with_update_step):
  # Two updates of 3 micro-steps: 1 + 2 + 3 = 6 s and 0.5 + 0.5 + 1 = 2 s.
  durations = [1.0, 2.0, 3.0, 0.5, 0.5, 1.0]
  times = []
  now = 0.0
  for duration in durations:
    times += [now, now + duration]
    now += duration + 10.0
  meter = Metered(48, accumulation=3, warmup_steps=0, clock=ScriptedClock(times))
  meter.start(0)
  losses = [6.0, 3.0, 9.0, 2.0, 2.5, 4.5]
  fed = []
  for k, loss in enumerate(losses):
    step = (k + 1) // 3  # the global step advances on the third micro-step
    value = values(step, total_loss=loss, learning_rate=0.1 * (k + 1), global_norm=1.5 + k)
    if with_update_step:
      value["update_step"] = (k + 1) % 3 == 0
    fed.append(value)
  updates = run(meter, fed)
  assert [u.step for u in updates] == [1, 2]
  first, second = updates[0].data, updates[1].data
  assert first["throughput_train"] == 8.0 and second["throughput_train"] == 24.0  # 48/6, 48/2
  # (6 + 3 + 9) / 3 and (2 + 2.5 + 4.5) / 3
  assert first["avg_loss_step"] == 6.0 and second["avg_loss_step"] == 3.0
  assert first["total_loss"] == 9.0 and second["total_loss"] == 4.5  # the last micro-step's
  assert first["learning_rate"] == pytest.approx(0.3) and first["global_norm"] == 3.5
  assert meter.update_times == [6.0, 2.0]
  assert meter.summary()["throughput_train"] == 48 * 2 / 8.0


def test_display_steps_and_checkpoint_updates_left_out_of_the_average():
  # A run resumed at step 10, checkpoints every 2 steps (12, 14, 16), one warm-up update.
  durations = [5.0, 1.0, 2.0, 1.0, 4.0, 3.0]  # steps 11..16
  times = []
  for k, duration in enumerate(durations):
    times += [10.0 * k, 10.0 * k + duration]
  meter = Metered(8, display_loss_steps=3, warmup_steps=1,
                                  save_checkpoints_steps=2, clock=ScriptedClock(times))
  meter.start(10)
  updates = run(meter, [values(step) for step in range(11, 17)])
  # Logged: the first update of the run and the steps that are multiples of 3.
  assert [u.step for u in updates if u.data is not None] == [11, 12, 15]
  assert [u.lines for u in updates if u.data is None] == [(), (), ()]
  assert updates[0].lines == ("update 11, elapsed 0:00:05",)  # no num_train_steps: no ETA
  summary = meter.summary()
  # Step 11 is warm-up, 12, 14 and 16 wrote checkpoints: steps 13 and 15, 2 + 4 = 6 s.
  assert summary["steady_update_steps"] == 2 and summary["steady_time"] == 6.0
  assert summary["throughput_train"] == 8 * 2 / 6.0


def test_a_run_shorter_than_the_warmup_has_no_average():
  meter = Metered(8, warmup_steps=6, clock=ScriptedClock([0.0, 1.0, 2.0, 3.0]))
  meter.start(0)
  run(meter, [values(1), values(2)])
  assert meter.summary()["throughput_train"] is None
  assert meter.summary_lines() == (
      "Throughput Average: not measured (2 update steps, the first 6 are warm-up)",)


def test_skipped_updates_report_the_loss_scale_after_the_skip():
  # fp16 from 2^32: two updates overflow (the step stays 0), each halving the scale; then one
  # applies at 2^30, and one more overflows at step 1.
  times = [float(t) for t in range(10)]
  meter = Metered(8, warmup_steps=0, clock=ScriptedClock(times))
  meter.start(0)
  fed = [values(0, loss_scale=2.0 ** 32, skipped_updates=1),
         values(0, loss_scale=2.0 ** 31, skipped_updates=2),
         values(1, loss_scale=2.0 ** 30, skipped_updates=2, global_norm=0.75),
         values(1, loss_scale=2.0 ** 30, skipped_updates=3),
         values(2, loss_scale=2.0 ** 29, skipped_updates=3, global_norm=0.5)]
  updates = run(meter, fed)
  assert [(u.step, u.applied) for u in updates] == [(0, False), (0, False), (1, True),
                                                    (1, False), (2, True)]
  assert [u.data for u in updates if not u.applied] == [None, None, None]
  # 2^31 = 2147483648, 2^30 = 1073741824, 2^29 = 536870912, in %g's six significant digits.
  assert updates[0].lines == (
      "update skipped at step 0 (non-finite gradients); loss scale now 2.14748e+09",)
  assert updates[1].lines == (
      "update skipped at step 0 (non-finite gradients); loss scale now 1.07374e+09",)
  assert updates[3].lines == (
      "update skipped at step 1 (non-finite gradients); loss scale now 5.36871e+08",)
  applied = updates[2].data
  assert applied["loss_scaler"] == 2.0 ** 30 and applied["skipped_updates"] == 2
  assert list(applied)[-3:] == ["loss_scaler", "global_norm", "skipped_updates"]
  # The applied update is the first of the run: logged, though its step is 1.
  assert updates[4].data["loss_scaler"] == 2.0 ** 29
  summary = meter.summary()
  assert summary["skipped_updates"] == 3 and summary["update_steps"] == 5


def test_skip_without_loss_scale_and_the_scale_floor():
  meter = Metered(8, clock=ScriptedClock([0.0, 1.0, 2.0, 3.0]))
  meter.start(4)
  updates = run(meter, [values(4), values(4, loss_scale=1.0)])
  assert updates[0].lines == ("update skipped at step 4 (non-finite gradients)",)
  assert updates[1].lines == ("update skipped at step 4 (non-finite gradients); loss scale now 1",)
  assert meter_lib.loss_scale_after_skip(3.0) == 1.5
  assert meter_lib.loss_scale_after_skip(1.5) == 1.0
  assert meter_lib.loss_scale_after_skip(1024.0, multiplier=4.0) == 256.0


def test_start_clears_the_run_and_an_unknown_start_step_counts_the_first_update():
  meter = Metered(8, clock=ScriptedClock([0.0, 2.0, 3.0, 4.0]))
  meter.start(None)
  first = run(meter, [values(0)])  # without a known start step, step 0 is an applied update
  assert first[0].applied and first[0].data["throughput_train"] == 4.0
  meter.start(0)
  assert meter.update_times == [] and meter.summary()["update_steps"] == 0
  second = run(meter, [values(0)])  # now the step did not advance: a skip
  assert not second[0].applied


@pytest.mark.parametrize("kwargs,message", [
    ({"global_batch_size": 0}, "global_batch_size must be an integer >= 1"),
    ({"global_batch_size": 8, "warmup_steps": -1}, "warmup_steps must be an integer >= 0"),
    ({"global_batch_size": 8, "loss_scale_multiplier": 1.0}, "loss_scale_multiplier must be > 1"),
])
def test_bad_arguments_are_named(kwargs, message):
  with pytest.raises(ValueError, match=message):
    meter_lib.TrainingMeter(**kwargs)


# ---------------------------------------------------------------------------------------------
# Packed input: the log counts sequences. The job below: 2 workers x 4 rows x 2 accumulation =
# 16 rows per update, rows of 128 tokens (a worker's micro-batch holds 4 x 128 = 512 slots).

PACKED = dict(max_sequences_per_pack=3, num_workers=2, seq_length=128)
# Per micro-step: (start, end) times, and this worker's batch_sequences and batch_tokens.
PACKED_RUNS = [((10.0, 11.5), 7.0, 480.0), ((12.0, 14.5), 9.0, 504.0),   # update 1: 4 s
               ((20.0, 21.0), 6.0, 384.0), ((30.0, 31.0), 8.0, 448.0)]   # update 2: 2 s


def packed_feeds(with_counts=True):
  """The fed values of PACKED_RUNS (the global step advances every second micro-step)."""
  fed = []
  for k, (_, sequences, tokens) in enumerate(PACKED_RUNS):
    counts = {"batch_sequences": sequences, "batch_tokens": tokens} if with_counts else {}
    fed.append(values((k + 1) // 2, total_loss=6.0 - k, **counts))
  return fed


def packed_clock():
  return ScriptedClock([t for times, _, _ in PACKED_RUNS for t in times])


def test_packed_updates_count_sequences_rows_and_padding():
  meter = Metered(16, accumulation=2, warmup_steps=0, clock=packed_clock(), **PACKED)
  meter.start(0)
  first, second = run(meter, packed_feeds())
  # Update 1: (7 + 9) x 2 workers = 32 sequences in 1.5 + 2.5 = 4 s; 16 rows; tokens
  # (480 + 504) x 2 = 1968 of 16 x 128 = 2048 slots: 80 / 2048 empty.
  assert first.data["throughput_train"] == 8.0
  assert first.data["sequences_per_update"] == 32.0
  assert first.data["rows_per_sec"] == 4.0
  assert first.data["padding"] == pytest.approx(80.0 / 2048)
  # Update 2: (6 + 8) x 2 = 28 sequences in 2 s; (384 + 448) x 2 = 1664 tokens: 384 / 2048 empty.
  assert second.data["throughput_train"] == 14.0 and second.data["rows_per_sec"] == 8.0
  assert second.data["sequences_per_update"] == 28.0
  assert second.data["padding"] == pytest.approx(0.1875)
  # The new keys come last: the line still starts with throughput_train.
  assert list(first.data) == ["throughput_train", "mlm_loss", "nsp_loss", "total_loss",
                              "avg_loss_step", "learning_rate", "sequences_per_update",
                              "rows_per_sec", "padding"]
  summary = meter.summary()
  # 60 sequences and 32 rows in 6 s; 3632 tokens of 4096 slots.
  assert summary["throughput_train"] == 10.0
  assert summary["rows_per_sec"] == pytest.approx(32 / 6.0)
  assert summary["sequences_per_row"] == 60 / 32.0
  assert summary["padding"] == pytest.approx(464.0 / 4096)
  assert meter.summary_lines() == (
      "Throughput Average (sequences/s) = 10.00 (2 of 2 update steps measured, 6.00 s); "
      "5.33 rows/s, 1.88 sequences per row, padding 11.3%",)


def test_packed_average_counts_only_the_measured_updates_sequences():
  # One warm-up update: the average is update 2 alone, 28 sequences / 2 s; the run's rows and
  # padding still count both updates.
  meter = Metered(16, accumulation=2, warmup_steps=1, clock=packed_clock(), **PACKED)
  meter.start(0)
  run(meter, packed_feeds())
  summary = meter.summary()
  assert summary["throughput_train"] == 14.0 and summary["rows_per_sec"] == 8.0
  assert summary["sequences_per_row"] == 60 / 32.0
  assert summary["padding"] == pytest.approx(464.0 / 4096)


def test_unpacked_lines_are_unchanged_when_the_counts_are_fetched():
  # The same runs as today's unpacked line: global batch / time, no new keys, even though every
  # pretraining graph now has the count tensors.
  with_counts = Metered(16, accumulation=2, warmup_steps=0, clock=packed_clock())
  with_counts.start(0)
  updates = run(with_counts, packed_feeds())
  assert [dict(u.data) for u in updates] == [
      {"throughput_train": 4.0, "mlm_loss": 4.0, "nsp_loss": 1.0, "total_loss": 5.0,
       "avg_loss_step": 5.5, "learning_rate": 1e-3},
      {"throughput_train": 8.0, "mlm_loss": 2.0, "nsp_loss": 1.0, "total_loss": 3.0,
       "avg_loss_step": 3.5, "learning_rate": 1e-3}]
  assert list(updates[0].data)[0] == "throughput_train"
  assert list(with_counts.summary()) == ["throughput_train", "total_time", "update_steps",
                                         "steady_update_steps", "steady_time", "skipped_updates"]
  assert with_counts.summary_lines() == (
      "Throughput Average (sequences/s) = 5.33 (2 of 2 update steps measured, 6.00 s)",)


def test_packed_run_without_counts_or_seq_length_is_refused():
  meter = Metered(16, accumulation=2, clock=packed_clock(), **PACKED)
  meter.start(0)
  with pytest.raises(ValueError, match="packed input: the run's values have no batch_sequences"):
    run(meter, packed_feeds(with_counts=False))
  with pytest.raises(ValueError, match="seq_length must be an integer >= 1"):
    meter_lib.TrainingMeter(16, max_sequences_per_pack=3)
  with pytest.raises(ValueError, match="num_workers must be an integer >= 1"):
    meter_lib.TrainingMeter(16, num_workers=0)
