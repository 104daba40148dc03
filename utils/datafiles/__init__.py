"""The data tools' runs over files: the generator's records written from text files, records
packed and unpacked, each run in the worker pool with its outputs published whole; the
generator's flags. Below the corpus build, which uses them, and above `data/` and `runtime/`,
which they join."""
