"""Pretraining records: the Estimator input pipeline (`input_pipeline`), the checks that name a bad
file and record (`records`) and the numpy record encoder of the data generator (`record_encoder`).
Imports `utils.core` and the release's modules.
"""
