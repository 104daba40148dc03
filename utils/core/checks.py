"""Argument checks shared by the utils modules."""

import numbers


def check_integer(name, value, minimum, note=""):
  """Raises ValueError naming `name` unless `value` is an integer (not a bool) >= `minimum`.

  Args:
    name: the argument's name, for the message.
    value: the value to check.
    minimum: the smallest value allowed.
    note: optional text added after the bound, e.g. " (0 lets TensorFlow choose)".
  """
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
    raise ValueError("%s must be an integer >= %d%s, got %r" % (name, minimum, note, value))
