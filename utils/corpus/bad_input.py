"""The error of a raw-text input that cannot be read: the file, where in it, and what is wrong."""

from utils.core import errors


class BadInput(errors.UsageError):
  """An input the corpus readers cannot read (exit status 2, like any bad input).

  Attributes:
    path: str, the input file.
    position: str, where in it, e.g. "line 12", "byte 4096", "page 3 'Title' (line 120)".
    problem: str, what is wrong there, e.g. "not UTF-8".
  """

  def __init__(self, path, position, problem):
    super().__init__("%s: %s: %s" % (path, position, problem))
    self.path = path
    self.position = position
    self.problem = problem
