"""utils/checkpoints/torch_pickle.py against hostile files, without torch: numbers, records and
pickles that would read memory outside a storage, inflate a bomb or run code are refused before
any view is made or record inflated (archives built by hand with test_checkpoints_torch_pickle.py's
opcode writers); through `python -m utils.export_release --from_huggingface` such a file ends the
command with one line; the inputs the fuzzer found are refused."""

import os
import pickle
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

from tests import helpers
from tests.test_checkpoints_torch_pickle import HALVES
from tests.test_checkpoints_torch_pickle import _archive
from tests.test_checkpoints_torch_pickle import _global
from tests.test_checkpoints_torch_pickle import _int
from tests.test_checkpoints_torch_pickle import _state_dict
from tests.test_checkpoints_torch_pickle import _str
from tests.test_checkpoints_torch_pickle import _tensor
from tests.test_checkpoints_torch_pickle import _tuple
from utils.checkpoints import torch_pickle
from utils.core import errors


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
  from tests import helpers_hf
  from utils import export_release
  from utils.checkpoints import safetensors
  root = tmp_path_factory.mktemp("hf_source")
  hf_dir = helpers_hf.exported_hf_directory(root, CONFIG)
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
