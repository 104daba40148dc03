"""utils/checkpoints/torch_pickle.py in-process, without torch: torch.save archives built by hand
(a zip with <root>/data.pkl, written opcode by opcode, and <root>/data/<key> storages) are read
as strided views of their storages in every dtype and byte order; pickles naming a global outside
a state dict, files that are not zip archives and malformed archives are refused. Hostile numbers,
records and pickles, and the inputs the fuzzer found: test_checkpoints_torch_pickle_hostile.py."""

import collections
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest

from utils.checkpoints import torch_pickle


# ---------------------------------------------------------------------------------------------
# A torch.save file, opcode by opcode (pickle protocol 2, as torch writes it)

def _global(module, name):
  return pickle.GLOBAL + ("%s\n%s\n" % (module, name)).encode("ascii")


def _str(text):
  data = text.encode("utf-8")
  return pickle.BINUNICODE + struct.pack("<I", len(data)) + data


def _int(value):
  if -2**31 <= value < 2**31:
    return pickle.BININT + struct.pack("<i", value)
  data = pickle.encode_long(value)
  return pickle.LONG1 + bytes([len(data)]) + data


def _tuple(*items):
  return pickle.MARK + b"".join(items) + pickle.TUPLE


def _ordered_dict(items=()):
  """collections.OrderedDict() then SETITEMS of (key opcodes, value opcodes) pairs."""
  out = _global("collections", "OrderedDict") + pickle.EMPTY_TUPLE + pickle.REDUCE
  if items:
    out += pickle.MARK + b"".join(key + value for key, value in items) + pickle.SETITEMS
  return out


def _storage(storage_type, key, numel):
  """The persistent id ('storage', torch.<storage_type>, key, 'cpu', numel)."""
  return _tuple(_str("storage"), _global("torch", storage_type), _str(key), _str("cpu"),
                _int(numel)) + pickle.BINPERSID


def _tensor(storage_type, key, numel, offset, size, stride, rebuild="_rebuild_tensor_v2"):
  """torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())."""
  return (_global("torch._utils", rebuild)
          + _tuple(_storage(storage_type, key, numel), _int(offset),
                   _tuple(*map(_int, size)), _tuple(*map(_int, stride)), pickle.NEWFALSE,
                   _ordered_dict())
          + pickle.REDUCE)


def _parameter(tensor):
  """torch._utils._rebuild_parameter(tensor, True, OrderedDict()): an nn.Parameter."""
  return (_global("torch._utils", "_rebuild_parameter")
          + _tuple(tensor, pickle.NEWTRUE, _ordered_dict()) + pickle.REDUCE)


def _state_dict(entries):
  """An OrderedDict of name -> tensor opcodes, with the `_metadata` attribute a state dict has."""
  items = [(_str(name), value) for name, value in entries]
  metadata = (pickle.EMPTY_DICT + _str("_metadata") + _ordered_dict() + pickle.SETITEM
              + pickle.BUILD)
  return pickle.PROTO + b"\x02" + _ordered_dict(items) + metadata + pickle.STOP


def _archive(path, data_pkl, storages=None, byteorder=None, root="archive", deflated=()):
  """A torch.save zip archive; the storages of keys in `deflated` compressed, others stored."""
  with zipfile.ZipFile(str(path), "w") as archive:
    archive.writestr(root + "/data.pkl", data_pkl)
    if byteorder is not None:
      archive.writestr(root + "/byteorder", byteorder)
    for key, raw in (storages or {}).items():
      archive.writestr("%s/data/%s" % (root, key), raw,
                       zipfile.ZIP_DEFLATED if key in deflated else zipfile.ZIP_STORED)
    archive.writestr(root + "/version", "3\n")
  return str(path)


HALVES = struct.pack("<12f", *[0.5 * i for i in range(12)])  # 0.0, 0.5, ..., 5.5


# ---------------------------------------------------------------------------------------------
# Reading

def test_tensors_are_strided_views_of_their_storage_in_file_order(tmp_path):
  path = _archive(tmp_path / "m.bin", _state_dict([
      ("z", _tensor("FloatStorage", "0", 12, 2, [2, 3], [3, 1])),
      ("a", _tensor("FloatStorage", "0", 12, 0, [3, 2], [1, 3])),  # a transpose
      ("p", _parameter(_tensor("FloatStorage", "0", 12, 1, [4], [2]))),
      ("s", _tensor("FloatStorage", "0", 12, 11, [], [])),
      ("e", _tensor("FloatStorage", "0", 12, 12, [0, 3], [3, 1])),
  ]), {"0": HALVES})
  tensors = torch_pickle.read_state_dict(path)
  assert isinstance(tensors, collections.OrderedDict)
  assert list(tensors) == ["z", "a", "p", "s", "e"]
  want = {"z": [[1.0, 1.5, 2.0], [2.5, 3.0, 3.5]], "a": [[0.0, 1.5], [0.5, 2.0], [1.0, 2.5]],
          "p": [0.5, 1.5, 2.5, 3.5], "s": 5.5, "e": np.zeros([0, 3])}
  for name, value in want.items():
    value = np.array(value, np.float32)
    assert tensors[name].dtype == np.float32 and tensors[name].shape == value.shape, name
    assert tensors[name].tobytes() == value.tobytes(), name


@pytest.mark.parametrize("storage_type,fmt,values,dtype", [
    ("DoubleStorage", "d", [1.0 / 3, -2.5], np.float64),
    ("HalfStorage", "e", [0.5, -65504.0], np.float16),
    ("LongStorage", "q", [-(2**40), 7], np.int64),
    ("IntStorage", "i", [-(2**31), 2**31 - 1], np.int32),
    ("ShortStorage", "h", [-300, 300], np.int16),
    ("CharStorage", "b", [-128, 127], np.int8),
    ("ByteStorage", "B", [0, 255], np.uint8),
    ("BoolStorage", "?", [True, False], np.bool_),
])
@pytest.mark.parametrize("byteorder", [None, b"little", b"big"])
def test_every_storage_type_is_read_in_either_byte_order(tmp_path, storage_type, fmt, values,
                                                         dtype, byteorder):
  raw = struct.pack((">" if byteorder == b"big" else "<") + fmt * len(values), *values)
  path = _archive(tmp_path / "m.bin", _state_dict([
      ("t", _tensor(storage_type, "7", 2, 0, [2], [1]))]), {"7": raw}, byteorder)
  got = torch_pickle.read_state_dict(path)["t"]
  assert got.dtype == dtype and got.tolist() == values
  assert got.tobytes() == np.array(values, dtype).tobytes()


@pytest.mark.parametrize("byteorder", [b"little", b"big"])
def test_bfloat16_storages_are_widened_to_float32_exactly(tmp_path, byteorder):
  bits = [0x3F80, 0xC040, 0x3E20, 0xFF80, 0x0001, 0x8000]
  raw = struct.pack((">" if byteorder == b"big" else "<") + "6H", *bits)
  path = _archive(tmp_path / "m.bin", _state_dict([
      ("h", _tensor("BFloat16Storage", "0", 6, 0, [3, 2], [2, 1]))]), {"0": raw}, byteorder)
  got = torch_pickle.read_state_dict(path)["h"]
  # A bfloat16 is the upper half of a float32: append 16 zero bits.
  want = [struct.unpack("<f", struct.pack("<I", b << 16))[0] for b in bits]
  assert want[:3] == [1.0, -3.0, 0.15625] and want[3] == float("-inf")
  assert got.dtype == np.float32 and got.shape == (3, 2)
  assert got.tobytes() == struct.pack("=6f", *want)


# ---------------------------------------------------------------------------------------------
# Refusals

class _MakesDirectory(object):
  """Unpickles as a call os.mkdir(path): what a malicious file would run."""

  def __init__(self, path):
    self.path = path

  def __reduce__(self):
    return (os.mkdir, (self.path,))


@pytest.mark.parametrize("kind", ["os.mkdir", "collections.Counter", "torch v1 rebuilder"])
def test_a_global_outside_a_state_dict_is_refused_without_running_it(tmp_path, kind):
  ran = tmp_path / "ran"
  if kind == "os.mkdir":
    data_pkl = pickle.dumps({"w": _MakesDirectory(str(ran))}, protocol=2)
    named = r"(posix|os)\.mkdir"
  elif kind == "collections.Counter":
    data_pkl = pickle.dumps(collections.Counter(w=1), protocol=2)
    named = r"collections\.Counter"
  else:
    data_pkl = _state_dict([("w", _tensor("FloatStorage", "0", 12, 0, [2], [1],
                                          rebuild="_rebuild_tensor"))])
    named = r"torch\._utils\._rebuild_tensor"
  path = _archive(tmp_path / "m.bin", data_pkl, {"0": HALVES})
  with pytest.raises(torch_pickle.FormatError,
                     match=r"^the pickle refers to %s, which a state dict of tensors does not "
                           r"need \(refused, no code from the file is run\)$" % named):
    torch_pickle.read_state_dict(path)
  assert not ran.exists()


def test_files_that_are_not_zip_archives_are_refused(tmp_path):
  whole = open(_archive(tmp_path / "whole.bin", _state_dict([
      ("w", _tensor("FloatStorage", "0", 12, 0, [12], [1]))]), {"0": HALVES}), "rb").read()
  assert torch_pickle.read_state_dict(str(tmp_path / "whole.bin"))["w"].size == 12
  contents = {"garbage": b"not a zip", "empty": b"",
              "legacy pickle": pickle.dumps({"w": [1.0, 2.0]}, protocol=2),
              "truncated zip": whole[:len(whole) // 2]}
  for name, raw in contents.items():
    path = tmp_path / name
    path.write_bytes(raw)
    with pytest.raises(torch_pickle.FormatError) as raised:
      torch_pickle.read_state_dict(str(path))
    assert str(raised.value) == (
        "not a zip archive: truncated, or the legacy pre-1.6 torch.save format (re-save it "
        "with a recent torch)"), name


def _float_tensor(numel=6, offset=0, size=(2, 3), stride=(3, 1)):
  return _tensor("FloatStorage", "0", numel, offset, size, stride)


@pytest.mark.parametrize("kind,message", [
    ("no data.pkl", r"the zip archive has 0 '<root>/data\.pkl' records \(1 expected\)"),
    ("two roots", r"the zip archive has 2 '<root>/data\.pkl' records \(1 expected\)"),
    ("missing storage", r"storage archive/data/0 is missing from the archive"),
    ("short storage", r"record archive/data/0 holds 20 bytes, 24 expected \(6 elements of "
                      r"FloatStorage\)$"),
    ("beyond the storage", r"entry 'w': a tensor of size \[2, 3\], stride \[3, 1\] at offset 1 "
                           r"reaches element 6 of a storage of 6$"),
    ("list", r"the pickle holds a list, not a dict of tensors"),
    ("not a tensor", r"entry 'n' is a int, not a tensor"),
    ("bad persistent id", r"unexpected persistent id \('storage', 'x'\)"),
    ("truncated pickle", r"unreadable pickle \((ValueError|EOFError|UnpicklingError): "),
])
def test_malformed_archives_are_refused_naming_the_problem(tmp_path, kind, message):
  path = str(tmp_path / "m.bin")
  six = struct.pack("<6f", *range(6))
  good = _state_dict([("w", _float_tensor())])
  if kind == "no data.pkl":
    with zipfile.ZipFile(path, "w") as archive:
      archive.writestr("archive/data/0", six)
  elif kind == "two roots":
    _archive(path, good, {"0": six})
    with zipfile.ZipFile(path, "a") as archive:
      archive.writestr("other/data.pkl", good)
  elif kind == "missing storage":
    _archive(path, good)
  elif kind == "short storage":
    _archive(path, good, {"0": six[:20]})
  elif kind == "beyond the storage":
    _archive(path, _state_dict([("w", _float_tensor(offset=1))]), {"0": six})
  elif kind == "list":
    _archive(path, pickle.PROTO + b"\x02" + pickle.EMPTY_LIST + pickle.MARK + _float_tensor()
             + pickle.APPENDS + pickle.STOP, {"0": six})
  elif kind == "not a tensor":
    _archive(path, pickle.PROTO + b"\x02" + _ordered_dict(
        [(_str("w"), _float_tensor()), (_str("n"), _int(3))]) + pickle.STOP, {"0": six})
  elif kind == "bad persistent id":
    _archive(path, pickle.PROTO + b"\x02" + _tuple(_str("storage"), _str("x"))
             + pickle.BINPERSID + pickle.STOP)
  else:
    _archive(path, good[:len(good) // 2], {"0": six})
  with pytest.raises(torch_pickle.FormatError, match="^" + message):
    torch_pickle.read_state_dict(path)
