"""The project's library below the scripts, one sub-package per layer, lowest first.

  core/         errors and exit codes, argument checks, paths, environment switches, graph names,
                output directories written whole (staging)
  (top level)   the release's modules: modeling, optimization, tokenization, fused_layer_norm,
                gpu_environment, and fused_blocks (--bf16's compiled kernels)
  runtime/      the process: command-line entry, Horovod, session config, output-dir lock, workers,
                the data generator's worker pool, free disk space, stop signals, the CPU's bf16
                units
  runlog/       the run's log: dllogger lines, the training meter, plots, golden losses
  data/         pretraining records: the input pipeline, record checks, the data generator's
                instances (sampling, masking, serialising) and record encoder, the vocabulary
                trainer
  model/        what is built on `modeling.BertModel`: the pretraining heads, checkpoints scored on
                held-out records
  checkpoints/  what a checkpoint holds, resume compatibility, the release bundle, recovery (the
                checkpoint to resume from, partial saves, checkpoint health), the Hugging Face
                directory (safetensors, torch pickles), the encoder SavedModel
  training/     the Estimator job: the script lifecycle, shared flags, model_fn, hooks (training
                log, checkpoint saver, weight sync, evaluation timing, health), determinism
  finetuning/   the fine-tuning application: SQuAD and classification data, scoring, records
  (utils/*.py)  command-line tools: `python -m utils.export_release`, `utils.plot_log`,
                `utils.regression`, `utils.check_records`

A module imports its own package and the layers listed before it, never a later one nor another
package of its own layer (runtime, runlog and data are siblings), and no library module imports an
entry script (`run_*.py`, `create_pretraining_data.py`, `scripts/`, `bench/`, `tests/`);
`tests/test_layering.py` checks both. No library module reads absl's global `FLAGS` except
`training/lifecycle.script_main`, which is each script's `main`: it reads the shared flags once
into a typed, frozen `training/job_config.JobConfig` for the lifecycle's steps, and passes the
parsed flags to the script for its own (and fine-tuning's `task.py`); everything below them takes
plain values (`training/flags.py` and `finetuning/flags.py` define the shared flags, and read
none). Horovod is
imported by `runtime/hvd_utils.py` only, and is optional everywhere. docs/DESIGN.md section 2 describes the layout.
"""

# The layers, lowest first: each a tuple of (package, its modules or packages); packages of one
# layer are siblings. tests/test_layering.py reads this.
LAYERS = (
    (("core", ("utils.core",)),),
    (("release", ("modeling", "optimization", "tokenization", "fused_layer_norm",
                   "fused_blocks", "gpu_environment")),),
    (("runtime", ("utils.runtime",)), ("runlog", ("utils.runlog",)), ("data", ("utils.data",))),
    (("model", ("utils.model",)),),
    (("checkpoints", ("utils.checkpoints",)),),
    (("training", ("utils.training",)),),
    (("finetuning", ("utils.finetuning",)),),
    (("tools", ("utils.export_release", "utils.plot_log", "utils.regression",
                 "utils.check_records")),),
)
# Entry points: scripts run from the command line, benchmarks and tests. No library module
# imports one.
ENTRY_POINTS = ("run_pretraining", "run_squad", "run_classifier", "create_pretraining_data",
                "pack_pretraining_data",
                "scripts", "bench", "tests", "fuzz")
