"""An article's wikitext to its plain-text paragraphs, with mwparserfromhell.

The markup is parsed once; the tree is walked and only the text a reader sees as prose is kept:

  dropped            templates ({{...}}, nested ones and infoboxes too), template arguments,
                     tables, <ref>s and <references/>, comments, categories, files and images
                     (with their captions), interlanguage links, magic words (__TOC__), headings,
                     list items, bare and unlabelled external links, the markup of other tags,
                     the content of tags that hold no prose (<math>, <gallery>, <pre>, ...), and
                     whole end sections: "References", "External links", "See also", "Notes",
                     "Further reading" and their like (END_SECTIONS)
  kept               plain text, link labels ([[Paris|the capital]] -> "the capital", [[Paris]]
                     -> "Paris", [http://x label] -> "label"), the text of formatting tags (<b>,
                     <i>, <sub>, <sup>, <small>, <span>, <blockquote>...), HTML entities decoded
                     (&nbsp; &amp; &ndash;), all non-ASCII text

A paragraph is the text between blank lines (a heading, a dropped list item or a block tag also
ends one); its whitespace is collapsed to single spaces, and the empty brackets and stray spaces
left where something was dropped are removed: "Paris ({{IPA|...}}) is" -> "Paris is".
docs/DECISIONS.md ("Data") compares this with WikiExtractor, the route of NVIDIA's scripts.
"""

import re

import mwparserfromhell
from mwparserfromhell import nodes

# Sections listing references and links rather than prose: each is dropped with its subsections,
# up to the next heading of the same or a higher level. Matched on the heading's text, lower case.
END_SECTIONS = frozenset((
    "references", "external links", "see also", "notes", "further reading",
    "notes and references", "footnotes", "citations", "sources", "bibliography", "works cited"))

# Tags whose content is not prose: references, tables, lists written in HTML, formulae, code
# blocks, galleries, maps, and what MediaWiki shows only on other pages (noinclude, includeonly).
_DROPPED_TAGS = frozenset((
    "ref", "references", "table", "tr", "td", "th", "caption", "ul", "ol", "li", "dl", "dt", "dd",
    "math", "chem", "ce", "hiero", "score", "timeline", "graph", "mapframe", "maplink",
    "gallery", "imagemap", "pre", "syntaxhighlight", "source", "templatedata", "templatestyles",
    "inputbox", "categorytree", "indicator", "charinsert", "section", "noinclude", "includeonly",
    "style", "script", "h1", "h2", "h3", "h4", "h5", "h6"))
# Tags shown as a block of their own: their text is kept as separate paragraphs.
_BLOCK_TAGS = frozenset(("div", "p", "blockquote", "center", "poem"))
# Link namespaces whose links show no text in the article: images and files (a caption belongs to
# the picture), and categories (listed at the page's foot).
_HIDDEN_LINK_NAMESPACES = frozenset(("file", "image", "category"))
# The prefix of an interlanguage link ([[fr:Paris]], [[zh-yue:...]], [[simple:...]]): a language
# code, written lower case as Wikipedia writes them. Interwiki links to sister projects ([[wikt:
# word|word]]) show their label and are kept.
_LANGUAGE_PREFIX = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]+)*|simple")
# Behaviour switches (__TOC__, __NOTOC__, __NOEDITSECTION__...): parsed as plain text.
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
# Bold and italic quote marks ('' ''' '''''), left as text (see `_parse`).
_QUOTE_MARKS = re.compile(r"'{2,}")
# Marks where a list item starts in the text walked: NUL, which XML cannot hold, so no dump's
# wikitext does.
_LIST_ITEM = "\x00"
# A line left from a table the parser did not recognise (no closing |}): not prose.
_TABLE_LINE = re.compile(r"\s*(?:\{\||\||!)")
# Tags the parser left as text (an unclosed <ref>, a stray </div>): the markup goes, any text
# after it stays. Matched in the wikitext's text only, so that "&lt;br&gt;" still shows "<br>".
_STRAY_TAG = re.compile(r"</?[A-Za-z][\w:-]*(?:\s[^<>]*)?/?>")
# Brackets left empty or with only punctuation once their content was dropped: "( )", "(; )".
_EMPTY_BRACKETS = re.compile(r"\s*\((?:[^\w()]|_)*\)")
# A separator left at a bracket's edge: "(French pronunciation: )" -> "(French pronunciation)".
_SEPARATOR_BEFORE_CLOSE = re.compile(r"\s*[,;:]\s*\)")
_SEPARATOR_AFTER_OPEN = re.compile(r"\(\s*[,;:]\s*")
# A space left before a comma or full stop that ended a word: "Paris {{efn|...}}." -> "Paris."
# (not before ; : ! ?, which French and other languages write after a space)
_SPACE_BEFORE_PUNCTUATION = re.compile(r"\s+([,.])(?=\s|$)")
_WHITESPACE = re.compile(r"\s+")
_WORD_CHARACTER = re.compile(r"\w")


def article_paragraphs(wikitext):
  """An article's wikitext -> its plain-text paragraphs.

  Args:
    wikitext: str, the markup of one article (a page's `text` in the dump).

  Returns:
    list of str, the paragraphs in the article's order, each one line (no newline), whitespace
    collapsed to single spaces, stripped; paragraphs without a letter or digit are left out.
  """
  pieces = []
  _walk_article(_parse(wikitext), pieces)
  text = _QUOTE_MARKS.sub("", _MAGIC_WORD.sub("", "".join(pieces)))
  paragraphs = []
  lines = []
  for line in text.split("\n"):
    if line.strip() and _LIST_ITEM not in line and not _TABLE_LINE.match(line):
      lines.append(line)
      continue
    # A blank line ends the paragraph, and so does a line dropped as a whole: a list item (see
    # `_walk`) or a line left from an unclosed table.
    paragraphs.append(_clean_paragraph(" ".join(lines)))
    lines = []
  paragraphs.append(_clean_paragraph(" ".join(lines)))
  return [p for p in paragraphs if _WORD_CHARACTER.search(p)]


def _parse(wikitext):
  """The tree of `wikitext`. Bold and italic quotes are not parsed (skip_style_tags): the parse
  would only tell which text is bold or italic, which is not kept, and unbalanced quotes would
  be left as text anyway; the marks are removed from the text instead (`_QUOTE_MARKS`)."""
  return mwparserfromhell.parse(wikitext, skip_style_tags=True)


def _walk_article(wikicode, pieces):
  """Appends to `pieces` the text of an article's top-level nodes, skipping END_SECTIONS.

  Headings are at the top level of the tree, followed by their section's nodes: an end section
  runs from its heading to the next heading of the same or a higher (smaller) level.
  """
  end_section_level = None
  for node in wikicode.nodes:
    if isinstance(node, nodes.Heading):
      if end_section_level is not None and node.level > end_section_level:
        continue
      end_section_level = node.level if _heading_text(node) in END_SECTIONS else None
      pieces.append("\n\n")  # a heading is dropped, and ends the paragraph before it
    elif end_section_level is None:
      _walk(node, pieces)


def _heading_text(heading):
  """A heading's text, lower case, whitespace collapsed: "== See also ==" -> "see also"."""
  pieces = []
  for node in heading.title.nodes:
    _walk(node, pieces)
  return _WHITESPACE.sub(" ", "".join(pieces)).strip().rstrip(":").strip().lower()


def _walk(node, pieces):
  """Appends to `pieces` the text that `node` shows as prose (nothing for what is dropped).

  Lists: a list item's marker (*, #, ;, :) is replaced by _LIST_ITEM and its whole line is
  dropped later, with ":"-indented lines. Lists are dropped rather than kept as paragraphs, as
  BERT's paper did for Wikipedia ("we extract only the text passages and ignore lists, tables,
  and headers") and WikiExtractor does by default: items are mostly fragments (names, dates,
  titles of works, links) that are not the sentences next-sentence prediction pairs up.
  """
  kind = type(node)
  if kind is nodes.Text:
    pieces.append(_STRAY_TAG.sub("", node.value) if "<" in node.value else node.value)
  elif kind is nodes.Wikilink:
    _walk_wikilink(node, pieces)
  elif kind is nodes.ExternalLink:
    # [http://x label] shows its label; [http://x] shows a number and a bare URL itself.
    if node.brackets and node.title is not None:
      _walk_all(node.title, pieces)
  elif kind is nodes.HTMLEntity:
    pieces.append(node.normalize())
  elif kind is nodes.Tag:
    _walk_tag(node, pieces)
  elif kind is nodes.Heading:
    pieces.append("\n\n")  # a heading nested in a tag: dropped, ends the paragraph
  # Templates, template arguments ({{{1}}}) and comments show nothing.


def _walk_all(wikicode, pieces):
  for node in wikicode.nodes:
    _walk(node, pieces)


def _walk_tag(tag, pieces):
  """Appends the text a tag shows: none for dropped tags, its content for the others."""
  if tag.wiki_markup is not None:  # markup written as wikitext, not as an HTML tag
    if tag.wiki_markup in ("*", "#", ";", ":"):
      pieces.append(_LIST_ITEM)
    elif tag.wiki_markup.startswith("-"):
      pieces.append("\n\n")  # ---- (a horizontal rule)
    elif str(tag.tag).lower() not in _DROPPED_TAGS and tag.contents is not None:
      _walk_all(tag.contents, pieces)  # '' and ''' when style tags are parsed
    return  # {| tables |}
  name = str(tag.tag).strip().lower()
  if name in _DROPPED_TAGS:
    return
  if name == "br":
    pieces.append(" ")
  elif name in _BLOCK_TAGS:
    pieces.append("\n\n")
    if tag.contents is not None:
      _walk_all(tag.contents, pieces)
    pieces.append("\n\n")
  elif tag.contents is not None and not tag.self_closing:
    _walk_all(tag.contents, pieces)


def _walk_wikilink(link, pieces):
  """Appends a wiki link's label: its text after "|", else its title as written.

  Links to files, images and categories and interlanguage links show nothing; a leading colon
  ([[:Category:Cities]]) makes any of them an ordinary link.
  """
  title = str(link.title)
  prefix, colon, rest = title.partition(":")
  if colon and prefix.strip():
    if prefix.strip().lower().replace("_", " ") in _HIDDEN_LINK_NAMESPACES:
      return
    if _LANGUAGE_PREFIX.fullmatch(prefix.strip()):
      return
  if link.text is None:
    pieces.append(_link_title(link))
  elif not str(link.text).strip():
    pieces.append(_pipe_trick(_link_title(link)))  # [[Paris, Texas|]] shows "Paris"
  else:
    _walk_all(link.text, pieces)


def _link_title(link):
  """A link's title as shown: markup dropped, underscores as spaces, no leading colon."""
  pieces = []
  _walk_all(link.title, pieces)
  return "".join(pieces).replace("_", " ").strip().lstrip(":").strip()


def _pipe_trick(title):
  """The label MediaWiki gives [[title|]]: no namespace, no "(...)" or ", ..." at the end."""
  title = title.split(":", 1)[-1]
  shorter = re.sub(r"\s*\([^()]*\)$", "", title)
  return shorter if shorter != title else title.split(",", 1)[0]


def _clean_paragraph(text):
  """One paragraph's text, its lines joined: what dropped nodes left behind (empty brackets,
  spaces before punctuation) removed, whitespace collapsed."""
  text = _SEPARATOR_BEFORE_CLOSE.sub(")", _SEPARATOR_AFTER_OPEN.sub("(", text))
  text = _EMPTY_BRACKETS.sub("", text)
  text = _WHITESPACE.sub(" ", text)
  return _SPACE_BEFORE_PUNCTUATION.sub(r"\1", text).strip()
