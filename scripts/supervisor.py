"""Keeps a training job alive: relaunches its launcher command after a lost worker or host.

`supervise` runs a launcher command (`horovodrun`, `mpirun`, or `run_pretraining.py` alone) and,
when the job ends with a failure a relaunch may cure, runs it again: the script resumes from the
newest checkpoint of its `--output_dir` by itself. The rules (docs/LONG_RUNS.md "Supervisor"):

  exit 0                      done: the supervisor exits 0
  exit 2 (USAGE_EXIT_CODE)    bad input or a full disk: never restarted (a rerun repeats it)
  exit 75 (STOP_EXIT_CODE)    stopped by a signal with its state saved: not restarted (whoever
                              sent the signal wants the job stopped; it resumes when run again)
  the supervisor signalled    SIGTERM / SIGINT / SIGUSR1 go to the job's workers on this machine
                              (the graceful stop: they agree on the update to stop at, save it
                              and exit 75), else to the launcher; nothing is restarted
  anything else               a lost rank or host, a kill: restarted, at most `max_restarts`
                              times, after `backoff_secs` x 2^(n-1) seconds (capped)

`horovodrun` exits 1 whatever its first failing worker's status and prints "Exit code: N"; the
supervisor reads that line from the launcher's output and applies the rules to N.

With `min_workers`, before each relaunch the hosts of `-H` / `--hosts` are probed; the dead ones
are dropped, `-np` is reduced, `--num_accumulation_steps` raised and `--learning_rate` (per
worker: the job's is it x workers) scaled by old / new workers, so that the global batch and the
job's learning rate stay the same. A worker count that does not divide the global batch is a
UsageError naming the counts that would.

Everything here takes its effects as arguments (the launcher, the probe, the clock, the log), so
it is tested without processes.
"""

import collections
import functools
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil

from scripts import launcher_output
from utils.core import errors
from utils.runtime import worker_pool

# The launcher's flags for the number of workers and for the host list, by launcher.
NP_FLAGS = ("-np", "--num-proc", "-n", "--np")
HOSTS_FLAGS = ("-H", "--hosts", "--host")
# horovodrun's interface flags: with only local hosts left it uses the loopback and refuses any
# other interface ("No interface is found for address 127.0.0.1"), so they are dropped then.
HOROVODRUN_NIC_FLAGS = ("--network-interface", "--network-interfaces")
# The training script's flags that the supervisor rewrites, and their defaults there
# (utils/training/flags.py; tests/test_scripts_supervisor.py checks they agree).
SCRIPT_DEFAULTS = {"train_batch_size": 32, "num_accumulation_steps": 1, "learning_rate": 5e-5}
# Host names that are this machine: alive without a probe.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
DEFAULT_PROBE = "ssh -o BatchMode=yes -o ConnectTimeout=5 {host} true"
# horovodrun's report of the first worker that failed.
_HOROVODRUN_EXIT = re.compile(r"Exit code:\s*(-?\d+)")
# Launcher output lines kept to find that report.
TAIL_LINES = 200
# Seconds after the launcher's end within which its output must close (ProcessLauncher.launch).
LEFTOVER_GRACE_SECS = 5
# The signals the supervisor passes on (the graceful stop's, utils/runtime/stop_signals.py).
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
# Programs that start workers and are not workers themselves, though their command lines name the
# training script: a forwarded signal skips them (they would kill the workers a few seconds later).
LAUNCHER_PROGRAMS = frozenset(["horovodrun", "mpirun", "mpiexec", "orterun", "orted", "prterun",
                               "prted", "ssh", "srun"])

# The signal the launcher gets when the supervisor dies, however it dies (kill -9 included): the
# launchers pass it to the workers, which stop (gracefully if there is time) and free the output
# directory's lock, instead of training on unsupervised.
LAUNCHER_DEATH_SIGNAL = signal.SIGTERM

# What one launch gave: its exit status, the last lines of its output, and whether the
# supervisor forwarded a signal to it.
LaunchResult = collections.namedtuple("LaunchResult", ["returncode", "output_tail", "signalled"])


# ---- the command

def _find_flag(argv, names):
  """(index, value, uses_equals) of the first of `names` in `argv`, or None.

  Both `--flag value` and `--flag=value` are found.
  """
  for i, arg in enumerate(argv):
    for name in names:
      if arg == name and i + 1 < len(argv):
        return i, argv[i + 1], False
      if arg.startswith(name + "="):
        return i, arg[len(name) + 1:], True
  return None


def _set_flag(argv, names, value, append_as=None):
  """A copy of `argv` with the flag of `names` set to `value` (appended as `append_as` if
  absent)."""
  argv = list(argv)
  found = _find_flag(argv, names)
  if found is None:
    if append_as is None:
      raise ValueError("none of %s in the command" % (names,))
    return argv + ["%s=%s" % (append_as, value)]
  i, _, uses_equals = found
  if uses_equals:
    argv[i] = "%s=%s" % (argv[i].split("=", 1)[0], value)
  else:
    argv[i + 1] = str(value)
  return argv


def _drop_flag(argv, names):
  """A copy of `argv` without the flags of `names` (and their values)."""
  argv = list(argv)
  while True:
    found = _find_flag(argv, names)
    if found is None:
      return argv
    i, _, uses_equals = found
    del argv[i:i + (1 if uses_equals else 2)]


def _script_index(argv):
  """Index of the training script (`run_pretraining.py`, ...) in `argv`; None when absent."""
  for i, arg in enumerate(argv):
    if arg.endswith(".py"):
      return i
  return None


def worker_pids(launcher_pid, script, processes):
  """The pids of the job's workers on this machine: the descendants of the launcher that run
  `script`.

  Args:
    launcher_pid: the launcher's pid.
    script: the training script of the command (`run_pretraining.py` or a path to it); None: none.
    processes: [(pid, parent pid, [command-line arguments])] of this machine's processes.

  Returns:
    Sorted pids of the processes below `launcher_pid` with an argument naming `script` (a whole
    argument, so a shell running `-c "... run_pretraining.py ..."` is not one), none of whose
    first two arguments is a launcher program (horovodrun, mpirun, orted, ssh, ...: they name the
    script too). Empty when `script` is None.
  """
  if script is None:
    return []
  name = os.path.basename(script)
  children = collections.defaultdict(list)
  for pid, ppid, args in processes:
    children[ppid].append((pid, args))
  found, pending = [], [launcher_pid]
  while pending:
    for pid, args in children.get(pending.pop(), ()):
      pending.append(pid)
      programs = {os.path.basename(a) for a in args[:2]}
      if (any(os.path.basename(a) == name for a in args)
          and not programs & LAUNCHER_PROGRAMS):
        found.append(pid)
  return sorted(found)


def list_processes():
  """[(pid, parent pid, [arguments])] of this machine's processes; processes that end while being
  read are left out, and one whose arguments cannot be read (a zombie, another user's) has []."""
  return [(process.info["pid"], process.info["ppid"], process.info["cmdline"] or [])
          for process in psutil.process_iter(["pid", "ppid", "cmdline"])]


def parse_hosts(value):
  """'hostA:2,hostB:2' -> [('hostA', 2), ('hostB', 2)] (a host without ':k' has 1 slot).

  Raises:
    errors.UsageError: a malformed entry.
  """
  hosts = []
  for entry in value.split(","):
    name, _, slots = entry.strip().partition(":")
    errors.require(name and (not slots or slots.isdigit()) and slots != "0",
                   "the launcher's host list %r: expected host[:slots],host[:slots],...", value)
    hosts.append((name, int(slots) if slots else 1))
  return hosts


def format_hosts(hosts):
  return ",".join("%s:%d" % host for host in hosts)


def launch_layout(argv):
  """The workers and hosts of a launcher command.

  Args:
    argv: the launcher command, e.g. ['horovodrun', '-np', '4', '-H', 'a:2,b:2', 'python',
      'run_pretraining.py', ...].

  Returns:
    (workers, hosts): `-np`'s value (None when absent) and `parse_hosts` of `-H` (None when absent).
    Only the launcher's part (before the script) is searched.
  """
  end = _script_index(argv)
  launcher = argv[:end] if end is not None else argv
  np_flag = _find_flag(launcher, NP_FLAGS)
  hosts_flag = _find_flag(launcher, HOSTS_FLAGS)
  workers = None
  if np_flag is not None:
    errors.require(np_flag[1].isdigit() and int(np_flag[1]) > 0,
                   "the launcher's %s: expected a positive number, got %r",
                   launcher[np_flag[0]].split("=")[0], np_flag[1])
    workers = int(np_flag[1])
  return workers, parse_hosts(hosts_flag[1]) if hosts_flag is not None else None


def script_values(argv):
  """The training script's train_batch_size, num_accumulation_steps and learning_rate in `argv`
  (its defaults for those not given): dict name -> int / float."""
  start = _script_index(argv)
  script = argv[start:] if start is not None else []
  values = {}
  for name, default in SCRIPT_DEFAULTS.items():
    found = _find_flag(script, ("--" + name,))
    if found is None:
      values[name] = default
      continue
    try:
      values[name] = type(default)(found[1])
    except ValueError:
      raise errors.UsageError("--%s=%s in the training command: expected a %s" % (
          name, found[1], type(default).__name__))
  return values


def _format_float(value):
  return "%.10g" % value


def worker_counts_that_fit(global_batch, train_batch_size, max_workers):
  """Worker counts w <= max_workers for which global_batch = train_batch_size x k x w, k whole."""
  return [w for w in range(1, max_workers + 1) if global_batch % (train_batch_size * w) == 0]


def shrink(argv, alive_hosts, lost_hosts, is_local=None):
  """The command that runs the same job on `alive_hosts` only, and the line that says so.

  Args:
    argv: the launcher command (with -np and -H; the script's flags as `script_values` reads).
    alive_hosts: [(host, slots)] that still answer (in the order of -H).
    lost_hosts: names of the hosts dropped.
    is_local: function(host) -> bool, the host is the machine the launcher runs on; when every
      host left is, horovodrun's --network-interface is dropped (HOROVODRUN_NIC_FLAGS).

  Returns:
    (new argv, log line).

  Raises:
    errors.UsageError: the new worker count does not divide the global batch (the line names the
      counts that would).
  """
  old_workers, _ = launch_layout(argv)
  new_workers = min(old_workers, sum(slots for _, slots in alive_hosts))
  values = script_values(argv)
  batch, accumulation = values["train_batch_size"], values["num_accumulation_steps"]
  global_batch = batch * accumulation * old_workers
  if global_batch % (batch * new_workers):
    raise errors.UsageError(
        "cannot continue on %d workers (%s lost): global batch %d = --train_batch_size %d x "
        "--num_accumulation_steps x workers has no whole number of accumulation steps for %d "
        "workers; worker counts that keep it: %s" % (
            new_workers, ", ".join(lost_hosts), global_batch, batch, new_workers,
            ", ".join(str(w) for w in worker_counts_that_fit(global_batch, batch, old_workers))))
  new_accumulation = global_batch // (batch * new_workers)
  old_lr = values["learning_rate"]
  new_lr = old_lr * old_workers / new_workers
  end = _script_index(argv)
  launcher, script = argv[:end], argv[end:]
  launcher = _set_flag(launcher, NP_FLAGS, new_workers)
  launcher = _set_flag(launcher, HOSTS_FLAGS, format_hosts(alive_hosts))
  note = ""
  if (is_local is not None and launcher and launcher[0].endswith("horovodrun")
      and _find_flag(launcher, HOROVODRUN_NIC_FLAGS) is not None
      and all(is_local(host) for host, _ in alive_hosts)):
    launcher = _drop_flag(launcher, HOROVODRUN_NIC_FLAGS)
    note = ("; horovodrun's --network-interface dropped (only this machine is left: horovodrun "
            "uses the loopback)")
  script = _set_flag(script, ("--num_accumulation_steps",), new_accumulation,
                     append_as="--num_accumulation_steps")
  script = _set_flag(script, ("--learning_rate",), _format_float(new_lr),
                     append_as="--learning_rate")
  line = ("continuing on %d workers (%s lost): --num_accumulation_steps %d -> %d, global batch %d "
          "unchanged; --learning_rate %s -> %s per worker, the job's %s x %d = %s unchanged" % (
              new_workers, "host " + ", ".join(lost_hosts) if len(lost_hosts) == 1 else
              "hosts " + ", ".join(lost_hosts), accumulation, new_accumulation, global_batch,
              _format_float(old_lr), _format_float(new_lr), _format_float(new_lr), new_workers,
              _format_float(new_lr * new_workers))) + note
  return launcher + script, line


def check_command(argv, max_restarts, min_workers):
  """Checks the supervisor's arguments before anything runs.

  Raises:
    errors.UsageError: naming the flag (--max_restarts negative, --min_workers above the workers
      or hosts the command gives, no -np / -H to shrink, no training script).
  """
  errors.require(argv, "no launcher command given (after --)")
  errors.require(max_restarts >= 0, "--max_restarts=%d: expected 0 or more", max_restarts)
  if min_workers is None:
    return
  errors.require(min_workers >= 1, "--min_workers=%d: expected 1 or more", min_workers)
  errors.require(_script_index(argv) is not None,
                 "--min_workers needs the training script (a .py file) in the command, to "
                 "rewrite its --num_accumulation_steps and --learning_rate")
  workers, hosts = launch_layout(argv)
  errors.require(workers is not None and hosts is not None,
                 "--min_workers needs the launcher's -np and -H (host:slots,...) in the command")
  slots = sum(k for _, k in hosts)
  errors.require(min_workers <= min(workers, slots),
                 "--min_workers=%d is above the workers the command gives (-np %d on %d slots of "
                 "-H %s)", min_workers, workers, slots, format_hosts(hosts))
  script_values(argv)


# ---- the rules

def effective_exit_code(returncode, output_tail):
  """The job's status as the rules see it: horovodrun's "Exit code: N" of its first failed worker
  when it exited 1 and printed one, else the launcher's own status."""
  if returncode == 1:
    for line in reversed(output_tail):
      match = _HOROVODRUN_EXIT.search(line)
      if match:
        return int(match.group(1))
  return returncode


def restartable(code):
  """Whether a job that ended with `code` (see `effective_exit_code`) is run again."""
  return code not in (0, errors.USAGE_EXIT_CODE, errors.STOP_EXIT_CODE)


def backoff(restart, backoff_secs, max_backoff_secs):
  """Seconds to wait before restart number `restart` (1, 2, ...): backoff_secs x 2^(restart-1),
  at most max_backoff_secs."""
  return min(backoff_secs * 2 ** (restart - 1), max_backoff_secs)


def probe_hosts(hosts, probe):
  """(alive, lost): the entries of `hosts` [(name, slots)] whose `probe(name)` is true, and the
  names of the others."""
  answers = [(name, slots, probe(name)) for name, slots in hosts]
  return ([(name, slots) for name, slots, ok in answers if ok],
          [name for name, _, ok in answers if not ok])


def supervise(argv, launch, probe, sleep, log, max_restarts=3, backoff_secs=10.0,
              max_backoff_secs=600.0, min_workers=None, is_local=None):
  """Runs `argv` until it succeeds or may not be restarted; returns the exit status.

  Args:
    argv: the launcher command.
    launch: function(argv) -> LaunchResult (runs the command to its end).
    probe: function(host) -> bool, the host answers.
    sleep: function(seconds).
    log: function(line) (one line per event).
    max_restarts: relaunches allowed (0: none).
    backoff_secs, max_backoff_secs: see `backoff`.
    min_workers: None: always relaunch the same command; else drop dead hosts and continue while
      at least this many workers remain.
    is_local: see `shrink`.

  Returns:
    0, or the status the job ended with (horovodrun's worker status when it printed one).

  Raises:
    errors.UsageError: bad arguments (`check_command`), or no worker count that keeps the global
      batch (`shrink`).
  """
  check_command(argv, max_restarts, min_workers)
  restarts = 0
  while True:
    log("launch %d: %s" % (restarts + 1, " ".join(shlex.quote(a) for a in argv)))
    result = launch(argv)
    code = effective_exit_code(result.returncode, result.output_tail)
    if result.signalled:
      log("the job was sent the supervisor's signal and ended with status %d%s: not restarted"
          % (code, " (stopped, checkpoint written; run the same command to resume)"
             if code == errors.STOP_EXIT_CODE else ""))
      return code
    if code == 0:
      log("the job finished")
      return 0
    if not restartable(code):
      reason = ("bad input or a full disk" if code == errors.USAGE_EXIT_CODE else
                "stopped by a signal, checkpoint written")
      log("the job ended with status %d (%s): not restarted" % (code, reason))
      return code
    if restarts >= max_restarts:
      log("the job ended with status %d; %d restart(s) allowed by --max_restarts, all used: "
          "giving up" % (code, max_restarts))
      return code
    restarts += 1
    if min_workers is not None:
      workers, hosts = launch_layout(argv)
      alive, lost = probe_hosts(hosts, probe)
      if lost:
        remaining = min(workers, sum(k for _, k in alive))
        if remaining < min_workers:
          log("the job ended with status %d; %s lost, %d worker(s) left, below --min_workers=%d: "
              "giving up" % (code, ", ".join(lost), remaining, min_workers))
          return code
        argv, line = shrink(argv, alive, lost, is_local)
        log(line)
    delay = backoff(restarts, backoff_secs, max_backoff_secs)
    log("the job ended with status %d (a lost worker or host): restart %d of %d in %g s, "
        "resuming from the newest checkpoint" % (code, restarts, max_restarts, delay))
    sleep(delay)


# ---- the real effects

def command_probe(template, timeout=30):
  """A probe running `template` (with {host}) through the shell: alive when it exits 0.

  Hosts of LOCAL_HOSTS are alive without a probe.
  """
  def probe(host):
    if host in LOCAL_HOSTS:
      return True
    try:
      return subprocess.run(template.format(host=shlex.quote(host)), shell=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
      return False
  return probe


class ProcessLauncher(object):
  """Runs a command in its own session, copying its output (stdout and stderr, merged) to
  `stream`, and passes SIGTERM / SIGINT / SIGUSR1 sent to this process on to the job.

  horovodrun's own traceback after a failed worker's line is left out of the copy unless
  `verbose` (`scripts/launcher_output.py`); the status it names is still read.

  The signal goes to the job's workers on this machine (`worker_pids`), not to the launcher:
  horovodrun SIGKILLs its workers 5 s after passing a SIGTERM on and mpirun 1 s after, too soon for
  the graceful stop (docs/LONG_RUNS.md "Launchers"), while one worker's signal is enough for all of
  them to stop at the same update. With no worker found here (the command names no .py script, or
  runs none on this machine) the launcher gets the signal.

  Should the supervisor die itself, however (kill -9, an out-of-memory kill, a scheduler without
  cgroups ending the job's first process only), the kernel sends the launcher
  `LAUNCHER_DEATH_SIGNAL`: the launcher ends its workers, which free the output directory's lock,
  so a supervisor started again on the same directory finds neither an orphan nor a held lock.

  Call `install_signal_handlers()` once, and `launch` only, from the main thread (the death
  signal is tied to the thread that starts the launcher).
  """

  def __init__(self, stream=None, processes=list_processes, verbose=False):
    self._stream = stream or sys.stdout
    self._processes = processes
    self._verbose = verbose
    self._proc = None
    self._script = None
    self._signalled = False
    # Re-entrant: the signal handler runs in the main thread, which may hold it.
    self._lock = threading.RLock()

  def install_signal_handlers(self):
    for signum in FORWARDED_SIGNALS:
      signal.signal(signum, self._forward)

  def _forward(self, signum, _):
    with self._lock:
      self._signalled = True
      if self._proc is None or self._proc.poll() is not None:
        return
      workers = worker_pids(self._proc.pid, self._script, self._processes())
      for pid in workers:
        try:
          os.kill(pid, signum)
        except OSError:  # ended meanwhile
          pass
      if not workers:
        self._proc.send_signal(signum)

  def launch(self, argv):
    """Runs `argv` to its end; returns a LaunchResult.

    Processes the launcher leaves behind in its session that still hold its output
    `LEFTOVER_GRACE_SECS` after it ended (a worker orphaned by a killed launcher, which would
    keep the output directory's lock) are SIGKILLed before the next launch.
    """
    tail = collections.deque(maxlen=TAIL_LINES)
    with self._lock:
      if self._signalled:
        return LaunchResult(128 + signal.SIGTERM, [], True)
      index = _script_index(argv)
      self._script = argv[index] if index is not None else None
      self._proc = proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           start_new_session=True,
                                           preexec_fn=functools.partial(
                                               worker_pool.die_with_parent, os.getpid(),
                                               LAUNCHER_DEATH_SIGNAL))
    # horovodrun's own traceback after a failed worker's line is left out (--verbose shows it).
    shown = launcher_output.LauncherOutput(
        verbose=self._verbose or os.path.basename(argv[0]) != "horovodrun")
    reader = threading.Thread(target=self._copy, args=(proc.stdout, tail, shown), daemon=True)
    reader.start()
    code = proc.wait()
    reader.join(LEFTOVER_GRACE_SECS)
    if reader.is_alive():
      self._stream.write("supervise: the launcher ended; killing what it left running\n")
      try:
        os.killpg(proc.pid, signal.SIGKILL)
      except OSError:
        pass
      reader.join(LEFTOVER_GRACE_SECS)
    if code < 0:  # killed by a signal: the shell's convention
      code = 128 - code
    return LaunchResult(code, list(tail), self._signalled)

  def _copy(self, pipe, tail, shown):
    """Copies the lines of `pipe` into `tail` and, those `shown` (a
    `launcher_output.LauncherOutput`) passes, to the stream, until its end."""
    for raw in iter(pipe.readline, b""):
      line = raw.decode("utf-8", "replace")
      self._stream.writelines(shown.line(line))
      self._stream.flush()
      tail.append(line)
    self._stream.writelines(shown.end())
    self._stream.flush()
    pipe.close()


def is_this_machine(host):
  """Whether `host` resolves to an address of this machine (a socket can bind to it)."""
  if host in LOCAL_HOSTS:
    return True
  try:
    address = socket.gethostbyname(host)
    if address.startswith("127."):
      return True
    with socket.socket() as sock:
      sock.bind((address, 0))
    return True
  except OSError:
    return False


def real_sleep(seconds):
  time.sleep(seconds)
