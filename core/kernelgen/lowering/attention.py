"""Lowering fused attention (lazy `L.ATTENTION`, made by frontend/model_ops.py): softmax(q k^T *
scale + mask) v in ONE kernel, a thread per query row, the L x S scores never stored.

The node's sources are q (..., L, E), k (..., S, E), v (..., S, Ev) and optionally a mask
(..., L, S) (bool: keep where True; float: added), all broadcast to the output's batch axes;
arg = (scale, causal). Each thread holds its query row (E values, times scale) and Ev
accumulators in registers and walks the keys once with the online softmax: per key j the score
s = q.k[j] (+ mask), then with the running max m and sum l

    m' = max(m, s)    c = exp(m - m')    p = exp(s - m')    l' = l c + p    acc' = acc c + p v[j]

and stores acc / l. Scores are kept in log2 units (exp2, log2(e) folded into the scale); where
m' is still -inf (every key so far masked) the exponents are taken against 0 instead, so a fully
masked row ends as 0 / 0 = NaN (as softmax over -inf scores, and torch), and a NaN or +inf score
makes its row NaN (MAX propagates NaN). Causal rows (keep j <= i) stop their loop at the
diagonal. float16 / bfloat16 are computed in float32 (float64 in float64), the output cast back.

The updates of l and of the accumulators read m before this key's update of m: the loop's
ENDRANGE lists m's ASSIGN last, so the linearizer (graph order within a loop body) places every
read of the old m before it.
"""
from __future__ import annotations

import math

from ..dtype import dtypes
from ..graph.schedule import ScheduleItem
from ..graph.view import prod
from ..render.target import Target
from ..uop.ops import Ops, UOp
from .index_math import I32, gate_and, int_const, unravel
from .lowerer import MAX_TRIPS, Opts
from .vector import vector_loads, vector_stores

# query rows (threads) per workgroup by default (option local=)
ATTENTION_LOCAL = 64
LOG2E = 1.0 / math.log(2.0)


def attention_opts(item: ScheduleItem, target: Target, options: dict) -> Opts:
  """Opts for the attention kernel `item`: option local= query rows per workgroup, else
  ATTENTION_LOCAL (fewer for fewer rows)."""
  out = item.out
  rows = max(prod(out.shape[:-1]), 1)
  local = int(options.get("local", 0) or 0) or min(ATTENTION_LOCAL, target.max_local,
                                                  1 << (rows - 1).bit_length())
  return Opts(local=max(1, min(local, target.max_local)))


def _threads(rows: int, local: int) -> tuple[UOp, UOp | None]:
  """(this thread's row, gate or None) for `rows` rows in workgroups of `local` threads."""
  groups = max(1, -(-rows // local))
  gid = UOp(Ops.SPECIAL, I32, (), ("gid", 0, groups))
  if local == 1:
    return gid, None
  lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, local))
  row = gid * int_const(local) + lid
  return row, (row.lt(int_const(rows)) if groups * local > rows else None)


def _row_values(lw, node, at: tuple, n: int, gate, dtype) -> list[UOp]:
  """node[at + (e,)] for e < n, as `dtype` (consecutive ungated 32-bit loads as vectors)."""
  bodies = [(lw.value(node, at + (int_const(e),), gate), None) for e in range(n)]
  if gate is None:
    bodies = vector_loads(bodies, n)
  return [b if b.dtype == dtype else b.cast(dtype) for b, _ in bodies]


def _dot(xs: list[UOp], ys: list[UOp]) -> UOp:
  """sum(x * y), added pairwise (independent chains for the SIMD lanes and pipelines)."""
  terms = [x * y for x, y in zip(xs, ys)]
  while len(terms) > 1:
    terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
             for i in range(0, len(terms), 2)]
  return terms[0]


def _key_loop(lw, n_keys: int, end: UOp | None) -> tuple[UOp, list]:
  """(RANGE, [(key index, valid or None)]) of the loop over keys 0..end-1 (end: a per-row UOp,
  or None for all n_keys), unrolled so that it runs at most MAX_TRIPS times."""
  unroll = 1
  while -(-n_keys // unroll) > MAX_TRIPS:
    unroll *= 2
  if end is None:
    trips = int_const(-(-n_keys // unroll))
  else:
    trips = (end + int_const(unroll - 1)) // int_const(unroll) if unroll > 1 else end
  rng = UOp(Ops.RANGE, I32, (trips,), lw._id())
  keys = []
  for t in range(unroll):
    j = rng * int_const(unroll) + int_const(t) if unroll > 1 else rng
    limit = end if end is not None else int_const(n_keys)
    ragged = unroll > 1 and (end is not None or (-(-n_keys // unroll)) * unroll > n_keys)
    keys.append((j, j.lt(limit) if ragged else None))
  return rng, keys


def attention_stores(lw, opts: Opts) -> list[UOp]:
  """The stores of the ATTENTION kernel `lw.item` (see the module docstring)."""
  out = lw.item.out
  q, k, v = out.src[:3]
  mask = out.src[3] if len(out.src) > 3 else None
  scale, causal = out.arg
  lead, n_q, n_k = out.shape[:-2], q.shape[-2], k.shape[-2]
  e_dim, ev_dim = q.shape[-1], v.shape[-1]
  acc_dt = dtypes.float64 if out.dtype == dtypes.float64 else dtypes.float32
  rows = prod(lead) * n_q
  row, gate = _threads(rows, max(opts.local, 1))
  at = unravel([(row, 1, max(rows, 1))], 0, lead + (n_q,))
  batch, i = tuple(at[:-1]), at[-1]
  qs = _row_values(lw, q, batch + (i,), e_dim, gate, acc_dt)
  qs = [x * UOp.const(acc_dt, scale * LOG2E) for x in qs]
  end = (i + int_const(1)).minimum(int_const(n_k)) if causal and n_q > 1 else None
  if causal and n_q == 1:
    end = None if n_k == 0 else int_const(1)
  rng, keys = _key_loop(lw, n_k, end)
  neg_inf, zero = UOp.const(acc_dt, -math.inf), UOp.const(acc_dt, 0.0)
  m = UOp(Ops.DEFINE_ACC, acc_dt, (neg_inf,), lw._id())
  l_acc = UOp(Ops.DEFINE_ACC, acc_dt, (zero,), lw._id())
  accs = [UOp(Ops.DEFINE_ACC, acc_dt, (zero,), lw._id()) for _ in range(ev_dim)]
  cur_m, cur_l, cur = m, l_acc, list(accs)
  for j, valid in keys:
    key_gate = gate_and(gate, valid)
    s = _dot(qs, _row_values(lw, k, batch + (j,), e_dim, key_gate, acc_dt))
    if mask is not None:
      mv = lw.value(mask, batch + (i, j), key_gate)
      s = mv.where(s, neg_inf) if mask.dtype == dtypes.bool else \
        s + mv.cast(acc_dt) * UOp.const(acc_dt, LOG2E)
    if valid is not None:
      s = valid.where(s, neg_inf)
    new_m = cur_m.maximum(s)
    base = new_m.eq(neg_inf).where(zero, new_m)
    corr = UOp(Ops.EXP2, acc_dt, (cur_m - base,))
    p = UOp(Ops.EXP2, acc_dt, (s - base,))
    vs = _row_values(lw, v, batch + (j,), ev_dim, key_gate, acc_dt)
    cur_l = cur_l * corr + p
    cur = [a * corr + p * x for a, x in zip(cur, vs)]
    cur_m = new_m
  # m's ASSIGN last: the other updates read m's old value (module docstring)
  assigns = [UOp(Ops.ASSIGN, acc_dt, (acc, val)) for acc, val in
             zip([l_acc] + accs + [m], [cur_l] + cur + [cur_m])]
  loop = UOp(Ops.ENDRANGE, None, (rng, *assigns))
  total = UOp(Ops.AFTER, acc_dt, (l_acc, loop))
  stores = []
  for e, acc in enumerate(accs):
    value = UOp(Ops.AFTER, acc_dt, (acc, loop)) / total
    value = value if value.dtype == out.dtype else value.cast(out.dtype)
    flat = row * int_const(ev_dim) + int_const(e) if ev_dim > 1 else row
    stores.append(lw.params[0].store(flat, value, gate))
  return vector_stores(stores, ev_dim) if gate is None else stores
