"""tests/conftest.py's set-up of a test run: the bf16 probe's cache lives in a folder of the run's
own, removed when the run ends, and a cache the caller names is used as it is."""

import json
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A process that sets up as a pytest run does (importing conftest), then says where the probe's
# cache is and whether its folder exists while it runs.
_SET_UP = """
import json, os, sys
sys.path.insert(0, "tests")
import conftest
cache = os.environ["BERT_PRECISION_CACHE"]
print(json.dumps({"cache": cache, "exists": os.path.isdir(os.path.dirname(cache))}))
"""


def _set_up(env):
  """Runs _SET_UP with `env`; returns what it printed as a dict."""
  done = subprocess.run([sys.executable, "-c", _SET_UP], cwd=REPO_ROOT, env=env, check=True,
                        capture_output=True, text=True, timeout=120)
  return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_the_runs_probe_cache_folder_is_removed_when_the_run_ends():
  env = {k: v for k, v in os.environ.items() if k != "BERT_PRECISION_CACHE"}
  seen = _set_up(env)
  folder = os.path.dirname(seen["cache"])
  assert seen["exists"], seen
  assert os.path.basename(folder).startswith("bf16_probe_"), seen
  assert not os.path.exists(folder), "the run's probe cache folder %s outlived it" % folder


@pytest.mark.e2e
def test_a_probe_cache_the_caller_names_is_kept(tmp_path):
  cache = tmp_path / "mine" / "bf16_probe.json"
  cache.parent.mkdir()
  cache.write_text("{}")
  seen = _set_up(dict(os.environ, BERT_PRECISION_CACHE=str(cache)))
  assert seen == {"cache": str(cache), "exists": True}
  assert cache.read_text() == "{}"
