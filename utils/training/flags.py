"""The command-line flags every Estimator script takes: run_pretraining.py, run_squad.py and
run_classifier.py.

Each flag is defined once, here, when this module is first imported (the scripts import it), so
importing several scripts into one process defines nothing twice. The names, meanings and defaults
are those of the original release and NVIDIA's scripts; where the scripts' defaults differ
(--max_seq_length: 512 for pretraining, 384 for SQuAD, 128 for classification; --optimizer_type:
LAMB for pretraining, AdamWeightDecay for fine-tuning), each script passes its own to
`apply_script_defaults`, which `entry.script_main` calls before the flags are used (and, from the
command line, before they are parsed, so `--help` shows them). Nothing here reads a parsed value:
`utils/training/job_config.py` reads them once into a `JobConfig`, with the rules of their values.

A script's own flags (its data and task) stay in the script; `utils/finetuning/flags.py` holds the
ones both fine-tuning scripts take.
"""

from absl import flags

# The default --seed of a deterministic run (initial weights, input order, dropout masks).
DEFAULT_SEED = 12345

# Model, checkpoints and outputs.
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.")
# Fine-tuning tokenizes with it; pretraining draws the masks of records without masks with it.
flags.DEFINE_string("vocab_file", None,
                    "The model's vocabulary (vocab.txt): fine-tuning tokenizes with it; "
                    "pretraining draws the masks of records without masks with it.")
flags.DEFINE_string("output_dir", None,
                    "Where checkpoints, summaries, records, logs and results are written.")
flags.DEFINE_string("init_checkpoint", None,
                    "Checkpoint to initialise the matching variables from (e.g. a released "
                    "bert_model.ckpt, or phase 1 for phase 2).")
flags.DEFINE_string("dllog_path", None,
                    "dllogger JSON log file; default <output_dir>/bert_dllog.json.")
flags.DEFINE_integer("max_seq_length", 128,
                     "Tokens per sequence (pretraining: must match the records; fine-tuning: "
                     "longer input is truncated or windowed, shorter padded).")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Save a checkpoint every this many updates.")
flags.DEFINE_integer("save_checkpoints_secs", None,
                     "Save a checkpoint every this many seconds instead (a hard kill loses at most "
                     "that much training); excludes --save_checkpoints_steps.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept in output_dir.")
flags.DEFINE_integer("resume_from_step", None,
                     "Resume from the checkpoint of this step in --output_dir instead of the "
                     "newest (e.g. the one before a divergence); the newer checkpoints are moved "
                     "to <output_dir>/set_aside_after_step_N. 0: start from the initial weights.")
flags.DEFINE_bool("save_graph_def", False,
                  "Write the graph (graph.pbtxt, the TensorBoard graph, a .meta file per "
                  "checkpoint); not needed to resume or to initialise from a checkpoint.")

# What to run.
flags.DEFINE_bool("do_train", False, "Train.")
flags.DEFINE_bool("do_eval", False, "Evaluate (rank 0) after training.")
flags.DEFINE_integer("train_batch_size", 32,
                     "Per-worker batch of one micro-step. Global batch = train_batch_size x "
                     "num_accumulation_steps x workers.")
flags.DEFINE_integer("eval_batch_size", 8, "Evaluation batch size.")

# The training step.
flags.DEFINE_enum("optimizer_type", "lamb", ["lamb", "adam"],
                  "LAMB or AdamWeightDecay (the release's fine-tuning optimizer).")
flags.DEFINE_float("learning_rate", 5e-5,
                   "Per-worker peak learning rate; multiplied by the number of workers.")
flags.DEFINE_integer("num_accumulation_steps", 1,
                     "Micro-steps accumulated per optimizer update. Global batch = "
                     "train_batch_size x num_accumulation_steps x workers.")
flags.DEFINE_bool("allreduce_post_accumulation", False,
                  "Allreduce once per update (after accumulating) instead of every micro-step.")
flags.DEFINE_bool("manual_fp16", False,
                  "fp16 encoder (GELU and logits in fp32) with fp32 master weights and dynamic "
                  "loss scaling.")
flags.DEFINE_bool("amp", False,
                  "Automatic mixed precision graph rewrite (GPU only; no effect on a CPU).")
flags.DEFINE_alias("use_fp16", "amp")
flags.DEFINE_bool("bf16", False,
                  "bf16 encoder with fp32 master weights, fp32 layer-norm statistics, softmax, "
                  "GELU, heads, losses and optimizer update; no loss scaling. Fast on Zen 4/5 "
                  "(avx512_bf16), Xeons with AMX, Ampere or newer GPUs and TPUs; slower than "
                  "fp32 on Xeons without AMX and CPUs without bf16 units (the start line says "
                  "the measured ratio; --precision=auto chooses).")
flags.DEFINE_enum("precision", None, ["auto", "fp32", "fp16", "amp", "bf16"],
                  "The precision by name: fp16, amp and bf16 are --manual_fp16, --amp and --bf16; "
                  "auto measures the model's products in fp32 and bf16 here (once per machine, "
                  "cached) and takes bf16 where they run faster, else fp32.")
flags.DEFINE_integer("init_loss_scale", 2**32, "Initial dynamic loss scale (fp16).")
flags.DEFINE_bool("use_xla", False, "XLA JIT compilation of the graph.")
flags.DEFINE_bool("deterministic_run", False,
                  "Reproducible run: seeded initialisation and input order, single-threaded input, "
                  "dropout masks drawn from (--seed, micro-step, worker, layer, site), "
                  "deterministic ops.")
flags.DEFINE_integer("seed", DEFAULT_SEED,
                     "Seed of a --deterministic_run (initial weights, input shuffles, dropout).")

# Logging.
flags.DEFINE_integer("display_loss_steps", 10, "Log the training losses every this many updates.")
flags.DEFINE_bool("report_loss", True, "Log the training losses.")
flags.DEFINE_bool("verbose_logging", False,
                  "List every trainable variable (and, fine-tuning, every data-processing "
                  "warning).")

# Workers and the session.
flags.DEFINE_bool("horovod", False, "Run under Horovod (mpirun / horovodrun).")
flags.DEFINE_bool("node_local_output_dir", False,
                  "output_dir is on a node-local disk: each node's local rank 0 uses (and saves "
                  "checkpoints to) output_dir.")
flags.DEFINE_bool("checkpoint_all_workers", False,
                  "Every worker saves checkpoints (ranks > 0 into output_dir/worker_<rank>).")
flags.DEFINE_bool("force_weight_sync", False,
                  "Average the trainable variables across workers every num_accumulation_steps "
                  "iterations (also env FORCE_WEIGHT_SYNC=true).")
flags.DEFINE_bool("enable_scoped_allocator", False,
                  "Scoped allocator for HorovodAllreduce (see docs/DECISIONS.md: Horovod 0.28.1's "
                  "kernel rejects it). TF_DISABLE_SCOPED_ALLOCATOR=1 always turns it off.")
flags.DEFINE_integer("intra_op_threads", 0, "Threads inside one op (0: TensorFlow decides).")
flags.DEFINE_integer("inter_op_threads", 0, "Ops run in parallel (0: TensorFlow decides).")

# The original release's TPU flags, and ours.
flags.DEFINE_bool("use_tpu", False, "Run on TPU cores with TPUEstimator.")
flags.DEFINE_string("tpu_name", None, "Cloud TPU name or grpc address.")
flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU.")
flags.DEFINE_string("gcp_project", None, "GCP project of the Cloud TPU.")
flags.DEFINE_string("master", None, "TensorFlow master URL.")
flags.DEFINE_integer("num_tpu_cores", 8, "TPU cores (with --use_tpu).")
flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per TPU loop (TPUEstimator).")
flags.DEFINE_bool("tpu_estimator", False,
                  "Build a TPUEstimator even without --use_tpu (its CPU/GPU path); implied by "
                  "--use_tpu.")


def apply_script_defaults(flag_values, defaults):
  """Gives flags a script's own defaults; a value given on the command line stays.

  Args:
    flag_values: `absl.flags.FLAGS` (parsed or not).
    defaults: dict flag name -> the script's default.
  """
  for name, value in (defaults or {}).items():
    flag_values.set_default(name, value)
