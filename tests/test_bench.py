"""The benchmark helpers: the MFU FLOP formula, the allreduce traffic count, the suite's CPU account,
the benchmarks' imports (without a cycle), the raw-corpus bench's synthetic dump, NVIDIA's text
steps and its quick run, the end-of-job timing.

(Speed itself is measured by bench/, never asserted in tests.)
"""

import ast
import glob
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import modeling
from bench import flops
from bench import job_end
from bench import packing
from bench import nvidia_wiki_route
from bench import precision
from bench import prepare_corpus_speed
from bench import scaling
from bench import sentence_split
from bench import suite_cpu
from bench import synthetic_wiki
from bench import throughput
from tests import helpers
from utils.corpus import sentences
from utils.corpus import wikidump
from utils.corpus import wikitext


def test_flops_formula_by_hand_for_bert_base():
  # BERT-base: H 768, L 12, I 3072, V 30522, T 128, P 20.
  h, l, i, v, t, p = 768, 12, 3072, 30522, 128, 20
  per_layer = 4 * (h * h + h) + 2 * (2 * h) + (h * i + i) + (i * h + h)
  assert per_layer == 7087872
  expected = (6 * 12 * per_layer * t + 12 * l * h * t * t + 6 * p * h * v
              + 6 * (p * h * h + h * h))
  assert flops.model_flops_per_sequence(h, l, i, v, t, p) == expected
  config = modeling.BertConfig.from_json_file("bert_configs/base.json")
  assert flops.config_flops_per_sequence(config, t, p) == expected
  assert abs(expected / 1e9 - 70.021) < 0.001
  # 100% of a 226 GFLOP/s peak is 226e9 / expected sequences per second.
  assert abs(flops.mfu(226e9 / expected, expected, 226e9) - 1.0) < 1e-12


def test_flops_command_line(capsys):
  with pytest.raises(SystemExit) as exit_info:
    flops.main(["--help"])
  assert exit_info.value.code == 0 and "--config" in capsys.readouterr().out
  assert flops.main(["--config", "base", "--seq", "128", "--predictions", "20"]) == 0
  # 70.021 GFLOP: the by-hand figure of test_flops_formula_by_hand_for_bert_base.
  assert capsys.readouterr().out.startswith("base: 70.021 GFLOP per sequence")


def bench_imports():
  """{bench module: the bench modules it imports}, function-level imports included (read with
  `ast`; every benchmark writes `from bench import X`)."""
  graph = {}
  for path in glob.glob(os.path.join(helpers.REPO_ROOT, "bench", "*.py")):
    with open(path) as f:
      tree = ast.parse(f.read(), path)
    graph[os.path.basename(path)[:-3]] = {
        alias.name for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "bench" for alias in node.names}
  return graph


def test_bench_modules_import_each_other_without_a_cycle():
  graph = bench_imports()
  assert "flops" in graph["throughput"] and "flops" in graph["step_bench"]
  # Depth-first: a module met again while its own imports are being walked closes a cycle.
  done, walking = set(), []

  def walk(module):
    assert module not in walking, "import cycle: %s" % " -> ".join(walking + [module])
    if module in done:
      return
    walking.append(module)
    for imported in sorted(graph.get(module, ())):
      walk(imported)
    walking.pop()
    done.add(module)

  for module in sorted(graph):
    walk(module)


def test_allreduce_traffic_counts_every_gradient_per_update():
  config = modeling.BertConfig.from_json_file("bert_configs/tiny.json")
  num_tensors = 5 + 16 * config.num_hidden_layers + 2 + 4 + 1 + 2  # embeddings, layers, pooler, cls
  params = sum(np.prod(shape) for shape in [
      [30522, 128], [2, 128], [512, 128], [128], [128], [128, 128], [128],
      [128, 128], [128], [128], [128], [30522], [2, 128], [2]])
  params += config.num_hidden_layers * (4 * (128 * 128 + 128) + 4 * 128 + 2 * 128 * 512 + 512 + 128)
  for accumulation, post, times in ((1, False, 1), (4, False, 4), (4, True, 1)):
    calls, num_bytes = scaling.allreduce_traffic(config, 16, 4, 2, accumulation, post)
    assert calls == num_tensors * times
    assert num_bytes == params * 4 * times


def test_throughput_bf16_options_and_hardware_note():
  assert throughput.precision_name(throughput.parse_args(["--bf16"])) == "bf16"
  assert throughput.precision_name(
      throughput.parse_args(["--onednn_bf16_rewrite"])) == "bf16-onednn-rewrite"
  assert throughput.precision_name(throughput.parse_args([])) == "fp32"
  with pytest.raises(SystemExit):
    throughput.parse_args(["--bf16", "--manual_fp16"])
  assert "no bf16 units" in throughput.bf16_hardware_note([])
  assert "not bf16's speed" in throughput.bf16_hardware_note([])
  assert "has bf16 units (amx_bf16)" in throughput.bf16_hardware_note(["amx_bf16"])
  assert "unknown" in throughput.bf16_hardware_note(None)


def test_summarise_median_min_max():
  assert throughput.summarise([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
  assert throughput.summarise([4.0, 1.0, 2.0, 3.0]) == (2.5, 1.0, 4.0)


def test_scaling_host_list_sets_workers_and_launcher():
  assert scaling.num_workers("hostA:1,hostB:1") == 2
  assert scaling.num_workers("localhost:2") == 2
  assert scaling.num_workers("a:2,b:2,c:4") == 8
  for bad in ("hostA", "hostA:0", "hostA:1,", "a:x"):
    try:
      scaling.num_workers(bad)
    except ValueError as e:
      assert repr(bad.split(",")[-1]) in str(e)
    else:
      raise AssertionError("accepted %r" % bad)
  command = scaling.horovodrun_command("hostA:1,hostB:1", "cl0")
  assert command[1:] == ["-np", "2", "-H", "hostA:1,hostB:1", "--gloo", "--disable-cache",
                         "--network-interface", "cl0"]
  assert "--network-interface" not in scaling.horovodrun_command("localhost:2")


ORIGINAL_LOG = """INFO:tensorflow:Saving checkpoints for 0 into /out/model.ckpt.
I1125 18:08:09.771528 1396 basic_session_run_hooks.py:632] Saving checkpoints for 0 into /out
INFO:tensorflow:global_step/sec: 2.5
I1125 18:08:10.824156 1396 tpu_estimator.py:2391] global_step/sec: 2.5
INFO:tensorflow:examples/sec: 20.0
I1125 18:08:10.824300 1396 tpu_estimator.py:2392] examples/sec: 20.0
I1125 18:08:11.324156 1396 tpu_estimator.py:2391] global_step/sec: 0.5
I1125 18:08:13.324156 1396 tpu_estimator.py:2391] global_step/sec: 1.25e-1
I1125 18:08:13.524156 1396 estimator.py:361] Loss for final step: 11.067584.""".splitlines()


def test_precision_reads_the_originals_per_update_lines_by_hand():
  # One rate per update (the stamped copies only), x batch 8: 2.5 -> 20, 0.5 -> 4, 0.125 -> 1.
  rates, end = precision.original_updates(ORIGINAL_LOG, 8, 2026)
  assert rates == [20.0, 4.0, 1.0]
  # Its first update ends at the first stamped rate line: 18:08:10.824156 of that day.
  assert end == time.mktime((2026, 11, 25, 18, 8, 10, 0, 0, -1)) + 0.824156
  assert precision.original_updates(ORIGINAL_LOG[:2], 8, 2026) == ([], None)


def test_precision_job_figures_median_after_warmup(tmp_path):
  args = precision.parse_args(["--batch", "8", "--steps", "4", "--warmup", "1"])
  start = time.mktime((2026, 11, 25, 18, 8, 0, 0, 0, -1))
  # The original: updates at 20, 4, 1 seq/s; after 1 warm-up update the median of 4 and 1.
  seq_per_s, startup = precision.job_figures("original", args, start, ORIGINAL_LOG, None)
  assert seq_per_s == 2.5 and abs(startup - 10.824156) < 1e-6
  # Ours: the run log's per-update throughput; start-up to its first update's timestamp.
  lines = ['DLLL {"timestamp": "%.3f", "type": "LOG", "step": "PARAMETER", "data": {}}' % start]
  for step, rate in enumerate([3.0, 9.0, 5.0, 7.0], 1):
    lines.append('DLLL {"timestamp": "%.3f", "type": "LOG", "step": %d, "data": '
                 '{"throughput_train": %s}}' % (start + 12 + step, step, rate))
  (tmp_path / "bert_dllog.json").write_text("\n".join(lines) + "\n")
  seq_per_s, startup = precision.job_figures("bf16", args, start, [], str(tmp_path))
  assert seq_per_s == 7.0 and abs(startup - 13.0) < 1e-3
  # Too few updates logged to leave the warm-up out: an error naming the variant.
  short = precision.parse_args(["--steps", "6", "--warmup", "4"])
  with pytest.raises(SystemExit, match="fp32: 4 per-update figures logged"):
    precision.job_figures("fp32", short, start, [], str(tmp_path))


def test_precision_jobs_differ_only_in_what_the_variant_names():
  args = precision.parse_args(["--batch", "8", "--variants", "original,fp32,bf16,bf16+rewrite"])
  commands = {v: precision.job_command(v, args, "c.json", "/data", "/out", 14)
              for v in args.variants}
  original, env = commands["original"]
  assert original[1:5] == ["-m", "tests.reference.original_bert", "run_pretraining", "--"]
  assert "--input_file=/data/part-*.tfrecord" in original and env == {}
  fp32, env = commands["fp32"]
  assert fp32[1].endswith("run_pretraining.py") and env == {}
  for flag in ("--num_train_steps=14", "--train_batch_size=8", "--bert_config_file=c.json"):
    assert flag in original and flag in fp32
  assert commands["bf16"][0] == fp32 + ["--bf16"] and commands["bf16"][1] == {}
  assert commands["bf16+rewrite"] == (fp32 + ["--bf16"], {"ONEDNN_BF16_REWRITE": "1"})
  assert "--display_loss_steps=1" in fp32
  for bad in (["--variants", "fp32,fp64"], ["--steps", "5", "--warmup", "5"]):
    with pytest.raises(SystemExit):
      precision.parse_args(bad)


def test_packing_figures_are_medians_after_the_warmup(monkeypatch):
  lines = [{"step": step, "data": {"throughput_train": rate, "rows_per_sec": rate / 2}}
           for step, rate in ((1, 1.0), (2, 100.0), (3, 30.0), (4, 10.0), (5, 20.0))]
  monkeypatch.setattr(throughput, "run_training", lambda *args: (lines, 0.0, 0))
  args = packing.parse_args(["--seq=128", "--warmup=2"])
  # Updates 3, 4, 5: medians 20 sequences/s and 10 rows/s.
  assert packing.run_figures(args, "config", "data", "work") == (20.0, 10.0)


def test_packing_rounds_alternate_and_the_ratio_is_of_the_medians(monkeypatch, tmp_path, capsys):
  monkeypatch.setattr(packing, "unpacked_records", lambda seq: "unpacked-dir")
  monkeypatch.setattr(packing, "packed_records", lambda seq, unpacked: (
      "packed-dir", "packed 30 sequences into 20 packs of 128 tokens: padding 20.0% -> 1.0%"))
  monkeypatch.setattr(flops, "config_file", lambda name: name)
  order = []
  figures = {"unpacked-dir": iter([(10.0, 10.0), (14.0, 14.0), (12.0, 12.0)]),
             "packed-dir": iter([(20.0, 11.0), (18.0, 10.0), (30.0, 12.0)])}

  def fake_figures(args, config_path, data_dir, work_dir):
    order.append(data_dir)
    return next(figures[data_dir])

  monkeypatch.setattr(packing, "run_figures", fake_figures)
  assert packing.main(["--rounds=3", "--work_dir=%s" % tmp_path]) == 0
  assert order == ["unpacked-dir", "packed-dir", "packed-dir", "unpacked-dir", "unpacked-dir",
                   "packed-dir"]
  result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert result["unpacked_sequences_per_sec"] == 12.0
  assert result["packed_sequences_per_sec"] == 20.0
  assert result["speedup_sequences_per_sec"] == pytest.approx(20.0 / 12.0)
  assert result["packed_rows_per_sec"] == 11.0
  # Over the data: 11 rows/s x 1.5 sequences per row against 12 sequences/s.
  assert result["speedup_over_the_data"] == pytest.approx(11.0 * 1.5 / 12.0)


def test_suite_cpu_summary_adds_up_by_program_module_and_test():
  records = [
      {"test": "tests/test_a.py::test_one", "program": "run_pretraining.py", "cpu": 8.0},
      {"test": "tests/test_a.py::test_one", "program": "run_pretraining.py", "cpu": 7.0},
      {"test": "tests/test_a.py::test_two", "program": "horovodrun", "cpu": 1.5},
      {"test": "tests/test_b.py::test_three[x]", "program": "run_squad.py", "cpu": 9.0},
      {"test": "", "program": "__main__.py", "cpu": 4.0},
  ]
  summary = suite_cpu.summarize(records, top=3)
  assert summary["recorded"] == 29.5
  assert summary["programs"] == [("run_pretraining.py", 2, 15.0), ("run_squad.py", 1, 9.0),
                                 ("__main__.py", 1, 4.0), ("horovodrun", 1, 1.5)]
  assert summary["modules"] == [("tests/test_a.py", 16.5), ("tests/test_b.py", 9.0),
                                ("(the pytest processes: in-process tests and collection)", 4.0)]
  assert summary["tests"] == [("tests/test_a.py::test_one", 2, 15.0),
                              ("tests/test_b.py::test_three[x]", 1, 9.0),
                              ("(the pytest processes: in-process tests and collection)", 1, 4.0)]


@pytest.mark.e2e
def test_suite_cpu_records_the_processes_a_test_starts():
  proc = subprocess.run(
      [sys.executable, "bench/suite_cpu.py", "--workers", "0", "--",
       "tests/test_training_flags.py", "-k", "help"],
      capture_output=True, text=True, cwd=helpers.REPO_ROOT, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  out = proc.stdout
  assert out.startswith("pytest exit 0; 3 passed")
  # The three --helpshort runs of run_pretraining.py, run_squad.py and run_classifier.py, each a
  # Python process that started TensorFlow's flags (at least a few tenths of a CPU second), plus
  # pytest's own process.
  programs = {line.split()[2]: (int(line.split()[1]), float(line.split()[0]))
              for line in out.split("CPU s  processes  program\n")[1].split("\n\n")[0].splitlines()}
  for script in ("run_pretraining.py", "run_squad.py", "run_classifier.py"):
    assert programs[script][0] == 1 and programs[script][1] > 0, (script, out)
  modules = out.split("CPU s  module\n")[1].split("\n\n")[0]
  assert "tests/test_training_flags.py" in modules
  tests = out.split("CPU s  processes  test\n")[1]
  assert sum("test_help_shows_the_scripts_defaults_and_the_shared_flags[" in line
             for line in tests.splitlines()) == 3


def test_sentence_split_scores_boundaries_by_hand():
  truth = ["Dr. Ames left.", "He came back at 4 p.m.", "It rained."]
  # A boundary added after "Dr." and one missed after "p.m.": of the 2 true inner boundaries
  # (after 12 and 29 non-space characters) 1 is found, of the 2 predicted (3, 12) 1 is true, and
  # no sentence comes out exactly.
  predicted = ["Dr.", "Ames left.", "He came back at 4 p.m. It rained."]
  counts = sentence_split.score_paragraph(truth, predicted)
  assert counts == {"exact": 0, "true_bounds": 2, "predicted_bounds": 2, "shared_bounds": 1,
                    "kept": 1}
  assert sentence_split.score_paragraph(truth, truth)["exact"] == 3
  # Spaces do not count; a lost character does.
  assert sentence_split.score_paragraph(truth, ["Dr. Ames  left.He came back at 4 p.m.",
                                                "It rained."])["shared_bounds"] == 1
  assert sentence_split.score_paragraph(truth, ["Dr. Ames left."])["kept"] == 0
  figures, errors = sentence_split.accuracy(lambda text: predicted, [truth])
  assert (figures["exact"], figures["wrong"], figures["precision"], figures["recall"]) == (
      0, 3, 0.5, 0.5)
  assert errors[0] == ("Dr. Ames left.", ["Dr.", "Ames left."])


def test_sentence_split_quick_run_reports_every_candidate(monkeypatch, capsys):
  with pytest.raises(SystemExit) as exit_info:
    sentence_split.main(["--help"])
  assert exit_info.value.code == 0 and "--quick" in capsys.readouterr().out

  def missing():
    raise ImportError("No module named 'absent_segmenter'")

  monkeypatch.setattr(sentence_split, "CANDIDATES",
                      sentence_split.CANDIDATES + (("absent", "absent_segmenter", missing),))
  assert sentence_split.main(["--quick"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith("CPU: ")
  rows = {line.split()[0]: line for line in lines[2:-1]}
  assert set(rows) == {"pysbd", "syntok", "blingfire", "naive", "sentences.py", "absent"}
  assert rows["absent"].split()[1:] == ["not", "installed"]
  results = json.loads(lines[-1])["results"]
  sample_sentences = sum(len(p) for p in sentence_split.read_labelled(sentence_split.SAMPLE))
  for name in ("pysbd", "syntok", "blingfire", "naive regex", "sentences.py"):
    assert results[name]["sentences"] == sample_sentences
    assert results[name]["kept"] == results[name]["paragraphs"]
    assert set(results[name]["mb_per_s"]) == {"sample", "5kB"}
  # The project's splitter is reported by the package under it; SEGMENTER adds its repairs.
  assert sentences.SEGMENTER.startswith(results["sentences.py"]["version"] + ", repairs ")


def test_synthetic_dump_is_a_readable_export_of_marked_up_articles(tmp_path):
  path = str(tmp_path / "dump.xml")
  counts = synthetic_wiki.write_dump(path, 60_000, synthetic_wiki.sample_model(), seed=3)
  assert counts["bytes"] == os.path.getsize(path) >= 60_000
  pages = list(wikidump.iter_pages(path))
  articles = list(wikidump.iter_articles(path))
  assert (len(pages), len(articles)) == (counts["pages"], counts["articles"])
  assert {page.namespace for page in pages} > {0} and any(page.redirect for page in pages)
  with open(path, encoding="utf-8") as reader:
    xml = reader.read()
  for markup in ("{{Infobox", "&lt;ref name=", "{{cite ", "{| class=", "[[Category:", "== ",
                 "* [[", "[[File:"):
    assert markup in xml, markup
  # Every article has prose once its markup is removed; the seed alone decides the bytes.
  assert all(wikitext.article_paragraphs(article.text) for article in articles)
  again = str(tmp_path / "again.xml")
  synthetic_wiki.write_dump(again, 60_000, synthetic_wiki.sample_model(), seed=3)
  with open(again, encoding="utf-8") as reader:
    assert reader.read() == xml


def test_nvidia_text_steps_by_hand(tmp_path):
  extracted = tmp_path / "extracted" / "AA"
  extracted.mkdir(parents=True)
  (extracted / "wiki_00").write_text(
      '<doc id="1" url="u" title="Alpha">\nAlpha\n\nAlpha is first. It leads.\n'
      "Second line.\n</doc>\n"
      '<doc id="2" url="u" title="Beta">\nBeta\n\nBeta is second.\n</doc>\n')
  formatted = str(tmp_path / "formatted.txt")
  assert nvidia_wiki_route.format_articles(str(tmp_path / "extracted"), formatted) == 2
  with open(formatted) as reader:
    assert reader.read() == "Alpha is first. It leads. Second line.\n\nBeta is second.\n\n"
  articles = nvidia_wiki_route.read_articles(formatted)
  # Article 1 (3 sentences) fills shard 0, so article 2 goes to shard 1, the smaller.
  counts = nvidia_wiki_route.split_and_shard(articles, lambda text: text.split(". "),
                                             str(tmp_path / "shards"), 2)
  assert counts == dict(articles=2, sentences=4, shards=2)
  with open(str(tmp_path / "shards" / "shard-00001.txt")) as reader:
    assert reader.read() == "Beta is second.\n\n"
  split = nvidia_wiki_route.punkt_tokenizer(" ".join(articles * 20))
  assert split("Alpha is first. It leads.") == ["Alpha is first.", "It leads."]


def test_original_generator_runs_on_every_workers_th_shard_with_the_phase_flags():
  shards = ["s0", "s1", "s2", "s3", "s4"]
  commands = prepare_corpus_speed.original_commands(shards, "v.txt", "out",
                                                    prepare_corpus_speed.PHASES[1], 2)
  assert [c[:5] for c in commands] == [[sys.executable, "-m", "tests.reference.original_bert",
                                        "create_pretraining_data", "--"]] * 2
  assert [c[5] for c in commands] == ["--input_file=s0,s2,s4", "--input_file=s1,s3"]
  for flag in ("--max_seq_length=512", "--max_predictions_per_seq=80", "--dupe_factor=5",
               "--vocab_file=v.txt"):
    assert all(flag in command for command in commands)
  log = ("INFO:tensorflow:Wrote 22511 total instances\n"
         "I1128 11:27:58.234133 1 create_pretraining_data.py:162] Wrote 22511 total instances\n")
  assert prepare_corpus_speed.original_instances([log, log.replace("22511", "7")]) == 22518
  # Ours: the same generator flags, one stage a process, each phase's records on their own.
  ours = dict(prepare_corpus_speed.our_commands(
      prepare_corpus_speed.parse_args([]), "d.xml", "o", 2, 8))
  assert list(ours) == list(prepare_corpus_speed.OUR_STAGES)
  assert "--phases=512:80" in ours["records seq512"] and "--stage=records" in ours["records seq512"]
  assert all("--dupe_factor=5" in command for command in ours.values())


@pytest.mark.e2e
def test_prepare_corpus_speed_quick_run_reports_every_stage(tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_info:
    prepare_corpus_speed.main(["--help"])
  assert exit_info.value.code == 0 and "--dump_mb" in capsys.readouterr().out
  assert prepare_corpus_speed.main(["--quick", "--work_dir=%s" % tmp_path]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].startswith("CPU: ") and "load average" in lines[0]
  report = json.loads(lines[-1])
  nvidia_steps = {"wikiextractor", "format", "split", "overall"}
  for workers in ("1", "2"):
    routes = report["runs"][workers]
    assert set(routes["ours"]) == set(prepare_corpus_speed.OUR_STAGES) | {"overall"}
    assert set(routes["nvidia"]) == nvidia_steps
    for result in list(routes["ours"].values()) + list(routes["nvidia"].values()):
      assert result["mb_per_s"] > 0 and result["peak_rss_mb"] > 0, result
    assert routes["ours"]["records seq128"]["instances"] > 0
    assert [row[0] for row in report["compared"][workers]] == ["text: XML -> sentence shards"]
  assert set(report["memory"]) == {"0.1", "0.2"}
  for stages in report["memory"].values():
    assert set(stages) == set(prepare_corpus_speed.OUR_STAGES)
    assert all(tree >= largest > 0 for tree, largest in stages.values())


@pytest.mark.e2e
def test_job_end_times_from_the_summary_line_to_the_exit(tmp_path):
  # A job that logs the summary line, then takes 0.6 s more to exit.
  script = ("import time, sys; print('update 3 of 3'); print('%s (sequences/s) = 1.0', "
            "flush=True); time.sleep(0.6)" % job_end.SUMMARY_LINE)
  end, wall = job_end.timed_job([sys.executable, "-c", script], str(tmp_path),
                                str(tmp_path / "job.log"))
  assert 0.6 <= end <= wall
  assert end < 0.6 + 0.5  # polled every 0.05 s, a start-up of Python's at most before it
  with pytest.raises(SystemExit, match="logged no summary.*no_summary.log"):
    job_end.timed_job([sys.executable, "-c", "print('update 3 of 3')"], str(tmp_path),
                      str(tmp_path / "no_summary.log"))
  with pytest.raises(SystemExit, match=r"failed \(exit 3\)"):
    job_end.timed_job([sys.executable, "-c", "print('%s'); raise SystemExit(3)"
                       % job_end.SUMMARY_LINE], str(tmp_path), str(tmp_path / "failed.log"))


def test_job_end_summary_by_hand_and_its_flags(tmp_path, capsys):
  figures = job_end.summary([0.4, 31.09, 0.5, 12.0], [57.0, 88.2, 60.0, 70.0], 2.0)
  assert figures == {"end_seconds": [0.4, 31.09, 0.5, 12.0], "end_median_s": 6.25,
                     "end_max_s": 31.09, "ends_over_slow": 2, "wall_median_s": 65.0}
  with pytest.raises(SystemExit):
    job_end.parse_args(["--before", "a", "--after", "b", "--rounds", "0"])
  assert "--updates and --rounds must be >= 1, got 200 and 0" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    job_end.parse_args(["--before", "a", "--after", "b",
                        "--input_files_dir", str(tmp_path / "gone")])
  assert "gone is not a directory" in capsys.readouterr().err
