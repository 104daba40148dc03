"""The Estimator job every script runs.

The flags the Estimator scripts share (`flags`), the one script lifecycle (`lifecycle`: flag
checks, config, settings, output directory, estimator, train / evaluate / predict, exit), the
model_fn around a task head (`model_fn`), the Estimator calls (`job`), the SessionRunHooks
(`hooks`: the per-run facts, the training log, the stop on a signal; `checkpoint_saver`,
`weight_sync`, `eval_timing`, `health`) and deterministic-mode state (`determinism`). Imports
every layer below it.
"""
