"""Vector memory for lowering: runs of consecutive 32-bit loads from one buffer become one vector
load read lane by lane (GEP), and the stores of a thread's consecutive outputs one vector store
(lower.py uses them for `Opts.group_vec` and `Opts.upcast_vec`); and expressions lowered as
vectors from the start where every buffer's elements along the vector are consecutive or one
(`vector_value`: far fewer nodes than lowering each lane, then merging the loads); and runs
of 4 gated or ungated loads at provably aligned indices as vec4 words (`aligned_loads`: slide.py's
window rows).
"""
from __future__ import annotations

from ..dtype import dtypes
from .index_math import int_const, linear_index, splat, unravel
from ..graph.lazy import L
from ..uop import trampoline
from ..uop.ops import Ops, UOp, identity_element, toposort
from ..rules.ranges import value_range
from ..rules.sums import sum_of
from ..rules.symbolic import simplify
from ..graph.view import contiguous_strides, prod

# lanes of a vector load or store at most (WGSL has vec2..vec4)
MAX_VECTOR = 4


def vector_stores(stores: list, n: int) -> list:
  """The n ungated stores of consecutive outputs as vector stores (of up to MAX_VECTOR lanes) of
  their values, whose runs of consecutive loads become vector loads (32-bit elements only)."""
  values = [v for v, _ in vector_loads([(s.src[2], None) for s in stores], n)]
  dtype, width = stores[0].src[2].dtype, _width(n)
  if dtype.itemsize != 4 or dtype == dtypes.bool or width == 1:
    return [s.replace(src=(s.src[0], s.src[1], v)) for s, v in zip(stores, values)]
  return [stores[i].src[0].store(stores[i].src[1], UOp(Ops.VECTORIZE, dtype.vec(width),
                                                       tuple(values[i:i + width])))
          for i in range(0, n, width)]


def _width(n: int) -> int:
  """The widest vector of at most MAX_VECTOR lanes that divides n."""
  return max(w for w in range(1, MAX_VECTOR + 1) if n % w == 0)


# index terms that name one value whatever else the index holds (unlike IDIV, MOD)
_INDEX_TERMS = frozenset({Ops.SPECIAL, Ops.RANGE, Ops.VAR})


def vector_loads(bodies: list, n: int, gated: bool = False) -> list:
  """`bodies` with each run of w ungated 32-bit loads (with `gated`, gated ones whose gate always
  holds too: _always_read) from one buffer at indices i, i+1, ..., i+w-1 (the same terms,
  consecutive constants) read as GEPs of one w-lane load at i; w: the widest vector of at most
  MAX_VECTOR lanes that divides n."""
  n = _width(n)
  if n == 1:
    return bodies
  groups: dict = {}
  found, unsimplified = [], []
  order = toposort([b for b, _ in bodies])
  loads = [u for u in order if u.op is Ops.LOAD]
  always = _always_read(loads) if gated else set()
  for u in loads:
    dt, src = u.dtype, u.src
    if (len(src) != 2 and u not in always) or src[0].op is not Ops.PARAM or dt.count != 1 or \
       dt.itemsize != 4 or dt is dtypes.bool:
      continue
    linear = _index_sum(src[1])
    if linear is not None:
      for t in linear[0]:
        if t.op not in _INDEX_TERMS:
          unsimplified.append(u)   # div/mod of a flat index: its simplified sum, below
          break
      else:
        found.append((u, linear))
  if unsimplified:                 # one simplify for all of them (one memo, not one per load)
    simple = simplify(UOp(Ops.SINK, None, tuple(u.src[1] for u in unsimplified))).src
    found += [(u, _index_sum(index)) for u, index in zip(unsimplified, simple)]
  for u, linear in found:
    if linear is not None:
      terms, const = linear
      groups.setdefault((u.src[0], u.dtype, frozenset(terms.items())), {})[const] = u
  mapping, runs = {}, []
  for (buf, dtype, _), loads in groups.items():
    for c in sorted(loads):
      run = []
      for k in range(n):
        v = loads.get(c + k)
        if v is None or v in mapping:
          break
        run.append(v)
      else:
        runs.append(run)
        mapping.update((v, None) for v in run)
  if runs:   # each run's index simplified now (memoized: simplify skips it later, so the users
    # of the vector loads are built once, on their final index)
    index = simplify(UOp(Ops.SINK, None, tuple(run[0].src[1] for run in runs))).src
    for run, i in zip(runs, index):
      wide = UOp(Ops.LOAD, run[0].dtype.vec(n), (run[0].src[0], i))
      for k, v in enumerate(run):
        mapping[v] = UOp(Ops.GEP, v.dtype, (wide,), k)
  if not mapping:
    return bodies
  new = _substitute(order, mapping)
  return [(new.get(b, b), v) for b, v in bodies]


def aligned_loads(values: list, n: int = MAX_VECTOR) -> list:
  """`values` with each run of n 32-bit loads from one buffer under one gate (or none) at indices
  i, i+1, ..., i+n-1 (the same terms, consecutive constants) where i is provably a multiple of n,
  read as GEPs of one n-lane load at i (gated the same, its lanes' constant as the alternative):
  a word of a buffer the WGSL writer may declare array<vec4<T>> (writer.vec4_slots), where
  vector_loads' runs may start anywhere. slide.py reads a window row's columns so."""
  order = toposort(values)
  loads = [u for u in order if u.op is Ops.LOAD and u.src[0].op is Ops.PARAM and
           u.dtype.count == 1 and u.dtype.itemsize == 4 and u.dtype is not dtypes.bool and
           (len(u.src) == 2 or u.src[3].op is Ops.CONST)]
  # the gates simplified (one pass): a padded view's column checks a run's lanes all pass
  # (x0 + u - 1 >= 0 for u >= 1) leave the gate the lanes share
  gated = [u for u in loads if len(u.src) == 4]
  simple = dict(zip(gated, simplify(UOp(Ops.SINK, None, tuple(u.src[2] for u in gated))).src)) \
    if gated else {}
  groups: dict = {}
  for u in loads:
    dt, src = u.dtype, u.src
    linear = _index_sum(src[1])
    if linear is not None:
      key = (src[0], dt, (simple[u], src[3]) if u in simple else (),
             frozenset(linear[0].items()))
      # (several nodes may load one element: a window's taps build its index each their way)
      groups.setdefault(key, (linear[0], {}))[1].setdefault(linear[1], []).append(u)
  mapping = {}
  for (buf, dtype, gate, _), (terms, loads) in groups.items():
    if any(coefficient % n for coefficient in terms.values()):
      continue
    for c in sorted(loads):
      run = [loads.get(c + k) for k in range(n)]
      if c % n or any(v is None or v[0] in mapping for v in run):
        continue
      # the index as its sum (term * coefficient + ...): what writer.vec4_slots proves aligned
      index = linear_index([(t, k, 2) for t, k in terms.items()], c)
      wide = buf.load(index, gate[0], gate[1].arg, dtype.vec(n)) if gate else \
        buf.load(index, dtype=dtype.vec(n))
      mapping.update((v, UOp(Ops.GEP, dtype, (wide,), k)) for k, same in enumerate(run)
                     for v in same)
  if not mapping:
    return values
  new = _substitute(order, mapping)
  return [new.get(v, v) for v in values]


def _always_read(loads: list) -> set:
  """The gated loads of `loads` whose gate is always true (a concat's or slice's bounds that the
  thread's ranges decide: an LSTM's gate rows of its stacked weights), read as plain loads in a
  vector load; one simplify for all the gates."""
  gated = [u for u in loads if len(u.src) == 4 and u.src[3].op is Ops.CONST]
  if not gated:
    return set()
  gates = simplify(UOp(Ops.SINK, None, tuple(u.src[2] for u in gated))).src
  return {u for u, g in zip(gated, gates) if g.op is Ops.CONST and g.arg is True}


def _index_sum(index: UOp) -> tuple | None:
  """An index as ({term: coefficient}, constant) (the cached sum, not a copy: read only), or None
  past MAX_TERMS pieces."""
  if index.op is Ops.CONST:
    return {}, index.arg
  terms, const, _, _ = sum_of(index)
  return None if terms is None else (terms, const)


def _substitute(order: list, mapping: dict) -> dict:
  """{node: its rebuilt form} for the nodes of `order` (a toposort) that `mapping` replaces or
  that use one (one pass for every body: the bodies share their index math)."""
  new = dict(mapping)
  get = new.get
  for u in order:
    if u in new:
      continue
    for s in u.src:
      if s in new:
        new[u] = UOp(u.op, u.dtype, tuple([get(x, x) for x in u.src]), u.arg)
        break
  return new


# ---- expressions lowered as vectors from the start ---------------------------------------------

def _vector_dtype(dtype) -> bool:
  """Whether values of `dtype` may be vectors here: 32-bit numbers (WGSL has vec4 of those)."""
  return dtype is not None and dtype.count == 1 and dtype.itemsize == 4 and dtype != dtypes.bool


def _wide_load(lw, node, terms, offset: int, w: int) -> UOp:
  return UOp(Ops.LOAD, node.dtype.vec(w), (lw.params[lw.slots[id(node)]], linear_index(terms, offset)))


def vector_value(lw, node, idxs: tuple, axis: int, w: int, memo: dict) -> UOp | None:
  """`node` at w points that differ only in index `axis` (idxs[axis] + 0..w-1, no gate) as one
  w-lane value: loads of consecutive elements as vector loads, of one element (broadcast along
  the axis) as a scalar load repeated, ALU ops and casts lane-wise; None where the pattern does
  not hold (other strides along the axis, masks, bool, bitcasts, 8/16-bit dtypes, iota,
  reductions): the caller lowers the points one by one."""
  return trampoline.run(_vector_value(lw, node, idxs, axis, w, memo))


def _vector_value(lw, node, idxs: tuple, axis: int, w: int, memo: dict):
  """vector_value as a trampolined walk (uop/trampoline.py): no recursion on graph depth."""
  got = memo.get(id(node), memo)
  if got is not memo:
    return got
  got = memo[id(node)] = yield _vector_node(lw, node, idxs, axis, w, memo)
  return got


def _vector_node(lw, node, idxs, axis, w, memo):
  if not _vector_dtype(node.dtype):
    return None
  slot = lw.slots.get(id(node)) if node is not lw.item.out else None
  if slot is not None:   # an input read whole: elements along the last axis are consecutive
    if any(n != 1 for n in node.shape[axis + 1:]):
      return None
    terms = zip(idxs, contiguous_strides(node.shape), node.shape)
    return _wide_load(lw, node, [t for t in terms if t[1] and t[2] != 1], 0, w)
  op = node.op
  if op is L.CONST:
    return UOp.const(node.dtype.vec(w), node.arg)
  if op is L.VAR:
    return splat(lw.value(node, idxs, None), w)
  if op is L.VIEW:
    view, src = node.arg, node.src[0]
    if view.valid(list(idxs)) is not None:
      return None
    stride = view.strides[axis] if view.shape[axis] != 1 else 0
    if stride == 0:        # the same value in every lane: lowered once
      return splat(lw.value(node, idxs, None), w)
    if stride != 1 or id(src) not in lw.slots or src is lw.item.out or \
       not _vector_dtype(src.dtype):
      return None
    return _wide_load(lw, src, view.terms(list(idxs)), view.offset, w)
  if op is L.CONTIGUOUS:
    return (yield _vector_value(lw, node.src[0], idxs, axis, w, memo))
  if op not in (L.CAST, L.ALU):
    return None            # iota, bitcast, reductions
  srcs = []
  for s in node.src:
    v = yield _vector_value(lw, s, idxs, axis, w, memo)
    if v is None:
      return None
    srcs.append(v)
  if op is L.CAST:
    return srcs[0].cast(node.dtype.vec(w))
  return lw._alu(node, srcs, node.dtype.vec(w))


def vector_thread_stores(lw, spread: list, upcast: int) -> list | None:
  """A thread's `upcast` outputs (lower._thread_stores: the first at linear_index(spread, 0)) as vector
  stores of the expression lowered as vectors (vector_value) along the last output axis; None
  where it does not hold."""
  out = lw.item.out
  w = _width(upcast)
  axes = [a for a, n in enumerate(out.shape) if n != 1]
  if w == 1 or not axes or out.shape[axes[-1]] % w:
    return None
  stores = []
  for j in range(0, upcast, w):
    flat = linear_index(spread, j)
    value = vector_value(lw, out, tuple(unravel([(flat, 1, out.size)], 0, out.shape)), axes[-1],
                         w, {})
    if value is None:
      return None
    stores.append(lw.params[0].store(flat, value))
  return stores


def vector_accumulate(lw, op, src, axes, lanes, idxs, gate, ranges, vec: int) -> UOp | None:
  """A grouped reduction lane's partial (lower._grouped_reduce) with its `vec` elements per step
  read as vectors (vector_value), the unrolled steps combined lane-wise, and their lanes into a
  scalar accumulator (a vector accumulator ran sum 16M ~5% slower on lavapipe); None where the
  elements are not one vector of every buffer (the caller lowers them one by one)."""
  shape = [src.shape[a] for a in axes]
  moving = [k for k, n in enumerate(shape) if n != 1]
  if vec == 1 or _width(vec) != vec or gate is not None or not moving or \
     shape[moving[-1]] % vec or any(valid is not None for _, valid in lanes):
    return None
  # the first element of step u: range * (steps * group * vec) + lane * vec + u * group * vec;
  # with lw.chunk (each lane one run of steps): lane * run * vec + range * steps * vec + u * vec
  # (the run's start a run-time value under a symbolic length: Lowerer._run_loop)
  apart = vec if lw.chunk else lw.group * vec        # from one unrolled step to the next
  trips = [value_range(r.src[0])[1] for r in ranges]   # a run-time end (a symbolic length):
  run = len(lanes) * prod(trips)                       # its largest value
  terms = [(r, len(lanes) * apart, n) for r, n in zip(ranges, trips)]
  start = lw.run_starts.get(ranges[0]) if len(ranges) == 1 else None
  if lw.chunk and start is not None:    # a run of a run-time length (Lowerer._run_loop)
    terms.append((start, vec, (lw.group - 1) * run + 1))
  else:
    terms.append((lw.lane, run * vec if lw.chunk else vec, lw.group))
  step = None
  for u in range(len(lanes)):
    p = list(idxs)
    for a, index in zip(axes, unravel(terms, u * apart, shape)):
      p[a] = index
    body = vector_value(lw, src, tuple(p), axes[moving[-1]], vec, {})
    if body is None:
      return None
    step = body if step is None else UOp(op, body.dtype, (step, body))
  dtype = step.dtype.scalar
  total = UOp(Ops.GEP, dtype, (step,), 0)
  for k in range(1, vec):
    total = UOp(op, dtype, (total, UOp(Ops.GEP, dtype, (step,), k)))
  outer = [u for u in toposort(list(idxs)) if u.op is Ops.RANGE]
  init = UOp.const(dtype, identity_element(op, dtype))
  return lw.accumulate(op, dtype, init, total, ranges, outer)
