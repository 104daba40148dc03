"""scripts/launch_command.py: the launcher command read, and rewritten for fewer workers."""

import pytest

from scripts import launch_command
from utils.core import errors


def test_shrink_space_separated_flags_and_defaults():
  argv = ["mpirun", "--np", "4", "--host", "a:2,b:2", "--allow-run-as-root", "python",
          "run_pretraining.py", "--train_batch_size", "4", "--learning_rate", "3e-4"]
  new, _ = launch_command.shrink(argv, [("b", 2)], ["a"])
  # 4 x 1 (default accumulation) x 4 = 16 = 4 x 2 x 2; the job's rate 3e-4 x 4 = 6e-4 x 2.
  assert new == ["mpirun", "--np", "2", "--host", "b:2", "--allow-run-as-root", "python",
                 "run_pretraining.py", "--train_batch_size", "4", "--learning_rate", "0.0006",
                 "--num_accumulation_steps=2"]


def test_shrink_with_script_defaults():
  argv = ["horovodrun", "-np=2", "-H=x:1,y:1", "python", "run_pretraining.py"]
  new, _ = launch_command.shrink(argv, [("y", 1)], ["x"])
  # Defaults: batch 32, accumulation 1, learning rate 5e-5 per worker.
  assert new == ["horovodrun", "-np=1", "-H=y:1", "python", "run_pretraining.py",
                 "--num_accumulation_steps=2", "--learning_rate=0.0001"]


def test_shrink_to_a_count_that_does_not_divide_the_global_batch_is_a_usage_error():
  argv = ["horovodrun", "-np", "6", "-H", "a:2,b:2,c:2", "python", "run_pretraining.py",
          "--train_batch_size=4", "--num_accumulation_steps=1"]
  # Global batch 24; on 4 workers 24 / (4 x 4) is not whole; 1, 2, 3 and 6 workers divide it.
  with pytest.raises(errors.UsageError, match=r"cannot continue on 4 workers \(b lost\).*"
                                              r"global batch 24.*that keep it: 1, 2, 3, 6$"):
    launch_command.shrink(argv, [("a", 2), ("c", 2)], ["b"])


def test_parse_hosts():
  assert launch_command.parse_hosts("a:2,b") == [("a", 2), ("b", 1)]
  with pytest.raises(errors.UsageError, match="host list"):
    launch_command.parse_hosts("a:two")


def test_script_defaults_match_the_training_flags():
  from absl import flags
  from utils.training import flags as training_flags  # noqa: F401 (defines the flags)
  for name, default in launch_command.SCRIPT_DEFAULTS.items():
    assert flags.FLAGS[name].default == default, name


def test_horovodrun_network_interface_is_dropped_when_only_this_machine_is_left():
  argv = ["horovodrun", "-np", "2", "-H", "a:1,b:1", "--gloo", "--network-interface", "eth1",
          "python", "run_pretraining.py", "--train_batch_size=2"]
  new, line = launch_command.shrink(argv, [("a", 1)], ["b"], is_local=lambda host: host == "a")
  assert new[:6] == ["horovodrun", "-np", "1", "-H", "a:1", "--gloo"] and new[6] == "python"
  assert line.endswith("horovodrun's --network-interface dropped (only this machine is left: "
                       "horovodrun uses the loopback)")
  # Another machine left: kept.
  new, line = launch_command.shrink(argv, [("b", 1)], ["a"], is_local=lambda host: host == "a")
  assert new[5:8] == ["--gloo", "--network-interface", "eth1"] and "dropped" not in line
