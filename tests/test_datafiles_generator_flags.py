"""utils/datafiles/generator_flags.py: the generator's flags, with the original release's defaults
(google-research/bert create_pretraining_data.py: do_lower_case True, do_whole_word_mask False,
random_seed 12345, dupe_factor 10, masked_lm_prob 0.15, short_seq_prob 0.1), defined once for
both scripts that take them."""

from absl import flags

import create_pretraining_data
import prepare_corpus
from utils.datafiles import generator_flags

NAMES = ("do_lower_case", "do_whole_word_mask", "random_seed", "dupe_factor", "masked_lm_prob",
         "short_seq_prob")


def test_the_defaults_are_the_original_releases():
  values = flags.FlagValues()
  generator_flags.define_generator_flags(values)
  values(["program"])
  assert {name: values[name].value for name in NAMES} == dict(
      do_lower_case=True, do_whole_word_mask=False, random_seed=12345, dupe_factor=10,
      masked_lm_prob=0.15, short_seq_prob=0.1)
  values(["program", "--nodo_lower_case", "--dupe_factor=3", "--masked_lm_prob=0.2"])
  assert (values.do_lower_case, values.dupe_factor, values.masked_lm_prob) == (False, 3, 0.2)


def _defined_by(define_flags):
  """{flag name: the module that defined it} of the flags a script's `define_flags` defines (into
  absl's global flags for the call, restored after)."""
  saved = flags.FLAGS.flags_by_module_dict().copy()
  before = set(flags.FLAGS)
  added = []
  try:
    define_flags()
    added = [name for name in flags.FLAGS if name not in before]
    return {name: flags.FLAGS.find_module_defining_flag(name) for name in added}
  finally:
    for name in added:
      delattr(flags.FLAGS, name)
    flags.FLAGS.flags_by_module_dict().clear()
    flags.FLAGS.flags_by_module_dict().update(saved)


def test_both_scripts_define_them_from_this_one_place():
  for define_flags in (create_pretraining_data.define_flags, prepare_corpus.define_flags):
    defined = _defined_by(define_flags)
    assert {name: defined[name] for name in NAMES} == {
        name: generator_flags.__name__ for name in NAMES}, define_flags.__module__
