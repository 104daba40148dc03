"""Reads the tensors of a PyTorch `torch.save` file (pytorch_model.bin) with numpy, without torch.

The file is a zip archive: `<root>/data.pkl` is a pickle of the state dict in which every tensor is
a call `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)` and
every storage a persistent id ("storage", torch.<Type>Storage, key, location, numel) whose bytes
are `<root>/data/<key>` (little-endian unless `<root>/byteorder` says "big").

The file is untrusted, and reading it is safe by construction:
- the unpickler resolves only the globals a state dict needs (the tensor rebuilders, the storage
  types, collections.OrderedDict) and refuses any other, so loading a file runs no code from it;
  the objects it hands the pickle are immutable, so no opcode can change them;
- the pickle's opcodes are checked before it is loaded: lengths within the pickle, memo indices
  and object nesting bounded (the C unpickler and `hash` trust both);
- every record's declared size is checked before it is inflated (a storage's is its numel x
  itemsize; all records together inflate to at most MAX_INFLATION x the archive), and never more
  than declared is inflated;
- a tensor's offset, size and stride are integers, none negative, every element it reaches lies in
  its storage, and all tensors together have no more elements than the file has bytes; only then
  is the view made, from those checked numbers.
The legacy (pre-1.6, non-zip) format is refused with a message.

  tensors = read_state_dict("pytorch_model.bin")   # OrderedDict name -> numpy array
"""

import collections
import io
import os
import pickle
import pickletools
import struct
import zipfile
import zlib

import numpy as np

# torch storage type -> numpy dtype (None: bfloat16, widened to float32 exactly).
_STORAGE_DTYPES = {
    "DoubleStorage": np.float64, "FloatStorage": np.float32, "HalfStorage": np.float16,
    "BFloat16Storage": None, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}
# All records of an archive together inflate to at most this many times the archive's size.
# torch writes stored (uncompressed) records and weights barely compress, so a larger claim is a
# decompression bomb, refused before it is inflated.
MAX_INFLATION = 16
# Deepest nesting of objects a pickle may build: a state dict's is about 5; `hash` of a deeply
# nested tuple (a dict key) recurses in C without a limit and overflows the stack.
MAX_PICKLE_DEPTH = 100
# numpy's limit on an array's dimensions (NPY_MAXDIMS of numpy 1.x).
MAX_DIMS = 32
_BYTEORDER_BYTES = 16


class FormatError(ValueError):
  """The file is not a readable torch.save state dict; the message says what is wrong."""


# The objects the pickle gets are immutable (tuples without a __dict__): its BUILD opcode sets
# attributes on an object, and must not change a global shared by every read, a storage or a
# tensor's numbers.
class _Global(collections.namedtuple("_Global", ["module", "name", "function"])):
  """A global of `_GLOBALS`: calling it calls `function`."""
  __slots__ = ()

  def __call__(self, *args):
    return self.function(*args)


_StorageType = collections.namedtuple("_StorageType", ["name"])
# A storage the pickle refers to: "<root>/data/<key>", `numel` elements of torch.<type_name>.
_StorageRef = collections.namedtuple("_StorageRef", ["type_name", "key", "numel"])
# A tensor as the pickle describes it, unchecked: `_materialise` checks and reads it.
_TensorRef = collections.namedtuple("_TensorRef", ["storage", "offset", "size", "stride"])


def _is_int(value):
  """Whether `value` is an int; a bool (an int subclass) is not a size."""
  return type(value) is int  # pylint: disable=unidiomatic-typecheck


def _show(value):
  """A short text of a value from the file for messages (an int of any size, a tuple, a str)."""
  if _is_int(value):
    return str(value) if value.bit_length() <= 64 else "%s2**%d" % (
        "-" if value < 0 else "~", value.bit_length())
  if isinstance(value, (tuple, list)):
    text = ", ".join(_show(v) for v in value[:8]) + (", ..." if len(value) > 8 else "")
    return ("(%s)" if isinstance(value, tuple) else "[%s]") % text
  if isinstance(value, str):
    return repr(value[:80])
  return "a %s" % type(value).__name__


def _rebuild_tensor(*args):
  if len(args) < 4:
    raise FormatError("_rebuild_tensor_v2 takes (storage, offset, size, stride, ...), got %d "
                      "arguments" % len(args))
  return _TensorRef(*args[:4])


def _rebuild_parameter(data, *unused_args):
  return data


# (module, name) -> what the restricted unpickler gives for it.
_GLOBALS = {
    ("collections", "OrderedDict"): _Global("collections", "OrderedDict",
                                            collections.OrderedDict),
    ("torch._utils", "_rebuild_tensor_v2"): _Global("torch._utils", "_rebuild_tensor_v2",
                                                    _rebuild_tensor),
    ("torch._utils", "_rebuild_parameter"): _Global("torch._utils", "_rebuild_parameter",
                                                    _rebuild_parameter),
}
_GLOBALS.update({("torch", name): _StorageType(name) for name in _STORAGE_DTYPES})


class _Unpickler(pickle.Unpickler):
  """Unpickles a state dict with the globals of `_GLOBALS` only; storages stay references."""

  def find_class(self, module, name):
    if (module, name) not in _GLOBALS:
      raise FormatError("the pickle refers to %s.%s, which a state dict of tensors does not "
                        "need (refused, no code from the file is run)" % (module[:80], name[:80]))
    return _GLOBALS[(module, name)]

  def persistent_load(self, pid):
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
            and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)
            and _is_int(pid[4]) and pid[4] >= 0):
      raise FormatError("unexpected persistent id %s" % _show(pid))
    return _StorageRef(pid[1].name, pid[2], pid[4])


def _check_opcodes(data):
  """Checks a pickle's opcodes before the C unpickler runs them.

  Every length must lie within the pickle (pickletools reads only what is there), memo indices
  are at most the pickle's length (the unpickler sizes its memo by the index) and objects nest at
  most MAX_PICKLE_DEPTH deep: each stack entry's depth is tracked, a new object one deeper than
  what it was made from.

  Args:
    data: the pickle's bytes.

  Raises:
    FormatError: naming the opcode and its offset; what pickletools refuses (ValueError).
  """
  stack, marks, memo = [], [], {}
  for opcode, arg, position in pickletools.genops(data):
    name, before = opcode.name, opcode.stack_before
    if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
      index = len(memo) if name == "MEMOIZE" else arg
      if index > len(data) or not stack:
        raise FormatError("pickle opcode %s at offset %d: memo index %s in a %d-byte pickle"
                          % (name, position, _show(index), len(data)))
      memo[index] = stack[-1]
    elif name in ("GET", "BINGET", "LONG_BINGET"):
      stack.append(memo.get(arg, 1))
    elif name == "MARK":
      marks.append(len(stack))
    elif name == "POP" and (not stack or (marks and marks[-1] == len(stack))):
      _pop_to_mark(marks, stack, name, position)
    elif name == "DUP" and stack:
      stack.append(stack[-1])
    else:
      popped = []
      if pickletools.markobject in before:
        popped = _pop_to_mark(marks, stack, name, position)
        count = before.index(pickletools.markobject)
      else:
        count = len(before)
      if count > len(stack):
        raise FormatError("pickle opcode %s at offset %d needs %d objects, the stack holds %d"
                          % (name, position, count, len(stack)))
      if count:
        popped += stack[-count:]
        del stack[-count:]
      depth = 1 + max(popped, default=0)
      if depth > MAX_PICKLE_DEPTH:
        raise FormatError("pickle opcode %s at offset %d nests objects %d deep (at most %d)"
                          % (name, position, depth, MAX_PICKLE_DEPTH))
      stack.extend([depth] * len(opcode.stack_after))


def _pop_to_mark(marks, stack, name, position):
  """Pops the stack down to the newest mark; returns what was above it."""
  if not marks:
    raise FormatError("pickle opcode %s at offset %d: no mark on the stack" % (name, position))
  start = marks.pop()
  popped = stack[start:]
  del stack[start:]
  return popped


def _tensor_numbers(name, tensor):
  """(offset, size, stride) of a `_TensorRef`, checked to be integers, none negative.

  Raises:
    FormatError: naming the entry and the bad number.
  """
  offset, size, stride = tensor.offset, tensor.size, tensor.stride
  if not (isinstance(size, (tuple, list)) and isinstance(stride, (tuple, list))):
    raise FormatError("entry %s: size %s and stride %s are not tuples"
                      % (_show(name), _show(size), _show(stride)))
  size, stride = tuple(size), tuple(stride)
  where = "entry %s (offset %s, size %s, stride %s)" % (
      _show(name), _show(offset), _show(list(size)), _show(list(stride)))
  if not all(_is_int(n) for n in (offset,) + size + stride):
    raise FormatError("%s: the offset, sizes and strides must be integers" % where)
  if len(size) != len(stride) or len(size) > MAX_DIMS:
    raise FormatError("%s: %d sizes and %d strides (equal numbers, at most %d, expected)"
                      % (where, len(size), len(stride), MAX_DIMS))
  if offset < 0 or min(size, default=0) < 0:
    raise FormatError("%s: a negative offset or size" % where)
  if min(stride, default=0) < 0:
    raise FormatError("%s: a negative stride (torch refuses them too)" % where)
  return offset, size, stride


class _Archive(object):
  """An open torch.save zip archive: its records read within budgets, its storages decoded."""

  def __init__(self, path, archive):
    self.path, self.archive = path, archive
    self.names = set(archive.namelist())
    self.root = _archive_root(archive.namelist())
    self.file_bytes = os.path.getsize(path)
    self.inflate_budget = MAX_INFLATION * self.file_bytes
    self.element_budget = self.file_bytes
    self.storages = {}  # key -> (type name, numel, values)
    self.big_endian = (self.root + "byteorder" in self.names
                       and self.read(self.root + "byteorder", None).strip() == b"big")

  def read(self, record, expected_bytes):
    """The bytes of `record`, after checking its declared size: `expected_bytes` (None: at most
    a few for byteorder, else any), within the archive's inflation budget."""
    info = self.archive.getinfo(record)
    if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED,
                                                         zipfile.ZIP_DEFLATED):
      raise FormatError("record %s is encrypted or compressed with method %d (torch writes "
                        "stored records)" % (record, info.compress_type))
    # zipfile asks the file for up to compress_size bytes at once: it must lie within the file.
    if info.compress_size > self.file_bytes - info.header_offset or (
        info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size):
      raise FormatError("record %s: %d bytes stored at offset %d of a %d-byte archive (%d "
                        "bytes inflated)" % (record, info.compress_size, info.header_offset,
                                             self.file_bytes, info.file_size))
    if expected_bytes is not None and info.file_size != expected_bytes:
      raise FormatError("record %s holds %d bytes, %s expected" % (record, info.file_size,
                                                                  _show(expected_bytes)))
    if record.endswith("/byteorder") and info.file_size > _BYTEORDER_BYTES:
      raise FormatError("record %s holds %d bytes (\"little\" or \"big\" expected)"
                        % (record, info.file_size))
    if info.file_size > self.inflate_budget:
      raise FormatError("record %s declares %d bytes: the records of this %d-byte archive would "
                        "inflate to more than %dx its size" % (record, info.file_size,
                                                               self.file_bytes, MAX_INFLATION))
    self.inflate_budget -= info.file_size
    # zipfile inflates at most the declared size, and checks the CRC of what it read.
    with self.archive.open(info) as stream:
      raw = stream.read()
    if len(raw) != info.file_size:
      raise FormatError("record %s: %d of %d bytes" % (record, len(raw), info.file_size))
    return raw

  def storage(self, ref):
    """The elements of the storage `ref` refers to, a flat numpy array (read once per key)."""
    record = self.root + "data/" + ref.key
    if ref.key in self.storages:
      type_name, numel, values = self.storages[ref.key]
      if (type_name, numel) != (ref.type_name, ref.numel):
        raise FormatError("storage %s is referred to as %s elements of %s and as %s of %s"
                          % (record, numel, type_name, _show(ref.numel), ref.type_name))
      return values
    if record not in self.names:
      raise FormatError("storage %s is missing from the archive" % record)
    dtype = _STORAGE_DTYPES[ref.type_name]
    itemsize = 2 if dtype is None else np.dtype(dtype).itemsize
    try:
      raw = self.read(record, ref.numel * itemsize)
    except FormatError as e:
      raise FormatError("%s (%s elements of %s)" % (e, _show(ref.numel), ref.type_name))
    if dtype is None:
      values = (np.frombuffer(raw, ">u2" if self.big_endian else "<u2").astype(np.uint32)
                << 16).view(np.float32)
    else:
      values = np.frombuffer(raw, np.dtype(dtype).newbyteorder(">" if self.big_endian else "<"))
      values = values.astype(np.dtype(dtype).newbyteorder("="))
    self.storages[ref.key] = (ref.type_name, ref.numel, values)
    return values

  def tensor(self, name, tensor):
    """The numpy array of entry `name`, a `_TensorRef`, after checking its numbers.

    Raises:
      FormatError: naming the entry: bad numbers, elements outside the storage, or more elements
        than the file has bytes (all tensors together).
    """
    offset, size, stride = _tensor_numbers(name, tensor)
    if not isinstance(tensor.storage, _StorageRef):
      raise FormatError("entry %s: the storage is %s, not a storage" % (_show(name),
                                                                        _show(tensor.storage)))
    values = self.storage(tensor.storage)
    count = int(np.prod([1] + list(size), dtype=object))
    where = "entry %s: a tensor of size %s, stride %s at offset %s" % (
        _show(name), _show(list(size)), _show(list(stride)), _show(offset))
    if count == 0:
      if offset > values.size or np.prod([1] + [d for d in size if d], dtype=object) > (
          self.file_bytes):
        raise FormatError("%s: empty, but out of proportion to its storage of %d elements"
                          % (where, values.size))
      return np.zeros(size, values.dtype)
    # Strides are non-negative: the lowest element is at `offset`, the highest here.
    highest = offset + sum((d - 1) * s for d, s in zip(size, stride))
    if highest >= values.size:
      raise FormatError("%s reaches element %s of a storage of %d"
                        % (where, _show(highest), values.size))
    if count > self.element_budget:
      raise FormatError("%s has %s elements: the tensors of this %d-byte file would have more "
                        "elements than it has bytes" % (where, _show(count), self.file_bytes))
    self.element_budget -= count
    # Bounded by the checks above; a stride of a dimension of size 1 is never used (set to 0:
    # it may be any integer).
    strides = tuple(s * values.itemsize if d > 1 else 0 for d, s in zip(size, stride))
    view = np.lib.stride_tricks.as_strided(values[offset:], shape=size, strides=strides,
                                           writeable=False)
    return np.array(view)


def _archive_root(names):
  pickles = [name for name in names if name.endswith("/data.pkl") and name.count("/") == 1]
  if len(pickles) != 1:
    raise FormatError("the zip archive has %d '<root>/data.pkl' records (1 expected)"
                      % len(pickles))
  return pickles[0][:-len("data.pkl")]


# What the pickle machine raises on malformed input (no code of the file runs, so any of these
# means a malformed pickle); FormatError is raised as it is.
_PICKLE_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError,
                  AttributeError, struct.error, OverflowError, RecursionError)
# NotImplementedError: zipfile's refusal of a zip version or method it does not implement;
# UnicodeDecodeError: a record name flagged UTF-8 that is not.
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError,
               NotImplementedError, UnicodeDecodeError)


def _load_pickle(data):
  """The object of the pickle `data`, its opcodes checked first."""
  try:
    _check_opcodes(data)
    return _Unpickler(io.BytesIO(data)).load()
  except FormatError:
    raise
  except _PICKLE_ERRORS as e:
    raise FormatError("unreadable pickle (%s: %s)" % (type(e).__name__, str(e)[:200]))


def _read_tensors(path, archive):
  """OrderedDict name -> numpy array of an open archive (see `read_state_dict`)."""
  files = _Archive(path, archive)
  state = _load_pickle(files.read(files.root + "data.pkl", None))
  if not isinstance(state, dict):
    raise FormatError("the pickle holds a %s, not a dict of tensors" % type(state).__name__)
  tensors = collections.OrderedDict()
  for name, value in state.items():
    if not isinstance(name, str):
      raise FormatError("an entry is named by %s, not a str" % _show(name))
    if not isinstance(value, _TensorRef):
      raise FormatError("entry %s is a %s, not a tensor" % (_show(name), type(value).__name__))
    tensors[name] = files.tensor(name, value)
  return tensors


def read_state_dict(path):
  """Reads a torch.save file of a dict name -> tensor.

  Args:
    path: the file (pytorch_model.bin).

  Returns:
    collections.OrderedDict name -> numpy array (bfloat16 widened to float32), file order.

  Raises:
    FormatError: naming the problem (not a zip, truncated, a global outside a state dict, a tensor
      outside its storage, a decompression bomb, ...).
  """
  if not zipfile.is_zipfile(path):
    raise FormatError("not a zip archive: truncated, or the legacy pre-1.6 torch.save format "
                      "(re-save it with a recent torch)")
  try:
    with zipfile.ZipFile(path) as archive:
      return _read_tensors(path, archive)
  except _ZIP_ERRORS as e:
    raise FormatError("unreadable archive (%s: %s)" % (type(e).__name__, str(e)[:200]))
