"""Checkpoints: what one holds and the role of each variable, reading and writing tensors
(`contents`), whether a checkpoint in --output_dir fits the model a run describes (`compat`), and
the weights-only release bundle (`release`). Imports `utils.core`, the release's modules and
`utils.model`.
"""
