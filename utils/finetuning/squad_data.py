"""SQuAD v1.1 / v2.0 data: examples from the json (read by squad_file.py), model features, and
answers from the logits.

The conventions are those of the original BERT release's run_squad.py, so its records, features and
predictions come out the same:

- A paragraph's words and its answers' word positions: squad_file.py.
- Every word is WordPiece-tokenised; a question keeps its first `max_query_length` tokens.
- A feature is `[CLS] question [SEP] document window [SEP]`, zero-padded to `max_seq_length`,
  segment 0 for the question part and 1 for the document part. Long documents are covered by
  windows of at most `max_seq_length - len(question) - 3` tokens, each starting `doc_stride` tokens
  (or the window length, when shorter) after the previous one; the last window ends at the last
  token.
- A document token seen in several windows is scored only in the window where it has the most
  context: the largest min(tokens left of it, tokens right of it) + 0.01 x window length, the
  first such window on ties.
- Training targets: the answer's token span (narrowed to the tokens of the answer text where such
  a sub-span exists, e.g. "1895" inside "(1895-1943)."); a window that does not contain the whole
  answer, an answer whose words have no token, and an unanswerable question point at [CLS]
  (position 0).
- Features are numbered from 1000000000 (`unique_id`), in example then window order.
"""

import collections
import json
import math

from absl import logging
import tensorflow as tf

import tokenization
from utils.finetuning import squad_file

# The json files read into examples (squad_file.py), under this module's names as in the original.
SquadExample = squad_file.SquadExample
split_paragraph = squad_file.split_paragraph
load_squad = squad_file.load_squad
check_squad = squad_file.check_squad
read_squad_examples = squad_file.read_squad_examples

FIRST_UNIQUE_ID = 1000000000


class InputFeatures(object):
  """One window of one example, as the model sees it.

  Attributes:
    unique_id: int, the feature's id (FIRST_UNIQUE_ID, FIRST_UNIQUE_ID + 1, ...).
    example_index: index of the example in the list given to `convert_examples_to_features`.
    doc_span_index: index of the window in the example.
    tokens: list of str, the unpadded tokens.
    token_to_orig_map: dict position of a document token -> index of its word.
    token_is_max_context: dict position of a document token -> bool (this window scores it).
    input_ids, input_mask, segment_ids: lists of max_seq_length ints.
    start_position, end_position: training targets (positions in the window), else None.
    is_impossible: the example's flag.
  """

  def __init__(self, unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
               token_is_max_context, input_ids, input_mask, segment_ids, start_position=None,
               end_position=None, is_impossible=None):
    self.unique_id = unique_id
    self.example_index = example_index
    self.doc_span_index = doc_span_index
    self.tokens = tokens
    self.token_to_orig_map = token_to_orig_map
    self.token_is_max_context = token_is_max_context
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible


DocSpan = collections.namedtuple("DocSpan", ["start", "length"])
RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])




def _improve_answer_span(doc_tokens, start, end, tokenizer, answer_text):
  """The first, longest sub-span of tokens [start, end] whose text is the tokenised answer.

  Returns (start, end) unchanged when no sub-span matches."""
  answer = " ".join(tokenizer.tokenize(answer_text))
  for new_start in range(start, end + 1):
    for new_end in range(end, new_start - 1, -1):
      if " ".join(doc_tokens[new_start:new_end + 1]) == answer:
        return new_start, new_end
  return start, end


def doc_spans(num_tokens, max_tokens_for_doc, doc_stride):
  """The windows covering `num_tokens` document tokens (see the module docstring).

  Returns:
    list of DocSpan(start, length).
  """
  spans = []
  start = 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens_for_doc)
    spans.append(DocSpan(start, length))
    if start + length == num_tokens:
      break
    start += min(length, doc_stride)
  return spans


def max_context_span(spans, position):
  """Index of the window in which document token `position` has the most context."""
  best_score, best_index = None, None
  for index, span in enumerate(spans):
    last = span.start + span.length - 1
    if span.start <= position <= last:
      score = min(position - span.start, last - position) + 0.01 * span.length
      if best_score is None or score > best_score:
        best_score, best_index = score, index
  return best_index


def _tokenize_document(words, tokenizer):
  """(tokens, token_to_word, word_to_first_token) of a paragraph's words."""
  tokens, token_to_word, word_to_first_token = [], [], []
  for word_index, word in enumerate(words):
    word_to_first_token.append(len(tokens))
    for token in tokenizer.tokenize(word):
      token_to_word.append(word_index)
      tokens.append(token)
  return tokens, token_to_word, word_to_first_token


def _answer_tokens(example, doc_tokens, word_to_first_token, tokenizer):
  """(first, last) document token of a training answer, (-1, -1) when impossible."""
  if example.is_impossible:
    return -1, -1
  start = word_to_first_token[example.start_position]
  if example.end_position < len(example.doc_tokens) - 1:
    end = word_to_first_token[example.end_position + 1] - 1
  else:
    end = len(doc_tokens) - 1
  return _improve_answer_span(doc_tokens, start, end, tokenizer, example.orig_answer_text)


def _pad(values, length):
  return values + [0] * (length - len(values))


def _window_targets(example, answer, span, doc_offset):
  """Training positions of `answer` (document token indices) in `span`: 0 when outside, and for
  an answer whose words have no token (all removed by the tokenizer), which no window holds."""
  first, last = answer
  if example.is_impossible or last < first or not (
      span.start <= first and last <= span.start + span.length - 1):
    return 0, 0
  return first - span.start + doc_offset, last - span.start + doc_offset


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                 max_query_length, is_training, output_fn):
  """Turns examples into windows and passes each `InputFeatures` to `output_fn`.

  Args:
    examples: list of SquadExample.
    tokenizer: a `tokenization.FullTokenizer`.
    max_seq_length: tokens per feature (> max_query_length + 3).
    doc_stride: tokens between the starts of consecutive windows.
    max_query_length: question tokens kept.
    is_training: compute the training targets.
    output_fn: called with every InputFeatures, in order.

  Returns:
    the number of features produced.
  """
  unique_id = FIRST_UNIQUE_ID
  for example_index, example in enumerate(examples):
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
    doc_tokens, token_to_word, word_to_first_token = _tokenize_document(example.doc_tokens,
                                                                        tokenizer)
    answer = None
    if is_training:
      answer = _answer_tokens(example, doc_tokens, word_to_first_token, tokenizer)
    spans = doc_spans(len(doc_tokens), max_seq_length - len(query_tokens) - 3, doc_stride)
    doc_offset = len(query_tokens) + 2  # [CLS] question [SEP]
    for span_index, span in enumerate(spans):
      tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
      token_to_orig_map, token_is_max_context = {}, {}
      for position in range(span.start, span.start + span.length):
        token_to_orig_map[len(tokens)] = token_to_word[position]
        token_is_max_context[len(tokens)] = max_context_span(spans, position) == span_index
        tokens.append(doc_tokens[position])
      tokens.append("[SEP]")
      segment_ids = [0] * doc_offset + [1] * (span.length + 1)
      input_ids = tokenizer.convert_tokens_to_ids(tokens)
      start_position = end_position = None
      if is_training:
        start_position, end_position = _window_targets(example, answer, span, doc_offset)
      output_fn(InputFeatures(
          unique_id=unique_id, example_index=example_index, doc_span_index=span_index,
          tokens=tokens, token_to_orig_map=token_to_orig_map,
          token_is_max_context=token_is_max_context,
          input_ids=_pad(list(input_ids), max_seq_length),
          input_mask=_pad([1] * len(input_ids), max_seq_length),
          segment_ids=_pad(segment_ids, max_seq_length),
          start_position=start_position, end_position=end_position,
          is_impossible=example.is_impossible))
      unique_id += 1
  return unique_id - FIRST_UNIQUE_ID


def feature_record(feature, is_training):
  """The TFRecord features of an InputFeatures: dict name -> list of ints (release's names)."""
  record = collections.OrderedDict([
      ("unique_ids", [feature.unique_id]),
      ("input_ids", feature.input_ids),
      ("input_mask", feature.input_mask),
      ("segment_ids", feature.segment_ids),
  ])
  if is_training:
    record["start_positions"] = [feature.start_position]
    record["end_positions"] = [feature.end_position]
    record["is_impossible"] = [int(bool(feature.is_impossible))]
  return record


# -------------------------------------------------------------------------------------------------
# From logits to answers.
# -------------------------------------------------------------------------------------------------

Prediction = collections.namedtuple("Prediction", ["text", "start_logit", "end_logit"])
_Candidate = collections.namedtuple(
    "_Candidate", ["feature_index", "start_index", "end_index", "start_logit", "end_logit"])


def best_indexes(logits, n_best_size):
  """Indices of the `n_best_size` largest logits, largest first (ties: lower index first)."""
  return sorted(range(len(logits)), key=lambda i: logits[i], reverse=True)[:n_best_size]


def softmax(scores):
  """Softmax of a list of floats (maximum subtracted first), as a list."""
  if not scores:
    return []
  top = max(scores)
  exps = [math.exp(score - top) for score in scores]
  total = 0.0
  for value in exps:
    total += value
  return [value / total for value in exps]


def get_final_text(pred_text, orig_text, do_lower_case, verbose_logging=False):
  """Maps a prediction made of normalised tokens back onto the original words' characters.

  `orig_text` is the words the predicted tokens came from ("Steve Smith's"); `pred_text` is the
  tokens' text ("steve smith"). The basic tokenizer's output for `orig_text` is aligned with
  `orig_text` character by character once spaces are removed from both; when that alignment does
  not exist (different lengths), or `pred_text` is not found, `orig_text` is returned whole.

  Returns:
    the matching substring of `orig_text` ("Steve Smith"), or `orig_text`.
  """
  tok_text = " ".join(tokenization.BasicTokenizer(do_lower_case=do_lower_case).tokenize(orig_text))
  start = tok_text.find(pred_text)
  if start == -1:
    if verbose_logging:
      logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
    return orig_text
  end = start + len(pred_text) - 1
  orig_chars = [i for i, char in enumerate(orig_text) if char != " "]
  tok_chars = [i for i, char in enumerate(tok_text) if char != " "]
  if len(orig_chars) != len(tok_chars):
    if verbose_logging:
      logging.info("Length not equal after stripping spaces: '%s' vs '%s'", orig_text, tok_text)
    return orig_text
  tok_to_stripped = {position: index for index, position in enumerate(tok_chars)}
  if start not in tok_to_stripped or end not in tok_to_stripped:
    if verbose_logging:
      logging.info("Couldn't map the start or end position")
    return orig_text
  return orig_text[orig_chars[tok_to_stripped[start]]:orig_chars[tok_to_stripped[end]] + 1]


def _valid_span(feature, start_index, end_index, max_answer_length):
  """True when [start, end] is an answer this feature may give: document tokens scored in this
  window, in order, at most `max_answer_length` tokens."""
  return (start_index in feature.token_to_orig_map and end_index in feature.token_to_orig_map
          and feature.token_is_max_context.get(start_index, False)
          and start_index <= end_index <= start_index + max_answer_length - 1)


def _candidates(features, results, n_best_size, max_answer_length, version_2_with_negative):
  """The example's candidate spans, best first, and its null answer.

  Returns:
    (candidates, null): list of _Candidate sorted by start + end logit (stable), with the null
    candidate (position 0 of the window with the smallest null score) among them in v2.0; and
    that null candidate (None in v1.1).
  """
  candidates = []
  null = None
  for feature_index, feature in enumerate(features):
    result = results[feature.unique_id]
    if version_2_with_negative and (
        null is None or result.start_logits[0] + result.end_logits[0]
        < null.start_logit + null.end_logit):
      null = _Candidate(feature_index, 0, 0, result.start_logits[0], result.end_logits[0])
    for start_index in best_indexes(result.start_logits, n_best_size):
      for end_index in best_indexes(result.end_logits, n_best_size):
        if _valid_span(feature, start_index, end_index, max_answer_length):
          candidates.append(_Candidate(feature_index, start_index, end_index,
                                       result.start_logits[start_index],
                                       result.end_logits[end_index]))
  if null is not None:
    candidates.append(null)
  candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)
  return candidates, null


def _candidate_text(candidate, feature, example, do_lower_case, verbose_logging):
  """The answer text of a non-null candidate, in the original words' characters."""
  tokens = feature.tokens[candidate.start_index:candidate.end_index + 1]
  first_word = feature.token_to_orig_map[candidate.start_index]
  last_word = feature.token_to_orig_map[candidate.end_index]
  tok_text = " ".join(tokens).replace(" ##", "").replace("##", "")
  tok_text = " ".join(tok_text.strip().split())
  orig_text = " ".join(example.doc_tokens[first_word:last_word + 1])
  return get_final_text(tok_text, orig_text, do_lower_case, verbose_logging)


def _nbest(candidates, null, features, example, n_best_size, do_lower_case, verbose_logging):
  """The n best distinct answers (Prediction), best first; in v2.0 the empty answer always."""
  nbest = []
  seen = set()
  for candidate in candidates:
    if len(nbest) >= n_best_size:
      break
    text = ""
    if candidate.start_index > 0:
      text = _candidate_text(candidate, features[candidate.feature_index], example,
                             do_lower_case, verbose_logging)
      if text in seen:
        continue
    seen.add(text)
    nbest.append(Prediction(text, candidate.start_logit, candidate.end_logit))
  if null is not None and "" not in seen:
    nbest.append(Prediction("", null.start_logit, null.end_logit))
  if not nbest:
    # No valid span at all (very rare): a placeholder, as the original does.
    nbest.append(Prediction("empty", 0.0, 0.0))
  return nbest


def compute_predictions(examples, features, results, n_best_size, max_answer_length,
                        do_lower_case, version_2_with_negative=False,
                        null_score_diff_threshold=0.0, verbose_logging=False):
  """Answers every example from its windows' logits.

  Args:
    examples: list of SquadExample.
    features: list of InputFeatures of those examples.
    results: iterable of RawResult (one per feature; float logits).
    n_best_size: candidates per window and per start/end, and answers kept per example.
    max_answer_length: longest answer in tokens.
    do_lower_case: the tokenizer's setting (for mapping answers back to the text).
    version_2_with_negative: SQuAD 2.0: an example may be answered "".
    null_score_diff_threshold: v2.0: answer "" when the null score minus the best non-null score
      exceeds this.
    verbose_logging: log why an answer could not be mapped back to the text.

  Returns:
    (predictions, nbest, null_odds): OrderedDicts keyed by question id, in example order:
    the answer text; list of dicts (text, probability, start_logit, end_logit); and (v2.0 only)
    the null score minus the best non-null score.
  """
  by_example = collections.defaultdict(list)
  for feature in features:
    by_example[feature.example_index].append(feature)
  results = {result.unique_id: result for result in results}
  predictions = collections.OrderedDict()
  all_nbest = collections.OrderedDict()
  null_odds = collections.OrderedDict()
  for example_index, example in enumerate(examples):
    example_features = by_example[example_index]
    candidates, null = _candidates(example_features, results, n_best_size, max_answer_length,
                                   version_2_with_negative)
    nbest = _nbest(candidates, null, example_features, example, n_best_size, do_lower_case,
                   verbose_logging)
    probabilities = softmax([p.start_logit + p.end_logit for p in nbest])
    all_nbest[example.qas_id] = [
        collections.OrderedDict([("text", p.text), ("probability", probability),
                                 ("start_logit", p.start_logit), ("end_logit", p.end_logit)])
        for p, probability in zip(nbest, probabilities)]
    if not version_2_with_negative:
      predictions[example.qas_id] = nbest[0].text
      continue
    best_non_null = next((p for p in nbest if p.text), None)
    if best_non_null is None:
      # Only the empty answer is possible (the original fails here): answer "", no odds.
      predictions[example.qas_id] = ""
      continue
    score_diff = (null.start_logit + null.end_logit - best_non_null.start_logit
                  - best_non_null.end_logit)
    null_odds[example.qas_id] = score_diff
    predictions[example.qas_id] = "" if score_diff > null_score_diff_threshold else (
        best_non_null.text)
  return predictions, all_nbest, null_odds


def write_json(path, value):
  """Writes `value` as indented json (4 spaces) and a newline, as the original's output files."""
  with tf.io.gfile.GFile(path, "w") as writer:
    writer.write(json.dumps(value, indent=4) + "\n")
