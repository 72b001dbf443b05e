"""ONNX TfIdfVectorizer over integer tokens (string pools are out of scope: kernelgen has no
string tensors), and the numeric ai.onnx.ml operators Binarizer, ArrayFeatureExtractor and
TreeEnsemble (each leaf a mask: the AND of its path's tests, computed once per node).

TfIdfVectorizer: each pool n-gram's count is a sum of elementwise matches of shifted views of the
tokens, one per skip distance, so the whole operator is a fixed set of comparisons and sums.
Counting follows the operator's definition: n-grams of lengths min_gram_length..max_gram_length;
an n-gram of length n >= 2 counts at every skip distance 1..max_skip_count+1 (tokens d apart), a
unigram once. TF gives the counts, IDF the weight (or 1) where the count is positive, TFIDF the
weighted counts.
"""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import ShapeError, UnsupportedError
from ...tensor.tensor import Tensor, stack, where
from ..registry import op


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


def _tree_leaves(at, root: int) -> list:
  """[(path, leaf index)] of the tree at `root`: path = [(node, branch taken)], walked in the
  operator's pre-order (true branch first), which is also the order set-membership nodes take
  their sets in; a root whose branches are one leaf is that leaf."""
  t_ids, f_ids = at.ints("nodes_truenodeids"), at.ints("nodes_falsenodeids")
  t_leaf, f_leaf = at.ints("nodes_trueleafs"), at.ints("nodes_falseleafs")
  if t_leaf[root] and f_leaf[root] and t_ids[root] == f_ids[root]:
    return [([], t_ids[root])]
  out, stack = [], [(root, [])]
  while stack:
    node, path = stack.pop()
    for branch, nxt, leaf in ((False, f_ids[node], f_leaf[node]),
                              (True, t_ids[node], t_leaf[node])):
      step = path + [(node, branch)]
      if leaf:
        out.append((step, nxt))
      else:
        stack.append((nxt, step))
  return out


def _member_sets(at, roots: list) -> dict:
  """{node: set of values} of the set-membership nodes, in the pre-order the sets are listed."""
  values = at.tensor("membership_values")
  if values is None:
    return {}
  from ..data import tensor_payload
  from ...tensor.data import unpack
  dtype, _, raw = tensor_payload(values, None, "membership_values")
  flat = iter(unpack(raw, dtype))
  modes, sets = _modes(at), {}
  t_ids, f_ids = at.ints("nodes_truenodeids"), at.ints("nodes_falsenodeids")
  t_leaf, f_leaf = at.ints("nodes_trueleafs"), at.ints("nodes_falseleafs")

  def visit(node):
    if modes[node] == 6:
      members = set()
      for v in flat:
        if v != v:          # NaN ends a set
          break
        members.add(v)
      sets[node] = members
    if not t_leaf[node]:
      visit(t_ids[node])
    if not f_leaf[node]:
      visit(f_ids[node])
  for root in roots:
    if not (t_leaf[root] and f_leaf[root] and t_ids[root] == f_ids[root]):
      visit(root)
  return sets


def _tensor_values(at, name: str) -> list:
  from ..data import tensor_payload
  from ...tensor.data import unpack
  t = at.tensor(name)
  if t is None:
    return []
  dtype, _, raw = tensor_payload(t, None, name)
  return unpack(raw, dtype)


def _modes(at) -> list:
  return [int(v) for v in _tensor_values(at, "nodes_modes")]


def _node_info(at) -> dict:
  return {"feat": at.ints("nodes_featureids"), "split": _tensor_values(at, "nodes_splits"),
          "mode": _modes(at), "missing": at.ints("nodes_missing_value_tracks_true")}


def _condition(x, node: int, info: dict, sets: dict, cache: dict):
  """The node's test on every row (missing values go true where the node says so)."""
  if node in cache:
    return cache[node]
  col = x[:, info["feat"][node]]
  split, mode = info["split"][node], info["mode"][node]
  if mode == 6:
    hit = None
    for v in sorted(sets.get(node, ())):
      eq = col == v
      hit = eq if hit is None else hit | eq
    hit = hit if hit is not None else col != col
  else:
    hit = [col <= split, col < split, col >= split, col > split, col == split,
           col != split][mode]
  missing = info["missing"]
  if missing and missing[node]:
    hit = hit | (col != col)
  cache[node] = hit
  return hit


@op("TreeEnsemble")
def _tree_ensemble(ins, at):
  """Each tree's value per row is the weight of the leaf whose path's tests all hold (one mask
  per leaf), added to its target; trees are summed, averaged, or reduced by min / max."""
  x = ins[0]
  if at.int("post_transform", 0):
    raise UnsupportedError("TreeEnsemble post_transform other than NONE is not supported")
  roots, targets = at.ints("tree_roots"), at.int("n_targets")
  weights, leaf_t = _tensor_values(at, "leaf_weights"), at.ints("leaf_targetids")
  agg = at.int("aggregate_function", 1)
  sets, cache, info = _member_sets(at, roots), {}, _node_info(at)
  rows = x.shape[0]
  ident = {0: 0.0, 1: 0.0, 2: math.inf, 3: -math.inf}[agg]
  tid = Tensor.arange(targets, device=x.device).reshape(1, targets)
  result = None
  for root in roots:
    tree = Tensor.full((rows, targets), ident, dtype=x.dtype, device=x.device)
    for path, leaf in _tree_leaves(at, root):
      ok = None
      for node, branch in path:
        c = _condition(x, node, info, sets, cache)
        c = c if branch else c.logical_not()
        ok = c if ok is None else ok & c
      ok = ok.reshape(rows, 1) if ok is not None else \
        Tensor.ones(rows, 1, dtype=dtypes.bool, device=x.device)
      tree = where(ok & (tid == leaf_t[leaf]), weights[leaf], tree)
    result = tree if result is None else \
      result + tree if agg in (0, 1) else \
      result.minimum(tree) if agg == 2 else result.maximum(tree)
  return result / len(roots) if agg == 0 else result
