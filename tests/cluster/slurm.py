"""A Slurm cluster on the 2-host cluster (tests/cluster/cluster.py), for the batch script's tests.

slurmctld runs on hostA, a slurmd on each host, a munged on each host with one shared key. Every
file of it lives in the 2-host cluster's work directory: the configuration, the controller's state
and log (shared by both hosts), and each host's slurmd spool, log and PMIx directory on that host's
own disk (`node_local_dir`), as two slurmds on one machine would otherwise meet in /tmp. The
configuration is what a small cluster without cgroups runs: processes tracked through /proc
(`proctrack/linuxproc`), no task plugin, whole nodes per job, no accounting database (jobs are read
with `scontrol show job`, which keeps a finished job for `MinJobAge` seconds), a node that stops
answering marked down after `SLURMD_TIMEOUT` seconds and back in service when its slurmd returns.

Needs root and Debian's `slurm-wlm` and `munge` (installed with apt-get when missing, as the 2-host
cluster installs openssh-server).

  PY=$(make -s python-path | tail -n1)
  $PY -m tests.cluster.slurm -- sbatch --wait scripts/slurm/pretrain.sbatch ...   # on hostA

`stop()` ends the daemons and everything the 2-host cluster's `stop()` ends.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from tests.cluster import cluster as cluster_lib

HOSTS = cluster_lib.HOSTS
CONTROLLER = HOSTS[0]
# Debian packages, by a program each installs.
PACKAGES = {"/usr/sbin/slurmctld": "slurmctld", "/usr/sbin/slurmd": "slurmd",
            "/usr/bin/sbatch": "slurm-client", "/usr/sbin/munged": "munge",
            "/usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so": "slurm-wlm-basic-plugins"}
PARTITION = "bert"
# Seconds without an answer after which slurmctld marks a node down (and requeues its jobs).
SLURMD_TIMEOUT = 10
# Seconds between the signal that ends a job's processes (SIGTERM, or a cancel) and SIGKILL (30 by
# default): how long the workers left on a live node have to end after a node failure.
KILL_WAIT = 10
# Seconds between two passes of the scheduler over the pending jobs (60 by default): a requeued
# job becomes startable by a clock, not by an event.
SCHED_INTERVAL = 5
# The lifetime of a job's launch credential, which is also how long Slurm holds a requeued job
# before it may start again (a relaunch with the old job's revoked credential fails: "Job
# credential revoked"). 120 s by default; shorter here, so a requeue test waits less.
CRED_EXPIRE = 20
CPUS_PER_HOST = 2
# The states a job (or an array task) ends in (`SlurmCluster.wait_for_job`).
JOB_STATES_DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")


class SlurmError(cluster_lib.ClusterError):
  """Slurm could not be started or did not answer; the message names the step."""


def install_packages(log=sys.stderr):
  """Installs the missing Slurm and munge packages with apt-get (as root)."""
  cluster_lib.install_packages(log=log, packages=PACKAGES)


SLURM_CONF = """\
ClusterName=bert
SlurmctldHost={controller}({controller_address})
AuthType=auth/munge
AuthInfo=socket={node_local}/munge/munge.socket,cred_expire={cred_expire}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={work}/state
SlurmctldPidFile={work}/slurmctld.pid
SlurmctldLogFile={work}/slurmctld.log
SlurmdSpoolDir={node_local}/slurmd
SlurmdPidFile={node_local}/slurmd.pid
SlurmdLogFile={node_local}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/linear
SchedulerType=sched/builtin
SchedulerParameters=sched_interval={sched_interval}
MpiDefault=none
ReturnToService=2
SlurmdTimeout={slurmd_timeout}
SlurmctldTimeout=10
MessageTimeout=5
KillWait={kill_wait}
MinJobAge=3600
InactiveLimit=0
{nodes}
PartitionName={partition} Nodes={node_list} Default=YES MaxTime=INFINITE State=UP
"""

# cgroups v1 are mounted here, as on many older clusters; nothing uses them (linuxproc tracking,
# no task plugin), but slurmd 22.05 initialises the cgroup plugin all the same.
CGROUP_CONF = "CgroupPlugin=cgroup/v1\n"

# Two slurmds on one machine would both create PMIx's per-step directory in /tmp: on each host's
# own disk instead.
MPI_CONF = "PMIxCliTmpDirBase={node_local}/pmix\n"


class SlurmCluster(object):
  """slurmctld on hostA, slurmd and munged on both hosts of a started `cluster_lib.Cluster`.

  Attributes:
    cluster: the 2-host cluster it runs on.
    work_dir: Slurm's shared directory (configuration, controller state and log), a new one in
      the cluster's for each SlurmCluster: Slurm may be started on a cluster more than once (a
      test module each), each time from a clean state.
    node_local: where each host keeps its own files of this Slurm (munge, slurmd, PMIx), on its
      own disk (under the cluster's `node_local_dir`).
    conf: the path of slurm.conf (`SLURM_CONF` of every command run through `run`/`popen`).
  """

  def __init__(self, cluster):
    self.cluster = cluster
    self.work_dir = tempfile.mkdtemp(prefix="slurm-", dir=cluster.work_dir)
    self.node_local = os.path.join(cluster.node_local_dir, os.path.basename(self.work_dir))
    self.conf = os.path.join(self.work_dir, "slurm.conf")
    self._daemons = []

  # ---- set-up and tear-down

  def start(self, timeout=60):
    """Writes the configuration, starts the daemons, waits until both nodes are idle; returns self.

    Raises:
      SlurmError: naming the daemon or node that did not come up (the daemons are stopped).
    """
    try:
      self._write_files()
      for host in HOSTS:
        self.start_daemon(host, "munged")
      self._wait_for_munge(timeout)
      self.start_daemon(CONTROLLER, "slurmctld")
      for host in HOSTS:
        self.start_daemon(host, "slurmd")
      self.wait_for_nodes("idle", HOSTS, timeout)
    except BaseException:
      self.stop()
      raise
    return self

  def stop(self, timeout=20):
    """Ends every daemon (SIGTERM, then SIGKILL) and whatever of Slurm's jobs is left on the hosts
    (slurmstepd, tasks); the hosts' sshd listeners stay, for the 2-host cluster's own stop.

    Returns:
      `leftovers()` after it (an empty list when nothing of Slurm remains).
    """
    for proc in self._daemons:
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.time() + timeout
    for proc in self._daemons:
      try:
        proc.wait(timeout=max(0.1, deadline - time.time()))
      except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    self._daemons = []
    for host in HOSTS:
      self.cluster.kill_host(host, timeout=timeout)
    return self.leftovers()

  def leftovers(self):
    """Processes left on either host besides its sshd listener ("host pid: command line")."""
    found = []
    for host in HOSTS:
      for pid in self.cluster.pids(host):
        if pid != self.cluster.sshd_pid(host):
          cmdline = cluster_lib.command_line(pid)
          if cmdline:
            found.append("%s %d: %s" % (host, pid, cmdline))
    return found

  def _write_files(self):
    node_local = self.node_local
    os.makedirs(os.path.join(self.work_dir, "state"))
    key = os.path.join(self.work_dir, "munge.key")
    with open(key, "wb") as f:
      f.write(os.urandom(1024))
    os.chmod(key, 0o400)
    for host in HOSTS:
      for sub in ("munge", "slurmd", "pmix"):
        os.makedirs(os.path.join(self.cluster.disk(host), os.path.basename(node_local), sub))
    nodes = "\n".join(
        "NodeName=%s NodeAddr=%s CPUs=%d CoresPerSocket=%d State=UNKNOWN" % (
            host, cluster_lib.ADDRESSES[host], CPUS_PER_HOST, CPUS_PER_HOST) for host in HOSTS)
    files = {
        "slurm.conf": SLURM_CONF.format(
            controller=CONTROLLER, controller_address=cluster_lib.ADDRESSES[CONTROLLER],
            node_local=node_local, work=self.work_dir, slurmd_timeout=SLURMD_TIMEOUT,
            kill_wait=KILL_WAIT, cred_expire=CRED_EXPIRE, sched_interval=SCHED_INTERVAL,
            nodes=nodes, partition=PARTITION, node_list=",".join(HOSTS)),
        "cgroup.conf": CGROUP_CONF,
        "mpi.conf": MPI_CONF.format(node_local=node_local),
    }
    for name, text in files.items():
      with open(os.path.join(self.work_dir, name), "w") as f:
        f.write(text)

  def _daemon_argv(self, name):
    node_local = self.node_local
    if name == "munged":
      munge = os.path.join(node_local, "munge")
      return ["munged", "--foreground", "--force",
              "--key-file", os.path.join(self.work_dir, "munge.key"),
              "--socket", os.path.join(munge, "munge.socket"),
              "--pid-file", os.path.join(munge, "munged.pid"),
              "--log-file", os.path.join(munge, "munged.log"),
              "--seed-file", os.path.join(munge, "munged.seed")]
    if name in ("slurmctld", "slurmd"):
      return [name, "-D", "-f", self.conf]
    raise ValueError("unknown daemon %r" % name)

  def start_daemon(self, host, name):
    """Starts daemon `name` (munged, slurmctld, slurmd) on `host`; returns its Popen."""
    log = open(os.path.join(self.work_dir, "%s_%s.out" % (name, host)), "a")
    proc = self.cluster.popen(host, self._daemon_argv(name), stdin=subprocess.DEVNULL,
                              stdout=log, stderr=subprocess.STDOUT, env=self.env())
    log.close()
    self._daemons.append(proc)
    return proc

  def _wait_for_munge(self, timeout):
    deadline = time.time() + timeout
    socket = os.path.join(self.node_local, "munge", "munge.socket")
    for host in HOSTS:
      while True:
        proc = self.run(host, ["munge", "--socket", socket, "--no-input"], timeout=10,
                        check=False)
        if proc.returncode == 0:
          break
        if time.time() > deadline:
          raise SlurmError("munged on %s does not answer after %d s: %s" % (
              host, timeout, proc.stderr.strip()))
        time.sleep(0.2)

  # ---- using the cluster

  def env(self, **extra):
    """The environment of a Slurm command: this cluster's slurm.conf."""
    return dict(os.environ, SLURM_CONF=self.conf, **extra)

  def run(self, host, argv, timeout=30, check=True, **kwargs):
    """Runs a command on `host` with this cluster's `SLURM_CONF`; returns the CompletedProcess."""
    kwargs.setdefault("env", self.env())
    try:
      return self.cluster.run(host, argv, timeout=timeout, check=check, **kwargs)
    except cluster_lib.ClusterError as e:
      raise SlurmError(str(e))

  def popen(self, host, argv, **kwargs):
    kwargs.setdefault("env", self.env())
    return self.cluster.popen(host, argv, **kwargs)

  def nodes(self):
    """dict node name -> its state in lower case as sinfo prints it ("idle", "alloc", "down*")."""
    proc = self.run(CONTROLLER, ["sinfo", "-h", "-N", "-o", "%N %t"], timeout=15)
    return dict(line.split() for line in proc.stdout.splitlines() if line.strip())

  def wait_for_nodes(self, state, hosts, timeout):
    """Waits until every host in `hosts` is in `state` (sinfo's short form, e.g. "idle")."""
    deadline = time.time() + timeout
    while True:
      nodes = self.nodes()
      if all(nodes.get(host) == state for host in hosts):
        return nodes
      if time.time() > deadline:
        raise SlurmError("nodes not %s after %d s: %s\n%s" % (state, timeout, nodes,
                                                              self.logs_tail()))
      time.sleep(0.5)

  def controller_log(self):
    with open(os.path.join(self.work_dir, "slurmctld.log")) as f:
      return f.read()

  def slurmd_log(self, host):
    """The log of `host`'s slurmd (on that host's own disk), "" before it wrote one."""
    return _read_if_there(os.path.join(self.cluster.disk(host), os.path.basename(self.node_local),
                                       "slurmd.log")) or ""

  def logs_tail(self, chars=3000):
    """The last `chars` of the controller's log and of each slurmd's, for an error message: a
    step that never starts on a node is told only by that node's slurmd."""
    parts = [("slurmctld", self.controller_log())] + [
        ("slurmd on %s" % host, self.slurmd_log(host)) for host in HOSTS]
    return "\n".join("%s log:\n%s" % (name, text[-chars:]) for name, text in parts)

  def submit(self, argv, host=CONTROLLER, cwd=None, env=None):
    """`sbatch --parsable ARGV` on `host` (in `cwd`, with `env`: default `env()`); returns the job
    id (int)."""
    proc = self.run(host, ["sbatch", "--parsable"] + list(argv), timeout=30, cwd=cwd,
                    env=env or self.env())
    return int(proc.stdout.strip().split(";")[0])

  def job(self, job_id):
    """`scontrol show job` as a dict (JobState, ExitCode, Restarts, NodeList, Reason, ...); the
    job id an int, or "JOB_TASK" for a task of an array job."""
    proc = self.run(CONTROLLER, ["scontrol", "show", "job", "-o", str(job_id)], timeout=15)
    return parse_scontrol(proc.stdout)

  def wait_for_job(self, job_id, states, timeout, restarts=None, output_file=None):
    """Waits until the job is in one of `states` (and has `restarts` restarts when given).

    Returns:
      the job's dict (see `job`).
    Raises:
      SlurmError: after `timeout` seconds, with the job's state, the tails of the daemons' logs
        and of the job's `output_file` when given.
    """
    deadline = time.time() + timeout
    while True:
      job = self.job(job_id)
      if job["JobState"] in states and (restarts is None or int(job["Restarts"]) >= restarts):
        return job
      if time.time() > deadline:
        output = ""
        if output_file:
          text = _read_if_there(output_file)
          output = ("\nno job output at %s" % output_file if text is None
                    else "\njob output %s:\n%s" % (output_file, text[-3000:]))
        raise SlurmError("job %s not %s (restarts %s) after %d s: %s\n%s%s" % (
            job_id, "/".join(states), restarts, timeout, job, self.logs_tail(), output))
      time.sleep(0.5)


def _read_if_there(path):
  """The text of the file at `path` (undecodable bytes replaced), None when there is none."""
  try:
    with open(path, errors="replace") as f:
      return f.read()
  except FileNotFoundError:
    return None


def parse_scontrol(text):
  """`scontrol show ... -o` output (one record, `Key=Value` pairs) as a dict of strings."""
  fields = {}
  # Values may hold spaces only in the last fields (Command, WorkDir paths do not here).
  for match in re.finditer(r"(\w[\w:/]*)=(\S*)", text):
    fields.setdefault(match.group(1), match.group(2))
  return fields


def main(argv=None):
  args = cluster_lib.command_arguments(
      "Start the 2-host cluster and Slurm on it, run a command on hostA, tear down.", argv)
  cluster_lib.install_packages()
  install_packages()
  with cluster_lib.Cluster() as cluster:
    slurm = SlurmCluster(cluster).start()
    try:
      print("[slurm] partition %s, nodes %s, SLURM_CONF=%s" % (
          PARTITION, ",".join(HOSTS), slurm.conf), file=sys.stderr, flush=True)
      proc = subprocess.run(cluster.on_host(CONTROLLER, args.command), env=slurm.env(),
                            timeout=args.timeout)
    finally:
      slurm.stop()
  return proc.returncode


if __name__ == "__main__":
  sys.exit(main())
