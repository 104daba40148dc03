"""The documentation names only what exists: README.md and docs/*.md cannot go stale silently.

Checked in every Markdown file of the documentation (code blocks included, since commands are
what users copy):

- every relative link `[text](path#anchor)` points to an existing file, and its anchor, if any,
  to a heading of the target file (GitHub's heading ids);
- every repository path under utils/, tests/, bench/, scripts/, bert_configs/ or docs/ exists
  (placeholders with `*`, `<...>`, `{...}` or `...` are not paths);
- every project module run with `-m` (`python -m utils.regression`, `$PY -m tests.cluster.cluster`)
  is a module file or package of the repository.
"""

import glob
import os
import re

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./$-])((?:utils|tests|bench|scripts|bert_configs|docs)/[\w./*<>{}-]*)")
MODULE = re.compile(r"-m\s+((?:utils|tests|bench|scripts)(?:\.\w+)+)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = "```"


def documentation_files(root):
  """README.md and docs/*.md under `root`, as paths relative to it."""
  files = ["README.md"] + sorted(os.path.relpath(p, root)
                                 for p in glob.glob(os.path.join(root, "docs", "*.md")))
  return [f for f in files if os.path.isfile(os.path.join(root, f))]


def heading_ids(text):
  """The ids GitHub gives the headings of a Markdown text (outside code blocks).

  Args:
    text: Markdown.

  Returns:
    set of str: each heading lower-cased, without punctuation other than '-' and '_', spaces as
    '-'; a repeated heading also gets '-1', '-2', ... as GitHub numbers them.
  """
  ids, counts, in_code = set(), {}, False
  for line in text.splitlines():
    if line.startswith(FENCE):
      in_code = not in_code
      continue
    match = None if in_code else HEADING.match(line)
    if not match:
      continue
    title = re.sub(r"[`*_]{2,}|`", "", match.group(1)).strip().lower()
    slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
    ids.add(slug if slug not in counts else "%s-%d" % (slug, counts[slug]))
    counts[slug] = counts.get(slug, 0) + 1
  return ids


def _is_placeholder(path):
  return any(mark in path for mark in ("*", "<", ">", "{", "}", "..."))


def broken_references(root, name):
  """What one documentation file names that does not exist.

  Args:
    root: the repository root.
    name: the file, relative to `root` (README.md, docs/X.md).

  Returns:
    list of str, one per broken reference: "<file>:<line>: <what> (<why>)". Empty when every
    link, repository path and `-m` module exists.
  """
  path = os.path.join(root, name)
  with open(path) as f:
    lines = f.read().splitlines()
  problems = []
  for number, line in enumerate(lines, 1):
    where = "%s:%d" % (name, number)
    for target in LINK.findall(line):
      if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        continue
      file_part, _, anchor = target.partition("#")
      linked = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                if file_part else path)
      if not os.path.exists(linked):
        problems.append("%s: link %s (no such file)" % (where, target))
      elif anchor and linked.endswith(".md"):
        with open(linked) as f:
          if anchor not in heading_ids(f.read()):
            problems.append("%s: link %s (no such heading)" % (where, target))
    for mention in PATH.findall(LINK.sub("", line)):  # a link's target was checked above
      mention = mention.rstrip(".,:;")
      if _is_placeholder(mention):
        continue
      if not os.path.exists(os.path.join(root, mention)):
        problems.append("%s: path %s (no such file or directory)" % (where, mention))
    for module in MODULE.findall(line):
      parts = os.path.join(root, *module.split("."))
      if not (os.path.isfile(parts + ".py") or os.path.isfile(os.path.join(parts, "__init__.py"))):
        problems.append("%s: module %s (no such module)" % (where, module))
  return problems


def test_every_link_path_and_module_of_the_documentation_exists():
  names = documentation_files(REPO_ROOT)
  assert "README.md" in names and "docs/DESIGN.md" in names, names
  problems = [p for name in names for p in broken_references(REPO_ROOT, name)]
  assert not problems, "\n".join(problems)


def test_the_readme_links_every_topic_file():
  with open(os.path.join(REPO_ROOT, "README.md")) as f:
    linked = {os.path.normpath(target.partition("#")[0]) for target in LINK.findall(f.read())}
  topics = set(documentation_files(REPO_ROOT)) - {"README.md"}
  assert topics - linked == set(), "docs files the README does not link"


@pytest.fixture
def tree(tmp_path):
  """A small repository: utils/core/paths.py, utils/tool.py, tests/cluster/cluster.py, docs/A.md."""
  for name in ("utils/__init__.py", "utils/core/__init__.py", "utils/core/paths.py",
               "utils/tool.py", "tests/cluster/cluster.py"):
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("")
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs" / "A.md").write_text(
      "# Topic A\n\n## 2. Layout\n\n```\n# not a heading\n```\n")
  return tmp_path


def _check(tree, readme):
  (tree / "README.md").write_text(readme)
  return broken_references(str(tree), "README.md")


def test_checker_accepts_what_exists(tree):
  assert _check(tree, "See [A](docs/A.md), [its layout](docs/A.md#2-layout), [top](#intro)\n"
                      "# Intro\n`utils/core/paths.py`, `utils/core/`, `utils/*.py`, "
                      "`tests/test_<package>_<module>.py`, [web](https://example.com/x)\n"
                      "```\npython -m utils.tool\n$PY -m tests.cluster.cluster -- ls\n"
                      "$PY -m tensorflow.python.tools.inspect_checkpoint\n```\n") == []


def test_checker_names_each_broken_reference(tree):
  problems = _check(tree, "[gone](docs/GONE.md) and [a](docs/A.md#not-a-heading)\n"
                          "the old `utils/paths.py`, then `python -m utils.paths` and\n"
                          "`$PY -m tests.cluster.gone` in utils/core/gone/.\n")
  assert problems == ["README.md:1: link docs/GONE.md (no such file)",
                      "README.md:1: link docs/A.md#not-a-heading (no such heading)",
                      "README.md:2: path utils/paths.py (no such file or directory)",
                      "README.md:2: module utils.paths (no such module)",
                      "README.md:3: path utils/core/gone/ (no such file or directory)",
                      "README.md:3: module tests.cluster.gone (no such module)"]


def test_heading_ids_follow_github():
  assert heading_ids("# Fine-tuning\n## 2. Layout\n### `bench/x.py` and **y**\n## Tests\n"
                     "## Tests\n```\n# comment\n```\n") == {
                         "fine-tuning", "2-layout", "benchxpy-and-y", "tests", "tests-1"}
