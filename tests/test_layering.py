"""The layering of the library (utils/__init__.py): no module imports a later layer or a sibling
package of its own layer, no library module imports an entry point, and no module but a test
imports an entry script (the library, the scripts, scripts/, bench/ and fuzz/ import none).

Every import statement of every library file is read with `ast` (function-level imports too), so
an import hidden inside a function is caught as well.
"""

import ast
import os
import sys

import pytest

import utils

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _owner(module_name):
  """(level, package) of a project module name, None for a module outside the library."""
  for level, packages in enumerate(utils.LAYERS):
    for package, members in packages:
      if any(module_name == m or module_name.startswith(m + ".") for m in members):
        return level, package
  return None


def _is_entry_point(module_name):
  return any(module_name == e or module_name.startswith(e + ".") for e in utils.ENTRY_POINTS)


def _library_files():
  """(module name, path) of every library module: utils/ and the release's top-level modules."""
  found = []
  for name in utils.LAYERS[1][0][1]:
    found.append((name, os.path.join(REPO_ROOT, name + ".py")))
  for directory, _, files in os.walk(os.path.join(REPO_ROOT, "utils")):
    for file_name in files:
      if file_name.endswith(".py"):
        path = os.path.join(directory, file_name)
        relative = os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, ".")
        found.append((relative[:-len(".__init__")] if relative.endswith(".__init__")
                      else relative, path))
  return sorted(found)


def _is_main_block(node):
  return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
          and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
          and any(isinstance(c, ast.Constant) and c.value == "__main__"
                  for c in node.test.comparators))


def _imported_modules(path, module_name):
  """The absolute names of the project modules `path` imports (each `from X import y` gives X.y
  as well as X, so that `from utils import regression` names the tool module)."""
  tree = ast.parse(open(path).read(), path)
  # A module's `if __name__ == "__main__":` block runs only when the file is itself the entry
  # script (`python -m utils.data.vocabulary`): its imports are the command's, not the library's.
  tree.body = [node for node in tree.body if not _is_main_block(node)]
  names = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.extend(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parent = module_name.split(".")[:-node.level] if not path.endswith("__init__.py") else (
            module_name.split(".")[:len(module_name.split(".")) - node.level + 1])
        base = ".".join(parent + ([base] if base else []))
      names.append(base)
      names.extend("%s.%s" % (base, alias.name) for alias in node.names)
  return names


def _violations():
  found = []
  for module_name, path in _library_files():
    if module_name == "utils":
      continue  # the package's own __init__: the map, no imports
    owner = _owner(module_name)
    assert owner is not None, "%s is in no layer of utils.LAYERS" % module_name
    for imported in _imported_modules(path, module_name):
      if _is_entry_point(imported):
        found.append("%s imports the entry point %s" % (module_name, imported))
        continue
      target = _owner(imported)
      if target is None or imported == "utils":
        continue
      if target[0] > owner[0]:
        found.append("%s (layer %s) imports %s (later layer %s)"
                     % (module_name, owner[1], imported, target[1]))
      elif target[0] == owner[0] and target[1] != owner[1]:
        found.append("%s (%s) imports %s of its sibling package %s"
                     % (module_name, owner[1], imported, target[1]))
  return sorted(set(found))


def test_every_library_module_belongs_to_a_layer():
  names = [name for name, _ in _library_files()]
  assert "utils.training.job" in names and "modeling" in names
  assert all(_owner(name) is not None for name in names if name != "utils")


def test_no_module_imports_a_later_layer_a_sibling_or_an_entry_script():
  assert _violations() == []


@pytest.mark.parametrize("source, violation", [
    ("from utils.training import job\n", "imports utils.training.job (later layer training)"),
    ("import run_pretraining\n", "imports the entry point run_pretraining"),
    ("def f():\n  from utils.runlog import plot\n", "of its sibling package runlog"),
])
def test_a_violation_is_found(tmp_path, monkeypatch, source, violation):
  """The check itself: a data-layer module with a bad import is reported."""
  bad = tmp_path / "bad.py"
  bad.write_text(source)
  monkeypatch.setattr(sys.modules[__name__], "_library_files",
                      lambda: [("utils.data.bad", str(bad))])
  assert any(violation in line for line in _violations()), _violations()


def _non_test_files():
  """(module name, path) of every Python file of the project outside tests/: the library, the
  entry scripts, scripts/, bench/ and fuzz/."""
  found = []
  for directory, subdirectories, files in os.walk(REPO_ROOT):
    subdirectories[:] = sorted(d for d in subdirectories
                               if d != "tests" and not d.startswith(".") and d != "__pycache__")
    for file_name in sorted(files):
      if file_name.endswith(".py"):
        path = os.path.join(directory, file_name)
        relative = os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, ".")
        found.append((relative[:-len(".__init__")] if relative.endswith(".__init__")
                      else relative, path))
  return found


def _entry_script_imports(files):
  """"<module> imports the entry script <script>" for every import of an entry script in
  `files` ((module name, path) pairs), `__main__` blocks and imports inside functions included."""
  found = []
  for module_name, path in files:
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and not node.level:
        names = [node.module or ""] + ["%s.%s" % (node.module, a.name) for a in node.names]
      else:
        continue
      for name in names:
        if name.split(".")[0] in utils.ENTRY_SCRIPTS:
          found.append("%s imports the entry script %s" % (module_name, name.split(".")[0]))
  return sorted(set(found))


def test_no_module_but_a_test_imports_an_entry_script():
  files = _non_test_files()
  names = [name for name, _ in files]
  # The walk reaches every kind of file the rule is about.
  assert {"prepare_corpus", "bench.micro_bench", "scripts.build_demo_data",
          "utils.corpus.stages", "fuzz.harness"} <= set(names)
  assert not any(name.startswith("tests.") for name in names)
  assert _entry_script_imports(files) == []


@pytest.mark.parametrize("source", [
    "import create_pretraining_data\n",
    "def f():\n  import pack_pretraining_data\n",
    "from run_pretraining import build_pretraining_model\n",
    "if __name__ == '__main__':\n  import prepare_corpus\n",
])
def test_an_entry_script_import_is_found(tmp_path, source):
  """The check itself: a bench module that imports an entry script is reported."""
  bad = tmp_path / "bad.py"
  bad.write_text(source)
  assert len(_entry_script_imports([("bench.bad", str(bad))])) == 1


def _test_file_of(module_name):
  """The test file named after a library module (docs/TESTING.md, Layout): utils/a/b.py ->
  tests/test_a_b.py, utils/b.py -> tests/test_utils_b.py, the release's modeling.py ->
  tests/test_modeling.py."""
  parts = module_name.split(".")
  if parts[0] != "utils":
    return "test_%s.py" % module_name
  if len(parts) == 2:
    return "test_utils_%s.py" % parts[1]
  return "test_%s.py" % "_".join(parts[1:])


def test_every_library_module_has_a_test_file_named_after_it():
  assert _test_file_of("utils.core.paths") == "test_core_paths.py"
  assert _test_file_of("utils.regression") == "test_utils_regression.py"
  missing = [name for name, path in _library_files()
             if not path.endswith("__init__.py")
             and not os.path.isfile(os.path.join(REPO_ROOT, "tests", _test_file_of(name)))]
  assert missing == [], "library modules without tests/%s" % [_test_file_of(n) for n in missing]
