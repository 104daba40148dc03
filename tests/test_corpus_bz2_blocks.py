"""utils/corpus/bz2_blocks.py: a bz2 file read block by block: the magic found at any bit
offset, the file's bytes given back whole, a corrupt block reported as lost with its compressed
bytes and the next blocks read. (Damaged dumps: tests/test_corpus_wikidump_damage.py.)"""

import bz2
import io
import random

import pytest

from utils.corpus import bz2_blocks


def _bit_string(data):
  return "".join(format(byte, "08b") for byte in data)


def test_find_magic_finds_the_magic_at_every_bit_alignment():
  rng = random.Random(3)
  magic = format(bz2_blocks.BLOCK_MAGIC, "048b")
  for shift in range(40):
    bits = "".join(rng.choice("01") for _ in range(shift)) + magic + "".join(
        rng.choice("01") for _ in range(70 - shift))
    bits += "0" * (-len(bits) % 8)
    data = int(bits, 2).to_bytes(len(bits) // 8, "big")
    expected = _bit_string(data).find(magic)  # found on the bits as a string
    assert bz2_blocks.find_magic(data, 0, bz2_blocks.BLOCK_MAGIC) == expected == shift
    assert bz2_blocks.find_magic(data, expected + 1, bz2_blocks.BLOCK_MAGIC) == -1


def test_blocks_of_one_and_several_streams_give_the_files_bytes():
  text = "".join("Line %d of the text, %s.\n" % (n, "word " * (n % 7)) for n in range(20000))
  text = text.encode("utf-8")
  for data in (bz2.compress(text, 1), bz2.compress(text, 9),
               bz2.compress(text[:5000], 1) + bz2.compress(text[5000:], 3)):
    items = list(bz2_blocks.iter_blocks(io.BytesIO(data), 1 << 16))
    assert all(isinstance(item, bytes) for item in items)
    assert b"".join(items) == text


def test_a_corrupt_block_is_lost_alone_and_named_by_its_compressed_bytes():
  text = "".join("Line %d of the text.\n" % n for n in range(40000)).encode("utf-8")
  data = bz2.compress(text, 1)  # blocks of 100 KB of text
  bits = _bit_string(data)
  magic = format(bz2_blocks.BLOCK_MAGIC, "048b")
  starts = [bits.find(magic)]
  while bits.find(magic, starts[-1] + 1) >= 0:
    starts.append(bits.find(magic, starts[-1] + 1))
  assert len(starts) >= 4
  damaged = bytearray(data)
  damaged[(starts[1] + starts[2]) // 16] ^= 0x01
  items = list(bz2_blocks.iter_blocks(io.BytesIO(bytes(damaged)), 1 << 16))
  lost = [item for item in items if isinstance(item, bz2_blocks.Lost)]
  assert [(item.start, item.end) for item in lost] == [(starts[1] // 8, (starts[2] + 7) // 8)]
  assert lost[0].reason in ("a bz2 block that fails its CRC", ) or lost[0].reason.startswith(
      "a corrupt bz2 block")
  before = b"".join(item for item in items[:items.index(lost[0])])
  after = b"".join(item for item in items[items.index(lost[0]) + 1:])
  # What is read is the text but one run of it: the first block's and the blocks' after it.
  assert text.startswith(before) and text.endswith(after)
  # (a level-1 block holds up to 100,000 bytes less bzip2's margin of 19, more where runs of a
  # byte are shortened)
  assert 99000 <= len(text) - len(before) - len(after) <= 100000


def test_a_file_that_ends_inside_a_stream_or_is_not_bz2_raises():
  data = bz2.compress(b"text " * 100000, 1)
  with pytest.raises(bz2_blocks.EndsEarly) as raised:
    list(bz2_blocks.iter_blocks(io.BytesIO(data[:len(data) // 2]), 1 << 16))
  assert raised.value.size == len(data) // 2
  with pytest.raises(bz2_blocks.NotBz2):
    list(bz2_blocks.iter_blocks(io.BytesIO(b"<mediawiki>"), 1 << 16))
