"""The run's log and what reads it.

NVIDIA's dllogger lines (`dllogger_setup`), the TensorFlow-free training meter behind the log hook
(`meter`), the plot of a log (`plot`), golden losses (`golden`) and the line every Estimator script
starts with (`start_line`). Imports `utils.core` and the release's `gpu_environment` only; no
TensorFlow graph is built here.
"""
