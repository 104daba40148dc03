"""utils/runtime/session_config.py: the fields of the ConfigProto (the multi-process run is in
test_runtime_session_config_horovod.py)."""

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

import gpu_environment
from utils.runtime import session_config

RewriterConfig = rewriter_config_pb2.RewriterConfig


def scoped_allocator_on(config):
  options = config.graph_options.rewrite_options
  return (options.scoped_allocator_optimization == RewriterConfig.ON
          and list(options.scoped_allocator_opts.enable_op) == ["HorovodAllreduce"])


def test_defaults():
  config = session_config.build_session_config(environ={})
  options = config.graph_options.rewrite_options
  assert isinstance(config, tf.compat.v1.ConfigProto)
  assert config.allow_soft_placement
  assert options.meta_optimizer_iterations == RewriterConfig.ONE
  assert options.scoped_allocator_optimization == RewriterConfig.DEFAULT
  assert list(options.scoped_allocator_opts.enable_op) == []
  assert options.auto_mixed_precision == RewriterConfig.DEFAULT
  assert config.graph_options.optimizer_options.global_jit_level == 0
  assert config.intra_op_parallelism_threads == 0 and config.inter_op_parallelism_threads == 0
  assert config.gpu_options.visible_device_list == ""


@pytest.mark.parametrize("use_horovod,enable,env,expected", [
    (True, True, {}, True),
    (True, True, {"TF_DISABLE_SCOPED_ALLOCATOR": "0"}, True),
    (True, True, {"TF_DISABLE_SCOPED_ALLOCATOR": "1"}, False),
    (True, True, {"TF_DISABLE_SCOPED_ALLOCATOR": "TRUE"}, False),
    (True, False, {}, False),
    (False, True, {}, False),
])
def test_scoped_allocator(use_horovod, enable, env, expected):
  config = session_config.build_session_config(use_horovod=use_horovod,
                                               enable_scoped_allocator=enable, environ=env)
  assert scoped_allocator_on(config) is expected
  assert session_config.scoped_allocator_enabled(use_horovod, enable, env) is expected


@pytest.mark.parametrize("value,expected", [(None, False), ("1", True), ("0", False)])
def test_onednn_bf16_rewrite_by_environment(value, expected):
  env = {} if value is None else {"ONEDNN_BF16_REWRITE": value}
  config = session_config.build_session_config(environ=env)
  on = rewriter_config_pb2.RewriterConfig.ON
  assert (config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 == on) \
      is expected
  # It is not AMP's (GPU) rewrite.
  assert config.graph_options.rewrite_options.auto_mixed_precision != on
  with pytest.raises(ValueError, match="ONEDNN_BF16_REWRITE"):
    session_config.build_session_config(environ={"ONEDNN_BF16_REWRITE": "maybe"})


def test_bad_environment_and_thread_counts():
  with pytest.raises(ValueError, match="TF_DISABLE_SCOPED_ALLOCATOR"):
    session_config.build_session_config(use_horovod=True, enable_scoped_allocator=True,
                                        environ={"TF_DISABLE_SCOPED_ALLOCATOR": "maybe"})
  with pytest.raises(ValueError, match="intra_op_threads"):
    session_config.build_session_config(intra_op_threads=-1, environ={})
  with pytest.raises(ValueError, match="inter_op_threads"):
    session_config.build_session_config(inter_op_threads=1.5, environ={})


@pytest.mark.parametrize("gpus", [0, 1])
def test_xla_amp_and_threads(monkeypatch, gpus):
  monkeypatch.setattr(gpu_environment, "local_gpu_count", lambda: gpus)
  config = session_config.build_session_config(use_xla=True, amp=True, intra_op_threads=2,
                                               inter_op_threads=1, environ={})
  assert (config.graph_options.optimizer_options.global_jit_level
          == tf.compat.v1.OptimizerOptions.ON_1)
  assert config.graph_options.rewrite_options.auto_mixed_precision == RewriterConfig.ON
  assert config.intra_op_parallelism_threads == 2 and config.inter_op_parallelism_threads == 1


def test_gpu_pinning_by_local_rank(monkeypatch):
  monkeypatch.setattr(gpu_environment, "local_gpu_count", lambda: 4)
  config = session_config.build_session_config(use_horovod=True, local_rank=3, environ={})
  assert config.gpu_options.visible_device_list == "3"
  assert config.gpu_options.allow_growth
  single = session_config.build_session_config(use_horovod=False, local_rank=0, environ={})
  assert single.gpu_options.visible_device_list == ""


def test_config_runs_a_session(graph):
  config = session_config.build_session_config(use_xla=False, intra_op_threads=1,
                                               inter_op_threads=1, environ={})
  value = tf.constant([1.0, 2.0]) * 3.0
  with tf.compat.v1.Session(config=config) as session:
    assert list(session.run(value)) == [3.0, 6.0]
