"""scripts/supervisor.py without processes: a fake launcher, probe and clock."""

import os

import pytest

from scripts import supervisor
from utils.core import errors

SCRIPT = ["python", "run_pretraining.py", "--output_dir=/out", "--train_batch_size=8",
          "--num_accumulation_steps=1", "--learning_rate=1e-3"]
TWO_HOSTS = ["horovodrun", "-np", "4", "-H", "hostA:2,hostB:2", "--gloo"] + SCRIPT


class Fake(object):
  """A launcher returning the given results in turn, a probe of a fixed set of live hosts, and a
  clock that records the sleeps."""

  def __init__(self, results, alive=("hostA", "hostB")):
    self.results = list(results)
    self.alive = set(alive)
    self.launched = []
    self.sleeps = []
    self.lines = []
    self.probed = []

  def launch(self, argv):
    self.launched.append(list(argv))
    result = self.results.pop(0)
    if isinstance(result, int):
      return supervisor.LaunchResult(result, [], False)
    return result

  def probe(self, host):
    self.probed.append(host)
    return host in self.alive

  def run(self, argv=TWO_HOSTS, **kwargs):
    return supervisor.supervise(argv, self.launch, self.probe, self.sleeps.append,
                                self.lines.append, **kwargs)


def test_success_at_once_launches_once():
  fake = Fake([0])
  assert fake.run() == 0
  assert fake.launched == [TWO_HOSTS] and fake.sleeps == []


@pytest.mark.parametrize("code", [2, 75])
def test_bad_input_and_graceful_stop_are_never_restarted(code):
  fake = Fake([code, 0])
  assert fake.run(max_restarts=5) == code
  assert len(fake.launched) == 1 and fake.sleeps == []
  assert "not restarted" in fake.lines[-1]


@pytest.mark.parametrize("code", [2, 75])
def test_horovodrun_exit_1_naming_a_worker_status_follows_that_status(code):
  # horovodrun exits 1 and prints the first failed worker's status.
  tail = ["Process name: 1\n", "Exit code: %d\n" % code]
  fake = Fake([supervisor.LaunchResult(1, tail, False), 0])
  assert fake.run(max_restarts=5) == code
  assert len(fake.launched) == 1


def test_a_signalled_launcher_is_not_restarted():
  fake = Fake([supervisor.LaunchResult(143, [], True), 0])
  assert fake.run(max_restarts=5) == 143
  assert len(fake.launched) == 1


def test_a_signalled_job_that_stopped_gracefully_ends_with_75_under_horovodrun():
  # The workers got the signal, saved and exited 75; horovodrun itself exits 1 naming it.
  fake = Fake([supervisor.LaunchResult(1, ["Exit code: 75\n"], True), 0])
  assert fake.run(max_restarts=5) == 75
  assert len(fake.launched) == 1
  assert any("status 75 (stopped, checkpoint written" in line for line in fake.lines)


# A machine's processes: (pid, parent pid, arguments).
PROCESSES = [
    (1, 0, ["/sbin/init"]),
    (10, 1, ["python", "supervise.py", "--", "horovodrun", "python", "run_pretraining.py"]),
    (11, 10, ["/usr/bin/python3", "/usr/bin/horovodrun", "-np", "2", "python",
              "run_pretraining.py", "--output_dir=/o"]),
    (12, 11, ["/bin/sh", "-c", "cd /w && python run_pretraining.py --output_dir=/o"]),
    (13, 12, ["python", "run_pretraining.py", "--output_dir=/o"]),
    (14, 11, ["/bin/sh", "-c", "python run_pretraining.py --output_dir=/o"]),
    (15, 14, ["/venv/bin/python", "/w/run_pretraining.py", "--output_dir=/o"]),
    (16, 11, ["ssh", "hostB", "python", "run_pretraining.py"]),  # the remote ones' ssh
    (17, 15, ["python", "-c", "from multiprocessing.spawn import spawn_main"]),
    (20, 1, ["python", "run_pretraining.py", "--output_dir=/other"]),  # another job's
    (30, 1, ["mpirun", "-np", "2", "python", "run_pretraining.py"]),
    (31, 30, ["orted", "run_pretraining.py"]),
    (32, 30, ["python", "run_pretraining.py"]),
]


def test_signals_go_to_the_launchers_workers_not_to_launchers_shells_or_other_jobs():
  assert supervisor.worker_pids(11, "run_pretraining.py", PROCESSES) == [13, 15]
  assert supervisor.worker_pids(11, "/w/run_pretraining.py", PROCESSES) == [13, 15]
  assert supervisor.worker_pids(30, "run_pretraining.py", PROCESSES) == [32]
  assert supervisor.worker_pids(11, "other.py", PROCESSES) == []
  assert supervisor.worker_pids(11, None, PROCESSES) == []
  assert supervisor.worker_pids(99, "run_pretraining.py", PROCESSES) == []


def test_processes_list_this_one_under_its_parent_with_its_arguments():
  with open("/proc/self/cmdline", "rb") as f:
    own_arguments = [a.decode() for a in f.read().split(b"\0") if a]
  listed = supervisor.list_processes()
  assert [p for p in listed if p[0] == os.getpid()] == [(os.getpid(), os.getppid(),
                                                          own_arguments)]
  assert [p for p in listed if p[0] == os.getppid()][0][1] != os.getppid()
  assert len({pid for pid, _, _ in listed}) == len(listed) > 2


def test_failures_restart_with_exponential_backoff_until_success():
  fake = Fake([1, 137, 255, 0])
  assert fake.run(max_restarts=3, backoff_secs=5, max_backoff_secs=600) == 0
  assert fake.launched == [TWO_HOSTS] * 4  # the same command: it resumes by itself
  assert fake.sleeps == [5, 10, 20]


def test_backoff_is_capped():
  fake = Fake([1] * 6)
  assert fake.run(max_restarts=5, backoff_secs=10, max_backoff_secs=25) == 1
  assert fake.sleeps == [10, 20, 25, 25, 25]


def test_restarts_stop_at_max_restarts_with_the_last_status():
  fake = Fake([1, 1, 134, 0])
  assert fake.run(max_restarts=2, backoff_secs=1) == 134
  assert len(fake.launched) == 3 and fake.sleeps == [1, 2]
  assert "giving up" in fake.lines[-1]


def test_zero_restarts_runs_once():
  fake = Fake([1, 0])
  assert fake.run(max_restarts=0) == 1
  assert len(fake.launched) == 1


def test_without_min_workers_no_host_is_probed():
  fake = Fake([1, 0], alive=("hostA",))
  assert fake.run(max_restarts=1) == 0
  assert fake.probed == [] and fake.launched[1] == TWO_HOSTS


def test_lost_host_shrinks_the_job_keeping_global_batch_and_job_learning_rate():
  fake = Fake([1, 0], alive=("hostA",))
  assert fake.run(max_restarts=1, min_workers=2, backoff_secs=1) == 0
  relaunched = fake.launched[1]
  # 8 x 1 x 4 workers = 32 = 8 x 2 x 2 workers; 1e-3 x 4 workers = 2e-3 x 2 workers.
  assert relaunched == ["horovodrun", "-np", "2", "-H", "hostA:2", "--gloo", "python",
                        "run_pretraining.py", "--output_dir=/out", "--train_batch_size=8",
                        "--num_accumulation_steps=2", "--learning_rate=0.002"]
  line = next(line for line in fake.lines if line.startswith("continuing"))
  assert line.startswith("continuing on 2 workers (host hostB lost): --num_accumulation_steps 1 "
                         "-> 2, global batch 32 unchanged; --learning_rate 0.001 -> 0.002")
  assert "0.002 x 2 = 0.004 unchanged" in line


def test_a_live_host_set_relaunches_the_same_command():
  fake = Fake([1, 0])
  assert fake.run(max_restarts=1, min_workers=2) == 0
  assert fake.launched[1] == TWO_HOSTS and sorted(fake.probed) == ["hostA", "hostB"]


def test_below_min_workers_gives_up_with_the_job_status():
  fake = Fake([255, 0], alive=("hostA",))
  assert fake.run(max_restarts=3, min_workers=3) == 255
  assert len(fake.launched) == 1 and "below --min_workers=3" in fake.lines[-1]


def test_shrink_space_separated_flags_and_defaults():
  argv = ["mpirun", "--np", "4", "--host", "a:2,b:2", "--allow-run-as-root", "python",
          "run_pretraining.py", "--train_batch_size", "4", "--learning_rate", "3e-4"]
  new, _ = supervisor.shrink(argv, [("b", 2)], ["a"])
  # 4 x 1 (default accumulation) x 4 = 16 = 4 x 2 x 2; the job's rate 3e-4 x 4 = 6e-4 x 2.
  assert new == ["mpirun", "--np", "2", "--host", "b:2", "--allow-run-as-root", "python",
                 "run_pretraining.py", "--train_batch_size", "4", "--learning_rate", "0.0006",
                 "--num_accumulation_steps=2"]


def test_shrink_with_script_defaults():
  argv = ["horovodrun", "-np=2", "-H=x:1,y:1", "python", "run_pretraining.py"]
  new, _ = supervisor.shrink(argv, [("y", 1)], ["x"])
  # Defaults: batch 32, accumulation 1, learning rate 5e-5 per worker.
  assert new == ["horovodrun", "-np=1", "-H=y:1", "python", "run_pretraining.py",
                 "--num_accumulation_steps=2", "--learning_rate=0.0001"]


def test_shrink_to_a_count_that_does_not_divide_the_global_batch_is_a_usage_error():
  argv = ["horovodrun", "-np", "6", "-H", "a:2,b:2,c:2", "python", "run_pretraining.py",
          "--train_batch_size=4", "--num_accumulation_steps=1"]
  # Global batch 24; on 4 workers 24 / (4 x 4) is not whole; 1, 2, 3 and 6 workers divide it.
  with pytest.raises(errors.UsageError, match=r"cannot continue on 4 workers \(b lost\).*"
                                              r"global batch 24.*that keep it: 1, 2, 3, 6$"):
    supervisor.shrink(argv, [("a", 2), ("c", 2)], ["b"])


def test_shrink_error_ends_the_supervision_with_exit_2():
  argv = ["horovodrun", "-np", "3", "-H", "a:1,b:1,c:1", "python", "run_pretraining.py",
          "--train_batch_size=1", "--num_accumulation_steps=1"]
  fake = Fake([1, 0], alive=("a", "c"))
  status = errors.run_reporting_errors(
      "supervise.py", lambda: fake.run(argv, max_restarts=1, min_workers=1))
  assert status == 2 and len(fake.launched) == 1


@pytest.mark.parametrize("kwargs, argv, message", [
    (dict(max_restarts=-1), TWO_HOSTS, r"--max_restarts=-1"),
    (dict(min_workers=5), TWO_HOSTS, r"--min_workers=5 is above .*-np 4 on 4 slots"),
    (dict(min_workers=3), ["horovodrun", "-np", "2", "-H", "a:2,b:2"] + SCRIPT,
     r"--min_workers=3 is above .*-np 2"),
    (dict(min_workers=0), TWO_HOSTS, r"--min_workers=0"),
    (dict(min_workers=1), ["horovodrun", "-np", "2"] + SCRIPT, r"--min_workers needs .*-H"),
    (dict(min_workers=1), ["horovodrun", "-np", "2", "-H", "a:2", "sh", "x.sh"],
     r"--min_workers needs the training script"),
    (dict(min_workers=1), ["horovodrun", "-np", "2", "-H", "a:2,b", "python", "t.py",
                           "--learning_rate=fast"], r"--learning_rate=fast"),
    (dict(), [], r"no launcher command"),
])
def test_bad_input_is_a_usage_error_before_any_launch(kwargs, argv, message):
  fake = Fake([0])
  with pytest.raises(errors.UsageError, match=message):
    fake.run(argv, **kwargs)
  assert fake.launched == []


def test_parse_hosts():
  assert supervisor.parse_hosts("a:2,b") == [("a", 2), ("b", 1)]
  with pytest.raises(errors.UsageError, match="host list"):
    supervisor.parse_hosts("a:two")


def test_local_hosts_are_alive_without_probe():
  # A probe that would fail: this machine's names never run it (the test starts no process).
  assert supervisor.command_probe("exit 1")("localhost")


@pytest.mark.e2e
def test_command_probe_runs_the_command_for_the_host():
  assert not supervisor.command_probe("exit 1")("hostB")
  assert supervisor.command_probe("test {host} = b")("b")
  assert not supervisor.command_probe("test {host} = b")("c")
  assert not supervisor.command_probe("sleep 5", timeout=0.5)("c")


def test_script_defaults_match_the_training_flags():
  from absl import flags
  from utils.training import flags as training_flags  # noqa: F401 (defines the flags)
  for name, default in supervisor.SCRIPT_DEFAULTS.items():
    assert flags.FLAGS[name].default == default, name


def test_horovodrun_network_interface_is_dropped_when_only_this_machine_is_left():
  argv = ["horovodrun", "-np", "2", "-H", "a:1,b:1", "--gloo", "--network-interface", "eth1",
          "python", "run_pretraining.py", "--train_batch_size=2"]
  new, line = supervisor.shrink(argv, [("a", 1)], ["b"], is_local=lambda host: host == "a")
  assert new[:6] == ["horovodrun", "-np", "1", "-H", "a:1", "--gloo"] and new[6] == "python"
  assert line.endswith("horovodrun's --network-interface dropped (only this machine is left: "
                       "horovodrun uses the loopback)")
  # Another machine left: kept.
  new, line = supervisor.shrink(argv, [("b", 1)], ["a"], is_local=lambda host: host == "a")
  assert new[5:8] == ["--gloo", "--network-interface", "eth1"] and "dropped" not in line
