"""scripts/supervisor.py without processes: a fake launcher, probe and clock."""

import pytest

from scripts import process_launcher
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
      return process_launcher.LaunchResult(result, [], False)
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
  fake = Fake([process_launcher.LaunchResult(1, tail, False), 0])
  assert fake.run(max_restarts=5) == code
  assert len(fake.launched) == 1


def test_a_signalled_launcher_is_not_restarted():
  fake = Fake([process_launcher.LaunchResult(143, [], True), 0])
  assert fake.run(max_restarts=5) == 143
  assert len(fake.launched) == 1


def test_a_signalled_job_that_stopped_gracefully_ends_with_75_under_horovodrun():
  # The workers got the signal, saved and exited 75; horovodrun itself exits 1 naming it.
  fake = Fake([process_launcher.LaunchResult(1, ["Exit code: 75\n"], True), 0])
  assert fake.run(max_restarts=5) == 75
  assert len(fake.launched) == 1
  assert any("status 75 (stopped, checkpoint written" in line for line in fake.lines)


@pytest.mark.parametrize("signalled", [True, False])
@pytest.mark.parametrize("stop", ["at update 5; checkpoint written",
                                  "at update 5; no checkpoint written by this worker",
                                  "before the first update: nothing to save"])
def test_horovodrun_exit_0_after_a_worker_stop_line_is_a_graceful_stop(signalled, stop):
  # horovodrun 0.28.1, signalled itself, can exit 0 though both workers stopped and exited 75.
  tail = ["[1]<stderr>:run_pretraining.py: stopped by SIGTERM %s; run the same command to "
          "resume\n" % stop, "[0]<stdout>:done\n"]
  fake = Fake([process_launcher.LaunchResult(0, tail, signalled), 0])
  assert fake.run(max_restarts=5) == 75
  assert len(fake.launched) == 1
  assert "not restarted" in fake.lines[-1]


def test_exit_0_without_a_stop_line_is_a_finished_job():
  fake = Fake([process_launcher.LaunchResult(0, ["[0]<stdout>:stopped by nothing\n"], False), 0])
  assert fake.run(max_restarts=5) == 0
  assert fake.lines[-1] == "the job finished"


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


def test_local_hosts_are_alive_without_probe():
  # A probe that would fail: this machine's names never run it (the test starts no process).
  assert supervisor.command_probe("exit 1")("localhost")


@pytest.mark.e2e
def test_command_probe_runs_the_command_for_the_host():
  assert not supervisor.command_probe("exit 1")("hostB")
  assert supervisor.command_probe("test {host} = b")("b")
  assert not supervisor.command_probe("test {host} = b")("c")
  assert not supervisor.command_probe("sleep 5", timeout=0.5)("c")
