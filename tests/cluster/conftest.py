"""The 2-host cluster (tests/cluster/cluster.py), one per test session, torn down at its end; Slurm
on it (tests/cluster/slurm.py) for each module that asks for it."""

import os

import pytest

from tests.cluster import cluster as cluster_lib
from tests.cluster import slurm as slurm_lib

NOT_ROOT_REASON = ("the 2-host cluster needs root (network namespaces, mounts and an sshd per "
                   "host); run the suite as root, as CI does, to run the multi-node tests")


def require_root():
  """Skips the test when not root; under CI (env CI set) that is a failure instead of a skip."""
  if os.geteuid() == 0:
    return
  if os.environ.get("CI"):
    pytest.fail("CI must run the multi-node tests as root: " + NOT_ROOT_REASON)
  pytest.skip(NOT_ROOT_REASON)


@pytest.fixture(scope="session")
def cluster():
  """A started `cluster_lib.Cluster`; after the session, nothing of it may remain."""
  require_root()
  cluster_lib.install_packages()
  built = cluster_lib.Cluster().start()
  yield built
  leftovers = built.stop()
  assert not leftovers, "the cluster left behind: %s" % leftovers


@pytest.fixture(scope="module")
def slurm(cluster):
  """Slurm on the 2-host cluster for one module (stopped after it, before other cluster tests
  kill hosts; the next module's starts afresh)."""
  slurm_lib.install_packages()
  started = slurm_lib.SlurmCluster(cluster).start()
  yield started
  leftovers = started.stop()
  assert not leftovers, "Slurm left behind: %s" % leftovers
