"""The flags both fine-tuning scripts take (run_squad.py, run_classifier.py), on top of
`utils/training/flags.py` (which defines --vocab_file, pretraining's too): the casing, the epochs
and warmup, prediction.

Defined once, when this module is first imported; the original release's names, defaults and
meanings. Nothing here reads a parsed value: `utils/finetuning/config.py` reads them once into a
`FinetuningConfig`, with the rules of their values.
"""

from absl import flags

from utils.training import flags as job_flags  # noqa: F401  (the shared flags come first)

flags.DEFINE_bool("do_lower_case", True, "Lower-case the text (uncased models).")
flags.DEFINE_float("num_train_epochs", 3.0, "Passes over the training examples.")
flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of the updates spent in linear warmup.")
flags.DEFINE_bool("do_predict", False, "Predict (rank 0).")
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch size.")
flags.DEFINE_string("export_dir", None,
                    "Write a SavedModel of the fine-tuned model here (serving_default: input_ids, "
                    "input_mask, segment_ids -> the task's outputs), after the other actions.")
