"""utils/checkpoints/torch_pickle.py in-process, without torch: torch.save archives built by hand
(a zip with <root>/data.pkl, written opcode by opcode, and <root>/data/<key> storages) are read
as strided views of their storages in every dtype and byte order; pickles naming a global outside
a state dict, files that are not zip archives and malformed archives are refused."""

import collections
import os
import pickle
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

from tests import helpers
from utils.checkpoints import torch_pickle
from utils.core import errors


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


# ---------------------------------------------------------------------------------------------
# Hostile numbers, records and pickles: refused before any view is made or record inflated

def _bias_file(tmp_path, offset=0, size=(128,), stride=(1,), numel=128, storages=None):
  """A state dict of one float tensor "b" over storage "0" of `numel` floats 0, 1, 2, ..."""
  if storages is None:
    storages = {"0": struct.pack("<%df" % numel, *range(numel))}
  return _archive(tmp_path / "m.bin", _state_dict([
      ("b", _tensor("FloatStorage", "0", numel, offset, size, stride))]), storages)


@pytest.mark.parametrize("offset,stride", [(0, -1), (127, -1), (0, -10**8)],
                         ids=["stride -1", "stride -1 from the end", "stride -1e8"])
def test_a_negative_stride_is_refused_before_memory_outside_the_storage_is_read(
    tmp_path, offset, stride):
  path = _bias_file(tmp_path, offset=offset, stride=(stride,))
  with pytest.raises(torch_pickle.FormatError) as raised:
    torch_pickle.read_state_dict(path)
  assert str(raised.value) == (
      "entry 'b' (offset %d, size [128], stride [%d]): a negative stride (torch refuses them "
      "too)" % (offset, stride))


@pytest.mark.parametrize("offset,size,stride,message", [
    (-1, [4], [1], "a negative offset or size"),
    (0, [-4], [1], "a negative offset or size"),
    (0, [4], [1, 1], "1 sizes and 2 strides (equal numbers, at most 32, expected)"),
    (0, [1] * 33, [1] * 33, "33 sizes and 33 strides (equal numbers, at most 32, expected)"),
])
def test_offsets_sizes_and_strides_out_of_range_are_refused(tmp_path, offset, size, stride,
                                                            message):
  path = _bias_file(tmp_path, offset=offset, size=size, stride=stride)
  with pytest.raises(torch_pickle.FormatError) as raised:
    torch_pickle.read_state_dict(path)
  assert str(raised.value).endswith("): " + message)


@pytest.mark.parametrize("number", ["a float offset", "a bool size", "a str stride",
                                    "size a dict"])
def test_numbers_that_are_not_integers_are_refused(tmp_path, number):
  good = _tensor("FloatStorage", "0", 128, 0, [128], [1])
  replaced = {"a float offset": (_int(0), pickle.BINFLOAT + struct.pack(">d", 0.0)),
              "a bool size": (_tuple(_int(128)), _tuple(pickle.NEWTRUE)),
              "a str stride": (_tuple(_int(1)) + pickle.NEWFALSE, _tuple(_str("1"))
                               + pickle.NEWFALSE),
              "size a dict": (_tuple(_int(128)), pickle.EMPTY_DICT)}[number]
  assert good.count(replaced[0]) == 1
  path = _archive(tmp_path / "m.bin", _state_dict([("b", good.replace(*replaced))]),
                  {"0": struct.pack("<128f", *range(128))})
  with pytest.raises(torch_pickle.FormatError, match=r"^entry 'b'"):
    torch_pickle.read_state_dict(path)


def test_a_zero_stride_over_more_elements_than_the_file_has_bytes_is_refused(tmp_path):
  # torch allows zero strides (expand): a [128] view of one element reads, and is that element.
  path = _bias_file(tmp_path, offset=3, stride=(0,), numel=4)
  got = torch_pickle.read_state_dict(path)["b"]
  assert got.shape == (128,) and got.tobytes() == struct.pack("<f", 3.0) * 128
  tracemalloc.start()
  try:
    for count in (10**12, os.path.getsize(path) + 1):
      path = _bias_file(tmp_path, size=(count,), stride=(0,), numel=4)
      size = os.path.getsize(path)
      assert count > size
      with pytest.raises(torch_pickle.FormatError) as raised:
        torch_pickle.read_state_dict(path)
      assert str(raised.value) == (
          "entry 'b': a tensor of size [%d], stride [0] at offset 0 has %d elements: the tensors "
          "of this %d-byte file would have more elements than it has bytes"
          % (count, count, size))
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
  finally:
    tracemalloc.stop()


def test_tensors_together_have_no_more_elements_than_the_file_has_bytes(tmp_path):
  one = struct.pack("<f", 2.0)
  entries = [("t%d" % i, _tensor("FloatStorage", "0", 1, 0, [700], [0])) for i in range(2)]
  path = _archive(tmp_path / "m.bin", _state_dict(entries), {"0": one})
  size = os.path.getsize(path)
  assert 700 < size < 1400  # each tensor fits, the two do not
  with pytest.raises(torch_pickle.FormatError,
                     match=r"^entry 't1': .* has 700 elements: the tensors of this %d-byte file "
                           % size):
    torch_pickle.read_state_dict(path)


def _zeros_deflated(path, nbytes, numel, size=(4,), stride=(1,)):
  """An archive whose storage "0" is `nbytes` zero bytes, deflated; the pickle says `numel`."""
  data_pkl = _state_dict([("b", _tensor("FloatStorage", "0", numel, 0, size, stride))])
  with zipfile.ZipFile(str(path), "w", zipfile.ZIP_DEFLATED) as archive:
    archive.writestr("archive/data.pkl", data_pkl)
    archive.writestr("archive/data/0", bytes(nbytes))
  return str(path)


def test_a_decompression_bomb_is_refused_before_it_is_inflated(tmp_path):
  path = _zeros_deflated(tmp_path / "m.bin", 64 << 20, 16 << 20)
  size = os.path.getsize(path)
  assert size < 256 << 10
  tracemalloc.start()
  try:
    with pytest.raises(torch_pickle.FormatError) as raised:
      torch_pickle.read_state_dict(path)
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
  finally:
    tracemalloc.stop()
  assert str(raised.value) == (
      "record archive/data/0 declares 67108864 bytes: the records of this %d-byte archive would "
      "inflate to more than 16x its size (16777216 elements of FloatStorage)" % size)
  # A deflated record within the bound reads.
  small = _zeros_deflated(tmp_path / "small.bin", 64, 16)
  assert torch_pickle.read_state_dict(small)["b"].tolist() == [0.0] * 4


def test_a_storage_of_another_size_than_the_pickle_says_is_refused_before_it_is_read(tmp_path):
  # The pickle says 10**12 floats; the record holds 512 bytes.
  path = _bias_file(tmp_path, numel=10**12, storages={"0": bytes(512)})
  with pytest.raises(torch_pickle.FormatError) as raised:
    torch_pickle.read_state_dict(path)
  assert str(raised.value) == ("record archive/data/0 holds 512 bytes, 4000000000000 expected "
                               "(1000000000000 elements of FloatStorage)")


def test_a_record_that_inflates_beyond_its_declared_size_is_refused(tmp_path):
  path = _zeros_deflated(tmp_path / "m.bin", 4096, 4)
  raw = bytearray(open(path, "rb").read())
  # Declare 16 bytes (4 floats) in the local and central headers; the data inflates to 4096.
  # (A local header's name is at 30, its uncompressed size at 22; a central one's at 46 and 24.)
  for signature, name_at, size_at in ((b"PK\x03\x04", 30, 22), (b"PK\x01\x02", 46, 24)):
    at = raw.find(signature)
    while raw[at + name_at:at + name_at + 14] != b"archive/data/0":
      at = raw.find(signature, at + 1)
    assert raw[at + size_at:at + size_at + 4] == struct.pack("<I", 4096)
    raw[at + size_at:at + size_at + 4] = struct.pack("<I", 16)
  open(path, "wb").write(bytes(raw))
  with pytest.raises(torch_pickle.FormatError, match=r"^unreadable archive \(BadZipFile: "):
    torch_pickle.read_state_dict(path)


def test_the_pickle_cannot_change_the_readers_globals(tmp_path):
  # BUILD on torch.FloatStorage setting its name to HalfStorage, then a float tensor.
  build = (_global("torch", "FloatStorage") + pickle.EMPTY_DICT + _str("name")
           + _str("HalfStorage") + pickle.SETITEM + pickle.BUILD + pickle.POP)
  good = _state_dict([("w", _tensor("FloatStorage", "0", 12, 0, [12], [1]))])
  path = _archive(tmp_path / "m.bin", good[:2] + build + good[2:], {"0": HALVES})
  with pytest.raises(torch_pickle.FormatError, match=r"^unreadable pickle \(AttributeError: "):
    torch_pickle.read_state_dict(path)
  path = _archive(tmp_path / "good.bin", good, {"0": HALVES})
  assert torch_pickle.read_state_dict(path)["w"].tobytes() == HALVES


@pytest.mark.parametrize("kind,message", [
    ("tuples nested 200000 deep", r"pickle opcode TUPLE1 at offset 103 nests objects 101 deep "
                                  r"\(at most 100\)$"),
    ("memo index 2**30", r"pickle opcode LONG_BINPUT at offset 3: memo index 1073741824 in a "
                         r"\d+-byte pickle$"),
    ("bytes longer than the pickle", r"unreadable pickle \(ValueError: expected 1073741824 "
                                     r"bytes in a bytes8"),
    ("a list as a key", r"unreadable pickle \(TypeError: unhashable type"),
])
def test_pickles_the_c_unpickler_would_trust_are_refused_before_loading(tmp_path, kind, message):
  head = pickle.PROTO + b"\x04" + pickle.EMPTY_DICT
  body = {"tuples nested 200000 deep": pickle.EMPTY_TUPLE + pickle.TUPLE1 * 200000 + _int(1)
                                       + pickle.SETITEM,
          "memo index 2**30": pickle.LONG_BINPUT + struct.pack("<I", 1 << 30),
          "bytes longer than the pickle": pickle.BINBYTES8 + struct.pack("<Q", 1 << 30) + b"x",
          "a list as a key": pickle.EMPTY_LIST + _int(1) + pickle.SETITEM}[kind]
  path = _archive(tmp_path / "m.bin", head + body + pickle.STOP)
  with pytest.raises(torch_pickle.FormatError, match="^" + message):
    torch_pickle.read_state_dict(path)


# ---------------------------------------------------------------------------------------------
# Through `python -m utils.export_release --from_huggingface`

CONFIG = dict(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=16, max_position_embeddings=16, type_vocab_size=2)
HOSTILE_ENTRY = "bert.encoder.layer.0.output.LayerNorm.bias"


def _write_state_dict(path, tensors, hostile=None):
  """pytorch_model.bin of `tensors` (name -> float32 array), a storage each; `hostile`:
  (offset, size, stride, storage bytes or None, its numel) for HOSTILE_ENTRY's tensor."""
  entries, storages, deflated = [], {}, ()
  for key, (name, value) in enumerate(sorted(tensors.items())):
    value = np.ascontiguousarray(value, "<f4")
    strides = [s // 4 for s in value.strides]
    offset, size, stride, numel = 0, list(value.shape), strides, value.size
    storages[str(key)] = value.tobytes()
    if name == HOSTILE_ENTRY and hostile:
      offset, size, stride, raw, numel = hostile
      if raw is not None:
        storages[str(key)], deflated = raw, (str(key),)
    entries.append((name, _tensor("FloatStorage", str(key), numel, offset, size, stride)))
  return _archive(path, _state_dict(entries), storages, deflated=deflated)


@pytest.fixture(scope="module")
def hf_directory(tmp_path_factory):
  """A transformers directory with pytorch_model.bin of a random CONFIG model that imports:
  the project's export of a checkpoint, its model.safetensors rewritten as a torch.save file."""
  # pylint: disable=g-import-not-at-top  (TensorFlow only for this end-to-end check)
  from tests import helpers
  from utils import export_release
  from utils.checkpoints import safetensors
  root = tmp_path_factory.mktemp("hf_source")
  hf_dir = helpers.exported_hf_directory(root, CONFIG)
  tensors = safetensors.read(str(hf_dir / "model.safetensors"))[0]
  assert tensors[HOSTILE_ENTRY].shape == (CONFIG["hidden_size"],)
  os.remove(str(hf_dir / "model.safetensors"))
  _write_state_dict(hf_dir / "pytorch_model.bin", tensors)
  assert export_release.main(["--from_huggingface=%s" % hf_dir,
                              "--output_dir=%s" % (root / "imported")]) == 0
  return hf_dir, tensors


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["stride -1", "stride -1e8", "zero stride over a bomb"])
def test_the_command_refuses_a_hostile_pytorch_model_bin_with_one_line(hf_directory, tmp_path,
                                                                      kind):
  good_dir, tensors = hf_directory
  hf_dir = tmp_path / "hf"
  hf_dir.mkdir()
  for name in os.listdir(str(good_dir)):
    if name != "pytorch_model.bin":
      (hf_dir / name).write_bytes((good_dir / name).read_bytes())
  hidden = CONFIG["hidden_size"]
  if kind == "stride -1":
    hostile = (0, [hidden], [-1], None, hidden)
    message = "entry '%s' (offset 0, size [8], stride [-1]): a negative stride" % HOSTILE_ENTRY
  elif kind == "stride -1e8":
    hostile = (0, [hidden], [-10**8], None, hidden)
    message = "entry '%s' (offset 0, size [8], stride [-100000000]): a negative stride" % (
        HOSTILE_ENTRY)
  else:  # 64 MiB of zeros deflated to ~64 KB, viewed as 10**12 elements
    hostile = (0, [10**12], [0], bytes(64 << 20), 16 << 20)
    message = "record archive/data/"
  weights = _write_state_dict(hf_dir / "pytorch_model.bin", tensors, hostile)
  out = tmp_path / "out"
  proc = helpers.run_python(["-m", "utils.export_release", "--from_huggingface=%s" % hf_dir,
                             "--output_dir=%s" % out], check=False, timeout=180)
  assert proc.returncode == errors.USAGE_EXIT_CODE, proc.stderr[-3000:]
  lines = proc.stderr.splitlines()
  assert len(lines) == 1, proc.stderr[-3000:]
  assert lines[0].startswith("export_release: error: %s is unreadable: %s" % (weights, message))
  if kind == "zero stride over a bomb":
    assert "declares 67108864 bytes" in lines[0]
  assert proc.stdout == "" and not out.exists()


# ---------------------------------------------------------------------------------------------
# Inputs the fuzzer found (fuzz/regressions/torch_pickle/)

REGRESSIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz",
                           "regressions", "torch_pickle")


@pytest.mark.parametrize("name,message", [
    ("zip-extract-version-23.5", r"NotImplementedError: zip file version 23\.5"),
    ("record-name-flagged-utf8-not-utf8", r"UnicodeDecodeError: 'utf-8' codec can't decode"),
])
def test_zips_that_zipfile_cannot_open_are_refused(tmp_path, name, message):
  path = tmp_path / "m.bin"
  path.write_bytes(open(os.path.join(REGRESSIONS, name), "rb").read())
  with pytest.raises(torch_pickle.FormatError, match=r"^unreadable archive \(" + message):
    torch_pickle.read_state_dict(str(path))


def test_a_stored_record_larger_than_the_archive_is_refused_before_it_is_read(tmp_path):
  # data.pkl declares 167837962 stored bytes (0 inflated) in an 820-byte archive: zipfile would
  # ask the file for all of them at once.
  path = tmp_path / "m.bin"
  path.write_bytes(open(os.path.join(
      REGRESSIONS, "stored-record-compress-size-beyond-the-file"), "rb").read())
  tracemalloc.start()
  try:
    with pytest.raises(torch_pickle.FormatError) as raised:
      torch_pickle.read_state_dict(str(path))
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
  finally:
    tracemalloc.stop()
  assert str(raised.value) == ("record archive/data.pkl: 167837962 bytes stored at offset 0 of "
                               "a 820-byte archive (0 bytes inflated)")
