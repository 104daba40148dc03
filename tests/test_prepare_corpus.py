"""prepare_corpus.py, the command: its output is the library's (tests/test_corpus_runner.py) for
the same settings, packed too; bad input and bad flags end with exit 2 and one line; a run killed
during its records continues where it stopped, never showing a partial file under a final name;
mpirun's two ranks write the bytes of one process; the original release evaluates the records as
our run_pretraining.py does; a MediaWiki dump's articles reach the text shards sentence by
sentence, nothing of its other pages and markup does, and a dump cut short stops the run or, with
--skip_bad_documents, keeps its pages before the cut."""

import bz2
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import corpus_data
from tests import helpers
from tests import wiki_dump_data
from tests.test_original_compat import run_original
from tests.test_run_pretraining import read_dllog
from tests.test_run_pretraining_launchers import _mpirun
from utils.corpus import config as config_lib
from utils.corpus import manifest
from utils.corpus import runner
from utils.corpus import stages
from utils.data import packed_records

pytestmark = pytest.mark.e2e

SCRIPT = os.path.join(helpers.REPO_ROOT, "prepare_corpus.py")


def small_flags(inputs, out, **overrides):
  """The command line of `corpus_data.make_config`'s settings (with `overrides` of flags)."""
  values = dict(output_dir=str(out), phases=",".join(
      "%d:%d" % phase for phase in corpus_data.PHASES), num_shards=corpus_data.NUM_SHARDS,
                eval_fraction=corpus_data.EVAL_FRACTION, vocab_size=corpus_data.VOCAB_SIZE,
                dupe_factor=2, num_workers=1, skip_bad_documents=True)
  values.update(overrides)
  args = ["--input=%s" % path for path in inputs]
  for name, value in values.items():
    if value is True or value is False:
      args.append("--%s%s" % ("" if value else "no", name))
    elif value is not None:
      args.append("--%s=%s" % (name, value))
  return args


def run_command(args, check=True, launcher=(), timeout=300):
  return helpers.run_python([SCRIPT] + args, check=check, launcher=launcher, timeout=timeout)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
  return corpus_data.write_inputs(str(tmp_path_factory.mktemp("inputs")))


@pytest.fixture(scope="module")
def reference(written, tmp_path_factory):
  """The library's build of the inputs in this process: (output directory, summary)."""
  out = tmp_path_factory.mktemp("reference")
  summary = runner.run(corpus_data.make_config(written["inputs"], out))
  return str(out), summary


def test_the_command_writes_the_librarys_output_and_packs_it(written, reference, tmp_path):
  out = tmp_path / "out"
  proc = run_command(small_flags(written["inputs"], out, pack=True, num_workers=2))
  expected = corpus_data.output_files(reference[0])
  got = corpus_data.output_files(out)
  assert {k: v for k, v in got.items() if "_packed" not in k} == expected
  # The last line: the library's summary of the same corpus, then this run's time and speed.
  counts = runner.summary_line(dict(reference[1], seconds=0, bytes_read=0,
                                    units_done_earlier=0)).rsplit("; ", 1)[0]
  assert proc.stdout.startswith(counts + "; ") and proc.stdout.count("\n") == 1
  assert proc.stdout.strip().endswith(" MB/s of input")
  assert "prepare_corpus: records: 12 units, 12 of this task" in proc.stderr
  for phase in corpus_data.PHASES:
    for split in ("train", "eval"):
      directory = os.path.join(str(out), config_lib.phase_name(phase) + "_packed", split)
      sequences = sum(packed_records.read_packed(os.path.join(directory, name))[
          "next_sentence_weights"].sum() for name in sorted(os.listdir(directory)))
      key = "%s %s" % (config_lib.phase_name(phase), split)
      assert sequences == reference[1]["records"][key] > 0, key


def test_a_bad_input_ends_with_exit_2_naming_the_file_and_position(written, tmp_path):
  proc = run_command(small_flags(written["inputs"], tmp_path / "out", skip_bad_documents=False),
                     check=False)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert proc.stderr.strip().splitlines()[-1] == (
      "prepare_corpus.py: error: %s: line 2 (byte 18): not UTF-8 text" % written["bad_file"])
  assert "--helpshort" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("flag, message", [
    ("--phases=128", "--phases: '128' is not LENGTH:PREDICTIONS"),
    ("--eval_fraction=1", r"--eval_fraction must be in \[0, 1\), got 1"),
    ("--masked_lm_prob=2", r"--masked_lm_prob must be in \(0, 1\], got 2.0"),
    ("--stage=bogus", "flag --stage=bogus: value should be one of"),
    ("--vocab_file=/nonexistent/vocab.txt", "--vocab_file: vocabulary file not found"),
    ("--input=/nonexistent/corpus.txt", "/nonexistent/corpus.txt: the input: no such file"),
    ("--output_dir=", "--output_dir is required"),
    ("stray_argument", "unexpected argument\\(s\\) stray_argument"),
])
def test_a_bad_flag_ends_with_exit_2_naming_it(written, tmp_path, flag, message):
  proc = run_command(small_flags(written["inputs"][1:2], tmp_path / "out") + [flag], check=False)
  assert proc.returncode == 2, proc.stderr[-3000:]
  last = [line for line in proc.stderr.splitlines() if line.strip()]
  assert any(re.search(message, line) for line in last[-2:]), proc.stderr[-2000:]


def _check_final_names(out, expected, checked):
  """Every file under a final name is whole: the manifest's entries parse, every other file holds
  the bytes of the uninterrupted run (a file removed while it is read is passed over).

  Args:
    out: the output directory.
    expected: {relative path: bytes} of the uninterrupted run.
    checked: set of (path, inode, size, mtime) already checked; updated.
  """
  for directory, _, names in os.walk(str(out)):
    for name in names:
      path = os.path.join(directory, name)
      if name.endswith(manifest.TEMP_SUFFIX):
        continue
      try:
        status = os.stat(path)
        key = (path, status.st_ino, status.st_size, status.st_mtime_ns)
        if key in checked:
          continue
        with open(path, "rb") as reader:
          data = reader.read()
      except FileNotFoundError:
        continue
      relative = os.path.relpath(path, str(out))
      if relative.startswith("manifest" + os.sep):
        json.loads(data.decode("utf-8"))
      else:
        assert data == expected.get(relative), "%s is not whole" % relative
      checked.add(key)


def _run_and_kill_during_the_records(args, out, expected, log):
  """Starts the command, watches its files, and kills it (SIGKILL) once two record units are
  done. Returns whether the kill ended it (not its own end)."""
  with open(log, "w") as stderr:
    proc = subprocess.Popen([sys.executable, SCRIPT] + args, cwd=helpers.REPO_ROOT,
                            stdout=subprocess.DEVNULL, stderr=stderr)
  records = os.path.join(str(out), "manifest", "records")
  checked = set()
  try:
    while proc.poll() is None:
      _check_final_names(out, expected, checked)
      done = [n for n in os.listdir(records) if n.endswith(".json")] if os.path.isdir(
          records) else []
      if len(done) >= 2:
        proc.send_signal(signal.SIGKILL)
        return proc.wait(timeout=60) == -signal.SIGKILL
      time.sleep(0.002)
    return False
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()


def test_a_run_killed_during_its_records_continues_where_it_stopped(written, tmp_path):
  settings = dict(num_shards=6, dupe_factor=4)
  reference = tmp_path / "reference"
  runner.run(corpus_data.make_config(written["inputs"], reference, **settings))
  expected = corpus_data.output_files(reference)
  for attempt in range(3):  # a loaded machine may let a run end before its kill
    out = tmp_path / ("out-%d" % attempt)
    args = small_flags(written["inputs"], out, **settings)
    if _run_and_kill_during_the_records(args, out, expected, str(tmp_path / "killed.log")):
      break
  else:
    pytest.fail("each of three runs ended before it could be killed during its records")
  done = {name: os.stat(os.path.join(str(out), "manifest", stage, name)).st_mtime_ns
          for stage in ("extract", "shard", "vocab", "records")
          for name in os.listdir(os.path.join(str(out), "manifest", stage))
          if manifest.read_entry(str(out), stage, name[:-len(".json")])["status"] == "done"}
  records_done = len([name for name in done if name.startswith("seq")])
  assert 2 <= records_done < 24
  proc = run_command(args)
  assert ("prepare_corpus: records: 24 units, 24 of this task (%d done earlier)" % records_done
          in proc.stderr), proc.stderr[-3000:]
  assert corpus_data.output_files(out) == expected
  for name, mtime in done.items():  # not done again
    stage = next(s for s in ("extract", "shard", "vocab", "records")
                 if os.path.exists(os.path.join(str(out), "manifest", s, name)))
    assert os.stat(os.path.join(str(out), "manifest", stage, name)).st_mtime_ns == mtime, name
  assert not [n for _, _, names in os.walk(str(out)) for n in names
              if n.endswith(manifest.TEMP_SUFFIX)]


def test_two_mpirun_ranks_write_the_bytes_of_one_process(written, reference, tmp_path):
  out = tmp_path / "out"
  proc = run_command(small_flags(written["inputs"], out, barrier_timeout_secs=300),
                     launcher=_mpirun(2), timeout=600)
  assert corpus_data.output_files(out) == corpus_data.output_files(reference[0])
  assert proc.stdout.count("prepare_corpus: 93 documents read") == 2, proc.stdout
  # Each rank did its share: the three inputs two and one, the vocabulary one and none.
  for share in ("extract: 3 units, 2 of this task", "extract: 3 units, 1 of this task",
                "vocab: 1 units, 1 of this task", "vocab: 1 units, 0 of this task"):
    assert share in proc.stderr, share


def test_the_original_release_evaluates_the_records_as_run_pretraining_does(reference,
                                                                            tmp_path):
  phase = corpus_data.PHASES[1]
  records = os.path.join(reference[0], config_lib.phase_name(phase), "train",
                         stages.shard_file(0, ".tfrecord"))
  data_dir = tmp_path / "eval"
  data_dir.mkdir()
  with open(records, "rb") as reader, open(str(data_dir / "shard.tfrecord"), "wb") as writer:
    writer.write(reader.read())
  config = helpers.tiny_config(vocab_size=corpus_data.VOCAB_SIZE, hidden_size=32,
                               num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=phase.max_seq_length)
  config_path = tmp_path / "bert_config.json"
  config_path.write_text(config.to_json_string())
  # The original's model code writes the checkpoint both evaluate: random weights.
  np.savez(tmp_path / "batch.npz", **helpers.random_batch(
      np.random.RandomState(3), 2, 16, config.vocab_size, 4))
  run_original(["model", "--config", str(config_path), "--batch", str(tmp_path / "batch.npz"),
                "--out", str(tmp_path), "--seed", "4"])
  common = ["--bert_config_file=%s" % config_path,
            "--init_checkpoint=%s" % (tmp_path / "bert_model.ckpt"),
            "--max_seq_length=%d" % phase.max_seq_length,
            "--max_predictions_per_seq=%d" % phase.max_predictions_per_seq, "--do_eval",
            "--eval_batch_size=4", "--max_eval_steps=5"]
  run_original(["run_pretraining", "--", "--input_file=%s" % (data_dir / "shard.tfrecord"),
                "--output_dir=%s" % (tmp_path / "original"), "--use_tpu=False"] + common)
  helpers.run_python([os.path.join(helpers.REPO_ROOT, "run_pretraining.py"),
                      "--eval_files_dir=%s" % data_dir,
                      "--output_dir=%s" % (tmp_path / "ours")] + common)
  original = helpers.read_eval_results(tmp_path / "original" / "eval_results.txt")
  ours = helpers.read_eval_results(tmp_path / "ours" / "eval_results.txt")
  for key in ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
              "next_sentence_loss", "loss"):
    np.testing.assert_allclose(ours[key], original[key], atol=1e-5, err_msg=key)
  assert original["masked_lm_loss"] > 1.0


# ---------------------------------------------------------------------------------------------
# A MediaWiki dump end to end (tests/wiki_dump_data.py), and a dump cut short.
# ---------------------------------------------------------------------------------------------

# What a reader sees of the dump's three articles, sentence by sentence, written by hand.
DUMP_ARTICLES = {
    "Paris": [
        "Paris is the capital and most populous city of France.",
        "Its population was 2,102,650 in 2023.",
        "The city is a centre of finance, diplomacy, commerce, culture, fashion and gastronomy.",
        "The Parisii, a sub-tribe of the Celtic Senones, inhabited the area around the 3rd "
        "century BC.",
        "By the end of the 12th century, Paris had become the political, economic, religious and "
        "cultural capital of France.",
    ],
    "Athens": [
        "Athens (Athína) is the capital and largest city of Greece.",
        "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
    ],
    "Tokyo": [
        "Tokyo (東京, Tōkyō), officially the Tokyo Metropolis (東京都, Tōkyō-to), is the capital of "
        "Japan.",
    ],
}
# Text of the dump that is not an article's prose: templates and their arguments, tables, refs,
# files and their captions, comments, headings, the sections from References on, categories,
# interlanguage links, markup, a redirect, a talk page, a user page, an old revision.
NOT_PROSE = [
    "Short description", "Capital of France", "Infobox", "Eiffel.jpg", "population_total", "IPA",
    "paʁi", "cite web", "INSEE", "Populations", "Eiffelturm", "thumb", "Eiffel Tower",
    "Champ de Mars", "hidden comment", "wikitable", "Year", "1801", "546,856", "History",
    "Middle Ages", "Notre-Dame", "Sainte-Chapelle", "Reflist", "cite book", "Prose under the",
    "External links", "Official website", "www.paris.fr", "Category", "Capitals in Europe",
    "de:Paris", "fr:Paris", "lang-el", "example.org", "REDIRECT", "redirect", "Should the lead",
    "~~~~", "I edit articles", "old text", "Census of Ruritania", "Villages of Ruritania", "[[",
    "]]", "{{", "}}", "''", "<ref", "&lt;", "&amp;", "&nbsp;", "|",
]
# Villages 0-11 in the cut dump's first bz2 stream, 12-19 in its second, which is cut short.
VILLAGES_KEPT, VILLAGES_CUT = range(0, 12), range(12, 20)


def _write_dumps(root):
  """The dump and a multistream dump of villages cut in its second stream, named as Wikipedia
  names the parts of a split and of a multistream dump; returns (the dump, the cut dump, the cut
  dump's size)."""
  dump = os.path.join(root, "enwiki-test-pages-articles1.xml-p000000010p000030302.bz2")
  with open(dump, "wb") as writer:
    writer.write(bz2.compress(wiki_dump_data.DUMP.encode("utf-8")))
  first = wiki_dump_data.DUMP_HEADER + "".join(map(wiki_dump_data.village_page, VILLAGES_KEPT))
  second = "".join(map(wiki_dump_data.village_page, VILLAGES_CUT)) + wiki_dump_data.DUMP_FOOTER
  data = wiki_dump_data.multistream([first, second])
  first_size = len(bz2.compress(first.encode("utf-8")))
  cut_size = first_size + (len(data) - first_size) // 2
  cut = os.path.join(root, "villages-pages-articles-multistream1.xml-p1p41242.bz2")
  with open(cut, "wb") as writer:
    writer.write(data[:cut_size])
  return dump, cut, cut_size


@pytest.fixture(scope="module")
def dump_run(tmp_path_factory):
  """The command on the dump and the cut dump, with --skip_bad_documents and without: dict
  out, proc, strict (the run without), dump, cut, cut_size."""
  root = tmp_path_factory.mktemp("dumps")
  dump, cut, cut_size = _write_dumps(str(root))
  out = root / "out"
  flags = dict(num_shards=2, eval_fraction=0.2, dupe_factor=1)
  proc = run_command(small_flags([dump, cut], out, **flags))
  strict = run_command(small_flags([dump, cut], root / "strict", skip_bad_documents=False,
                                   **flags), check=False)
  return dict(out=str(out), proc=proc, strict=strict, dump=dump, cut=cut, cut_size=cut_size)


def _text_documents(out):
  """The documents of every text shard (train and eval), as lists of sentences."""
  found = []
  for split in ("train", "eval"):
    directory = os.path.join(out, "text", split)
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
      found += corpus_data.read_text_documents(os.path.join(directory, name))
  return found


def test_a_dumps_articles_reach_the_text_shards_sentence_by_sentence(dump_run):
  documents = _text_documents(dump_run["out"])
  for title, sentences in DUMP_ARTICLES.items():
    assert sentences in documents, title
  for number in VILLAGES_KEPT:
    assert wiki_dump_data.village_sentences(number) in documents, number
  # Nothing else: the three articles (the redirects, the talk and user pages and the empty
  # article are not documents) and the villages before the cut.
  assert len(documents) == len(DUMP_ARTICLES) + len(VILLAGES_KEPT)
  summary = dump_run["proc"].stdout
  assert summary.startswith("prepare_corpus: 15 documents read (0.0 MB: %s as wikidump, %s as "
                            "wikidump)" % (os.path.basename(dump_run["dump"]),
                                           os.path.basename(dump_run["cut"]))), summary
  assert re.search(r"records: seq32 train [1-9]\d*, seq32 eval [1-9]\d*, seq64 train [1-9]\d*",
                   summary), summary


def test_no_text_of_talk_pages_redirects_templates_or_refs_reaches_the_output(dump_run):
  out = dump_run["out"]
  texts = {path: data.decode("utf-8") for path, data in corpus_data.output_files(out).items()
           if not path.endswith(".tfrecord")}
  assert any(path.startswith("extracted" + os.sep) for path in texts)
  assert any(path.startswith("text" + os.sep) for path in texts)
  for path, text in texts.items():
    found = [phrase for phrase in NOT_PROSE if phrase in text]
    assert not found, (path, found)
  # Nor the markup's words in the vocabulary trained on the text.
  with open(os.path.join(out, "vocab.txt"), encoding="utf-8") as reader:
    tokens = {line.strip().lstrip("#") for line in reader}
  assert not tokens & {"infobox", "reflist", "wikitable", "redirect", "insee", "category",
                       "cite", "thumb"}


def test_a_cut_dump_keeps_its_pages_before_the_cut_and_counts_the_rest_skipped(dump_run):
  out, proc = dump_run["out"], dump_run["proc"]
  texts = "".join(data.decode("utf-8") for path, data in corpus_data.output_files(out).items()
                  if path.startswith("text" + os.sep))
  for number in VILLAGES_CUT:
    assert "Village %d " % number not in texts
  assert ", 0 duplicates dropped, 1 bad documents skipped; 2 shards of " in proc.stdout
  position = "after page 12 'Village 11' (byte %d of the compressed file)" % dump_run["cut_size"]
  assert ("skipped a bad document: %s: %s: the bz2 stream ends early" % (
      dump_run["cut"], position)) in proc.stderr
  # Each dump is small enough for one extract unit, share 0 of 1.
  entries = [manifest.read_entry(out, "extract", stages.input_id(path) + "-00000")
             for path in (dump_run["dump"], dump_run["cut"])]
  assert [(e["counts"]["documents"], e["counts"]["bad_documents"]) for e in entries] == [
      (3, 0), (12, 1)]


def test_without_skip_bad_documents_a_cut_dump_stops_the_run_with_exit_2(dump_run):
  strict = dump_run["strict"]
  assert strict.returncode == 2, strict.stderr[-3000:]
  assert strict.stderr.strip().splitlines()[-1] == (
      "prepare_corpus.py: error: %s: after page 12 'Village 11' (byte %d of the compressed "
      "file): the bz2 stream ends early" % (dump_run["cut"], dump_run["cut_size"]))
  assert strict.stdout == ""


def test_run_pretraining_trains_phase_1_then_phase_2_on_the_dumps_records(dump_run, tmp_path):
  out = dump_run["out"]
  with open(os.path.join(out, "vocab.txt"), encoding="utf-8") as reader:
    vocab_size = sum(1 for _ in reader)
  config = helpers.write_bert_config(tmp_path / "bert_config.json", vocab_size=vocab_size)
  runs = {}
  for phase, steps, init in ((corpus_data.PHASES[0], 3, None), (corpus_data.PHASES[1], 2, 3)):
    name = config_lib.phase_name(phase)
    run_dir = tmp_path / name
    flags = dict(bert_config_file=config, input_files_dir=os.path.join(out, name, "train"),
                 eval_files_dir=os.path.join(out, name, "eval"), output_dir=run_dir,
                 max_seq_length=phase.max_seq_length,
                 max_predictions_per_seq=phase.max_predictions_per_seq, train_batch_size=4,
                 eval_batch_size=2, max_eval_steps=1, learning_rate=1e-3, num_warmup_steps=1,
                 num_train_steps=steps, display_loss_steps=1,
                 init_checkpoint=(tmp_path / "seq32" / ("model.ckpt-%d" % init)
                                  if init else None))
    args = ["--do_train", "--do_eval"] + ["--%s=%s" % (key, value)
                                           for key, value in flags.items() if value is not None]
    helpers.run_python([os.path.join(helpers.REPO_ROOT, "run_pretraining.py")] + args)
    steps_logged = [line for line in read_dllog(run_dir / "bert_dllog.json") if line["step"]]
    runs[name] = (steps_logged, helpers.read_eval_results(run_dir / "eval_results.txt"))
  phase1, phase2 = runs["seq32"], runs["seq64"]
  assert [line["step"] for line in phase1[0]] == [1, 2, 3]
  assert [line["step"] for line in phase2[0]] == [1, 2]
  # A freshly initialised model's first masked-LM loss is near ln(vocabulary size); phase 2
  # starts from phase 1's weights and its records are read as theirs (a finite loss).
  assert abs(phase1[0][0]["data"]["mlm_loss"] - np.log(vocab_size)) < 1.0
  for steps, evaluation in (phase1, phase2):
    assert all(np.isfinite(line["data"]["total_loss"]) for line in steps)
    assert np.isfinite(evaluation["masked_lm_loss"]) and evaluation["masked_lm_loss"] > 0
