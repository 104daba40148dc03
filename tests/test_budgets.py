"""The size budgets of the code (docs/TESTING.md, Budgets): a module a reader can hold, a function
a reader can see whole, a README a newcomer reads to the end.

- No Python file over `MODULE_LINES` lines, except the release's own public modules
  (`RELEASE_MODULES`: their names and public functions are the release's interface).
- No function body over `FUNCTION_BODY_LINES` lines (its docstring not counted) outside bench/,
  whose benchmarks are scripts read once.
- README.md at most `README_LINES` lines.

Each check is run on the tree and on a file written to break it, so a check that can no longer
find anything fails too.
"""

import ast
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODULE_LINES = 500
FUNCTION_BODY_LINES = 60
README_LINES = 250
# The release's public modules keep their names and public functions (the original's tests and
# scripts import them); their internals may move, their length is theirs.
RELEASE_MODULES = ("modeling.py", "optimization.py", "tokenization.py")
# Not the project's code: caches, outputs, version control.
SKIPPED_DIRECTORIES = (".git", "__pycache__", "data", "output", "fuzz-out", ".pytest_cache")


def python_files(root):
  """The project's Python files under `root`, as paths relative to it, sorted."""
  found = []
  for directory, subdirectories, files in os.walk(root):
    subdirectories[:] = sorted(d for d in subdirectories if d not in SKIPPED_DIRECTORIES)
    for name in files:
      if name.endswith(".py"):
        found.append(os.path.relpath(os.path.join(directory, name), root))
  return sorted(found)


def _line_count(path):
  with open(path, encoding="utf-8") as f:
    return sum(1 for _ in f)


def long_modules(root, limit=MODULE_LINES):
  """[(relative path, lines)] of the files over `limit` lines, the release's modules excepted."""
  return [(path, lines) for path in python_files(root)
          if path not in RELEASE_MODULES
          for lines in [_line_count(os.path.join(root, path))] if lines > limit]


def body_lines(function):
  """The lines of a function's body from its first statement after the docstring to its end;
  0 for a function that is only a docstring."""
  body = function.body
  first = body[0]
  if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
      and isinstance(first.value.value, str)):
    if len(body) == 1:
      return 0
    first = body[1]
  return function.end_lineno - first.lineno + 1


def long_functions(root, limit=FUNCTION_BODY_LINES):
  """[(relative path, function name, body lines)] of the functions (methods and nested functions
  too) whose body is over `limit` lines, outside bench/."""
  found = []
  for path in python_files(root):
    if path.split(os.sep)[0] == "bench":
      continue
    with open(os.path.join(root, path), encoding="utf-8") as f:
      tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        lines = body_lines(node)
        if lines > limit:
          found.append((path, node.name, lines))
  return found


def test_no_module_is_over_its_budget():
  assert long_modules(REPO_ROOT) == [], (
      "over %d lines (split by job; docs/TESTING.md, Budgets)" % MODULE_LINES)


def test_no_function_body_is_over_its_budget():
  assert long_functions(REPO_ROOT) == [], (
      "function bodies over %d lines (docstring not counted)" % FUNCTION_BODY_LINES)


def test_the_readme_is_within_its_budget():
  assert _line_count(os.path.join(REPO_ROOT, "README.md")) <= README_LINES


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)


def test_the_checks_find_what_breaks_a_budget(tmp_path):
  """The checks themselves, on a tree written for them: the long module and the long function
  are found, the release's module and a bench script are let through, and a docstring does not
  count towards a body."""
  root = str(tmp_path)
  long_body = "def long():\n  \"\"\"Doc.\n\n  More.\n  \"\"\"\n" + "  x = 1\n" * 61
  short_body = "def short():\n  \"\"\"%s\"\"\"\n%s" % ("\n" * 30, "  x = 1\n" * 60)
  _write(os.path.join(root, "utils", "long.py"), "x = 1\n" * 501)
  _write(os.path.join(root, "utils", "fits.py"), "x = 1\n" * 500)
  _write(os.path.join(root, "modeling.py"), "x = 1\n" * 900)
  _write(os.path.join(root, "tests", "test_x.py"), long_body + short_body)
  _write(os.path.join(root, "bench", "b.py"), long_body)
  _write(os.path.join(root, "data", "ignored.py"), "x = 1\n" * 600)
  assert long_modules(root) == [(os.path.join("utils", "long.py"), 501)]
  assert long_functions(root) == [(os.path.join("tests", "test_x.py"), "long", 61)]
