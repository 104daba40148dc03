"""A two-host cluster on one machine, for the multi-node tests and the scaling benchmark.

Each "host" is a network namespace with its own address on a veth pair that joins only the two
namespaces (no default route, nothing bridged to the machine's interfaces), its own host name (UTS
namespace) and its own mount namespace, in which a private bind mount gives it its own disk at a
path common to both hosts (`node_local_dir`) and a generated /etc/hosts and ssh client config. An
OpenSSH server runs in each, accepting a throw-away key, so `horovodrun` and `mpirun` reach the
other host over ssh exactly as on real machines. Commands run "on" a host through `nsenter` into
the namespaces of that host's sshd (what an ssh login to it would get).

Needs root (namespaces, mounts, sshd). Addresses are in 198.51.100.0/24 (TEST-NET-2, RFC 5737,
documentation only) and exist only inside the namespaces, so no packet can reach another address.

  PY=$(make -s python-path | tail -n1)
  $PY -m tests.cluster.cluster -- $PY bench/scaling.py --hosts hostA:1,hostB:1   # runs on hostA

`stop()` kills every process of both namespaces, deletes them and the work directory;
`leftovers()` lists anything of the cluster that still exists (namespaces, sshd processes, mounts).
"""

import argparse
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HOSTS = ("hostA", "hostB")
# TEST-NET-2 (RFC 5737): reserved for documentation; the machine's own network is elsewhere.
ADDRESSES = {"hostA": "198.51.100.1", "hostB": "198.51.100.2"}
PREFIX_LENGTH = 24
# The one network interface both hosts have (same name on both, as launchers' interface flags need).
INTERFACE = "cl0"
# Debian packages the cluster needs, by the program that tells whether each is installed.
PACKAGES = {"/usr/sbin/sshd": "openssh-server", "/usr/sbin/ip": "iproute2",
            "/usr/bin/nsenter": "util-linux", "/usr/bin/unshare": "util-linux"}
# sshd's privilege-separation directory (normally created by its service unit).
SSHD_RUN_DIR = "/run/sshd"
_counter = itertools.count()


class ClusterError(RuntimeError):
  """The cluster could not be built or torn down; the message names the step."""


def missing_packages(packages=None):
  """Debian packages of `packages` (program path -> package; default: the cluster's) that are not
  installed (sorted, no duplicates)."""
  packages = PACKAGES if packages is None else packages
  return sorted({package for path, package in packages.items() if not os.path.exists(path)})


def install_packages(log=sys.stderr, packages=None):
  """Installs the missing packages with apt-get (as scripts/env.sh installs OpenMPI).

  Args:
    log: where the one line saying what is installed goes.
    packages: dict program path -> Debian package (default: the 2-host cluster's `PACKAGES`).

  Raises:
    ClusterError: when packages are missing and cannot be installed (not root, no apt-get, or
      apt-get failed).
  """
  missing = missing_packages(packages)
  if not missing:
    return
  if os.geteuid() != 0 or not shutil.which("apt-get"):
    raise ClusterError("the test cluster needs the Debian packages %s: install them as root"
                       % " ".join(missing))
  print("[cluster] installing Debian packages %s" % " ".join(missing), file=log, flush=True)
  env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
  for cmd in (["apt-get", "update", "-qq"],
              ["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + missing):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
      raise ClusterError("%s failed (%d): %s" % (" ".join(cmd), proc.returncode,
                                                 proc.stderr[-2000:]))


def _run(cmd, timeout=30, check=True):
  """Runs a set-up command; ClusterError naming it when it fails."""
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
  if check and proc.returncode != 0:
    raise ClusterError("%s failed (%d): %s" % (" ".join(cmd), proc.returncode,
                                               proc.stderr.strip()))
  return proc


class Cluster(object):
  """Two hosts, `hostA` and `hostB`, each with 1 address, 1 host name, 1 disk and 1 sshd.

  Attributes:
    work_dir: the cluster's own directory (keys, configs, the hosts' disks, sshd logs).
    node_local_dir: the path at which every host sees its own disk.
    namespaces: dict host -> network namespace name (unique to this cluster).
  """

  def __init__(self, parent_dir=None):
    self.work_dir = tempfile.mkdtemp(prefix="bert-cluster-", dir=parent_dir)
    self.node_local_dir = os.path.join(self.work_dir, "node-local")
    tag = "bertcl%dx%d" % (os.getpid(), next(_counter))
    self.namespaces = {host: "%s%s" % (tag, host[-1]) for host in HOSTS}
    self._sshd = {}
    self._started = False

  # ---- set-up and tear-down

  def start(self, timeout=60):
    """Builds both hosts and waits until each answers ssh from the other; returns self.

    Raises:
      ClusterError: naming the step that failed (everything built so far is torn down).
    """
    if os.geteuid() != 0:
      raise ClusterError("the 2-host cluster needs root (network namespaces, mounts, sshd)")
    self._started = True
    try:
      self._write_files()
      self._build_network()
      for host in HOSTS:
        self._start_sshd(host)
      self._wait_for_ssh(timeout)
    except BaseException:
      self.stop()
      raise
    return self

  def stop(self, timeout=20):
    """Kills every process of both hosts, deletes the namespaces and the work directory.

    Returns:
      `leftovers()` after the tear-down (an empty list when nothing remains).
    """
    for host in HOSTS:
      self._kill_namespace(host, keep=(), timeout=timeout)
    for proc in self._sshd.values():
      try:
        proc.wait(timeout=timeout)
      except subprocess.TimeoutExpired:
        pass
    for namespace in self.namespaces.values():
      if namespace in self._existing_namespaces():
        _run(["ip", "netns", "delete", namespace], check=False)
    shutil.rmtree(self.work_dir, ignore_errors=True)
    self._started = False
    return self.leftovers()

  def __enter__(self):
    return self.start()

  def __exit__(self, *exc):
    self.stop()

  def _path(self, *parts):
    return os.path.join(self.work_dir, *parts)

  def _write_files(self):
    """Keys, the hosts file, the ssh client and server configs, the hosts' disks."""
    os.chmod(self.work_dir, 0o755)
    os.makedirs(self.node_local_dir)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bert-cluster-client",
          "-f", self._path("client_key")])
    shutil.copy(self._path("client_key.pub"), self._path("authorized_keys"))
    known_hosts = []
    for host in HOSTS:
      os.makedirs(self.disk(host))
      _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host,
            "-f", self._path("host_key_" + host)])
      with open(self._path("host_key_%s.pub" % host)) as f:
        key = " ".join(f.read().split()[:2])
      known_hosts.append("%s,%s %s\n" % (host, ADDRESSES[host], key))
      with open(self._path("sshd_config_" + host), "w") as f:
        f.write(SSHD_CONFIG.format(address=ADDRESSES[host],
                                   host_key=self._path("host_key_" + host),
                                   authorized_keys=self._path("authorized_keys")))
    with open(self._path("known_hosts"), "w") as f:
      f.writelines(known_hosts)
    with open(self._path("hosts"), "w") as f:
      f.write("127.0.0.1 localhost\n")
      f.writelines("%s %s\n" % (ADDRESSES[host], host) for host in HOSTS)
    with open(self._path("ssh_config"), "w") as f:
      f.write(SSH_CONFIG.format(hosts=" ".join(HOSTS + tuple(ADDRESSES.values())),
                                key=self._path("client_key"),
                                known_hosts=self._path("known_hosts")))

  def _build_network(self):
    """Two namespaces joined by one veth pair; loopback up; one address each, no other route."""
    namespace_a, namespace_b = (self.namespaces[host] for host in HOSTS)
    for namespace in (namespace_a, namespace_b):
      _run(["ip", "netns", "add", namespace])
    # Both ends are created directly inside the namespaces: nothing ever exists outside them.
    _run(["ip", "link", "add", INTERFACE, "netns", namespace_a, "type", "veth",
          "peer", "name", INTERFACE, "netns", namespace_b])
    for host in HOSTS:
      netns = ["ip", "-n", self.namespaces[host]]
      _run(netns + ["link", "set", "lo", "up"])
      _run(netns + ["addr", "add", "%s/%d" % (ADDRESSES[host], PREFIX_LENGTH),
                    "dev", INTERFACE])
      _run(netns + ["link", "set", INTERFACE, "up"])

  def _start_sshd(self, host):
    """sshd in the host's namespace, under its own host name and mounts (inherited by logins)."""
    os.makedirs(SSHD_RUN_DIR, mode=0o755, exist_ok=True)
    mounts = [(self.disk(host), self.node_local_dir), (self._path("hosts"), "/etc/hosts"),
              (self._path("ssh_config"), "/etc/ssh/ssh_config")]
    script = "hostname %s && %s && exec /usr/sbin/sshd -D -e -f %s" % (
        host, " && ".join("mount --bind %s %s" % pair for pair in mounts),
        self._path("sshd_config_" + host))
    log = open(self._path("sshd_%s.log" % host), "w")
    # `ip netns exec`, `unshare` and `sh` each exec the next: the process is sshd itself.
    self._sshd[host] = subprocess.Popen(
        ["ip", "netns", "exec", self.namespaces[host], "unshare", "--uts", "--mount",
         "--propagation", "private", "--", "sh", "-c", script],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()

  def _wait_for_ssh(self, timeout):
    """Each host reaches the other (and itself) over ssh by name, or ClusterError after timeout."""
    deadline = time.time() + timeout
    for source, target in itertools.product(HOSTS, HOSTS):
      while True:
        for host, proc in self._sshd.items():
          if proc.poll() is not None:
            raise ClusterError("sshd of %s exited (%d): %s" % (host, proc.returncode,
                                                              self.sshd_log(host)))
        proc = self.run(source, ["ssh", target, "hostname"], timeout=15, check=False)
        if proc.returncode == 0 and proc.stdout.strip() == target:
          break
        if time.time() > deadline:
          raise ClusterError("%s cannot ssh to %s after %d s: %s" % (
              source, target, timeout, proc.stderr.strip() or proc.stdout.strip()))
        time.sleep(0.5)

  def _kill_namespace(self, host, keep=(), timeout=20):
    """SIGKILLs every process in the host's network namespace except `keep`; waits until gone."""
    namespace = self.namespaces[host]
    if namespace not in self._existing_namespaces():
      return []
    deadline = time.time() + timeout
    killed = []
    while time.time() < deadline:
      victims = [pid for pid in self.pids(host) if pid not in keep]
      if not victims:
        return killed
      for pid in victims:
        try:
          os.kill(pid, signal.SIGKILL)
          killed.append(pid)
        except ProcessLookupError:
          pass
      time.sleep(0.2)
    raise ClusterError("processes of %s still alive after %d s: %s" % (
        host, timeout, self.pids(host)))

  @staticmethod
  def _existing_namespaces():
    proc = _run(["ip", "netns", "list"], check=False)
    return {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}

  # ---- using the cluster

  def disk(self, host):
    """The directory that `host` sees at `node_local_dir` (the others do not)."""
    return self._path("disk_" + host)

  def sshd_log(self, host):
    with open(self._path("sshd_%s.log" % host)) as f:
      return f.read()

  def sshd_pid(self, host):
    return self._sshd[host].pid

  def on_host(self, host, argv, cwd=None):
    """The command line that runs `argv` on `host` (its network, host name and mounts)."""
    return ["nsenter", "--target", str(self.sshd_pid(host)), "--net", "--uts", "--mount",
            "--wd=%s" % (cwd or os.getcwd()), "--"] + list(argv)

  def run(self, host, argv, timeout, cwd=None, check=True, **kwargs):
    """Runs `argv` on `host` to completion (text output captured); returns the CompletedProcess.

    Raises:
      ClusterError: with `check`, for a non-zero exit (its output in the message).
    """
    proc = subprocess.run(self.on_host(host, argv, cwd), capture_output=True, text=True,
                          timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
      raise ClusterError("on %s, %s exited %d\n%s\n%s" % (
          host, " ".join(argv), proc.returncode, proc.stdout[-4000:], proc.stderr[-6000:]))
    return proc

  def popen(self, host, argv, cwd=None, **kwargs):
    """Starts `argv` on `host` in a new session (kill it with os.killpg); returns the Popen."""
    return subprocess.Popen(self.on_host(host, argv, cwd), start_new_session=True, **kwargs)

  def pids(self, host):
    """pids of every process in `host`'s network namespace (its sshd included)."""
    proc = _run(["ip", "netns", "pids", self.namespaces[host]], check=False)
    return [int(pid) for pid in proc.stdout.split()]

  def kill_host(self, host, timeout=20):
    """The host dies: SIGKILL to every process on it but its sshd listener.

    Returns:
      the pids killed.
    """
    return self._kill_namespace(host, keep=(self.sshd_pid(host),), timeout=timeout)

  @contextlib.contextmanager
  def interface_down(self, host, timeout=60):
    """Within the block, `host`'s side of the veth pair is down: it is cut off from the other host.

    Leaving the block, whatever happened in it, kills every process left on `host` but its sshd
    listener (a cut-off host's workers are orphans that nothing else ends), brings the interface
    back up and waits until both hosts reach each other over ssh again, so later tests find the
    cluster as it was.
    """
    link = ["ip", "-n", self.namespaces[host], "link", "set", INTERFACE]
    _run(link + ["down"])
    try:
      yield
    finally:
      try:
        self.kill_host(host)
      finally:
        _run(link + ["up"])
        self._wait_for_ssh(timeout)

  def leftovers(self):
    """What of this cluster still exists: namespaces, processes, mounts (strings; [] when none)."""
    found = ["network namespace %s" % n for n in self.namespaces.values()
             if n in self._existing_namespaces()]
    for pid in _all_pids():
      cmdline = command_line(pid)
      if self.work_dir in cmdline:
        found.append("process %d: %s" % (pid, cmdline.strip()))
    for line in _read("/proc/self/mountinfo").splitlines():
      if self.work_dir in line or any("/netns/" + n in line for n in self.namespaces.values()):
        found.append("mount: %s" % line)
    if os.path.exists(self.work_dir):
      found.append("directory %s" % self.work_dir)
    return found


def _all_pids():
  return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def command_line(pid):
  """The command line of process `pid`, arguments joined by spaces ("" once it has ended)."""
  return _read("/proc/%d/cmdline" % pid).replace("\0", " ").strip()


def _read(path):
  try:
    with open(path) as f:
      return f.read()
  except OSError:  # the process ended meanwhile
    return ""


SSHD_CONFIG = """\
ListenAddress {address}
Port 22
HostKey {host_key}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
PrintMotd no
MaxStartups 100
"""

# No ServerAliveInterval, as an ssh client's defaults: a launcher's ssh session to a host that drops
# off the network then stays open, so the fault tests see what the launchers' own settings do.
SSH_CONFIG = """\
Host {hosts}
  IdentityFile {key}
  IdentitiesOnly yes
  UserKnownHostsFile {known_hosts}
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 10
  LogLevel ERROR
"""


def command_arguments(description, argv=None):
  """The arguments of a command that runs one command on a test cluster (`command`, `timeout`);
  from then on SIGTERM exits through Python, so `with` blocks still tear the cluster down."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("command", nargs="+", help="the command (after --)")
  parser.add_argument("--timeout", type=float, default=3600, help="seconds the command may run")
  args = parser.parse_args(argv)
  # An outer `timeout` (SIGTERM) must still tear the cluster down: exit through the `with`.
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
  return args


def main(argv=None):
  args = command_arguments(
      "Start the 2-host cluster, run a command on hostA, tear the cluster down.", argv)
  install_packages()
  with Cluster() as cluster:
    print("[cluster] hosts %s at %s, interface %s, node-local dir %s" % (
        ", ".join(HOSTS), ", ".join(ADDRESSES[h] for h in HOSTS), INTERFACE,
        cluster.node_local_dir), file=sys.stderr, flush=True)
    proc = subprocess.run(cluster.on_host(HOSTS[0], args.command), timeout=args.timeout)
  return proc.returncode


if __name__ == "__main__":
  sys.exit(main())
