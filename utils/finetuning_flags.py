"""The command-line flags both fine-tuning scripts take (run_squad.py, run_classifier.py).

The original release's flags keep their names, defaults and meaning; NVIDIA's additions (--horovod,
--amp, --manual_fp16, --use_xla, --num_accumulation_steps, --dllog_path) and ours follow. A script
calls `define_flags()` once, before parsing; nothing here reads the parsed values. A flag another
module already defined (run_pretraining.py, or the other script, imported into the same process by
tests) is left as it is.
"""

from absl import flags


def define_once(define, name, *args):
  """Calls `define(name, *args)` (a flags.DEFINE_<kind>) unless a flag `name` exists already."""
  if name not in flags.FLAGS:
    define(name, *args)


def define_flags(max_seq_length, batch_flags):
  """Defines the shared flags.

  Args:
    max_seq_length: the script's default --max_seq_length (384 for SQuAD, 128 for classification).
    batch_flags: dict flag name -> default for the script's batch-size flags besides
      --train_batch_size (e.g. {"predict_batch_size": 8}).
  """
  # The original release's.
  define_once(flags.DEFINE_string, "bert_config_file", None,
              "bert_config.json of the pretrained model.")
  define_once(flags.DEFINE_string, "vocab_file", None,
              "The vocabulary the model was pretrained with.")
  define_once(flags.DEFINE_string, "output_dir", None,
              "Where checkpoints, records and results are written.")
  define_once(flags.DEFINE_string, "init_checkpoint", None,
              "Checkpoint to start from (pretrained BERT).")
  define_once(flags.DEFINE_bool, "do_lower_case", True, "Lower-case the text (uncased models).")
  define_once(flags.DEFINE_integer, "max_seq_length", max_seq_length,
              "Tokens per sequence after WordPiece tokenisation (longer input is "
              "truncated or windowed, shorter padded).")
  define_once(flags.DEFINE_bool, "do_train", False, "Fine-tune.")
  define_once(flags.DEFINE_integer, "train_batch_size", 32,
              "Per-worker batch of one micro-step. Global batch = train_batch_size x "
              "num_accumulation_steps x workers.")
  for name, default in batch_flags.items():
    define_once(flags.DEFINE_integer, name, default, "Batch size of %s." % name.split("_")[0])
  define_once(flags.DEFINE_float, "learning_rate", 5e-5,
              "Per-worker peak learning rate (multiplied by the number of workers).")
  define_once(flags.DEFINE_float, "num_train_epochs", 3.0, "Passes over the training examples.")
  define_once(flags.DEFINE_float, "warmup_proportion", 0.1,
              "Fraction of the updates spent in linear warmup.")
  define_once(flags.DEFINE_integer, "save_checkpoints_steps", 1000,
              "Save a checkpoint every this many updates.")
  define_once(flags.DEFINE_integer, "iterations_per_loop", 1000,
              "Steps per TPU loop (TPUEstimator).")
  define_once(flags.DEFINE_bool, "use_tpu", False, "Run on TPU cores with TPUEstimator.")
  define_once(flags.DEFINE_string, "tpu_name", None, "Cloud TPU name or grpc address.")
  define_once(flags.DEFINE_string, "tpu_zone", None, "GCE zone of the Cloud TPU.")
  define_once(flags.DEFINE_string, "gcp_project", None, "GCP project of the Cloud TPU.")
  define_once(flags.DEFINE_string, "master", None, "TensorFlow master URL.")
  define_once(flags.DEFINE_integer, "num_tpu_cores", 8, "TPU cores (with --use_tpu).")
  define_once(flags.DEFINE_bool, "verbose_logging", False,
              "Log the trainable variables and every data-processing warning.")
  # NVIDIA's.
  define_once(flags.DEFINE_bool, "horovod", False, "Run under Horovod (mpirun / horovodrun).")
  define_once(flags.DEFINE_bool, "amp", False,
              "Automatic mixed precision graph rewrite (GPU only; no effect on a CPU).")
  define_once(flags.DEFINE_alias, "use_fp16", "amp")
  define_once(flags.DEFINE_bool, "manual_fp16", False,
              "fp16 encoder (GELU and logits in fp32) with fp32 master weights and dynamic "
              "loss scaling.")
  define_once(flags.DEFINE_bool, "use_xla", False, "XLA JIT compilation of the graph.")
  define_once(flags.DEFINE_integer, "num_accumulation_steps", 1,
              "Micro-steps accumulated per update.")
  define_once(flags.DEFINE_string, "dllog_path", None,
              "dllogger JSON log file; default <output_dir>/bert_dllog.json.")
  define_once(flags.DEFINE_integer, "display_loss_steps", 10,
              "Log step, loss, learning rate and throughput every this many updates.")
  # Ours.
  define_once(flags.DEFINE_enum, "optimizer_type", "adam", ["adam", "lamb"],
              "AdamWeightDecay (the release's fine-tuning optimizer) or LAMB.")
  define_once(flags.DEFINE_bool, "allreduce_post_accumulation", False,
              "Allreduce once per update instead of every micro-step.")
  define_once(flags.DEFINE_integer, "init_loss_scale", 2**32, "Initial dynamic loss scale (fp16).")
  define_once(flags.DEFINE_bool, "deterministic_run", False,
              "Reproducible run: no dropout, training records in file order, fixed seeds, "
              "deterministic ops.")
  define_once(flags.DEFINE_integer, "keep_checkpoint_max", 5, "Checkpoints kept in output_dir.")
