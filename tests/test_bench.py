"""The benchmark helpers: the MFU FLOP formula, the allreduce traffic count, the suite's CPU account,
the benchmarks' imports (without a cycle).

(Speed itself is measured by bench/, never asserted in tests.)
"""

import ast
import glob
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import modeling
from bench import flops
from bench import packing
from bench import precision
from bench import quality
from bench import quality_finetune
from bench import quality_packed
from bench import quality_report
from bench import scaling
from bench import suite_cpu
from bench import throughput
from tests import helpers


def test_flops_formula_by_hand_for_bert_base():
  # BERT-base: H 768, L 12, I 3072, V 30522, T 128, P 20.
  h, l, i, v, t, p = 768, 12, 3072, 30522, 128, 20
  per_layer = 4 * (h * h + h) + 2 * (2 * h) + (h * i + i) + (i * h + h)
  assert per_layer == 7087872
  expected = (6 * 12 * per_layer * t + 12 * l * h * t * t + 6 * p * h * v
              + 6 * (p * h * h + h * h))
  assert flops.model_flops_per_sequence(h, l, i, v, t, p) == expected
  config = modeling.BertConfig.from_json_file("bert_configs/base.json")
  assert flops.config_flops_per_sequence(config, t, p) == expected
  assert abs(expected / 1e9 - 70.021) < 0.001
  # 100% of a 226 GFLOP/s peak is 226e9 / expected sequences per second.
  assert abs(flops.mfu(226e9 / expected, expected, 226e9) - 1.0) < 1e-12


def test_flops_command_line(capsys):
  with pytest.raises(SystemExit) as exit_info:
    flops.main(["--help"])
  assert exit_info.value.code == 0 and "--config" in capsys.readouterr().out
  assert flops.main(["--config", "base", "--seq", "128", "--predictions", "20"]) == 0
  # 70.021 GFLOP: the by-hand figure of test_flops_formula_by_hand_for_bert_base.
  assert capsys.readouterr().out.startswith("base: 70.021 GFLOP per sequence")


def bench_imports():
  """{bench module: the bench modules it imports}, function-level imports included (read with
  `ast`; every benchmark writes `from bench import X`)."""
  graph = {}
  for path in glob.glob(os.path.join(helpers.REPO_ROOT, "bench", "*.py")):
    with open(path) as f:
      tree = ast.parse(f.read(), path)
    graph[os.path.basename(path)[:-3]] = {
        alias.name for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "bench" for alias in node.names}
  return graph


def test_bench_modules_import_each_other_without_a_cycle():
  graph = bench_imports()
  assert "flops" in graph["throughput"] and "flops" in graph["step_bench"]
  # Depth-first: a module met again while its own imports are being walked closes a cycle.
  done, walking = set(), []

  def walk(module):
    assert module not in walking, "import cycle: %s" % " -> ".join(walking + [module])
    if module in done:
      return
    walking.append(module)
    for imported in sorted(graph.get(module, ())):
      walk(imported)
    walking.pop()
    done.add(module)

  for module in sorted(graph):
    walk(module)


def test_allreduce_traffic_counts_every_gradient_per_update():
  config = modeling.BertConfig.from_json_file("bert_configs/tiny.json")
  num_tensors = 5 + 16 * config.num_hidden_layers + 2 + 4 + 1 + 2  # embeddings, layers, pooler, cls
  params = sum(np.prod(shape) for shape in [
      [30522, 128], [2, 128], [512, 128], [128], [128], [128, 128], [128],
      [128, 128], [128], [128], [128], [30522], [2, 128], [2]])
  params += config.num_hidden_layers * (4 * (128 * 128 + 128) + 4 * 128 + 2 * 128 * 512 + 512 + 128)
  for accumulation, post, times in ((1, False, 1), (4, False, 4), (4, True, 1)):
    calls, num_bytes = scaling.allreduce_traffic(config, 16, 4, 2, accumulation, post)
    assert calls == num_tensors * times
    assert num_bytes == params * 4 * times


def test_throughput_bf16_options_and_hardware_note():
  assert throughput.precision_name(throughput.parse_args(["--bf16"])) == "bf16"
  assert throughput.precision_name(
      throughput.parse_args(["--onednn_bf16_rewrite"])) == "bf16-onednn-rewrite"
  assert throughput.precision_name(throughput.parse_args([])) == "fp32"
  with pytest.raises(SystemExit):
    throughput.parse_args(["--bf16", "--manual_fp16"])
  assert "no bf16 units" in throughput.bf16_hardware_note([])
  assert "not bf16's speed" in throughput.bf16_hardware_note([])
  assert "has bf16 units (amx_bf16)" in throughput.bf16_hardware_note(["amx_bf16"])
  assert "unknown" in throughput.bf16_hardware_note(None)


def test_summarise_median_min_max():
  assert throughput.summarise([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
  assert throughput.summarise([4.0, 1.0, 2.0, 3.0]) == (2.5, 1.0, 4.0)


def test_scaling_host_list_sets_workers_and_launcher():
  assert scaling.num_workers("hostA:1,hostB:1") == 2
  assert scaling.num_workers("localhost:2") == 2
  assert scaling.num_workers("a:2,b:2,c:4") == 8
  for bad in ("hostA", "hostA:0", "hostA:1,", "a:x"):
    try:
      scaling.num_workers(bad)
    except ValueError as e:
      assert repr(bad.split(",")[-1]) in str(e)
    else:
      raise AssertionError("accepted %r" % bad)
  command = scaling.horovodrun_command("hostA:1,hostB:1", "cl0")
  assert command[1:] == ["-np", "2", "-H", "hostA:1,hostB:1", "--gloo", "--disable-cache",
                         "--network-interface", "cl0"]
  assert "--network-interface" not in scaling.horovodrun_command("localhost:2")


ORIGINAL_LOG = """INFO:tensorflow:Saving checkpoints for 0 into /out/model.ckpt.
I1125 18:08:09.771528 1396 basic_session_run_hooks.py:632] Saving checkpoints for 0 into /out
INFO:tensorflow:global_step/sec: 2.5
I1125 18:08:10.824156 1396 tpu_estimator.py:2391] global_step/sec: 2.5
INFO:tensorflow:examples/sec: 20.0
I1125 18:08:10.824300 1396 tpu_estimator.py:2392] examples/sec: 20.0
I1125 18:08:11.324156 1396 tpu_estimator.py:2391] global_step/sec: 0.5
I1125 18:08:13.324156 1396 tpu_estimator.py:2391] global_step/sec: 1.25e-1
I1125 18:08:13.524156 1396 estimator.py:361] Loss for final step: 11.067584.""".splitlines()


def test_precision_reads_the_originals_per_update_lines_by_hand():
  # One rate per update (the stamped copies only), x batch 8: 2.5 -> 20, 0.5 -> 4, 0.125 -> 1.
  rates, end = precision.original_updates(ORIGINAL_LOG, 8, 2026)
  assert rates == [20.0, 4.0, 1.0]
  # Its first update ends at the first stamped rate line: 18:08:10.824156 of that day.
  assert end == time.mktime((2026, 11, 25, 18, 8, 10, 0, 0, -1)) + 0.824156
  assert precision.original_updates(ORIGINAL_LOG[:2], 8, 2026) == ([], None)


def test_precision_job_figures_median_after_warmup(tmp_path):
  args = precision.parse_args(["--batch", "8", "--steps", "4", "--warmup", "1"])
  start = time.mktime((2026, 11, 25, 18, 8, 0, 0, 0, -1))
  # The original: updates at 20, 4, 1 seq/s; after 1 warm-up update the median of 4 and 1.
  seq_per_s, startup = precision.job_figures("original", args, start, ORIGINAL_LOG, None)
  assert seq_per_s == 2.5 and abs(startup - 10.824156) < 1e-6
  # Ours: the run log's per-update throughput; start-up to its first update's timestamp.
  lines = ['DLLL {"timestamp": "%.3f", "type": "LOG", "step": "PARAMETER", "data": {}}' % start]
  for step, rate in enumerate([3.0, 9.0, 5.0, 7.0], 1):
    lines.append('DLLL {"timestamp": "%.3f", "type": "LOG", "step": %d, "data": '
                 '{"throughput_train": %s}}' % (start + 12 + step, step, rate))
  (tmp_path / "bert_dllog.json").write_text("\n".join(lines) + "\n")
  seq_per_s, startup = precision.job_figures("bf16", args, start, [], str(tmp_path))
  assert seq_per_s == 7.0 and abs(startup - 13.0) < 1e-3
  # Too few updates logged to leave the warm-up out: an error naming the variant.
  short = precision.parse_args(["--steps", "6", "--warmup", "4"])
  with pytest.raises(SystemExit, match="fp32: 4 per-update figures logged"):
    precision.job_figures("fp32", short, start, [], str(tmp_path))


def test_precision_jobs_differ_only_in_what_the_variant_names():
  args = precision.parse_args(["--batch", "8", "--variants", "original,fp32,bf16,bf16+rewrite"])
  commands = {v: precision.job_command(v, args, "c.json", "/data", "/out", 14)
              for v in args.variants}
  original, env = commands["original"]
  assert original[1:5] == ["-m", "tests.reference.original_bert", "run_pretraining", "--"]
  assert "--input_file=/data/part-*.tfrecord" in original and env == {}
  fp32, env = commands["fp32"]
  assert fp32[1].endswith("run_pretraining.py") and env == {}
  for flag in ("--num_train_steps=14", "--train_batch_size=8", "--bert_config_file=c.json"):
    assert flag in original and flag in fp32
  assert commands["bf16"][0] == fp32 + ["--bf16"] and commands["bf16"][1] == {}
  assert commands["bf16+rewrite"] == (fp32 + ["--bf16"], {"ONEDNN_BF16_REWRITE": "1"})
  assert "--display_loss_steps=1" in fp32
  for bad in (["--variants", "fp32,fp64"], ["--steps", "5", "--warmup", "5"]):
    with pytest.raises(SystemExit):
      precision.parse_args(bad)


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
  assert quality.resolve_variants(["best", "adam_fp32", "lamb_bf16"], ["amx_bf16"]) == [
      "lamb_bf16", "adam_fp32"]
  assert quality.resolve_variants(["best", "original"], []) == ["lamb_fp32", "original"]
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
  bf16, no_bf16 = ["amx_bf16"], []
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


def test_packing_figures_are_medians_after_the_warmup(monkeypatch):
  lines = [{"step": step, "data": {"throughput_train": rate, "rows_per_sec": rate / 2}}
           for step, rate in ((1, 1.0), (2, 100.0), (3, 30.0), (4, 10.0), (5, 20.0))]
  monkeypatch.setattr(throughput, "run_training", lambda *args: (lines, 0.0, 0))
  args = packing.parse_args(["--seq=128", "--warmup=2"])
  # Updates 3, 4, 5: medians 20 sequences/s and 10 rows/s.
  assert packing.run_figures(args, "config", "data", "work") == (20.0, 10.0)


def test_packing_rounds_alternate_and_the_ratio_is_of_the_medians(monkeypatch, tmp_path, capsys):
  monkeypatch.setattr(packing, "unpacked_records", lambda seq: "unpacked-dir")
  monkeypatch.setattr(packing, "packed_records", lambda seq, unpacked: (
      "packed-dir", "packed 30 sequences into 20 packs of 128 tokens: padding 20.0% -> 1.0%"))
  monkeypatch.setattr(flops, "config_file", lambda name: name)
  order = []
  figures = {"unpacked-dir": iter([(10.0, 10.0), (14.0, 14.0), (12.0, 12.0)]),
             "packed-dir": iter([(20.0, 11.0), (18.0, 10.0), (30.0, 12.0)])}

  def fake_figures(args, config_path, data_dir, work_dir):
    order.append(data_dir)
    return next(figures[data_dir])

  monkeypatch.setattr(packing, "run_figures", fake_figures)
  assert packing.main(["--rounds=3", "--work_dir=%s" % tmp_path]) == 0
  assert order == ["unpacked-dir", "packed-dir", "packed-dir", "unpacked-dir", "unpacked-dir",
                   "packed-dir"]
  result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert result["unpacked_sequences_per_sec"] == 12.0
  assert result["packed_sequences_per_sec"] == 20.0
  assert result["speedup_sequences_per_sec"] == pytest.approx(20.0 / 12.0)
  assert result["packed_rows_per_sec"] == 11.0
  # Over the data: 11 rows/s x 1.5 sequences per row against 12 sequences/s.
  assert result["speedup_over_the_data"] == pytest.approx(11.0 * 1.5 / 12.0)


def test_suite_cpu_summary_adds_up_by_program_module_and_test():
  records = [
      {"test": "tests/test_a.py::test_one", "program": "run_pretraining.py", "cpu": 8.0},
      {"test": "tests/test_a.py::test_one", "program": "run_pretraining.py", "cpu": 7.0},
      {"test": "tests/test_a.py::test_two", "program": "horovodrun", "cpu": 1.5},
      {"test": "tests/test_b.py::test_three[x]", "program": "run_squad.py", "cpu": 9.0},
      {"test": "", "program": "__main__.py", "cpu": 4.0},
  ]
  summary = suite_cpu.summarize(records, top=3)
  assert summary["recorded"] == 29.5
  assert summary["programs"] == [("run_pretraining.py", 2, 15.0), ("run_squad.py", 1, 9.0),
                                 ("__main__.py", 1, 4.0), ("horovodrun", 1, 1.5)]
  assert summary["modules"] == [("tests/test_a.py", 16.5), ("tests/test_b.py", 9.0),
                                ("(the pytest processes: in-process tests and collection)", 4.0)]
  assert summary["tests"] == [("tests/test_a.py::test_one", 2, 15.0),
                              ("tests/test_b.py::test_three[x]", 1, 9.0),
                              ("(the pytest processes: in-process tests and collection)", 1, 4.0)]


@pytest.mark.e2e
def test_suite_cpu_records_the_processes_a_test_starts():
  proc = subprocess.run(
      [sys.executable, "bench/suite_cpu.py", "--workers", "0", "--",
       "tests/test_training_flags.py", "-k", "help"],
      capture_output=True, text=True, cwd=helpers.REPO_ROOT, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  out = proc.stdout
  assert out.startswith("pytest exit 0; 3 passed")
  # The three --helpshort runs of run_pretraining.py, run_squad.py and run_classifier.py, each a
  # Python process that started TensorFlow's flags (at least a few tenths of a CPU second), plus
  # pytest's own process.
  programs = {line.split()[2]: (int(line.split()[1]), float(line.split()[0]))
              for line in out.split("CPU s  processes  program\n")[1].split("\n\n")[0].splitlines()}
  for script in ("run_pretraining.py", "run_squad.py", "run_classifier.py"):
    assert programs[script][0] == 1 and programs[script][1] > 0, (script, out)
  modules = out.split("CPU s  module\n")[1].split("\n\n")[0]
  assert "tests/test_training_flags.py" in modules
  tests = out.split("CPU s  processes  test\n")[1]
  assert sum("test_help_shows_the_scripts_defaults_and_the_shared_flags[" in line
             for line in tests.splitlines()) == 3
