"""`tf.train.Example` records and TFRecord files written with numpy, a batch of records at a time.

  flat, row_lengths = record_encoder.serialize_examples([
      record_encoder.Column("input_ids", "int64", ids),        # int [n, width]
      record_encoder.Column("weights", "float", weights),      # float [n, width]
      record_encoder.Column("text", "bytes", texts)])          # n lists of bytes
  crc = record_encoder.Crc32c()
  writer.write(record_encoder.frame_records(crc, flat, row_lengths).tobytes())

The bytes are those of `tf.train.Example.SerializeToString(deterministic=True)` when the columns
are given in sorted name order (protobuf writes a map in key order then), and those of
`tf.io.TFRecordWriter` for the framing; tests/test_data_record_encoder.py checks both against
TensorFlow. The data generator writes its records this way without importing TensorFlow.

Wire layout (every field here is length-delimited, wire type 2):

  Example  { features = 1: Features }
  Features { feature = 1: map entry { key = 1: string, value = 2: Feature } }  one entry a column
  Feature  { bytes_list = 1 | float_list = 2 | int64_list = 3 }
  Int64List / FloatList { value = 1: packed varints / packed little-endian float32 }
  BytesList { value = 1: one field per string }

An empty numeric list has no `value` field (protobuf leaves an empty packed field out). A negative
int64 is the varint of its 64-bit two's complement (10 bytes). A TFRecord is: uint64 length,
uint32 masked CRC32C of the length bytes, the data, uint32 masked CRC32C of the data (all little
endian); the masked CRC is ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32).
"""

import collections

import numpy as np

# Feature kinds and the field number of their list in `Feature`.
_KIND_FIELDS = collections.OrderedDict([("bytes", 1), ("float", 2), ("int64", 3)])

Column = collections.namedtuple("Column", ["name", "kind", "values"])
Column.__doc__ = """One feature of a batch of records.

Fields: name, the feature's key; kind, "int64", "float" or "bytes"; values, one row per record:
for "int64" an integer array [n, width] (int64 range; width 0 gives empty lists), for "float" a
float array [n, width] (stored as float32), for "bytes" a sequence of n sequences of `bytes`
(rows may differ in length)."""


def varint(value):
  """Protobuf base-128 varint of an int in [0, 2**64), as bytes."""
  out = bytearray()
  while True:
    byte = value & 0x7F
    value >>= 7
    if value:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


def encode_varints(values):
  """Varints of a 2-D array of int64 values, row by row.

  Args:
    values: int [n, m] in the int64 range; a negative value is encoded as its 64-bit two's
      complement (as protobuf encodes an int64 field).

  Returns:
    (flat uint8 [total bytes], row_lengths int64 [n]).
  """
  values = np.asarray(values)
  n, m = values.shape
  if values.size == 0:
    return np.zeros([0], np.uint8), np.zeros(n, np.int64)
  if values.min() < 0:
    values = values.astype(np.int64).view(np.uint64)
  elif values.max() < 128:
    return values.astype(np.uint8).ravel(), np.full(n, m, np.int64)
  largest = int(values.max())
  max_bytes = (largest.bit_length() + 6) // 7
  dtype = np.uint32 if largest < 2 ** 32 else np.uint64
  values = values.astype(dtype)
  groups = np.empty((n, m, max_bytes), np.uint8)
  num_bytes = np.ones((n, m), np.int8)
  for k in range(max_bytes):
    shifted = values >> dtype(7 * k)
    groups[..., k] = shifted & dtype(0x7F)
    if k + 1 < max_bytes:
      more = shifted >= 128  # another group follows: set the continuation bit
      groups[..., k] |= more.view(np.uint8) << 7
      num_bytes += more
  valid = np.arange(max_bytes, dtype=np.int8) < num_bytes[..., None]
  return groups[valid], num_bytes.sum(axis=1, dtype=np.int64)


def _constant_width(row_lengths):
  """The common length of all rows, or None when they differ."""
  if len(row_lengths) and row_lengths.min() == row_lengths.max():
    return int(row_lengths[0])
  return None


def concat_rows(pieces):
  """Concatenates ragged byte rows piece by piece: row r = piece_0[r] + piece_1[r] + ...

  Adjacent pieces whose rows all have one length are joined as 2-D blocks first.

  Args:
    pieces: non-empty list of (flat uint8 array, row_lengths int64 [n]); a piece's rows lie
      back to back.

  Returns:
    (flat uint8, row_lengths int64 [n]).
  """
  merged = []  # (flat, row_lengths, width or None)
  for flat, row_lengths in pieces:
    width = _constant_width(row_lengths)
    if width == 0:
      continue  # no bytes in any row
    if width is not None and merged and merged[-1][2] is not None:
      previous, previous_lengths, previous_width = merged[-1]
      block = np.hstack([previous.reshape(-1, previous_width), flat.reshape(-1, width)])
      merged[-1] = (block.ravel(), previous_lengths + row_lengths, previous_width + width)
    else:
      merged.append((flat, row_lengths, width))
  if not merged:
    return np.zeros([0], np.uint8), np.zeros(len(pieces[0][1]), np.int64)
  lengths = np.stack([row_lengths for _, row_lengths, _ in merged], axis=1)
  total = lengths.sum(axis=1)
  piece_start = (np.cumsum(total) - total)[:, None] + np.cumsum(lengths, axis=1) - lengths
  out = np.empty(int(total.sum()), np.uint8)
  for k, (flat, row_lengths, width) in enumerate(merged):
    if width is not None:
      out[piece_start[:, k:k + 1] + np.arange(width)] = flat.reshape(-1, width)
    else:
      source_start = np.cumsum(row_lengths) - row_lengths
      shift = np.repeat(piece_start[:, k] - source_start, row_lengths)
      out[np.arange(len(flat)) + shift] = flat
  return out, total


def fixed_rows(array):
  """A 2-D uint8 array as a piece of `concat_rows` (every row the same length)."""
  array = np.ascontiguousarray(array, dtype=np.uint8)
  return array.ravel(), np.full(len(array), array.shape[1], np.int64)


def _gather_rows(make_row, keys):
  """Rows make_row(key) for each key, as a `concat_rows` piece (one call per distinct key)."""
  unique, inverse = np.unique(keys, return_inverse=True)
  chunks = [make_row(int(key)) for key in unique]
  flat = np.frombuffer(b"".join(chunks[i] for i in inverse), np.uint8)
  lengths = np.array([len(chunk) for chunk in chunks], np.int64)[inverse]
  return flat, lengths


def _feature_header(name, kind, list_length, packed):
  """Bytes of a Features map entry up to the contents of its list (see the layout above).

  Args:
    name: the feature key.
    kind: "int64", "float" or "bytes".
    list_length: bytes of the list's contents: the packed values (`packed`), or the list's
      repeated fields.
    packed: the contents are packed values, written under one `value` field (none when empty).
  """
  key = name.encode("utf-8")
  values_field = b"\x0a" + varint(list_length) if packed and list_length else b""
  list_length += len(values_field)
  feature = bytes([_KIND_FIELDS[kind] << 3 | 2]) + varint(list_length)
  feature_length = len(feature) + list_length
  entry = b"\x0a" + varint(len(key)) + key + b"\x12" + varint(feature_length)
  entry_length = len(entry) + feature_length
  return b"\x0a" + varint(entry_length) + entry + feature + values_field


def _bytes_list_rows(rows):
  """The BytesList contents of each row (one `value` field per string), as a piece."""
  encoded = []
  for row in rows:
    encoded.append(b"".join(b"\x0a" + varint(len(value)) + bytes(value) for value in row))
  flat = np.frombuffer(b"".join(encoded), np.uint8)
  return flat, np.array([len(chunk) for chunk in encoded], np.int64)


def _list_contents(column):
  """(piece of the list contents, packed) of a column."""
  if column.kind == "int64":
    return encode_varints(column.values), True
  if column.kind == "float":
    return fixed_rows(np.asarray(column.values).astype("<f4").view(np.uint8)), True
  if column.kind == "bytes":
    return _bytes_list_rows(column.values), False
  raise ValueError("feature %s: kind must be one of %s, got %r"
                   % (column.name, ", ".join(_KIND_FIELDS), column.kind))


def serialize_examples(columns):
  """Serialises a batch of records as `tf.train.Example` protos, the features in column order.

  Args:
    columns: sequence of `Column`, each with one row per record (at least one column).

  Returns:
    (flat uint8, row_lengths int64 [n]): the serialised examples back to back.
  """
  pieces = []
  for column in columns:
    contents, packed = _list_contents(column)
    header = _gather_rows(
        lambda length, column=column, packed=packed: _feature_header(column.name, column.kind,
                                                                     length, packed),
        contents[1])
    pieces += [header, contents]
  body_lengths = sum(row_lengths for _, row_lengths in pieces)
  prefix = _gather_rows(lambda length: b"\x0a" + varint(length), body_lengths)
  return concat_rows([prefix] + pieces)


class Crc32c(object):
  """CRC-32C (Castagnoli) of many byte strings at once, by per-position tables.

  The CRC register update is linear over GF(2), so the CRC of a message is the XOR of one table
  value per byte (indexed by the byte and its distance from the end) and a term that depends only
  on the length: numpy computes it for a whole batch with one gather and one XOR-reduce.
  """

  _POLYNOMIAL = 0x82F63B78  # reflected Castagnoli polynomial

  def __init__(self):
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
      table = np.where(table & 1, (table >> 1) ^ np.uint32(self._POLYNOMIAL), table >> 1)
    self._byte_table = table.astype(np.uint32)
    self._by_distance = table[None, :].copy()  # [distance from the end, byte]
    self._init_term = np.array([0xFFFFFFFF], np.uint32)  # register after n zero bytes

  def _shift(self, register):
    """The register after one zero byte."""
    return self._byte_table[register & 0xFF] ^ (register >> 8)

  def grow(self, length):
    """Extends the tables to messages of `length` bytes."""
    have = len(self._by_distance)
    if have < length:
      rows = [self._by_distance]
      last = self._by_distance[-1]
      for _ in range(length - have):
        last = self._shift(last)
        rows.append(last[None, :])
      self._by_distance = np.concatenate(rows)
    have = len(self._init_term)
    if have <= length:
      terms = [self._init_term]
      last = self._init_term[-1:]
      for _ in range(length + 1 - have):
        last = self._shift(last)
        terms.append(last)
      self._init_term = np.concatenate(terms)

  def checksums(self, flat, row_lengths):
    """CRC-32C of each row.

    Args:
      flat: uint8 [total], rows back to back.
      row_lengths: int64 [n].

    Returns:
      uint32 [n].
    """
    nonempty = row_lengths > 0
    if not nonempty.all():  # the CRC of no bytes is 0
      out = np.zeros(len(row_lengths), np.uint32)
      if nonempty.any():
        out[nonempty] = self.checksums(flat, row_lengths[nonempty])
      return out
    self.grow(int(row_lengths.max()))
    row_end = np.cumsum(row_lengths)
    # Index of (distance from the end of its row, byte) in the flattened table.
    index = np.repeat(((row_end - 1) * 256).astype(np.int32), row_lengths)
    index -= np.arange(0, 256 * len(flat), 256, dtype=np.int32)
    index += flat
    contributions = self._by_distance.ravel()[index]
    raw = np.bitwise_xor.reduceat(contributions, row_end - row_lengths)
    return raw ^ self._init_term[row_lengths] ^ np.uint32(0xFFFFFFFF)

  def masked(self, flat, row_lengths):
    """TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, as uint32 [n]."""
    crc = self.checksums(flat, row_lengths).astype(np.uint64)
    rotated = ((crc >> np.uint64(15)) | (crc << np.uint64(17))) & np.uint64(0xFFFFFFFF)
    return ((rotated + np.uint64(0xA282EAD8)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def frame_records(crc, flat, row_lengths):
  """TFRecord framing of serialised records.

  Args:
    crc: `Crc32c`.
    flat, row_lengths: the records back to back, as from `serialize_examples`.

  Returns:
    uint8 array: the bytes of a TFRecord file holding the records in order.
  """
  length_bytes = row_lengths.astype("<u8").view(np.uint8).reshape(-1, 8)
  length_crc = crc.masked(length_bytes.ravel(), np.full(len(row_lengths), 8, np.int64))
  data_crc = crc.masked(flat, row_lengths)
  framed, _ = concat_rows([fixed_rows(length_bytes),
                           fixed_rows(length_crc.astype("<u4").view(np.uint8).reshape(-1, 4)),
                           (flat, row_lengths),
                           fixed_rows(data_crc.astype("<u4").view(np.uint8).reshape(-1, 4))])
  return framed
