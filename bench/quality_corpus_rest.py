"""The English prose of a reStructuredText source (a Sphinx `_sources` file), its markup removed by
docutils: the text of its paragraphs, without code, literal blocks, tables, comments, directive
arguments and options, reference targets or field lists.

  paragraphs = prose_paragraphs(open("library/os.rst.txt").read())

docutils parses the source alone (no Sphinx, no file inclusion, nothing reported). The directives
and roles docutils does not know are Sphinx's and the projects' own; they are registered through
docutils' public registry (`register_directive`, `register_local_role`) the first time a source
names them:

* the description and note directives whose body is prose (`function`, `class`, `c:function`,
  `seealso`, ... and any other `domain:name`): their body is parsed, their argument (a signature)
  dropped; `versionadded`, `versionchanged`, `deprecated` and `deprecated-removed` keep the text
  after the version too;
* every other directive (`code-block`, `kernel-doc`, `flat-table`, `toctree`, `index`, ...) is
  dropped with its body;
* every role shows its text as Sphinx does: the title of `Title <target>`, the last part of
  `~a.b.c`, the target of an untitled reference.

A paragraph is kept when it reads as English prose (`is_prose`): enough words, mostly letters, its
letters ASCII.
"""

import re

from docutils import frontend
from docutils import nodes
from docutils import utils
from docutils.parsers import rst
from docutils.parsers.rst import directives
from docutils.parsers.rst import roles
from docutils.parsers.rst.languages import en

# Directives whose body is prose; their arguments (a signature, a label) are dropped. Any other
# directive with a domain ("py:method", "c:struct", ...) is one too, but for DROPPED_DOMAIN.
PROSE_DIRECTIVES = frozenset([
    "abstractmethod", "attribute", "awaitablefunction", "awaitablemethod", "class",
    "classmethod", "cmdoption", "coroutinefunction", "coroutinemethod", "data", "decorator",
    "describe", "envvar", "exception", "function", "method", "object", "opcode", "option",
    "pdbcommand", "staticmethod", "only", "ifconfig"])
# Directives without arguments whose body is prose (a body may start on the directive's line).
PROSE_BODY_DIRECTIVES = frozenset(["seealso", "impl-detail", "glossary", "epigraph"])
# Version notes: the number of version arguments before the text they may carry.
VERSION_DIRECTIVES = {"versionadded": 1, "versionchanged": 1, "deprecated": 1,
                      "deprecated-removed": 2}
# Domain directives that hold no prose.
DROPPED_DOMAIN = frozenset(["c:namespace", "c:namespace-push", "c:namespace-pop",
                            "cpp:namespace", "py:module", "py:currentmodule"])
# A paragraph is prose when it has this many words at least, ...
MIN_WORDS = 4
# ... letters are at least this share of its characters other than spaces, ...
MIN_LETTER_SHARE = 0.6
# ... and at least this share of its letters are ASCII (English, not a translation).
MIN_ASCII_LETTER_SHARE = 0.95
# Where a paragraph is no prose: tables, field lists (document metadata, directive options), what
# docutils reports and the rest that is not text.
_SKIPPED_ANCESTORS = (nodes.system_message, nodes.table, nodes.field_list, nodes.docinfo,
                      nodes.comment, nodes.substitution_definition, nodes.raw)
# Inline nodes whose text is no prose: footnote marks, markup docutils could not resolve.
_SKIPPED_INLINE = (nodes.footnote_reference, nodes.citation_reference, nodes.problematic,
                   nodes.system_message, nodes.substitution_reference, nodes.raw)
_DIRECTIVE_NAME = re.compile(r"^\s*\.\.\s+([A-Za-z][-\w:+.]*)::", re.MULTILINE)
_ROLE_NAME = re.compile(r"(?<![\w`]):([A-Za-z][-\w:+.]*):`")
_EXPLICIT_TITLE = re.compile(r"^(.+?)\s*<[^<>]*>$", re.DOTALL)
# What closes a sentence or a bracket: no space before it where a footnote mark was dropped.
_CLOSING = frozenset(".,;:!?)")


class _AnyOptions(dict):
  """A directive's option_spec that takes every option (Sphinx's are many and open-ended)."""

  def __missing__(self, key):
    return directives.unchanged


def _parse_body(directive):
  """The nodes of a directive's body, parsed as reStructuredText."""
  holder = nodes.Element()
  directive.state.nested_parse(directive.content, directive.content_offset, holder)
  return holder.children


class _ProseDirective(rst.Directive):
  """A description (`.. function:: signature`): the body kept, the signature dropped."""
  optional_arguments = 1
  final_argument_whitespace = True
  option_spec = _AnyOptions(noindex=directives.flag)
  has_content = True

  def run(self):
    return _parse_body(self)


class _ProseBodyDirective(_ProseDirective):
  """A note without arguments (`.. seealso::`): its whole body kept."""
  optional_arguments = 0


class _VersionDirective(_ProseDirective):
  """`.. versionchanged:: 3.8 text` and its body: the text after the version(s) and the body."""

  def run(self):
    versions = VERSION_DIRECTIVES[self.name]
    words = " ".join(self.arguments).split(None, versions)
    kept = []
    if len(words) > versions:
      inline, messages = self.state.inline_text(words[-1], self.lineno)
      kept.append(nodes.paragraph(words[-1], "", *inline))
      kept.extend(messages)
    return kept + _parse_body(self)


class _DroppedDirective(_ProseDirective):
  """Any other directive: code, tables, toctrees, includes, index entries: nothing kept."""

  def run(self):
    return []


def _role_text(name, text):
  """What Sphinx shows for `:name:`text``: an explicit title, the last part of `~a.b`, the text
  without its `!`; an abbreviation without its expansion."""
  match = _EXPLICIT_TITLE.match(text)
  if match:
    return match.group(1)
  if name == "abbr" and " (" in text:
    return text.split(" (", 1)[0]
  if text.startswith("~"):
    return text[1:].rsplit(".", 1)[-1]
  if name == "doc":
    return text.rstrip("/").rsplit("/", 1)[-1]
  return text.lstrip("!")


def _sphinx_role(name, rawtext, text, lineno, inliner, options=None, content=None):
  """A role docutils does not know, shown as its text (`_role_text`)."""
  del rawtext, lineno, inliner, options, content
  return [nodes.Text(_role_text(name.lower(), utils.unescape(text)))], []


def _directive_class(name):
  """The class a directive docutils does not know is registered with."""
  if name in VERSION_DIRECTIVES:
    return _VersionDirective
  if name in PROSE_BODY_DIRECTIVES:
    return _ProseBodyDirective
  if name in PROSE_DIRECTIVES or (":" in name and name not in DROPPED_DOMAIN):
    return _ProseDirective
  return _DroppedDirective


def register_names(text):
  """Registers with docutils the directives and roles `text` names that docutils does not know
  (their names lower-cased, as docutils looks them up). Returns the names registered now."""
  registered = []
  for name in set(m.lower() for m in _DIRECTIVE_NAME.findall(text)):
    if name not in en.directives and name not in directives._directives:  # pylint: disable=protected-access
      directives.register_directive(name, _directive_class(name))
      registered.append(name)
  for name in set(m.lower() for m in _ROLE_NAME.findall(text)):
    if name not in en.roles and name not in roles._roles:  # pylint: disable=protected-access
      roles.register_local_role(name, _sphinx_role)
      registered.append(name)
  return sorted(registered)


def _settings():
  """docutils' settings: nothing reported or fatal, no file read, no raw output."""
  settings = frontend.get_default_settings(rst.Parser)
  settings.report_level = 5
  settings.halt_level = 5
  settings.warning_stream = False
  settings.file_insertion_enabled = False
  settings.raw_enabled = False
  settings.line_length_limit = 1 << 20
  return settings


_SETTINGS = None


def parse(text, source_name="<rst>"):
  """The docutils document tree of reStructuredText `text` (no transforms applied)."""
  global _SETTINGS
  if _SETTINGS is None:
    _SETTINGS = _settings()
  register_names(text)
  document = utils.new_document(source_name, _SETTINGS)
  rst.Parser().parse(text, document)
  return document


def _is_skipped(node, kinds):
  """Whether `node` or an ancestor is one of `kinds`."""
  while node is not None:
    if isinstance(node, kinds):
      return True
    node = node.parent
  return False


def _text_pieces(node):
  """Yields the text of each Text node under `node` in order, None for a _SKIPPED_INLINE node
  (its text left out)."""
  for child in node.children:
    if isinstance(child, _SKIPPED_INLINE):
      yield None
    elif isinstance(child, nodes.Text):
      yield child.astext()
    else:
      yield from _text_pieces(child)


def paragraph_text(paragraph):
  """A paragraph node's text, whitespace collapsed, without footnote marks and unresolved
  markup."""
  pieces, after_skipped = [], False
  for piece in _text_pieces(paragraph):
    if piece is None:
      after_skipped = True
      continue
    if after_skipped and pieces and piece[:1] in _CLOSING:  # "more [#]_." reads "more."
      pieces[-1] = pieces[-1].rstrip()
    pieces.append(piece)
    after_skipped = False
  return " ".join("".join(pieces).split())


def is_prose(text):
  """Whether a paragraph's text reads as English prose (MIN_WORDS, MIN_LETTER_SHARE,
  MIN_ASCII_LETTER_SHARE)."""
  if len(text.split()) < MIN_WORDS:
    return False
  letters = [c for c in text if c.isalpha()]
  characters = len(text) - text.count(" ")
  if len(letters) < MIN_LETTER_SHARE * characters:
    return False
  return sum(c.isascii() for c in letters) >= MIN_ASCII_LETTER_SHARE * len(letters)


def prose_paragraphs(text, source_name="<rst>"):
  """The prose paragraphs of reStructuredText `text`, in order.

  Args:
    text: the source (str).
    source_name: named in the document tree only.

  Returns:
    list of str: each paragraph's text on one line, whitespace collapsed.
  """
  document = parse(text, source_name)
  kept = []
  for paragraph in document.findall(nodes.paragraph):
    if _is_skipped(paragraph.parent, _SKIPPED_ANCESTORS):
      continue
    line = paragraph_text(paragraph)
    if is_prose(line):
      kept.append(line)
  return kept
