"""The packed records of bench/quality.py: a variant's training records packed once by
pack_pretraining_data.py (its defaults: rows of the records' 128 tokens, up to 3 sequences each),
counted, and reused.

A packed job's --train_batch_size counts rows: round(BATCH / sequences per row), the average
counted from the records (unpacked records / packed rows), so that an update trains about as many
sequences as an unpacked one's (`quality_plan.Records`). A packing is made once per output
directory and name and reused when its manifest (<output_dir>/<name>.json: the inputs' names and
sizes, the counts) matches the inputs and every packed file is there; otherwise it is made again
from nothing.
"""

import json
import os
import shutil
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from bench import quality_plan  # noqa: E402

# The packer takes seconds on the demo's 17891 records and about a minute on the quality corpus:
# ten minutes means it hangs.
PACK_TIMEOUT_SECONDS = 600


def count_records(files):
  """The records of the TFRecord `files` (list of paths), each read and CRC-checked."""
  from utils.data import records  # pylint: disable=g-import-not-at-top  (TensorFlow: slow)
  return sum(1 for path in files for _ in records.read_records(path))


def _signature(files):
  """[[name, size in bytes]] of `files`: what a manifest's packing was made from."""
  return [[os.path.basename(path), os.path.getsize(path)] for path in files]


def _reusable(manifest_path, train_dir, input_files):
  """The quality_plan.Records of the manifest at `manifest_path` when it was made from
  `input_files` as they are now and all its packed files are in `train_dir`; None otherwise."""
  try:
    with open(manifest_path) as f:
      manifest = json.load(f)
    files = [os.path.join(train_dir, name) for name in manifest["files"]]
    if manifest["inputs"] != _signature(input_files) or not all(map(os.path.isfile, files)):
      return None
    if sorted(os.listdir(train_dir)) != sorted(manifest["files"]):  # a ".partial" left over
      return None
    return quality_plan.Records(train_dir, tuple(files), int(manifest["sequences"]),
                                int(manifest["rows"]))
  except (OSError, ValueError, KeyError, TypeError):
    return None


def run_packer(input_files, train_dir, timeout=PACK_TIMEOUT_SECONDS):
  """Runs pack_pretraining_data.py on `input_files` into `train_dir` (one file per input, of its
  name); returns the output files. Exits naming the command when the packer fails or hangs."""
  argv = [sys.executable, os.path.join(REPO_ROOT, "pack_pretraining_data.py"),
          "--input_file=%s" % ",".join(input_files), "--output_dir=%s" % train_dir]
  try:
    proc = subprocess.run(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, check=False)
  except subprocess.TimeoutExpired:
    shutil.rmtree(train_dir, ignore_errors=True)
    raise SystemExit("packing did not finish in %d s: %s" % (timeout, " ".join(argv)))
  if proc.returncode != 0:
    shutil.rmtree(train_dir, ignore_errors=True)
    raise SystemExit("packing failed (%d): %s\n%s" % (proc.returncode, " ".join(argv),
                                                      proc.stdout[-4000:]))
  return [os.path.join(train_dir, os.path.basename(path)) for path in input_files]


def prepare(input_files, output_dir, name="packed_train"):
  """The packed training set of `input_files` (unpacked training records) under `output_dir`:
  reused when complete (see the module docstring), else packed and counted.

  Returns:
    quality_plan.Records: <output_dir>/<name>, its files, the sequences and the packed rows.
  """
  train_dir = os.path.join(output_dir, name)
  manifest_path = train_dir + ".json"
  packed = _reusable(manifest_path, train_dir, input_files)
  if packed is not None:
    return packed
  for path in (manifest_path, train_dir):
    if os.path.isdir(path):
      shutil.rmtree(path)
    elif os.path.exists(path):
      os.remove(path)
  files = run_packer(input_files, train_dir)
  packed = quality_plan.Records(train_dir, tuple(files), count_records(input_files),
                                count_records(files))
  if packed.rows == 0:
    raise SystemExit("packing wrote no rows to %s from %d records" % (train_dir, packed.sequences))
  manifest = {"inputs": _signature(input_files), "files": [os.path.basename(p) for p in files],
              "sequences": packed.sequences, "rows": packed.rows}
  with open(manifest_path + ".tmp", "w") as f:
    json.dump(manifest, f, indent=1)
  os.replace(manifest_path + ".tmp", manifest_path)  # written last: its presence means complete
  return packed
