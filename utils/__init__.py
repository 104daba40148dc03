"""Distributed helpers, NVIDIA-style logging, SessionRunHooks and the session config.

Every module here takes plain arguments (never absl flags) and works without Horovod installed;
Horovod is imported only by `utils.hvd_utils`.
"""
