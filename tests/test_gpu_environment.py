"""gpu_environment.py: fp32 master variables behind the custom getter, GPU pinning by local rank,
and whether automatic mixed precision takes effect."""

import logging

import pytest
import tensorflow as tf

import gpu_environment

_tf1 = tf.compat.v1


def test_custom_getter_stores_fp32_and_casts_on_read(graph):
  with _tf1.variable_scope("s", custom_getter=gpu_environment.get_custom_getter(tf.float16)):
    read = _tf1.get_variable("w", [3], dtype=tf.float16, initializer=_tf1.ones_initializer())
  assert read.dtype == tf.float16
  stored = [v for v in _tf1.global_variables() if v.op.name == "s/w"]
  assert len(stored) == 1 and stored[0].dtype.base_dtype == tf.float32
  assert gpu_environment.get_custom_getter(tf.float32) is None


def test_pin_to_local_gpu_is_noop_without_gpu():
  config = _tf1.ConfigProto()
  gpu_environment.pin_to_local_gpu(config, local_rank=1)
  assert config.gpu_options.visible_device_list == ""


@pytest.mark.parametrize("gpus", [0, 1])
def test_amp_takes_effect_only_with_a_gpu(caplog, monkeypatch, gpus):
  caplog.set_level(logging.INFO)
  monkeypatch.setattr(gpu_environment, "local_gpu_count", lambda: gpus)
  assert gpu_environment.amp_takes_effect(True) is (gpus == 1)
  assert ("no effect without a GPU" in caplog.text) is (gpus == 0)
  caplog.clear()
  assert gpu_environment.amp_takes_effect(False) is False
  assert caplog.text == ""
