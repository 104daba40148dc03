"""The 2-host cluster itself: two separate nodes to both launchers, contained, leaving nothing.

Each "host" must look like its own machine: own host name, address, disk; `horovodrun` (Gloo) and
`mpirun` must both place local rank 0 on each host; the network must not reach anything but the two
namespaces; `stop()` must leave no namespace, process or mount behind.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import helpers
from tests.cluster import cluster as cluster_lib
from tests.cluster.conftest import require_root

pytestmark = pytest.mark.e2e

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = os.path.join(REPO_ROOT, "tests", "cluster", "node_probe.py")
HOROVODRUN = os.path.join(os.path.dirname(sys.executable), "horovodrun")
SEQ, PRED, VOCAB = 16, 3, 60
NUM_RECORDS = 24
HOST_A, HOST_B = cluster_lib.HOSTS


def test_each_host_has_its_own_name_address_and_disk(cluster):
  for host in cluster_lib.HOSTS:
    assert cluster.run(host, ["hostname"], timeout=20).stdout.strip() == host
    # Reached by name over ssh, landing on that host (its name, its disk).
    other = HOST_B if host == HOST_A else HOST_A
    marker = os.path.join(cluster.node_local_dir, "written_from_" + other)
    got = cluster.run(other, ["ssh", host, "hostname && touch %s" % marker], timeout=30)
    assert got.stdout.strip() == host
    assert os.listdir(cluster.disk(host)) == ["written_from_" + other]
    os.remove(os.path.join(cluster.disk(host), "written_from_" + other))


def test_network_stays_between_the_two_namespaces(cluster):
  for host in cluster_lib.HOSTS:
    namespace = ["ip", "-n", cluster.namespaces[host]]
    links = subprocess.run(namespace + ["-o", "link"], capture_output=True, text=True,
                           timeout=20, check=True).stdout
    assert sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines()) == [
        cluster_lib.INTERFACE, "lo"]
    # The veth peer lives in the other namespace of the cluster, nowhere else.
    other = cluster.namespaces[HOST_B if host == HOST_A else HOST_A]
    assert "link-netns %s" % other in links
    routes = subprocess.run(namespace + ["route", "show", "table", "all"], capture_output=True,
                            text=True, timeout=20, check=True).stdout
    assert "default" not in routes
    main = subprocess.run(namespace + ["route"], capture_output=True, text=True, timeout=20,
                          check=True).stdout.split("\n")
    assert [r.split()[0] for r in main if r.strip()] == ["198.51.100.0/24"]
    addresses = subprocess.run(namespace + ["-o", "-4", "addr"], capture_output=True, text=True,
                               timeout=20, check=True).stdout
    assert sorted(line.split()[3] for line in addresses.splitlines()) == [
        "127.0.0.1/8", "%s/24" % cluster_lib.ADDRESSES[host]]


@pytest.fixture(scope="module")
def probe_data(tmp_path_factory):
  """Records 1..24 (id in input_ids[0]): 8 files of 3 (shard by file) and 2 of 12 (by record)."""
  root = tmp_path_factory.mktemp("probe_data")
  rng = np.random.RandomState(5)
  dirs = {}
  for name, num_files in (("by_file", 8), ("by_record", 2)):
    directory = root / name
    directory.mkdir()
    per_file = NUM_RECORDS // num_files
    for index in range(num_files):
      batch = helpers.random_batch(rng, per_file, SEQ, VOCAB, PRED)
      batch["input_ids"][:, 0] = 1 + index * per_file + np.arange(per_file)
      helpers.write_batch_records(directory / ("part-%d.tfrecord" % index), batch)
    dirs[name] = str(directory)
  return dirs


def launchers():
  mpirun = ["mpirun", "-np", "4", "-H", "%s:2,%s:2" % (HOST_A, HOST_B), "--bind-to", "none",
            "--map-by", "slot", "-x", "TF_CPP_MIN_LOG_LEVEL"]
  if os.geteuid() == 0:
    mpirun.append("--allow-run-as-root")
  return {
      "horovodrun": ([HOROVODRUN, "-np", "4", "-H", "%s:2,%s:2" % (HOST_A, HOST_B), "--gloo",
                      "--disable-cache"], "HOROVOD_LOCAL_RANK"),
      "mpirun": (mpirun, "OMPI_COMM_WORLD_LOCAL_RANK"),
  }


def _empty_disks(cluster):
  """Removes the files the probe wrote on every host's node-local disk."""
  for host in cluster_lib.HOSTS:
    for name in os.listdir(cluster.disk(host)):
      os.remove(os.path.join(cluster.disk(host), name))


@pytest.mark.parametrize("launcher", ["horovodrun", "mpirun"])
def test_launchers_see_two_nodes_and_shard_the_input_by_rank(cluster, probe_data, tmp_path,
                                                             launcher, request):
  command, local_rank_variable = launchers()[launcher]
  out = tmp_path / "out"
  out.mkdir()
  _empty_disks(cluster)  # each run starts from empty disks
  request.addfinalizer(lambda: _empty_disks(cluster))  # and leaves them empty for later tests
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  cluster.run(HOST_A, command + [sys.executable, PROBE, str(out), cluster.node_local_dir,
                                 str(SEQ), str(PRED), probe_data["by_file"],
                                 probe_data["by_record"]],
              timeout=240, cwd=REPO_ROOT, env=env)
  reports = [json.loads((out / ("rank_%d.json" % rank)).read_text()) for rank in range(4)]

  assert [r["rank"] for r in reports] == [0, 1, 2, 3]
  assert {r["size"] for r in reports} == {4}
  assert [r["host"] for r in reports] == [HOST_A, HOST_A, HOST_B, HOST_B]
  # Local rank 0 on each host, seen by Horovod and set by the launcher.
  assert [r["local_rank"] for r in reports] == [0, 1, 0, 1]
  assert [r["local_size"] for r in reports] == [2, 2, 2, 2]
  assert [r[local_rank_variable] for r in reports] == ["0", "1", "0", "1"]
  # Each host's ranks wrote to its own disk, and saw only their own files there.
  for r in reports:
    assert r["node_local_files"] == (["rank_0", "rank_1"] if r["host"] == HOST_A
                                     else ["rank_2", "rank_3"])
  assert sorted(os.listdir(cluster.disk(HOST_B))) == ["rank_2", "rank_3"]
  # Every rank reads its own records: disjoint shares of 6 that together cover all 24.
  for directory in probe_data.values():
    shares = [set(r["records"][directory]) for r in reports]
    assert [len(share) for share in shares] == [NUM_RECORDS // 4] * 4, shares
    assert set.union(*shares) == set(range(1, NUM_RECORDS + 1)), shares


def test_stop_leaves_no_namespace_process_or_mount():
  require_root()
  cluster_lib.install_packages()
  cluster = cluster_lib.Cluster().start()
  try:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                timeout=20, check=True).stdout
    for namespace in cluster.namespaces.values():
      assert namespace in namespaces
    # A process left running on a host (as a crashed job would leave) must not survive stop().
    stray = cluster.popen(HOST_B, ["sleep", "600"], stdout=subprocess.DEVNULL)
    assert cluster.leftovers()  # the running cluster is seen
  finally:
    leftovers = cluster.stop()
  assert leftovers == []
  assert stray.wait(timeout=20) != 0
  namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                              timeout=20, check=True).stdout
  for namespace in cluster.namespaces.values():
    assert namespace not in namespaces
