"""A set of output files published whole: the data tools' (create_pretraining_data.py,
pack_pretraining_data.py) way to leave either every output or none.

Each output is written under `partial_name(output)` (or in parts concatenated into it), and
renamed to its name once the whole set is written. Before a run, `start_clean` makes the outputs'
directories and removes what an earlier, interrupted run left under their names; after a failed
or killed run, the partial files go and so do the directories the run created, when empty
(`missing_directories` lists them before the run, `remove_empty_directories` removes them).
"""

import glob
import os
import shutil

from absl import logging

from utils.core import paths
from utils.runtime import output_lock


def partial_name(path):
  """The name `path` is written under until the whole output set is complete."""
  return path + ".partial"


def missing_directories(output_files):
  """The local directories that creating the outputs' directories would create, deepest first."""
  missing = set()
  for output in output_files:
    if paths.is_remote(output):
      continue  # object stores have no empty directories to leave behind
    directory = os.path.dirname(os.path.abspath(output))
    while not os.path.lexists(directory):
      missing.add(directory)
      directory = os.path.dirname(directory)
  return sorted(missing, key=len, reverse=True)  # a directory before its parent


def remove_empty_directories(directories):
  """Removes each of `directories` (deepest first) that is empty; the others are kept."""
  for directory in directories:
    try:
      os.rmdir(directory)
    except OSError:  # not empty (what another run or the user put there) or already gone
      pass


def start_clean(output_files):
  """Creates the outputs' directories and removes what an earlier run left under their names
  (the outputs themselves, their ".partial" files and ".part-*" pieces).

  Raises:
    ValueError: naming --output_file when a directory cannot be created.
  """
  leftovers = []
  for output in output_files:
    directory = os.path.dirname(output)
    if directory:
      output_lock.make_directory(directory, flag="--output_file")
    if paths.is_remote(output):
      candidates = [output, partial_name(output)]
    else:
      candidates = [output] + sorted(glob.glob(glob.escape(output) + ".partial")
                                     + glob.glob(glob.escape(output) + ".part-*"))
    for path in candidates:
      if path != output and (paths.is_remote(path) or os.path.exists(path)):
        leftovers.append(path)
      paths.remove_if_exists(path)
  if leftovers:
    logging.warning("removed the leftovers of an interrupted run: %s", ", ".join(leftovers))


def concatenate(parts, output):
  """Concatenates the files `parts` into `output` and removes them."""
  with paths.open_file(output, "wb") as writer:
    for part in parts:
      with paths.open_file(part, "rb") as reader:
        shutil.copyfileobj(reader, writer, 1 << 20)
  for part in parts:
    paths.remove_if_exists(part)
