"""Graphs built on `modeling.BertModel`: what a task head returns (`heads`) and the pretraining
heads, masked LM and next-sentence prediction (`pretraining`, re-exported by run_pretraining.py
under the release's names). Imports `utils.core` and the release's modules.
"""
