"""On/off environment variables (FORCE_WEIGHT_SYNC, TF_DISABLE_SCOPED_ALLOCATOR,
ONEDNN_BF16_REWRITE)."""

import os

_TRUE_VALUES = ("1", "true", "yes", "on")
_FALSE_VALUES = ("", "0", "false", "no", "off")


def env_flag(name, environ=None):
  """Reads an on/off environment variable.

  Args:
    name: variable name, e.g. "FORCE_WEIGHT_SYNC".
    environ: mapping to read from; `os.environ` when None.

  Returns:
    True for 1/true/yes/on, False for an unset variable or ""/0/false/no/off (case-insensitive,
    surrounding blanks ignored).

  Raises:
    ValueError: naming the variable, for any other value.
  """
  environ = os.environ if environ is None else environ
  value = environ.get(name)
  if value is None:
    return False
  normalised = value.strip().lower()
  if normalised in _TRUE_VALUES:
    return True
  if normalised in _FALSE_VALUES:
    return False
  raise ValueError("environment variable %s=%r is not a boolean (use one of: %s)"
                   % (name, value, ", ".join(_TRUE_VALUES + _FALSE_VALUES[1:])))
