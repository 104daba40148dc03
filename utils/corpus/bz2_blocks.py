"""A bz2 file read block by block, so that a block that is corrupt costs that block's data alone.

A bz2 stream is "BZh" and a level digit, then blocks, each starting with the 48-bit magic
0x314159265359 and its data's CRC, then the 48-bit end magic 0x177245385090, the stream's CRC and
padding to a byte; a file may hold several streams (Wikipedia's multistream dumps: 100 pages a
stream). Blocks are not byte aligned: a block is found by a bit-level search for its magic, and
decompressed alone, re-framed as a stream of its own ("BZh9", its bits, the end magic, its CRC as
the stream's), so that libbz2 checks its CRC and a block that fails is skipped, reading going on
at the next block or stream. A block that decompresses but fails its CRC gave its data before the
check (all but the last piece, up to PIECE_BYTES): its size, not the data, is handed on
(`Lost.size`), so that the reader can count what the block held.

The magic may also occur by chance inside a block's compressed bits (about once in 3 * 10^13
bits, a few TB of dumps): that block is then reported lost.
"""

import bz2
import collections

BLOCK_MAGIC = 0x314159265359
END_MAGIC = 0x177245385090
# Decompressed bytes taken from libbz2 at a time, and the most of a block's held until its CRC is
# checked (a block holds at most 900 KB of text, or up to 45 MB of runs of one byte).
PIECE_BYTES = 8 << 10
MAX_HELD_BYTES = 4 << 20
_HEADER = b"BZh9"

Lost = collections.namedtuple("Lost", ["start", "end", "reason", "size"])
Lost.__doc__ = """Compressed bytes `start` to `end` of the file that could not be read.

Attributes:
  start, end: int, the byte range (a block's first and last bytes, rounded out to bytes).
  reason: str, e.g. "a bz2 block that fails its CRC".
  size: int, the bytes a block that failed its CRC decompressed to (their text is not to be
    trusted, and is dropped), but for its last piece; 0 for a block that did not decompress.
"""


class EndsEarly(Exception):
  """The file ended inside a bz2 stream, after `size` bytes."""

  def __init__(self, size):
    super().__init__(size)
    self.size = size


class NotBz2(Exception):
  """The file's bytes `start` to `end` are not bz2 data (the file's first stream)."""

  def __init__(self, start, end, reason):
    super().__init__(start, end, reason)
    self.start, self.end, self.reason = start, end, reason


def find_magic(data, start_bit, magic, before_bit=-1):
  """The first bit offset >= `start_bit` of `data` (bytes) where the 48-bit `magic` starts, or
  -1 (also when it starts at or after `before_bit`, if that is not -1). Each of the 8 bit
  alignments is found by its 5 whole bytes, then checked whole."""
  best = before_bit
  for shift in range(8):
    pattern = magic << (8 - shift)  # the magic at bit `shift` of a 7-byte window
    needle = pattern.to_bytes(7, "big")[1:6]
    mask = ((1 << 48) - 1) << (8 - shift)
    at = max(1, start_bit // 8)
    while True:  # (past the best found so far, a later alignment need not look)
      found = data.find(needle, at, len(data) if best < 0 else best // 8 + 7)
      if found < 0 or found + 6 > len(data) or (best >= 0 and (found - 1) * 8 > best):
        break
      bit = (found - 1) * 8 + shift
      if bit >= start_bit and int.from_bytes(data[found - 1:found + 6], "big") & mask == pattern:
        best = bit if best < 0 else min(best, bit)
        break
      at = found + 1
  return -1 if best == before_bit else best


def _bits(data, start, end):
  """The bits `start` to `end` of `data` as an int."""
  first, last = start // 8, (end + 7) // 8
  value = int.from_bytes(data[first:last], "big") >> (last * 8 - end)
  return value & ((1 << (end - start)) - 1)


def _reframed(data, start, end):
  """The block at bits `start` to `end` of `data` as a bz2 stream of its own."""
  crc = _bits(data, start + 48, start + 80)
  length = end - start
  value = (int.from_bytes(_HEADER, "big") << length) | _bits(data, start, end)
  value = (((value << 48) | END_MAGIC) << 32) | crc
  total = 32 + length + 80
  value <<= -total % 8
  return value.to_bytes((total + 7) // 8, "big")


def _decompressed_block(framed):
  """The pieces of a re-framed block, decompressed, held until its CRC is checked; but for a
  block of more than MAX_HELD_BYTES (runs of a repeated byte, which bz2 stores in little), whose
  pieces beyond it are handed on unchecked.

  Yields:
    lists of bytes beyond MAX_HELD_BYTES.

  Returns:
    (pieces, error): the pieces held (list of bytes); None, or the reason the block failed
    ("fails its CRC" when it gave data first).
  """
  decompressor = bz2.BZ2Decompressor()
  pieces, data, held = [], framed, 0
  try:
    while not decompressor.eof:
      piece = decompressor.decompress(data, PIECE_BYTES)
      data = b""
      if piece:
        pieces.append(piece)
        held += len(piece)
        if held > MAX_HELD_BYTES:
          yield pieces
          pieces, held = [], 0
      elif decompressor.needs_input:
        return pieces, "a bz2 block that ends early"
  except OSError as error:
    if pieces:
      return pieces, "a bz2 block that fails its CRC"
    return pieces, "a corrupt bz2 block (%s)" % error
  return pieces, None


class _Buffer:
  """The file's compressed bytes from `base` on, read CHUNK bytes at a time."""

  def __init__(self, raw, chunk_bytes):
    self._raw, self._chunk = raw, chunk_bytes
    self.data, self.base, self.ended = b"", 0, False

  def more(self):
    """Reads the next chunk; False at the file's end."""
    chunk = b"" if self.ended else self._raw.read(self._chunk)
    self.ended = not chunk
    self.data += chunk
    return bool(chunk)

  def drop_before(self, byte):
    """Forgets the bytes before file offset `byte`."""
    cut = byte - self.base
    if cut > 0:
      self.data = self.data[cut:]
      self.base = byte

  @property
  def size(self):
    return self.base + len(self.data)


def _next_magic(buffer, start_bit):
  """(file bit offset, magic) of the first block or end magic at or after file bit `start_bit`,
  reading more of the file as needed; None when the file ends first."""
  while True:
    relative = start_bit - buffer.base * 8
    block = find_magic(buffer.data, relative, BLOCK_MAGIC)
    end = find_magic(buffer.data, relative, END_MAGIC, block)  # only an end before the block
    if end >= 0 or block >= 0:
      at, magic = (end, END_MAGIC) if end >= 0 else (block, BLOCK_MAGIC)
      return at + buffer.base * 8, magic
    if not buffer.more():
      return None


def iter_blocks(raw, chunk_bytes):
  """The decompressed data of a bz2 file, block by block.

  Args:
    raw: a binary file open for reading.
    chunk_bytes: compressed bytes read at a time, and about the most decompressed bytes yielded
      at a time.

  Yields:
    bytes (the data of good blocks) and `Lost` items, in the file's order.

  Raises:
    EndsEarly: the file ends inside a stream (after the data of its whole blocks).
    NotBz2: the file does not start with a bz2 stream header.
  """
  buffer = _Buffer(raw, chunk_bytes)
  stream_start = 0  # where a stream header is expected (byte), None inside a stream
  bit = 0  # where the next block is expected (bit of the file)
  pending = _Pending(chunk_bytes)
  while True:
    if stream_start is not None:
      while buffer.size < stream_start + 4 and buffer.more():
        pass
      buffer.drop_before(stream_start)
      header = buffer.data[:4]
      if not header:
        break  # the file's end, after a whole stream
      is_header = header[:3] == b"BZh" and header[3:4].isdigit()
      if stream_start == 0 and not is_header:
        raise NotBz2(0, len(header), "no 'BZh' stream header")
      bit = (stream_start + (4 if is_header else 0)) * 8
      stream_start = None
    found = _next_magic(buffer, bit)
    if found is not None and found[0] > bit:  # bytes that are not a block (garbage, a cut block)
      yield from pending.flush()
      yield Lost(bit // 8, (found[0] + 7) // 8, "bytes that are not a bz2 block", 0)
      bit = found[0]
    if found is None:
      break
    if found[1] == END_MAGIC:
      stream_start = (bit + 80 + 7) // 8
      continue
    end = _next_magic(buffer, bit + 48)
    if end is None:
      break  # the file ends inside the block
    base_bit = buffer.base * 8
    framed = _reframed(buffer.data, bit - base_bit, end[0] - base_bit)
    block = _decompressed_block(framed)
    while True:
      try:
        yield from pending.add(next(block))
      except StopIteration as done:
        pieces, error = done.value
        break
    if error is None:
      yield from pending.add(pieces)
    else:
      yield from pending.flush()
      yield Lost(bit // 8, (end[0] + 7) // 8, error, sum(map(len, pieces)))
    pieces = None  # not held while the next block is decompressed
    bit = end[0]
    buffer.drop_before(bit // 8)
  yield from pending.flush()
  if stream_start is None:
    raise EndsEarly(buffer.size)


class _Pending:
  """Decompressed pieces joined into chunks of about `chunk_bytes`."""

  def __init__(self, chunk_bytes):
    self._chunk_bytes, self._pieces, self._size = chunk_bytes, [], 0

  def add(self, pieces):
    """Takes pieces; yields a chunk once there are `chunk_bytes`."""
    for piece in pieces:
      self._pieces.append(piece)
      self._size += len(piece)
      if self._size >= self._chunk_bytes:
        yield from self.flush()

  def flush(self):
    """Yields what is held, if anything."""
    if self._pieces:
      yield b"".join(self._pieces)
    self._pieces, self._size = [], 0
