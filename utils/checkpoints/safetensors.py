"""The safetensors file format, read and written with numpy alone (no torch, no safetensors).

A file is: 8 bytes, the header's length N as a little-endian unsigned 64-bit integer; N bytes of
UTF-8 JSON, {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
"__metadata__": {str: str}}; then the tensors' bytes, little-endian, row-major, each at
[begin, end) counted from the first byte after the header, together covering the data without
holes or overlaps. Writers pad the header with spaces so that the data starts 8-byte aligned.

  write(path, {"w": np.zeros([2, 3], np.float32)}, metadata={"format": "pt"})
  tensors, metadata = read(path)

numpy has no bfloat16: BF16 tensors are read widened to float32 (exactly) and cannot be written.

The reader takes nothing on trust: the header's length must lie within the file, every entry's
dtype is known, its shape a list of at most MAX_DIMS integers >= 0 (a bool is not one), its
data_offsets two integers 0 <= begin <= end, and the tensors' byte ranges are exactly their shapes'
element counts x item sizes (computed exactly), in order, inside the data, without holes or
overlaps; anything else is a FormatError naming the tensor and the numbers.
"""

import collections
import json
import math
import os
import struct

import numpy as np

# safetensors dtype name -> little-endian numpy dtype (None: BF16, widened on reading).
_DTYPES = collections.OrderedDict([
    ("F64", np.dtype("<f8")), ("F32", np.dtype("<f4")), ("F16", np.dtype("<f2")),
    ("BF16", None), ("I64", np.dtype("<i8")), ("I32", np.dtype("<i4")), ("I16", np.dtype("<i2")),
    ("I8", np.dtype("i1")), ("U8", np.dtype("u1")), ("BOOL", np.dtype("?")),
])
_BYTES_PER_ELEMENT = {"BF16": 2}
_HEADER_LENGTH_BYTES = 8
# Readers refuse larger headers (the format's own limit), so a damaged length fails early.
MAX_HEADER_BYTES = 100 * 1000 * 1000
_ALIGNMENT = 8
# numpy's limit on an array's dimensions (NPY_MAXDIMS of numpy 1.x).
MAX_DIMS = 32


class FormatError(ValueError):
  """The file is not a well-formed safetensors file; the message says what is wrong."""


def _dtype_name(array):
  for name, dtype in _DTYPES.items():
    if dtype is not None and array.dtype.newbyteorder("<") == dtype:
      return name
  raise ValueError("safetensors cannot hold numpy dtype %s" % array.dtype)


def write(path, tensors, metadata=None):
  """Writes `tensors` to `path` as safetensors, in name order, bit-exactly.

  Args:
    path: the file to write.
    tensors: dict name -> numpy array (float64/32/16, int64/32/16/8, uint8, bool).
    metadata: optional dict str -> str stored as "__metadata__".
  """
  header = collections.OrderedDict()
  if metadata:
    header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
  blobs = []
  offset = 0
  for name in sorted(tensors):
    array = np.asarray(tensors[name])
    data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    header[name] = {"dtype": _dtype_name(array), "shape": list(array.shape),
                    "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
  text = json.dumps(header, separators=(",", ":")).encode("utf-8")
  text += b" " * (-(len(text) + _HEADER_LENGTH_BYTES) % _ALIGNMENT)
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for data in blobs:
      f.write(data)


def read_header(path):
  """(dict name -> {"dtype", "shape", "data_offsets"}, metadata dict, data start) of a file.

  Raises:
    FormatError: naming the problem (short file, bad length, bad JSON, bad entry).
  """
  with open(path, "rb") as f:
    head = f.read(_HEADER_LENGTH_BYTES)
    if len(head) < _HEADER_LENGTH_BYTES:
      raise FormatError("the file is %d bytes long, shorter than the 8-byte header length"
                        % len(head))
    (length,) = struct.unpack("<Q", head)
    if length > MAX_HEADER_BYTES:
      raise FormatError("the header length is %d bytes (at most %d): not a safetensors file"
                        % (length, MAX_HEADER_BYTES))
    # Before reading: read(length) would allocate `length` bytes whatever the file holds.
    available = os.fstat(f.fileno()).st_size - _HEADER_LENGTH_BYTES
    if available < length:
      raise FormatError("the header is %d bytes but the file ends after %d" % (length, available))
    text = f.read(length)
  try:
    header = json.loads(text.decode("utf-8"))
  except (UnicodeDecodeError, ValueError, RecursionError) as e:
    # RecursionError: arrays nested thousands deep.
    raise FormatError("the header is not JSON (%s)" % str(e)[:200])
  if not isinstance(header, dict):
    raise FormatError("the header is not a JSON object")
  metadata = header.pop("__metadata__", None) or {}
  if not (isinstance(metadata, dict)
          and all(isinstance(value, str) for value in metadata.values())):
    raise FormatError("__metadata__ is not an object of strings: %s" % _short_json(metadata))
  for name, entry in header.items():
    problem = _entry_problem(entry)
    if problem:
      raise FormatError("tensor %r has a bad header entry %s: %s"
                        % (name[:200], _short_json(entry), problem))
  return header, metadata, _HEADER_LENGTH_BYTES + length


def _short_json(value):
  """At most 200 characters of `value` (parsed JSON) as JSON, for messages."""
  try:
    return json.dumps(value)[:200]
  except (ValueError, RecursionError):  # an int of over 4300 digits; nesting thousands deep
    return "(a %s)" % type(value).__name__


def _is_int(value):
  return type(value) is int  # pylint: disable=unidiomatic-typecheck  (bool is not a size)


def _entry_problem(entry):
  """What is wrong with a tensor's header entry (parsed JSON), or None.

  The dtype must be known, the shape a list of at most MAX_DIMS integers >= 0, data_offsets two
  integers 0 <= begin <= end; whether the offsets fit the shape and the data is `read`'s check.
  """
  if not isinstance(entry, dict):
    return "not an object"
  dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
  if not (isinstance(dtype, str) and dtype in _DTYPES):
    return "dtype is not one of %s" % ", ".join(_DTYPES)
  if not (isinstance(shape, list) and len(shape) <= MAX_DIMS
          and all(_is_int(d) and d >= 0 for d in shape)):
    return "shape is not a list of at most %d integers >= 0" % MAX_DIMS
  if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_int, offsets))
          and 0 <= offsets[0] <= offsets[1]):
    return "data_offsets is not two integers 0 <= begin <= end"
  return None


def _element_bytes(dtype_name):
  return _BYTES_PER_ELEMENT.get(dtype_name) or _DTYPES[dtype_name].itemsize


def read(path):
  """Reads every tensor of a safetensors file.

  Returns:
    (collections.OrderedDict name -> numpy array in file order (BF16 widened to float32),
     metadata dict).

  Raises:
    FormatError: naming the problem: a truncated file, offsets that overlap, leave holes or do
      not match a tensor's shape and dtype.
  """
  header, metadata, start = read_header(path)
  with open(path, "rb") as f:
    f.seek(start)
    data = f.read()
  entries = sorted(header.items(), key=lambda item: item[1]["data_offsets"])
  expected_begin = 0
  tensors = collections.OrderedDict()
  for name, entry in entries:
    begin, end = entry["data_offsets"]
    shape = entry["shape"]
    # Exact (Python integers): numpy's int64 product would wrap around.
    size = _element_bytes(entry["dtype"])
    for d in shape:
      size *= d
    if size == 0 and _element_bytes(entry["dtype"]) * math.prod(d for d in shape if d) >= 2**62:
      raise FormatError("tensor %r: shape %s is empty but too large for numpy"
                        % (name, _short_json(shape)))
    if begin != expected_begin or end - begin != size:
      raise FormatError("tensor %r: data_offsets %s do not follow on from %d with %s bytes "
                        "(%s %s)" % (name, _short_json([begin, end]), expected_begin,
                                     _short_json(size), entry["dtype"], _short_json(shape)))
    if end > len(data):
      raise FormatError("truncated: tensor %r needs bytes up to %s of the data but the file "
                        "holds %d" % (name, end, len(data)))
    raw = data[begin:end]
    if entry["dtype"] == "BF16":
      value = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    else:
      value = np.frombuffer(raw, _DTYPES[entry["dtype"]]).astype(
          _DTYPES[entry["dtype"]].newbyteorder("="))
    tensors[name] = value.reshape(shape)
    expected_begin = end
  if expected_begin != len(data):
    raise FormatError("%d bytes after the last tensor's data" % (len(data) - expected_begin))
  return collections.OrderedDict((name, tensors[name]) for name in header), metadata
