"""A symbolic kernel at one bound value of its dim, as the static kernel of that size (issue 34:
no speed lost to generality).

The padded layout (graph/dims.py) gives a symbolic kernel the shape of its dim's top, so its
lowering cannot take the forms that the static kernel of a small size takes: at m = 1,
matmul (m, 512) @ (512, 512) is a 1-row matvec statically (rows per thread read as vector loads,
a grid of exactly its threads), a register tile symbolically (lavapipe: 1.28-1.33x the static
kernel's GPU time). `item_at` gives the kernel's graph with the dim's axes cut to `value`: every
node that is not an input takes its shape with those axes at `value` (a VAR of the dim becomes
that constant), the inputs' buffers stay as they are (their padded layout: the views into them
keep their strides, so the cut graph reads the same elements), and the output is stored
contiguously at the same positions where the dim's axes lead its shape. Lowered as any static
graph, that is the static kernel of that size (compiler.with_variants makes it a variant for
that one value: lowering/pinned.py STATIC).

Only what keeps the same addresses is cut: a view over a computed node whose cut axes lead its
shape (so its contiguous strides are unchanged) and whose reads stay inside it, elementwise nodes,
reductions, constants and ramps, a view that broadcasts a static value along the dim's axes
(its consumers read that prefix of it), and an input read at its own shape whose cut axis leads
(its first elements: `_prefix`); anything else (gathers, attention, writes, other dims, a
floored or scaled size of the dim, an output whose cut axis does not lead) gives None. With
`writes` (graph/one_row.py write_joined_at) an in-place write is cut too (its value's rows, from
the same start), gathers (the index cut, the table kept) and other dims' values kept, and a
masked view's reads bounded where its mask holds (a rotated key's concatenated halves).
"""
from __future__ import annotations

from ..dtype import dtypes
from .dims import Sym
from .lazy import L, LazyOp
from .schedule import ScheduleItem
from .view import View, contiguous_strides, prod

# the nodes whose shapes may be cut (sources permitting)
_CUT = (L.ALU, L.CAST, L.BITCAST, L.CONTIGUOUS, L.REDUCE, L.VIEW, L.CONST, L.IOTA)
_WRITES = (L.GATHER,)       # cut too where item_at's `writes` asks


class _Refused(Exception):
  """The graph holds something item_at does not cut (see the module docstring)."""


def item_at(item: ScheduleItem, name: str, value: int, writes: bool = False,
            memo: dict | None = None) -> ScheduleItem | None:
  """`item` with dim `name`'s axes cut to `value` (the module docstring), or None where it holds
  anything else, reads past the cut, or is a row kernel. `writes`: in-place writes are cut too
  (_write), with the gathers in their values (a rotary table read at the position ids) and other
  dims' run-time values kept (a write's start). `memo` ({id: cut node}, filled): shared by calls
  that must cut a node they both hold to one node (graph/one_row.py write_joined_at)."""
  if item.rows:
    return None
  leaves = {id(n) for n in item.inputs}
  memo = {} if memo is None else memo
  try:
    out = _cut(item.out, name, value, leaves, memo, writes)
    extra = tuple(_cut(e, name, value, leaves, memo, writes) for e in item.extra)
    recomputed = tuple(memo[id(r)] for r in item.recomputed if id(r) in memo)
    for old, new in zip((item.out, *item.extra), (out, *extra)):
      if old.op is not L.WRITE and not _leading(old.shape, new.shape):
        return None      # stored contiguously: the same positions only where the cut axes lead
  except _Refused:
    return None
  if len(recomputed) != len(item.recomputed):
    return None
  return ScheduleItem(out, item.inputs, item.name, (), recomputed, extra)


def _cut(node: LazyOp, name: str, value: int, leaves: set, memo: dict,
         writes: bool = False) -> LazyOp:
  """`node` rebuilt with dim `name`'s axes at `value` (inputs kept): iterative, sources first."""
  stack = [node]
  while stack:
    n = stack[-1]
    if id(n) in memo:
      stack.pop()
      continue
    if id(n) in leaves:
      memo[id(n)] = n
      stack.pop()
      continue
    srcs = _sources(n) if writes else n.src
    todo = [s for s in srcs if id(s) not in memo]
    if todo:
      stack.extend(todo)
      continue
    stack.pop()
    memo[id(n)] = _rebuilt(n, [memo[id(s)] for s in srcs], name, value, leaves, writes)
  return memo[id(node)]


def _axes(node: LazyOp, name: str) -> list[int]:
  """The axes of `node` that are dim `name` itself; _Refused where another size names it (or
  another dim: one dim is cut)."""
  axes = []
  for a, s in enumerate(node.sym or ()):
    if not isinstance(s, Sym):
      continue
    if not s.is_dim or s.terms[0][0] != name:
      raise _Refused
    axes.append(a)
  return axes


def _rebuilt(node: LazyOp, srcs: list, name: str, value: int, leaves: set,
             writes: bool = False) -> LazyOp:
  if node.op is L.VAR:
    if node.arg[0] == name:
      return LazyOp(L.CONST, dtypes.int32, (), arg=value, device=node.device)
    if writes:
      return node         # another dim's run-time value (a write's start) stays one
    raise _Refused
  if writes and node.op is L.WRITE and not node.realized:
    return _write(node, srcs)
  if node.op not in _CUT + _WRITES * writes or node.realized:
    raise _Refused
  axes = _axes(node, name)
  shape = tuple(value if a in axes else n for a, n in enumerate(node.shape))
  if node.op is L.VIEW:
    return _view(node, srcs[0], shape, axes, value, leaves, writes)
  if node.op is L.GATHER:       # the table as it is, the index (shaped like the node) cut
    if srcs[0] is not node.src[0]:
      raise _Refused
    srcs = [srcs[0], _fit(srcs[1], shape, value, leaves, writes)]
  elif node.op is L.REDUCE:
    reduced = node.arg[1]
    if tuple(1 if a in reduced else n for a, n in enumerate(srcs[0].shape)) != shape:
      raise _Refused
  else:
    srcs = [_fit(s, shape, value, leaves, writes) for s in srcs]
  if shape == node.shape and all(a is b for a, b in zip(srcs, node.src)):
    return node
  # (a reduction's `bound`, its run-time length, is left out: the cut graph's sizes are exact)
  return LazyOp(node.op, node.dtype, shape, tuple(srcs), node.arg, device=node.device, sym=())


def _sources(node: LazyOp) -> tuple:
  """The sources _cut cuts first: an in-place write's value without a static view reading it in
  order (_in_order: the write then stores the cut value, _write), else node.src."""
  if node.op is L.WRITE and node.src[1].op is L.VIEW and _in_order(node.src[1]):
    return (node.src[0], node.src[1].src[0]) + node.src[2:]
  return node.src


def _write(node: LazyOp, srcs: list) -> LazyOp:
  """In-place write `node` (target, value, start, stop; its sources as _sources gives them) with
  its value cut: the write stores the cut value's rows from the same start (its stop cut alike);
  the target, and the node's shape, kept. _Refused where the value was not cut or the target
  was (a write of the whole top, or into a cut buffer)."""
  target, value, start, stop = srcs
  if target is not node.src[0] or value.shape == node.src[1].shape:
    raise _Refused
  return LazyOp(L.WRITE, node.dtype, node.shape, (target, value, start, stop), node.arg,
                device=node.device, sym=node.sym)


def _in_order(view_node: LazyOp) -> bool:
  """VIEW `view_node` reads its source's elements in order at the same shape (no mask, offset)."""
  v, src = view_node.arg, view_node.src[0]
  return v.shape == src.shape and v.mask is None and v.offset == 0 and \
    all(n == 1 or s == w for n, s, w in zip(v.shape, v.strides, contiguous_strides(v.shape)))


def _fit(src: LazyOp, shape: tuple, value: int, leaves: set, writes: bool = False) -> LazyOp:
  """Source `src` of an elementwise node of (cut) `shape`: itself where it has that shape; a view
  without the dim in its sizes (a broadcast: a weight expanded along m) cut there too, as its
  consumer reads only that prefix of it; else _Refused."""
  if src.shape == shape:
    return src
  axes = [a for a, (n, m) in enumerate(zip(src.shape, shape)) if n != m]
  if len(src.shape) != len(shape) or any(shape[a] != value for a in axes):
    raise _Refused
  if id(src) in leaves and _leading(src.shape, shape):
    return _prefix(src, shape)
  if src.op is not L.VIEW or id(src) in leaves:
    raise _Refused
  return _view(src, src.src[0], shape, axes, value, leaves, writes)


def _prefix(leaf: LazyOp, shape: tuple) -> LazyOp:
  """Input `leaf` read elementwise at its own shape, cut to `shape` (its cut axis leads): the
  view of its first elements, at the positions the uncut kernel reads them."""
  strides = tuple(0 if n == 1 else s for n, s in zip(shape, contiguous_strides(leaf.shape)))
  return LazyOp(L.VIEW, leaf.dtype, shape, (leaf,), View(shape, strides, 0, None),
                device=leaf.device, sym=())


def _view(node: LazyOp, src: LazyOp, shape: tuple, axes: list, value: int,
          leaves: set, writes: bool = False) -> LazyOp:
  """VIEW `node` over the cut `src` with its own dim axes at `value`: the same strides and offset
  (its mask cut too), where they address the same elements of the cut source and stay in it."""
  old = node.src[0]
  if id(old) not in leaves and not _leading(old.shape, src.shape):
    raise _Refused
  view: View = node.arg
  mask = None if view.mask is None else tuple(
    (min(b, value), min(e, value)) if a in axes else (b, e) for a, (b, e) in enumerate(view.mask))
  strides = tuple(0 if n == 1 else s for n, s in zip(shape, view.strides))
  spans = [(0, n) for n in shape] if mask is None or not writes else mask
  least = view.offset + sum(min(b * s, (e - 1) * s) for (b, e), s in zip(spans, strides))
  most = view.offset + sum(max(b * s, (e - 1) * s) for (b, e), s in zip(spans, strides))
  if mask is None and (least < 0 or most >= max(prod(src.shape), 1)):
    raise _Refused
  if mask is not None and (any(b >= e for b, e in mask) or least < 0 or most >= prod(src.shape)):
    raise _Refused
  if shape == node.shape and src is old:
    return node
  return LazyOp(L.VIEW, node.dtype, shape, (src,), View(shape, strides, view.offset, mask),
                device=node.device, sym=())


def _leading(old: tuple, new: tuple) -> bool:
  """Shape `new` (`old` with some axes shorter) lays out its elements at `old`'s contiguous
  positions: every axis before the first cut one is of size 1."""
  cut = [a for a, (o, n) in enumerate(zip(old, new)) if o != n]
  return not cut or len(cut) == 1 and all(n == 1 for n in old[:cut[0]])
