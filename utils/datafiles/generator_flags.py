"""The flags of how the data generator samples and masks records, whatever their length: defined
once here for `create_pretraining_data.py` and `prepare_corpus.py`, which both fill
`utils.data.instances.GeneratorOptions` from them (each script reads its flags once, in `main`).

Defaults are the original release's. The flags belong to the script that defines them (absl's
key flags of the calling module: `--helpshort` lists them with the script's own), as when each
script defined them itself.
"""

from absl import flags
from absl import logging

# --dupe_factor's default without --dynamic_masking (the original release's).
ORIGINAL_DUPE_FACTOR = 10

flags.disclaim_key_flags()  # the DEFINE calls below are on behalf of the calling script


def define_generator_flags(flag_values=flags.FLAGS):
  """Defines --do_lower_case, --do_whole_word_mask, --random_seed, --dupe_factor,
  --masked_lm_prob, --short_seq_prob and --dynamic_masking in `flag_values` (absl's global flags
  by default)."""
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the text (True for uncased models, False for cased ones).",
                    flag_values=flag_values)
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Mask whole words (a word and its ## pieces) rather than single pieces.",
                    flag_values=flag_values)
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.",
                       flag_values=flag_values)
  flags.DEFINE_integer("dupe_factor", ORIGINAL_DUPE_FACTOR,
                       "Number of passes over the input (each with different masks); default "
                       "%d, or 1 with --dynamic_masking." % ORIGINAL_DUPE_FACTOR,
                       flag_values=flag_values)
  flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.", flag_values=flag_values)
  flags.DEFINE_float("short_seq_prob", 0.1,
                     "Probability of a sequence shorter than the maximum length.",
                     flag_values=flag_values)
  flags.DEFINE_bool("dynamic_masking", False,
                    "Write the training records without masks: input_ids unmasked, no "
                    "masked_lm_* features (run_pretraining.py draws the masks); one copy of the "
                    "text unless --dupe_factor is given.", flag_values=flag_values)


def dupe_factor(flag_values):
  """The copies of the text to write: --dupe_factor as given; when not given, 1 with
  --dynamic_masking (masks drawn in training make copies of the text unneeded), else the
  original's 10. Logs a line when copies are asked for with --dynamic_masking."""
  if not flag_values.dynamic_masking:
    return flag_values.dupe_factor
  if not flag_values["dupe_factor"].present:
    return 1
  if flag_values.dupe_factor > 1:
    logging.info("--dupe_factor=%d with --dynamic_masking: %d copies of the text without masks, "
                 "which differ only by their sentence pairing (where sequences are cut, which sentences are "
                 "paired)", flag_values.dupe_factor,
                 flag_values.dupe_factor)
  return flag_values.dupe_factor
