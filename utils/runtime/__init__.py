"""The process and its launcher.

The scripts' command-line entry with its logging and exit codes (`cli`), Horovod (`hvd_utils`, the
one module that imports it), the workers of a job and their output directories (`workers`), the
session config (`session_config`), the output-directory lock (`output_lock`), the free space of
its disk (`disk_space`), the watcher of the stop signals (`stop_signals`: SIGTERM, SIGINT,
SIGUSR1) and the process pool of the data generator (`worker_pool`). Imports `utils.core` and the
release's modules (`gpu_environment`). The supervisor that relaunches a job is
scripts/supervisor.py, beside the scripts it serves.
"""
