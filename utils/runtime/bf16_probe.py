"""Whether bf16 is the fast precision here, measured rather than read from the CPU's flags.

A CPU flag says that bf16 instructions exist, not that they are faster: on an Intel Xeon with
AVX512-BF16 but without AMX oneDNN runs bf16 products at about half the fp32 rate, while on AMD
Zen 4 the same flag gives 1.7x (docs/PRECISION.md, "Which precision is fast where"). So the
choice is measured: the model's own products in fp32 and in bf16, timed for a few hundred
milliseconds with TensorFlow, give the ratio of their rates, cached per machine.

  shapes = model_shapes(bert_config, batch_size, seq_length)
  choice = auto_precision(shapes)   # PrecisionChoice("bf16", 1.66, "bf16 products 1.66x ...")

* `measure_bf16_ratio(shapes, ...)`: the measurement (`time_products` and `clock` injectable).
* `cached_bf16_ratio(shapes, ...)`: the ratio from the cache file when this machine (CPU model,
  CPU flags, GPU, TensorFlow version) measured these shapes before, else measured and stored; an
  unreadable or corrupt cache is measured again, never an error.
* `choose_precision(ratio)`: the `PrecisionChoice` of "auto": bf16 when its products run at
  least `BF16_MIN_RATIO` x fp32's rate, else fp32; its reason says the measured ratio.
* `bf16_cost_note(ratio)`: what an explicit --bf16 is told on its start line.
* `auto_precision(shapes)`: the two together, what --precision=auto, `make demo`
  (`python -m utils.runtime.bf16_probe`) and bench/quality.py's ours train in.

The probe runs only where a precision is chosen for the user (those three) or an explicit --bf16
on the CPU is told its cost; fp32, fp16 and AMP jobs never run it. The cache makes it once per
machine, model shape and TensorFlow version: a few hundred milliseconds to two seconds then.
"""

import collections
import contextlib
import fcntl
import hashlib
import json
import os
import time

from absl import logging

import gpu_environment
from utils.runtime import cpu

# bf16 is chosen when its products run at least this much faster than fp32's. Everything between
# the products stays fp32 under --bf16 and the casts cost a little, so a job gains less than its
# products: products at 1.66x gave the whole job 1.55x on Zen 4, at 0.54x gave 0.69x on a Xeon
# without AMX; near 1x the job would be no faster in bf16.
BF16_MIN_RATIO = 1.15
# The probe's time budget: each precision's products are run until this much time has passed.
PROBE_SECONDS = 0.3
# Rows beyond this change a product's rate little, only the probe's time (BERT-base at batch 8 x
# seq 128 would time products of 1024 rows, BERT-large at batch 64 of 8192).
MAX_PROBE_ROWS = 512
CACHE_ENV = "BERT_PRECISION_CACHE"
CACHE_VERSION = 1


class ProductShapes(collections.namedtuple("ProductShapes", ["rows", "hidden", "intermediate"])):
  """The encoder's products the probe times: [rows, hidden] x [hidden, 3 hidden] (the fused QKV
  projection), [rows, hidden] x [hidden, intermediate] and [rows, intermediate] x
  [intermediate, hidden].

  Fields: rows, batch x sequence length (at most `MAX_PROBE_ROWS`); hidden, the hidden size;
  intermediate, the feed-forward size.
  """
  __slots__ = ()

  @classmethod
  def of_model(cls, hidden_size, intermediate_size, rows):
    """The shapes of a model of `hidden_size` / `intermediate_size` at `rows` = batch x seq."""
    return cls(min(int(rows), MAX_PROBE_ROWS), int(hidden_size), int(intermediate_size))

  @property
  def flops(self):
    """Floating-point operations of one run of the three products."""
    h, i = self.hidden, self.intermediate
    return 2 * self.rows * (h * 3 * h + h * i + i * h)


PrecisionChoice = collections.namedtuple("PrecisionChoice", ["precision", "bf16_ratio", "reason"])
PrecisionChoice.__doc__ = """The precision chosen for a job and why, decided once and passed down.

Fields: precision, "bf16" or "fp32" (an explicit flag's: also "fp16" or "amp"); bf16_ratio, bf16
products' rate / fp32's measured here (None when not measured); reason, e.g. "bf16 products 1.66x
fp32 here" (None when nothing was measured).
"""


def _ratio_text(ratio):
  return "%.2fx" % ratio


def choose_precision(ratio, device="CPU"):
  """The precision that trains faster here, from the measured ratio.

  Args:
    ratio: bf16 products' rate / fp32's (`cached_bf16_ratio`), or None when bf16 products could
      not be run here.
    device: what computes, for the reason ("CPU" or "GPU").

  Returns:
    `PrecisionChoice`: bf16 when ratio >= `BF16_MIN_RATIO`, else fp32.
  """
  if ratio is None:
    return PrecisionChoice("fp32", None, "bf16 products could not be run on this %s" % device)
  if ratio >= BF16_MIN_RATIO:
    return PrecisionChoice("bf16", ratio, "bf16 products %s fp32 here" % _ratio_text(ratio))
  return PrecisionChoice("fp32", ratio, "bf16 products run at %s fp32 on this %s"
                         % (_ratio_text(ratio), device))


def bf16_cost_note(ratio, device="CPU"):
  """What an explicit --bf16 is told on its start line: the measured ratio, and what it costs
  where bf16 is not the faster choice ("bf16 products run at 0.54x fp32 on this CPU: fp32 is
  faster here"); None when the ratio is unknown."""
  if ratio is None:
    return None
  choice = choose_precision(ratio, device)
  if choice.precision == "bf16":
    return choice.reason
  return "%s: fp32 is faster here" % choice.reason


def time_products_in_tensorflow(shapes, seconds, clock=time.perf_counter):
  """Runs the three products of `shapes` in fp32 and in bf16, alternately, for about `seconds`
  each, in a graph and session of their own.

  Args:
    shapes: `ProductShapes`.
    seconds: time budget per precision.
    clock: returns seconds (monotonic).

  Returns:
    (fp32 seconds, bf16 seconds): the fastest run of each.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  graph = tf.Graph()
  with graph.as_default():
    runs = {}
    for dtype in (tf.float32, tf.bfloat16):
      def operand(rows, cols, name, dtype=dtype):
        values = tf.random.uniform([rows, cols], -1.0, 1.0, seed=len(name))
        return tf.compat.v1.Variable(tf.cast(values, dtype), name="%s_%s" % (name, dtype.name))
      x = operand(shapes.rows, shapes.hidden, "x")
      ffn = operand(shapes.rows, shapes.intermediate, "ffn")
      products = [tf.matmul(x, operand(shapes.hidden, 3 * shapes.hidden, "qkv")),
                  tf.matmul(x, operand(shapes.hidden, shapes.intermediate, "up")),
                  tf.matmul(ffn, operand(shapes.intermediate, shapes.hidden, "down"))]
      # One element of each product, fetched: nothing is left for the graph optimizer to prune.
      runs[dtype.name] = tf.add_n([tf.cast(product[0, 0], tf.float32) for product in products])
    init = tf.compat.v1.global_variables_initializer()
  session_config = tf.compat.v1.ConfigProto()
  session_config.graph_options.rewrite_options.disable_meta_optimizer = True
  best = {name: float("inf") for name in runs}
  spent = {name: 0.0 for name in runs}
  with tf.compat.v1.Session(graph=graph, config=session_config) as session:
    session.run(init)
    for op in runs.values():  # the first run of each allocates and picks its kernels
      session.run(op)
    while True:  # at least one timed run of each
      for name, op in runs.items():
        start = clock()
        session.run(op)
        elapsed = clock() - start
        spent[name] += elapsed
        best[name] = min(best[name], elapsed)
      if min(spent.values()) >= seconds:
        break
  return best["float32"], best["bfloat16"]


def measure_bf16_ratio(shapes, seconds=PROBE_SECONDS, time_products=None):
  """bf16 products' rate / fp32's at `shapes` on this machine.

  Args:
    shapes: `ProductShapes`.
    seconds: time budget per precision.
    time_products: (shapes, seconds) -> (fp32 seconds, bf16 seconds);
      `time_products_in_tensorflow` when None.

  Returns:
    float (> 1: bf16 is faster), or None when bf16 products cannot be run here (the error logged).
  """
  time_products = time_products or time_products_in_tensorflow
  try:
    fp32_seconds, bf16_seconds = time_products(shapes, seconds)
  except Exception as e:  # pylint: disable=broad-except
    # A TensorFlow build without bf16 kernels for this device: fp32 it is, and the log says why.
    logging.warning("bf16 products could not be timed here (%s: %s): taking fp32",
                    type(e).__name__, e)
    return None
  return fp32_seconds / bf16_seconds


def machine_key(cpuinfo_path=cpu.CPUINFO_PATH, tf_version=None, gpu_name=None):
  """What the probe's result depends on besides the shapes: a changed machine measures again.

  Args:
    cpuinfo_path: the CPU description (its first processor's model name and flags).
    tf_version: TensorFlow's version; None: the installed one's.
    gpu_name: the GPU that computes (`gpu_environment.local_gpu_name(0)`), or None.

  Returns:
    dict of str: "cpu", "cpu_flags" (a digest of the sorted flags), "tensorflow", "gpu".
  """
  if tf_version is None:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf_version = tf.__version__
  flags = " ".join(sorted(cpu.cpu_flags(cpuinfo_path) or ()))
  return {"cpu": cpu.cpu_model_name(cpuinfo_path) or "unknown",
          "cpu_flags": hashlib.sha256(flags.encode()).hexdigest()[:16],
          "tensorflow": tf_version, "gpu": gpu_name or "none"}


def default_cache_path(environ=None):
  """$BERT_PRECISION_CACHE, else bert-tf1-pretraining/bf16_probe.json under $XDG_CACHE_HOME
  (default ~/.cache)."""
  environ = os.environ if environ is None else environ
  if environ.get(CACHE_ENV):
    return environ[CACHE_ENV]
  base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "bert-tf1-pretraining", "bf16_probe.json")


def _entry_name(key, shapes):
  return json.dumps([key, list(shapes)], sort_keys=True)


def _read_cache(path):
  """The cache's entries (dict), {} when the file is missing, unreadable or not one we wrote."""
  try:
    with open(path) as reader:
      content = json.load(reader)
  except (OSError, ValueError):
    return {}
  if (not isinstance(content, dict) or content.get("version") != CACHE_VERSION
      or not isinstance(content.get("entries"), dict)):
    return {}
  return content["entries"]


def _write_cache(path, entries):
  """Writes `entries` whole (a temporary file renamed over `path`); a cache that cannot be
  written only means measuring again next time."""
  try:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    partial = "%s.%d.tmp" % (path, os.getpid())
    with open(partial, "w") as writer:
      json.dump({"version": CACHE_VERSION, "entries": entries}, writer, indent=1, sort_keys=True)
    os.replace(partial, path)
  except OSError as e:
    logging.warning("the bf16 probe's cache %s could not be written (%s): it measures again "
                    "next time", path, e)


@contextlib.contextmanager
def _cache_lock(path):
  """Holds an exclusive lock on `path`.lock while the cache is read, measured into and written:
  jobs started together on one machine measure one after the other (not disturbing each other's
  timing), and the later ones take the first one's ratio. Without a writable directory: no lock."""
  try:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    lock = open(path + ".lock", "a")
  except OSError:
    yield
    return
  with lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    yield


def cached_bf16_ratio(shapes, cache_path=None, key=None, measure=None):
  """bf16 products' rate / fp32's at `shapes` on this machine, measured once per machine.

  Args:
    shapes: `ProductShapes`.
    cache_path: the cache file; `default_cache_path()` when None.
    key: `machine_key()` when None (a dict: tests give another machine's).
    measure: shapes -> ratio or None; `measure_bf16_ratio` when None.

  Returns:
    float, or None when bf16 products cannot be run here (not cached: asked again next time).
  """
  cache_path = cache_path or default_cache_path()
  if key is None:
    key = machine_key(gpu_name=gpu_environment.local_gpu_name(0))
  name = _entry_name(key, shapes)
  with _cache_lock(cache_path):
    entries = _read_cache(cache_path)
    entry = entries.get(name)
    if isinstance(entry, dict) and isinstance(entry.get("bf16_ratio"), (int, float)) \
        and entry["bf16_ratio"] > 0:
      return float(entry["bf16_ratio"])
    ratio = (measure or measure_bf16_ratio)(shapes)
    if ratio is not None:
      entries[name] = {"bf16_ratio": ratio, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                           time.gmtime())}
      _write_cache(cache_path, entries)
    return ratio


def model_shapes(bert_config, batch_size, seq_length):
  """The `ProductShapes` of a `modeling.BertConfig` at `batch_size` x `seq_length` rows."""
  return ProductShapes.of_model(bert_config.hidden_size, bert_config.intermediate_size,
                                batch_size * seq_length)


def auto_precision(shapes, device="CPU", bf16_ratio=None):
  """What --precision=auto, `make demo` and bench/quality.py's ours compute in.

  Args:
    shapes: `ProductShapes` (`model_shapes`).
    device: "CPU" or "GPU", for the reason.
    bf16_ratio: shapes -> ratio or None; `cached_bf16_ratio` when None (tests inject outcomes).

  Returns:
    `PrecisionChoice`.
  """
  return choose_precision((bf16_ratio or cached_bf16_ratio)(shapes), device)


def main(argv):
  """`python -m utils.runtime.bf16_probe CONFIG BATCH SEQ`: prints the choice of
  `auto_precision` for that model, "<precision> <reason>" (what scripts/demo.sh trains in)."""
  import modeling  # pylint: disable=g-import-not-at-top
  config_path, batch_size, seq_length = argv[1:]
  shapes = model_shapes(modeling.BertConfig.from_json_file(config_path), int(batch_size),
                        int(seq_length))
  choice = auto_precision(shapes)
  print(choice.precision, choice.reason)
  return 0


if __name__ == "__main__":
  import sys  # pylint: disable=g-import-not-at-top
  sys.exit(main(sys.argv))
