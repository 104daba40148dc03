"""utils/training/weight_sync.py in one process: the switch, and the hook's refusal without Horovod
(with Horovod: tests/test_training_weight_sync_horovod.py)."""

import pytest
import tensorflow as tf

from utils.training import hooks
from utils.training import weight_sync

_tf1 = tf.compat.v1


@pytest.mark.parametrize("flag,env,expected", [
    (False, {}, False),
    (True, {}, True),
    (False, {"FORCE_WEIGHT_SYNC": "true"}, True),
    (False, {"FORCE_WEIGHT_SYNC": "1"}, True),
    (False, {"FORCE_WEIGHT_SYNC": "False"}, False),
    (True, {"FORCE_WEIGHT_SYNC": "0"}, True),
])
def test_weight_sync_enabled(flag, env, expected):
  assert weight_sync.weight_sync_enabled(flag, environ=env) is expected


def test_weight_sync_rejects_bad_env_and_missing_horovod(graph):
  with pytest.raises(ValueError, match="FORCE_WEIGHT_SYNC"):
    weight_sync.weight_sync_enabled(False, environ={"FORCE_WEIGHT_SYNC": "sometimes"})
  _tf1.get_variable("w", [2])
  with pytest.raises(RuntimeError, match="hvd_init"):
    weight_sync.WeightSyncHook(hooks.UpdateSource(2)).begin()

