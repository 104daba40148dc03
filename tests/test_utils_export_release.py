"""utils/export_release.py, the command line `python -m utils.export_release`, through its `main`
in process: a release bundle and a transformers directory (and back) from a checkpoint written
here, the casing warning, and the usage errors: every bad flag combination and bad input ends with
status 2 and one line naming the flag or file, and writes nothing; an --output_dir that cannot be
a directory is refused so by the command itself too, before any work. The end-to-end runs of the
command that export (and transformers loading its output) are tests/test_checkpoints*.py's."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import modeling
from utils import export_release
from utils.checkpoints import contents
from utils.checkpoints import release
from tests import helpers
from tests import numpy_bert
from utils.core import errors

_tf1 = tf.compat.v1
CONFIG = dict(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=16, max_position_embeddings=16, type_vocab_size=2)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PROGRAM_ERROR = "export_release: error: "


def _write_vocab(path, tokens):
  path.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
  """A run directory with two training checkpoints of CONFIG's model (weights, Adam moments,
  global step), its bert_config.json and an uncased vocabulary of vocab_size tokens."""
  root = tmp_path_factory.mktemp("source")
  run = root / "run"
  run.mkdir()
  shapes = release.model_weight_shapes(modeling.BertConfig.from_dict(CONFIG))
  rng = np.random.RandomState(0)
  prefixes, weights = [], None
  for step in (1, 4):
    weights = {name: rng.normal(0, 0.1, shape).astype(np.float32)
               for name, shape in shapes.items()}
    tensors = dict(weights, global_step=np.int64(step))
    for name, shape in shapes.items():
      tensors[name + "/adam_m"] = rng.normal(size=shape).astype(np.float32)
      tensors[name + "/adam_v"] = rng.uniform(size=shape).astype(np.float32)
    prefixes.append(str(run / ("model.ckpt-%d" % step)))
    contents.write_checkpoint(prefixes[-1], tensors)
  _tf1.train.update_checkpoint_state(str(run), prefixes[-1], all_model_checkpoint_paths=prefixes)
  config = root / "bert_config.json"
  config.write_text(json.dumps(CONFIG))
  vocab = _write_vocab(root / "vocab.txt",
                       SPECIALS + ["w%d" % i for i in range(CONFIG["vocab_size"] - 5)])
  return {"root": root, "run": str(run), "prefix": prefixes[-1], "weights": weights,
          "config": str(config), "vocab": vocab}


def _read_all(prefix):
  return contents.read_tensors(prefix, contents.checkpoint_shapes(prefix))


def _files_bytes(prefix):
  return sum(os.path.getsize(prefix + suffix) for suffix in (".index", ".data-00000-of-00001"))


def _tree(directory):
  """{entry: sorted entries of it, or None for a file} of `directory`."""
  return {name: sorted(os.listdir(directory / name)) if (directory / name).is_dir() else None
          for name in os.listdir(directory)}


def _assert_usage_error(status, captured, *fragments):
  """Status 2, one line on stderr naming the problem (no traceback), nothing on stdout."""
  assert status == errors.USAGE_EXIT_CODE, captured.err
  lines = captured.err.splitlines()
  assert len(lines) == 1, captured.err
  assert lines[0].startswith(PROGRAM_ERROR), captured.err
  for fragment in fragments:
    assert fragment in lines[0], (fragment, lines[0])
  assert captured.out == ""


def test_release_export_of_a_run_directory_writes_the_newest_weights_only(source, tmp_path,
                                                                          capsys):
  out = tmp_path / "bundle"
  status = export_release.main(["--checkpoint=%s" % source["run"],
                                "--bert_config_file=%s" % source["config"],
                                "--vocab_file=%s" % source["vocab"], "--output_dir=%s" % out])
  captured = capsys.readouterr()
  assert status == 0 and captured.err == ""
  bundle = str(out / "bert_model.ckpt")
  assert sorted(os.listdir(out)) == ["bert_config.json", "bert_model.ckpt.data-00000-of-00001",
                                     "bert_model.ckpt.index", "vocab.txt"]
  written = _read_all(bundle)
  assert sorted(written) == sorted(source["weights"])  # no moments, no global_step
  for name, value in source["weights"].items():
    assert written[name].dtype == np.float32 and written[name].tobytes() == value.tobytes(), name
  assert (out / "vocab.txt").read_text() == open(source["vocab"]).read()
  assert modeling.BertConfig.from_json_file(str(out / "bert_config.json")).to_dict() == (
      modeling.BertConfig.from_dict(CONFIG).to_dict())
  # stdout: what was exported from where, and the sizes before and after (in kB here).
  lines = captured.out.splitlines()
  assert lines[0] == "exported %d weights of %s to %s" % (len(source["weights"]),
                                                            source["prefix"], bundle)
  before, after = _files_bytes(source["prefix"]), _files_bytes(bundle)
  assert 2.5 < before / after < 3.5  # two moments per weight dropped
  sizes = re.fullmatch(r"size: ([\d.]+) kB -> ([\d.]+) kB \(([\d.]+)%\)", lines[1])
  assert sizes, lines
  np.testing.assert_allclose(float(sizes.group(1)), before / 1e3, rtol=5e-3)
  np.testing.assert_allclose(float(sizes.group(2)), after / 1e3, rtol=5e-3)
  np.testing.assert_allclose(float(sizes.group(3)), 100.0 * after / before, atol=0.05)
  assert len(lines) == 2


@pytest.mark.parametrize("case", [
    "from_huggingface with checkpoint", "from_huggingface with config", "no checkpoint",
    "no config", "neither", "huggingface without vocab"])
def test_bad_flag_combinations_exit_2_with_one_line_and_write_nothing(source, tmp_path, capsys,
                                                                      case):
  checkpoint = "--checkpoint=%s" % source["prefix"]
  config = "--bert_config_file=%s" % source["config"]
  from_hf = "--from_huggingface=%s" % source["root"]
  required = ("--checkpoint and --bert_config_file are required", "--from_huggingface")
  argv, fragments = {
      "from_huggingface with checkpoint": (
          [from_hf, checkpoint], ("--from_huggingface takes no --checkpoint or "
                                  "--bert_config_file",)),
      "from_huggingface with config": (
          [from_hf, config], ("--from_huggingface takes no --checkpoint or "
                              "--bert_config_file",)),
      "no checkpoint": ([config], required),
      "no config": ([checkpoint], required),
      "neither": (["--vocab_file=%s" % source["vocab"]], required),
      "huggingface without vocab": ([checkpoint, config, "--format=huggingface"],
                                    ("--format=huggingface needs --vocab_file",)),
  }[case]
  status = export_release.main(argv + ["--output_dir=%s" % (tmp_path / "out")])
  _assert_usage_error(status, capsys.readouterr(), *fragments)
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv,fragment", [
    ([], "the following arguments are required: --output_dir"),
    (["--format=onnx"], "argument --format: invalid choice: 'onnx'"),
    (["--do_lower_case=maybe"], "argument --do_lower_case: expected true or false, got 'maybe'"),
    (["--step=3"], "unrecognized arguments: --step=3"),
    # No abbreviations: --vocab is not taken for --vocab_file (as absl's flags, the release's).
    (["--vocab=v.txt"], "unrecognized arguments: --vocab=v.txt")])
def test_flags_argparse_refuses_exit_2_naming_the_flag(source, tmp_path, capsys, argv, fragment):
  if argv:
    argv = argv + ["--output_dir=%s" % (tmp_path / "out")]
  argv = ["--checkpoint=%s" % source["prefix"], "--bert_config_file=%s" % source["config"]] + argv
  with pytest.raises(SystemExit) as exited:
    export_release.main(argv)
  assert exited.value.code == errors.USAGE_EXIT_CODE
  captured = capsys.readouterr()
  # argparse's usage line, then its one error line.
  last = captured.err.splitlines()[-1]
  assert last.startswith("python -m utils.export_release: error: " + fragment), captured.err
  assert captured.err.startswith("usage: python -m utils.export_release ")
  assert captured.out == "" and os.listdir(tmp_path) == []


@pytest.mark.parametrize("problem", [
    "missing checkpoint", "run directory without checkpoint", "missing config", "config not JSON",
    "vocab of another size", "bundle exists", "huggingface into a non-empty directory",
    "saved_model into a non-empty directory"])
def test_bad_input_exits_2_with_one_line_naming_the_file_and_writes_nothing(source, tmp_path,
                                                                             capsys, problem):
  checkpoint, config, vocab = source["prefix"], source["config"], None
  out = tmp_path / "out"
  extra = []
  if problem == "missing checkpoint":
    checkpoint = str(tmp_path / "model.ckpt-9")
    fragments = ("%s is not a checkpoint: %s.index does not exist" % (checkpoint, checkpoint),)
  elif problem == "run directory without checkpoint":
    checkpoint = str(tmp_path)
    fragments = ("%s holds no checkpoint" % checkpoint,)
  elif problem == "missing config":
    config = str(tmp_path / "nowhere.json")
    fragments = ("bert config file not found: %s" % config,)
  elif problem == "config not JSON":
    config = str(tmp_path / "broken.json")
    (tmp_path / "broken.json").write_text("{\"vocab_size\": 30,")
    fragments = ("%s: not valid JSON" % config,)
  elif problem == "vocab of another size":
    vocab = _write_vocab(tmp_path / "short.txt", SPECIALS + ["x"] * 20)
    fragments = ("--vocab_file=%s has 25 tokens but vocab_size is 30 in %s" % (vocab, config),)
  elif problem == "bundle exists":
    out.mkdir()
    (out / "bert_model.ckpt.index").write_bytes(b"theirs")
    fragments = ("%s already exists" % (out / "bert_model.ckpt"), "--output_dir")
  else:
    out.mkdir()
    (out / "theirs.txt").write_text("kept")
    extra = ["--format=%s" % problem.split()[0], "--vocab_file=%s" % source["vocab"]]
    fragments = ("--output_dir=%s exists and is not empty" % out,)
  before = _tree(tmp_path)
  argv = ["--checkpoint=%s" % checkpoint, "--bert_config_file=%s" % config,
          "--output_dir=%s" % out] + extra
  if vocab:
    argv.append("--vocab_file=%s" % vocab)
  status = export_release.main(argv)
  _assert_usage_error(status, capsys.readouterr(), *fragments)
  assert _tree(tmp_path) == before
  if out.exists():
    assert [p.read_bytes() for p in out.iterdir()] in ([b"theirs"], [b"kept"])


def test_another_models_config_is_refused_naming_the_checkpoint_and_the_config(source, tmp_path,
                                                                               capsys):
  wide = tmp_path / "wide.json"
  wide.write_text(json.dumps(dict(CONFIG, hidden_size=12, num_attention_heads=3)))
  out = tmp_path / "out"
  status = export_release.main(["--checkpoint=%s" % source["prefix"],
                                "--bert_config_file=%s" % wide, "--output_dir=%s" % out])
  captured = capsys.readouterr()
  assert status == errors.USAGE_EXIT_CODE and captured.out == ""
  lines = captured.err.splitlines()
  # The first line names both files; the differing variables follow, one per line.
  assert lines[0].startswith(PROGRAM_ERROR + "%s does not match the model of "
                             "--bert_config_file=%s (" % (source["prefix"], wide)), lines
  assert "  bert/embeddings/word_embeddings: checkpoint [30, 8], model [30, 12]" in lines
  assert "Traceback" not in captured.err
  assert os.listdir(tmp_path) == ["wide.json"]


def test_huggingface_export_and_import_round_trip_bit_exactly_in_process(source, tmp_path,
                                                                         capsys):
  hf_dir = tmp_path / "hf"
  assert export_release.main(["--format=huggingface", "--checkpoint=%s" % source["prefix"],
                              "--bert_config_file=%s" % source["config"],
                              "--vocab_file=%s" % source["vocab"],
                              "--output_dir=%s" % hf_dir]) == 0
  captured = capsys.readouterr()
  assert captured.err == ""  # an uncased vocabulary: no casing warning
  num_weights = len(source["weights"])
  assert captured.out == (
      "exported %d tensors of %s to %s (transformers BertForPreTraining, do_lower_case=True)\n"
      % (num_weights, source["prefix"], hf_dir))
  assert sorted(os.listdir(hf_dir)) == ["config.json", "model.safetensors",
                                        "special_tokens_map.json", "tokenizer_config.json",
                                        "vocab.txt"]
  hf_config = json.loads((hf_dir / "config.json").read_text())
  assert hf_config["architectures"] == ["BertForPreTraining"]
  assert {key: hf_config[key] for key in CONFIG} == CONFIG
  assert json.loads((hf_dir / "tokenizer_config.json").read_text())["do_lower_case"] is True

  bundle = tmp_path / "bundle"
  assert export_release.main(["--from_huggingface=%s" % hf_dir,
                              "--output_dir=%s" % bundle]) == 0
  captured = capsys.readouterr()
  assert captured.err == ""
  assert captured.out.splitlines()[-1] == (
      "imported %d weights of %s to %s (tokenizer do_lower_case=True)"
      % (num_weights, hf_dir / "model.safetensors", bundle / "bert_model.ckpt"))
  imported = _read_all(str(bundle / "bert_model.ckpt"))
  assert sorted(imported) == sorted(source["weights"])
  for name, value in source["weights"].items():
    assert imported[name].dtype == np.float32 and imported[name].tobytes() == value.tobytes()
  assert (bundle / "vocab.txt").read_text() == open(source["vocab"]).read()
  assert sorted(os.listdir(tmp_path)) == ["bundle", "hf"]  # nothing partial left


def test_a_cased_vocabulary_exported_lower_cased_is_warned_about_once(source, tmp_path, capsys):
  upper = ["Hello", "WORLD", "iPhone", "Zed"]
  vocab = _write_vocab(tmp_path / "cased.txt",
                       SPECIALS + upper + ["w%d" % i for i in range(CONFIG["vocab_size"] - 9)])
  common = ["--format=huggingface", "--checkpoint=%s" % source["prefix"],
            "--bert_config_file=%s" % source["config"], "--vocab_file=%s" % vocab]
  assert export_release.main(common + ["--output_dir=%s" % (tmp_path / "lower")]) == 0
  err = capsys.readouterr().err.splitlines()
  assert err == [
      "export_release: warning: %s has 4 tokens with upper-case letters (Hello, WORLD, iPhone, "
      "...) but the tokenizer was written with do_lower_case=true, so it never produces them; "
      "for a cased model export again with --do_lower_case=false" % vocab]
  # A warning, not a refusal: written as asked.
  lower = json.loads((tmp_path / "lower" / "tokenizer_config.json").read_text())
  assert lower["do_lower_case"] is True
  for spelling in ("false", "no", "0"):
    out = tmp_path / ("cased_" + spelling)
    assert export_release.main(common + ["--output_dir=%s" % out,
                                         "--do_lower_case=%s" % spelling]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "do_lower_case=False" in captured.out
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is False


def test_saved_model_export_serves_the_encoder_of_the_checkpoint(source, tmp_path, capsys):
  out = tmp_path / "encoder"
  assert export_release.main(["--format=saved_model", "--checkpoint=%s" % source["prefix"],
                              "--bert_config_file=%s" % source["config"],
                              "--output_dir=%s" % out]) == 0
  captured = capsys.readouterr()
  assert captured.err == ""
  assert captured.out.startswith("exported the encoder of %s to %s (SavedModel, serving_default: "
                                 % (source["prefix"], out))
  batch = helpers.random_batch(np.random.RandomState(3), 2, 7, CONFIG["vocab_size"], 2)
  with tf.Graph().as_default(), _tf1.Session() as session:
    meta = _tf1.saved_model.loader.load(session, ["serve"], str(out))
    signature = meta.signature_def["serving_default"]
    feeds = {signature.inputs[name].name: batch[name]
             for name in ("input_ids", "input_mask", "segment_ids")}
    served = session.run({name: signature.outputs[name].name
                          for name in ("sequence_output", "pooled_output")}, feeds)
  _, layers, pooled = numpy_bert.encoder(
      source["weights"], CONFIG["num_hidden_layers"], CONFIG["num_attention_heads"],
      batch["input_ids"], batch["input_mask"], batch["segment_ids"])
  np.testing.assert_allclose(served["sequence_output"], layers[-1], atol=1e-5)
  np.testing.assert_allclose(served["pooled_output"], pooled, atol=1e-5)
  assert sorted(os.listdir(tmp_path)) == ["encoder"]  # nothing partial left


def _hf_directory(path, vocab_tokens=CONFIG["vocab_size"], **config_overrides):
  """A transformers BERT directory without weights: config.json and vocab.txt."""
  path.mkdir()
  config = dict(CONFIG, model_type="bert", architectures=["BertForPreTraining"],
                hidden_act="gelu_new", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                initializer_range=0.02)
  config.update(config_overrides)
  (path / "config.json").write_text(json.dumps(config))
  _write_vocab(path / "vocab.txt", ["t%d" % i for i in range(vocab_tokens)])
  return path


@pytest.mark.parametrize("problem", [
    "not a directory", "no config.json", "config.json not JSON", "roberta", "no weights",
    "vocabulary of another size", "output not empty"])
def test_bad_huggingface_directory_exits_2_naming_the_file_and_writes_nothing(tmp_path, capsys,
                                                                              problem):
  hf_dir = tmp_path / "hf"
  out = tmp_path / "out"
  if problem == "not a directory":
    hf_dir.write_text("a file")
    fragments = ("--from_huggingface=%s is not a directory" % hf_dir,)
  elif problem == "no config.json":
    hf_dir.mkdir()
    fragments = ("%s does not exist: not a transformers model directory"
                 % (hf_dir / "config.json"),)
  elif problem == "config.json not JSON":
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text("{\"model_type\": ")
    fragments = ("%s is not valid JSON" % (hf_dir / "config.json"),)
  elif problem == "roberta":
    _hf_directory(hf_dir, model_type="roberta", architectures=["RobertaForMaskedLM"])
    fragments = ("%s: model_type is 'roberta' (RobertaForMaskedLM), not 'bert'"
                 % (hf_dir / "config.json"),)
  elif problem == "no weights":
    _hf_directory(hf_dir)
    fragments = ("%s holds neither model.safetensors nor pytorch_model.bin" % hf_dir,)
  elif problem == "vocabulary of another size":
    _hf_directory(hf_dir, vocab_tokens=CONFIG["vocab_size"] + 2)
    fragments = ("%s has 32 tokens but vocab_size is 30 in config.json" % (hf_dir / "vocab.txt"),)
  else:
    _hf_directory(hf_dir)
    out.mkdir()
    (out / "theirs.txt").write_text("kept")
    fragments = ("--output_dir=%s exists and is not empty" % out,)
  before = sorted(os.listdir(tmp_path))
  status = export_release.main(["--from_huggingface=%s" % hf_dir, "--output_dir=%s" % out])
  _assert_usage_error(status, capsys.readouterr(), *fragments)
  assert sorted(os.listdir(tmp_path)) == before
  if out.exists():
    assert os.listdir(out) == ["theirs.txt"]


def test_verbose_adds_the_traceback_before_the_error_line(source, tmp_path, capsys):
  argv = ["--checkpoint=%s" % (tmp_path / "missing" / "model.ckpt-1"),
          "--bert_config_file=%s" % source["config"], "--output_dir=%s" % (tmp_path / "out")]
  assert export_release.main(argv) == errors.USAGE_EXIT_CODE
  quiet = capsys.readouterr().err
  assert "Traceback" not in quiet
  assert export_release.main(argv + ["--verbose"]) == errors.USAGE_EXIT_CODE
  verbose = capsys.readouterr().err
  assert verbose.startswith("Traceback (most recent call last)")
  assert verbose.splitlines()[-1] == quiet.strip()


@pytest.fixture(scope="module")
def hf_export(source, tmp_path_factory):
  """A transformers directory of `source`'s checkpoint (the input of --from_huggingface)."""
  hf_dir = tmp_path_factory.mktemp("hf_export") / "hf"
  assert export_release.main(["--format=huggingface", "--checkpoint=%s" % source["prefix"],
                              "--bert_config_file=%s" % source["config"],
                              "--vocab_file=%s" % source["vocab"],
                              "--output_dir=%s" % hf_dir]) == 0
  return str(hf_dir)


def _inputs_of(mode, source, hf_export):
  """Input flags that export (or import) successfully in `mode`: a format or from_huggingface."""
  if mode == "from_huggingface":
    return ["--from_huggingface=%s" % hf_export]
  return ["--format=%s" % mode, "--checkpoint=%s" % source["prefix"],
          "--bert_config_file=%s" % source["config"], "--vocab_file=%s" % source["vocab"]]


def _unusable_output_dir(tmp_path, where):
  """(--output_dir, the regular file that keeps it from being a directory) under `tmp_path`."""
  regular = tmp_path / "results"
  regular.write_text("the user's file")
  return (regular / "sub" if where == "under a file" else regular), regular


@pytest.mark.parametrize("where", ["under a file", "a file"])
@pytest.mark.parametrize("mode", ["release", "huggingface", "saved_model", "from_huggingface"])
def test_an_output_dir_that_cannot_be_a_directory_is_refused_naming_the_file(
    source, hf_export, tmp_path, capsys, mode, where):
  out, regular = _unusable_output_dir(tmp_path, where)
  status = export_release.main(_inputs_of(mode, source, hf_export) + ["--output_dir=%s" % out])
  _assert_usage_error(status, capsys.readouterr(), "--output_dir=%s: %s is a regular file, not a "
                      "directory" % (out, regular))
  assert os.listdir(tmp_path) == ["results"] and regular.read_text() == "the user's file"


def test_the_output_dir_is_checked_before_the_checkpoint_is_read(source, tmp_path, capsys):
  out, regular = _unusable_output_dir(tmp_path, "under a file")
  status = export_release.main(["--checkpoint=%s" % (tmp_path / "model.ckpt-9"),
                                "--bert_config_file=%s" % source["config"],
                                "--output_dir=%s" % out])
  # The missing checkpoint would be named had it been looked at first.
  _assert_usage_error(status, capsys.readouterr(), "--output_dir=%s: %s is a regular file"
                      % (out, regular))


@pytest.mark.e2e
@pytest.mark.parametrize("mode,where", [("from_huggingface", "under a file"),
                                        ("release", "a file")])
def test_the_command_refuses_an_unusable_output_dir_with_one_line(source, hf_export, tmp_path,
                                                                  mode, where):
  out, regular = _unusable_output_dir(tmp_path, where)
  proc = helpers.run_python(["-m", "utils.export_release", "--output_dir=%s" % out]
                            + _inputs_of(mode, source, hf_export), check=False, timeout=120)
  assert proc.returncode == errors.USAGE_EXIT_CODE, proc.stderr[-3000:]
  assert proc.stderr.splitlines() == [
      PROGRAM_ERROR + "--output_dir=%s: %s is a regular file, not a directory" % (out, regular)]
  assert proc.stdout == ""
  assert os.listdir(tmp_path) == ["results"] and regular.read_text() == "the user's file"
