"""The checkpoint saver of the training job: a checkpoint every N updates or seconds and at the
end, none at the start (docs/PERFORMANCE.md)."""

import tensorflow as tf

_tf1 = tf.compat.v1


class PeriodicCheckpointSaverHook(_tf1.train.CheckpointSaverHook):
  """Saves a checkpoint every `save_steps` global steps (or `save_secs` seconds) and at the end,
  not at the start.

  The stock hook also writes a full checkpoint of the untrained weights when the session starts
  (1.3 GB and ~3.6 s for BERT-base with its LAMB slots) and, with `save_graph_def`, the graph as
  text and into the summaries (~1.8 s): a fresh run has nothing worth saving then, and a resumed
  one already has that checkpoint. The Estimator uses this hook instead of adding its own.
  """

  def __init__(self, checkpoint_dir, save_steps=None, save_graph_def=False, save_secs=None,
               listeners=None):
    """Args: the directory, the step interval or (instead) the interval in seconds, counted
    from the session's start, whether to write the graph (graph.pbtxt, the TensorBoard graph
    and a .meta file per checkpoint), and CheckpointSaverListeners."""
    if save_secs is not None:
      save_steps = None
    super().__init__(checkpoint_dir, save_steps=save_steps, save_secs=save_secs,
                     save_graph_def=save_graph_def, listeners=listeners)

  def after_create_session(self, session, coord):
    global_step = session.run(self._global_step_tensor)
    if self._save_graph_def:
      graph = _tf1.get_default_graph()
      tf.io.write_graph(graph.as_graph_def(add_shapes=True), self._checkpoint_dir, "graph.pbtxt")
      self._summary_writer.add_graph(graph)
    self._timer.update_last_triggered_step(global_step)
