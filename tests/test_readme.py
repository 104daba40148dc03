"""The README's marked commands work as written, at small sizes, in a fresh clone.

Marking: a line `<!-- test -->` right before a fenced block marks the block. A marker may replace
text in its block, in order, for sizes and paths that only exist on the user's machines:

  <!-- test: --num_train_steps=10000 => --num_train_steps=20; /data/seq128 => data/demo/seq128 -->

Every replaced text must occur in its block, so a marker cannot go stale unnoticed. The marked
blocks run in README order as one bash script (`set -eo pipefail`) in a fresh `git clone` of this
repository (plus the working tree's uncommitted changes to tracked files), with the user's
environment (the test suite's quiet TF_CPP_MIN_LOG_LEVEL removed). The first marked block is
`source scripts/activate`, so the commands run as a user pastes them after it.
"""

import os
import re

import pytest

from tests import helpers

pytestmark = pytest.mark.e2e

MARKER = re.compile(r"^<!-- test(?::(?P<replacements>.*))? -->$")
FENCE = "```"
RUN_TIMEOUT_SECONDS = 600


def marked_blocks(text):
  """The marked fenced blocks of a Markdown text, replacements applied.

  Args:
    text: Markdown.

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
    where = "README line %d" % (index + 1)
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


def test_readme_commands_run_in_a_fresh_clone(tmp_path):
  clone = str(tmp_path / "clone")
  helpers.fresh_clone(clone)
  with open(os.path.join(clone, "README.md")) as f:
    blocks = marked_blocks(f.read())
  assert blocks and blocks[0][1].strip() == "source scripts/activate", blocks[:1]
  script = ["set -eo pipefail"]
  for line_number, block in blocks:
    script += ["echo '+++ README line %d' >&2" % line_number, block]
  returncode, output = helpers.run_as_user("\n".join(script), clone, RUN_TIMEOUT_SECONDS)
  if returncode is None:
    pytest.fail("README commands still running after %d s:\n%s"
                % (RUN_TIMEOUT_SECONDS, output[-6000:]))
  assert returncode == 0, "exit %d\n%s" % (returncode, output[-6000:])
  # Every block ran (set -e stops at the first failure).
  assert output.count("+++ README line") == len(blocks), output[-6000:]
