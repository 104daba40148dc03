"""Fuzz target: utils/checkpoints/torch_pickle.py's reader (pytorch_model.bin). Every returned
tensor has the size its pickle declares (read here by a recording unpickler of our own) and every
value is an element of a storage record of the archive, decoded here from the record's bytes."""

import collections
import os
import pickle
import shutil
import struct
import tempfile
import zipfile

import numpy as np

from fuzz import harness
from utils.checkpoints import torch_pickle

# Values beyond this many are not looked up (the check is quadratic in the worst case).
_CHECKED_VALUES = 4096


class _Recorder(pickle.Unpickler):
  """Loads a pickle the reader accepted, keeping each tensor's declared size only."""

  def find_class(self, module, name):
    if name == "_rebuild_tensor_v2":
      return lambda *args: ("tensor", tuple(args[2]))
    if name == "_rebuild_parameter":
      return lambda data, *unused: data
    if name == "OrderedDict":
      return collections.OrderedDict
    return name

  def persistent_load(self, pid):
    return pid


def _storage_elements(archive, root):
  """{itemsize: set of element bytes (both byte orders)} of every record under root/data/."""
  found = collections.defaultdict(set)
  for name in archive.namelist():
    if name.startswith(root + "data/"):
      raw = archive.read(name)
      for size in (1, 2, 4, 8):
        for i in range(0, min(len(raw), 8 * _CHECKED_VALUES) - size + 1, size):
          found[size].add(raw[i:i + size])
          found[size].add(raw[i:i + size][::-1])
  return found


def _check(path, tensors):
  with zipfile.ZipFile(path) as archive:
    root = [n for n in archive.namelist() if n.endswith("/data.pkl")][0][:-len("data.pkl")]
    declared = _Recorder(archive.open(root + "data.pkl")).load()
    elements = _storage_elements(archive, root)
  assert list(declared) == list(tensors), (list(declared), list(tensors))
  for name, value in tensors.items():
    assert value.shape == declared[name][1], (name, value.shape, declared[name][1])
    for item in value.reshape(-1)[:_CHECKED_VALUES]:
      raw = item.tobytes()
      widened = value.dtype == np.float32 and raw[:2] == b"\0\0" and raw[2:] in elements[2]
      assert raw in elements[value.itemsize] or widened, (name, raw)


def read(data):
  """Reads `data` as pytorch_model.bin and checks what the reader returned."""
  with harness.input_file(data, "pytorch_model.bin") as path:
    tensors = torch_pickle.read_state_dict(path)
    _check(path, tensors)


# ---------------------------------------------------------------------------------------------
# Seeds: torch.save archives written opcode by opcode, as torch writes them (pickle protocol 2).

def _op_global(module, name):
  return pickle.GLOBAL + ("%s\n%s\n" % (module, name)).encode("ascii")


def _op_str(text):
  data = text.encode("utf-8")
  return pickle.BINUNICODE + struct.pack("<I", len(data)) + data


def _op_int(value):
  return pickle.BININT + struct.pack("<i", value)


def _op_tuple(*items):
  return pickle.MARK + b"".join(items) + pickle.TUPLE


def _op_ordered_dict(items=()):
  out = _op_global("collections", "OrderedDict") + pickle.EMPTY_TUPLE + pickle.REDUCE
  if items:
    out += pickle.MARK + b"".join(key + value for key, value in items) + pickle.SETITEMS
  return out


def _op_tensor(storage_type, key, numel, offset, size, stride, parameter=False):
  storage = _op_tuple(_op_str("storage"), _op_global("torch", storage_type), _op_str(key),
                      _op_str("cpu"), _op_int(numel)) + pickle.BINPERSID
  tensor = (_op_global("torch._utils", "_rebuild_tensor_v2")
            + _op_tuple(storage, _op_int(offset), _op_tuple(*map(_op_int, size)),
                        _op_tuple(*map(_op_int, stride)), pickle.NEWFALSE, _op_ordered_dict())
            + pickle.REDUCE)
  if parameter:
    tensor = (_op_global("torch._utils", "_rebuild_parameter")
              + _op_tuple(tensor, pickle.NEWTRUE, _op_ordered_dict()) + pickle.REDUCE)
  return tensor


def _archive_bytes(entries, storages, byteorder=b"little"):
  """A torch.save zip of `entries` [(name, tensor opcodes)] and `storages` {key: bytes}."""
  items = [(_op_str(name), value) for name, value in entries]
  metadata = (pickle.EMPTY_DICT + _op_str("_metadata") + _op_ordered_dict() + pickle.SETITEM
              + pickle.BUILD)
  data_pkl = pickle.PROTO + b"\x02" + _op_ordered_dict(items) + metadata + pickle.STOP
  directory = tempfile.mkdtemp(prefix="fuzz-torch-pickle-seeds-")
  try:
    path = os.path.join(directory, "m.bin")
    with zipfile.ZipFile(path, "w") as archive:
      archive.writestr("archive/data.pkl", data_pkl)
      archive.writestr("archive/byteorder", byteorder)
      for key, raw in storages.items():
        archive.writestr("archive/data/%s" % key, raw)
      archive.writestr("archive/version", "3\n")
    with open(path, "rb") as f:
      return f.read()
  finally:
    shutil.rmtree(directory)


def seeds():
  """Small BERT-like state dicts in fp32, fp16, bf16 and int64; strided and offset views, a
  tied weight, a zero-stride buffer, a scalar, an empty tensor, big-endian storages."""
  floats = struct.pack("<24f", *[0.25 * i - 3 for i in range(24)])
  halves = np.arange(12, dtype="<f2").tobytes()
  bf16 = struct.pack("<6H", 0x3F80, 0xC040, 0x3E20, 0xFF80, 0x0001, 0x8000)
  longs = np.arange(8, dtype="<i8").tobytes()
  bert = [
      ("bert.embeddings.word_embeddings.weight", _op_tensor("FloatStorage", "0", 24, 0, [6, 4],
                                                            [4, 1])),
      ("cls.predictions.decoder.weight", _op_tensor("FloatStorage", "0", 24, 0, [6, 4], [4, 1])),
      ("bert.pooler.dense.weight", _op_tensor("FloatStorage", "0", 24, 8, [4, 4], [1, 4], True)),
      ("bert.embeddings.LayerNorm.bias", _op_tensor("HalfStorage", "1", 12, 2, [4], [2])),
      ("bert.encoder.layer.0.output.dense.bias", _op_tensor("BFloat16Storage", "2", 6, 0,
                                                            [3, 2], [2, 1])),
      ("bert.embeddings.position_ids", _op_tensor("LongStorage", "3", 8, 0, [1, 8], [0, 1])),
      ("scalar", _op_tensor("FloatStorage", "0", 24, 23, [], [])),
      ("empty", _op_tensor("FloatStorage", "0", 24, 24, [0, 4], [4, 1])),
  ]
  storages = {"0": floats, "1": halves, "2": bf16, "3": longs}
  big = {key: np.frombuffer(raw, dtype).byteswap().tobytes() for (key, raw), dtype in zip(
      storages.items(), ("<f4", "<f2", "<u2", "<i8"))}
  return [_archive_bytes(bert, storages), _archive_bytes(bert, big, b"big"),
          _archive_bytes(bert[:1], {"0": floats})]


TARGET = harness.Target("torch_pickle", read, (torch_pickle.FormatError,), seeds, 16384)
