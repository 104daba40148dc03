"""The project's library below the scripts, one sub-package per layer, lowest first.

  core/         errors and exit codes, argument checks, paths, environment switches, graph names
  (top level)   the release's modules: modeling, optimization, tokenization, fused_layer_norm,
                gpu_environment
  runtime/      the process: command-line entry, Horovod, session config, output-dir lock, workers
  runlog/       the run's log: dllogger lines, the training meter, plots, golden losses
  data/         pretraining records: the input pipeline, record checks, the record encoder
  model/        what is built on `modeling.BertModel`: the pretraining heads
  checkpoints/  what a checkpoint holds, resume compatibility, the release bundle
  training/     the Estimator job: the script lifecycle, shared flags, model_fn, hooks,
                determinism
  finetuning/   the fine-tuning application: SQuAD and classification data, scoring, records
  (utils/*.py)  command-line tools: `python -m utils.export_release`, `utils.plot_log`,
                `utils.regression`

A module imports its own layer and the layers listed before it, never one after it, and no library
module imports an entry script (`run_*.py`, `create_pretraining_data.py`, `scripts/`, `bench/`);
`tests/test_layering.py` checks both. Library modules take plain arguments: only a script's `main`
reads parsed flags (`training/flags.py` defines the flags the Estimator scripts share, and reads
none). Horovod is imported by `runtime/hvd_utils.py` only, and is optional everywhere.
docs/DESIGN.md section 2 describes the layout.
"""

# (layer, its modules or packages), lowest first; tests/test_layering.py reads this.
LAYERS = (
    ("core", ("utils.core",)),
    ("release", ("modeling", "optimization", "tokenization", "fused_layer_norm",
                 "gpu_environment")),
    ("runtime", ("utils.runtime",)),
    ("runlog", ("utils.runlog",)),
    ("data", ("utils.data",)),
    ("model", ("utils.model",)),
    ("checkpoints", ("utils.checkpoints",)),
    ("training", ("utils.training",)),
    ("finetuning", ("utils.finetuning",)),
    ("tools", ("utils.export_release", "utils.plot_log", "utils.regression")),
)
