"""A small MediaWiki dump written as MediaWiki's export writes one (schema 0.11), and what a
reader sees in it, written by hand: the pages' fields and the articles' paragraphs; more articles
(`village_page`) and Wikipedia's multistream bz2 (`multistream`) for larger dumps.

The wikitext inside <text> is XML-escaped ("&lt;ref&gt;"), as dumps store it. Read by
tests/test_corpus_wikidump.py and the raw-corpus tests.
"""

import bz2

EXPORT_0_11 = "http://www.mediawiki.org/xml/export-0.11/"
EXPORT_0_10 = "http://www.mediawiki.org/xml/export-0.10/"

DUMP_HEADER = """\
<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
xsi:schemaLocation="http://www.mediawiki.org/xml/export-0.11/ \
http://www.mediawiki.org/xml/export-0.11.xsd" version="0.11" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <generator>MediaWiki 1.42.0-wmf.5</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="-2" case="first-letter">Media</namespace>
      <namespace key="0" case="first-letter" />
      <namespace key="1" case="first-letter">Talk</namespace>
      <namespace key="2" case="first-letter">User</namespace>
      <namespace key="6" case="first-letter">File</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""

PARIS = """\
  <page>
    <title>Paris</title>
    <ns>0</ns>
    <id>22989</id>
    <revision>
      <id>1190000001</id>
      <parentid>1189999999</parentid>
      <timestamp>2024-01-02T03:04:05Z</timestamp>
      <contributor>
        <username>Example editor</username>
        <id>4242</id>
      </contributor>
      <comment>copyedit</comment>
      <model>wikitext</model>
      <format>text/x-wiki</format>
      <text bytes="1668" sha1="0000000000000000000000000000000" xml:space="preserve">\
{{Short description|Capital of France}}
{{Infobox settlement
| name = Paris
| image_skyline = {{Multiple image
  | image1 = Eiffel.jpg
  }}
| population_total = 2,102,650
}}
'''Paris''' ({{IPA-fr|paʁi|lang}}) is the [[capital city|capital]] and most populous city of \
[[France]].&lt;ref name="insee"&gt;{{cite web |title=Populations |publisher=INSEE}}&lt;/ref&gt; \
Its population was 2,102,650 in 2023.&lt;ref name="insee" /&gt;

[[File:Paris - Eiffelturm und Marsfeld2.jpg|thumb|The [[Eiffel Tower]] seen from the \
[[Champ de Mars]]]]
The city is a centre of finance, diplomacy, commerce, culture, ''fashion''&amp;nbsp;and \
gastronomy.&lt;!-- a hidden comment --&gt;

== History ==
{| class="wikitable"
! Year !! Population
|-
| 1801 || 546,856
|}
The [[Parisii (Gaul)|Parisii]], a sub-tribe of the Celtic [[Senones]], inhabited the area \
around the 3rd&amp;nbsp;century BC.

=== Middle Ages ===
By the end of the 12th century, Paris had become the political, economic, religious and \
cultural capital of France.
* [[Notre-Dame de Paris]] (1163)
* [[Sainte-Chapelle]] (1248)

== References ==
{{Reflist}}
* {{cite book |title=Paris}}
Prose under the references.

== External links ==
* [https://www.paris.fr Official website]

[[Category:Paris| ]]
[[Category:Capitals in Europe]]
[[de:Paris]]
[[fr:Paris]]</text>
      <sha1>0000000000000000000000000000000</sha1>
    </revision>
  </page>
"""

EDITOR = "<username>Example editor</username>\n        <id>4242</id>"


def page(title, namespace, page_id, revisions, redirect=None):
  """A <page> as the export writes one, after PARIS's model but with only the fields a reader may
  look at. `revisions`: (revision id, timestamp, contributor's XML, wikitext escaped for XML)
  tuples, oldest first; an empty wikitext is written as an empty element."""
  parts = ["  <page>\n    <title>%s</title>\n    <ns>%d</ns>\n    <id>%d</id>\n" % (
      title, namespace, page_id)]
  if redirect is not None:
    parts.append('    <redirect title="%s" />\n' % redirect)
  for revision_id, timestamp, contributor, text in revisions:
    parts.append("    <revision>\n      <id>%d</id>\n      <timestamp>%s</timestamp>\n"
                 "      <contributor>\n        %s\n      </contributor>\n"
                 "      <model>wikitext</model>\n      <format>text/x-wiki</format>\n" % (
                     revision_id, timestamp, contributor))
    if text:
      parts.append('      <text bytes="%d" xml:space="preserve">%s</text>\n' % (
          len(text.encode("utf-8")), text))
    else:
      parts.append('      <text bytes="0" xml:space="preserve" />\n')
    parts.append("    </revision>\n")
  parts.append("  </page>\n")
  return "".join(parts)


LUTETIA_REDIRECT = page("Lutetia", 0, 5001, [
    (1190000002, "2023-05-06T07:08:09Z", "<ip>192.0.2.1</ip>", "#REDIRECT [[Paris]]")],
                        redirect="Paris")
TALK_PAGE = page("Talk:Paris", 1, 5002, [
    (1190000003, "2023-05-06T07:08:09Z", EDITOR,
     "Should the lead mention the population? ~~~~")])
USER_PAGE = page("User:Example editor", 2, 5003, [
    (1190000004, "2023-05-06T07:08:09Z", EDITOR, "I edit articles on cities.")])

# Two revisions, oldest first as dumps list them: the article is the last one's text.
ATHENS = page("Athens", 0, 1216, [
    (1000, "2020-01-01T00:00:00Z", EDITOR, "Athens is a city (old text)."),
    (2000, "2024-01-01T00:00:00Z", EDITOR,
     "'''Athens''' ({{lang-el|Αθήνα}}, ''Athína'') is the capital and largest city of "
     "[[Greece]]. Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.")])
TOKYO = page("Tokyo", 0, 30057, [
    (3000, "2024-01-01T00:00:00Z", EDITOR,
     "'''Tokyo''' (東京, ''Tōkyō''), officially the '''Tokyo Metropolis''' (東京都, "
     "''Tōkyō-to''), is the capital of [[Japan]].&lt;ref&gt;{{cite web|url=http://example.org}}"
     "&lt;/ref&gt;")])

# A redirect without a <redirect> element, in lower case, and an article whose text is empty.
UNMARKED_REDIRECT = page("Paname", 0, 5004, [
    (4000, "2024-01-01T00:00:00Z", EDITOR, "#redirect [[Paris]]")])
EMPTY_ARTICLE = page("Empty", 0, 5005, [(5000, "2024-01-01T00:00:00Z", EDITOR, "")])

PAGES = (PARIS, LUTETIA_REDIRECT, TALK_PAGE, USER_PAGE, ATHENS, TOKYO, UNMARKED_REDIRECT,
         EMPTY_ARTICLE)
DUMP_FOOTER = "</mediawiki>\n"
DUMP = DUMP_HEADER + "".join(PAGES) + DUMP_FOOTER

# Expected by hand: (title, namespace, page id, redirect) of every page.
EXPECTED_PAGES = [
    ("Paris", 0, 22989, None),
    ("Lutetia", 0, 5001, "Paris"),
    ("Talk:Paris", 1, 5002, None),
    ("User:Example editor", 2, 5003, None),
    ("Athens", 0, 1216, None),
    ("Tokyo", 0, 30057, None),
    ("Paname", 0, 5004, None),
    ("Empty", 0, 5005, None),
]

# Expected by hand: the paragraphs a reader sees in each article.
EXPECTED_PARAGRAPHS = {
    "Paris": [
        "Paris is the capital and most populous city of France. Its population was 2,102,650 "
        "in 2023.",
        "The city is a centre of finance, diplomacy, commerce, culture, fashion and gastronomy.",
        "The Parisii, a sub-tribe of the Celtic Senones, inhabited the area around the 3rd "
        "century BC.",
        "By the end of the 12th century, Paris had become the political, economic, religious "
        "and cultural capital of France.",
    ],
    "Athens": [
        "Athens (Athína) is the capital and largest city of Greece. Η Αθήνα είναι η πρωτεύουσα "
        "της Ελλάδας.",
    ],
    "Tokyo": [
        "Tokyo (東京, Tōkyō), officially the Tokyo Metropolis (東京都, Tōkyō-to), is the capital "
        "of Japan.",
    ],
}

# An article of its own for larger dumps (`village_page`): a template, a reference and a category
# around two sentences that tell it from the others.
VILLAGE_TEXT = """{{Infobox settlement|name=Village %(n)d}}
'''Village %(n)d''' is a village in [[Ruritania]] with %(people)d \
inhabitants.&lt;ref&gt;{{cite book|title=Census of Ruritania}}&lt;/ref&gt; Its church was built \
in %(year)d.

[[Category:Villages of Ruritania]]"""


def village_page(number):
  """The <page> of article "Village <number>" (its sentences: `village_sentences`)."""
  text = VILLAGE_TEXT % dict(n=number, people=100 + 7 * number, year=1100 + number)
  return page("Village %d" % number, 0, 90000 + number,
              [(90000 + number, "2024-01-01T00:00:00Z", EDITOR, text)])


def village_sentences(number):
  """The sentences a reader sees in `village_page(number)`, written by hand."""
  return ["Village %d is a village in Ruritania with %d inhabitants." % (number, 100 + 7 * number),
          "Its church was built in %d." % (1100 + number)]


def multistream(streams):
  """The text of each stream compressed on its own, concatenated: Wikipedia's multistream dump."""
  return b"".join(bz2.compress(text.encode("utf-8")) for text in streams)
