"""One task's run of a corpus build: its units of each stage (those whose index is
--task_index mod --num_tasks), `--num_workers` at a time, done units skipped, then the wait for
the other tasks' units before the next stage; the summary of what the manifest holds.

  summary = runner.run(config)

`--stage=all` runs every stage and waits between them (a task under mpirun: every rank runs this
with its own rank). `--stage=NAME` runs that stage's units of this task only, after checking that
the stages before it are done, and does not wait for the other tasks (a Slurm array job per stage,
each depending on the one before, waits for them).

A unit that fails or is stopped (`stop_at_once.StopSignal`) leaves nothing half-written: its
temporary files are removed on the way out (`run_unit` for a unit of this process; `run_stage`,
after the workers are ended, for those of the workers). A stopped unit writes no entry: the next
run does it.
"""

import collections
import contextlib
import functools
import os
import time

from absl import logging

from utils.core import errors
from utils.corpus import bad_input
from utils.corpus import config as config_lib
from utils.corpus import manifest
from utils.corpus import shards
from utils.corpus import stages
from utils.data import instances
from utils.runtime import worker_pool

# The errors of a unit that are its input's or its settings' fault: reported in one line, exit 2.
_DATA_ERRORS = (bad_input.BadInput, instances.InputDataError, ValueError)
# The summary line names the inputs one by one up to this many, and a format's inputs when it
# has no more (60 part files of a dump are counted, not named).
NAMED_INPUTS = 3


def is_mine(unit, config):
  """Whether this task does `unit`: its index in its stage mod --num_tasks is --task_index."""
  return unit.index % config.num_tasks == config.task_index


def run_unit(config, unit):
  """Does one unit and publishes it: its leftovers removed, its work, its outputs and entry.

  Returns:
    its manifest entry (dict).

  Raises:
    stages.DataError: the unit's input or settings (named); its entry then says "failed".
    BaseException: what else the work raised (a "failed" entry written for an Exception, none
      for a stop), its temporary files removed first.
  """
  start = time.time()
  out = config.output_dir
  possible = stages.unit_outputs(config, unit)
  manifest.remove_unit_leftovers(out, unit, possible)
  try:
    outputs, counts = stages.work(config, unit)
  except BaseException as e:
    manifest.remove_unit_temp_files(out, unit, possible, stages.own_directory(unit))
    if isinstance(e, _DATA_ERRORS):
      manifest.record_failure(out, unit, e, task=config.task_index)
      raise stages.DataError(str(e)) from e
    if isinstance(e, Exception):
      manifest.record_failure(out, unit, "%s: %s" % (type(e).__name__, e),
                              task=config.task_index)
    raise
  return manifest.publish_unit(out, unit, outputs, counts, task=config.task_index,
                               seconds=round(time.time() - start, 3))


def _warm_up(config, stage, todo):
  """Before the workers fork: the records' tokenizer and CRC tables, which they inherit."""
  if stage == "records" and todo:
    tokenizer = instances.cached_tokenizer(stages.vocab_path(config), config.do_lower_case)
    longest = max(config.phases, key=lambda phase: phase.max_seq_length)
    instances.warm_up(tokenizer, config.generator_options(longest, "train"))


def run_stage(config, stage, units):
  """Does this task's units of a stage that are not done, --num_workers at a time.

  Returns:
    (number of this task's units done earlier, the entries of the units done now).

  Raises:
    stages.DataError: a unit's input or settings; RuntimeError: a worker that failed otherwise
      or died (naming its unit); StopSignal. Whatever ends the stage early, the workers still
      running are ended and the temporary files of the units not done are removed.
  """
  out = config.output_dir
  mine = [unit for unit in units if is_mine(unit, config)]
  todo = [unit for unit in mine if not manifest.is_done(
      out, manifest.read_entry(out, unit.stage, unit.name), unit.settings_hash)]
  logging.info("prepare_corpus: %s: %d units, %d of this task (%d done earlier)", stage,
               len(units), len(mine), len(mine) - len(todo))
  _warm_up(config, stage, todo)
  # A pack unit runs here, and pack_files runs its chunks in --num_workers processes of its own
  # (a worker of the pool, a daemon, could not start them).
  workers = 1 if stage == "pack" else max(1, min(config.num_workers, len(todo)))
  threads = max(1, worker_pool.default_num_workers() // workers)
  start, entries, counts = time.time(), [], collections.Counter()
  results = worker_pool.run_tasks(
      functools.partial(run_unit, config), todo, workers,
      describe=lambda unit: "%s unit %s" % (unit.stage, unit.name),
      passed_errors=(stages.DataError,), environ={"RAYON_NUM_THREADS": str(threads)})
  try:
    with contextlib.closing(results):  # the workers ended, however the loop ends
      for _, entry in results:
        entries.append(entry)
        counts.update(entry["counts"])
        logging.info("prepare_corpus: %s: %d/%d units of this task, %s, %.1f s", stage,
                     len(entries), len(todo), _progress(counts), time.time() - start)
  except BaseException:
    for unit in todo:  # a worker's unit, ended with its worker: nothing of it left
      manifest.remove_unit_temp_files(out, unit, stages.unit_outputs(config, unit),
                                      stages.own_directory(unit))
    raise
  return len(mine) - len(todo), entries


def _progress(counts):
  """What a stage's units did so far, for the progress line."""
  shown = [("input_bytes", "%.1f MB read", 1e-6), ("documents", "%d documents", 1),
           ("records", "%d records", 1), ("sequences", "%d sequences packed", 1)]
  parts = [text % (counts[key] * scale) for key, text, scale in shown if counts.get(key)]
  return ", ".join(parts) or "no output"


def require_done(config, units, earlier):
  """Checks that every unit of the `earlier` stages is done.

  Raises:
    errors.UsageError: naming --stage, the first stage that is not done and its missing units.
  """
  out = config.output_dir
  for stage in earlier:
    missing = [unit for unit in units[stage] if not manifest.is_done(
        out, manifest.read_entry(out, stage, unit.name), unit.settings_hash)]
    if missing:
      raise errors.UsageError(
          "--stage=%s: the stage %s is not done with these settings: %d units missing (%s); "
          "run --stage=%s first (or --stage=all)" % (
              config.stage, stage, len(missing),
              manifest.describe_units(missing, config.num_tasks), stage))


def run(config, units=None):
  """This task's run of the stages `config.stage` names.

  Args:
    config: `config.CorpusConfig`, checked.
    units: `stages.plan(config)`, or None: planned here.

  Returns:
    `summary(...)` of the manifest after the run.

  Raises:
    stages.DataError, errors.UsageError: bad input or settings (exit 2).
    manifest.StageIncomplete: another task's unit failed or the wait timed out (exit 1).
    stages.CheckFailed, RuntimeError: the check's findings, a worker that died (exit 1).
    bad_input.BadInput: an input that does not exist (when planned here).
    stop_at_once.StopSignal: a stop signal (`prepare_corpus.py`); nothing half-written is left.
  """
  start = time.time()
  units = stages.plan(config) if units is None else units
  for unit in units["extract"]:
    if unit.spec.get("warning"):  # a plain-text input that looks like markup
      logging.warning("prepare_corpus: %s", unit.spec["warning"])
  out = config.output_dir
  if config.stage == "all":
    selected = config.stages
  else:
    selected = (config.stage,)
    require_done(config, units, config.stages[:config.stages.index(config.stage)])
    if config.stage == "check" and is_mine(units["check"][0], config):
      manifest.remove_unit_leftovers(out, units["check"][0], [])  # asked for: checked again
  earlier, read = 0, 0
  for stage in selected:
    done_before, entries = run_stage(config, stage, units[stage])
    earlier += done_before
    read += sum(entry["counts"].get("input_bytes", 0) for entry in entries)
    if config.stage == "all":
      manifest.wait_for_units(out, stage, units[stage], config.num_tasks,
                              config.barrier_timeout_secs)
  return summary(config, units, time.time() - start, read, earlier)


def summary(config, units, seconds, bytes_read=0, units_done_earlier=0):
  """The totals of the done units of the current settings, from the manifest, and this run's.

  Args:
    config: `config.CorpusConfig`.
    units: `stages.plan(config)`.
    seconds: this run's time.
    bytes_read: input bytes this run's extract units read.
    units_done_earlier: this task's units found done.

  Returns:
    dict: documents, input_bytes, bad_documents, duplicates, train_documents, eval_documents,
    shards.SENTENCE_COUNTS (of the whole corpus), shards, records (OrderedDict "seq128 train" ->
    records), seconds, bytes_read, units_done_earlier, formats (OrderedDict input's absolute path
    -> its format).
  """
  out = config.output_dir
  totals = collections.Counter()
  records = collections.OrderedDict()
  for stage, stage_units in units.items():
    for unit in stage_units:
      entry = manifest.read_entry(out, stage, unit.name)
      if not manifest.is_done(out, entry, unit.settings_hash):
        continue
      counts = entry["counts"]
      if stage in ("extract", "shard"):
        totals.update({key: counts[key] for key in (
            "documents", "input_bytes", "bad_documents", "duplicates", "train_documents",
            "eval_documents") + shards.SENTENCE_COUNTS if key in counts and not (
                stage == "shard" and key == "documents")})
      elif stage == "records":
        key = "%s %s" % (config_lib.phase_name(unit.spec["phase"]), unit.spec["split"])
        records[key] = records.get(key, 0) + counts["records"]
  formats = collections.OrderedDict(
      (unit.settings["input"], unit.settings["format"]) for unit in units["extract"])
  return dict(totals, shards=config.num_shards, records=records, seconds=seconds,
              bytes_read=bytes_read, units_done_earlier=units_done_earlier, formats=formats)


def formats_summary(formats):
  """The inputs' formats as the summary line gives them: each input named by its base name when
  there are at most NAMED_INPUTS ("a.xml.bz2 as wikidump, books as directory"), else a count per
  format in the order of the inputs, a format's inputs named when it has at most NAMED_INPUTS
  ("63 inputs: 62 wikidump, 1 documents_per_line (notes.txt)").

  Args:
    formats: OrderedDict input path -> format (`summary`'s).

  Returns:
    str, "" for no input.
  """
  names = collections.OrderedDict()
  for path, fmt in formats.items():
    names.setdefault(fmt, []).append(os.path.basename(path))
  if len(formats) <= NAMED_INPUTS:
    return ", ".join("%s as %s" % (os.path.basename(path), fmt) for path, fmt in formats.items())
  return "%d inputs: %s" % (len(formats), ", ".join(
      "%d %s%s" % (len(inputs), fmt, " (%s)" % ", ".join(inputs)
                   if len(inputs) <= NAMED_INPUTS else "") for fmt, inputs in names.items()))


def summary_line(result):
  """The command's last line: documents, the inputs' formats, duplicates, bad documents, shards,
  records per phase and split; this run's time and the MB/s of the input it read."""
  records = ", ".join("%s %d" % (key, count) for key, count in result["records"].items())
  seconds = result["seconds"]
  this_run = "%.1f s" % seconds
  if result["bytes_read"]:
    this_run += ", %.2f MB/s of input" % (result["bytes_read"] / 1e6 / max(seconds, 1e-9))
  if result["units_done_earlier"]:
    this_run += ", %d units done earlier" % result["units_done_earlier"]
  formats = formats_summary(result.get("formats", {}))
  return ("prepare_corpus: %d documents read (%.1f MB%s), %d duplicates dropped, %d bad documents "
          "skipped; %s%d shards of %d training and %d held-out documents; records: %s; %s" % (
              result.get("documents", 0), result.get("input_bytes", 0) / 1e6,
              ": " + formats if formats else "",
              result.get("duplicates", 0), result.get("bad_documents", 0),
              shards.sentence_summary(result), result["shards"], result.get("train_documents", 0),
              result.get("eval_documents", 0), records or "none", this_run))
