"""utils/datafiles/packer.py, in this process: the records packed and unpacked back are the input
records exactly, the same packs whoever calls (pack_pretraining_data.py's name for it is the
library's), and a bad argument names its flag and leaves nothing. The packed rows' rules are
checked one by one in tests/test_pack_pretraining_data.py, on the command."""

import collections
import os

import pytest

import pack_pretraining_data
from tests.test_pack_pretraining_data import K
from tests.test_pack_pretraining_data import canonical
from tests.test_pack_pretraining_data import check_round_trip
from tests.test_pack_pretraining_data import ours  # noqa: F401  (a fixture)
from tests.test_pack_pretraining_data import parse_file
from utils.datafiles import packer


def test_packed_then_unpacked_gives_back_the_input_records(ours, tmp_path):  # noqa: F811
  inputs, _ = ours
  packed = [str(tmp_path / "packed-a"), str(tmp_path / "packed-b")]
  result = packer.pack_files(inputs, packed, max_seq_length=96, chunk_sequences=200,
                             num_workers=2)
  rows, sequences, tokens = check_round_trip(inputs, packed, 96, K, 10, s_in=64, w_in=10)
  assert (result["packs"], result["sequences"], result["tokens"]) == (rows, sequences, tokens)
  unpacked = [str(tmp_path / "unpacked-a"), str(tmp_path / "unpacked-b")]
  assert packer.unpack_files(packed, unpacked, 64, 10) == (rows, sequences)
  expected = collections.Counter(canonical(r) for path in inputs for r in parse_file(path))
  got = collections.Counter(canonical(r) for path in unpacked for r in parse_file(path))
  assert got == expected
  assert pack_pretraining_data.pack_files is packer.pack_files  # the command runs this one


@pytest.mark.parametrize("argument, flag", [("max_sequences_per_pack", "--max_sequences_per_pack"),
                                            ("chunk_sequences", "--chunk_sequences")])
def test_a_bad_argument_names_its_flag_and_leaves_nothing(ours, tmp_path, argument,  # noqa: F811
                                                          flag):
  inputs, _ = ours
  with pytest.raises(ValueError, match="%s must be >= 1, got 0" % flag):
    packer.pack_files(inputs, [str(tmp_path / "new" / "packed")], **{argument: 0})
  assert os.listdir(str(tmp_path)) == []
