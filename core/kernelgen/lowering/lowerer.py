"""The base Lowerer: one scheduled kernel (a lazy node over views) -> a UOp graph per IR.md;
lower.py picks the strategy (what follows describes them all) and builds the stores with it.

Each thread computes `upcast` consecutive output elements: its global index comes from SPECIAL
gid/lid, output indices are unravelled from it, and the expression is lowered at those indices:
views become index math (with masks as load gates), reductions become RANGE loops over a
DEFINE_ACC with ASSIGN/ENDRANGE/AFTER, and loads past the end of the output are gated. Reductions
of a thread over the same elements that do not read each other share one loop
(reductions.py). Every
accumulator loop of every strategy (here, vector.py, regtile.py, wgtile.py, tensorcore.py) is built
by `Lowerer.accumulators`. Index math is int32; `unravel` folds the common cases (permutes,
expands, windows) without div/mod.

Grouped reductions (`Opts.group`): one workgroup per output element; its `group` threads each
accumulate a strided share of the reduced elements, store the partial result into workgroup
memory (DEFINE_LOCAL), and after a BARRIER lane 0 folds the partials and stores (every thread
folds where another reduction of the kernel uses the result). Each lane's loop is unrolled
`Opts.group_unroll` times; with `Opts.group_vec` a lane reads that many consecutive elements per
step, whose loads from one buffer become vector loads (lanes step by group_vec elements, so a
group still reads one contiguous block per step). Elementwise kernels with `Opts.upcast_vec`
likewise read runs of consecutive elements as vectors and store their outputs as one
(vector.py). Where every buffer's elements along the vector are consecutive (or one
element, broadcast) and the dtypes 32-bit, both lower the expression once per vector, as vector
loads and lane-wise ops (vector.vector_value), instead of point by point then merging.
With `Opts.subgroups` (the dtypes it applies to) each subgroup first combines its partials
(SUBGROUP_REDUCE) and only its leader writes, into a slot it claims with ATOMIC_ADD on a
counter, so the fold reads one slot per subgroup: this needs no promise about how threads form
subgroups or how big they are.
Register tiles (`Opts.tile`, matmul and conv2d): each thread computes an R x C block of two
output axes; the block's reductions share one loop (over all reduced elements, unrolled by
TILE_UNROLL; or over the leading reduced axes, the trailing ones of at most TILE_INNER elements
unrolled inside it: conv2d's window), so each step loads R + C values for R * C accumulators
(fewer where unrolled windows overlap); a block past the edge computes at clamped indices and
gates its stores. Where wgtile.plan() splits the reduction's source into row and column
operands, regtile.py builds the block from them with its columns as vectors; otherwise each
output of the block is lowered here on its own. `Opts.stage` tiles them through workgroup
memory instead (wgtile.py).
No loop runs more than MAX_TRIPS times: longer loops are unrolled (lavapipe's llvmpipe backend
silently stops a thread's loops after 65535 iterations in all, counted across its loops).

One concept, the base Lowerer class that every layout strategy extends; it runs past 500 lines
because its index math, loads, reductions and recomputation share its per-kernel state. Its
options (Opts) are in opts.py.
"""
from __future__ import annotations

import itertools
import math

from .. import limits
from ..dtype import dtypes
from .index_math import I32, gate_and, int_const, linear_index, unravel
from ..graph.lazy import L, LazyOp
from .combine import chained, pairwise
from .gather import gather_value
from .loop_split import inner_split, split_shape, splits, tile_loop_unroll
from .opts import Opts
from .vector import vector_accumulate, vector_loads
from .reductions import max_shifted, online_accumulate
from ..uop.ops import BOOL_REDUCE, EXP2_NONPOSITIVE, Ops, UOp, identity_element, toposort
from ..graph.schedule import ScheduleItem
from ..graph.view import View, contiguous_strides, prod



# the most iterations one loop may run: llvmpipe (lavapipe) ends a thread's loops after 65535
# iterations in all (one budget shared by every loop of the thread)
MAX_TRIPS = 1 << 14
# online softmax (Opts.row_online): vector steps per trip, so its rescale is paid once per 8
# values (SwiftShader in Chromium, 4096x1024 f32, hand-edited WGSL: 4 per trip 30.9 ms, 8 28.8)
ONLINE_UNROLL = 2
# threads in a subgroup at most (WGSL; a PTX warp has 32)
MAX_SUBGROUP = 128


_UNSEEN = object()
# ops whose _lower reads their sources at other indices (or none)
_OWN_INDICES = frozenset((L.CONST, L.IOTA, L.VIEW, L.REDUCE, L.GATHER))


def var_uop(node: LazyOp) -> UOp:
  """A symbolic dim's value (L.VAR): the kernel's int32 argument of that name and range."""
  return UOp(Ops.VAR, I32, (), node.arg)


def _view_axes(view: View, count: int) -> tuple | None:
  """The axes whose index a view's value depends on: those it moves through (View.terms) and
  those its mask bounds (View.valid); None when that is all `count` of them."""
  mask = view.mask or [(0, n) for n in view.shape]
  used = tuple(a for a, (s, n, (lo, hi)) in enumerate(zip(view.strides, view.shape, mask))
               if s != 0 and n != 1 or lo > 0 or hi < n)
  return used if len(used) < count else None



def _loop_end(limit: UOp, trips: int, unroll: int, step: int) -> UOp:
  """Lowerer._loop's trip count under a run-time `limit`: the trips that reach the indices below
  it."""
  per = unroll * step
  end = (limit + int_const(per - 1)) // int_const(per) if per > 1 else limit
  return end.minimum(int_const(trips))


def _ceil_div(u: UOp, d: int) -> UOp:
  return (u + int_const(d - 1)) // int_const(d) if d > 1 else u

class Lowerer:
  """Lowers the expression of one ScheduleItem; memoized by (node, indices, gate)."""

  def __init__(self, item: ScheduleItem):
    self.item = item
    self.slots = {id(n): i + 1 for i, n in enumerate(item.inputs)}
    self.params = [UOp(Ops.PARAM, item.out.dtype.ptr(item.out.size), (), 0)]
    self.params += [UOp(Ops.PARAM, n.dtype.ptr(n.size), (), i + 1)
                    for i, n in enumerate(item.inputs + item.extra)]
    self.cache: dict = {}
    self.view_axes: dict = {}          # id(VIEW node) -> the axes its value depends on
    self.next_id = 0
    self.group, self.lane = 0, None    # set by lower() for grouped reductions
    self.subgroups: tuple = ()
    self.unroll, self.vec, self.chunk = 1, 1, False   # grouped reductions: see Opts
    self.nested: set = set()           # ids of reductions that feed another reduction
    self.loops: dict | None = None     # tiled kernels: reduce node -> its shared loop
    self.gates: list = []              # the gates of the reductions being lowered, innermost last
    self.seq_vec = 1                   # plain reductions over one axis read this many consecutive
                                       # elements per step, as vector loads (rows.py)
    self.seq_gated = False             # Opts.seq_vec: gated loads always read join those
    self.tile_inner = 0                # tiled reductions: Opts.tile_inner
    self.tile_unroll = 0               # tiled reductions: Opts.tile_unroll
    self.reduce_inner = 0              # plain reductions: Opts.reduce_inner
    self.reduce_unroll = 1             # plain reductions: Opts.reduce_unroll
    self.split_loops: dict | None = None   # reduce_inner with upcast: reduce node -> its loop,
                                       # shared by a thread's outputs (_split_points)
    self.recomputed = {id(n): n for n in item.recomputed}   # reductions recomputed per read
    self.siblings: dict = {}           # id(reduce) -> the reductions computed in its loop (lower.py)
    self.online: dict = {}             # id(max or exp-sum) -> its online softmax pair (rows.py)
    self.run_starts: dict = {}         # a lane's loop over its run (_run_loop) -> the run's start
    self.staged: dict = {}             # id(node) -> f(idxs, gate): its value, read from
                                       # workgroup memory (staged.py: staged once per workgroup)

  def value(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    got = self.cache.get((id(node), idxs, gate))
    if got is None:     # sources first, in the order recursion would take: no recursion on depth
      for n in self._uncached(node, idxs, gate):
        got = self._value_one(n, idxs, gate)
    return got

  def _same_indices(self, node: LazyOp) -> bool:
    """True when _lower reads node's sources at node's own indices and gate."""
    return node.op not in _OWN_INDICES and not (node is not self.item.out and
                                                id(node) in self.slots) and \
      id(node) not in self.staged

  def _uncached(self, root: LazyOp, idxs: tuple, gate: UOp | None) -> list[LazyOp]:
    """root and the nodes below it read at the same (idxs, gate) not yet lowered, each after
    its sources (an iterative depth-first walk, sources in order)."""
    order, seen, cache = [], {id(root)}, self.cache
    stack = [(root, iter(root.src if self._same_indices(root) else ()))]
    while stack:
      node, it = stack[-1]
      for s in it:
        if id(s) not in seen and (id(s), idxs, gate) not in cache:
          seen.add(id(s))
          stack.append((s, iter(s.src if self._same_indices(s) else ())))
          break
      else:
        stack.pop()
        order.append(node)
    return order

  def _value_one(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    key = (id(node), idxs, gate)
    got = self.cache.get(key)
    if got is None:
      used = None
      if node.op is L.VIEW and self.loops is not None:   # tiled: outputs share operand views
        used = self.view_axes.get(id(node), _UNSEEN)
        if used is _UNSEEN:
          used = self.view_axes[id(node)] = _view_axes(node.arg, len(idxs))
      if used is not None:    # a view that reads only some indices: the others share its value
        short = (id(node), tuple([idxs[a] for a in used]), gate, "view")
        got = self.cache.get(short)
        if got is None:
          got = self.cache[short] = self._lower(node, idxs, gate)
        self.cache[key] = got
      else:
        got = self.cache[key] = self._lower(node, idxs, gate)
    return got

  def _load(self, node: LazyOp, lin: UOp, gate: UOp | None) -> UOp:
    buf = self.params[self.slots[id(node)]]
    return buf.load(lin, gate, 0) if gate is not None else buf.load(lin)

  def _lower(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    if id(node) in self.staged:
      return self.staged[id(node)](idxs, gate)
    if node is not self.item.out and id(node) in self.slots:
      terms = [(i, s, n) for i, s, n in zip(idxs, contiguous_strides(node.shape), node.shape)]
      return self._load(node, linear_index([t for t in terms if t[1] and t[2] != 1], 0), gate)
    if node.op is L.CONST:
      return UOp.const(node.dtype, node.arg)
    if node.op is L.VAR:
      return var_uop(node)
    if node.op is L.IOTA:
      return idxs[0]
    if node.op is L.VIEW:
      return self._view(node, idxs, gate)
    if node.op is L.REDUCE:
      return self._reduce(node, idxs, gate)
    if node.op is L.GATHER:
      return gather_value(self, node, idxs, gate)
    srcs = [self.value(s, idxs, gate) for s in node.src]
    if node.op is L.CAST:
      return srcs[0].cast(node.dtype)
    if node.op is L.BITCAST:
      return srcs[0].bitcast(node.dtype)
    if node.op is L.CONTIGUOUS:
      return srcs[0]
    return self._alu(node, srcs)

  def _alu(self, node: LazyOp, srcs: list[UOp], dtype=None) -> UOp:
    """node's ALU op on the lowered `srcs` (of `dtype`: node's own, or vectors of it)."""
    op = node.arg
    if srcs[-1].dtype == dtypes.bool and op in BOOL_REDUCE:
      op = BOOL_REDUCE[op]
    if op is Ops.EXP2 and max_shifted(node) is not None:    # softmax's exp: never overflows
      return UOp(op, dtype or node.dtype, tuple(srcs), EXP2_NONPOSITIVE)
    return UOp(op, dtype or node.dtype, tuple(srcs))

  def _view(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    view: View = node.arg
    src = node.src[0]
    valid = view.valid(list(idxs))
    inner_gate = gate_and(gate, valid)
    terms = view.terms(list(idxs))
    if id(src) in self.slots and src is not self.item.out:
      return self._load(src, linear_index(terms, view.offset), inner_gate)
    src_idxs = tuple(unravel(terms, view.offset, src.shape))
    out = self.value(src, src_idxs, inner_gate)
    return out if valid is None else valid.where(out, out.const_like(0))

  def _reduce(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    if id(node) in self.recomputed:
      return self._recompute(node, idxs, gate)
    if id(node) in self.nested and self.gates and gate is not self.gates[-1]:
      # read per output inside another reduction (only through a broadcast along its axes, see
      # schedule.py): under that reduction's gate, not its loop's, so it runs once, before it
      return self.value(node, idxs, self.gates[-1])
    self.gates.append(gate)
    try:
      return self._reduce_under(node, idxs, gate)
    finally:
      self.gates.pop()

  def _reduce_under(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    op, axes = node.arg
    src = node.src[0]
    if self.group and src.dtype != dtypes.bool:
      return self._grouped_reduce(node, idxs, gate)
    if self.loops is not None:
      return self._tiled_reduce(node, idxs, gate)
    vec = 1
    pair = self.online.get(id(node))
    if self.seq_vec > 1 and len(axes) == 1 and src.shape[axes[0]] % self.seq_vec == 0:
      ranges, points, vec = self._vector_points(node, idxs, ONLINE_UNROLL if pair else 1)
    elif self.reduce_inner and splits([src.shape[a] for a in axes], self.reduce_inner):
      ranges, points = self._split_points(node, idxs)
      vec = len(points)          # the unrolled runs of consecutive loads: vector loads
    else:
      ranges, points = [], [(list(idxs), None)]
      for a in axes:
        loops, lanes = self._loop(src.shape[a], limit=self.limit(node, (a,)))
        ranges += loops
        points = [(p[:a] + [i] + p[a + 1:], gate_and(v, ok)) for p, v in points for i, ok in lanes]
      points = [(tuple(p), v) for p, v in points]
    if pair:
      return online_accumulate(self, node, pair, points, idxs, gate, ranges, vec)
    group = [node] + [s for s in self.siblings.get(id(node), ())
                      if (id(s), idxs, gate) not in self.cache]
    got = self._accumulate_many([(s.arg[0], s.src[0]) for s in group], points, idxs, gate,
                                ranges, vec)
    for s, after in zip(group[1:], got[1:]):    # read later at the same indices: cached now
      self.cache[(id(s), idxs, gate)] = after
    return got[0]

  def _recompute(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    """A reduction recomputed at each read (ScheduleItem.recomputed: a few elements), unrolled
    in the reading thread whatever the kernel's layout."""
    op, axes = node.arg
    src = node.src[0]
    n = prod(src.shape[a] for a in axes)
    self.gates.append(gate)
    try:
      ranges, lanes = self._loop(n, unroll=n)
      shape = [src.shape[a] for a in axes]
      points = []
      for index, valid in lanes:
        p = list(idxs)
        for a, u in zip(axes, unravel([(index, 1, n)], 0, shape)):
          p[a] = u
        points.append((tuple(p), valid))
      return self._accumulate(op, src, points, idxs, gate, ranges)
    finally:
      self.gates.pop()

  def _vector_points(self, node: LazyOp, idxs: tuple, unroll: int = 1) -> tuple[list, list, int]:
    """(ranges, points, vec) of a reduction over one axis, seq_vec consecutive elements per
    step (vector loads), at least `unroll` steps per trip."""
    _, (a,) = node.arg
    src, vec = node.src[0], self.seq_vec
    limit = self.limit(node, (a,))
    if limit is not None and vec > 1:
      limit = (limit + int_const(vec - 1)) // int_const(vec)
    ranges, lanes = self._loop(src.shape[a] // vec, unroll=unroll, limit=limit)
    points = []
    for index, valid in lanes:
      for k in range(vec):
        p = list(idxs)
        p[a] = index * int_const(vec) + int_const(k)
        points.append((tuple(p), valid))
    return ranges, points, vec

  def _accumulate(self, op: Ops, src: LazyOp, points: list, idxs: tuple, gate,
                  ranges: list, vec: int = 1) -> UOp:
    """AFTER(acc) of acc = op(acc, src[p]) for every (p, valid) of `points` in each iteration of
    `ranges` (where valid is false the element is skipped); with `vec`, runs of `vec` loads of
    consecutive elements become vector loads."""
    return self._accumulate_many([(op, src)], points, idxs, gate, ranges, vec)[0]

  def _accumulate_many(self, reductions: list, points: list, idxs: tuple, gate, ranges: list,
                       vec: int = 1) -> list:
    """_accumulate for each (op, src) of `reductions` at the same points, all in one loop (the
    loads they share are made once); their AFTER nodes, in order."""
    bodies = [(self.value(src, p, gate_and(gate, v)), v) for _, src in reductions
              for p, v in points]
    if vec > 1:
      bodies = vector_loads(bodies, vec, self.seq_gated)
    inits, updates = [], []
    for k, (op, _) in enumerate(reductions):
      mine = bodies[k * len(points):(k + 1) * len(points)]
      dtype = mine[0][0].dtype
      if dtype == dtypes.bool:
        op = BOOL_REDUCE[op]
      init = UOp.const(dtype, identity_element(op, dtype))
      terms = [body if valid is None else valid.where(body, init) for body, valid in mine]
      inits.append(init)
      total = pairwise(op, dtype, terms) if self.reduce_inner else chained(op, dtype, terms)
      updates.append((op, dtype, total))
    outer = [u for u in toposort(list(idxs) + ([gate] if gate is not None else []))
             if u.op is Ops.RANGE]
    return self.accumulators(inits, lambda i, acc: UOp(updates[i][0], updates[i][1],
                                                       (acc, updates[i][2])), ranges, outer)

  def accumulate(self, op: Ops, dtype, init: UOp, total: UOp, ranges, outer=()) -> UOp:
    """One accumulator: acc = init, then acc = op(acc, total) in each trip of `ranges`
    (accumulators()); returns the AFTER node that reads the result."""
    return self.accumulators([init], lambda _, acc: UOp(op, dtype, (acc, total)), ranges,
                             outer)[0]

  def accumulators(self, inits: list, update, ranges, outer=(), barrier: bool = False) -> list:
    """The one accumulator loop builder: acc_i = inits[i] (DEFINE_ACC, inside the `outer`
    ranges), then acc_i = update(i, acc_i) in each trip of `ranges` (ASSIGN; each accumulator's
    DEFINE_ACC is made just before its update is built), all closed by one ENDRANGE per range,
    innermost first. With `barrier`, each trip of the outermost range ends with a BARRIER after
    its body (wgtile.py refills workgroup memory in the next trip). Returns the AFTER nodes that
    read the results, in order."""
    accs, assigns = [], []
    for i, init in enumerate(inits):
      acc = UOp(Ops.DEFINE_ACC, init.dtype, (init, *outer), self._id())
      accs.append(acc)
      assigns.append(UOp(Ops.ASSIGN, init.dtype, (acc, update(i, acc))))
    if not ranges:
      return [UOp(Ops.AFTER, acc.dtype, (acc, end)) for acc, end in zip(accs, assigns)]
    body = tuple(assigns)
    for k in reversed(range(len(ranges))):
      sync = (UOp(Ops.BARRIER, None, body),) if barrier and k == 0 else ()
      body = (UOp(Ops.ENDRANGE, None, (ranges[k], *body, *sync)),)
    return [UOp(Ops.AFTER, acc.dtype, (acc, body[0])) for acc in accs]

  def _loop(self, n: int, step: int = 1, lane: UOp | None = None, total: int = 0,
            unroll: int = 1, chunk: bool = False, limit: UOp | None = None):
    """(ranges, [(index, valid)]) of a loop over range(n) (index*step + lane with a lane; with
    chunk, lane*run + index: each of the `step` lanes takes one run of consecutive indices),
    unrolled (at least `unroll` times) so that it runs at most MAX_TRIPS times; valid gates the
    overshoot. `limit` (a run-time int32 UOp): only indices below it matter, so the loop stops
    once it has covered them (a symbolic length: Lowerer.limit; with chunk, each lane stops at
    the end of its own run's part below it)."""
    total = total or n
    while math.ceil(n / unroll) > MAX_TRIPS:
      unroll *= 2
    limits.check("unrolled_copies", unroll, f"a loop over {n} elements: the copies of its body "
                 f"unrolled to keep it under {MAX_TRIPS} trips")
    trips = math.ceil(n / unroll)
    if limit is not None and trips != 1 and chunk and lane is not None:
      return self._run_loop(trips, step, lane, total, unroll, limit)
    rng = self._range(trips) if trips != 1 else int_const(0)
    if limit is not None and trips != 1:
      rng = UOp(Ops.RANGE, I32, (_loop_end(limit, trips, unroll, step),), self._id())
    out, stride = [], 1 if chunk else step
    for u in range(unroll):
      terms = [(rng, unroll * stride, trips)] if trips != 1 else []
      terms += [(lane, trips * unroll if chunk else 1, step)] if lane is not None else []
      index = linear_index(terms, u * stride)
      out.append((index, index.lt(int_const(total)) if trips * unroll * step > total else None))
    return ([rng] if trips != 1 else []), out

  def _run_loop(self, trips: int, lanes: int, lane: UOp, total: int, unroll: int, limit: UOp):
    """_loop with chunk under a run-time `limit`: each of the `lanes` lanes takes one run of
    about limit / lanes consecutive indices (whole unrolled steps; a run of the static
    trips * unroll would leave a short limit to the first lane alone: lavapipe ran a symbolic
    softmax row of 77 in 8 lanes 3x slower than the static one). Its start is kept in
    self.run_starts for vector_accumulate. No index reaches ceil(limit / unroll) * unroll."""
    per = _ceil_div(_ceil_div(limit, unroll), lanes)          # unrolled steps per lane
    start = lane * (per * int_const(unroll) if unroll > 1 else per)
    left = (limit - start).maximum(int_const(0))
    rng = UOp(Ops.RANGE, I32, (_ceil_div(left, unroll).minimum(per),), self._id())
    self.run_starts[rng] = start
    out = []
    for u in range(unroll):
      index = start + linear_index([(rng, unroll, trips)], u)
      out.append((index, index.lt(int_const(total)) if total % unroll else None))
    return [rng], out

  def _split_points(self, node: LazyOp, idxs: tuple) -> tuple[list, list]:
    """(ranges, points) of a plain reduction with Opts.reduce_inner: a loop over the leading
    reduced axes (unrolled Opts.reduce_unroll times), the trailing ones (at most reduce_inner
    elements) unrolled in each step. With split_loops, a thread's outputs share each reduction's
    loop, so each step's loads of what they share (a matvec's vector) are made once."""
    axes = node.arg[1]
    shape = split_shape([node.src[0].shape[a] for a in axes], self.reduce_inner)
    k = inner_split(shape, self.reduce_inner)
    outer = prod(shape[:k])
    shared = self.split_loops if self.split_loops is not None else {}
    if id(node) not in shared:
      shared[id(node)] = self._loop(outer, unroll=self.reduce_unroll)
    ranges, lanes = shared[id(node)]
    points = []
    for lin, valid in lanes:
      lead = unravel([(lin, 1, outer)], 0, shape[:k])
      for at in itertools.product(*[range(n) for n in shape[k:]]):
        p, where = list(idxs), lead + [int_const(i) for i in at]
        if len(where) > len(axes):     # one axis split (split_shape): its flat index
          where = [where[0] * int_const(shape[1]) + where[1]]
        for a, index in zip(axes, where):
          p[a] = index
        points.append((tuple(p), valid))
    return ranges, points

  def _tiled_reduce(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    """A reduction in a tiled kernel: one loop over its reduced elements (unravelled into the
    axes; the trailing axes that _inner_split picks are unrolled in each step instead), shared
    by every output of the tile, so each value is loaded once per step."""
    op, axes = node.arg
    src = node.src[0]
    if id(node) not in self.loops:
      self.loops[id(node)] = self._tile_loop([src.shape[a] for a in axes],
                                             self.limit(node, axes))
    ranges, lanes = self.loops[id(node)]
    points = []
    for where, valid in lanes:
      p = list(idxs)
      for a, index in zip(axes, where):
        p[a] = index
      points.append((tuple(p), valid))
    return self._accumulate(op, src, points, idxs, gate, ranges)

  def limit(self, node: LazyOp, axes: tuple) -> UOp | None:
    """How many of reduction `node`'s elements over `axes` (flattened, row-major) hold values,
    as a run-time UOp, when the first of them is symbolic and the others are not (LazyOp.bound:
    the rest are the identity, so a loop may stop there); else None."""
    lengths = dict(node.bound or ())
    if axes[0] not in lengths or any(a in lengths for a in axes[1:]):
      return None
    n = node.src[0].shape[axes[0]]
    count = self.value(lengths[axes[0]], (), None).minimum(int_const(n)).maximum(int_const(0))
    rest = prod(node.src[0].shape[a] for a in axes[1:])
    return count * int_const(rest) if rest != 1 else count

  def _tile_loop(self, shape: list, limit: UOp | None = None) -> tuple[list, list]:
    """(ranges, [(indices, valid)]) of a tiled reduction over `shape`: a loop over the leading
    axes (unrolled TILE_UNROLL times where that divides it and nothing else is unrolled; with
    Opts.tile_unroll that many times where it divides it, inner axes unrolled or not), the
    trailing axes that _inner_split picks unrolled completely in each step; `limit` (Lowerer.
    limit: how many elements hold values) stops the loop where nothing is unrolled."""
    k = inner_split(shape, self.tile_inner)
    outer, inner = prod(shape[:k]), list(itertools.product(*[range(n) for n in shape[k:]]))
    unroll = tile_loop_unroll(shape, self.tile_inner, self.tile_unroll)
    ranges, lanes = self._loop(outer, unroll=unroll, limit=limit if k == len(shape) else None)
    return ranges, [(unravel([(lin, 1, outer)], 0, shape[:k]) + [int_const(i) for i in at], valid)
                    for lin, valid in lanes for at in inner]

  def _range(self, n: int) -> UOp:
    return UOp(Ops.RANGE, I32, (int_const(n),), self._id())

  def _grouped_reduce(self, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
    """Each lane reduces elements lane, lane+group, ... (with vec: the vec elements from
    lane*vec, then from (lane+group)*vec, ...; with Opts.group_chunk one run of consecutive
    elements); then the partials meet in memory."""
    op, axes = node.arg
    src = node.src[0]
    shape = [src.shape[a] for a in axes]
    total = prod(shape)
    vec = self.vec if total % (self.group * self.vec) == 0 else 1
    trips = math.ceil(total / (self.group * vec))
    unroll = self.unroll if trips % self.unroll == 0 else 1
    limit = self.limit(node, axes)
    if limit is not None and vec > 1:
      limit = (limit + int_const(vec - 1)) // int_const(vec)
    ranges, lanes = self._loop(trips, self.group, self.lane, math.ceil(total / vec), unroll,
                               self.chunk, limit)
    part = vector_accumulate(self, op, src, axes, lanes, idxs, gate, ranges, vec)
    if part is None:
      part = self._grouped_accumulate(op, src, axes, lanes, idxs, gate, ranges, vec)
    roots = list(idxs) + ([gate] if gate is not None else [])
    outer = any(u.op is Ops.RANGE for u in toposort(roots))
    if part.dtype.name in self.subgroups and not outer:
      return self._subgroup_fold(op, part, node)
    local = UOp(Ops.DEFINE_LOCAL, part.dtype.ptr(self.group, local=True), (), self._id())
    written = local.store(self.lane, part)
    ready = UOp(Ops.AFTER, local.dtype, (local, UOp(Ops.BARRIER, None, (written,))))
    r = self._fold_range(int_const(self.group), node)
    init = UOp.const(part.dtype, identity_element(op, part.dtype))
    return self.accumulate(op, part.dtype, init, ready.load(r), [r])

  def _grouped_accumulate(self, op, src, axes, lanes, idxs, gate, ranges, vec) -> UOp:
    """A lane's partial, element by element (runs of loads merged into vector loads)."""
    shape = [src.shape[a] for a in axes]
    total = prod(shape)
    points = []
    for lin, valid in lanes:
      for k in range(vec):
        at = lin * int_const(vec) + int_const(k) if vec > 1 else lin
        p = list(idxs)
        for a, index in zip(axes, unravel([(at, 1, total)], 0, shape)):
          p[a] = index
        points.append((tuple(p), valid))
    return self._accumulate(op, src, points, idxs, gate, ranges, vec)

  def _fold_range(self, n: UOp, node: LazyOp) -> UOp:
    """The loop over the partials: in lane 0 only (the lane that stores), or in every thread
    when another reduction uses the result."""
    if id(node) not in self.nested:
      n = self.lane.eq(int_const(0)).where(n, int_const(0))
    return UOp(Ops.RANGE, I32, (n,), self._id())

  def _subgroup_fold(self, op: Ops, part: UOp, node: LazyOp) -> UOp:
    """Each subgroup combines its partials; its leader (lowest active lane) claims the next slot
    of workgroup memory with an atomic counter and writes there; after a BARRIER every thread
    folds the `counter` slots, the counter read as a workgroup-uniform value. The counter is
    zeroed first (WGSL zero-fills workgroup memory, but wgpu on lavapipe does not); not inside
    loops, where one workgroup's counter would need zeroing each iteration."""
    dtype = part.dtype
    total = UOp(Ops.SUBGROUP_REDUCE, dtype, (part,), op)
    lane = UOp(Ops.SPECIAL, I32, (), ("sglane", 0, min(self.group, MAX_SUBGROUP)))
    leader = lane.eq(UOp(Ops.SUBGROUP_REDUCE, I32, (lane,), Ops.MIN))
    counter = UOp(Ops.DEFINE_LOCAL, I32.ptr(1, local=True), (), self._id())
    reset = UOp(Ops.BARRIER, None, (counter.store(int_const(0), int_const(0)),))   # lavapipe does not zero it
    slot = UOp(Ops.ATOMIC_ADD, I32, (UOp(Ops.AFTER, counter.dtype, (counter, reset)), int_const(0),
                                     int_const(1), leader))
    local = UOp(Ops.DEFINE_LOCAL, dtype.ptr(self.group, local=True), (), self._id())
    barrier = UOp(Ops.BARRIER, None, (local.store(slot, total, leader),))
    count = UOp(Ops.AFTER, counter.dtype, (counter, barrier)).load(int_const(0))
    ready = UOp(Ops.AFTER, local.dtype, (local, barrier))
    r = self._fold_range(count, node)
    init = UOp.const(dtype, identity_element(op, dtype))
    return self.accumulate(op, dtype, init, ready.load(r), [r])

  def _id(self) -> int:
    self.next_id += 1
    return self.next_id - 1
