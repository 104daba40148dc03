"""utils/checkpoints/safetensors.py in-process: the writer's bytes against the format built by hand
(length, JSON header, space padding to 8 bytes, little-endian row-major data), the reader on
hand-built files (file order, every dtype, BF16 widened exactly) and its refusals."""

import collections
import json
import os
import struct
import tracemalloc

import numpy as np
import pytest
import tensorflow as tf

from tests import helpers
from tests import helpers_hf
from utils import export_release
from utils.checkpoints import safetensors
from utils.core import errors


def _file_bytes(header, data, pad=True):
  """A safetensors file built by hand: length, JSON header (padded with spaces), data."""
  text = json.dumps(header).encode("utf-8")
  if pad:
    while (8 + len(text)) % 8:
      text += b" "
  return struct.pack("<Q", len(text)) + text + data


def _write_file(tmp_path, header, data, pad=True, name="t.safetensors"):
  path = tmp_path / name
  path.write_bytes(_file_bytes(header, data, pad))
  return str(path)


def _split(raw):
  """(header length, header text, data) of a file's bytes, parsed by hand."""
  (length,) = struct.unpack("<Q", raw[:8])
  return length, raw[8:8 + length], raw[8 + length:]


def test_writer_bytes_follow_the_format(tmp_path):
  path = tmp_path / "w.safetensors"
  # Given out of name order, one big-endian and one transposed (not C-contiguous).
  base = np.array([[1, -2, 3], [4, 5, -6]], np.int16)
  safetensors.write(str(path), {"b": base.T, "a": np.array([1.5, -0.25, 3.0], ">f4")},
                    metadata={"format": "pt", "step": 7})
  raw = path.read_bytes()
  length, text, data = _split(raw)
  assert len(raw) == 8 + length + len(data)
  assert (8 + length) % 8 == 0
  stripped = text.rstrip(b" ")
  assert stripped.endswith(b"}") and len(text) - len(stripped) < 8
  pairs = json.loads(stripped.decode("utf-8"), object_pairs_hook=list)
  assert [key for key, _ in pairs if key != "__metadata__"] == ["a", "b"]  # name order
  assert json.loads(stripped) == {
      "__metadata__": {"format": "pt", "step": "7"},
      "a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
      "b": {"dtype": "I16", "shape": [3, 2], "data_offsets": [12, 24]},
  }
  # b = base.T row by row: [1, 4], [-2, 5], [3, -6].
  assert data == struct.pack("<3f", 1.5, -0.25, 3.0) + struct.pack("<6h", 1, 4, -2, 5, 3, -6)


@pytest.mark.parametrize("name_length", range(1, 9))
def test_header_is_padded_with_spaces_so_the_data_starts_8_byte_aligned(tmp_path, name_length):
  path = tmp_path / "p.safetensors"
  name = "x" * name_length
  safetensors.write(str(path), {name: np.array([7], np.uint8)})
  length, text, data = _split(path.read_bytes())
  unpadded = json.dumps({name: {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}},
                        separators=(",", ":")).encode("utf-8")
  assert (8 + length) % 8 == 0
  assert text == unpadded + b" " * (length - len(unpadded)) and length - len(unpadded) < 8
  assert data == b"\x07"


def test_reader_returns_tensors_in_file_order_with_every_dtype(tmp_path):
  values = collections.OrderedDict([
      ("z_f64", np.array([1.0 / 3, -2.5], "<f8")),
      ("a_i64", np.array([[-(2**40)], [5]], "<i8")),
      ("m_f16", np.array([0.5, -65504.0, 2.0**-24], "<f2")),
      ("c_u8", np.array([0, 255, 128], "u1")),
      ("b_bool", np.array([True, False, True], "?")),
      ("i8", np.array([-128, 127], "i1")),
      ("i32", np.array([[-7, 8]], "<i4")),
      ("scalar_f32", np.array(2.25, "<f4")),
      ("empty_i16", np.zeros([0, 3], "<i2")),
  ])
  dtypes = {"z_f64": "F64", "a_i64": "I64", "m_f16": "F16", "c_u8": "U8", "b_bool": "BOOL",
            "i8": "I8", "i32": "I32", "scalar_f32": "F32", "empty_i16": "I16"}
  # The data laid out in reverse of the header's order: offsets need not follow it.
  header, blobs, offset = collections.OrderedDict(), [], 0
  for name in reversed(values):
    raw = values[name].tobytes()
    header[name] = {"dtype": dtypes[name], "shape": list(values[name].shape),
                    "data_offsets": [offset, offset + len(raw)]}
    blobs.append(raw)
    offset += len(raw)
  header = collections.OrderedDict((name, header[name]) for name in values)
  header["__metadata__"] = {"format": "pt"}
  path = _write_file(tmp_path, header, b"".join(blobs), pad=False)
  tensors, metadata = safetensors.read(path)
  assert metadata == {"format": "pt"}
  assert list(tensors) == list(values)
  for name, want in values.items():
    got = tensors[name]
    assert got.shape == want.shape and got.dtype == want.dtype.newbyteorder("="), name
    assert got.tobytes() == want.tobytes(), name
  read_header, read_metadata, start = safetensors.read_header(path)
  assert start == 8 + struct.unpack("<Q", open(path, "rb").read(8))[0]
  assert read_metadata == {"format": "pt"} and dict(read_header) == {
      name: entry for name, entry in header.items() if name != "__metadata__"}


def test_bf16_is_widened_to_float32_exactly(tmp_path):
  bits = [0x3F80, 0xC040, 0x3E20, 0x7F80, 0x0001, 0x8000]
  path = _write_file(tmp_path, {"h": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}},
                     struct.pack("<6H", *bits))
  tensors, metadata = safetensors.read(path)
  assert metadata == {}
  got = tensors["h"]
  assert got.dtype == np.float32 and got.shape == (2, 3)
  # A bfloat16 is the upper half of a float32: append 16 zero bits.
  want = [struct.unpack("<f", struct.pack("<I", b << 16))[0] for b in bits]
  assert got.ravel().tobytes() == struct.pack("<6f", *want)
  assert want[:3] == [1.0, -3.0, 0.15625] and want[3] == float("inf")
  assert want[4] == 2.0**-133 and str(want[5]) == "-0.0"


# tf.bfloat16.as_numpy_dtype: the bfloat16 numpy extension type TensorFlow brings.
@pytest.mark.parametrize("dtype", [tf.bfloat16.as_numpy_dtype, np.complex64, np.uint16])
def test_dtypes_the_format_or_numpy_cannot_hold_are_refused_and_nothing_is_written(
    tmp_path, dtype):
  path = tmp_path / "n.safetensors"
  with pytest.raises(ValueError, match="safetensors cannot hold numpy dtype"):
    safetensors.write(str(path), {"x": np.zeros([2], dtype)})
  assert not path.exists()


def test_round_trip_is_bit_exact(tmp_path):
  path = str(tmp_path / "r.safetensors")
  nan_payload = np.array([0x7FC00001, 0x80000000, 0x00000001], np.uint32).view(np.float32)
  tensors = {"nan": nan_payload, "w": np.arange(24, dtype=np.float16).reshape(2, 3, 4) / 7,
             "s": np.array(-3, np.int64), "e": np.zeros([0], np.float32)}
  safetensors.write(path, tensors)
  back, metadata = safetensors.read(path)
  assert metadata == {} and list(back) == ["e", "nan", "s", "w"]
  for name, value in tensors.items():
    assert back[name].dtype == value.dtype and back[name].shape == value.shape, name
    assert back[name].tobytes() == value.tobytes(), name


F32_3 = {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}
DATA_12 = struct.pack("<3f", 1, 2, 3)


@pytest.mark.parametrize("raw,message", [
    (b"\x05\x00\x00", "the file is 3 bytes long, shorter than the 8-byte header length"),
    (struct.pack("<Q", 1000) + b'{"a":1}', "the header is 1000 bytes but the file ends after 7"),
    (struct.pack("<Q", 100 * 1000 * 1000 + 1) + b"{}",
     "the header length is 100000001 bytes (at most 100000000): not a safetensors file"),
    (struct.pack("<Q", 4) + b"{x:1", "the header is not JSON"),
    (struct.pack("<Q", 8) + b"[1, 2]  ", "the header is not a JSON object"),
    (_file_bytes({"a": {"dtype": "F8", "shape": [3], "data_offsets": [0, 12]}}, DATA_12),
     "tensor 'a' has a bad header entry"),
    (_file_bytes({"a": {"dtype": "F32", "shape": 3, "data_offsets": [0, 12]}}, DATA_12),
     "tensor 'a' has a bad header entry"),
    (_file_bytes({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0]}}, DATA_12),
     "tensor 'a' has a bad header entry"),
], ids=["short file", "length beyond the file", "length over the limit", "not JSON",
        "not an object", "unknown dtype", "shape not a list", "one offset"])
def test_damaged_headers_are_refused_naming_the_problem(tmp_path, raw, message):
  path = tmp_path / "bad.safetensors"
  path.write_bytes(raw)
  for function in (safetensors.read_header, safetensors.read):
    with pytest.raises(safetensors.FormatError) as raised:
      function(str(path))
    assert str(raised.value).startswith(message)
  assert issubclass(safetensors.FormatError, ValueError)


@pytest.mark.parametrize("b_entry,data,message", [
    # Truncated: b needs bytes 12..20, the file holds 16.
    ({"dtype": "I16", "shape": [4], "data_offsets": [12, 20]}, DATA_12 + b"\x01\x00\x02\x00",
     "truncated: tensor 'b' needs bytes up to 20 of the data but the file holds 16"),
    # Overlap: b starts inside a.
    ({"dtype": "I16", "shape": [4], "data_offsets": [8, 16]}, DATA_12 + b"\x00" * 4,
     "tensor 'b': data_offsets [8, 16] do not follow on from 12 with 8 bytes (I16 [4])"),
    # Hole: 4 bytes between a and b.
    ({"dtype": "I16", "shape": [4], "data_offsets": [16, 24]}, DATA_12 + b"\x00" * 12,
     "tensor 'b': data_offsets [16, 24] do not follow on from 12 with 8 bytes (I16 [4])"),
    # Offsets of the wrong size for the shape and dtype: 3 x F16 is 6 bytes, not 8.
    ({"dtype": "F16", "shape": [3], "data_offsets": [12, 20]}, DATA_12 + b"\x00" * 8,
     "tensor 'b': data_offsets [12, 20] do not follow on from 12 with 6 bytes (F16 [3])"),
    # Bytes left over after the last tensor.
    ({"dtype": "U8", "shape": [2], "data_offsets": [12, 14]}, DATA_12 + b"\x01\x02\x03",
     "1 bytes after the last tensor's data"),
], ids=["truncated", "overlap", "hole", "size of another shape", "bytes left over"])
def test_data_that_does_not_match_the_offsets_is_refused(tmp_path, b_entry, data, message):
  path = _write_file(tmp_path, {"a": F32_3, "b": b_entry}, data)
  safetensors.read_header(path)  # the header itself is well formed
  with pytest.raises(safetensors.FormatError) as raised:
    safetensors.read(path)
  assert str(raised.value) == message


@pytest.mark.parametrize("entry,problem", [
    ({"dtype": "F32", "shape": [-1, -32], "data_offsets": [0, 12]},
     "shape is not a list of at most 32 integers >= 0"),
    ({"dtype": "F32", "shape": ["x"], "data_offsets": [0, 12]},
     "shape is not a list of at most 32 integers >= 0"),
    ({"dtype": "F32", "shape": [True, 3], "data_offsets": [0, 12]},
     "shape is not a list of at most 32 integers >= 0"),
    ({"dtype": "F32", "shape": [3.0], "data_offsets": [0, 12]},
     "shape is not a list of at most 32 integers >= 0"),
    ({"dtype": "F32", "shape": [1] * 33, "data_offsets": [0, 12]},
     "shape is not a list of at most 32 integers >= 0"),
    ({"dtype": ["F32"], "shape": [3], "data_offsets": [0, 12]},
     "dtype is not one of F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL"),
    ({"dtype": "F32", "shape": [3], "data_offsets": ["0", 12]},
     "data_offsets is not two integers 0 <= begin <= end"),
    ({"dtype": "F32", "shape": [3], "data_offsets": [12, 0]},
     "data_offsets is not two integers 0 <= begin <= end"),
    ({"dtype": "F32", "shape": [3], "data_offsets": [-12, 0]},
     "data_offsets is not two integers 0 <= begin <= end"),
], ids=["negative sizes", "a str size", "a bool size", "a float size", "33 dimensions",
        "dtype a list", "an offset a str", "end before begin", "negative begin"])
def test_header_entries_of_the_wrong_types_or_signs_are_refused(tmp_path, entry, problem):
  path = _write_file(tmp_path, {"a": entry}, DATA_12)
  for function in (safetensors.read_header, safetensors.read):
    with pytest.raises(safetensors.FormatError) as raised:
      function(path)
    assert str(raised.value) == "tensor 'a' has a bad header entry %s: %s" % (
        json.dumps(entry), problem)


def test_a_shape_whose_int64_product_wraps_to_0_is_refused(tmp_path):
  # 2**32 x 2**32 elements is 2**64: 0 in int64, which matched empty data_offsets.
  path = _write_file(tmp_path, {"a": {"dtype": "U8", "shape": [2**32, 2**32],
                                      "data_offsets": [0, 0]}}, b"")
  with pytest.raises(safetensors.FormatError) as raised:
    safetensors.read(path)
  assert str(raised.value) == ("tensor 'a': data_offsets [0, 0] do not follow on from 0 with "
                               "18446744073709551616 bytes (U8 [4294967296, 4294967296])")
  # Empty tensors read, whatever their other dimensions.
  path = _write_file(tmp_path, {"e": {"dtype": "F32", "shape": [0, 1000], "data_offsets": [0, 0]}},
                     b"", name="e.safetensors")
  assert safetensors.read(path)[0]["e"].shape == (0, 1000)


@pytest.mark.parametrize("header_text,message", [
    (b"[" * 100000 + b"]" * 100000, "the header is not JSON (maximum recursion depth exceeded"),
    (b'{"__metadata__": [1]}', "__metadata__ is not an object of strings: [1]"),
    (b'{"__metadata__": {"format": 1}}', "__metadata__ is not an object of strings: "
                                         "{\"format\": 1}"),
], ids=["arrays nested 100000 deep", "metadata a list", "metadata of a number"])
def test_headers_of_deep_json_or_other_metadata_are_refused(tmp_path, header_text, message):
  path = tmp_path / "bad.safetensors"
  path.write_bytes(struct.pack("<Q", len(header_text)) + header_text)
  with pytest.raises(safetensors.FormatError) as raised:
    safetensors.read(str(path))
  assert str(raised.value).startswith(message)


CONFIG = dict(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=16, max_position_embeddings=16, type_vocab_size=2)


@pytest.fixture(scope="module")
def hf_directory(tmp_path_factory):
  """A transformers directory of a random CONFIG model that imports: the project's export of a
  checkpoint."""
  root = tmp_path_factory.mktemp("hf_source")
  hf_dir = helpers_hf.exported_hf_directory(root, CONFIG)
  assert export_release.main(["--from_huggingface=%s" % hf_dir,
                              "--output_dir=%s" % (root / "imported")]) == 0
  return hf_dir


@pytest.mark.e2e
def test_the_command_refuses_negative_sizes_in_model_safetensors_with_one_line(hf_directory,
                                                                               tmp_path):
  hf_dir = tmp_path / "hf"
  hf_dir.mkdir()
  for name in os.listdir(str(hf_directory)):
    (hf_dir / name).write_bytes((hf_directory / name).read_bytes())
  weights = hf_dir / "model.safetensors"
  _, text, data = _split(weights.read_bytes())
  header = json.loads(text)
  name = "bert.encoder.layer.0.output.LayerNorm.bias"
  assert header[name]["shape"] == [CONFIG["hidden_size"]]
  header[name]["shape"] = [-1, -8]  # -1 x -8 x 4 bytes: the entry's 32 bytes
  weights.write_bytes(_file_bytes(header, data))
  out = tmp_path / "out"
  proc = helpers.run_python(["-m", "utils.export_release", "--from_huggingface=%s" % hf_dir,
                             "--output_dir=%s" % out], check=False, timeout=180)
  assert proc.returncode == errors.USAGE_EXIT_CODE, proc.stderr[-3000:]
  assert proc.stderr.splitlines() == [
      "export_release: error: %s is unreadable: tensor '%s' has a bad header entry %s: shape is "
      "not a list of at most 32 integers >= 0" % (weights, name, json.dumps(header[name]))]
  assert proc.stdout == "" and not out.exists()


def test_a_header_length_beyond_the_file_is_refused_before_it_is_read(tmp_path):
  # Found by the fuzzer (fuzz/regressions/safetensors/): 8 bytes saying the header is 99999999
  # bytes; reading them would have allocated 100 MB first.
  raw = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz",
                          "regressions", "safetensors", "header-length-100mb-in-an-8-byte-file"),
             "rb").read()
  assert raw == struct.pack("<Q", 99999999)
  path = tmp_path / "bad.safetensors"
  path.write_bytes(raw)
  tracemalloc.start()
  try:
    with pytest.raises(safetensors.FormatError) as raised:
      safetensors.read(str(path))
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
  finally:
    tracemalloc.stop()
  assert str(raised.value) == "the header is 99999999 bytes but the file ends after 0"
