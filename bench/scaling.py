"""Horovod scaling: 1 process with 1 intra-op thread against `horovodrun` with 1 thread per
worker, for several accumulation settings, per-micro-step and post-accumulation allreduce. Without
--hosts the workers are 2 on this machine (localhost:2); with --hosts they are the host list's
slots (e.g. hostA:1,hostB:1, run from hostA; the 1-worker run is on this host).

  PY=$(make -s python-path | tail -n1)
  $PY bench/scaling.py --config tiny --batch 8 --steps 30
  $PY -m tests.cluster.cluster -- $PY bench/scaling.py --hosts hostA:1,hostB:1 --network_interface cl0

scaling efficiency = (N-worker sequences/s) / (N x 1-worker sequences/s); 1.0 is perfect. Per update
it also reports the allreduce calls and bytes, counted in the graph `create_optimizer` builds (a
recording stand-in for Horovod collects every allreduce it issues; per-micro-step allreduces run
`num_accumulation_steps` times per update). With --bf16 the allreduced gradients are fp32 as well
(Horovod's MPI/Gloo allreduce has no bf16 type), so the bytes are the fp32 run's.
"""

import argparse
import json
import os
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import flops  # noqa: E402
from bench import throughput  # noqa: E402


class _RecordingHorovod(object):
  """Just enough of `horovod.tensorflow` for create_optimizer: records each allreduce."""
  Average = "average"

  def __init__(self):
    self.calls = []

  def allreduce(self, tensor, op=None):
    self.calls.append((tensor.shape.num_elements(), tensor.dtype.size, op))
    return tensor


def allreduce_traffic(config, seq, predictions, batch, accumulation, post):
  """(calls, bytes) of gradient allreduce per optimizer update, counted in the built graph."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import optimization  # pylint: disable=g-import-not-at-top
  from utils.model import pretraining  # pylint: disable=g-import-not-at-top
  tf.compat.v1.disable_eager_execution()
  recorder = _RecordingHorovod()
  with tf.Graph().as_default():
    features = {
        "input_ids": tf.zeros([batch, seq], tf.int32), "input_mask": tf.ones([batch, seq], tf.int32),
        "segment_ids": tf.zeros([batch, seq], tf.int32),
        "masked_lm_positions": tf.zeros([batch, predictions], tf.int32),
        "masked_lm_ids": tf.zeros([batch, predictions], tf.int32),
        "masked_lm_weights": tf.ones([batch, predictions], tf.float32),
        "next_sentence_labels": tf.zeros([batch, 1], tf.int32),
    }
    built = pretraining.build_pretraining_model(config, features, is_training=True)
    optimization.create_optimizer(built["total_loss"], 1e-4, 100, 10, hvd=recorder,
                                  num_accumulation_steps=accumulation,
                                  allreduce_post_accumulation=post)
  times_per_update = 1 if post or accumulation == 1 else accumulation
  calls = len(recorder.calls) * times_per_update
  num_bytes = int(np.sum([n * size for n, size, _ in recorder.calls])) * times_per_update
  assert all(op == _RecordingHorovod.Average for _, _, op in recorder.calls)
  return calls, num_bytes


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="tiny")
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--predictions", type=int, default=20)
  parser.add_argument("--batch", type=int, default=8, help="per-worker train_batch_size")
  parser.add_argument("--steps", type=int, default=30, help="optimizer updates per run")
  parser.add_argument("--warmup", type=int, default=5)
  parser.add_argument("--accumulations", default="1,4,16")
  parser.add_argument("--optimizer", default="lamb", choices=["lamb", "adam"])
  parser.add_argument("--bf16", action="store_true", help="run_pretraining.py --bf16")
  parser.add_argument("--hosts", default="localhost:2",
                      help="horovodrun host list host:slots,...; the workers are its slots")
  parser.add_argument("--network_interface", default="",
                      help="horovodrun --network-interface (the NIC every host has)")
  args = parser.parse_args(argv)
  try:
    args.num_workers = num_workers(args.hosts)
  except ValueError as e:
    parser.error("--hosts: %s" % e)
  return args


def num_workers(hosts):
  """Total slots of a host list "host:slots,..." (e.g. "hostA:1,hostB:1" -> 2).

  Raises:
    ValueError: naming the entry that is not host:slots with slots >= 1.
  """
  total = 0
  for entry in hosts.split(","):
    host, _, slots = entry.partition(":")
    if not host or not slots.isdigit() or int(slots) < 1:
      raise ValueError("expected host:slots (slots >= 1) separated by commas, got %r" % entry)
    total += int(slots)
  return total


def horovodrun_command(hosts, network_interface=""):
  """The Gloo launcher for the host list (with --network-interface when one is given)."""
  command = [os.path.join(os.path.dirname(sys.executable), "horovodrun"),
             "-np", str(num_workers(hosts)), "-H", hosts, "--gloo", "--disable-cache"]
  if network_interface:
    command += ["--network-interface", network_interface]
  return command


def _throughput_args(args, accumulation):
  return throughput.parse_args([
      "--config", args.config, "--seq", str(args.seq), "--predictions", str(args.predictions),
      "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
      "--accumulation", str(accumulation), "--optimizer", args.optimizer,
      "--intra_op_threads", "1", "--inter_op_threads", "1", "--peak_runs", "0"]
      + (["--bf16"] if args.bf16 else []))


def main(argv=None):
  args = parse_args(argv)
  import modeling  # pylint: disable=g-import-not-at-top
  config_path = flops.config_file(args.config)
  config = modeling.BertConfig.from_json_file(config_path)
  data_dir = throughput.cached_records(config.vocab_size, args.seq, args.predictions)
  horovodrun = horovodrun_command(args.hosts, args.network_interface)
  workers = args.num_workers
  rows = []
  for accumulation in [int(a) for a in args.accumulations.split(",")]:
    run_args = _throughput_args(args, accumulation)
    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as work_dir:
      steps, _, _ = throughput.run_training(run_args, config_path, data_dir, work_dir)
    single, _, _ = throughput.steady_summary(steps, args.warmup)
    for post in (False, True):
      with tempfile.TemporaryDirectory(prefix="bench_scaling_") as work_dir:
        extra = ["--horovod"] + (["--allreduce_post_accumulation"] if post else [])
        steps, _, _ = throughput.run_training(run_args, config_path, data_dir, work_dir,
                                              launcher=horovodrun, extra_flags=extra)
      multi, _, _ = throughput.steady_summary(steps, args.warmup)
      calls, num_bytes = allreduce_traffic(config, args.seq, args.predictions, args.batch,
                                           accumulation, post)
      row = {"config": args.config, "batch": args.batch, "hosts": args.hosts,
             "precision": "bf16" if args.bf16 else "fp32",
             "workers": workers, "accumulation": accumulation,
             "post_accumulation": post, "seq_per_s_1_worker": round(single, 2),
             "seq_per_s_n_workers": round(multi, 2),
             "scaling_efficiency": round(multi / (workers * single), 3),
             "allreduce_calls_per_update": calls,
             "allreduce_mb_per_update": round(num_bytes / 2**20, 2)}
      print(json.dumps(row), flush=True)
      rows.append(row)
  print_table(rows)
  return rows


def print_table(rows):
  header = ("hosts", "accum", "post", "1 worker seq/s", "N workers seq/s", "efficiency",
            "allreduce calls/update", "MB/update")
  print(" | ".join(header))
  for r in rows:
    print(" | ".join(str(v) for v in (
        r["hosts"], r["accumulation"], "yes" if r["post_accumulation"] else "no",
        r["seq_per_s_1_worker"], r["seq_per_s_n_workers"], r["scaling_efficiency"],
        r["allreduce_calls_per_update"],
        r["allreduce_mb_per_update"])))


if __name__ == "__main__":
  main()
