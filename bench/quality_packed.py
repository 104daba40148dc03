"""The packed variants of bench/quality.py: the training records packed once, and the arithmetic
that keeps a packed job comparable with its unpacked twin.

A packed variant (`<twin>_packed`) is its twin's job on <output_dir>/packed_train: the demo's
training records through pack_pretraining_data.py (its defaults: rows of the records' 128 tokens,
up to 3 sequences each). Its --train_batch_size counts rows: round(BATCH / sequences per row),
the average counted from the records (unpacked records / packed rows), so that an update trains
about as many sequences as the twin's. The packing is made once per output directory and reused
when its manifest (<output_dir>/packed_train.json: the inputs' names and sizes, the counts) matches
the inputs and every packed file is there; otherwise it is made again from nothing.
"""

import collections
import json
import math
import os
import shutil
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

SUFFIX = "_packed"
# The packer takes seconds on the demo's 17891 records: ten minutes means it hangs.
PACK_TIMEOUT_SECONDS = 600

# A packed training set: its directory and files, the unpacked records (sequences) packed into it
# and its packed rows.
PackedData = collections.namedtuple("PackedData", ["train_dir", "files", "sequences", "rows"])


def is_packed(variant):
  """Whether `variant` (a resolved name, e.g. "lamb_fp32_packed") trains on packed rows."""
  return variant.endswith(SUFFIX)


def twin(variant):
  """The unpacked variant whose job a packed `variant` runs ("lamb_fp32_packed" -> "lamb_fp32");
  an unpacked variant is its own twin."""
  return variant[:-len(SUFFIX)] if is_packed(variant) else variant


def sequences_per_row(packed):
  """The average sequences per packed row of `packed` (a PackedData): sequences / rows."""
  return packed.sequences / packed.rows


def rows_per_batch(batch, packed):
  """Packed rows per update that hold about `batch` sequences: batch / sequences per row, to the
  nearest integer (halves up), at least 1."""
  return max(1, int(math.floor(batch / sequences_per_row(packed) + 0.5)))


def sequences_per_update(batch, packed=None):
  """Sequences an update trains: `batch` unpacked; packed (`packed` given), its rows per batch x
  the sequences per row (the expected count: a batch's rows hold a varying number)."""
  if packed is None:
    return float(batch)
  return rows_per_batch(batch, packed) * sequences_per_row(packed)


def count_records(files):
  """The records of the TFRecord `files` (list of paths), each read and CRC-checked."""
  from utils.data import records  # pylint: disable=g-import-not-at-top  (TensorFlow: slow)
  return sum(1 for path in files for _ in records.read_records(path))


def _signature(files):
  """[[name, size in bytes]] of `files`: what a manifest's packing was made from."""
  return [[os.path.basename(path), os.path.getsize(path)] for path in files]


def _reusable(manifest_path, train_dir, input_files):
  """The PackedData of the manifest at `manifest_path` when it was made from `input_files` as they
  are now and all its packed files are in `train_dir`; None otherwise."""
  try:
    with open(manifest_path) as f:
      manifest = json.load(f)
    files = [os.path.join(train_dir, name) for name in manifest["files"]]
    if manifest["inputs"] != _signature(input_files) or not all(map(os.path.isfile, files)):
      return None
    if sorted(os.listdir(train_dir)) != sorted(manifest["files"]):  # a ".partial" left over
      return None
    return PackedData(train_dir, files, int(manifest["sequences"]), int(manifest["rows"]))
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


def prepare(input_files, output_dir):
  """The packed training set of `input_files` (the unpacked training records) under
  `output_dir`: reused when complete (see the module docstring), else packed and counted.

  Returns:
    PackedData: <output_dir>/packed_train, its files, the sequences and the packed rows.
  """
  train_dir = os.path.join(output_dir, "packed_train")
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
  packed = PackedData(train_dir, files, count_records(input_files), count_records(files))
  if packed.rows == 0:
    raise SystemExit("packing wrote no rows to %s from %d records" % (train_dir, packed.sequences))
  manifest = {"inputs": _signature(input_files), "files": [os.path.basename(p) for p in files],
              "sequences": packed.sequences, "rows": packed.rows}
  with open(manifest_path + ".tmp", "w") as f:
    json.dump(manifest, f, indent=1)
  os.replace(manifest_path + ".tmp", manifest_path)  # written last: its presence means complete
  return packed
