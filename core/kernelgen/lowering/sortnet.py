"""Lowering a run of sorting-network steps (`L.SORTNET`, made by tensor/ops/sort.py): each thread
holds a few (key, index) pairs in registers and runs several compare-exchange steps of a bitonic
network on them, so one kernel does the work of several steps (no workgroup memory, no barrier).

The node's source has shape (..., m, 2) (word pairs: the key, then the index whose top bit is a
flag that does not take part in comparisons), m a power of two, each row sorted on its own.
arg = (bits, steps): `bits` the position bits a thread's pairs differ in (the thread holds the
2^len(bits) pairs whose positions agree on every other bit; the other bits of a position number
the thread); `steps` a list of (h, d): pair p meets pair p ^ 2^h, and the two are put in ascending
order (smaller key, then smaller index, at the lower position) when bit d of p is 0, descending
when it is 1 (the standard bitonic network: stage k has steps (k-1, k) ... (0, k); d = log2(m)
keeps the last stage ascending). Every h is in `bits`; d may be any bit: a thread-uniform value
when it is not one of `bits`. The source's expression is lowered at the positions a thread loads,
so whatever computed the pairs fuses into the first kernel.
"""
from __future__ import annotations

from ..dtype import dtypes
from ..graph.view import prod
from ..uop.ops import Ops, UOp
from .index_math import I32, int_const, linear_index, unravel


def _spread(t: UOp, bits: tuple) -> UOp:
  """t with a zero bit inserted at each of `bits` (increasing): the thread's lowest position."""
  for b in bits:
    t = (t // int_const(1 << b)) * int_const(1 << (b + 1)) + t % int_const(1 << b) if b else \
      t * int_const(2)
  return t


def _offset(q: int, bits: tuple) -> int:
  """The position offset of a thread's pair q: q's binary digits placed at `bits`."""
  return sum(1 << b for k, b in enumerate(bits) if q >> k & 1)


def _less(ka: UOp, ia: UOp, kb: UOp, ib: UOp, low: UOp) -> UOp:
  """(ka, ia) < (kb, ib), comparing the index without its flag bit."""
  return ka.lt(kb) | (ka.eq(kb) & (ia & low).lt(ib & low))


def _threads(count: int, local: int) -> tuple[UOp, UOp | None, int]:
  """(thread index, gate or None, workgroups) for `count` threads in groups of `local`."""
  local = max(1, min(local, count))
  groups = -(-count // local)
  gid = UOp(Ops.SPECIAL, I32, (), ("gid", 0, groups))
  if local == 1:
    return gid, None, groups
  lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, local))
  thread = gid * int_const(local) + lid
  return thread, (thread.lt(int_const(count)) if groups * local > count else None), groups


def sortnet_stores(lw, local: int = 64) -> list[UOp]:
  """The stores of the SORTNET kernel `lw.item` (see the module docstring), `local` threads per
  workgroup."""
  out = lw.item.out
  bits, steps = out.arg
  word, lead, m = out.dtype, out.shape[:-2], out.shape[-2]
  regs = 1 << len(bits)
  count = prod(lead) * (m // regs)
  thread, gate, _ = _threads(count, local)
  at = unravel([(thread, 1, count)], 0, lead + (m // regs,))
  rows, base = tuple(at[:-1]), _spread(at[-1], bits)
  keys, idx = [], []
  for q in range(regs):
    p = base + int_const(_offset(q, bits)) if _offset(q, bits) else base
    keys.append(lw.value(out.src[0], rows + (p, int_const(0)), gate))
    idx.append(lw.value(out.src[0], rows + (p, int_const(1)), gate))
  low = UOp.const(word, (1 << (word.bits - 1)) - 1)
  for h, d in steps:
    k = bits.index(h)
    if d in bits:
      flip_bit, uniform = bits.index(d), None
    else:
      flip_bit, uniform = None, (base // int_const(1 << d) % int_const(2)).eq(int_const(1))
    for q in range(regs):
      if q >> k & 1:
        continue
      r = q | (1 << k)
      down = uniform if flip_bit is None else UOp.const(dtypes.bool, bool(q >> flip_bit & 1))
      swap = _less(keys[r], idx[r], keys[q], idx[q], low).ne(down)
      keys[q], keys[r] = swap.where(keys[r], keys[q]), swap.where(keys[q], keys[r])
      idx[q], idx[r] = swap.where(idx[r], idx[q]), swap.where(idx[q], idx[r])
  strides = [prod(out.shape[a + 1:]) for a in range(len(lead))]
  row_flat = linear_index([(u, s, n) for u, s, n in zip(rows, strides, lead) if n > 1], 0)
  stores = []
  for q in range(regs):
    flat = row_flat + (base + int_const(_offset(q, bits))) * int_const(2)
    for c, value in enumerate((keys[q], idx[q])):
      stores.append(lw.params[0].store(flat + int_const(c) if c else flat, value, gate))
  return stores
