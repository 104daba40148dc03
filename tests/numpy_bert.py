"""An independent BERT forward pass in numpy (float64), for checking the TF graph.

Written from the paper's equations and the checkpoint layout (docs/DESIGN.md section 4), sharing
no code with `modeling.py`. Weights are a dict keyed by checkpoint variable names.
"""

import numpy as np


def gelu(x):
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, gamma, beta, epsilon=1e-12):
  mean = x.mean(axis=-1, keepdims=True)
  var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
  return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def log_softmax(logits):
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def softmax(logits):
  return np.exp(log_softmax(logits))


def _dense(w, prefix, x):
  return x @ w[prefix + "/kernel"].astype(np.float64) + w[prefix + "/bias"].astype(np.float64)


def _ln(w, prefix, x):
  return layer_norm(x, w[prefix + "/gamma"].astype(np.float64),
                    w[prefix + "/beta"].astype(np.float64))


def encoder(w, num_layers, num_heads, input_ids, input_mask, token_type_ids):
  """Returns (embedding_output, [layer outputs], pooled_output), each float64 [B, S, H] / [B, H]."""
  input_ids = np.asarray(input_ids)
  batch, seq = input_ids.shape
  word = w["bert/embeddings/word_embeddings"].astype(np.float64)
  token_type = w["bert/embeddings/token_type_embeddings"].astype(np.float64)
  position = w["bert/embeddings/position_embeddings"].astype(np.float64)
  hidden = word.shape[1]
  head = hidden // num_heads

  x = word[input_ids] + token_type[np.asarray(token_type_ids)] + position[:seq][None, :, :]
  x = _ln(w, "bert/embeddings/LayerNorm", x)
  embedding_output = x

  # Additive mask over keys: 0 for real tokens, -10000 for padding.
  adder = (1.0 - np.asarray(input_mask, np.float64))[:, None, None, :] * -10000.0
  layers = []
  for layer in range(num_layers):
    p = "bert/encoder/layer_%d/" % layer

    def heads(t):
      return t.reshape(batch, seq, num_heads, head).transpose(0, 2, 1, 3)

    q = heads(_dense(w, p + "attention/self/query", x))
    k = heads(_dense(w, p + "attention/self/key", x))
    v = heads(_dense(w, p + "attention/self/value", x))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head) + adder
    context = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    attention = _ln(w, p + "attention/output/LayerNorm",
                    _dense(w, p + "attention/output/dense", context) + x)
    intermediate = gelu(_dense(w, p + "intermediate/dense", attention))
    x = _ln(w, p + "output/LayerNorm", _dense(w, p + "output/dense", intermediate) + attention)
    layers.append(x)
  pooled = np.tanh(_dense(w, "bert/pooler/dense", x[:, 0, :]))
  return embedding_output, layers, pooled


def pretraining_outputs(w, sequence_output, pooled, positions, label_ids, label_weights,
                        next_sentence_labels):
  """MLM and NSP heads in float64: dict of log-probs, per-example losses and the two losses."""
  batch = sequence_output.shape[0]
  positions = np.asarray(positions)
  gathered = sequence_output[np.arange(batch)[:, None], positions].reshape(-1, pooled.shape[-1])
  t = gelu(_dense(w, "cls/predictions/transform/dense", gathered))
  t = _ln(w, "cls/predictions/transform/LayerNorm", t)
  logits = t @ w["bert/embeddings/word_embeddings"].astype(np.float64).T
  logits = logits + w["cls/predictions/output_bias"].astype(np.float64)
  mlm_log_probs = log_softmax(logits)
  ids = np.asarray(label_ids).reshape(-1)
  weights = np.asarray(label_weights, np.float64).reshape(-1)
  mlm_per_example = -mlm_log_probs[np.arange(ids.size), ids]
  mlm_loss = (weights * mlm_per_example).sum() / (weights.sum() + 1e-5)

  nsp_logits = pooled @ w["cls/seq_relationship/output_weights"].astype(np.float64).T
  nsp_logits = nsp_logits + w["cls/seq_relationship/output_bias"].astype(np.float64)
  nsp_log_probs = log_softmax(nsp_logits)
  labels = np.asarray(next_sentence_labels).reshape(-1)
  nsp_per_example = -nsp_log_probs[np.arange(labels.size), labels]
  return {"mlm_log_probs": mlm_log_probs, "mlm_per_example": mlm_per_example,
          "mlm_loss": mlm_loss, "nsp_log_probs": nsp_log_probs,
          "nsp_per_example": nsp_per_example, "nsp_loss": nsp_per_example.mean()}


def pretraining_losses(w, sequence_output, pooled, positions, label_ids, label_weights,
                       next_sentence_labels):
  """Returns (mlm_loss, mlm_per_example [B*P], nsp_loss, nsp_per_example [B]) in float64."""
  out = pretraining_outputs(w, sequence_output, pooled, positions, label_ids, label_weights,
                            next_sentence_labels)
  return out["mlm_loss"], out["mlm_per_example"], out["nsp_loss"], out["nsp_per_example"]
