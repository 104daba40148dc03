"""The error of a raw-text input that cannot be read: the file, where in it, and what is wrong;
and the longest document a reader holds."""

from utils.core import errors

# The most a reader holds of one document: bytes of a line or a document file, characters of a
# dump page's fields. A longer one is never accumulated: it is read past and is a BadInput (so
# skipped and counted with --skip_bad_documents). Wikipedia's longest articles are about 1 MB.
MAX_DOCUMENT_BYTES = 4 << 20


class BadInput(errors.UsageError):
  """An input the corpus readers cannot read (exit status 2, like any bad input).

  Attributes:
    path: str, the input file.
    position: str, where in it, e.g. "line 12", "byte 4096", "page 3 'Title' (line 120)".
    problem: str, what is wrong there, e.g. "not UTF-8".
    documents: int, the documents it costs when skipped (a dump's lost bz2 block: the pages it
      cut; bytes between a dump's pages: none).
  """

  def __init__(self, path, position, problem, documents=1):
    super().__init__("%s: %s: %s" % (path, position, problem))
    self.path = path
    self.position = position
    self.problem = problem
    self.documents = documents
