"""The flags of how the data generator samples and masks records, whatever their length: defined
once here for `create_pretraining_data.py` and `prepare_corpus.py`, which both fill
`utils.data.instances.GeneratorOptions` from them (each script reads its flags once, in `main`).

Defaults are the original release's. The flags belong to the script that defines them (absl's
key flags of the calling module: `--helpshort` lists them with the script's own), as when each
script defined them itself.
"""

from absl import flags

flags.disclaim_key_flags()  # the DEFINE calls below are on behalf of the calling script


def define_generator_flags(flag_values=flags.FLAGS):
  """Defines --do_lower_case, --do_whole_word_mask, --random_seed, --dupe_factor,
  --masked_lm_prob and --short_seq_prob in `flag_values` (absl's global flags by default)."""
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the text (True for uncased models, False for cased ones).",
                    flag_values=flag_values)
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Mask whole words (a word and its ## pieces) rather than single pieces.",
                    flag_values=flag_values)
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.",
                       flag_values=flag_values)
  flags.DEFINE_integer("dupe_factor", 10,
                       "Number of passes over the input (each with different masks).",
                       flag_values=flag_values)
  flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.", flag_values=flag_values)
  flags.DEFINE_float("short_seq_prob", 0.1,
                     "Probability of a sequence shorter than the maximum length.",
                     flag_values=flag_values)
