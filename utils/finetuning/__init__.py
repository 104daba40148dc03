"""The fine-tuning application behind run_squad.py and run_classifier.py: the release's SQuAD and
classification data (`squad_data`, `classifier_data`), SQuAD scoring (`squad_eval`), the flags
both scripts take (`flags`), their values typed and checked (`config`) and the task records, input
and SavedModel export (`task`). Imports every layer below it.
"""
