"""The run's log and what reads it.

NVIDIA's dllogger lines (`dllogger_setup`), the TensorFlow-free training meter behind the log hook
(`meter`), the plot of a log (`plot`) and golden losses (`golden`). Imports `utils.core` only; no
TensorFlow graph is built here.
"""
