"""utils/core/graph_names.py: every name is distinct and names an op TensorFlow can look up
through tensor_name, and the module does not import TensorFlow."""

import ast

import tensorflow as tf

from utils.core import graph_names

NAMES = [value for key, value in vars(graph_names).items() if key.isupper()]


def test_the_names_are_distinct():
  assert NAMES and len(NAMES) == len(set(NAMES))


def test_tensor_name_is_the_first_output_of_the_op():
  assert graph_names.tensor_name("total_loss") == "total_loss:0"
  assert graph_names.tensor_name("scope/x") == "scope/x:0"


def test_each_name_finds_its_tensor_in_a_graph(graph):
  made = {name: tf.constant(1.0, name=name) for name in NAMES}
  for name in NAMES:
    assert made[name].op.name == name  # a valid op name, not changed by TensorFlow
    assert graph.get_tensor_by_name(graph_names.tensor_name(name)) is made[name]


def test_the_module_does_not_import_tensorflow():
  tree = ast.parse(open(graph_names.__file__).read())
  imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
              for alias in node.names]
  imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
  assert not [name for name in imported if name.split(".")[0] == "tensorflow"]

