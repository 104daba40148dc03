"""The quality corpus of bench/quality.py: the English prose of documentation Debian ships (Sphinx
sources, HTML pages, POD), built once into pretraining records, held-out records and a fine-tuning
task.

  $PY bench/quality_corpus.py            # builds (or finds) the corpus, prints its figures
  $PY bench/quality_corpus.py --quick    # the small corpus of bench/data/quality_corpus

  corpus = quality_corpus.build()        # from Python: a `QualityCorpus`

Sources (SOURCES): documentation Debian ships, installed with apt-get when missing (root only;
otherwise an error names the packages and the command): the Sphinx sources of Python 3.11, Linux
6.1, LLVM 15 and CMake (reST, `quality_corpus_rest`: docutils; no code, tables, literal blocks,
comments, directive options or targets), the HTML pages of PostgreSQL 15, Django, SQLAlchemy and
Git (`quality_corpus_html`: the stdlib's html.parser; no code, tables, headings or navigation),
and Perl's POD, its manual and its modules' (`quality_corpus_pod`: perl's Pod::Simple). One
document per source file: its English prose paragraphs, the kernel's translations left out. A
document's class is its source and top folder (`linux/networking`).

Then, in this order:
1. the task's documents are set aside (`quality_corpus_task`): per class, documents until its
   dev and training paragraphs are found; they never reach pretraining;
2. `prepare_corpus.py` on the other documents (the `directory` format, a file a document):
   a vocabulary trained on them, seq 128 records (20 predictions) of the training split, one copy
   with fixed 15% masks (`--dupe_factor=1`; with `dynamic_masking`, `--dynamic_masking`: no
   masks), and of the held-out split (`--eval_fraction`: whole documents, by a hash of their
   text) with fixed masks.

The corpus is cached in CACHE_ROOT/quality-corpus-<key> (`cache_dir`), the key a hash of the
packages' versions, the settings and this code; it is built in a temporary folder beside it and
renamed when complete, so a folder under the final name is always whole (its corpus.json last);
the next call returns it as it is. Quick mode (`--quick`, the test suite's) reads copies of a few
of the packages' files (bench/data/quality_corpus, README.md there) with the same code.
"""

import argparse
import collections
import dataclasses
import fcntl
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

from bench import quality_corpus_task  # noqa: E402



@dataclasses.dataclass(frozen=True)
class Source:
  """A documentation package's files: `prefix` names its documents and classes, `packages` install
  them (their versions key the cache), `root` holds them, `markup` says how they are read: "rest"
  (Sphinx sources, `quality_corpus_rest`), "html" (`quality_corpus_html`) or "pod" (Perl's,
  `quality_corpus_pod`)."""
  prefix: str
  packages: tuple
  root: str
  markup: str


SOURCES = (
    Source("python", ("python3.11-doc",), "/usr/share/doc/python3.11/html/_sources", "rest"),
    Source("linux", ("linux-doc-6.1",), "/usr/share/doc/linux-doc-6.1/html/_sources", "rest"),
    # The two above give 20.3 MB of prose; the others bring it past 40 MB.
    Source("llvm", ("llvm-15-doc",), "/usr/share/doc/llvm-15-doc/html/_sources", "rest"),
    Source("cmake", ("cmake-doc",), "/usr/share/doc/cmake-data/html/_sources", "rest"),
    Source("postgres", ("postgresql-doc-15",), "/usr/share/doc/postgresql-doc-15/html", "html"),
    Source("django", ("python-django-doc",), "/usr/share/doc/python-django-doc/html", "html"),
    Source("sqlalchemy", ("python-sqlalchemy-doc",), "/usr/share/doc/python-sqlalchemy-doc/html",
           "html"),
    Source("git", ("git-doc",), "/usr/share/doc/git-doc", "html"),
    # perl-doc's manual (pod/) and the documentation of the modules perl ships (perl depends on
    # perl-modules-5.36).
    Source("perl", ("perl-doc", "perl-modules-5.36"), "/usr/share/perl/5.36", "pod"),
)
PACKAGES = tuple(package for source in SOURCES for package in source.packages)
QUICK_DATA = os.path.join(REPO_ROOT, "bench", "data", "quality_corpus")
INSTALL_COMMAND = "apt-get install -y --no-install-recommends " + " ".join(PACKAGES)
MAX_SEQ_LENGTH = 128
MAX_PREDICTIONS = 20
# The kernel's translations, whatever folder holds them (zh_CN, it_IT, ...).
_LANGUAGE_FOLDER = re.compile(r"^[a-z]{2}_[A-Z]{2}$")
# The pages of an HTML folder that are generated indexes, not text.
_INDEX_PAGES = frozenset(["genindex.html", "py-modindex.html", "search.html", "bookindex.html"])
_SUMMARY = re.compile(r"records: seq%d train (\d+), seq%d eval (\d+)" % (MAX_SEQ_LENGTH,
                                                                        MAX_SEQ_LENGTH))
TASK_CLASSES = ("linux/admin-guide", "linux/driver-api", "linux/filesystems", "linux/networking",
                "linux/process", "linux/userspace-api", "python/library", "python/reference")
PREPARE_TIMEOUT_SECONDS = 3600


@dataclasses.dataclass(frozen=True)
class Settings:
  """What the corpus is built with (all of it in the cache key)."""
  quick: bool = False
  vocab_size: int = 8192
  eval_fraction: float = 0.06
  min_eval_sequences: int = 2000
  num_shards: int = 16
  dynamic_masking: bool = False
  task: quality_corpus_task.TaskSettings = quality_corpus_task.TaskSettings(
      TASK_CLASSES, train_per_class=250, dev_per_class=75)


QUICK_SETTINGS = Settings(
    quick=True, vocab_size=1024, eval_fraction=0.25, min_eval_sequences=20, num_shards=2,
    task=quality_corpus_task.TaskSettings(TASK_CLASSES, train_per_class=6, dev_per_class=3))


@dataclasses.dataclass(frozen=True)
class QualityCorpus:
  """A built corpus: its files (absolute paths) and figures."""
  directory: str
  text_bytes: int  # the prose of every document, UTF-8 (task documents included)
  pretrain_text_bytes: int
  text_bytes_per_source: dict  # {source prefix: its share of text_bytes}
  documents: int
  pretrain_documents: int  # given to prepare_corpus.py (it holds some out: eval_documents)
  task_documents: int
  eval_documents: int
  vocab_file: str
  train_record_dir: str
  eval_record_dir: str
  train_sequences: int
  eval_sequences: int
  task_dir: str
  task_train_examples: int
  task_dev_examples: int
  task_examples_per_class: dict
  package_versions: dict
  build_seconds: float

  def figures(self):
    """The corpus's figures as one line of text."""
    return ("quality corpus: %.1f MB of prose in %d documents (%s; by source, MB: %s); "
            "pretraining %.1f MB in %d "
            "documents, %d of them held out; seq %d sequences: %d train, %d held out; task: %d "
            "train and %d dev paragraphs of %d documents, per class %s; built in %.0f s"
            % (self.text_bytes / 1e6, self.documents,
               ", ".join("%s %s" % kv for kv in sorted(self.package_versions.items())),
               ", ".join("%s %.2f" % (source, size / 1e6)
                         for source, size in sorted(self.text_bytes_per_source.items())),
               self.pretrain_text_bytes / 1e6, self.pretrain_documents, self.eval_documents,
               MAX_SEQ_LENGTH, self.train_sequences, self.eval_sequences,
               self.task_train_examples, self.task_dev_examples, self.task_documents,
               json.dumps(self.task_examples_per_class, sort_keys=True), self.build_seconds))


class SourcesMissing(RuntimeError):
  """The documentation packages are not installed and cannot be installed here."""


def package_versions(quick):
  """{package: its installed Debian version} (quick: the copies' versions, from their README)."""
  if quick:
    with open(os.path.join(QUICK_DATA, "VERSIONS"), encoding="utf-8") as f:
      return dict(line.split() for line in f if line.strip())
  versions = {}
  for package in PACKAGES:
    result = subprocess.run(["dpkg-query", "-W", "-f=${Status} ${Version}", package],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    words = result.stdout.split()
    if result.returncode == 0 and words[:3] == ["install", "ok", "installed"]:
      versions[package] = words[3]
  return versions


def ensure_packages(run=subprocess.run, is_root=None):
  """Installs the missing documentation packages with apt-get (as root); returns their versions.

  Raises:
    SourcesMissing: not root or no apt-get, or the installation failed: names the packages and
      the command.
  """
  versions = package_versions(quick=False)
  missing = [p for p in PACKAGES if p not in versions]
  if not missing:
    return versions
  is_root = os.geteuid() == 0 if is_root is None else is_root
  if not is_root or shutil.which("apt-get") is None:
    raise SourcesMissing("the quality corpus reads the Debian packages %s, not installed (%s); "
                         "install them as root: %s" % (", ".join(PACKAGES), ", ".join(missing),
                                                       INSTALL_COMMAND))
  env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
  for argv in (["apt-get", "update", "-qq"], INSTALL_COMMAND.split() + ["-qq"]):
    if run(argv, env=env).returncode != 0:
      raise SourcesMissing("%s failed: the quality corpus needs the Debian packages %s"
                           % (" ".join(argv), ", ".join(PACKAGES)))
  versions = package_versions(quick=False)
  missing = [p for p in PACKAGES if p not in versions]
  if missing:
    raise SourcesMissing("%s ran but %s still not installed" % (INSTALL_COMMAND,
                                                                ", ".join(missing)))
  return versions


def source_roots(quick):
  """[(class prefix, folder, markup)] of the sources read."""
  if quick:
    return [(source.prefix, os.path.join(QUICK_DATA, source.prefix), source.markup)
            for source in SOURCES]
  return [(source.prefix, source.root, source.markup) for source in SOURCES]


def is_translation(relative_path):
  """Whether a source file (path relative to its package's folder) is a translation."""
  parts = relative_path.split("/")[:-1]
  return "translations" in parts or any(_LANGUAGE_FOLDER.match(p) for p in parts)


def document_stem(relative_path, markup):
  """A source file's name in its document's name (None: the file is not read): a reST source
  without `.rst.txt` / `.txt` (Markdown `.md.txt` not read), a page without `.html` (generated
  indexes and `_static`-like folders not read), a POD file whole (`Foo.pm` and `Foo.pod` may both
  be there)."""
  name = relative_path.rsplit("/", 1)[-1]
  if markup == "rest":
    if not name.endswith(".txt") or name.endswith(".md.txt"):
      return None
    return re.sub(r"(\.rst)?\.txt$", "", relative_path)
  if markup == "html":
    if (not name.endswith(".html") or name in _INDEX_PAGES
        or any(part.startswith("_") for part in relative_path.split("/")[:-1])):
      return None
    return relative_path[:-len(".html")]
  if markup == "pod":
    return relative_path if name.endswith((".pod", ".pm")) else None
  raise ValueError("unknown markup %r" % markup)


def source_files(roots):
  """[(document name, class, path, markup)] of every English source file under `roots` (from
  `source_roots`), sorted; the name is "<prefix>/<document_stem>", the class "<prefix>/<top
  folder>"."""
  found = []
  for prefix, root, markup in roots:
    for folder, subfolders, files in os.walk(root):
      subfolders.sort()
      for name in sorted(files):
        relative = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
        stem = document_stem(relative, markup)
        if stem is None or is_translation(relative):
          continue
        top = relative.split("/")[0] if "/" in relative else "."
        found.append(("%s/%s" % (prefix, stem), "%s/%s" % (prefix, top),
                      os.path.join(folder, name), markup))
  return sorted(found)


def _read_document(entry):
  """(name, class, prose paragraphs) of one source file; runs in a worker process."""
  # pylint: disable=g-import-not-at-top
  from bench import quality_corpus_html
  from bench import quality_corpus_pod
  from bench import quality_corpus_rest
  name, label, path, markup = entry
  if markup == "pod":
    return name, label, quality_corpus_pod.prose_paragraphs(path)
  with open(path, encoding="utf-8", errors="replace") as f:
    text = f.read()
  if markup == "html":
    return name, label, quality_corpus_html.prose_paragraphs(text)
  return name, label, quality_corpus_rest.prose_paragraphs(text, path)


def read_documents(files, workers):
  """{name: (class, paragraphs)} of the files of `source_files` with prose (`workers`
  processes)."""
  # Fresh processes: the caller may hold threads (TensorFlow's) that a fork would copy badly.
  with multiprocessing.get_context("spawn").Pool(workers) as pool:
    return {name: (label, paragraphs)
            for name, label, paragraphs in pool.imap(_read_document, files, chunksize=4)
            if paragraphs}


def document_text(paragraphs):
  """A document file's text: its paragraphs, a blank line between two."""
  return "\n\n".join(paragraphs) + "\n"


def write_documents(folder, documents, names):
  """Writes each named document as folder/<name>.txt. Returns {source prefix: bytes written}."""
  written = collections.Counter()
  for name in sorted(names):
    path = os.path.join(folder, name + ".txt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = document_text(documents[name][1]).encode("utf-8")
    with open(path, "wb") as f:
      f.write(text)
    written[name.split("/", 1)[0]] += len(text)
  return written


def prepare_command(settings, input_dir, output_dir, workers):
  """prepare_corpus.py's argv for the pretraining documents."""
  argv = [sys.executable, os.path.join(REPO_ROOT, "prepare_corpus.py"),
          "--input=%s" % input_dir, "--input_format=directory", "--output_dir=%s" % output_dir,
          "--phases=%d:%d" % (MAX_SEQ_LENGTH, MAX_PREDICTIONS), "--dupe_factor=1",
          "--vocab_size=%d" % settings.vocab_size, "--eval_fraction=%g" % settings.eval_fraction,
          "--num_shards=%d" % settings.num_shards, "--num_workers=%d" % workers]
  if settings.dynamic_masking:
    argv.append("--dynamic_masking")
  return argv


def run_prepare(argv):
  """Runs prepare_corpus.py; returns (train sequences, held-out sequences, held-out documents)
  from its summary line. Raises RuntimeError with its output when it fails."""
  result = subprocess.run(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=PREPARE_TIMEOUT_SECONDS)
  match = _SUMMARY.search(result.stdout)
  held_out = re.search(r"training and (\d+) held-out documents", result.stdout)
  if result.returncode != 0 or not match or not held_out:
    raise RuntimeError("%s failed (exit %d):\n%s" % (" ".join(argv), result.returncode,
                                                     result.stdout[-4000:]))
  return int(match.group(1)), int(match.group(2)), int(held_out.group(1))


def cache_root():
  """Where corpora are cached: $BERT_QUALITY_CORPUS_ROOT, else the virtualenv's folder
  ($XDG_CACHE_HOME or ~/.cache, then bert-tf1-pretraining), as scripts/env.sh."""
  return os.environ.get("BERT_QUALITY_CORPUS_ROOT") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "bert-tf1-pretraining")


def cache_key(settings, versions):
  """16 hex digits of the settings, the packages' versions and this code (the corpus modules)."""
  digest = hashlib.sha256(json.dumps([dataclasses.asdict(settings), versions],
                                     sort_keys=True).encode("utf-8"))
  bench_dir = os.path.dirname(os.path.abspath(__file__))
  for module in ("quality_corpus.py", "quality_corpus_rest.py", "quality_corpus_html.py",
                 "quality_corpus_pod.py", "quality_corpus_task.py"):
    with open(os.path.join(bench_dir, module), "rb") as f:
      digest.update(f.read())
  return digest.hexdigest()[:16]


def cache_dir(settings, versions, root=None):
  """The folder of the corpus of `settings` and `versions`."""
  return os.path.join(root or cache_root(), "quality-corpus-%s%s" % (
      "quick-" if settings.quick else "", cache_key(settings, versions)))


def _load(directory):
  """The `QualityCorpus` of a complete folder, None when its corpus.json is missing."""
  path = os.path.join(directory, "corpus.json")
  if not os.path.isfile(path):
    return None
  with open(path, encoding="utf-8") as f:
    fields = json.load(f)
  for key in ("vocab_file", "train_record_dir", "eval_record_dir", "task_dir"):
    fields[key] = os.path.join(directory, fields[key])
  return QualityCorpus(directory=directory, **fields)


def _build_into(work, settings, versions, workers, log):
  """Builds the corpus in the folder `work`; returns its corpus.json fields (paths relative)."""
  start = time.time()
  documents = read_documents(source_files(source_roots(settings.quick)), workers)
  log("%d documents read in %.0f s" % (len(documents), time.time() - start))
  task_names, train, dev = quality_corpus_task.choose(documents, settings.task)
  per_class = quality_corpus_task.write(os.path.join(work, "task"), settings.task, train, dev)
  pretrain = sorted(set(documents) - task_names)
  pretrain_bytes = write_documents(os.path.join(work, "documents", "pretrain"), documents,
                                   pretrain)
  task_bytes = write_documents(os.path.join(work, "documents", "task"), documents, task_names)
  train_sequences, eval_sequences, eval_documents = run_prepare(prepare_command(
      settings, os.path.join(work, "documents", "pretrain"), os.path.join(work, "records"),
      workers))
  if eval_sequences < settings.min_eval_sequences:
    raise RuntimeError("the held-out split has %d sequences, fewer than %d: raise "
                       "eval_fraction (%g)" % (eval_sequences, settings.min_eval_sequences,
                                               settings.eval_fraction))
  seq = "seq%d" % MAX_SEQ_LENGTH
  per_source = pretrain_bytes + task_bytes
  return dict(text_bytes=sum(per_source.values()),
              pretrain_text_bytes=sum(pretrain_bytes.values()),
              text_bytes_per_source=dict(sorted(per_source.items())),
              documents=len(documents), pretrain_documents=len(pretrain),
              task_documents=len(task_names), eval_documents=eval_documents,
              vocab_file="records/vocab.txt", train_record_dir="records/%s/train" % seq,
              eval_record_dir="records/%s/eval" % seq, train_sequences=train_sequences,
              eval_sequences=eval_sequences, task_dir="task", task_train_examples=len(train),
              task_dev_examples=len(dev), task_examples_per_class=per_class,
              package_versions=versions, build_seconds=round(time.time() - start, 1))


def build(settings=Settings(), root=None, workers=None, log=None):
  """The corpus of `settings`: found in the cache, or built there (packages installed first).

  Args:
    settings: `Settings` (QUICK_SETTINGS: the small corpus).
    root: the cache's folder (default `cache_root()`).
    workers: processes reading the sources and in prepare_corpus.py (default: all cores).
    log: function taking a line of progress (default: stderr).

  Returns:
    `QualityCorpus`.

  Raises:
    SourcesMissing: the packages are missing and cannot be installed.
    RuntimeError: prepare_corpus.py failed, or the held-out split is too small.
  """
  log = log or (lambda line: print("quality_corpus: " + line, file=sys.stderr, flush=True))
  versions = package_versions(True) if settings.quick else ensure_packages()
  directory = cache_dir(settings, versions, root)
  os.makedirs(os.path.dirname(directory), exist_ok=True)
  with open(directory + ".lock", "w") as lock:  # one builder at a time; the next one reuses it
    fcntl.flock(lock, fcntl.LOCK_EX)
    corpus = _load(directory)
    if corpus is not None:
      return corpus
    log("building %s" % directory)
    shutil.rmtree(directory, ignore_errors=True)  # a folder without corpus.json is not whole
    work = directory + ".partial"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    fields = _build_into(work, settings, versions, workers or os.cpu_count() or 1, log)
    with open(os.path.join(work, "corpus.json"), "w", encoding="utf-8") as f:
      json.dump(fields, f, indent=1, sort_keys=True)
    os.rename(work, directory)
  return _load(directory)


def main(argv=None):
  parser = argparse.ArgumentParser(prog="python bench/quality_corpus.py",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true",
                      help="the small corpus of bench/data/quality_corpus (the test suite's)")
  parser.add_argument("--dynamic_masking", action="store_true",
                      help="training records without masks (prepare_corpus.py's flag)")
  parser.add_argument("--cache_root", default=None, help="default: %s" % cache_root())
  parser.add_argument("--workers", type=int, default=None, help="default: all cores")
  args = parser.parse_args(argv)
  settings = QUICK_SETTINGS if args.quick else Settings()
  settings = dataclasses.replace(settings, dynamic_masking=args.dynamic_masking)
  try:
    corpus = build(settings, args.cache_root, args.workers)
  except SourcesMissing as e:
    print("quality_corpus.py: error: %s" % e, file=sys.stderr)
    return 2
  print(corpus.figures())
  print(json.dumps(dataclasses.asdict(corpus), sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
