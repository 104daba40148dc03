"""utils/datafiles/generator_flags.py: the generator's flags, with the original release's defaults
(google-research/bert create_pretraining_data.py: do_lower_case True, do_whole_word_mask False,
random_seed 12345, dupe_factor 10, masked_lm_prob 0.15, short_seq_prob 0.1), defined once for
both scripts that take them."""

import sys

from absl import flags
import pytest

import create_pretraining_data
import prepare_corpus
from utils.datafiles import generator_flags

NAMES = ("do_lower_case", "do_whole_word_mask", "random_seed", "dupe_factor", "masked_lm_prob",
         "short_seq_prob", "dynamic_masking")


def test_the_defaults_are_the_original_releases():
  values = flags.FlagValues()
  generator_flags.define_generator_flags(values)
  values(["program"])
  assert {name: values[name].value for name in NAMES} == dict(
      do_lower_case=True, do_whole_word_mask=False, random_seed=12345, dupe_factor=10,
      masked_lm_prob=0.15, short_seq_prob=0.1, dynamic_masking=False)
  values(["program", "--nodo_lower_case", "--dupe_factor=3", "--masked_lm_prob=0.2"])
  assert (values.do_lower_case, values.dupe_factor, values.masked_lm_prob) == (False, 3, 0.2)


def test_they_are_the_calling_scripts_own_flags():
  """As when each script defined them itself: `--helpshort` of create_pretraining_data.py (and of
  prepare_corpus.py) lists them with the script's own flags."""
  values = flags.FlagValues()
  generator_flags.define_generator_flags(values)
  own = {flag.name for flag in values.get_key_flags_for_module(sys.modules[__name__])}
  assert own == set(NAMES)
  assert not values.get_key_flags_for_module(generator_flags)


class _FlagRecorder(object):
  """Stands in for absl's `flags` module in a script: records the names its DEFINE_* calls give."""

  def __init__(self):
    self.defined = []

  def __getattr__(self, name):
    if name.startswith("DEFINE_"):
      return lambda flag_name, *args, **kwargs: self.defined.append(flag_name)
    return lambda *args, **kwargs: None  # mark_flags_as_required, ...


@pytest.mark.parametrize("script", [create_pretraining_data, prepare_corpus])
def test_both_scripts_define_them_from_this_one_place(monkeypatch, script):
  recorder, calls = _FlagRecorder(), []
  monkeypatch.setattr(script, "flags", recorder)
  monkeypatch.setattr(generator_flags, "define_generator_flags", lambda: calls.append("called"))
  script.define_flags()
  assert calls == ["called"]
  assert recorder.defined and not set(NAMES) & set(recorder.defined), recorder.defined
