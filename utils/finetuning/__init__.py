"""The fine-tuning application behind run_squad.py and run_classifier.py: the release's SQuAD and
classification data (`squad_data`, `classifier_data`), SQuAD scoring (`squad_eval`) and the task
records and input (`task`). Imports every layer below it.
"""
