"""The environment `make` builds: pinned TF, the estimator, Horovod with Gloo and MPI, launches."""

import os
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN_DIR = os.path.dirname(sys.executable)
ALLREDUCE_WORKER = os.path.join(REPO_ROOT, "tests", "workers", "allreduce_check.py")


def test_make_python_path_prints_this_environment():
  proc = subprocess.run(["make", "-s", "python-path"], cwd=REPO_ROOT, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr
  printed = proc.stdout.strip().splitlines()[-1]
  assert os.path.isabs(printed)
  assert os.path.realpath(printed) == os.path.realpath(sys.executable)


def test_pinned_packages_import():
  code = ("import importlib.metadata as m, tensorflow as tf, tensorflow_estimator, horovod;"
          "import horovod.tensorflow as hvd;"
          "print(tf.__version__, m.version('tensorflow-estimator'), horovod.__version__);"
          "assert hasattr(tf.compat.v1, 'estimator') and hasattr(tf.compat.v1.estimator, 'tpu')")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split() == ["2.15.1", "2.15.0", "0.28.1"]


def test_horovod_built_with_tensorflow_gloo_and_mpi():
  proc = subprocess.run([os.path.join(BIN_DIR, "horovodrun"), "--check-build"],
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  for line in ("[X] TensorFlow", "[X] Gloo", "[X] MPI"):
    assert line in proc.stdout, proc.stdout


def _allreduce_ok(output):
  # Searched in the whole output, not line by line: mpirun forwards each rank's output in the
  # chunks it reads, so one rank's line can be cut in two by the other's (seen in CI:
  # "rank 1 of 2: allreduce ok sum=3.0rank 0 of 2: allreduce ok sum=3.0").
  ranks = re.findall(r"rank (\d+) of 2: allreduce ok sum=3\.0", output)
  return sorted(ranks) == ["0", "1"]


def test_horovodrun_gloo_two_worker_allreduce():
  proc = subprocess.run(
      [os.path.join(BIN_DIR, "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo",
       sys.executable, ALLREDUCE_WORKER],
      capture_output=True, text=True, timeout=180)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert _allreduce_ok(proc.stdout), proc.stdout


def test_mpirun_two_worker_allreduce():
  mpirun = shutil.which("mpirun")
  assert mpirun, "OpenMPI's mpirun is not installed (make installs openmpi-bin as root)"
  args = [mpirun, "-np", "2"]
  if os.geteuid() == 0:
    args += ["--allow-run-as-root"]
  args += ["--oversubscribe", sys.executable, ALLREDUCE_WORKER]
  proc = subprocess.run(args, capture_output=True, text=True, timeout=180)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert _allreduce_ok(proc.stdout), proc.stdout
