"""The safetensors file format, read and written with numpy alone (no torch, no safetensors).

A file is: 8 bytes, the header's length N as a little-endian unsigned 64-bit integer; N bytes of
UTF-8 JSON, {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
"__metadata__": {str: str}}; then the tensors' bytes, little-endian, row-major, each at
[begin, end) counted from the first byte after the header, together covering the data without
holes or overlaps. Writers pad the header with spaces so that the data starts 8-byte aligned.

  write(path, {"w": np.zeros([2, 3], np.float32)}, metadata={"format": "pt"})
  tensors, metadata = read(path)

numpy has no bfloat16: BF16 tensors are read widened to float32 (exactly) and cannot be written.
"""

import collections
import json
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
    text = f.read(length)
  if len(text) < length:
    raise FormatError("the header is %d bytes but the file ends after %d" % (length, len(text)))
  try:
    header = json.loads(text.decode("utf-8"))
  except (UnicodeDecodeError, ValueError) as e:
    raise FormatError("the header is not JSON (%s)" % e)
  if not isinstance(header, dict):
    raise FormatError("the header is not a JSON object")
  metadata = header.pop("__metadata__", None) or {}
  for name, entry in header.items():
    if (not isinstance(entry, dict) or entry.get("dtype") not in _DTYPES
        or not isinstance(entry.get("shape"), list)
        or not isinstance(entry.get("data_offsets"), list) or len(entry["data_offsets"]) != 2):
      raise FormatError("tensor %r has a bad header entry %s" % (name, json.dumps(entry)[:200]))
  return header, metadata, _HEADER_LENGTH_BYTES + length


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
    shape = [int(d) for d in entry["shape"]]
    size = int(np.prod(shape, dtype=np.int64)) * _element_bytes(entry["dtype"])
    if begin != expected_begin or end - begin != size:
      raise FormatError("tensor %r: data_offsets %s do not follow on from %d with %d bytes "
                        "(%s %s)" % (name, [begin, end], expected_begin, size, entry["dtype"],
                                     shape))
    if end > len(data):
      raise FormatError("truncated: tensor %r needs bytes up to %d of the data but the file "
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
