"""Fuzz targets for every reader of a file the project did not write (docs/TESTING.md, "Fuzzing").

Each `fuzz/target_<name>.py` is one reader: it defines `TARGET`, a `harness.Target` (the reader
called on one input's bytes, the errors that are its clean refusals, a seed corpus of real files
made in memory). `python -m fuzz.run` drives the targets with atheris (coverage-guided, libFuzzer
underneath), `make fuzz` runs each for a set time, and `fuzz/regressions/<name>/` keeps every
input that once crashed a reader, replayed by tests/test_fuzz.py.
"""
