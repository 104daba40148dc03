"""utils/corpus/bad_input.py: the one error of an unreadable raw-text input."""

from utils.core import errors
from utils.corpus import bad_input


def test_names_the_file_the_position_and_the_problem():
  error = bad_input.BadInput("/d/dump.xml.bz2", "byte 4096", "the bz2 stream ends early")
  assert str(error) == "/d/dump.xml.bz2: byte 4096: the bz2 stream ends early"
  assert (error.path, error.position, error.problem) == (
      "/d/dump.xml.bz2", "byte 4096", "the bz2 stream ends early")


def test_is_a_usage_error_ending_with_exit_status_2():
  error = bad_input.BadInput("f.txt", "line 3", "not UTF-8")
  assert isinstance(error, errors.UsageError)
  assert errors.exit_code(error) == errors.USAGE_EXIT_CODE
