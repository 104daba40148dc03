"""What a fuzz target is and what counts as a finding, without atheris (tests replay inputs here).

A reader passes an input when it returns, or raises one of its target's refusals (the clean error
that names the problem). Everything else is a finding: any other exception (a MemoryError
included), a failed property check inside the target (AssertionError: a value that is not in the
file), a peak of Python-traced memory above the target's bound for the input's size, and, seen
only by the fuzzer's process, a crash or a hang.

  result = harness.run_one(target, data)   # None when it passed, else a Finding
"""

import collections
import contextlib
import glob
import importlib
import os
import shutil
import tempfile
import tracemalloc

FUZZ_DIR = os.path.dirname(os.path.abspath(__file__))
REGRESSIONS_DIR = os.path.join(FUZZ_DIR, "regressions")

# Memory a reader may trace for one input: a fixed allowance plus a multiple of the input's size.
# numpy registers its buffers with tracemalloc, so an array sized from a header's claim (rather
# than from the bytes really there) shows up here even when the allocation itself succeeds.
BASE_MEMORY_BYTES = 32 << 20
MEMORY_PER_INPUT_BYTE = 64

# One reader under test.
#   name: the target's name (`fuzz/target_<name>.py`, `fuzz/regressions/<name>/`).
#   read: callable(data: bytes) -> None; calls the reader (writing `data` to a file first where
#     the reader takes a path) and checks properties of what it returns with `assert`.
#   refusals: tuple of exception types that are the reader's clean refusals.
#   seeds: callable() -> list of bytes: real files of the reader's format, made in memory.
#   max_len: the largest input the fuzzer generates, in bytes.
Target = collections.namedtuple("Target", ["name", "read", "refusals", "seeds", "max_len"])

# What went wrong with one input: `kind` is "exception", "property" or "memory"; `detail` says it.
Finding = collections.namedtuple("Finding", ["kind", "detail"])


def memory_bound(data):
  """The most memory (bytes) a reader may trace while reading `data` (bytes)."""
  return BASE_MEMORY_BYTES + MEMORY_PER_INPUT_BYTE * len(data)


def run_one(target, data):
  """Runs `target.read(data)` with its memory traced.

  Args:
    target: a Target.
    data: bytes, one input.

  Returns:
    None when the reader returned or refused cleanly; else a Finding.
  """
  started = not tracemalloc.is_tracing()
  if started:
    tracemalloc.start()
  tracemalloc.reset_peak()
  try:
    target.read(data)
  except target.refusals:
    pass
  except AssertionError as e:
    return Finding("property", "%s" % (e,))
  except Exception as e:  # pylint: disable=broad-except
    return Finding("exception", "%s: %s" % (type(e).__name__, e))
  finally:
    _, peak = tracemalloc.get_traced_memory()
    if started:
      tracemalloc.stop()
  if peak > memory_bound(data):
    return Finding("memory", "traced a peak of %d bytes for a %d-byte input (bound %d)"
                   % (peak, len(data), memory_bound(data)))
  return None


@contextlib.contextmanager
def input_file(data, name):
  """Context: the path of a file called `name` holding `data` (bytes), in a fresh temporary
  directory removed afterwards (with whatever the reader wrote beside it)."""
  directory = tempfile.mkdtemp(prefix="fuzz-")
  try:
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
      f.write(data)
    yield path
  finally:
    shutil.rmtree(directory)


def tokenizer(words):
  """A lower-casing `tokenization.FullTokenizer` on the vocabulary `words` (list of str)."""
  import tokenization  # pylint: disable=import-outside-toplevel  (the targets that need it only)
  with input_file(("\n".join(words) + "\n").encode("utf-8"), "vocab.txt") as path:
    return tokenization.FullTokenizer(path, do_lower_case=True, preserve_unused_tokens=False)


def target_names():
  """The names of every target, from the files `fuzz/target_<name>.py`, sorted."""
  return sorted(os.path.basename(path)[len("target_"):-len(".py")]
                for path in glob.glob(os.path.join(FUZZ_DIR, "target_*.py")))


def load_target(name):
  """The Target of `fuzz/target_<name>.py`."""
  return importlib.import_module("fuzz.target_" + name).TARGET


def regression_inputs(name):
  """(path, bytes) of every saved input of target `name` under fuzz/regressions/, sorted."""
  found = []
  for path in sorted(glob.glob(os.path.join(REGRESSIONS_DIR, name, "*"))):
    with open(path, "rb") as f:
      found.append((path, f.read()))
  return found
