"""The time-to-quality benchmark's arithmetic (bench/quality.py and its packed, fine-tuning and
report modules): minutes to a target loss, update budgets, the jobs each variant runs, the packed
comparison's batches and tables.

(Speed itself is measured by bench/, never asserted in tests.)
"""

import json
import os

import pytest
import tensorflow as tf

from bench import quality
from bench import quality_finetune
from bench import quality_packed
from bench import quality_report
from tests import helpers


def test_quality_minutes_to_a_loss_interpolate_between_checkpoints_by_hand():
  points = [(1.0, 6.0), (2.0, 5.0), (3.0, 4.0)]
  assert quality.minutes_to_loss(points, 4.5) == pytest.approx(2.5)
  assert quality.minutes_to_loss(points, 6.5) == 1.0  # already below at the first checkpoint
  assert quality.minutes_to_loss(points, 3.9) is None
  # The first crossing counts, not a later one: 5 -> 4.4 crosses 4.5 at 1 + 0.5 / 0.6.
  bumpy = [(1.0, 5.0), (2.0, 4.4), (3.0, 4.6), (4.0, 4.0)]
  assert quality.minutes_to_loss(bumpy, 4.5) == pytest.approx(1 + 0.5 / 0.6)


def test_quality_default_target_is_the_lowest_loss_every_job_reaches():
  curves = {"a": [(1, 6.0), (2, 4.12), (3, 4.2)], "b": [(1, 6.5), (2, 4.31)]}
  # b reaches 4.31 at best, a gets below it: rounded up to 0.05, 4.35.
  assert quality.default_target(curves) == pytest.approx(4.35)
  assert quality.default_target({"a": [(1, 4.3)]}) == pytest.approx(4.3)


def test_quality_budget_updates_and_fine_tuned_checkpoints_by_hand():
  # 600 s, 20 s of start-up, 2 updates/s: 0.95 x 580 x 2 = 1102.
  assert quality.updates_in_budget(600, 20, 2.0) == 1102
  assert quality.updates_in_budget(10, 20, 2.0) == quality.CHECKPOINTS_PER_JOB
  # At least one update per checkpoint, whatever the number of checkpoints.
  assert quality.updates_in_budget(10, 20, 2.0, checkpoints=4) == 4
  assert quality.updates_in_budget(600, 20, 2.0, checkpoints=4) == 1102
  job = {"updates": 1000, "keep_dir": "/k", "checkpoints": {50: 1.0, 240: 2.0, 490: 3.0,
                                                            760: 4.0, 1000: 5.0}}
  starts, chosen = quality_finetune.finetune_starts(job, (0.25, 0.5, 1.0))
  assert chosen == {0.25: 240, 0.5: 490, 1.0: 1000}
  assert starts == {"random": None, "25%": "/k/model.ckpt-240", "50%": "/k/model.ckpt-490",
                    "100%": "/k/model.ckpt-1000"}


def test_quality_keeps_every_checkpoint_with_the_time_it_was_written(tmp_path):
  job_dir, keep_dir = tmp_path / "job", tmp_path / "kept"
  job_dir.mkdir()
  keeper = quality.CheckpointKeeper(str(job_dir), str(keep_dir), start=1000.0, poll_seconds=60)
  for update, written in ((100, 1030.0), (200, 1090.5)):
    (job_dir / ("model.ckpt-%d.data-00000-of-00001" % update)).write_text("data %d" % update)
    index = job_dir / ("model.ckpt-%d.index" % update)
    index.write_text("index %d" % update)
    os.utime(index, (written, written))
  # Data without its index yet: a checkpoint still being written, not kept.
  (job_dir / "model.ckpt-300.data-00000-of-00001").write_text("partial")
  keeper.start()  # polls once more when stopped, and every poll_seconds before
  keeper.poll()
  # The job deletes its old checkpoints (the original release keeps 5): the kept links stay.
  for path in job_dir.glob("model.ckpt-100.*"):
    path.unlink()
  keeper.stop()
  assert keeper.kept == {100: 30.0, 200: 90.5}
  assert (keep_dir / "model.ckpt-100.data-00000-of-00001").read_text() == "data 100"
  assert sorted(p.name for p in keep_dir.iterdir()) == [
      "model.ckpt-100.data-00000-of-00001", "model.ckpt-100.index",
      "model.ckpt-200.data-00000-of-00001", "model.ckpt-200.index"]


def test_quality_jobs_differ_only_in_what_the_variant_names():
  commands = {v: quality.job_command(v, "c.json", "/d", "/out", 400)
              for v in ("lamb_bf16", "lamb_fp32", "adam_fp32", "original")}
  lamb, adam, original = commands["lamb_fp32"], commands["adam_fp32"], commands["original"]
  bf16 = commands["lamb_bf16"]
  assert [a for a in bf16 if a not in lamb] == ["--bf16"] and len(bf16) == len(lamb) + 1
  assert [a for a in adam if a not in lamb] == ["--optimizer_type=adam", "--learning_rate=0.001"]
  assert [a for a in lamb if a not in adam] == ["--optimizer_type=lamb", "--learning_rate=0.008"]
  assert original[1:5] == ["-m", "tests.reference.original_bert", "run_pretraining", "--"]
  assert "--input_file=/d/seq128/train/*.tfrecord" in original
  # The same batch, schedule, checkpoints and learning rate as ours with the same optimizer.
  for flag in ("--train_batch_size=64", "--num_train_steps=400", "--num_warmup_steps=40",
               "--save_checkpoints_steps=20", "--learning_rate=0.001", "--bert_config_file=c.json"):
    assert flag in original and flag in adam
  assert quality.resolve_variants(["best", "adam_fp32", "lamb_bf16"], "bf16") == [
      "lamb_bf16", "adam_fp32"]
  assert quality.resolve_variants(["best", "original"], "fp32") == ["lamb_fp32", "original"]
  # Fewer checkpoints: a checkpoint every 1/4 of the updates, and all of them kept.
  fewer = quality.job_command("lamb_fp32", "c.json", "/d", "/out", 400, checkpoints=4)
  assert sorted(a for a in fewer if a not in lamb) == ["--keep_checkpoint_max=6",
                                                       "--save_checkpoints_steps=100"]
  assert "--keep_checkpoint_max=22" in lamb
  args = quality.parse_args(["--output_dir=/o", "--checkpoints_per_job=4",
                             "--calibration_updates=9"])
  assert (args.checkpoints_per_job, args.calibration_updates) == (4, 9)
  for bad in (["--budget_minutes=31"], ["--budget_minutes=0"], ["--variants=lamb_fp64"],
              ["--seeds=0"], ["--checkpoints_per_job=2"], ["--calibration_updates=5"]):
    with pytest.raises(SystemExit) as exit_info:
      quality.parse_args(["--output_dir=/o"] + bad)
    assert exit_info.value.code == 2


def _packed(sequences=17891, rows=14460, train_dir="/out/packed_train"):
  return quality_packed.PackedData(train_dir, [], sequences, rows)


def test_quality_packed_rows_per_batch_keep_the_batch_in_sequences_by_hand():
  # The demo's records: 17891 sequences in 14460 rows, 1.2373 a row; 64 / 1.2373 = 51.73 -> 52.
  demo = _packed()
  assert quality_packed.sequences_per_row(demo) == pytest.approx(1.237275, abs=1e-6)
  assert quality_packed.rows_per_batch(64, demo) == 52
  assert quality_packed.sequences_per_update(64, demo) == pytest.approx(52 * 17891 / 14460)
  assert quality_packed.sequences_per_update(64) == 64.0
  # 1.28 a row: exactly 50 rows; 1.5 a row: 42.67 -> 43; 2 a row at batch 5: 2.5, halves up -> 3.
  assert quality_packed.rows_per_batch(64, _packed(128, 100)) == 50
  assert quality_packed.rows_per_batch(64, _packed(3, 2)) == 43
  assert quality_packed.rows_per_batch(5, _packed(2, 1)) == 3
  assert quality_packed.rows_per_batch(1, _packed(3, 1)) == 1  # never an empty batch


def test_quality_packed_variants_resolve_and_parse():
  bf16, no_bf16 = "bf16", "fp32"
  assert quality.resolve_variants(["best", "best_packed"], bf16) == [
      "lamb_bf16", "lamb_bf16_packed"]
  assert quality.resolve_variants(["best", "best_packed"], no_bf16) == [
      "lamb_fp32", "lamb_fp32_packed"]
  assert quality.resolve_variants(["best_packed", "lamb_fp32_packed", "adam_fp32"], no_bf16) == [
      "lamb_fp32_packed", "adam_fp32"]
  args = quality.parse_args(["--output_dir=/o", "--variants=best, best_packed,lamb_bf16_packed"])
  assert args.variants == ["best", "best_packed", "lamb_bf16_packed"]
  for bad in ("adam_fp32_packed", "original_packed", "packed"):
    with pytest.raises(SystemExit) as exit_info:
      quality.parse_args(["--output_dir=/o", "--variants=best," + bad])
    assert exit_info.value.code == 2
  assert [quality_packed.twin(v) for v in ("lamb_bf16_packed", "lamb_fp32", "original")] == [
      "lamb_bf16", "lamb_fp32", "original"]


def test_quality_packed_job_is_its_twins_on_the_packed_rows():
  packed = _packed(train_dir="/out/packed_train")
  for twin in ("lamb_fp32", "lamb_bf16"):
    unpacked = quality.job_command(twin, "c.json", "/d", "/out/job", 400, checkpoints=4)
    argv = quality.job_command(twin + "_packed", "c.json", "/d", "/out/job", 400, checkpoints=4,
                               packed=packed)
    assert sorted(a for a in argv if a not in unpacked) == [
        "--enable_packed_data_mode", "--input_files_dir=/out/packed_train",
        "--train_batch_size=52"]
    assert sorted(a for a in unpacked if a not in argv) == [
        "--input_files_dir=/d/seq128/train", "--train_batch_size=64"]
    # The same schedule: 400 updates, 10% warmup, LAMB's learning rate, a checkpoint every 100.
    for flag in ("--num_train_steps=400", "--num_warmup_steps=40", "--learning_rate=0.008",
                 "--save_checkpoints_steps=100", "--optimizer_type=lamb"):
      assert flag in argv
  assert "--bf16" in quality.job_command("lamb_bf16_packed", "c", "/d", "/o", 400, packed=packed)
  with pytest.raises(ValueError, match="lamb_fp32_packed"):
    quality.job_command("lamb_fp32_packed", "c.json", "/d", "/out/job", 400)


def test_quality_packed_calibration_counts_updates_not_rows(monkeypatch, tmp_path):
  packed = _packed(train_dir=str(tmp_path / "packed_train"))
  # Unpacked: 128 sequences/s at 64 an update is 2 updates/s. Packed: 52 rows of 1.2373
  # sequences each, 64.34 sequences an update: 128 sequences/s is 1.9895 updates/s.
  assert quality.update_rate(128.0, "lamb_fp32") == 2.0
  assert quality.update_rate(128.0, "lamb_fp32_packed", packed) == pytest.approx(
      128.0 / (52 * 17891 / 14460))
  assert quality.update_rate(128.0, "lamb_fp32_packed", packed) == pytest.approx(1.98948, abs=1e-5)
  assert quality.update_rate(128.0, "lamb_fp32", packed) == 2.0  # the twin counts its 64
  seen = {}

  def run_job(argv, env):
    seen["argv"] = argv
    return 1000.0, [], 0.5

  def job_figures(kind, figures, start, lines, out_dir):
    seen["figures"] = (kind, figures.batch, figures.warmup)
    return 100.0, 7.5

  monkeypatch.setattr(quality.precision, "run_job", run_job)
  monkeypatch.setattr(quality.precision, "job_figures", job_figures)
  startup, rate = quality.calibrate("lamb_fp32_packed", "c.json", "/d", str(tmp_path), 9, 3,
                                    packed)
  assert startup == 7.5 and rate == pytest.approx(100.0 * 14460 / (52 * 17891))
  assert "--input_files_dir=%s" % packed.train_dir in seen["argv"]
  assert "--train_batch_size=52" in seen["argv"] and seen["figures"] == ("ours", 64, 3)
  assert quality.calibrate("lamb_fp32", "c.json", "/d", str(tmp_path), 9, 3, packed)[1] == (
      100.0 / 64)


def test_quality_packed_comparison_fine_tunes_every_final_checkpoint():
  first = {"variant": "lamb_fp32", "updates": 100, "keep_dir": "/a",
           "checkpoints": {25: 1.0, 50: 2.0, 100: 3.0}}
  # Stopped at the limit before its last update: its newest kept checkpoint is its final one.
  packed = {"variant": "lamb_fp32_packed", "updates": 90, "keep_dir": "/b",
            "checkpoints": {30: 1.0, 60: 2.0}}
  starts, chosen, finals = quality_finetune.finetune_plan([first, packed], (0.25, 0.5, 1.0), True)
  assert chosen == {0.25: 25, 0.5: 50, 1.0: 100}
  assert starts == {"random": None, "25%": "/a/model.ckpt-25", "50%": "/a/model.ckpt-50",
                    "100%": "/a/model.ckpt-100", "final_lamb_fp32_packed": "/b/model.ckpt-60"}
  assert finals == {"lamb_fp32": "100%", "lamb_fp32_packed": "final_lamb_fp32_packed"}
  starts, _, finals = quality_finetune.finetune_plan([first, packed], (0.25, 0.5, 1.0), False)
  assert finals == {} and sorted(starts) == ["100%", "25%", "50%", "random"]


def _write_records(path, count):
  with tf.io.TFRecordWriter(str(path)) as writer:
    for i in range(count):
      writer.write(b"record %d" % i)


def test_quality_packed_data_is_packed_once_and_remade_when_stale(monkeypatch, tmp_path):
  inputs = tmp_path / "train"
  inputs.mkdir()
  files = [str(inputs / "a.tfrecord"), str(inputs / "b.tfrecord")]
  _write_records(files[0], 5)
  _write_records(files[1], 4)
  calls = []

  def run_packer(input_files, train_dir):  # 2 rows a file, as the packer names its outputs
    calls.append(train_dir)
    os.makedirs(train_dir)
    outputs = [os.path.join(train_dir, os.path.basename(p)) for p in input_files]
    for path in outputs:
      _write_records(path, 2)
    return outputs

  monkeypatch.setattr(quality_packed, "run_packer", run_packer)
  out = tmp_path / "out"
  first = quality_packed.prepare(files, str(out))
  assert (first.train_dir, first.sequences, first.rows) == (str(out / "packed_train"), 9, 4)
  assert quality_packed.prepare(files, str(out)) == first and len(calls) == 1  # reused
  (out / "packed_train" / "b.tfrecord.partial").write_bytes(b"")  # an interrupted packing
  assert quality_packed.prepare(files, str(out)) == first and len(calls) == 2
  assert not (out / "packed_train" / "b.tfrecord.partial").exists()
  _write_records(files[1], 6)  # the inputs changed: packed again and counted again
  assert quality_packed.prepare(files, str(out)).sequences == 11 and len(calls) == 3
  os.remove(str(out / "packed_train" / "a.tfrecord"))  # an output gone
  assert quality_packed.prepare(files, str(out)).rows == 4 and len(calls) == 4
  assert sorted(os.listdir(str(out))) == ["packed_train", "packed_train.json"]


def test_quality_packed_comparison_prints_the_final_checkpoints_table(capsys):
  jobs = [{"variant": v, "rows_per_update": rows, "sequences_per_update": seqs, "updates": 10,
           "updates_per_s": 1.0, "final_update": 10, "final_mlm_loss": loss}
          for v, rows, seqs, loss in (("lamb_fp32", 64, 64.0, 5.25),
                                      ("lamb_fp32_packed", 52, 64.34, 5.5))]
  spread = {"mean": 0.5, "min": 0.4, "max": 0.6}
  quality_report.print_final_table({"seeds": 3, "jobs": jobs, "final_dev_accuracy": {
      "lamb_fp32": spread, "lamb_fp32_packed": dict(spread, mean=0.55)}})
  lines = capsys.readouterr().out.splitlines()
  assert "| lamb_fp32 | 10 | 5.250 | 0.500 (0.400-0.600) |" in lines
  assert "| lamb_fp32_packed | 10 | 5.500 | 0.550 (0.400-0.600) |" in lines


@pytest.mark.parametrize("ratio,best,reason", [
    (0.54, "lamb_fp32", "bf16 products run at 0.54x fp32 on this CPU"),
    (1.66, "lamb_bf16", "bf16 products 1.66x fp32 here")])
def test_quality_best_is_what_the_probe_measured_faster(monkeypatch, tmp_path, ratio, best,
                                                        reason):
  # The probe's two outcomes injected: "best" follows the measured ratio, not the CPU's flags,
  # and is measured at the benchmark's model and batch.
  from utils.runtime import bf16_probe  # pylint: disable=import-outside-toplevel
  measured = []
  monkeypatch.setattr(bf16_probe, "cached_bf16_ratio",
                      lambda shapes: measured.append(shapes) or ratio)
  config_path = tmp_path / "bert_config.json"
  config_path.write_text(json.dumps(helpers.tiny_config().to_dict()))
  choice = quality.best_precision_here(str(config_path))
  assert (choice.bf16_ratio, choice.reason) == (ratio, reason)
  assert quality.resolve_variants(["best", "best_packed"], choice.precision) == [
      best, best + "_packed"]
  tiny = helpers.tiny_config()
  assert measured == [(min(quality.BATCH * quality.MAX_SEQ_LENGTH, bf16_probe.MAX_PROBE_ROWS),
                       tiny.hidden_size, tiny.intermediate_size)]
