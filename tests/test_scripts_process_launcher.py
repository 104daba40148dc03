"""scripts/process_launcher.py without a launch: which processes a forwarded signal goes to, and
this machine's process list (the launches themselves: tests/test_supervise.py)."""

import os

from scripts import process_launcher


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
  assert process_launcher.worker_pids(11, "run_pretraining.py", PROCESSES) == [13, 15]
  assert process_launcher.worker_pids(11, "/w/run_pretraining.py", PROCESSES) == [13, 15]
  assert process_launcher.worker_pids(30, "run_pretraining.py", PROCESSES) == [32]
  assert process_launcher.worker_pids(11, "other.py", PROCESSES) == []
  assert process_launcher.worker_pids(11, None, PROCESSES) == []
  assert process_launcher.worker_pids(99, "run_pretraining.py", PROCESSES) == []


def test_processes_list_this_one_under_its_parent_with_its_arguments():
  with open("/proc/self/cmdline", "rb") as f:
    own_arguments = [a.decode() for a in f.read().split(b"\0") if a]
  listed = process_launcher.list_processes()
  assert [p for p in listed if p[0] == os.getpid()] == [(os.getpid(), os.getppid(),
                                                          own_arguments)]
  assert [p for p in listed if p[0] == os.getppid()][0][1] != os.getppid()
  assert len({pid for pid, _, _ in listed}) == len(listed) > 2
