"""The stages of a corpus build, their units of work, and the run of a task over them
(`prepare_corpus.py`; docs/DATA.md, "From raw text").

  extract  one unit per input file (a directory: per group of its files; a MediaWiki dump: per
           share of its articles): documents -> sentences -> OUT/extracted/<unit>/bucket-<j>.txt
  shard    one unit per shard j: bucket j of every extract unit, in the units' order ->
           OUT/text/{train,eval}/shard-<j>.txt, exact duplicates dropped
  vocab    one unit: OUT/vocab.txt trained on the training text (or the given --vocab_file's
           identity)
  records  one unit per phase x split x shard: OUT/seq<L>/{train,eval}/shard-<j>.tfrecord
  pack     (--pack) one unit per records unit: OUT/seq<L>_packed/{train,eval}/shard-<j>.tfrecord
  check    one unit: every unit done, every output's size and SHA-256 as recorded; the files of
           units no longer asked for removed

Each unit has a settings hash that chains the hashes of the units it reads (`plan`), so a changed
setting redoes only the stages it affects. Task i of n does the units whose index in their stage
is i mod n; after a stage, a task waits until every unit of it is done (`manifest.wait_for_units`).
The records of shard j are seeded with j (`instances.file_random_generators`): the output is the
same whatever the number of tasks and workers.
"""

import collections
import os
import re

from absl import logging

import tokenization
from utils.core import errors
from utils.corpus import bad_input
from utils.corpus import config as config_lib
from utils.corpus import documents
from utils.corpus import manifest
from utils.corpus import sentences
from utils.corpus import shards
from utils.data import instances
from utils.data import vocabulary

# Part of every extract unit's settings: raise it when a change of this code changes the output.
PIPELINE_VERSION = 2
# A directory's files are read in groups of consecutive files of about this many bytes, one
# extract unit each.
GROUP_BYTES = 64 << 20
# A MediaWiki dump is cleaned by K extract units: share k of K reads the whole dump and cleans
# the articles whose index in it is k mod K (`dump_shares`). Reading is fast beside cleaning
# (about 80-90 MB/s of plain XML and 14-15 MB/s of XML from bz2 on one core, against 4 MB/s
# cleaned and split), but every share reads it all, so K grows with the dump only up to a few:
# one share per DUMP_SHARE_BYTES of XML (about as long to clean as GROUP_BYTES of plain text
# takes to split), a .bz2 file's size counted BZ2_XML_RATIO times (Wikipedia's dumps compress
# about 4.5 to 1), at most MAX_DUMP_SHARES. For more units than that, give a dump in the parts
# Wikipedia publishes: each part is an input with shares of its own.
DUMP_SHARE_BYTES = 16 << 20
BZ2_XML_RATIO = 4
MAX_DUMP_SHARES = 8
# The directories of OUT the check stage sweeps for files of units no longer asked for.
_SWEPT = ("manifest", "extracted", "text")
_PHASE_DIRECTORY = re.compile(r"^seq\d+(_packed)?$")

# One unit of work. stage, name: its manifest entry is OUT/manifest/<stage>/<name>.json; index:
# its place in the stage (task index % num_tasks does it); settings: what its output depends on
# (JSON), settings_hash: their hash; spec: dict of what the work needs.
Unit = collections.namedtuple("Unit", ["stage", "name", "index", "settings_hash", "settings",
                                       "spec"])


class DataError(errors.UsageError):
  """An input's content stopped a unit (its message names the file and position): exit status 2,
  reported without the hint to the flags."""


def _unit(stage, name, index, settings, spec):
  """A Unit, its settings hashed."""
  return Unit(stage, name, index, manifest.settings_hash(settings), settings, spec)


def shard_file(index, extension):
  """"shard-00003.txt": the file name of shard `index`."""
  return "shard-%05d%s" % (index, extension)


# ---------------------------------------------------------------------------------------------
# The plan: every unit of every stage, and its settings.
# ---------------------------------------------------------------------------------------------


def plan(config):
  """Every unit of the build, by stage (pure but for reading the inputs' listings and stats, the
  first bytes of each plain file, and the given vocabulary).

  Returns:
    OrderedDict stage -> list of Unit, for each stage of `config.stages`.

  Raises:
    bad_input.BadInput: an input that does not exist.
  """
  units = collections.OrderedDict()
  units["extract"] = _extract_units(config)
  units["shard"] = _shard_units(config, units["extract"])
  units["vocab"] = [_vocab_unit(config, units["shard"])]
  units["records"] = _record_units(config, units["shard"], units["vocab"][0])
  if config.pack:
    units["pack"] = [_unit("pack", u.name, u.index, dict(
        stage="pack", records=u.settings_hash, random_seed=config.random_seed,
        max_sequences_per_pack=config_lib.MAX_SEQUENCES_PER_PACK), dict(u.spec))
                     for u in units["records"]]
  everything = [u.settings_hash for stage_units in units.values() for u in stage_units]
  units["check"] = [_unit("check", "check", 0, dict(
      stage="check", units=manifest.settings_hash(everything)), {})]
  return units


def input_id(path):
  """An input's name in OUT: its base name and a hash of its absolute path."""
  absolute = os.path.abspath(path)
  base = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(absolute.rstrip(os.sep)))
  return "%s-%s" % (base, manifest.settings_hash(absolute)[:8])


def _identity(path):
  """[size, modification time in ns] of a file: a changed input is read again."""
  status = os.stat(path)
  return [status.st_size, status.st_mtime_ns]


def _extract_units(config):
  """One unit per input file; per group of about GROUP_BYTES of a directory's files; per share
  of a dump's articles (`dump_shares`)."""
  units = []
  for path, fmt in zip(config.inputs, config.input_formats):
    fmt = documents.detect_format(path) if fmt == "auto" else fmt
    common = dict(stage="extract", version=PIPELINE_VERSION, format=fmt,
                  segmenter=None if fmt == "sentences_per_line" else sentences.SEGMENTER,
                  num_shards=config.num_shards, skip_bad_documents=config.skip_bad_documents,
                  input=os.path.abspath(path))
    if fmt == "directory" and not os.path.isdir(path):
      raise bad_input.BadInput(path, "the input", "no such directory (format %s)" % fmt)
    if fmt == "directory":
      for group_index, group in enumerate(_file_groups(documents.directory_files(path))):
        files = [[os.path.relpath(f, path)] + _identity(f) for f in group]
        units.append(_unit("extract", "%s-%05d" % (input_id(path), group_index), len(units),
                           dict(common, files=files), dict(path=path, fmt=fmt, files=group)))
    elif not os.path.isfile(path):
      raise bad_input.BadInput(path, "the input", "no such file (format %s)" % fmt)
    elif fmt == "wikidump":
      count = dump_shares(path)
      for k in range(count):
        units.append(_unit("extract", "%s-%05d" % (input_id(path), k), len(units),
                           dict(common, files=[_identity(path)], share=[k, count]),
                           dict(path=path, fmt=fmt, files=None, share=[k, count])))
    else:
      units.append(_unit("extract", input_id(path), len(units), dict(common, files=[
          _identity(path)]), dict(path=path, fmt=fmt, files=None,
                                  warning=documents.markup_warning(path))))
  return units


def dump_shares(path):
  """K, the number of extract units of the MediaWiki dump `path`: one per DUMP_SHARE_BYTES of
  its XML (a .bz2 file's size counted BZ2_XML_RATIO times), 1 to MAX_DUMP_SHARES. It depends on
  the file's size only, never on the workers or tasks, so the output does not either."""
  xml_bytes = os.path.getsize(path) * (BZ2_XML_RATIO if path.endswith(".bz2") else 1)
  return max(1, min(MAX_DUMP_SHARES, -(-xml_bytes // DUMP_SHARE_BYTES)))


def _file_groups(files):
  """Consecutive files in groups of at least GROUP_BYTES (the last one may be smaller)."""
  groups, group, size = [], [], 0
  for path in files:
    group.append(path)
    size += os.path.getsize(path)
    if size >= GROUP_BYTES:
      groups.append(group)
      group, size = [], 0
  return groups + ([group] if group else [])


def _shard_units(config, extract_units):
  """One unit per shard j: bucket j of every extract unit, in the units' order (the inputs in
  order; a directory's groups, a dump's shares in order): the first of duplicates is kept."""
  extract_hashes = [u.settings_hash for u in extract_units]
  extract_names = [u.name for u in extract_units]
  return [_unit("shard", shard_file(j, ""), j, dict(
      stage="shard", eval_fraction=config.eval_fraction, extract=extract_hashes), dict(
          shard=j, extract=extract_names)) for j in range(config.num_shards)]


def vocab_path(config):
  """The vocabulary the records are written with: --vocab_file, else OUT/vocab.txt."""
  return config.vocab_file or os.path.join(config.output_dir, "vocab.txt")


def _vocab_unit(config, shard_units):
  """The vocabulary's unit: trained on the training shards, or the given file's identity."""
  if config.vocab_file:
    settings = dict(stage="vocab", vocab_file=os.path.abspath(config.vocab_file),
                    sha256=manifest.file_sha256(config.vocab_file))
  else:
    settings = dict(stage="vocab", vocab_size=config.vocab_size,
                    do_lower_case=config.do_lower_case,
                    shards=[u.settings_hash for u in shard_units])
  return _unit("vocab", "vocab", 0, settings, {})


def _record_units(config, shard_units, vocab_unit):
  """Phase by phase, split by split, shard by shard."""
  units = []
  for phase in config.phases:
    for split in config.splits:
      for shard in shard_units:
        j = shard.spec["shard"]
        settings = dict(stage="records", shard=shard.settings_hash,
                        vocab=vocab_unit.settings_hash,
                        options=_options_settings(config.generator_options(phase, split)),
                        do_lower_case=config.do_lower_case, split=split, index=j)
        units.append(_unit("records", "%s-%s-%s" % (config_lib.phase_name(phase), split,
                                                    shard_file(j, "")), len(units), settings,
                           dict(phase=phase, split=split, shard=j)))
  return units


def _options_settings(options):
  """The generator's options as a records unit's settings (its manifest entry says whether the
  records hold masks): "dynamic_masking" only when true, so that the records of fixed masks keep
  the settings hash they had before the option existed (an earlier build's are not redone)."""
  settings = options._asdict()
  if not settings["dynamic_masking"]:
    del settings["dynamic_masking"]
  return settings


# ---------------------------------------------------------------------------------------------
# The work of one unit: writes its outputs under their temporary names, returns them (relative
# to OUT) and its counts.
# ---------------------------------------------------------------------------------------------


def skipped_what(error):
  """What a skipped `bad_input.BadInput` cost, as its warning says: "skipped a bad document",
  "skipped 12 documents" (a lost bz2 block's pages), or, when it cost none (bytes between a
  dump's pages, the XML's end outside a page), "skipped bytes that are not a page (no document
  lost)"."""
  if error.documents == 0:
    return "skipped bytes that are not a page (no document lost)"
  if error.documents == 1:
    return "skipped a bad document"
  return "skipped %d documents" % error.documents


def _extract(config, unit):
  """An input's (or a directory's group of files', or a dump's share of articles') documents
  into its bucket files; bad documents skipped and counted with --skip_bad_documents. A share
  counts its part of the dump's bytes as read (input_bytes), so that the shares add up to it.
  A skipped item counts the documents it cost (`BadInput.documents`: a dump's lost bz2 block, the
  pages it held)."""
  spec, out = unit.spec, config.output_dir
  skipped = []

  def on_bad(error):
    logging.warning("%s: %s", skipped_what(error), error)
    skipped.append(error.documents)

  on_bad = on_bad if config.skip_bad_documents else None
  if spec["fmt"] == "directory":
    document_iter = documents.iter_directory_documents(spec["path"], spec["files"], on_bad)
    input_bytes = sum(os.path.getsize(f) for f in spec["files"])
  else:
    share = spec.get("share")
    document_iter = documents.iter_documents(spec["path"], spec["fmt"], on_bad, share=share)
    input_bytes = os.path.getsize(spec["path"])
    if share is not None:
      k, count = share
      input_bytes = input_bytes * (k + 1) // count - input_bytes * k // count
  relative = lambda j: os.path.join(own_directory(unit), "bucket-%05d.txt" % j)
  os.makedirs(os.path.join(out, own_directory(unit)), exist_ok=True)
  written, counts = shards.write_buckets(
      document_iter, spec["fmt"], config.num_shards,
      lambda j: manifest.temp_name(os.path.join(out, relative(j))))
  counts.update(bad_documents=sum(skipped), input_bytes=input_bytes)
  return [relative(j) for j in written], counts


def _shard(config, unit):
  """Bucket j of every input into the train and held-out text of shard j."""
  j, out = unit.spec["shard"], config.output_dir
  buckets = [os.path.join(out, "extracted", name, "bucket-%05d.txt" % j)
             for name in unit.spec["extract"]]
  relative = lambda split: os.path.join("text", split, shard_file(j, ".txt"))
  for split in config.splits:
    os.makedirs(os.path.join(out, "text", split), exist_ok=True)
  written, counts = shards.merge_buckets(
      [b for b in buckets if os.path.exists(b)], config.eval_fraction,
      lambda split: manifest.temp_name(os.path.join(out, relative(split))))
  return [relative(split) for split in written], counts


def train_text_files(config):
  """The training text shards that exist, in shard order."""
  names = [os.path.join(config.output_dir, "text", "train", shard_file(j, ".txt"))
           for j in range(config.num_shards)]
  return [name for name in names if os.path.exists(name)]


def _vocab(config, unit):
  """OUT/vocab.txt trained on the training text; nothing to write for a given --vocab_file."""
  del unit  # one unit
  if config.vocab_file:
    return [], dict(tokens=len(tokenization.load_vocab(config.vocab_file)))
  texts = train_text_files(config)
  if not texts:
    raise DataError("no training text to train a vocabulary on in %s: every document was "
                    "empty, a duplicate or held out" % os.path.join(config.output_dir, "text"))
  tokens = vocabulary.build_vocab(texts, config.vocab_size,
                                  manifest.temp_name(vocab_path(config)),
                                  do_lower_case=config.do_lower_case)
  return ["vocab.txt"], dict(tokens=len(tokens))


def _records(config, unit):
  """The records of one phase, split and shard (`instances.process_file`, the file index j); no
  file for a shard without text or records."""
  phase, split, j = unit.spec["phase"], unit.spec["split"], unit.spec["shard"]
  text = os.path.join(config.output_dir, "text", split, shard_file(j, ".txt"))
  if not os.path.exists(text):
    return [], dict(records=0)
  relative = os.path.join(config_lib.phase_name(phase), split, shard_file(j, ".tfrecord"))
  target = manifest.temp_name(os.path.join(config.output_dir, relative))
  os.makedirs(os.path.dirname(target), exist_ok=True)
  _, written = instances.process_file((j, text, target, vocab_path(config),
                                       config.do_lower_case,
                                       config.generator_options(phase, split)))
  if not written:  # no record: no file (a reader would take an empty one for a cut copy)
    os.remove(target)
    return [], dict(records=0)
  return [relative], dict(records=written)


def _pack(config, unit):
  """The packed records of one records file (`utils/datafiles/packer.py`, which loads TensorFlow:
  imported here, by the pack stage only)."""
  from utils.datafiles import packer  # pylint: disable=g-import-not-at-top
  phase, split, j = unit.spec["phase"], unit.spec["split"], unit.spec["shard"]
  records = os.path.join(config.output_dir, config_lib.phase_name(phase), split,
                         shard_file(j, ".tfrecord"))
  if not os.path.exists(records):
    return [], dict(sequences=0, packs=0)
  relative = os.path.join(config_lib.phase_name(phase) + "_packed", split,
                          shard_file(j, ".tfrecord"))
  result = packer.pack_files([records], [manifest.temp_name(os.path.join(config.output_dir,
                                                                         relative))],
                             max_seq_length=phase.max_seq_length,
                             max_sequences_per_pack=config_lib.MAX_SEQUENCES_PER_PACK,
                             random_seed=config.random_seed, num_workers=config.num_workers)
  return [relative], dict(sequences=result["sequences"], packs=result["packs"])


class CheckFailed(RuntimeError):
  """The check stage found a unit not done or an output whose bytes are not those recorded."""


def _check(config, unit):
  """Every unit of the other stages done, every output's SHA-256 as recorded; then the files of
  units no longer asked for removed."""
  del unit  # one unit
  out, problems, keep = config.output_dir, [], set()
  units = plan(config)
  for stage, stage_units in units.items():
    for u in stage_units:
      keep.add(os.path.relpath(manifest.entry_path(out, stage, u.name), out))
      entry = manifest.read_entry(out, stage, u.name)
      if stage == "check":
        continue
      if not manifest.is_done(out, entry, u.settings_hash):
        problems.append("%s/%s is not done" % (stage, u.name))
        continue
      for output in entry["outputs"]:
        keep.add(output["path"])
        if manifest.file_sha256(os.path.join(out, output["path"])) != output["sha256"]:
          problems.append("%s: its SHA-256 is not the one recorded" % output["path"])
  if problems:
    raise CheckFailed("check: %d problems: %s" % (len(problems), "; ".join(problems[:10])))
  removed = _remove_stale(config, keep)
  if removed:
    logging.info("check: removed %d files of an earlier run's settings: %s", len(removed),
                 ", ".join(removed[:10]) + (" ..." if len(removed) > 10 else ""))
  return [], dict(units=sum(len(u) for u in units.values()), removed=len(removed))


def _remove_stale(config, keep):
  """The files of units no longer asked for, removed (`manifest.remove_stale`)."""
  out = config.output_dir
  directories = list(_SWEPT) + sorted(
      name for name in os.listdir(out)
      if _PHASE_DIRECTORY.match(name) and os.path.isdir(os.path.join(out, name)))
  removed = manifest.remove_stale(out, keep, directories)
  trained = os.path.join(out, "vocab.txt")
  if ("vocab.txt" not in keep and os.path.exists(trained) and config.vocab_file
      and os.path.abspath(config.vocab_file) != os.path.abspath(trained)):
    os.remove(trained)
    removed.append("vocab.txt")
  return removed


_WORK = dict(extract=_extract, shard=_shard, vocab=_vocab, records=_records, pack=_pack,
             check=_check)


def work(config, unit):
  """Does one unit: writes its outputs under their temporary names (`manifest.temp_name`).

  Args:
    config: `config.CorpusConfig`.
    unit: a `Unit` of `plan(config)`.

  Returns:
    (its outputs relative to OUT, dict of its counts).

  Raises:
    bad_input.BadInput, DataError, ValueError: the input's content or the settings (named).
    CheckFailed: the check stage's findings.
  """
  return _WORK[unit.stage](config, unit)


def own_directory(unit):
  """The directory relative to OUT that only `unit` writes to (an extract unit's buckets), or
  None."""
  return os.path.join("extracted", unit.name) if unit.stage == "extract" else None


def unit_outputs(config, unit):
  """Every output a unit may write, relative to OUT (what a killed run may have left of it)."""
  spec = unit.spec
  if unit.stage == "extract":
    return [os.path.join(own_directory(unit), "bucket-%05d.txt" % j)
            for j in range(config.num_shards)]
  if unit.stage == "shard":
    return [os.path.join("text", split, shard_file(spec["shard"], ".txt"))
            for split in config_lib.SPLITS]
  if unit.stage == "vocab":
    return [] if config.vocab_file else ["vocab.txt"]
  if unit.stage in ("records", "pack"):
    suffix = "_packed" if unit.stage == "pack" else ""
    return [os.path.join(config_lib.phase_name(spec["phase"]) + suffix, spec["split"],
                         shard_file(spec["shard"], ".tfrecord"))]
  return []
