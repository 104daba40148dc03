"""Runs a supervised job's launcher command and passes the supervisor's stop signals on.

`ProcessLauncher.launch` runs the command in a session of its own, copies its output and returns
a `LaunchResult` for the supervisor's rules (scripts/supervisor.py); a SIGTERM / SIGINT / SIGUSR1
to the supervisor goes to the job's workers on this machine (`worker_pids`), not to the launcher
(docs/LONG_RUNS.md "Launchers"), and the launcher dies with the supervisor.
"""

import collections
import functools
import os
import signal
import subprocess
import sys
import threading

import psutil

from scripts import launch_command
from scripts import launcher_output
from utils.runtime import worker_pool

# Launcher output lines kept, where the supervisor finds horovodrun's "Exit code: N" report
# (supervisor.effective_exit_code).
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
      index = launch_command.script_index(argv)
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
