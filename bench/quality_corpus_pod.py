"""The English prose of a Perl POD file (a `.pod`, or the documentation inside a `.pm` module):
perl's own POD parser (Pod::Simple::XHTML, shipped with perl) renders it as HTML, whose prose
paragraphs `quality_corpus_html.prose_paragraphs` takes (verbatim blocks, headings and code-only
items left out).

  paragraphs = prose_paragraphs("/usr/share/perl/5.36/pod/perlintro.pod")
"""

import subprocess

from bench import quality_corpus_html

# Renders the POD of the file named by its argument as an HTML body on stdout (UTF-8; no page
# header or footer, no index, and no "POD ERRORS" section: the parser's own words, not the
# author's).
_RENDER = ("use Pod::Simple::XHTML; my $p = Pod::Simple::XHTML->new; $p->html_header(''); "
           "$p->html_footer(''); $p->index(0); $p->no_errata_section(1); $p->no_whining(1); "
           "my $out; $p->output_string(\\$out); "
           "$p->parse_file($ARGV[0]); binmode STDOUT, ':encoding(UTF-8)'; print $out;")
RENDER_TIMEOUT_SECONDS = 60


def to_html(path):
  """The HTML Pod::Simple::XHTML renders of the POD in `path` (str; empty without POD).

  Raises:
    RuntimeError: perl failed, with the file and its message.
  """
  result = subprocess.run(["perl", "-e", _RENDER, path], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=RENDER_TIMEOUT_SECONDS)
  if result.returncode != 0:
    raise RuntimeError("perl's Pod::Simple::XHTML failed on %s (exit %d): %s" % (
        path, result.returncode, result.stderr.decode("utf-8", "replace")[-2000:]))
  return result.stdout.decode("utf-8", "replace")


def prose_paragraphs(path):
  """The prose paragraphs of the POD in the file `path`, in order (list of str, one line each)."""
  return quality_corpus_html.prose_paragraphs(to_html(path))
