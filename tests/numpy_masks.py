"""Masks drawn while training, written as plain loops from the rules of Google's
create_pretraining_data.py (docs/DATA.md, "Masks drawn while training"): the reference
tests/test_data_dynamic_masks.py compares utils/data/dynamic_masks.py with, for the same noise.

One row at a time, one sequence at a time; no TensorFlow.
"""

import math

import numpy as np


def _sequences(input_mask):
  """{sequence number: [its positions]} of one row (input_mask 1 or 1..k for real tokens)."""
  found = {}
  for position, number in enumerate(input_mask.tolist()):
    if number > 0:
      found.setdefault(number, []).append(position)
  return found


def _words(ids, positions, vocab, whole_word):
  """The candidates of one sequence grouped as they are chosen: [[position, ...], ...]."""
  words = []
  previous = None  # the last candidate's position
  for position in positions:
    token = ids[position]
    if token in (vocab.cls_id, vocab.sep_id):
      continue
    if whole_word and vocab.continuation[token] and previous == position - 1:
      words[-1].append(position)
    else:
      words.append([position])
    previous = position
  return words


def chosen_positions(ids, input_mask, order_noise, options, vocab):
  """The positions one row predicts, ascending, before any cut to the width.

  Args:
    ids, input_mask: lists (or int arrays) of the row.
    order_noise: float array [L], noise[0] of the row.
    options: dynamic_masks.MaskingOptions (or anything with its fields).
    vocab: dynamic_masks.MaskVocabulary.
  """
  chosen = []
  for positions in _sequences(np.asarray(input_mask)).values():
    wanted = min(options.max_predictions_per_seq,
                 max(1, round(len(positions) * options.masked_lm_prob)))
    words = _words(ids, positions, vocab, options.whole_word)
    words.sort(key=lambda word: (float(order_noise[word[0]]), word[0]))
    left = wanted
    for word in words:  # Google's loop; its `break` at n taken changes nothing: no word fits then
      if len(word) <= left:
        chosen.extend(word)
        left -= len(word)
  return sorted(chosen)


def draw_masks(features, noise, options, vocab, width, packed):
  """The numpy twin of dynamic_masks.draw_masks (same arguments, numpy arrays, a new dict)."""
  input_ids = np.asarray(features["input_ids"])
  input_mask = np.asarray(features["input_mask"])
  batch, _ = input_ids.shape
  masked_ids = input_ids.copy()
  positions = np.zeros((batch, width), np.int32)
  labels = np.zeros((batch, width), np.int32)
  weights = np.zeros((batch, width), np.float32)
  for row in range(batch):
    ids = input_ids[row].tolist()
    chosen = chosen_positions(ids, input_mask[row], noise[row][0], options, vocab)[:width]
    for slot, position in enumerate(chosen):
      positions[row, slot] = position
      labels[row, slot] = ids[position]
      weights[row, slot] = input_mask[row, position] if packed else 1.0
      choice = float(noise[row][1][position])
      if options.mask_token_only or choice < 0.8:
        masked_ids[row, position] = vocab.mask_id
      elif choice < 0.9:
        masked_ids[row, position] = ids[position]
      else:
        masked_ids[row, position] = math.floor(float(noise[row][2][position]) * vocab.vocab_size)
  result = dict(features)
  result.update(input_ids=masked_ids, masked_lm_positions=positions, masked_lm_ids=labels,
                masked_lm_weights=weights)
  return result
