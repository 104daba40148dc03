"""Packs pretraining records: several sequences share one row of max_seq_length tokens.

  python pack_pretraining_data.py --input_file='seq512/train/*' --output_dir=packed512/train \\
      [--max_seq_length=512] [--max_sequences_per_pack=3] [--max_predictions_per_seq=80]

Input: unpacked records (ours or the original release's, docs/DESIGN.md section 3). Output:
packed records (docs/DATA.md, "Packed records"): `--output_dir` writes one file per input file,
of the input's name; `--output_file` the files it lists.

How: `utils/datafiles/packer.py` (chunks of at most `--chunk_sequences` records, each packed
on its own histogram; the output depends only on the input and the flags, not on
--num_workers). Outputs are written as ".partial" files and renamed when the whole set is
written; a run that fails or is killed leaves no output under a final name.
The last line: sequences, packs, padding before and after (% of the tokens), sequences per pack.
"""

import os
import time

# Before TensorFlow: cli sets TensorFlow's native log level, which TensorFlow reads when it loads.
from utils.runtime import cli  # pylint: disable=g-bad-import-order
from absl import flags
from absl import logging

from utils.core import errors
from utils.core import paths
from utils.data import packed_records
from utils.datafiles import packer

# The library's packing, importable from here as before it had a module of its own.
pack_files = packer.pack_files


def summary_line(result):
  """The command's last line: sequences, packs, padding before -> after, sequences per pack."""
  sequences, packs, tokens = result["sequences"], result["packs"], result["tokens"]
  before = 100.0 * (1.0 - tokens / max(1, sequences * result["input_length"]))
  after = 100.0 * (1.0 - tokens / max(1, packs * result["limits"].max_seq_length))
  return ("packed %d sequences into %d packs of %d tokens: padding %.1f%% -> %.1f%%, %.2f "
          "sequences per pack" % (sequences, packs, result["limits"].max_seq_length, before, after,
                                  sequences / max(1, packs)))


def resolve_outputs(input_files, output_file, output_dir):
  """The outputs: `--output_file`'s list, or `--output_dir`/<each input's name>.

  Raises:
    ValueError: naming the flags: neither or both given, a file listed twice, two inputs of one
      name with --output_dir, an output that is also an input.
  """
  if bool(output_file) == bool(output_dir):
    raise ValueError("give exactly one of --output_file and --output_dir")
  if output_file:
    outputs = paths.split_list(output_file)
    if len(set(outputs)) != len(outputs):
      raise ValueError("--output_file lists a file twice: %s" % output_file)
  else:
    outputs = [os.path.join(output_dir, os.path.basename(path)) for path in input_files]
    seen = {}
    for path, output in zip(input_files, outputs):
      if output in seen:
        raise ValueError("--output_dir: the input files %s and %s have one name; give "
                         "--output_file instead" % (seen[output], path))
      seen[output] = path
  clash = set(map(os.path.abspath, outputs)) & set(map(os.path.abspath, input_files))
  if clash:
    raise ValueError("the output %s is also an input file" % sorted(clash)[0])
  return outputs


def _resolve_input_files(input_file):
  """`--input_file`'s files; none matching is an error of the input (no hint to the flags).

  Raises:
    packed_records.PackingInputError: naming the patterns.
  """
  patterns = paths.split_list(input_file)
  files = paths.resolve_files(patterns)
  if not files:
    raise packed_records.PackingInputError(
        "--input_file: no file matches %s" % (", ".join(patterns) or "(empty)"))
  return files


def define_flags():
  """Defines the command-line flags."""
  flags.DEFINE_string("input_file", None, "Unpacked pretraining TFRecords: comma-separated file "
                      "names or glob patterns.")
  flags.DEFINE_string("output_file", None, "Output TFRecord files, comma-separated; each gets an "
                      "equal share of the packs.")
  flags.DEFINE_string("output_dir", None, "Output directory: one file per input file, of the "
                      "input's name (instead of --output_file).")
  flags.DEFINE_integer("max_seq_length", None, "Tokens of a pack (default: the input's length).")
  flags.DEFINE_integer("max_sequences_per_pack", packer.DEFAULT_MAX_SEQUENCES_PER_PACK,
                       "Sequences a pack holds at most (K).")
  flags.DEFINE_integer("max_predictions_per_seq", None, "The input's masked-LM width W (default: "
                       "the input's; records without masks have none); a pack holds W + K "
                       "predictions.")
  flags.DEFINE_integer("random_seed", 12345, "Seed of the shuffle of the packs within a chunk.")
  flags.DEFINE_integer("chunk_sequences", None, "Records packed together at most (memory is "
                       "bounded by one chunk per worker; default: about 128 MB of arrays).")
  flags.DEFINE_integer("num_workers", None, "Processes packing chunks in parallel (default: all "
                       "cores); the output does not depend on it.")
  flags.DEFINE_bool("unpack", False, "Unpack instead: packed files to the records they hold (one "
                    "output per input; --max_seq_length, --max_predictions_per_seq: their widths, "
                    "default the packed length and P - K).")
  flags.mark_flags_as_required(["input_file"])


def main(argv):
  """Packs the records the flags name; prints the summary line. Exit 2 for bad flags or input."""
  flag_values = flags.FLAGS
  try:
    input_files = _resolve_input_files(flag_values.input_file)
    outputs = resolve_outputs(input_files, flag_values.output_file, flag_values.output_dir)
    start = time.time()
    if flag_values.unpack:
      packs, sequences = packer.unpack_files(input_files, outputs, flag_values.max_seq_length,
                                      flag_values.max_predictions_per_seq)
      print("unpacked %d packs into %d sequences" % (packs, sequences), flush=True)
      return None
    result = packer.pack_files(input_files, outputs, flag_values.max_seq_length,
                        flag_values.max_sequences_per_pack, flag_values.max_predictions_per_seq,
                        flag_values.random_seed, flag_values.chunk_sequences,
                        flag_values.num_workers)
  except packed_records.PackingInputError as e:
    errors.report(os.path.basename(argv[0]), str(e))
    return errors.USAGE_EXIT_CODE
  except ValueError as e:
    raise errors.UsageError(str(e))
  except RuntimeError as e:  # a dead worker: one line naming its file
    raise SystemExit("pack_pretraining_data: error: %s" % e)
  logging.info("pack_pretraining_data: %d files in %.1f s", len(outputs), time.time() - start)
  print(summary_line(result), flush=True)


if __name__ == "__main__":
  define_flags()
  cli.run_main(main)
