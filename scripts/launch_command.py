"""The launcher command of a supervised job, read and rewritten for fewer workers.

A launcher command is `horovodrun` / `mpirun` with its own flags, then the training script and
its flags, e.g. ['horovodrun', '-np', '4', '-H', 'a:2,b:2', 'python', 'run_pretraining.py', ...].
Here its workers (`-np`) and hosts (`-H` / `--hosts`) and the script's batch, accumulation and
learning rate are read (`launch_layout`, `script_values`), and `shrink` rewrites it for the hosts
that still answer (docs/LONG_RUNS.md "Supervisor"): the dead hosts are dropped, `-np` is reduced,
`--num_accumulation_steps` raised and `--learning_rate` (per worker: the job's is it x workers)
scaled by old / new workers, so that the global batch and the job's learning rate stay the same.
A worker count that does not divide the global batch is a UsageError naming the counts that
would. No effects: plain lists in, plain lists out.
"""

from utils.core import errors

# The launcher's flags for the number of workers and for the host list, by launcher.
NP_FLAGS = ("-np", "--num-proc", "-n", "--np")
HOSTS_FLAGS = ("-H", "--hosts", "--host")
# horovodrun's interface flags: with only local hosts left it uses the loopback and refuses any
# other interface ("No interface is found for address 127.0.0.1"), so they are dropped then.
HOROVODRUN_NIC_FLAGS = ("--network-interface", "--network-interfaces")
# The training script's flags that the supervisor rewrites, and their defaults there
# (utils/training/flags.py; tests/test_scripts_launch_command.py checks they agree).
SCRIPT_DEFAULTS = {"train_batch_size": 32, "num_accumulation_steps": 1, "learning_rate": 5e-5}


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


def script_index(argv):
  """Index of the training script (`run_pretraining.py`, ...) in `argv`; None when absent."""
  for i, arg in enumerate(argv):
    if arg.endswith(".py"):
      return i
  return None


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
  end = script_index(argv)
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
  start = script_index(argv)
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
  end = script_index(argv)
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
