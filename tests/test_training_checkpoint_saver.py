"""utils/training/checkpoint_saver.py: a checkpoint every N steps and at the end, none at the
start."""

import tensorflow as tf

from utils.training import checkpoint_saver


def test_periodic_checkpoint_saver_skips_the_initial_save(tmp_path):
  with tf.Graph().as_default():
    step = tf.compat.v1.train.get_or_create_global_step()
    tf.compat.v1.get_variable("w", initializer=tf.constant([1.0]))
    train_op = step.assign_add(1)
    hook = checkpoint_saver.PeriodicCheckpointSaverHook(str(tmp_path), save_steps=3)
    with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
      assert tf.train.latest_checkpoint(str(tmp_path)) is None  # nothing at step 0
      for _ in range(4):
        sess.run(train_op)
      saved = tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths
      assert [p.rsplit("-", 1)[1] for p in saved] == ["3"]
  # end() saves the last step; no graph files without save_graph_def.
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-4")
  assert not (tmp_path / "graph.pbtxt").exists()
  assert not list(tmp_path.glob("*.meta"))

