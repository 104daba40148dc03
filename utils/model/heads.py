"""What a task head returns, and the precision conventions every head keeps.

A head is a function `head_fn(model, features, mode) -> HeadOutput`: it takes the built
`modeling.BertModel`, the batch's features and the Estimator mode, creates its own variables and
returns its loss, predictions and evaluation metrics. `utils/training/model_fn.py` wraps a head
with everything else (the encoder, initialisation, the training step, the Estimator specs).

Heads compute in fp32 whatever the encoder's compute type (`modeling.ComputePrecision.HEADS`): they
cast the encoder output first, so logits, softmax and losses keep fp32's precision (as TF's
official BERT does for fp16).
"""

import collections

import tensorflow as tf

import modeling

HeadOutput = collections.namedtuple("HeadOutput", ["loss", "predictions", "metric_fn",
                                                   "metric_args"])
HeadOutput.__doc__ = """What a task head returns.

Fields: loss, fp32 scalar (None when the mode has no labels); predictions, dict of Tensors
(PREDICT), or None for a head that predicts nothing; metric_fn(*metric_args) -> dict of streaming
metrics (EVAL), or None."""


def encoder_output_fp32(tensor):
  """The encoder's output cast to the heads' fp32 (`modeling.ComputePrecision.to_heads`:
  reduced-precision logits would lose the loss' precision)."""
  return modeling.ComputePrecision.to_heads(tensor)


def log_probabilities(logits):
  """fp32 log-softmax over the last axis."""
  return tf.nn.log_softmax(modeling.ComputePrecision.to_heads(logits), axis=-1)
