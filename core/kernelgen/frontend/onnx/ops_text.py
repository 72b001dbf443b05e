"""ONNX TfIdfVectorizer over integer tokens (string pools are out of scope: kernelgen has no
string tensors), and the numeric ai.onnx.ml operators Binarizer and ArrayFeatureExtractor.

TfIdfVectorizer: each pool n-gram's count is a sum of elementwise matches of shifted views of the
tokens, one per skip distance, so the whole operator is a fixed set of comparisons and sums.
Counting follows the operator's definition: n-grams of lengths min_gram_length..max_gram_length;
an n-gram of length n >= 2 counts at every skip distance 1..max_skip_count+1 (tokens d apart), a
unigram once. TF gives the counts, IDF the weight (or 1) where the count is positive, TFIDF the
weighted counts.
"""
from __future__ import annotations

from ...dtype import dtypes
from ...errors import ShapeError, UnsupportedError
from ..tensor import Tensor, stack
from .ops import op


def _pool_grams(at) -> list:
  """[(tokens, output index)] of the pool's n-grams within the length bounds."""
  pool = at.ints("pool_int64s")
  if pool is None:
    raise UnsupportedError("TfIdfVectorizer over strings (pool_strings): kernelgen has no "
                           "string tensors")
  counts, indexes = at.ints("ngram_counts"), at.ints("ngram_indexes")
  lo, hi = at.int("min_gram_length"), at.int("max_gram_length")
  grams, gram_id = [], 0
  for i, start in enumerate(counts):
    end = counts[i + 1] if i + 1 < len(counts) else len(pool)
    n = i + 1
    for s in range(start, end - n + 1, n):
      if lo <= n <= hi:
        grams.append((pool[s:s + n], indexes[gram_id]))
      gram_id += 1
  return grams


def _count(x, tokens: list, skips: int):
  """(rows,) occurrences of `tokens` in each row of x (rows, C) at the allowed distances."""
  n, c = len(tokens), x.shape[1]
  total = None
  for d in range(1, (skips + 1 if n > 1 else 1) + 1):
    span = c - (n - 1) * d
    if span <= 0:
      break
    hit = None
    for j, tok in enumerate(tokens):
      eq = x.shrink(((0, x.shape[0]), (j * d, j * d + span))) == tok
      hit = eq if hit is None else hit & eq
    part = hit.cast(dtypes.float32).sum(1)
    total = part if total is None else total + part
  return total


@op("TfIdfVectorizer")
def _tfidf(ins, at):
  x = ins[0]
  if x.ndim not in (1, 2):
    raise ShapeError(f"TfIdfVectorizer input must be [C] or [N, C], got {x.shape}")
  rows = x.reshape(1, -1) if x.ndim == 1 else x
  grams = _pool_grams(at)
  size = max(at.ints("ngram_indexes")) + 1
  zero = Tensor.zeros(rows.shape[0], dtype=dtypes.float32, device=x.device)
  cols = [zero] * size
  for tokens, index in grams:
    found = _count(rows, tokens, at.int("max_skip_count", 0))
    if found is not None:
      cols[index] = cols[index] + found
  y = stack(cols, 1)
  mode, weights = at.str("mode"), at.floats("weights")
  w = Tensor(weights, dtype=dtypes.float32, device=x.device) if weights else None
  if mode == "IDF":
    y = (y > 0).cast(dtypes.float32) * (w if w is not None else 1.0)
  elif mode == "TFIDF" and w is not None:
    y = y * w
  elif mode not in ("TF", "TFIDF"):
    raise UnsupportedError(f"TfIdfVectorizer mode {mode!r}: TF, IDF or TFIDF")
  return y.reshape(size) if x.ndim == 1 else y


# ---- ai.onnx.ml numeric operators --------------------------------------------------------------

@op("Binarizer")
def _binarizer(ins, at):
  x = ins[0]
  return (x > at.float("threshold", 0.0)).cast(x.dtype)


@op("ArrayFeatureExtractor")
def _array_feature_extractor(ins, at):
  """The elements at the given indices of the last axis (a 1-d input gives one row)."""
  x = ins[0]
  idx = ins[1].cast(dtypes.int32).reshape(-1)
  out = x.take(idx, axis=x.ndim - 1)
  return out.reshape(1, -1) if x.ndim == 1 else out
