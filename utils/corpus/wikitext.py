"""An article's wikitext to its plain-text paragraphs, with mwparserfromhell.

The markup is read once by mwparserfromhell's tokenizer; the constructs that can show text are
built into its nodes and walked, and only the text a reader sees as prose is kept:

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

The paragraphs are those of a walk of mwparserfromhell's whole tree (`tree_paragraphs` of
mwparserfromhell.parse), without building the nodes of what is dropped anyway (`_top_level`):
about four times faster, the same paragraphs (tests/test_corpus_wikitext.py compares the two).
docs/DECISIONS.md ("Data") compares this with WikiExtractor, the route of NVIDIA's scripts.
"""

import re

from mwparserfromhell import nodes
from mwparserfromhell import parser
from mwparserfromhell.parser import builder
from mwparserfromhell.parser import tokenizer
from mwparserfromhell.parser import tokens

from utils.corpus import page_xml

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
# The prefix of an interlanguage link ([[fr:Paris]], [[zh-yue:...]], [[simple:...]]): a language
# code, written lower case as Wikipedia writes them. Interwiki links to sister projects ([[wikt:
# word|word]]) show their label and are kept.
_LANGUAGE_PREFIX = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]+)*|simple")
# Behaviour switches (__TOC__, __NOTOC__, __NOEDITSECTION__...): parsed as plain text.
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
# The wiki markup of list items (`_markup_piece`).
_LIST_MARKUP = ("*", "#", ";", ":")
# Bold and italic quote marks ('' ''' '''''), left as text (see `_top_level`).
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


def article_paragraphs(wikitext, hidden_link_prefixes=page_xml.ENGLISH_HIDDEN_LINK_PREFIXES):
  """An article's wikitext -> its plain-text paragraphs.

  Args:
    wikitext: str, the markup of one article (a page's `text` in the dump).
    hidden_link_prefixes: frozenset of lower-case namespace names whose links show nothing:
      its site's names for files and categories (`wikidump.Page.hidden_link_prefixes`).

  Returns:
    list of str, the paragraphs in the article's order, each one line (no newline), whitespace
    collapsed to single spaces, stripped; paragraphs without a letter or digit are left out.
  """
  return _paragraphs(_top_level(wikitext, hidden_link_prefixes), hidden_link_prefixes)


def tree_paragraphs(wikicode, hidden_link_prefixes=page_xml.ENGLISH_HIDDEN_LINK_PREFIXES):
  """The paragraphs of an article's whole tree: what `article_paragraphs` returns for the text
  whose tree it is, mwparserfromhell.parse(wikitext, skip_style_tags=True).

  Args:
    wikicode: mwparserfromhell.wikicode.Wikicode.
    hidden_link_prefixes: as for `article_paragraphs`.

  Returns:
    list of str, as `article_paragraphs`.
  """
  return _paragraphs(wikicode.nodes, hidden_link_prefixes)


def _paragraphs(items, hidden):
  """The paragraphs of an article's top-level items (nodes, or str for text); `hidden`: the
  link prefixes that show nothing."""
  pieces = []
  _walk_article(items, pieces, hidden)
  text = _QUOTE_MARKS.sub("", _MAGIC_WORD.sub("", "".join(pieces)))
  paragraphs = []
  lines = []
  for line in text.split("\n"):
    if line.strip() and _LIST_ITEM not in line and not _TABLE_LINE.match(line):
      lines.append(line)
      continue
    # A blank line ends the paragraph, and so does a line dropped as a whole: a list item (see
    # `_walk`) or a line left from an unclosed table.
    if lines:
      paragraphs.append(_clean_paragraph(" ".join(lines)))
      lines = []
  if lines:
    paragraphs.append(_clean_paragraph(" ".join(lines)))
  return [p for p in paragraphs if _WORD_CHARACTER.search(p)]


# ---------------------------------------------------------------------------------------------
# The parse: mwparserfromhell's tokenizer on the whole text, its tree builder only where the
# walk needs a node.
# ---------------------------------------------------------------------------------------------

# The closing tokens of each opening one: each construct is a well-nested run of tokens.
_CLOSERS = {
    tokens.TemplateOpen: (tokens.TemplateClose,), tokens.ArgumentOpen: (tokens.ArgumentClose,),
    tokens.WikilinkOpen: (tokens.WikilinkClose,),
    tokens.ExternalLinkOpen: (tokens.ExternalLinkClose,),
    tokens.HTMLEntityStart: (tokens.HTMLEntityEnd,), tokens.HeadingStart: (tokens.HeadingEnd,),
    tokens.CommentStart: (tokens.CommentEnd,),
    tokens.TagOpenOpen: (tokens.TagCloseSelfclose, tokens.TagCloseClose)}
# What shows no text wherever it is (`_walk`): templates ({{...}}), template arguments ({{{1}}}),
# comments. Tags are told by their name (`_is_hidden_tag`).
_HIDDEN = frozenset((tokens.TemplateOpen, tokens.ArgumentOpen, tokens.CommentStart))
# The tokens that may end a tag's name (after its Text tokens), and those that end its opening
# (its name and attributes).
_TAG_NAME_ENDS = (tokens.TagAttrStart, tokens.TagCloseOpen, tokens.TagCloseSelfclose)
_TAG_OPENING_ENDS = (tokens.TagCloseOpen, tokens.TagCloseSelfclose)


def _top_level(wikitext, hidden):
  """The top-level items of an article's tree, with what shows no text left out: str for text,
  else the node, built alone.

  The tokenizer reads the whole text, as mwparserfromhell.parse does, so every construct ends
  where it ends there (an unclosed template or <ref> stays text, braces in <nowiki> or <math>
  stay theirs). The tree builder, which is Python and most of a full parse's time, is spared
  what the walk does not need: the text between constructs, every construct that shows nothing
  (templates, <ref>s, tables: most of an article's tokens), and the links of plain text, whose
  label is known from their tokens (`_plain_link`). Bold and italic quotes are not parsed
  (skip_style_tags): the parse would only tell which text is bold or italic, which is not kept,
  and unbalanced quotes would be left as text anyway; the marks are removed from the text
  instead (`_QUOTE_MARKS`).

  Yields:
    str or mwparserfromhell.nodes.Node, in the article's order.
  """
  # A tokenizer per call (one may not be shared between threads), made directly:
  # mwparserfromhell.parse goes through utils.parse_anything, whose imports run on every call.
  token_list = (parser.CTokenizer() if parser.use_c else tokenizer.Tokenizer()).tokenize(
      wikitext, 0, True)
  index, count = 0, len(token_list)
  while index < count:
    token = token_list[index]
    kind = type(token)
    if kind is tokens.Text:
      yield token["text"]  # (a token is a dict of its fields: read without its __getattr__)
      index += 1
      continue
    if kind is tokens.WikilinkOpen:
      label, end = _plain_link(token_list, index, hidden)
      if end:
        yield label
        index = end
        continue
    end = _subtree_end(token_list, index)
    markup = token.get("wiki_markup") if kind is tokens.TagOpenOpen else None
    piece = _markup_piece(markup) if markup is not None else None
    if piece:
      yield piece
    elif not (kind in _HIDDEN or kind is tokens.TagOpenOpen and _is_hidden_tag(token_list,
                                                                               index)):
      yield builder.Builder().build(_shortened(token_list[index:end], hidden)).nodes[0]
    index = end


def _shortened(token_list, hidden):
  """The tokens of one construct, for the builder, with the subtrees inside it that show
  nothing (`_HIDDEN`, `_is_hidden_tag`) as empty comments and its links of plain text as the
  text they show (`_plain_link`).

  An empty comment stands in rather than nothing so that the tree keeps a node where one was:
  a link whose label is only a template still has a label ([[Paris|{{lang|fr|Paris}}]] shows
  nothing, not "Paris"), and a link's title keeps what stood before a colon. A comment shows
  nothing anywhere `_walk` meets it, as the node it replaces. Links are left as they are inside
  another link (whose written title or label a text would change) and inside a tag's
  attributes (whose value is checked for quotes on its text).
  """
  kept = []
  index, count = 0, len(token_list)
  links = openings = 0  # links open; tags whose name and attributes are being read
  while index < count:
    token = token_list[index]
    kind = type(token)
    if kind in _HIDDEN or kind is tokens.TagOpenOpen and _is_hidden_tag(token_list, index):
      index = _subtree_end(token_list, index)
      kept += (tokens.CommentStart(), tokens.CommentEnd())
      continue
    if kind is tokens.WikilinkOpen and not links and not openings:
      label, end = _plain_link(token_list, index, hidden)
      if end:
        kept += (tokens.Text(text=label),) if label else (tokens.CommentStart(),
                                                          tokens.CommentEnd())
        index = end
        continue
    if kind is tokens.WikilinkOpen or kind is tokens.WikilinkClose:
      links += 1 if kind is tokens.WikilinkOpen else -1
    elif kind is tokens.TagOpenOpen or kind in _TAG_OPENING_ENDS:
      openings += 1 if kind is tokens.TagOpenOpen else -1
    kept.append(token)
    index += 1
  return kept


def _subtree_end(token_list, start):
  """The index after the construct whose opening token is at `start` (`_CLOSERS`)."""
  opener = type(token_list[start])
  closers = _CLOSERS[opener]
  depth = 0
  for index in range(start, len(token_list)):
    kind = type(token_list[index])
    if kind is opener:
      depth += 1
    elif kind in closers:
      depth -= 1
      if not depth:
        return index + 1
  raise parser.ParserError("the tokenizer left a %s unclosed" % opener.__name__)


def _plain_link(token_list, start, hidden):
  """(what it shows, the index after it) of the link opened at `start` when it is written in
  plain text without "<" ([[Paris]], [[Paris|the capital]], [[Paris, Texas|]],
  [[Category:Cities]]: "" for a link that shows nothing), as `_walk_wikilink` finds it; (None, 0)
  for any other link ("<": `_walk` would clean its text of stray tags).
  """
  title = token_list[start + 1]
  if type(title) is not tokens.Text or "<" in title["text"]:
    return None, 0
  title = title["text"]
  after = type(token_list[start + 2])
  if after is tokens.WikilinkClose:  # [[title]]
    label, end = None, start + 3
  elif after is not tokens.WikilinkSeparator:
    return None, 0
  elif type(token_list[start + 3]) is tokens.WikilinkClose:  # [[title|]]
    label, end = "", start + 4
  elif (type(token_list[start + 3]) is tokens.Text
        and type(token_list[start + 4]) is tokens.WikilinkClose):  # [[title|label]]
    label, end = token_list[start + 3]["text"], start + 5
    if "<" in label:
      return None, 0
  else:
    return None, 0
  if _is_hidden_link(title, hidden):
    return "", end
  if label is None or not label.strip():
    return _title_label(title, piped=label is not None), end
  return label, end


def _is_hidden_tag(token_list, start):
  """Whether the tag opened at `start` shows nothing (`_walk_tag`): a dropped tag written in
  HTML, or one written as wikitext ({| tables |}) that is neither a list item nor a rule."""
  name = []
  index = start + 1
  while type(token_list[index]) is tokens.Text:
    name.append(token_list[index]["text"])
    index += 1
  if type(token_list[index]) not in _TAG_NAME_ENDS:
    return False  # a name that is not plain text: left to the builder
  name = "".join(name)
  markup = token_list[start].get("wiki_markup")
  if markup is None:
    return name.strip().lower() in _DROPPED_TAGS
  return _markup_piece(markup) is None and name.lower() in _DROPPED_TAGS


# ---------------------------------------------------------------------------------------------
# The walk: what each node shows.
# ---------------------------------------------------------------------------------------------


def _walk_article(items, pieces, hidden):
  """Appends to `pieces` the text of an article's top-level items (nodes, or str for text),
  skipping END_SECTIONS.

  Headings are at the top level of the tree, followed by their section's nodes: an end section
  runs from its heading to the next heading of the same or a higher (smaller) level.
  """
  end_section_level = None
  for item in items:
    if type(item) is str:
      if end_section_level is None:
        pieces.append(_text_piece(item))
    elif isinstance(item, nodes.Heading):
      if end_section_level is not None and item.level > end_section_level:
        continue
      end_section_level = item.level if _heading_text(item, hidden) in END_SECTIONS else None
      pieces.append("\n\n")  # a heading is dropped, and ends the paragraph before it
    elif end_section_level is None:
      _walk(item, pieces, hidden)


def _heading_text(heading, hidden):
  """A heading's text, lower case, whitespace collapsed: "== See also ==" -> "see also"."""
  pieces = []
  for node in heading.title.nodes:
    _walk(node, pieces, hidden)
  return _WHITESPACE.sub(" ", "".join(pieces)).strip().rstrip(":").strip().lower()


def _walk(node, pieces, hidden):
  """Appends to `pieces` the text that `node` shows as prose (nothing for what is dropped).

  Lists: a list item's marker (*, #, ;, :) is replaced by _LIST_ITEM and its whole line is
  dropped later, with ":"-indented lines. Lists are dropped rather than kept as paragraphs, as
  BERT's paper did for Wikipedia ("we extract only the text passages and ignore lists, tables,
  and headers") and WikiExtractor does by default: items are mostly fragments (names, dates,
  titles of works, links) that are not the sentences next-sentence prediction pairs up.
  """
  kind = type(node)
  if kind is nodes.Text:
    pieces.append(_text_piece(node.value))
  elif kind is nodes.Wikilink:
    _walk_wikilink(node, pieces, hidden)
  elif kind is nodes.ExternalLink:
    # [http://x label] shows its label; [http://x] shows a number and a bare URL itself.
    if node.brackets and node.title is not None:
      _walk_all(node.title, pieces, hidden)
  elif kind is nodes.HTMLEntity:
    pieces.append(node.normalize())
  elif kind is nodes.Tag:
    _walk_tag(node, pieces, hidden)
  elif kind is nodes.Heading:
    pieces.append("\n\n")  # a heading nested in a tag: dropped, ends the paragraph
  # Templates, template arguments ({{{1}}}) and comments show nothing.


def _text_piece(text):
  """What a text shows: itself, without the tags the parser left as text (`_STRAY_TAG`)."""
  return _STRAY_TAG.sub("", text) if "<" in text else text


def _walk_all(wikicode, pieces, hidden):
  for node in wikicode.nodes:
    _walk(node, pieces, hidden)


def _walk_tag(tag, pieces, hidden):
  """Appends the text a tag shows: none for dropped tags, its content for the others."""
  if tag.wiki_markup is not None:  # markup written as wikitext, not as an HTML tag
    piece = _markup_piece(tag.wiki_markup)
    if piece:
      pieces.append(piece)
    elif str(tag.tag).lower() not in _DROPPED_TAGS and tag.contents is not None:
      _walk_all(tag.contents, pieces, hidden)  # '' and ''' when style tags are parsed
    return  # {| tables |}
  name = str(tag.tag).strip().lower()
  if name in _DROPPED_TAGS:
    return
  if name == "br":
    pieces.append(" ")
  elif name in _BLOCK_TAGS:
    pieces.append("\n\n")
    if tag.contents is not None:
      _walk_all(tag.contents, pieces, hidden)
    pieces.append("\n\n")
  elif tag.contents is not None and not tag.self_closing:
    _walk_all(tag.contents, pieces, hidden)


def _markup_piece(markup):
  """What a tag written as wiki markup shows whatever it holds: _LIST_ITEM for a list item's
  marker, a paragraph break for a rule (----); None for other markup ({| tables |})."""
  if markup in _LIST_MARKUP:
    return _LIST_ITEM
  return "\n\n" if markup.startswith("-") else None


def _walk_wikilink(link, pieces, hidden):
  """Appends a wiki link's label: its text after "|", else its title as written
  (`_title_label`); nothing for a link that shows nothing (`_is_hidden_link`)."""
  if _is_hidden_link(str(link.title), hidden):
    return
  if link.text is not None and str(link.text).strip():
    _walk_all(link.text, pieces, hidden)
    return
  title = []
  _walk_all(link.title, title, hidden)
  pieces.append(_title_label("".join(title), piped=link.text is not None))


def _is_hidden_link(title, hidden):
  """Whether a link whose title is written `title` shows nothing: links to files, images and
  categories (whose prefix, lower case, is in `hidden`), and interlanguage links. A leading
  colon ([[:Category:Cities]]) makes any of them an ordinary link."""
  prefix, colon, _ = title.partition(":")
  prefix = prefix.strip()
  if not colon or not prefix:
    return False
  return (" ".join(prefix.lower().replace("_", " ").split()) in hidden
          or _LANGUAGE_PREFIX.fullmatch(prefix) is not None)


def _title_label(title, piped):
  """The label of a link without its own: its title's text (`title`, markup dropped) with
  underscores as spaces and no leading colon; for [[title|]] (`piped`), MediaWiki's pipe trick
  ([[Paris, Texas|]] shows "Paris")."""
  title = title.replace("_", " ").strip().lstrip(":").strip()
  return _pipe_trick(title) if piped else title


def _pipe_trick(title):
  """The label MediaWiki gives [[title|]]: no namespace, no "(...)" or ", ..." at the end."""
  title = title.split(":", 1)[-1]
  shorter = re.sub(r"\s*\([^()]*\)$", "", title)
  return shorter if shorter != title else title.split(",", 1)[0]


def _clean_paragraph(text):
  """One paragraph's text, its lines joined: what dropped nodes left behind (empty brackets,
  spaces before punctuation) removed, whitespace collapsed."""
  if "(" in text or ")" in text:
    text = _SEPARATOR_BEFORE_CLOSE.sub(")", _SEPARATOR_AFTER_OPEN.sub("(", text))
    text = _EMPTY_BRACKETS.sub("", text)
  text = _WHITESPACE.sub(" ", text)
  return _SPACE_BEFORE_PUNCTUATION.sub(r"\1", text).strip()
