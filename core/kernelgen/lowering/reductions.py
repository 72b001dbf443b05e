"""Which reductions of a kernel the Lowerer computes together: those nested in another's source
(`nested_reduces`), independent ones over the same elements that share one loop
(`sibling_reduces`: layernorm's two sums), and softmax's max and exp-sum taken in one loop as the
online softmax (`online_pairs`, `online_accumulate`: a thread per row with Opts.row_online).
"""
from __future__ import annotations

import math

from ..graph.lazy import L, LazyOp
from ..graph.schedule import ScheduleItem, kernel_reduces
from ..graph.view import View
from ..uop.ops import EXP2_NAN_UNREAD, Ops, UOp, toposort
from .index_math import gate_and
from .vector import vector_loads


def nested_reduces(item: ScheduleItem) -> set:
  """Ids of the reductions of `item` inside another of its reductions' source."""
  stop = {id(n) for n in item.inputs}
  found, stack, seen = set(), [(n, False) for n in (*reversed(item.extra), item.out)], set()
  while stack:
    node, inside = stack.pop()
    if (id(node), inside) in seen or (id(node) in stop and node is not item.out):
      continue
    seen.add((id(node), inside))
    if inside and node.op is L.REDUCE:
      found.add(id(node))
    stack.extend((s, inside or node.op is L.REDUCE) for s in node.src)
  return found


def sibling_reduces(item: ScheduleItem, nested: set) -> dict:
  """{id(r): the other reductions computed in r's loop} (Lowerer.siblings): reductions over the
  same axes of sources of one shape, that read the same other reductions of the kernel and not
  each other, are independent passes over the same elements, so one loop computes them all
  (layernorm's sum and sum of squares read the row once). Only loops of one thread use it."""
  reduces = kernel_reduces(item)
  if len(reduces) < 2:
    return {}
  groups: dict = {}
  for r in reduces:
    key = (r.arg[1], r.src[0].shape, _reduces_in(r.src[0], item), id(r) in nested)
    groups.setdefault(key, []).append(r)
  return {id(r): [s for s in group if s is not r] for group in groups.values() if len(group) > 1
          for r in group}


def online_pairs(item: ScheduleItem) -> dict:
  """{id(r): (m, l, x, c)} for softmax's pairs in `item`: m = max(x) and l = sum(exp2((x - m) *
  c)) over the same axes (max_shifted), and x free of the kernel's reductions (online_accumulate
  takes both in one loop)."""
  pairs = {}
  for l in kernel_reduces(item):
    if l.arg[0] is not Ops.ADD or (shifted := max_shifted(unmasked(l))) is None:
      continue
    m, x, c = shifted
    if m.arg[1] == l.arg[1] and not _reduces_in(x, item):
      # over a symbolic row, x as the max reads it (its padding -inf: adds exp2(-inf) = 0)
      pairs[id(m)] = pairs[id(l)] = (m, l, m.src[0], c)
  return pairs


def max_shifted(node: LazyOp) -> tuple | None:
  """(m, x, c) where `node` is exp2((x - m) * c) with m = max(x) over some axes, read through
  its broadcast back to x's shape, and c > 0 a constant: softmax's exponent, whose argument is
  never above 0 (x <= m; -inf or NaN where x or m is not finite). None for any other node."""
  if not _is_alu(node, Ops.EXP2) or not _is_alu(scaled := node.src[0], Ops.MUL) or \
     not _is_alu(scaled.src[0], Ops.SUB):
    return None
  x, seen = scaled.src[0].src
  c = scaled.src[1].src[0] if scaled.src[1].op is L.VIEW and scaled.src[1].src else scaled.src[1]
  if seen.op is not L.VIEW or not seen.src or c.op is not L.CONST or not 0 < c.arg < math.inf:
    return None
  m = seen.src[0]      # (a node realized earlier keeps no sources: not known to be max(x))
  if m.op is not L.REDUCE or not m.src or m.arg[0] is not Ops.MAX or \
     unmasked(m) is not x or \
     seen.arg != View.contiguous(m.shape).expand(x.shape) or not x.dtype.is_float():
    return None
  return m, x, float(c.arg)


def unmasked(r: LazyOp) -> LazyOp:
  """The source of reduction `r` before the padding of its symbolic axes was replaced by the
  op's identity (tensor/ops/reduce.py: r.bound is set and r reads an identity view of where(i <
  n, x, identity), tensor/symbolic.masked): x; else r's source. A softmax over rows of n takes
  max(where(i < n, x, -inf)) and the sum of where(i < n, exp2((x - max) * c), 0): at every
  value position x <= max all the same (max_shifted)."""
  node = r.src[0]
  inner = node.src[0] if node.op is L.VIEW and node.src else None
  if not r.bound or inner is None or node.arg != View.contiguous(inner.shape) or \
     not _is_alu(inner, Ops.WHERE):
    return node
  return inner.src[1]


def _is_alu(node: LazyOp, op: Ops) -> bool:
  return node.op is L.ALU and node.arg is op and bool(node.src)


def _reduces_in(node: LazyOp, item: ScheduleItem) -> frozenset:
  """Ids of the reductions of `item` inside `node`'s expression."""
  stop = {id(n) for n in item.inputs + item.recomputed}
  found, stack, seen = set(), [node], set()
  while stack:
    n = stack.pop()
    if id(n) in seen or id(n) in stop or n.realized:
      continue
    seen.add(id(n))
    if n.op is L.REDUCE:
      found.add(id(n))
    stack.extend(n.src)
  return frozenset(found)


def online_accumulate(lw, node: LazyOp, pair: tuple, points: list, idxs: tuple, gate,
                      ranges: list, vec: int) -> UOp:
  """The max m and the exp-sum l of online_pairs' pair in one loop over the row: per trip, with
  the trip's values x (those past the row's end as -inf) and m' = max(m, x...),
      l' = l * exp2((m - b) * c) + sum exp2((x - b) * c),   b = m', or 0 while m' is -inf
  (every value so far -inf: l stays 0, and 0 / 0 gives NaN where the row ends so, as numpy).
  Every exp2 argument is <= 0 or -inf while m' is finite; a NaN argument needs x or m' NaN, or
  x = m' = +inf, so the final m is NaN or +inf: l is made NaN then, after the loop (as in two
  passes), and the exp2s need not handle NaN (EXP2_NAN_UNREAD). l's ASSIGN is listed before
  m's, so every read of the old m comes first (attention.py does the same). Caches the other
  reduction of the pair in the Lowerer `lw`; returns node's value."""
  m_node, s_node, x_node, scale = pair
  xs = [(lw.value(x_node, p, gate_and(gate, v)), v) for p, v in points]
  if vec > 1:
    xs = vector_loads(xs, vec)
  dtype = xs[0][0].dtype
  ninf, zero, c = (UOp.const(dtype, v) for v in (-math.inf, 0.0, scale))
  values = [x if v is None else v.where(x, ninf) for x, v in xs]
  top = values[0]
  for x in values[1:]:
    top = UOp(Ops.MAX, dtype, (top, x))
  outer = [u for u in toposort(list(idxs) + ([gate] if gate is not None else []))
           if u.op is Ops.RANGE]
  m = UOp(Ops.DEFINE_ACC, dtype, (ninf, *outer), lw._id())
  new_m = UOp(Ops.MAX, dtype, (m, top))
  base = new_m.eq(ninf).where(zero, new_m)
  total = None
  for x in values:
    term = UOp(Ops.EXP2, dtype, ((x - base) * c,), EXP2_NAN_UNREAD)
    total = term if total is None else total + term
  l = UOp(Ops.DEFINE_ACC, dtype, (zero, *outer), lw._id())
  new_l = l * UOp(Ops.EXP2, dtype, ((m - base) * c,), EXP2_NAN_UNREAD) + total
  body = (UOp(Ops.ASSIGN, dtype, (l, new_l)), UOp(Ops.ASSIGN, dtype, (m, new_m)))
  for rng in reversed(ranges):
    body = (UOp(Ops.ENDRANGE, None, (rng, *body)),)
  final_m = UOp(Ops.AFTER, dtype, (m, body[0])) if ranges else new_m
  final_l = UOp(Ops.AFTER, dtype, (l, body[0])) if ranges else new_l
  nan_in = final_m.ne(final_m) | final_m.eq(UOp.const(dtype, math.inf))
  got = {id(m_node): final_m, id(s_node): nan_in.where(UOp.const(dtype, math.nan), final_l)}
  other = s_node if node is m_node else m_node
  lw.cache[(id(other), idxs, gate)] = got[id(other)]
  return got[id(node)]
