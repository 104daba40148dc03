"""The project's library below the scripts, one sub-package per layer, lowest first.

  core/         errors and exit codes, argument checks, paths, environment switches, graph names,
                output directories written whole (staging)
  (top level)   the release's modules: modeling, optimization, tokenization, fused_layer_norm,
                gpu_environment, and fused_blocks (--bf16's compiled kernels)
  runtime/      the process: command-line entry, Horovod, session config, output-dir lock, workers,
                the data generator's worker pool, free disk space, stop signals, the CPU's bf16
                units
  runlog/       the run's log: dllogger lines, the training meter, plots, golden losses, the
                scripts' start line
  data/         pretraining records: the input pipeline, record checks, the data generator's
                instances (sampling, masking, serialising) and record encoder, the vocabulary
                trainer and its command `python -m utils.data.vocabulary` (the module's
                `__main__` block)
  datafiles/    the data tools' runs over files: the generator's records written from text files
                (`create_pretraining_data.py`'s work), records packed and unpacked
                (`pack_pretraining_data.py`'s), each in the worker pool with its outputs published
                whole; the generator's flags, defined once for both scripts and
                `prepare_corpus.py`
  model/        what is built on `modeling.BertModel`: the pretraining heads, checkpoints scored on
                held-out records
  corpus/       raw text to the generator's input (a sibling of model/): dumps, folders and
                files of documents read as documents, their sentences, shards, the manifest of a
                build and its stages (`prepare_corpus.py`'s library)
  checkpoints/  what a checkpoint holds, resume compatibility, the release bundle, recovery (the
                checkpoint to resume from, partial saves, checkpoint health), the Hugging Face
                directory (safetensors, torch pickles), the encoder SavedModel
  training/     the Estimator job: the scripts' entry, shared flags and their config, the job
                (set-up, Estimator calls, training a signal stops, its errors), model_fn, hooks
                (training log, checkpoint saver, weight sync, evaluation timing, health),
                determinism
  finetuning/   the fine-tuning application: SQuAD and classification data, scoring, records, the
                fine-tuning flags and their typed configuration
  (utils/*.py)  command-line tools: `python -m utils.export_release`, `utils.plot_log`,
                `utils.regression`, `utils.check_records`

A module imports its own package and the layers listed before it, never a later one nor another
package of its own layer (runtime, runlog and data are siblings), and no module but a test imports
an entry script (`ENTRY_SCRIPTS`: library modules, the scripts, `scripts/`, `bench/`, `fuzz/`
import none), nor a library module any of `ENTRY_POINTS`; `tests/test_layering.py` checks both. No library module reads absl's global `FLAGS`
except `training/entry.script_main`, which is each script's `main`: it reads the shared flags once
into a typed, frozen `training/job_config.JobConfig` for the job's steps, and passes the parsed
flags to the script, which reads its own once at the top of its `run` (the fine-tuning scripts into
`finetuning/config.FinetuningConfig` and a frozen dataclass of the script's flags) and passes those
down; everything below takes typed configurations or plain values, never the flags object
(`training/flags.py` and `finetuning/flags.py` define the shared flags, and read none). A module's
`if __name__ == "__main__":` block is a command's, not the library's: it imports and reads what the
command needs (`data/vocabulary.py`'s imports `runtime/cli.py` and reads the command's flags).
Horovod is imported by `runtime/hvd_utils.py` only, and is optional everywhere. docs/DESIGN.md
section 2 describes the layout.
"""

# The layers, lowest first: each a tuple of (package, its modules or packages); packages of one
# layer are siblings. tests/test_layering.py reads this.
LAYERS = (
    (("core", ("utils.core",)),),
    (("release", ("modeling", "optimization", "tokenization", "fused_layer_norm",
                   "fused_blocks", "gpu_environment")),),
    (("runtime", ("utils.runtime",)), ("runlog", ("utils.runlog",)), ("data", ("utils.data",))),
    (("datafiles", ("utils.datafiles",)),),
    (("model", ("utils.model",)), ("corpus", ("utils.corpus",))),
    (("checkpoints", ("utils.checkpoints",)),),
    (("training", ("utils.training",)),),
    (("finetuning", ("utils.finetuning",)),),
    (("tools", ("utils.export_release", "utils.plot_log", "utils.regression",
                 "utils.check_records")),),
)
# The entry scripts: the commands at the top of the tree. Only tests import one (what others
# share with a script lives in the library).
ENTRY_SCRIPTS = ("run_pretraining", "run_squad", "run_classifier", "create_pretraining_data",
                 "pack_pretraining_data", "prepare_corpus")
# Entry points: the entry scripts, the scripts around them, benchmarks, fuzzing and tests. No
# library module imports one.
ENTRY_POINTS = ENTRY_SCRIPTS + ("scripts", "bench", "tests", "fuzz")
