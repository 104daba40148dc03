"""One fuzz target under atheris: `python -m fuzz.worker NAME CORPUS_DIR [libFuzzer flags...]`.

Writes the target's seeds (and its saved regression inputs) into CORPUS_DIR, instruments the
project's modules for coverage, then fuzzes until libFuzzer's own limits (-runs,
-max_total_time) end it. A finding (fuzz/harness.py) is raised as an exception, so libFuzzer
saves the input and exits non-zero; a native crash is caught by libFuzzer's signal handlers.
`python -m fuzz.run` starts this; it is not meant to be run by hand.
"""

import hashlib
import os
import sys

import atheris

from fuzz import harness

# The project's packages and modules: instrumented for coverage (TensorFlow and numpy are not).
INSTRUMENTED = ["utils", "modeling", "tokenization", "create_pretraining_data", "fuzz"]


def write_seeds(target, corpus_dir):
  """Writes the target's seeds and regression inputs into `corpus_dir`, named by their hash."""
  os.makedirs(corpus_dir, exist_ok=True)
  inputs = list(target.seeds()) + [data for _, data in harness.regression_inputs(target.name)]
  for data in inputs:
    path = os.path.join(corpus_dir, "seed-" + hashlib.sha1(data).hexdigest())
    if not os.path.exists(path):
      with open(path, "wb") as f:
        f.write(data)


def main():
  name, corpus_dir, libfuzzer_flags = sys.argv[1], sys.argv[2], sys.argv[3:]
  with atheris.instrument_imports(include=INSTRUMENTED):
    target = harness.load_target(name)
  write_seeds(target, corpus_dir)

  def test_one(data):
    finding = harness.run_one(target, data)
    if finding is not None:
      raise RuntimeError("fuzz finding (%s): %s" % (finding.kind, finding.detail))

  atheris.Setup([sys.argv[0], "-max_len=%d" % target.max_len] + libfuzzer_flags + [corpus_dir],
                test_one)
  atheris.Fuzz()


if __name__ == "__main__":
  main()
