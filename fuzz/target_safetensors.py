"""Fuzz target: utils/checkpoints/safetensors.py's reader (model.safetensors of a transformers
directory). Every returned tensor has its header entry's shape and is exactly the bytes of its
data_offsets, decoded here independently of the reader."""

import json
import os
import shutil
import struct
import tempfile

import numpy as np

from fuzz import harness
from utils.checkpoints import safetensors

_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
          "I8": "i1", "U8": "u1", "BOOL": "?"}


def _check(data, tensors):
  """Asserts each tensor's shape and bytes against the file's own header, parsed here."""
  (length,) = struct.unpack("<Q", data[:8])
  header = json.loads(data[8:8 + length].decode("utf-8"))
  body = data[8 + length:]
  assert sorted(tensors) == sorted(k for k in header if k != "__metadata__"), sorted(tensors)
  for name, value in tensors.items():
    entry = header[name]
    assert list(value.shape) == entry["shape"], (name, value.shape, entry["shape"])
    raw = body[entry["data_offsets"][0]:entry["data_offsets"][1]]
    if entry["dtype"] == "BF16":
      assert value.dtype == np.float32, name
      assert value.astype("<f4").view("<u2")[..., 1::2].tobytes() == raw
    else:
      assert value.astype(_NUMPY[entry["dtype"]]).tobytes() == raw, name


def read(data):
  """Reads `data` as a safetensors file and checks what the reader returned."""
  with harness.input_file(data, "model.safetensors") as path:
    tensors, metadata = safetensors.read(path)
  assert isinstance(metadata, dict)
  _check(data, tensors)


def _bf16_file():
  """A file with a BF16 tensor (the writer cannot write one), built from a written F32 file."""
  bits = struct.pack("<4H", 0x3F80, 0xC040, 0x0001, 0x7F80)
  header = json.dumps({"h": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}})
  header += " " * (-(len(header) + 8) % 8)
  return struct.pack("<Q", len(header)) + header.encode("utf-8") + bits


def seeds():
  """Real files of the project's writer: a small BERT-like state dict, every dtype, scalars,
  empty tensors, metadata; and a BF16 one by hand."""
  rng = np.random.RandomState(0)
  sets = [
      {"bert.embeddings.word_embeddings.weight": rng.normal(size=[6, 4]).astype(np.float32),
       "bert.embeddings.LayerNorm.bias": rng.normal(size=[4]).astype(np.float32),
       "bert.encoder.layer.0.attention.self.query.weight":
           rng.normal(size=[4, 4]).astype(np.float16),
       "bert.embeddings.position_ids": np.arange(8, dtype=np.int64)[None]},
      {"f64": np.array([1.0 / 3, -2.5]), "i32": np.array([[-7, 2**31 - 1]], np.int32),
       "i16": np.array([300], np.int16), "i8": np.array([-128, 127], np.int8),
       "u8": np.arange(5, dtype=np.uint8), "b": np.array([True, False]),
       "scalar": np.float32(2.5), "empty": np.zeros([0, 3], np.float32)},
      {"one": np.ones([1], np.float32)},
  ]
  out = []
  directory = tempfile.mkdtemp(prefix="fuzz-safetensors-seeds-")
  try:
    for i, tensors in enumerate(sets):
      path = os.path.join(directory, "%d.safetensors" % i)
      safetensors.write(path, tensors, metadata={"format": "pt"} if i == 0 else None)
      with open(path, "rb") as f:
        out.append(f.read())
  finally:
    shutil.rmtree(directory)
  return out + [_bf16_file()]


TARGET = harness.Target("safetensors", read, (safetensors.FormatError,), seeds, 8192)
