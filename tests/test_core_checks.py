"""utils/core/checks.py: check_integer lets through integers (numpy's too) at or above the bound
and refuses bools, non-integers and smaller values with a message naming the argument."""

import numpy as np
import pytest

from utils.core import checks


@pytest.mark.parametrize("value,minimum", [
    (0, 0), (7, 1), (-3, -5), (2**70, 1), (np.int64(4), 4), (np.uint8(1), 1)])
def test_integers_at_or_above_the_minimum_pass(value, minimum):
  assert checks.check_integer("--n", value, minimum) is None


@pytest.mark.parametrize("value", [True, False, 3.0, "3", None, np.float32(3), [3]])
def test_bools_and_non_integers_are_refused(value):
  with pytest.raises(ValueError, match=r"^--n must be an integer >= 0\b"):
    checks.check_integer("--n", value, 0)


def test_a_value_below_the_minimum_is_refused_naming_the_argument_the_bound_and_the_note():
  with pytest.raises(ValueError) as raised:
    checks.check_integer("--num_threads", -1, 0, " (0 lets TensorFlow choose)")
  message = str(raised.value)
  assert message.startswith("--num_threads must be an integer >= 0 (0 lets TensorFlow choose)")
  assert message.endswith("-1")
  with pytest.raises(ValueError, match=r"^workers must be an integer >= 2\b"):
    checks.check_integer("workers", 1, 2)
  assert checks.check_integer("workers", 2, 2) is None  # the bound itself is allowed
