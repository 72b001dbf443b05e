"""Lowering a block sorting network (lazy `L.SORTNET`, made by frontend/sort.py): one workgroup per
block of consecutive (key, index) pairs runs many compare-exchange steps of a bitonic network in
workgroup memory, one BARRIER between steps, instead of one kernel per step.

The node's source has shape (..., m, 2) (word pairs: the key, then the index whose top bit is a
flag that does not take part in comparisons); arg = (block, steps): `block` pairs (a power of two
dividing m) per workgroup, `steps` the (span, flip) steps to run, each within aligned runs of
`span` <= block pairs: pair i of a run meets span-1-i (flip) or i + span/2, the smaller (key,
then index) going first. Each thread loads block/threads pairs (the source's expression is lowered
at those positions, so a preceding step made of views fuses into the loads), handles
block/2/threads compare-exchanges per step, and stores its pairs at the end.
"""
from __future__ import annotations

from ..graph.view import prod
from ..uop.ops import Ops, UOp
from .index_math import I32, int_const, linear_index, unravel

SORT_THREADS = 256   # threads per workgroup at most (WebGPU's guaranteed workgroup size)


def _positions(j: UOp, span: int, flip: bool) -> tuple[UOp, UOp]:
  """The two positions in the block that compare-exchange j (0 <= j < block/2) meets."""
  half = span // 2
  run, i = (j, int_const(0)) if half == 1 else (j // int_const(half), j % int_const(half))
  first = run * int_const(span) + i
  second = run * int_const(span) + (int_const(span - 1) - i) if flip else first + int_const(half)
  return first, second


def _exchange(keys: UOp, idx: UOp, a: UOp, b: UOp, low: UOp) -> list[UOp]:
  """Stores that put the smaller of the pairs at a and b first (at a)."""
  ka, kb, ia, ib = keys.load(a), keys.load(b), idx.load(a), idx.load(b)
  la, lb = ia & low, ib & low
  swap = kb.lt(ka) | (kb.eq(ka) & lb.lt(la))
  return [keys.src[0].store(a, swap.where(kb, ka)), keys.src[0].store(b, swap.where(ka, kb)),
          idx.src[0].store(a, swap.where(ib, ia)), idx.src[0].store(b, swap.where(ia, ib))]


def sortnet_stores(lw) -> list[UOp]:
  """The stores of the SORTNET kernel `lw.item` (see the module docstring)."""
  out = lw.item.out
  block, steps = out.arg
  word, shape = out.dtype, out.shape[:-1]
  groups, threads = prod(shape) // block, min(block // 2, SORT_THREADS)
  gid = UOp(Ops.SPECIAL, I32, (), ("gid", 0, groups))
  lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, threads))
  spread = [(gid, block, groups), (lid, 1, threads)]
  local = [UOp(Ops.DEFINE_LOCAL, word.ptr(block, local=True), (), lw._id()) for _ in range(2)]
  stores = []
  for q in range(block // threads):
    at = tuple(unravel(spread, q * threads, shape))
    p = lid + int_const(q * threads)
    for c, buf in enumerate(local):
      stores.append(buf.store(p, lw.value(out.src[0], at + (int_const(c),), None)))
  low = UOp.const(word, (1 << (word.bits - 1)) - 1)
  for span, flip in steps:
    keys, idx = (UOp(Ops.AFTER, b.dtype, (b, UOp(Ops.BARRIER, None, tuple(stores))))
                 for b in local)
    stores = []
    for r in range(block // 2 // threads):
      a, b = _positions(lid + int_const(r * threads), span, flip)
      stores += _exchange(keys, idx, a, b, low)
  ready = [UOp(Ops.AFTER, b.dtype, (b, UOp(Ops.BARRIER, None, tuple(stores)))) for b in local]
  result = []
  for q in range(block // threads):
    flat = linear_index(spread, q * threads)
    p = lid + int_const(q * threads)
    for c, buf in enumerate(ready):
      result.append(lw.params[0].store(flat * int_const(2) + int_const(c), buf.load(p)))
  return result
