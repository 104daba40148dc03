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

With `min_workers`, before each relaunch the hosts of `-H` / `--hosts` are probed and the command
is rewritten for those that answer (`launch_command.shrink`: fewer workers, the same global batch
and learning rate).

`supervise` takes its effects as arguments (the launcher, the probe, the clock, the log), so it is
tested without processes; the real ones are `process_launcher.ProcessLauncher` (which runs the
command and passes the supervisor's signals on to the workers) and the probe, host check and
sleep below.
"""

import re
import shlex
import socket
import subprocess
import time

from scripts import launch_command
from utils.core import errors
from utils.runtime import stop_signals

# Host names that are this machine: alive without a probe.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
DEFAULT_PROBE = "ssh -o BatchMode=yes -o ConnectTimeout=5 {host} true"
# horovodrun's report of the first worker that failed.
_HOROVODRUN_EXIT = re.compile(r"Exit code:\s*(-?\d+)")


# ---- the arguments

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
  errors.require(launch_command.script_index(argv) is not None,
                 "--min_workers needs the training script (a .py file) in the command, to "
                 "rewrite its --num_accumulation_steps and --learning_rate")
  workers, hosts = launch_command.launch_layout(argv)
  errors.require(workers is not None and hosts is not None,
                 "--min_workers needs the launcher's -np and -H (host:slots,...) in the command")
  slots = sum(k for _, k in hosts)
  errors.require(min_workers <= min(workers, slots),
                 "--min_workers=%d is above the workers the command gives (-np %d on %d slots of "
                 "-H %s)", min_workers, workers, slots, launch_command.format_hosts(hosts))
  launch_command.script_values(argv)


# ---- the rules

def effective_exit_code(returncode, output_tail):
  """The job's status as the rules see it: horovodrun's "Exit code: N" of its first failed worker
  when it exited 1 and printed one; 75 when the launcher exited 0 after a worker's stop line
  (`stop_signals.stop_message`); else the launcher's own status."""
  if returncode == 0 and any(stop_signals.STOP_MESSAGE.search(line)
                             for line in output_tail):
    # horovodrun 0.28.1 signalled itself may exit 0 though its workers stopped and exited 75: it
    # reaps a worker's shell in two threads, and the loser reads status 0 (docs/LONG_RUNS.md).
    return errors.STOP_EXIT_CODE
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
    launch: function(argv) -> `process_launcher.LaunchResult` (runs the command to its end).
    probe: function(host) -> bool, the host answers.
    sleep: function(seconds).
    log: function(line) (one line per event).
    max_restarts: relaunches allowed (0: none).
    backoff_secs, max_backoff_secs: see `backoff`.
    min_workers: None: always relaunch the same command; else drop dead hosts and continue while
      at least this many workers remain.
    is_local: see `launch_command.shrink`.

  Returns:
    0, or the status the job ended with (horovodrun's worker status when it printed one).

  Raises:
    errors.UsageError: bad arguments (`check_command`), or no worker count that keeps the global
      batch (`launch_command.shrink`).
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
      workers, hosts = launch_command.launch_layout(argv)
      alive, lost = probe_hosts(hosts, probe)
      if lost:
        remaining = min(workers, sum(k for _, k in alive))
        if remaining < min_workers:
          log("the job ended with status %d; %s lost, %d worker(s) left, below --min_workers=%d: "
              "giving up" % (code, ", ".join(lost), remaining, min_workers))
          return code
        argv, line = launch_command.shrink(argv, alive, lost, is_local)
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
