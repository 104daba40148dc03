"""The commands README.md and docs/*.md give work as written, at small sizes, in a fresh clone;
and every command block of theirs is either run here or accounted for in docs/TESTING.md.

Marking: a line `<!-- test -->` right before a fenced block marks the block. A marker may replace
text in its block, in order, for sizes and paths that only exist on the user's machines:

  <!-- test: --num_train_steps=10000 => --num_train_steps=20; /data/seq128 => data/demo/seq128 -->

Every replaced text must occur in its block, so a marker cannot go stale unnoticed. A document's
marked blocks run in its order as one bash script (`set -eo pipefail`) in a fresh `git clone` of
this repository (plus the working tree's uncommitted changes to tracked files), with the user's
environment (the test suite's quiet TF_CPP_MIN_LOG_LEVEL removed). The README's first marked block
is `source scripts/activate`, so its commands run as a user pastes them after it; a topic document's
blocks run after the README's set-up (`source scripts/activate`, `make data`).

A fenced block whose info string is `text` is output or a listing, not a command. Every other
block is a command a user is told to run: marked, or listed in docs/TESTING.md's table "Commands
the documents give" with the test that runs it in another form or the reason none can.
"""

import glob
import os
import re

import pytest

from tests import helpers

MARKER = re.compile(r"^<!-- test(?::(?P<replacements>.*))? -->$")
MARKER_LINE = re.compile(r"^<!-- test(?::.*)? -->$", re.MULTILINE)
FENCE = "```"
RUN_TIMEOUT_SECONDS = 600


def marked_blocks(text, name="README"):
  """The marked fenced blocks of a Markdown text, replacements applied.

  Args:
    text: Markdown.
    name: the document's name, for error messages.

  Returns:
    list of (line number of the marker, block text with the marker's replacements applied).

  Raises:
    ValueError: naming the marker's line, for a marker not followed by a fenced block, a
      replacement without "=>", or a replaced text that is not in its block.
  """
  lines = text.splitlines()
  blocks = []
  for index, line in enumerate(lines):
    match = MARKER.match(line.strip())
    if not match:
      continue
    where = "%s line %d" % (name, index + 1)
    if index + 1 >= len(lines) or not lines[index + 1].startswith(FENCE):
      raise ValueError("%s: a test marker must be followed by a fenced block" % where)
    end = index + 2
    while end < len(lines) and not lines[end].startswith(FENCE):
      end += 1
    if end == len(lines):
      raise ValueError("%s: the fenced block is not closed" % where)
    block = "\n".join(lines[index + 2:end])
    for replacement in (match.group("replacements") or "").split(";"):
      if not replacement.strip():
        continue
      if "=>" not in replacement:
        raise ValueError("%s: replacement %r has no '=>'" % (where, replacement))
      old, new = (part.strip() for part in replacement.split("=>", 1))
      if old not in block:
        raise ValueError("%s: %r is not in the block" % (where, old))
      block = block.replace(old, new)
    blocks.append((index + 1, block))
  return blocks


def test_markers_replace_in_order_and_refuse_stale_text():
  text = ("intro\n<!-- test: 1000 => 20; /data/x => data/demo -->\n```\n"
          "run --steps=1000 --in=/data/x \\\n    --more\n```\n```\nnot marked\n```\n"
          "<!-- test -->\n```\nsource scripts/activate\n```\n")
  assert marked_blocks(text) == [(2, "run --steps=20 --in=data/demo \\\n    --more"),
                                 (10, "source scripts/activate")]
  with pytest.raises(ValueError, match="line 1: '/gone' is not in the block"):
    marked_blocks("<!-- test: /gone => x -->\n```\nrun\n```\n")
  with pytest.raises(ValueError, match="followed by a fenced block"):
    marked_blocks("<!-- test -->\ntext\n")


def fenced_blocks(text):
  """Every fenced block of a Markdown text.

  Returns:
    list of (line number of the opening fence, info string, lines of the block, marked: whether a
    `<!-- test ... -->` line stands right before it).
  """
  lines = text.splitlines()
  blocks = []
  index = 0
  while index < len(lines):
    if lines[index].startswith(FENCE):
      end = index + 1
      while end < len(lines) and not lines[end].startswith(FENCE):
        end += 1
      marked = index > 0 and MARKER.match(lines[index - 1].strip()) is not None
      blocks.append((index + 1, lines[index][len(FENCE):].strip(), lines[index + 1:end], marked))
      index = end
    index += 1
  return blocks


def documents():
  """README.md and docs/*.md, relative to the repository root."""
  return ["README.md"] + sorted(os.path.relpath(path, helpers.REPO_ROOT)
                                for path in glob.glob(os.path.join(helpers.REPO_ROOT, "docs",
                                                                   "*.md")))


def read(name, root=helpers.REPO_ROOT):
  with open(os.path.join(root, name)) as f:
    return f.read()


def run_blocks(clone, name, prelude=()):
  """Runs document `name`'s marked blocks (after the `prelude` commands) in `clone`."""
  blocks = marked_blocks(read(name, clone), name)
  assert blocks, "%s has no marked block" % name
  script = ["set -eo pipefail"] + list(prelude)
  for line_number, block in blocks:
    # $SECONDS (bash's seconds since the script started) dates each block in the output.
    script += ["echo \"+++ %s line %d at ${SECONDS} s\" >&2" % (name, line_number), block]
  script.append("echo \"+++ %s done at ${SECONDS} s\" >&2" % name)
  returncode, output = helpers.run_as_user("\n".join(script), clone, RUN_TIMEOUT_SECONDS)
  if returncode is None:
    pytest.fail("%s commands still running after %d s:\n%s"
                % (name, RUN_TIMEOUT_SECONDS, output[-6000:]))
  assert returncode == 0, "exit %d\n%s" % (returncode, output[-6000:])
  print("\n".join(line for line in output.splitlines() if line.startswith("+++ ")))
  # Every block ran (set -e stops at the first failure).
  assert output.count("+++ %s line" % name) == len(blocks), output[-6000:]
  return blocks


@pytest.mark.e2e
def test_readme_commands_run_in_a_fresh_clone(tmp_path):
  clone = str(tmp_path / "clone")
  helpers.fresh_clone(clone)
  blocks = run_blocks(clone, "README.md")
  assert blocks[0][1].strip() == "source scripts/activate", blocks[:1]


DOCS_WITH_MARKED_BLOCKS = [name for name in documents()
                           if name != "README.md" and MARKER_LINE.search(read(name))]


@pytest.mark.e2e
@pytest.mark.parametrize("name", DOCS_WITH_MARKED_BLOCKS)
def test_topic_document_commands_run_in_a_fresh_clone(tmp_path, name):
  clone = str(tmp_path / "clone")
  helpers.fresh_clone(clone)
  run_blocks(clone, name, prelude=["source scripts/activate", "make -s data"])


def accounted_for(testing_md):
  """docs/TESTING.md's table "Commands the documents give": [(document, command prefix)], the
  prefix a row's second cell gives in backquotes."""
  section = testing_md.split("## Commands the documents give", 1)[1].split("\n## ", 1)[0]
  rows = []
  for line in section.splitlines():
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    if len(cells) == 3 and cells[1].startswith("`") and cells[1].endswith("`") and cells[2]:
      rows.append((cells[0], cells[1].strip("`")))
  return rows


def first_command(lines):
  """The first line of a command block that is not a comment or blank."""
  return next(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def test_every_command_block_is_run_or_accounted_for():
  listed = accounted_for(read("docs/TESTING.md"))
  assert DOCS_WITH_MARKED_BLOCKS, "no topic document has a marked block"
  missing, used = [], set()
  for name in documents():
    for line_number, info, lines, marked in fenced_blocks(read(name)):
      if marked or info == "text":
        continue
      command = first_command(lines)
      rows = [row for row in listed if row[0] == name and command.startswith(row[1])]
      used.update(rows)
      if not rows:
        missing.append("%s line %d: %s" % (name, line_number, command))
  assert not missing, ("command blocks neither marked <!-- test --> nor listed in docs/TESTING.md"
                       " (| document | `first command line` | test or reason |):\n"
                       + "\n".join(missing))
  # No row for a block that is gone or now marked.
  assert set(listed) <= used, sorted(set(listed) - used)


@pytest.mark.e2e
def test_make_test_and_make_test_fast_pass_pytest_arguments():
  # README's Tests section, on this module's in-process tests (the suite does not run itself).
  returncode, output = helpers.run_as_user(
      'make test-fast PYTEST_ARGS="tests/test_doc_commands.py" && '
      'make test PYTEST_ARGS="tests/test_doc_commands.py -k markers"', helpers.REPO_ROOT, 300)
  assert returncode == 0, output[-4000:]
  # Both run on two pytest-xdist workers, which count the tests left after -m and -k ("[N
  # items]"); test-fast leaves out the e2e tests; PYTEST_ARGS reaches pytest in both.
  in_process = [name for name, test in globals().items() if name.startswith("test_")
                and callable(test) and not [mark for mark in getattr(test, "pytestmark", [])
                                            if mark.name == "e2e"]]
  items = [int(n) for n in re.findall(r"^2 workers \[(\d+) items?\]$", output, re.M)]
  passed = [int(n) for n in re.findall(r"^=+ (\d+) passed in ", output, re.M)]
  assert items == [len(in_process), 1] and passed == items, output[-4000:]
