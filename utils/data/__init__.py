"""Pretraining records: the Estimator input pipeline (`input_pipeline`), the checks that name a bad
file and record (`records`), and the data generator's library: sampling, masking and serialising
instances (`instances`) with its numpy record encoder (`record_encoder`).
Imports `utils.core` and the release's modules.
"""
