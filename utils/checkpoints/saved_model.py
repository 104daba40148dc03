"""The encoder of a checkpoint as a SavedModel, for feature extraction behind TensorFlow Serving.

`export_encoder` writes a SavedModel (tag "serve") whose `serving_default` signature takes
input_ids, input_mask, segment_ids (int32 [batch, seq_length], any seq_length up to
max_position_embeddings) and returns sequence_output (float32 [batch, seq_length, hidden]) and
pooled_output (float32 [batch, hidden]): `modeling.BertModel` in fp32, without dropout, with the
checkpoint's weights (fp16 runs' fp32 master weights). Written whole or not at all.
"""

import os

import tensorflow as tf

import modeling
from utils.checkpoints import release
from utils.core import staging

_tf1 = tf.compat.v1
INPUTS = ("input_ids", "input_mask", "segment_ids")
OUTPUTS = ("sequence_output", "pooled_output")


def export_encoder(checkpoint, bert_config_file, output_dir):
  """Writes the encoder SavedModel of `checkpoint` into `output_dir`.

  Args:
    checkpoint: a checkpoint prefix or a directory (its newest checkpoint).
    bert_config_file: the bert_config.json of the checkpoint's model.
    output_dir: the SavedModel's directory to create; missing or empty.

  Returns:
    dict with "checkpoint" (the source prefix) and "output_dir".

  Raises:
    errors.UsageError: naming the file and the problem (see `release.load_model_weights`).
  """
  staging.check_empty_or_missing(output_dir, "--output_dir")
  checkpoint, bert_config, weights = release.load_model_weights(checkpoint, bert_config_file)
  with staging.staged_directory(output_dir, "--output_dir") as tmp:
    with tf.Graph().as_default() as graph:
      inputs = {name: _tf1.placeholder(tf.int32, [None, None], name=name) for name in INPUTS}
      model = modeling.BertModel(config=bert_config, is_training=False,
                                 input_ids=inputs["input_ids"], input_mask=inputs["input_mask"],
                                 token_type_ids=inputs["segment_ids"])
      outputs = {"sequence_output": tf.identity(model.get_sequence_output(), "sequence_output"),
                 "pooled_output": tf.identity(model.get_pooled_output(), "pooled_output")}
      variables = {var.op.name: var for var in _tf1.global_variables()}
      with _tf1.Session(graph=graph) as session:
        # The values already read and checked, assigned through placeholders (no graph constants).
        feeds = {}
        assigns = []
        for name, var in variables.items():
          value = _tf1.placeholder(var.dtype.base_dtype, var.shape)
          assigns.append(var.assign(value))
          feeds[value] = weights[name]
        session.run(assigns, feeds)
        builder = _tf1.saved_model.Builder(os.path.join(tmp, "model"))
        signature = _tf1.saved_model.predict_signature_def(inputs=inputs, outputs=outputs)
        builder.add_meta_graph_and_variables(
            session, [_tf1.saved_model.tag_constants.SERVING],
            signature_def_map={"serving_default": signature}, strip_default_attrs=True)
        builder.save()
    for name in os.listdir(os.path.join(tmp, "model")):
      os.rename(os.path.join(tmp, "model", name), os.path.join(tmp, name))
    os.rmdir(os.path.join(tmp, "model"))
  return {"checkpoint": checkpoint, "output_dir": output_dir}
