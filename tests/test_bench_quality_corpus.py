"""bench/quality_corpus.py and its modules: reST, HTML and POD markup removed, translations left out,
the task's documents kept out of pretraining, the held-out split by document, the cache."""

import collections
import dataclasses
import glob
import json
import os
import subprocess
import sys

import pytest

from bench import quality_corpus
from bench import quality_corpus_html
from bench import quality_corpus_pod
from bench import quality_corpus_rest
from bench import quality_corpus_task
from tests import helpers
from utils.finetuning import classifier_data

SAMPLE = """\
.. _os-path-label:

:mod:`os.path` --- Common pathname manipulations
================================================

:Author: Someone <someone@example.org>
:Date: October, 2015

.. module:: os.path
   :synopsis: Operations on pathnames.

.. index:: single: path; operations

This module implements **useful** functions on pathnames; see :func:`~os.path.join` and
:ref:`the tutorial <tut-files>` for more [#]_.

.. CONTENTS

   1. A commented table of contents that is no prose at all.

.. function:: abspath(path, *, strict=False)
   :noindex:

   Return a normalized absolutized version of the pathname *path*, as :c:func:`realpath` does.

   .. versionchanged:: 3.8 Accepts a path-like object in every case.

   .. code-block:: python

      print("code that is never prose at all")

.. kernel-doc:: include/linux/kernel.h
   :internal:

.. flat-table:: Registers of the device
   :header-rows: 1

   * - REGISTER_ZERO_VALUE
     - the zero register of the device

+----------------+------------------------+
| grid table cell | another grid cell here |
+----------------+------------------------+

Example of a literal block follows here::

    a literal block that holds an example only

.. note::
   A note's body is prose that the reader should keep.

.. seealso::
   The pathlib module offers high-level path objects.

.. toctree::
   :maxdepth: 2

   tutorial/index of the whole documentation

.. [#] A footnote that explains one more thing here.
"""


def test_prose_paragraphs_keep_prose_and_drop_markup_code_tables_and_options():
  paragraphs = quality_corpus_rest.prose_paragraphs(SAMPLE)
  assert paragraphs == [
      "This module implements useful functions on pathnames; see join and the tutorial for "
      "more.",
      "Return a normalized absolutized version of the pathname path, as realpath does.",
      "Accepts a path-like object in every case.",
      "Example of a literal block follows here:",
      "A note's body is prose that the reader should keep.",
      "The pathlib module offers high-level path objects.",
      "A footnote that explains one more thing here."]
  text = " ".join(paragraphs)
  for gone in ("print", "REGISTER_ZERO_VALUE", "grid table", "literal block that", "CONTENTS",
               "Someone", "synopsis", "operations", "kernel.h", "maxdepth", "tutorial/index",
               "strict", ":func:", "`", "*", "os-path-label", "tut-files"):
    assert gone not in text, gone


HTML_SAMPLE = """\
<!DOCTYPE html><html><head><title>Page title words here</title>
<script>var prose = "a script is never prose at all";</script></head><body>
<div class="navheader"><table><tr><td><a href="a.html">Previous page of the manual</a></td></tr>
</table></div>
<div id="sidebar-search"><p>Search the whole documentation site here.</p></div>
<nav><ul><li>Home of the documentation and more</li></ul></nav>
<div class="body">
<h1>A heading is no paragraph at all<a class="headerlink" href="#h">\u00b6</a></h1>
<p>The server process manages the <code>database</code> files&nbsp;and accepts
   connections.<br>It runs as &ldquo;postgres&rdquo;.</p>
<p><code>pg_ctl start -D /usr/local/pgsql/data</code></p>
<div class="highlight-python notranslate"><div class="highlight"><span>print("code in a
highlighted block")</span></div></div>
<pre>SELECT a FROM b WHERE c;</pre>
<table><tr><td>A table cell that holds several words</td></tr></table>
<ul><li>A list item says one thing here
  <ul><li><p>A nested item holds its own paragraph.</p></li></ul></li>
<li>Another item that is left open
</ul>
<dl><dt>--verbose option name here</dt><dd>Print more about what the command does.</dd></dl>
<p>One paragraph left open by an old page
<p>and the next one that closes it, with words.
</div>
<div class="footer">Copyright 2024 by the whole project team.</div>
</body></html>
"""


def test_html_prose_keeps_paragraphs_and_drops_code_tables_navigation():
  assert quality_corpus_html.prose_paragraphs(HTML_SAMPLE) == [
      "The server process manages the database files and accepts connections. It runs as "
      "\u201cpostgres\u201d.",
      "A list item says one thing here",
      "A nested item holds its own paragraph.",
      "Another item that is left open",
      "Print more about what the command does.",
      "One paragraph left open by an old page",
      "and the next one that closes it, with words."]


POD_SAMPLE = """\
package Sample::Module;
sub code_between_pod { return "perl code is never prose"; }
1;

=head1 NAME

Sample::Module - a module that shows how POD is read

=head1 SYNOPSIS

    use Sample::Module;
    my $object = Sample::Module->new(verbose => 1);

=head1 DESCRIPTION

This module reads B<bold> and I<italic> text, and names C<new()> in a sentence.

=over 4

=item new

Creates an object that holds the settings L<perlobj> describes.

=back

=over

=item * A bullet item is a paragraph of its own here

=item * And a mistake: the list does not end

=head2 Methods

=for comment A comment for POD readers only, never shown to anyone.

=cut

sub more_code { return 2; }
"""


@pytest.mark.e2e
def test_pod_prose_keeps_paragraphs_and_drops_code_and_headings(tmp_path):
  path = tmp_path / "Module.pm"
  path.write_text(POD_SAMPLE)
  assert quality_corpus_pod.prose_paragraphs(str(path)) == [
      "Sample::Module - a module that shows how POD is read",
      "This module reads bold and italic text, and names new() in a sentence.",
      "Creates an object that holds the settings perlobj describes.",
      "A bullet item is a paragraph of its own here",
      "And a mistake: the list does not end"]  # and no "POD ERRORS" section


@pytest.mark.e2e
def test_pod_names_a_file_perl_cannot_read(tmp_path):
  with pytest.raises(RuntimeError, match="Pod::Simple::XHTML failed on .*missing.pod"):
    quality_corpus_pod.to_html(str(tmp_path / "missing.pod"))


def test_source_files_take_pages_and_pod_but_not_indexes_or_static_folders(tmp_path):
  for relative in ("html/index.html", "html/ref/models.html", "html/genindex.html",
                   "html/search.html", "html/_modules/django/db.html", "html/_static/a.html",
                   "html/objects.inv", "perl/pod/perlintro.pod", "perl/Pod/Simple.pm",
                   "perl/Pod/Simple.pod", "perl/Config.pl"):
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("Some text of the file.\n")
  files = quality_corpus.source_files([("django", str(tmp_path / "html"), "html"),
                                       ("perl", str(tmp_path / "perl"), "pod")])
  assert [entry[0:2] + entry[3:] for entry in files] == [
      ("django/index", "django/.", "html"), ("django/ref/models", "django/ref", "html"),
      ("perl/Pod/Simple.pm", "perl/Pod", "pod"), ("perl/Pod/Simple.pod", "perl/Pod", "pod"),
      ("perl/pod/perlintro.pod", "perl/pod", "pod")]


def test_is_prose_wants_words_letters_and_ascii_letters():
  assert quality_corpus_rest.is_prose("The module reads the file once.")
  assert not quality_corpus_rest.is_prose("Three words only")
  assert not quality_corpus_rest.is_prose("0x00 0x1f 0x20 0xff 0x7f 0x80")
  assert not quality_corpus_rest.is_prose("这是 一个 中文 的 段落 内容")


def test_source_files_leave_translations_out(tmp_path):
  for relative in ("admin-guide/index.rst.txt", "translations/zh_CN/index.rst.txt",
                   "translations/index.rst.txt", "docs/ja_JP/howto.rst.txt", "index.rst.txt",
                   "admin-guide/image.png", "admin-guide/notes.md.txt"):
    path = tmp_path / "linux" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("Some text of the file.\n")
  files = quality_corpus.source_files([("linux", str(tmp_path / "linux"), "rest")])
  assert [(name, label) for name, label, _, _ in files] == [
      ("linux/admin-guide/index", "linux/admin-guide"), ("linux/index", "linux/.")]


def _documents():
  """{name: (class, paragraphs)}: class a of 4 documents, b of 3, with 2 examples each."""
  example = "word " * quality_corpus_task.MIN_EXAMPLE_WORDS
  documents = {}
  for label, count in (("a", 4), ("b", 3)):
    for index in range(count):
      documents["%s/doc%d" % (label, index)] = (label, [
          "%s %s %d one" % (example, label, index), "%s %s %d two" % (example, label, index),
          "too short"])
  return documents


def test_task_takes_whole_documents_per_class_dev_apart_from_train():
  documents = _documents()
  settings = quality_corpus_task.TaskSettings(("a", "b"), train_per_class=3, dev_per_class=2)
  chosen, train, dev = quality_corpus_task.choose(documents, settings)
  assert collections.Counter(label for label, _ in train) == {"a": 3, "b": 3}
  assert collections.Counter(label for label, _ in dev) == {"a": 2, "b": 2}
  # Each row's document: "<label> <index>" in its text; dev and training documents differ.
  doc_of = lambda row: tuple(row[1].split()[-3:-1])  # noqa: E731
  assert not set(map(doc_of, train)) & set(map(doc_of, dev))
  # Dev takes the first document of each class in hash order, training the next two.
  for label in ("a", "b"):
    order = sorted((n for n in documents if n.startswith(label)),
                   key=quality_corpus_task.document_order)
    assert {doc_of(r) for r in dev if r[0] == label} == {(label, order[0][-1])}
    assert {doc_of(r) for r in train if r[0] == label} == {(label, order[1][-1]),
                                                           (label, order[2][-1])}
    assert set(order[:3]) <= chosen and not set(order[3:]) & chosen
  assert len(chosen) == 6


def test_task_names_a_class_without_enough_paragraphs():
  settings = quality_corpus_task.TaskSettings(("a", "b"), train_per_class=5, dev_per_class=2)
  with pytest.raises(ValueError, match="task class b: 2 dev and 4 training paragraphs found in "
                                       "its 3 documents, 2 and 5 wanted"):
    quality_corpus_task.choose(_documents(), settings)


# Every package the corpus reads, in the order it installs them.
ALL_PACKAGES = ["python3.11-doc", "linux-doc-6.1", "llvm-15-doc", "cmake-doc", "postgresql-doc-15",
                "python-django-doc", "python-sqlalchemy-doc", "git-doc", "perl-doc",
                "perl-modules-5.36"]


def test_missing_packages_not_root_name_the_packages_and_the_command(monkeypatch):
  installed = {p: "1" for p in ALL_PACKAGES if p not in ("linux-doc-6.1", "git-doc")}
  monkeypatch.setattr(quality_corpus, "package_versions", lambda quick: installed)
  with pytest.raises(quality_corpus.SourcesMissing) as caught:
    quality_corpus.ensure_packages(run=None, is_root=False)
  assert "not installed (linux-doc-6.1, git-doc)" in str(caught.value)
  assert ("apt-get install -y --no-install-recommends " + " ".join(ALL_PACKAGES)) in str(
      caught.value)


def test_missing_packages_as_root_are_installed_with_apt_get(monkeypatch):
  installed = {}
  monkeypatch.setattr(quality_corpus, "package_versions", lambda quick: dict(installed))
  monkeypatch.setattr(quality_corpus.shutil, "which", lambda name: "/usr/bin/" + name)
  commands = []

  def run(argv, env):
    commands.append(argv)
    if "install" in argv:
      installed.update({p: "1.%d" % i for i, p in enumerate(ALL_PACKAGES)})
    return subprocess.CompletedProcess(argv, 0)

  assert quality_corpus.ensure_packages(run=run, is_root=True) == {
      p: "1.%d" % i for i, p in enumerate(ALL_PACKAGES)}
  assert commands == [["apt-get", "update", "-qq"],
                      ["apt-get", "install", "-y", "--no-install-recommends"] + ALL_PACKAGES
                      + ["-qq"]]


def test_packages_still_missing_after_apt_get_are_named(monkeypatch):
  installed = {p: "1" for p in ALL_PACKAGES if p not in ("python3.11-doc", "perl-doc")}
  monkeypatch.setattr(quality_corpus, "package_versions", lambda quick: installed)
  monkeypatch.setattr(quality_corpus.shutil, "which", lambda name: "/usr/bin/" + name)
  with pytest.raises(quality_corpus.SourcesMissing,
                     match="ran but python3.11-doc, perl-doc still not installed"):
    quality_corpus.ensure_packages(run=lambda argv, env: subprocess.CompletedProcess(argv, 0),
                                   is_root=True)


def test_prepare_command_passes_dynamic_masking_and_one_copy():
  settings = dataclasses.replace(quality_corpus.QUICK_SETTINGS, dynamic_masking=True)
  argv = quality_corpus.prepare_command(settings, "in", "out", 2)
  assert {"--dupe_factor=1", "--phases=128:20", "--eval_fraction=0.25", "--dynamic_masking",
          "--input_format=directory"} <= set(argv)
  assert "--dynamic_masking" not in quality_corpus.prepare_command(
      quality_corpus.QUICK_SETTINGS, "in", "out", 2)


def test_cache_is_reused_and_a_half_built_one_rebuilt(tmp_path, monkeypatch):
  builds = []

  def fake_build(work, settings, versions, workers, log):
    builds.append(work)
    os.makedirs(os.path.join(work, "task"))
    return dict(text_bytes=1, pretrain_text_bytes=1, text_bytes_per_source={"a": 1}, documents=1,
                pretrain_documents=1, task_documents=0, eval_documents=0,
                vocab_file="records/vocab.txt", train_record_dir="r/train", eval_record_dir="r/eval", train_sequences=1,
                eval_sequences=1, task_dir="task", task_train_examples=0, task_dev_examples=0,
                task_examples_per_class={}, package_versions=versions, build_seconds=0.0)

  monkeypatch.setattr(quality_corpus, "_build_into", fake_build)
  settings = quality_corpus.QUICK_SETTINGS
  first = quality_corpus.build(settings, root=str(tmp_path), log=lambda line: None)
  assert first.directory == quality_corpus.cache_dir(settings, first.package_versions,
                                                     str(tmp_path))
  assert first.task_dir == os.path.join(first.directory, "task")
  assert quality_corpus.build(settings, root=str(tmp_path), log=lambda line: None) == first
  assert len(builds) == 1
  # A folder without corpus.json (and a temporary folder a killed build left) is built again.
  os.remove(os.path.join(first.directory, "corpus.json"))
  os.makedirs(first.directory + ".partial/documents")
  assert quality_corpus.build(settings, root=str(tmp_path), log=lambda line: None) == first
  assert len(builds) == 2 and not os.path.exists(first.directory + ".partial")
  # Other settings are another folder.
  other = dataclasses.replace(settings, vocab_size=2048)
  assert quality_corpus.build(other, root=str(tmp_path), log=lambda line: None).directory != \
      first.directory


def _split_documents(folder):
  """The documents of prepare_corpus.py's text shards (a sentence a line, blank lines between)."""
  documents = set()
  for path in glob.glob(os.path.join(folder, "*.txt")):
    with open(path, encoding="utf-8") as f:
      documents.update(block.strip() for block in f.read().split("\n\n") if block.strip())
  return documents


def _check_task(corpus):
  """The task: every class, its quota of 6 training and 3 dev paragraphs, read by
  run_classifier.py's stdlib task as it is. Returns its rows {"train"|"dev": [(label, text)]}."""
  task = corpus["task_dir"]
  with open(os.path.join(task, "labels.txt")) as f:
    assert f.read().split() == list(quality_corpus.TASK_CLASSES)
  rows = {}
  for side in ("train", "dev"):
    with open(os.path.join(task, side + ".tsv"), encoding="utf-8") as f:
      lines = f.read().splitlines()
    assert lines[0] == "label\tparagraph"
    rows[side] = [line.split("\t") for line in lines[1:]]
    assert collections.Counter(label for label, _ in rows[side]) == {
        label: 6 if side == "train" else 3 for label in quality_corpus.TASK_CLASSES}
  assert corpus["task_examples_per_class"] == {label: 9 for label in quality_corpus.TASK_CLASSES}
  processor = classifier_data.get_processor("stdlib", task)
  assert processor.get_labels() == list(quality_corpus.TASK_CLASSES)
  dev_examples = processor.get_dev_examples(task)
  assert [(e.label, e.text_a) for e in dev_examples] == [tuple(row) for row in rows["dev"]]
  assert len(processor.get_train_examples(task)) == 48
  return rows


def _check_pretraining_documents(corpus, rows):
  """No task paragraph reaches pretraining; the HTML page and the POD file are pretraining
  documents, their prose without navigation."""
  documents = os.path.join(corpus["directory"], "documents")
  pretrain_text = ""
  for path in glob.glob(os.path.join(documents, "pretrain", "**", "*.txt"), recursive=True):
    with open(path, encoding="utf-8") as f:
      pretrain_text += f.read()
  task_files = glob.glob(os.path.join(documents, "task", "**", "*.txt"), recursive=True)
  assert len(task_files) == corpus["task_documents"] > 0
  for path in task_files:
    relative = os.path.relpath(path, os.path.join(documents, "task"))
    assert not os.path.exists(os.path.join(documents, "pretrain", relative))
  for _, paragraph in rows["train"] + rows["dev"]:
    assert paragraph not in pretrain_text
  assert "translations" not in json.dumps(os.listdir(os.path.join(documents, "pretrain", "linux")))
  # The HTML page and the POD file are pretraining documents, their prose without navigation.
  with open(os.path.join(documents, "pretrain", "postgres", "tutorial-arch.txt"),
            encoding="utf-8") as f:
    page = f.read()
  assert page.startswith("Before we proceed, you should understand the basic PostgreSQL system "
                         "architecture.")
  for gone in ("Prev", "Next", "Home", "Getting Started", "<"):
    assert gone not in page, gone
  with open(os.path.join(documents, "pretrain", "perl", "pod", "perlmroapi.pod.txt"),
            encoding="utf-8") as f:
    pod = f.read()
  assert pod.startswith("perlmroapi - Perl method resolution plugin interface\n\nAs of Perl")
  for gone in ("struct mro_alg", "=head", "AUTHORS", "C<"):
    assert gone not in pod, gone


@pytest.mark.e2e
def test_quick_corpus_end_to_end(tmp_path):
  proc = subprocess.run([sys.executable, "bench/quality_corpus.py", "--quick",
                         "--cache_root=%s" % tmp_path, "--workers=2"], capture_output=True,
                        text=True, cwd=helpers.REPO_ROOT, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  figures, last = proc.stdout.strip().splitlines()[-2:]
  corpus = json.loads(last)
  assert figures.startswith("quality corpus: 0.2 MB of prose in 39 documents")
  # 41 files copied, the translation and the Markdown file left out.
  assert corpus["documents"] == 39
  assert corpus["documents"] == corpus["pretrain_documents"] + corpus["task_documents"]
  rows = _check_task(corpus)
  _check_pretraining_documents(corpus, rows)
  # The held-out split is whole documents: none of them in the training text.
  text = os.path.join(corpus["directory"], "records", "text")
  held_out, train = _split_documents(text + "/eval"), _split_documents(text + "/train")
  assert len(held_out) == corpus["eval_documents"] > 0 and len(train) > 0
  assert not held_out & train
  # The records: one copy of the training split, the held-out split, the vocabulary.
  assert corpus["train_sequences"] > 0 and corpus["eval_sequences"] >= 20
  assert glob.glob(os.path.join(corpus["train_record_dir"], "*.tfrecord"))
  assert glob.glob(os.path.join(corpus["eval_record_dir"], "*.tfrecord"))
  with open(corpus["vocab_file"]) as f:
    assert f.read().split()[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
