"""Graphs built on `modeling.BertModel`: what a task head returns (`heads`) and the pretraining
heads, masked LM and next-sentence prediction (`pretraining`, re-exported by run_pretraining.py
under the release's names), and checkpoints scored on held-out records beside the unigram baseline
(`evaluation`). Imports `utils.core`, `utils.data` (the records' features) and the release's
modules.
"""
