"""Training-step benchmark: the model and optimizer alone, without the Estimator.

Builds `run_pretraining.build_pretraining_model` and `optimization.create_optimizer` on synthetic
batches from a small in-memory `tf.data` pipeline (the values reach the graph through an iterator,
so Grappler cannot fold any of the forward or backward pass away), runs N training steps after a
warm-up and reports step times, sequences/s, model FLOPs per sequence (bench/flops.py), the fp32
matmul peak measured in the same run, and the model-FLOP utilisation (MFU).

  PY=$(make -s python-path | tail -n1)
  $PY bench/step_bench.py --config base --batch 8
  $PY bench/step_bench.py --config tiny --batch 32 --optimizer adam --xla
  $PY bench/step_bench.py --config small --batch 8 --profile 3 --trace_file /tmp/small.json

`--profile N` traces N extra steps (FULL_TRACE) and prints where the time goes, per op type and
per part of the step (forward, backward, optimizer); `--trace_file` also writes the last traced
step as a Chrome trace (chrome://tracing, Perfetto).

The last line printed is one JSON object with every figure.
"""

import argparse
import collections
import json
import os
import resource
import statistics
import sys
import time

import psutil

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CONFIGS = ("tiny", "mini", "small", "medium", "base", "large")


def process_age_seconds():
  """Seconds since this process started."""
  return time.time() - psutil.Process().create_time()


def cpu_snapshot():
  """(busy CPU seconds of the whole machine, CPU seconds of this process).

  The difference of two snapshots tells how much CPU other processes took meanwhile: the
  benchmark is only meaningful when that is close to zero (the machine has 2 cores).
  """
  machine = psutil.cpu_times()
  # Idle and waiting for I/O are not busy.
  busy = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
  own = psutil.Process().cpu_times()
  return busy, own.user + own.system


def other_cpu_share(before, after, wall_seconds):
  """Average number of cores other processes used between two `cpu_snapshot`s."""
  return ((after[0] - before[0]) - (after[1] - before[1])) / wall_seconds


def parse_args(argv=None):
  """Command-line options (see the module doc)."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--config", default="base",
                      help="one of %s (bert_configs/<name>.json) or a config path" % (_CONFIGS,))
  parser.add_argument("--batch", type=int, default=8, help="sequences per step")
  parser.add_argument("--seq", type=int, default=128, help="sequence length T")
  parser.add_argument("--predictions", type=int, default=20, help="max_predictions_per_seq P")
  parser.add_argument("--steps", type=int, default=10, help="timed steps")
  parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
  parser.add_argument("--optimizer", choices=("lamb", "adam"), default="lamb")
  parser.add_argument("--accumulation", type=int, default=1,
                      help="num_accumulation_steps (every step is one micro-step)")
  parser.add_argument("--fp16", action="store_true", help="manual fp16 compute (slow on CPU)")
  parser.add_argument("--bf16", action="store_true",
                      help="bf16 compute (fast only on CPUs with avx512_bf16 / amx_bf16)")
  parser.add_argument("--no_dropout", action="store_true", help="build with is_training=False")
  parser.add_argument("--one_hot_embeddings", action="store_true",
                      help="word embeddings by one-hot matmul instead of a gather")
  parser.add_argument("--intra_op_threads", type=int, default=0, help="0: TensorFlow decides")
  parser.add_argument("--inter_op_threads", type=int, default=0, help="0: TensorFlow decides")
  parser.add_argument("--xla", action="store_true",
                      help="XLA auto-clustering of the whole graph on the CPU "
                           "(TF_XLA_FLAGS=--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit)")
  parser.add_argument("--profile", type=int, default=0, metavar="N",
                      help="trace N more steps and print the time per op type and per part")
  parser.add_argument("--trace_file", default="",
                      help="with --profile: write the last traced step as a Chrome trace")
  parser.add_argument("--top", type=int, default=25, help="rows of the op-type table")
  parser.add_argument("--peak_runs", type=int, default=5,
                      help="4096^3 matmuls for the peak (best of; bf16 ones with --bf16); 0 skips "
                           "the peak")
  parser.add_argument("--peak", type=float, default=0.0,
                      help="use this peak (GFLOP/s) instead of measuring it")
  parser.add_argument("--seed", type=int, default=1)
  args = parser.parse_args(argv)
  if args.fp16 and args.bf16:
    parser.error("--fp16 and --bf16: choose one")
  return args


def _configure_environment(args):
  """Environment that must be set before TensorFlow is imported."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  if args.xla:
    flags = os.environ.get("TF_XLA_FLAGS", "")
    os.environ["TF_XLA_FLAGS"] = (flags + " --tf_xla_auto_jit=2 --tf_xla_cpu_global_jit").strip()


def synthetic_batches(np, rng, num, batch_size, seq_length, predictions, vocab_size):
  """`num` x `batch_size` random pretraining examples (docs/DESIGN.md section 3 layout, int32).

  Sequence lengths vary (padding at the end, as in real data); every example has between P/2 and
  P real predictions at distinct positions.
  """
  n = num * batch_size
  input_ids = rng.randint(999, vocab_size, size=(n, seq_length)).astype(np.int32)
  input_mask = np.ones((n, seq_length), np.int32)
  segment_ids = np.zeros((n, seq_length), np.int32)
  positions = np.zeros((n, predictions), np.int32)
  ids = np.zeros((n, predictions), np.int32)
  weights = np.zeros((n, predictions), np.float32)
  for i in range(n):
    length = rng.randint(seq_length * 3 // 4, seq_length + 1)
    input_ids[i, length:] = 0
    input_mask[i, length:] = 0
    segment_ids[i, length // 2:length] = 1
    real = rng.randint(max(1, predictions // 2), predictions + 1)
    positions[i, :real] = np.sort(rng.choice(np.arange(1, length - 1), real, replace=False))
    ids[i, :real] = input_ids[i, positions[i, :real]]
    weights[i, :real] = 1.0
  return {
      "input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
      "masked_lm_positions": positions, "masked_lm_ids": ids, "masked_lm_weights": weights,
      "next_sentence_labels": rng.randint(0, 2, size=(n, 1)).astype(np.int32),
  }


def _phase(node_name):
  """Which part of the step a node belongs to, from its name."""
  if "gradients" in node_name.split("/")[0] or "/gradients/" in node_name:
    return "backward"
  if node_name.startswith(("bert/", "cls/")):
    return "forward"
  if node_name.startswith(("IteratorGetNext", "OneShotIterator", "_SOURCE", "_retval", "_arg")):
    return "input/runtime"
  return "optimizer/other"


def profile_steps(tf, sess, train_op, num_steps, trace_file, top):
  """Runs `num_steps` traced steps; prints and returns the per-op-type and per-phase time."""
  from tensorflow.python.client import timeline  # pylint: disable=g-import-not-at-top
  tf1 = tf.compat.v1
  by_type = collections.defaultdict(float)
  count_by_type = collections.defaultdict(int)
  by_phase = collections.defaultdict(float)
  wall = 0.0
  run_metadata = None
  for _ in range(num_steps):
    options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
    run_metadata = tf1.RunMetadata()
    start = time.perf_counter()
    sess.run(train_op, options=options, run_metadata=run_metadata)
    wall += time.perf_counter() - start
    for dev_stats in run_metadata.step_stats.dev_stats:
      # Only the device's own op records; "/stream" style duplicates exist on GPUs only.
      for node in dev_stats.node_stats:
        label = node.timeline_label
        op_type = label.split(" = ", 1)[1].split("(", 1)[0] if " = " in label else node.node_name
        micros = node.all_end_rel_micros
        by_type[op_type] += micros / 1e6
        count_by_type[op_type] += 1
        by_phase[_phase(node.node_name)] += micros / 1e6
  if trace_file and run_metadata is not None:
    trace = timeline.Timeline(run_metadata.step_stats)
    with open(trace_file, "w") as f:
      f.write(trace.generate_chrome_trace_format())
  total = sum(by_type.values())
  print("\nprofile: %d traced steps, %.3f s wall per step (tracing adds overhead); op time summed "
        "over threads %.3f s per step" % (num_steps, wall / num_steps, total / num_steps))
  print("%-34s %10s %7s %8s" % ("op type", "ms/step", "share", "ops/step"))
  rows = sorted(by_type.items(), key=lambda item: -item[1])
  for op_type, seconds in rows[:top]:
    print("%-34s %10.2f %6.1f%% %8d" % (op_type, 1e3 * seconds / num_steps,
                                        100.0 * seconds / total,
                                        count_by_type[op_type] // num_steps))
  rest = sum(seconds for _, seconds in rows[top:])
  if rest:
    print("%-34s %10.2f %6.1f%%" % ("(other types)", 1e3 * rest / num_steps, 100.0 * rest / total))
  print("%-34s %10s %7s" % ("part of the step", "ms/step", "share"))
  for phase, seconds in sorted(by_phase.items(), key=lambda item: -item[1]):
    print("%-34s %10.2f %6.1f%%" % (phase, 1e3 * seconds / num_steps, 100.0 * seconds / total))
  return {
      "wall_s_per_step": wall / num_steps,
      "op_s_per_step": total / num_steps,
      "by_type_ms": {k: round(1e3 * v / num_steps, 3) for k, v in rows},
      "count_by_type": {k: count_by_type[k] // num_steps for k, _ in rows},
      "by_phase_ms": {k: round(1e3 * v / num_steps, 3) for k, v in by_phase.items()},
  }


def main(argv=None):
  """Builds, runs and reports one benchmark; returns the result dict (also printed as JSON)."""
  args = parse_args(argv)
  _configure_environment(args)
  if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from utils.runtime import cpu  # pylint: disable=g-import-not-at-top
  import modeling  # pylint: disable=g-import-not-at-top
  import optimization  # pylint: disable=g-import-not-at-top
  from utils.model import pretraining  # pylint: disable=g-import-not-at-top
  from bench import flops  # pylint: disable=g-import-not-at-top
  from bench import throughput  # pylint: disable=g-import-not-at-top
  from utils.runtime import session_config  # pylint: disable=g-import-not-at-top

  tf1 = tf.compat.v1
  tf1.disable_eager_execution()
  import_done = process_age_seconds()

  bert_config = modeling.BertConfig.from_json_file(flops.config_file(args.config))
  rng = np.random.RandomState(args.seed)
  data = synthetic_batches(np, rng, 4, args.batch, args.seq, args.predictions,
                           bert_config.vocab_size)

  build_start = time.perf_counter()
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(args.seed)
    dataset = tf.data.Dataset.from_tensor_slices(data).repeat().batch(
        args.batch, drop_remainder=True).prefetch(2)
    features = tf1.data.make_one_shot_iterator(dataset).get_next()
    built = pretraining.build_pretraining_model(
        bert_config, features, is_training=not args.no_dropout,
        compute_type=tf.float16 if args.fp16 else tf.bfloat16 if args.bf16 else tf.float32,
        use_one_hot_embeddings=args.one_hot_embeddings)
    train_op = optimization.create_optimizer(
        built["total_loss"], 1e-4, num_train_steps=100000, num_warmup_steps=0,
        manual_fp16=args.fp16, bf16=args.bf16, num_accumulation_steps=args.accumulation,
        optimizer_type=args.optimizer, init_loss_scale=2.0 ** 15)
    loss = built["total_loss"]
    global_step_var = tf1.train.get_global_step()
    num_encoder_params = sum(
        int(np.prod(v.shape.as_list())) for v in tf1.trainable_variables()
        if v.op.name.startswith("bert/encoder/"))
    init_op = tf1.global_variables_initializer()
  graph.finalize()
  build_s = time.perf_counter() - build_start

  config = session_config.build_session_config(intra_op_threads=args.intra_op_threads,
                                               inter_op_threads=args.inter_op_threads)
  step_times = []
  with tf1.Session(graph=graph, config=config) as sess:
    init_start = time.perf_counter()
    sess.run(init_op)
    init_s = time.perf_counter() - init_start
    first_start = time.perf_counter()
    first_loss, _ = sess.run([loss, train_op])
    first_step_s = time.perf_counter() - first_start
    start_to_first_step_s = process_age_seconds()
    for _ in range(max(0, args.warmup - 1)):
      sess.run(train_op)
    losses = []
    timed_start, snapshot = time.perf_counter(), cpu_snapshot()
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(args.steps):
      start = time.perf_counter()
      value, _ = sess.run([loss, train_op])
      step_times.append(time.perf_counter() - start)
      losses.append(float(value))
    others = other_cpu_share(snapshot, cpu_snapshot(), time.perf_counter() - timed_start)
    # Minor page faults: memory the allocator hands back to the OS and maps again every step.
    faults_per_step = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before) / max(
        1, args.steps)
    global_step = int(sess.run(global_step_var))
    profile = None
    if args.profile:
      profile = profile_steps(tf, sess, train_op, args.profile, args.trace_file, args.top)
  peak_rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9

  # Every step must have applied its update: a skipped (non-finite) update would be cheaper.
  steps_run = 1 + max(0, args.warmup - 1) + args.steps
  expected_updates = steps_run // args.accumulation
  if global_step != expected_updates or not all(np.isfinite(losses)):
    raise SystemExit("training did not apply every update (global step %d, expected %d; "
                     "losses %s)" % (global_step, expected_updates, losses))

  flops_per_seq = flops.model_flops_per_sequence(
      bert_config.hidden_size, bert_config.num_hidden_layers, bert_config.intermediate_size,
      bert_config.vocab_size, args.seq, args.predictions, num_encoder_params=num_encoder_params)
  assert num_encoder_params == flops.encoder_params(
      bert_config.hidden_size, bert_config.num_hidden_layers, bert_config.intermediate_size)
  if args.peak:
    peak = args.peak * 1e9
  elif args.peak_runs:
    peak = flops.measure_matmul_peak(args.peak_runs,
                                     dtype="bfloat16" if args.bf16 else "float32")
  else:
    peak = float("nan")

  median = statistics.median(step_times)
  seq_per_s = args.batch / median
  result = collections.OrderedDict([
      ("config", args.config), ("batch", args.batch), ("seq", args.seq),
      ("predictions", args.predictions), ("optimizer", args.optimizer),
      ("accumulation", args.accumulation), ("fp16", args.fp16), ("bf16", args.bf16),
      ("dropout", not args.no_dropout), ("xla", args.xla),
      ("one_hot_embeddings", args.one_hot_embeddings),
      ("intra_op_threads", args.intra_op_threads), ("inter_op_threads", args.inter_op_threads),
      ("steps", args.steps), ("warmup", args.warmup),
      ("step_s_median", round(median, 5)), ("step_s_min", round(min(step_times), 5)),
      ("step_s_max", round(max(step_times), 5)),
      ("seq_per_s", round(seq_per_s, 3)),
      ("seq_per_s_best", round(args.batch / min(step_times), 3)),
      ("flops_per_seq", flops_per_seq), ("encoder_params", num_encoder_params),
      ("peak_gflops", round(peak / 1e9, 1)),
      ("mfu", round(flops.mfu(seq_per_s, flops_per_seq, peak), 4)),
      ("mfu_best", round(flops.mfu(args.batch / min(step_times), flops_per_seq, peak), 4)),
      ("import_s", round(import_done, 2)), ("build_s", round(build_s, 2)),
      ("init_s", round(init_s, 2)), ("first_step_s", round(first_step_s, 2)),
      ("start_to_first_step_s", round(start_to_first_step_s, 2)),
      ("peak_rss_gb", round(peak_rss_gb, 3)),
      ("first_loss", round(float(first_loss), 5)), ("last_loss", round(losses[-1], 5)),
      ("page_faults_per_step", int(faults_per_step)),
      ("other_cores_busy", round(others, 2)), ("load_avg_1m", os.getloadavg()[0]),
      ("env", {k: v for k, v in os.environ.items()
               if k.startswith(("TF_ENABLE_", "TF_XLA_", "TF_ONEDNN_", "TF_MKL_", "TF_NUM_",
                                "OMP_", "KMP_", "ONEDNN_", "DNNL_"))}),
  ])
  if args.bf16:
    result["bf16_hardware"] = throughput.bf16_hardware_note(cpu.bf16_units())
  if profile is not None:
    result["profile"] = profile
  print("\n%-8s batch %-3d %-5s  step %.4f s (min %.4f, max %.4f)  %.2f seq/s  "
        "%.3f GFLOP/seq  peak %.1f GFLOP/s  MFU %.1f%% (best step %.1f%%)"
        % (args.config, args.batch, args.optimizer, median, min(step_times), max(step_times),
           seq_per_s, flops_per_seq / 1e9, peak / 1e9, 100 * result["mfu"],
           100 * result["mfu_best"]))
  print("%d minor page faults per step; other processes used %.2f cores during the timed "
        "steps%s" % (faults_per_step, others, " (NOISY: figures are not trustworthy)" if others > 0.1 else ""))
  print("start-up: imports %.1f s, build %.1f s, init %.1f s, first step %.1f s; process start "
        "to end of first step %.1f s; peak RSS %.2f GB"
        % (import_done, build_s, init_s, first_step_s, start_to_first_step_s, peak_rss_gb))
  if args.bf16:
    print("bf16: %s" % result["bf16_hardware"])
  print(json.dumps(result))
  return result


if __name__ == "__main__":
  main()
