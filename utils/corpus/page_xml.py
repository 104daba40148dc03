"""One MediaWiki export page's XML read by expat, fed as it is read (`wikidump.py` cuts a dump at
its page tags): the header before the first page (`Header`: the root element, the site's
namespaces), and each page, parsed alone inside an element named as the dump's root
(`PageParser`: its fields, at most bad_input.MAX_DOCUMENT_BYTES characters of them).
"""

from xml.parsers import expat

from utils.corpus import bad_input

# The namespaces whose links show nothing in an article: files (6: a caption belongs to the
# picture) and categories (14: listed at the page's foot), by the names the dump's <siteinfo>
# gives them and by MediaWiki's English names and alias. (Media: links, -2, show their label.)
HIDDEN_LINK_NAMESPACES = (6, 14)
ENGLISH_HIDDEN_LINK_PREFIXES = frozenset(("file", "image", "category"))
ROOT_END = b"</mediawiki>"
# The elements read, by their path under <mediawiki>.
_PAGE_FIELDS = {("page", "title"): "title", ("page", "ns"): "ns", ("page", "id"): "id",
                ("page", "revision", "text"): "text"}
_NAMESPACE = ("siteinfo", "namespaces", "namespace")


class Header:
  """What precedes the first page: the root element and the site's namespaces, read by expat."""

  def __init__(self):
    self.expat = _parser(self._start, self._end, self._characters)
    self.root = None  # the root's name, expanded: "URI mediawiki"
    self.namespaces = {}  # key -> name
    self._path = []
    self._key = None
    self._name = []

  def _start(self, name, attributes):
    if self.root is None:
      self.root = name
      return
    self._path.append(name.rpartition(" ")[2])
    if tuple(self._path) == _NAMESPACE:
      self._key, self._name = attributes.get("key"), []

  def _characters(self, data):
    if self._key is not None:
      self._name.append(data)

  def _end(self, name):
    if self._key is not None and tuple(self._path) == _NAMESPACE:
      try:
        self.namespaces[int(self._key)] = "".join(self._name).strip()
      except ValueError:
        pass  # not a namespace number: the site's odd entry, of no use here
      self._key = None
    if self._path:
      self._path.pop()

  def hidden_link_prefixes(self):
    """The lower-case names whose links show nothing on this site (HIDDEN_LINK_NAMESPACES)."""
    names = (self.namespaces.get(key) for key in HIDDEN_LINK_NAMESPACES)
    return ENGLISH_HIDDEN_LINK_PREFIXES | frozenset(
        " ".join(name.lower().replace("_", " ").split()) for name in names if name)


def _parser(start, end, characters):
  """An expat parser of UTF-8 with namespaces, calling the three handlers."""
  parser = expat.ParserCreate(encoding="UTF-8", namespace_separator=" ")
  parser.buffer_text = True
  parser.StartElementHandler = start
  parser.EndElementHandler = end
  parser.CharacterDataHandler = characters
  return parser


class PageParser:
  """One page's XML, fed as it is read, inside an element named as the dump's root: its fields
  (`_PageFields`: the handlers hold no reference to the parser, so that a page's parser is freed
  as soon as the page is done)."""

  def __init__(self, root):
    namespace = root.rpartition(" ")[0]
    self.reader = _PageFields(namespace)
    self._expat = _parser(self.reader.start, self.reader.end, self.reader.characters)
    self.wrapper = ('<mediawiki xmlns="%s">' % namespace if namespace else "<mediawiki>").encode()
    self._expat.Parse(self.wrapper, False)

  @property
  def fields(self):
    return self.reader.fields

  def feed(self, data, final=False):
    """Parses the page's next bytes (expat.ExpatError when they are not well-formed)."""
    self._expat.Parse(data, False)
    if final:
      self._expat.Parse(ROOT_END, True)

  def error_place(self, error):
    """(line, column) of an ExpatError in the page: its line counted from the <page> tag's (1),
    its column on that first line counted from the tag's."""
    return error.lineno, error.offset + 1 - (len(self.wrapper) if error.lineno == 1 else 0)


class _PageFields:
  """expat's handlers for one page: its fields, at most MAX_DOCUMENT_BYTES characters of them in
  all (a page with more is `too_long`: read past)."""

  def __init__(self, namespace):
    self._namespace = namespace
    self.fields = {"title": None, "ns": None, "id": None, "redirect": None, "text": ""}
    self.too_long = False
    self._size = 0
    self._path = []
    self._field = None
    self._pieces = []

  def start(self, name, attributes):
    namespace, _, local = name.rpartition(" ")
    if namespace != self._namespace:
      local = None
    self._path.append(local)
    path = tuple(self._path[1:])
    if path in _PAGE_FIELDS:
      self._field, self._pieces = _PAGE_FIELDS[path], []
    elif path == ("page", "redirect"):
      self.fields["redirect"] = attributes.get("title", "")
    elif path == ("page", "revision"):
      self.fields["text"] = ""  # the last revision's text, even when it has none

  def characters(self, data):
    if self._field is not None and not self.too_long:
      self._size += len(data)
      if self._size > bad_input.MAX_DOCUMENT_BYTES:
        self.too_long, self._pieces = True, []
        self.fields["text"] = ""
      else:
        self._pieces.append(data)

  def end(self, name):
    del name
    if self._field is not None and tuple(self._path[1:]) in _PAGE_FIELDS:
      if not self.too_long:
        self.fields[self._field] = "".join(self._pieces)
      self._field, self._pieces = None, []
    self._path.pop()
