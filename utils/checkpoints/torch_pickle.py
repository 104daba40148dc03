"""Reads the tensors of a PyTorch `torch.save` file (pytorch_model.bin) with numpy, without torch.

The file is a zip archive: `<root>/data.pkl` is a pickle of the state dict in which every tensor is
a call `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)` and
every storage a persistent id ("storage", torch.<Type>Storage, key, location, numel) whose bytes
are `<root>/data/<key>` (little-endian unless `<root>/byteorder` says "big").

The unpickler is restricted: it resolves only the globals a state dict needs (the tensor
rebuilders, the storage types, collections.OrderedDict) and refuses any other, so loading a file
runs no code from it. The legacy (pre-1.6, non-zip) format is refused with a message.

  tensors = read_state_dict("pytorch_model.bin")   # OrderedDict name -> numpy array
"""

import collections
import pickle
import zipfile

import numpy as np

# torch storage type -> numpy dtype (None: bfloat16, widened to float32 exactly).
_STORAGE_DTYPES = {
    "DoubleStorage": np.float64, "FloatStorage": np.float32, "HalfStorage": np.float16,
    "BFloat16Storage": None, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class FormatError(ValueError):
  """The file is not a readable torch.save state dict; the message says what is wrong."""


class _StorageType(object):
  """Stands for torch.<name>: a storage's element type."""

  def __init__(self, name):
    self.name = name


class _Storage(object):
  """A storage's elements as a flat numpy array."""

  def __init__(self, values):
    self.values = values


def _rebuild_tensor(storage, storage_offset, size, stride, *unused_args):
  """A tensor from its storage: `size` elements at `storage_offset` with `stride` (in elements)."""
  values = storage.values
  size, stride = tuple(int(d) for d in size), tuple(int(s) for s in stride)
  if not size:
    return np.array(values[storage_offset])
  last = storage_offset + sum((d - 1) * s for d, s in zip(size, stride))
  if min(size) > 0 and last >= values.size:
    raise FormatError("a tensor of size %s reaches element %d of a storage of %d"
                      % (list(size), last, values.size))
  view = np.lib.stride_tricks.as_strided(
      values[storage_offset:], shape=size,
      strides=tuple(s * values.itemsize for s in stride), writeable=False)
  return np.array(view)


def _rebuild_parameter(data, *unused_args):
  return data


def _ordered_dict(*args):
  return collections.OrderedDict(*args)


# (module, name) -> what the restricted unpickler gives for it.
_GLOBALS = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}
_GLOBALS.update({("torch", name): _StorageType(name) for name in _STORAGE_DTYPES})


class _Unpickler(pickle.Unpickler):
  """Unpickles a state dict with the globals of `_GLOBALS` only; storages come from the archive."""

  def __init__(self, stream, load_storage):
    super(_Unpickler, self).__init__(stream)
    self._load_storage = load_storage

  def find_class(self, module, name):
    if (module, name) not in _GLOBALS:
      raise FormatError("the pickle refers to %s.%s, which a state dict of tensors does not "
                        "need (refused, no code from the file is run)" % (module, name))
    return _GLOBALS[(module, name)]

  def persistent_load(self, pid):
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
            and isinstance(pid[1], _StorageType)):
      raise FormatError("unexpected persistent id %r" % (pid,))
    return self._load_storage(pid[1].name, str(pid[2]), int(pid[4]))


def _archive_root(names):
  pickles = [name for name in names if name.endswith("/data.pkl") and name.count("/") == 1]
  if len(pickles) != 1:
    raise FormatError("the zip archive has %d '<root>/data.pkl' records (1 expected)"
                      % len(pickles))
  return pickles[0][:-len("data.pkl")]


def read_state_dict(path):
  """Reads a torch.save file of a dict name -> tensor.

  Args:
    path: the file (pytorch_model.bin).

  Returns:
    collections.OrderedDict name -> numpy array (bfloat16 widened to float32), file order.

  Raises:
    FormatError: naming the problem (not a zip, truncated, a global outside a state dict, ...).
  """
  if not zipfile.is_zipfile(path):
    raise FormatError("not a zip archive: truncated, or the legacy pre-1.6 torch.save format "
                      "(re-save it with a recent torch)")
  try:
    with zipfile.ZipFile(path) as archive:
      names = archive.namelist()
      root = _archive_root(names)
      big_endian = (root + "byteorder" in names
                    and archive.read(root + "byteorder").strip() == b"big")
      storages = {}

      def load_storage(type_name, key, numel):
        if key not in storages:
          record = root + "data/" + key
          if record not in names:
            raise FormatError("storage %s is missing from the archive" % record)
          raw = archive.read(record)
          dtype = _STORAGE_DTYPES[type_name]
          if dtype is None:
            values = (np.frombuffer(raw, ">u2" if big_endian else "<u2").astype(np.uint32)
                      << 16).view(np.float32)
          else:
            values = np.frombuffer(raw, np.dtype(dtype).newbyteorder(">" if big_endian else "<"))
            values = values.astype(np.dtype(dtype).newbyteorder("="))
          if values.size < numel:
            raise FormatError("storage %s holds %d elements, %d expected"
                              % (record, values.size, numel))
          storages[key] = _Storage(values)
        return storages[key]

      with archive.open(root + "data.pkl") as stream:
        state = _Unpickler(stream, load_storage).load()
  except (zipfile.BadZipFile, EOFError, pickle.UnpicklingError, OSError) as e:
    raise FormatError("unreadable archive (%s: %s)" % (type(e).__name__, e))
  if not isinstance(state, dict):
    raise FormatError("the pickle holds a %s, not a dict of tensors" % type(state).__name__)
  tensors = collections.OrderedDict()
  for name, value in state.items():
    if not isinstance(value, np.ndarray):
      raise FormatError("entry %r is a %s, not a tensor" % (name, type(value).__name__))
    tensors[name] = value
  return tensors
