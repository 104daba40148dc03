"""utils/core/env_flags.py: env_flag reads on/off values case-insensitively with blanks ignored,
an unset variable is off, os.environ is the default mapping, and any other value is refused by
name."""

import pytest

from utils.core import env_flags


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "Yes", "on", " On\n", "\ttrue "])
def test_on_values_read_true(value):
  assert env_flags.env_flag("FLAG", {"FLAG": value}) is True


@pytest.mark.parametrize("value", ["", "  ", "0", "false", "False", "NO", "off", " OFF "])
def test_off_values_read_false(value):
  assert env_flags.env_flag("FLAG", {"FLAG": value}) is False


def test_an_unset_variable_reads_false():
  assert env_flags.env_flag("FLAG", {}) is False
  assert env_flags.env_flag("FLAG", {"OTHER": "1"}) is False


def test_os_environ_is_read_when_no_mapping_is_given(monkeypatch):
  monkeypatch.setenv("FORCE_WEIGHT_SYNC", "yes")
  assert env_flags.env_flag("FORCE_WEIGHT_SYNC") is True
  monkeypatch.setenv("FORCE_WEIGHT_SYNC", "off")
  assert env_flags.env_flag("FORCE_WEIGHT_SYNC") is False
  monkeypatch.delenv("FORCE_WEIGHT_SYNC")
  assert env_flags.env_flag("FORCE_WEIGHT_SYNC") is False
  # An explicit mapping wins over os.environ.
  monkeypatch.setenv("FORCE_WEIGHT_SYNC", "1")
  assert env_flags.env_flag("FORCE_WEIGHT_SYNC", {}) is False


@pytest.mark.parametrize("value", ["2", "y", "enable", "tru e", "-1", "none"])
def test_other_values_are_refused_naming_the_variable(value):
  with pytest.raises(ValueError, match=r"ONEDNN_BF16_REWRITE=%r is not a boolean" % value):
    env_flags.env_flag("ONEDNN_BF16_REWRITE", {"ONEDNN_BF16_REWRITE": value})
