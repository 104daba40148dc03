"""The Estimator job every script runs.

The flags the Estimator scripts share (`flags`), the one script lifecycle (`lifecycle`: flag
checks, config, settings, output directory, estimator, train / evaluate / predict, exit), the
model_fn around a task head (`model_fn`), the Estimator calls (`job`), the SessionRunHooks
(`hooks`) and deterministic-mode state (`determinism`). Imports every layer below it.
"""
