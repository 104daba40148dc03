"""The Estimator job every script runs.

The flags the Estimator scripts share (`flags`) and their values (`job_config`), the scripts'
`main` (`entry`), the job a script opens and runs (`job`: model configuration, output directory,
settings, estimator, train / evaluate / predict, close), the model_fn around a task head
(`model_fn`), the Estimator calls (`estimator`), training that a signal stops at an update
boundary (`watched_training`), the errors a job ends with (`messages`), the SessionRunHooks
(`hooks`: the per-run facts, the training log, the stop on a signal; `checkpoint_saver`,
`weight_sync`, `eval_timing`, `health`) and deterministic-mode state (`determinism`). Imports
every layer below it.
"""
