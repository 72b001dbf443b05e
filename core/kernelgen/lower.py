"""Lowering: one scheduled kernel (a lazy node over views) -> a UOp graph per IR.md.

Each thread computes `upcast` consecutive output elements: its global index comes from SPECIAL
gid/lid, output indices are unravelled from it, and the expression is lowered at those indices:
views become index math (with masks as load gates), reductions become RANGE loops over a
DEFINE_ACC with ASSIGN/ENDRANGE/AFTER, and loads past the end of the output are gated. Index
math is int32; `unravel` folds the common cases (permutes, expands, windows) without div/mod.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .dtype import dtypes, max_value, min_value
from .lazy import L, LazyOp
from .ops import Ops, UOp, toposort
from .program import BufferSpec
from .schedule import ScheduleItem
from .view import View, contiguous_strides, prod

I32 = dtypes.int32


@dataclass(frozen=True)
class Opts:
  local: int = 1        # threads per workgroup (dimension 0)
  upcast: int = 1       # consecutive outputs per thread (unrolled)


def _c(v: int) -> UOp:
  return UOp.const(I32, v)


def _lin(terms, offset: int) -> UOp:
  """sum(u * stride) + offset as int32 UOps."""
  out = None
  for u, s, _ in terms:
    t = u if s == 1 else u * _c(s)
    out = t if out is None else out + t
  if out is None:
    return _c(offset)
  return out + _c(offset) if offset else out


def _span(terms) -> tuple[int, int]:
  lo = sum(min(0, s * (n - 1)) for _, s, n in terms)
  hi = sum(max(0, s * (n - 1)) for _, s, n in terms)
  return lo, hi


def unravel(terms, offset: int, shape) -> list[UOp]:
  """Indices into `shape` (row-major) of the linear position sum(u*stride) + offset."""
  out = []
  for k, n in enumerate(shape):
    if n == 1:
      out.append(_c(0))
      continue
    inner = prod(shape[k + 1:])
    out.append(_dim_index(terms, offset, inner, n))
  return out


def _dim_index(terms, offset: int, inner: int, n: int) -> UOp:
  period = inner * n
  kept = [t for t in terms if t[1] % period]
  off = offset % period
  whole = [(u, s // inner, e) for u, s, e in kept if s % inner == 0]
  rest = [t for t in kept if t[1] % inner]
  lo, hi = _span(rest)
  if 0 <= lo + off % inner and hi + off % inner < inner:
    q, (qlo, qhi) = _lin(whole, off // inner), _span(whole)
    qlo, qhi = qlo + off // inner, qhi + off // inner
    if 0 <= qlo and qhi < n:
      return q
    return (q + _c(-(qlo // n) * n)) % _c(n) if qlo < 0 else q % _c(n)
  lo, hi = _span(kept)
  shift = -((lo + off) // period) * period if lo + off < 0 else 0
  lin = _lin(kept, off + shift)
  q = lin if inner == 1 else lin // _c(inner)
  return q if hi + off + shift < period else q % _c(n)


def _and(a: UOp | None, b: UOp | None) -> UOp | None:
  if a is None:
    return b
  return a if b is None else a & b


_REDUCE_BOOL = {Ops.ADD: Ops.OR, Ops.MUL: Ops.AND, Ops.MAX: Ops.OR, Ops.MIN: Ops.AND}


def _identity(op: Ops, dtype):
  if op is Ops.ADD:
    return 0
  if op is Ops.MUL:
    return 1
  return min_value(dtype) if op is Ops.MAX else max_value(dtype)


class Lowerer:
  """Lowers the expression of one ScheduleItem; memoized by (node, indices, gate)."""

  def __init__(self, item: ScheduleItem):
    self.item = item
    self.slots = {id(n): i + 1 for i, n in enumerate(item.inputs)}
    self.params = [UOp(Ops.PARAM, item.out.dtype.ptr(item.out.size), (), 0)]
    self.params += [UOp(Ops.PARAM, n.dtype.ptr(n.size), (), i + 1)
                    for i, n in enumerate(item.inputs)]
    self.cache: dict = {}
    self.next_id = 0

  def value(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    key = (id(node), idxs, gate)
    got = self.cache.get(key)
    if got is None:
      got = self.cache[key] = self._lower(node, idxs, gate)
    return got

  def _load(self, node: LazyOp, lin: UOp, gate: UOp | None) -> UOp:
    buf = self.params[self.slots[id(node)]]
    return buf.load(lin, gate, 0) if gate is not None else buf.load(lin)

  def _lower(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    if node is not self.item.out and id(node) in self.slots:
      terms = [(i, s, n) for i, s, n in zip(idxs, contiguous_strides(node.shape), node.shape)]
      return self._load(node, _lin([t for t in terms if t[1] and t[2] != 1], 0), gate)
    if node.op is L.CONST:
      return UOp.const(node.dtype, node.arg)
    if node.op is L.IOTA:
      return idxs[0]
    if node.op is L.VIEW:
      return self._view(node, idxs, gate)
    if node.op is L.REDUCE:
      return self._reduce(node, idxs, gate)
    srcs = [self.value(s, idxs, gate) for s in node.src]
    if node.op is L.CAST:
      return srcs[0].cast(node.dtype)
    if node.op is L.BITCAST:
      return srcs[0].bitcast(node.dtype)
    if node.op is L.CONTIGUOUS:
      return srcs[0]
    return self._alu(node, srcs)

  def _alu(self, node: LazyOp, srcs: list[UOp]) -> UOp:
    op = node.arg
    if srcs[-1].dtype == dtypes.bool and op in _REDUCE_BOOL:
      op = _REDUCE_BOOL[op]
    return UOp(op, node.dtype, tuple(srcs))

  def _view(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    view: View = node.arg
    src = node.src[0]
    valid = view.valid(list(idxs))
    inner_gate = _and(gate, valid)
    terms = view.terms(list(idxs))
    if id(src) in self.slots and src is not self.item.out:
      return self._load(src, _lin(terms, view.offset), inner_gate)
    src_idxs = tuple(unravel(terms, view.offset, src.shape))
    out = self.value(src, src_idxs, inner_gate)
    return out if valid is None else valid.where(out, out.const_like(0))

  def _reduce(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    op, axes = node.arg
    src = node.src[0]
    ranges, src_idxs = [], list(idxs)
    for a in axes:
      r = UOp(Ops.RANGE, I32, (_c(src.shape[a]),), self._id())
      ranges.append(r)
      src_idxs[a] = r
    body = self.value(src, tuple(src_idxs), gate)
    outer = [u for u in toposort(list(idxs) + ([gate] if gate is not None else []))
             if u.op is Ops.RANGE]
    if body.dtype == dtypes.bool:
      op = _REDUCE_BOOL[op]
    init = UOp.const(body.dtype, _identity(op, body.dtype))
    acc = UOp(Ops.DEFINE_ACC, body.dtype, (init, *outer), self._id())
    update = UOp(Ops.ASSIGN, body.dtype, (acc, UOp(op, body.dtype, (acc, body))))
    end = update
    for r in reversed(ranges):
      end = UOp(Ops.ENDRANGE, None, (r, end))
    return UOp(Ops.AFTER, body.dtype, (acc, end))

  def _id(self) -> int:
    self.next_id += 1
    return self.next_id - 1


def lower(item: ScheduleItem, opts: Opts) -> tuple[UOp, list[BufferSpec]]:
  """The kernel's SINK and its buffer table (slot 0: the output)."""
  lw = Lowerer(item)
  out = item.out
  n = out.size
  per_group = opts.local * opts.upcast
  groups = max(1, math.ceil(n / per_group))
  gid = UOp(Ops.SPECIAL, I32, (), ("gid", 0, groups))
  lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, opts.local))
  thread = gid * _c(opts.local) + lid if opts.local > 1 else gid
  stores = []
  for j in range(opts.upcast):
    flat = thread * _c(opts.upcast) + _c(j) if opts.upcast > 1 else thread
    gate = flat.lt(_c(n)) if groups * per_group > n else None
    idxs = tuple(unravel([(flat, 1, n)], 0, out.shape))
    value = lw.value(out, idxs, gate)
    stores.append(lw.params[0].store(flat, value, gate))
  buffers = [BufferSpec(0, "out", out.dtype, n, "write")]
  buffers += [BufferSpec(i + 1, f"in{i + 1}", s.dtype, s.size, "read")
              for i, s in enumerate(item.inputs)]
  return UOp(Ops.SINK, None, tuple(stores)), buffers
