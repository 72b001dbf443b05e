"""Scatters with indices computed on the device, by sorting: scatter_add, scatter, setitem and a
gather's gradient in O((outputs + indices) * log) work instead of outputs x indices;
deterministic (the same bits every run) and without atomics (WGSL has none for floats).

Along the scattered axis (moved last): m indices and n outputs per row.
1. The indices (int32; out-of-range ones stay out of range) are sorted along the row, stably,
   with their positions, by the sorting network (tensor/ops/sort.py): keys ascending, `perm` the
   original position of each; equal indices keep their index order.
2. Output j finds, by a fixed-trip binary search (log2(m) + 1 probes, each an indirect load; no
   data-dependent loop bounds), the count c of keys <= j. Its segment (the keys equal to j) ends
   at `last` = c - 1 when key[c - 1] == j; otherwise nothing lands on j (last = -1), the fate of
   every out-of-range index (they write nothing).
3. scatter / setitem: the value at `last` wins: the last duplicate in index order, as numpy's
   `a[idx] = v` with repeated indices. scatter_add: a segmented inclusive scan of the values in
   sorted order, read at `last`: each segment is summed from its own first element in index
   order (never a difference of two prefix sums, which would cancel in float). The scan is
   blocked like tensor/ops/scan.py's: blocks of SCAN_BLOCK summed under a triangular mask cut at
   each element's segment start, the block totals scanned the same way (recursively) and carried
   into the blocks their segment continues into.
Where the indices are the same along a dim (an expanded view: an Embedding's token index for each
of a row's columns) they are sorted and searched once per distinct row and the result broadcast.

Where outputs x indices is small, or the indices per row few, the compare-based form (each output
compares every index: one kernel, tensor/ops/advanced_indexing.py) costs less than the sort's dozen
kernels: it is kept up to COMPARE_MAX, or COMPARE_INDICES per row (measured with
bench/scatter_times.py crossover on lavapipe, see the constants).

ONNX's ScatterElements reductions mul / max / min (scatter_reduce) take the same segments: the
scan's combine is the reduction (identity 1, the dtype's lowest, highest), read at `last` and
combined with t once. `forced_form("sorted" | "compared")` pins the form at every size (tests and
the fuzzer, whose sizes sit below the thresholds).

Gradients (their own rules, not the sort's): scatter_add passes g to t and g read at the indices
to src; scatter passes g to t where nothing was written and to each src element that won.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from ...dtype import dtypes, max_value, min_value
from ...errors import UnsupportedError
from ...graph.lazy import L, LazyOp
from ...graph.view import prod
from ..autograd import record
from ..combine import where
from ..operands import acc_dtype
from .scan import SCAN_BLOCK
from .sort import sort_last
from .elementwise import maximum, minimum

# The largest rows * outputs * indices done by comparing each output with every index. Measured
# (bench/scatter_times.py crossover, lavapipe, GPU time, 1-d scatter_add, compare vs sorted):
# n*m = 2^14: 0.3 vs 0.7 ms; 2^16: 1.1 vs 1.2 ms; 2^18: 4.4 vs 1.3 ms; 2^20: 15.6 vs 2.7 ms;
# 2^22: 108 vs 2.6 ms. The sorted form also compiles 9-18 kernels to the compared form's one.
COMPARE_MAX = 1 << 16
# Up to this many indices per row the compared form is unrolled and stays cheaper whatever the
# outputs: n = 2^18 outputs, m = 4 / 16 / 32 indices: 1.3 / 1.6 / 2.0 ms compared, 8 / 13 / 23 ms
# sorted; m = 64: 658 vs 35 ms (a cross-entropy's gradient has m = 1).
COMPARE_INDICES = 32
I32_MAX = (1 << 31) - 1


# The form every scatter takes while `forced_form` is active: None (the thresholds above decide),
# "sorted" or "compared". For tests and the fuzzer, whose sizes are far below COMPARE_MAX.
FORMS = (None, "sorted", "compared")
_forced = [None]


def sorted_pays(rows: int, n: int, m: int) -> bool:
  """Whether a scatter of m indices into n outputs in each of `rows` rows is done by sorting."""
  if _forced[0] is not None:
    return _forced[0] == "sorted"
  return m > COMPARE_INDICES and rows * n * m > COMPARE_MAX


@contextmanager
def forced_form(form):
  """`with forced_form("sorted"):` every scatter, scatter_add, setitem with device indices, a
  gather's gradient (recorded while building) and ONNX's ScatterElements built inside takes that
  form whatever its size ("compared": the one-hot comparison; None: the thresholds). The form is
  chosen when the lazy graph is built, so only building needs to happen inside. A testing knob
  (tests/unit/test_scatter_fast.py, the fuzzer's sorted scatter steps): both forms give the same
  values, only their cost differs."""
  if form not in FORMS:
    raise UnsupportedError(f"scatter form must be one of {FORMS}, got {form!r}")
  before, _forced[0] = _forced[0], form
  try:
    yield
  finally:
    _forced[0] = before


# ---- layout helpers --------------------------------------------------------------------------

def _to_last(x, axis: int):
  return x.permute(*[d for d in range(x.ndim) if d != axis], axis)


def _from_last(x, axis: int):
  order = list(range(x.ndim - 1))
  order.insert(axis, x.ndim - 1)
  return x.permute(*order)


def _take_last(table, index):
  """table read along its last axis at the int `index` (lead dims broadcast to index's); an
  index outside 0..n-1 reads 0 (L.GATHER)."""
  table = table.expand(index.shape[:-1] + table.shape[-1:])
  return type(table)(LazyOp(L.GATHER, table.dtype, index.shape, (table.node, index.node),
                            index.ndim - 1))


def _const_dims(node) -> set:
  """Dims along which a lazy node's values cannot vary (expanded views, under elementwise ops)."""
  if node.realized:
    return set()
  if node.op is L.CONST:
    return set(range(len(node.shape)))
  if node.op is L.VIEW:
    v = node.arg
    return {d for d, (n, s) in enumerate(zip(v.shape, v.strides))
            if s == 0 and (v.mask is None or v.mask[d] == (0, n))}
  if node.op in (L.ALU, L.CAST):
    dims = set(range(len(node.shape)))
    for src in node.src:
      dims &= _const_dims(src)
    return dims
  return set()


def _narrowed(idx, axis: int):
  """idx in last-axis form, cut to size 1 along the lead dims where its values do not vary."""
  const = _const_dims(idx.node) - {axis}
  last = _to_last(idx, axis)
  order = [d for d in range(idx.ndim) if d != axis]
  return last.shrink(tuple((0, 1) if order[k] in const else None for k in range(len(order)))
                     + (None,))


def _int32(idx, n: int):
  """int32 indices; 64-bit and unsigned ones out of range become -1 or n first (they stay out)."""
  if idx.dtype == dtypes.int32:
    return idx
  if idx.dtype.itemsize >= 4:
    idx = where(idx > n, n, idx) if idx.dtype.is_unsigned() else \
      where(idx < 0, -1, where(idx > n, n, idx))
  return idx.cast(dtypes.int32)


# ---- segments --------------------------------------------------------------------------------

def _count(keys, queries, strict: bool):
  """For each query, how many of the (ascending, last-axis) keys are < it (strict) or <= it:
  a fixed-trip binary search, one indirect load per probe."""
  m = keys.shape[-1]
  size = 1 << m.bit_length()                       # > m: the last probe lands on a pad
  lead = ((0, 0),) * (keys.ndim - 1)
  padded = keys.pad(lead + ((0, size - m),), I32_MAX)
  pos = queries * 0
  step = size // 2
  while step:
    probe = _take_last(padded, pos + (step - 1))
    pos = pos + where(probe < queries if strict else probe <= queries, step, 0)
    step //= 2
  return pos


def _segments(small, n: int):
  """(keys, perm, last) for int32 indices `small` (..., m): the sorted keys and their original
  positions, and for each output j in 0..n-1 the sorted position of the last index equal to j
  (-1: none)."""
  keys, perm = sort_last(small)
  j = type(small).arange(n, device=small.device).expand(small.shape[:-1] + (n,))
  count = _count(keys, j, False)
  last = count - 1
  hit = (count > 0) & (_take_last(keys, last) == j)
  return keys, perm, where(hit, last, -1)


def _pad_last(x, count: int, value):
  return x.pad(((0, 0),) * (x.ndim - 1) + ((0, count),), value) if count else x


# the segmented scans' combine ops: "add" (scatter_add), "mul", "max", "min" (ONNX's
# ScatterElements reductions); max and min propagate NaN as numpy's maximum and minimum do
COMBINES = ("add", "mul", "max", "min")


def identity(kind: str, dtype):
  """The value combining with which changes nothing: 0, 1, the dtype's lowest or highest."""
  if kind in ("add", "mul"):
    return 0 if kind == "add" else 1
  if dtype.is_float():
    return -math.inf if kind == "max" else math.inf
  return min_value(dtype) if kind == "max" else max_value(dtype)


def combine(kind: str, a, b):
  """a and b combined elementwise by `kind`."""
  if kind == "add":
    return a + b
  if kind == "mul":
    return a * b
  return maximum(a, b) if kind == "max" else minimum(a, b)


def _fold(kind: str, x, axis: int):
  """x reduced along axis by `kind`, in x's dtype."""
  if kind == "add":
    return x.sum(axis).cast(x.dtype)
  if kind == "mul":
    return x.prod(axis).cast(x.dtype)
  return x.max(axis) if kind == "max" else x.min(axis)


def _segment_window(x, rel, kind: str = "add"):
  """Within blocks (the last axis): out[k] = x[p] combined for rel[k] <= p <= k."""
  b = x.shape[-1]
  ramp = type(x).arange(b, device=x.device)
  keep = (ramp.reshape(1, b) <= ramp.reshape(b, 1)) & (ramp >= rel.unsqueeze(-1))
  rows = x.unsqueeze(-2).expand(x.shape[:-1] + (b, b))
  return _fold(kind, where(keep, rows, identity(kind, x.dtype)), -1)


def segment_scan(x, heads, kind: str = "add"):
  """The inclusive scan of x along its last axis restarting at each segment: out[k] = x[h] op
  ... op x[k] for h = heads[k] (<= k, the first position of k's segment; heads broadcast over
  x), op the combine `kind` (COMBINES)."""
  m, b = x.shape[-1], SCAN_BLOCK
  if m <= b:
    return _segment_window(x, heads, kind)
  blocks = -(-m // b)
  lead, hlead = x.shape[:-1], heads.shape[:-1]
  unit = identity(kind, x.dtype)
  xb = _pad_last(x, blocks * b - m, unit).reshape(lead + (blocks, b))
  hb = _pad_last(heads, blocks * b - m, m).reshape(hlead + (blocks, b))
  rel = hb - type(x).arange(0, blocks * b, b, device=x.device).reshape(blocks, 1)
  inner = _segment_window(xb, rel, kind).contiguous()
  totals = inner.shrink(tuple((0, s) for s in lead) + ((0, blocks), (b - 1, b)))
  up = hb.shrink(tuple((0, s) for s in hlead) + ((0, blocks), (b - 1, b))) // b
  carried = segment_scan(totals.reshape(lead + (blocks,)), up.reshape(hlead + (blocks,)), kind)
  before = carried.contiguous().pad(((0, 0),) * len(lead) + ((1, 0),), unit)
  before = before.shrink(tuple((0, s) for s in lead) + ((0, blocks),))
  out = combine(kind, inner, where(rel < 0, before.reshape(lead + (blocks, 1)), unit))
  return out.reshape(lead + (blocks * b,)).shrink(tuple((0, s) for s in lead) + ((0, m),))


def _pad_to(x, shape: tuple, value=0):
  """x padded at the end of each dim to `shape` (the dims a scatter's index did not cover)."""
  return x.pad(tuple((0, s - i) for i, s in zip(x.shape, shape)), value)


def _winners(idx, axis: int, n: int, lead: tuple):
  """(keys, perm, last) of idx's segments along axis (searched once per distinct row: `last` made
  a buffer when `lead`, the rows it serves, has more)."""
  small = _int32(_narrowed(idx, axis), n)
  keys, perm, last = _segments(small, n)
  if prod(lead) > prod(small.shape[:-1]):
    last = last.contiguous()                         # searched once, read by every column
  return keys, perm, last


# ---- scatter_add, scatter --------------------------------------------------------------------

def scatter_add(t, axis: int, idx, src):
  """t with src (idx's shape, t's dtype) added at idx along axis; idx normalized (negative ones
  already wrapped; the rest out of range add nothing)."""
  n = t.shape[axis]
  if idx._elements() == 0 or n == 0:
    return t
  values = _to_last(src.detach(), axis)
  work = dtypes.float32 if values.dtype in (dtypes.float16, dtypes.bfloat16) else \
    acc_dtype(values.dtype)
  values = values.cast(work)
  keys, perm, last = _winners(idx, axis, n, values.shape[:-1])
  heads = _count(keys, keys, True).contiguous()
  sums = segment_scan(_take_last(values, perm.expand(values.shape)), heads)
  sums = _from_last(sums, axis).contiguous()       # in t's layout: the reads below run along rows
  total = _read_at(sums, axis, _from_last(last.expand(values.shape[:-1] + (n,)), axis))
  total = total.cast(t.dtype)
  out = t.detach() + _pad_to(total, t.shape)
  return record(out, (t, src), scatter_add_grad, (axis, idx))


def scatter(t, axis: int, idx, src):
  """t with src (idx's shape, t's dtype) written at idx along axis, the last duplicate (in index
  order) winning; idx normalized (out of range writes nothing)."""
  n = t.shape[axis]
  if idx._elements() == 0 or n == 0:
    return t
  lead = _to_last(idx, axis).shape[:-1]
  _, perm, last = _winners(idx, axis, n, lead)
  winner = where(last >= 0, _take_last(perm, last), -1)
  if prod(lead) > prod(winner.shape[:-1]):
    winner = winner.contiguous()
  winner = _from_last(winner.expand(lead + (n,)), axis)
  chosen = _pad_to(winner, t.shape, -1)
  out = where(chosen >= 0, _pad_to(_read_at(src.detach(), axis, winner), t.shape), t.detach())
  return record(out, (t, src), scatter_grad, (axis, idx, chosen))


def scatter_reduce(t, axis: int, idx, src, kind: str):
  """t with each src element (idx's shape, t's dtype) combined by `kind` ("mul", "max", "min")
  into t at idx along axis, as numpy's multiply.at / maximum.at / minimum.at (NaN propagates
  through max and min); idx normalized (out of range combines nothing). Each output's segment
  of the sorted indices is reduced by a segmented scan (half floats multiply in float32, as
  scatter_add adds) and combined with t once. No gradient (ONNX's ScatterElements)."""
  n = t.shape[axis]
  if idx._elements() == 0 or n == 0:
    return t
  values = _to_last(src.detach(), axis)
  if kind == "mul" and values.dtype in (dtypes.float16, dtypes.bfloat16):
    values = values.cast(dtypes.float32)
  keys, perm, last = _winners(idx, axis, n, values.shape[:-1])
  heads = _count(keys, keys, True).contiguous()
  scanned = segment_scan(_take_last(values, perm.expand(values.shape)), heads, kind)
  scanned = _from_last(scanned, axis).contiguous()
  at = _from_last(last.expand(values.shape[:-1] + (n,)), axis)
  total = where(at >= 0, _read_at(scanned, axis, at), identity(kind, values.dtype))
  total = _pad_to(total, t.shape, identity(kind, values.dtype))
  return combine(kind, t.detach().cast(values.dtype), total).cast(t.dtype)


def _read_at(g, axis: int, idx):
  """g read along axis at idx (g's other dims cut to idx's); out of range reads 0."""
  table = g.shrink(tuple(None if d == axis else (0, s) for d, s in enumerate(idx.shape)))
  return type(g)(LazyOp(L.GATHER, g.dtype, idx.shape, (table.node, idx.node), axis))


def scatter_add_grad(out, g, parents, arg):
  """scatter_add's gradient: g to t; g read at the indices to src."""
  axis, idx = arg
  return g, _read_at(g, axis, idx)


def scatter_grad(out, g, parents, arg):
  """scatter's gradient: g to t where nothing was written; g to each src element that won."""
  axis, idx, chosen = arg
  shape = [1] * idx.ndim
  shape[axis] = idx.shape[axis]
  mine = type(g).arange(idx.shape[axis], device=g.device).reshape(tuple(shape))
  won = _read_at(chosen + 1, axis, idx) == mine + 1     # out of range reads 0: never won
  return where(chosen >= 0, 0.0, g), where(won, _read_at(g, axis, idx), 0.0)


def gather_grad(out, g, parents, arg):
  """A gather's gradient: g scatter_added into the table's shape at the gather's indices."""
  (x,), (axis, index) = parents, arg
  zeros = type(g).zeros(*x.shape, dtype=g.dtype, device=g.device)
  return (scatter_add(zeros, axis, index, g),)
