"""utils/corpus/wikitext.py: an article's wikitext to the plain-text paragraphs a reader sees.

Every expected paragraph below is written by hand from what the article shows on Wikipedia.
"""

import random

import mwparserfromhell
import pytest

from bench import synthetic_wiki
from utils.corpus import wikidump
from utils.corpus import wikitext


def _paragraphs(text):
  return wikitext.article_paragraphs(text)


def test_an_article_with_most_of_wikitexts_markup():
  article = """{{Short description|Greek island}}
{{Infobox island
| name = Crete
| native_name = {{lang|el|Κρήτη}}
| image = [[File:Crete map.png|250px]]
| area_km2 = 8,450
| population = {{formatnum:617360}}
}}
'''Crete''' ({{lang-el|Κρήτη}}, ''Kríti'') is the largest and most populous of the \
[[Greek islands]],<ref name="census">{{cite web |title=Census 2021 |url=https://example.org}}\
</ref> the 88th&nbsp;largest island in the world.<ref name="census" />
It lies in the [[Mediterranean Sea|Mediterranean]] &ndash; south of the [[Aegean Sea]].

[[File:Balos beach.jpg|thumb|right|[[Balos]] lagoon, on the [[Gramvousa]] peninsula]]
__TOC__
== History ==
<!-- Keep this section short:
     see the talk page. -->
The [[Minoan civilization]] flourished on Crete from about 3000&nbsp;BC.
{| class="wikitable"
|+ Periods
! Period !! Dates
|-
| Prepalatial || 3500–2100 BC
|}

Its capital was [[Knossos]].<ref>Evans, 1921.</ref>

== See also ==
* [[List of islands of Greece]]
Some prose under "See also".

== References ==
{{Reflist}}

== External links ==
* [https://www.increte.gr Region of Crete]
* {{Official website|https://www.crete.gov.gr}}

[[Category:Crete| ]]
[[Category:Islands of Greece]]
[[el:Κρήτη]]
[[fr:Crète]]
"""
  assert _paragraphs(article) == [
      "Crete (Kríti) is the largest and most populous of the Greek islands, the 88th largest "
      "island in the world. It lies in the Mediterranean – south of the Aegean Sea.",
      "The Minoan civilization flourished on Crete from about 3000 BC.",
      "Its capital was Knossos.",
  ]


def test_nested_and_multi_line_templates_are_dropped():
  assert _paragraphs("{{Infobox person\n| name = {{nowrap|A {{small|B}}}}\n| born = "
                     "{{birth date|1900|1|1}}\n}}\nAda was born in London.{{citation needed}}"
                     ) == ["Ada was born in London."]


def test_tables_are_dropped_wiki_html_and_unclosed():
  assert _paragraphs("Before.\n{|\n| a || b\n|}\nAfter.") == ["Before.", "After."]
  assert _paragraphs("Before.\n<table><tr><td>cell</td></tr></table>\nAfter.") == [
      "Before.", "After."]
  assert _paragraphs("Before.\n{| class=x\n! head\n| cell\n\nAfter.") == ["Before.", "After."]


def test_refs_are_dropped_with_their_content():
  assert _paragraphs('One.<ref name="a">Book, p. 4.</ref> Two.<ref name="a"/> Three.<ref '
                     'group="n">A note with [[a link]].</ref>\n<references />') == [
                         "One. Two. Three."]


def test_other_tags_keep_their_text_without_their_markup():
  assert _paragraphs("<b>Water</b> is H<sub>2</sub>O; <i>E</i> = mc<sup>2</sup> "
                     '<small>(roughly)</small> <span style="color:red">red</span>.') == [
                         "Water is H2O; E = mc2 (roughly) red."]


def test_formulae_and_galleries_are_dropped():
  assert _paragraphs("The area is <math>\\pi r^2</math> in all.\n<gallery>\nA.jpg|One\n"
                     "</gallery>") == ["The area is in all."]


def test_categories_files_images_and_interlanguage_links_show_nothing():
  text = ("Text.[[Category:Things]] [[image:Map.svg|thumb|A [[map]] caption]]"
          "[[ File : B.png ]] [[de:Text]] [[zh-yue:Text]] [[simple:Text]]")
  assert _paragraphs(text) == ["Text."]


def test_a_colon_makes_a_category_an_ordinary_link_and_sister_projects_keep_labels():
  assert _paragraphs("See [[:Category:Islands|the islands]], [[:Category:Capes]] and "
                     "[[wikt:island|island]].") == [
                         "See the islands, Category:Capes and island."]


def test_wiki_links_show_their_labels():
  assert _paragraphs("[[Paris|the capital]], [[Paris]], [[New_York]], [[bus]]es, "
                     "[[Paris, Texas|]] and [[Mercury (planet)|]].") == [
                         "the capital, Paris, New York, buses, Paris and Mercury."]


def test_external_links_show_labels_and_drop_bare_urls():
  assert _paragraphs("See [http://example.org the site] or http://example.org/raw or "
                     "[https://example.org/n].") == ["See the site or or."]


def test_html_entities_are_decoded():
  assert _paragraphs("A&nbsp;B &amp; C &ndash; D &eacute;t&#233; &#x3A9; &lt;br&gt;") == [
      "A B & C – D été Ω <br>"]


def test_non_ascii_text_is_kept():
  assert _paragraphs("Ελλάδα, 東京 and Zürich; ça va. Ünïcödé—kept.") == [
      "Ελλάδα, 東京 and Zürich; ça va. Ünïcödé—kept."]


def test_bold_and_italic_quote_marks_are_removed():
  assert _paragraphs("'''Bold''', ''italic'', '''''both''''' and an apostrophe's.") == [
      "Bold, italic, both and an apostrophe's."]


def test_headings_end_paragraphs_and_are_dropped():
  assert _paragraphs("Intro.\n== Early life ==\nBorn.\n=== Family ===\nParents.") == [
      "Intro.", "Born.", "Parents."]


def test_end_sections_are_dropped_with_their_subsections_up_to_the_next_section():
  text = ("Lead.\n== Notes ==\nA note.\n=== Sub ===\nSub note.\n== Further reading ==\n"
          "A book.\n==References==\nRefs.\n== Legacy ==\nRemembered.\n== See Also ==\nMore.")
  assert _paragraphs(text) == ["Lead.", "Remembered."]


def test_lists_are_dropped_and_end_paragraphs():
  # Lists are dropped (see wikitext._walk): bullets, numbers, definitions and indented lines.
  text = ("Intro line\n* first item\n** nested item\n# numbered\n; term : definition\n"
          ": indented\nafter the list.\nSame paragraph.")
  assert _paragraphs(text) == ["Intro line", "after the list. Same paragraph."]


def test_lines_join_into_paragraphs_at_blank_lines_and_whitespace_collapses():
  assert _paragraphs("\n\n  First   line\nsecond\tline.  \n\n\n\nNext  one.\n \n") == [
      "First line second line.", "Next one."]


def test_empty_paragraphs_and_punctuation_left_alone_are_dropped():
  assert _paragraphs("{{Infobox}}\n\n<ref>x</ref>.\n\n[[File:A.jpg]]\n\nReal.") == ["Real."]
  assert _paragraphs("") == []
  assert _paragraphs("{{Only a template}}") == []


def test_brackets_emptied_by_dropped_markup_are_removed():
  assert _paragraphs("Paris ({{IPA-fr|paʁi}}) is big. Rome (Italian: {{lang|it|Roma}}) too. "
                     "Oslo ({{lang|no|Oslo}}; born {{circa}} 1048) also.") == [
                         "Paris is big. Rome (Italian) too. Oslo (born 1048) also."]


def test_magic_words_and_comments_are_dropped():
  assert _paragraphs("__NOTOC__\nText<!-- hidden -->\n__NOEDITSECTION__ more.") == [
      "Text more."]


def test_unclosed_tags_left_as_text_lose_their_markup():
  assert _paragraphs("Text.<ref>unclosed note</div>") == ["Text.unclosed note"]


# ---------------------------------------------------------------------------------------------
# article_paragraphs builds only the nodes that show text (wikitext._top_level): its paragraphs
# must be those of the walk of mwparserfromhell's whole tree.
# ---------------------------------------------------------------------------------------------


def _whole_tree_paragraphs(text):
  """The paragraphs of mwparserfromhell's whole tree of `text`: the path without shortcuts."""
  return wikitext.tree_paragraphs(mwparserfromhell.parse(text, skip_style_tags=True))


@pytest.mark.parametrize("text, expected", [
    # Nested templates, a template inside a <ref>, template arguments ({{{1}}}).
    ("A {{outer|x={{inner|{{deep}}}}|y}} b.", ["A b."]),
    ("One.<ref>{{cite web|title=T|url=http://x}} p. 4</ref> Two.<ref name=a/>", ["One. Two."]),
    ("A {{{1}}} b {{{name|default}}} c {{{{{x}}}}} d.", ["A b c d."]),
    # Unclosed: the parser leaves the opening as text, and parses what follows it.
    ("Text {{unclosed|a [[Link]] b. More.", ["Text {{unclosed|a Link b. More."]),
    ("Before.\n{{Infobox\n| name = A\n\nAfter [[the end]].", ["Before. {{Infobox",
                                                               "After the end."]),
    ("Text.<ref>unclosed note and [[a link]].", ["Text.unclosed note and a link."]),
    ("Text.<ref name=a>note {{x}}\n\nNext paragraph.", ["Text.note", "Next paragraph."]),
    ("a }} b {{ c ]] d [[ e {{{ f }}}} g.", ["a }} b {{ c ]] d [[ e } g."]),
    # Braces and brackets inside <nowiki> are text; inside <math> and <pre>, dropped with them.
    ("Literal <nowiki>{{not a template}} and [[not a link]]</nowiki> text.",
     ["Literal {{not a template}} and [[not a link]] text."]),
    ("Area <math>\\{ x \\} {{</math> here; <pre>{{x|</pre> code; <nowiki>}}</nowiki> end.",
     ["Area here; code; }} end."]),
    # Links: markup in a title before its colon, a label that is only a template, the pipe
    # trick, links inside links, in a tag's attributes, with tags in them.
    ("[[fr{{x}}:Paris]], [[Paris|{{lang|fr|Paris}}]], [[Paris|]] and [[File:A.jpg|thumb|A "
     "[[b]] c]] then [[x|y [[z]]]].", ["fr:Paris,, Paris and then y z."]),
    ('<span title="[[a b]]">x [[y]]</span> and <div>[[z|w]]</div>', ["x y and", "w"]),
    ("See [[a<b>c</b>]] and [[d|e<i>f</i>]].", ["See [[ac]] and ef."]),
    ("* [[Item]]\n{|\n| [[cell]] {{x}}\n|}\n----\nText [[Category:A]][[de:B]].", ["Text."]),
])
def test_edge_cases_read_as_the_whole_tree_reads_them(text, expected):
  assert wikitext.article_paragraphs(text) == _whole_tree_paragraphs(text) == expected


# Pieces of wikitext that open, close or break constructs, for random texts.
_PIECES = (
    "{{", "}}", "{{{", "}}}", "{", "}", "[[", "]]", "[", "]", "|", "=", "<", ">", "/>", "\n",
    "\n\n", "==", "===", "*", "#", ":", ";", "'''", "''", "----", "_", "(", ")", ",", ".", " ", "text",
    "Word", "a:b", "File:", "Category:", "fr:", "See also", "References", "__TOC__", "&amp;",
    "&nbsp;", "&#x3A9;", "[http://x.org y]", "[http://x.org]", "http://x.org", "<ref>", "</ref>",
    "<ref name=a/>", '<ref name="b">', "<REF>", "</ref >", "<references/>", "<nowiki>",
    "</nowiki>", "<!--", "-->", "{|", "|}", "|-", "{|\n|a\n|}", "<math>", "</math>", "<pre>",
    "</pre>", "<gallery>", "</gallery>", "<span>", "</span>", "<span style=x>", "<div>",
    "</div>", "<poem>", "</poem>", "<b>", "</b>", "<small>", "<sub>", "<br/>", "{{x|", "[[a|",
    "[[b]]", "\n*", "\n==H==\n", "\n== See also ==\n")


def test_random_markup_reads_as_the_whole_tree_reads_it():
  rng = random.Random(0)
  for _ in range(2000):
    text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 40)))
    assert wikitext.article_paragraphs(text) == _whole_tree_paragraphs(text), repr(text)


def test_every_article_of_a_synthetic_dump_reads_as_the_whole_tree_reads_it(tmp_path):
  path = str(tmp_path / "dump.xml")
  counts = synthetic_wiki.write_dump(path, 1_500_000, synthetic_wiki.sample_model(), seed=5)
  articles = list(wikidump.iter_articles(path))
  assert counts["pages"] >= 200 and len(articles) >= 100
  for page in articles:
    assert wikitext.article_paragraphs(page.text) == _whole_tree_paragraphs(page.text), page.title
