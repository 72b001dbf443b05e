"""Register tiles with the tile's columns as vectors (`Opts.tile`; wgtile.py's staged kernels
share the same accumulators and stores).

A thread's R x C block of two output axes: the reduction's source is split as plan() does (the
"A" operands that do not depend on the column, the "B" ones that do not depend on the row) and
computed from them per reduced element, not per output: each row's columns go in vectors of V
(4, 2 or 1 dividing C; 1 where the source has bool values or bitcasts) -- A as one scalar per row,
B as one vector per V columns (a vector load where its elements are consecutive in memory, else
the loads gathered), the elementwise ops and the accumulators as vectors (renderers without
vector arithmetic write them lane by lane). The same arithmetic in about a quarter of the nodes,
so every later pass runs over a quarter of the graph. After the reduction, each output's
elementwise ops are lowered per output and joined back into vector ops where alike
(`gather_lanes`), stored as one vector where the output's columns are consecutive.
"""
from __future__ import annotations

import itertools
import math

from ..dtype import dtypes
from .index_math import I32, gate_and, int_const, linear_index, plus_offset, splat, unravel, \
  vectorize
from ..graph.lazy import L, LazyOp
from .lowerer import MAX_TRIPS, Lowerer
from .loop_split import TILE_UNROLL
from .tile_grid import block_start, grid_axis, tile_threads
from .tileplan import StageLowerer, plan
from ..uop import trampoline
from .vector import aligned_loads, vector_loads
from ..uop.ops import BOOL_REDUCE, Ops, UOp, identity_element
from ..rules.symbolic import linear_sum, simplify
from ..graph.view import contiguous_strides, prod


# CLAMPED_READS (issue 42): where a static grid of blocks leaves threads past its end (a block count
# that no workgroup size divides: ddddocr's FC layer, (20, 1024) @ (8210, 1024).T in 20 x 10 tiles,
# 821 blocks, a prime), those threads take the last block's indices, not a gate on every read: the
# reads are ungated, so a row's consecutive elements merge into vec4 loads (vector_rows) and the
# rows' shared reads keep uniform addresses; the stores stay gated. That kernel alone (A/B of the
# two sources in one process, interleaved, 7 rounds, load ~11 on 2 shared CPUs, median CPU s of a
# run): lavapipe 0.070 -> 0.030 (best GPU ms 327 -> 150), SwiftShader 0.140 -> 0.110 (627 -> 515);
# in the model (bench/pypi_kernels.py common.onnx, GPU timestamps best of 3, load ~10): lavapipe
# 263 -> 171 ms, SwiftShader 897 -> 330 ms. SqueezeNet's 1x1 convs that changed so (55x55, 27x27,
# the last 1000-channel one): within the noise on lavapipe (43.1 -> 42.2 ms for the three).

# ALIGNED_WINDOWS (issue 42): with Opts.upcast_vec (the WGSL target's default) a tile's step reads
# its runs of 4 loads at provably aligned indices under one gate as vec4 words
# (vector.aligned_loads, as slide.py's window rows): a dense conv's padded window, whose loads the
# padding gates (so _packed leaves them scalar), reads a row of taps of a 16-column tile (18
# columns) as 4 words and the 2 halo columns alone, where it made 18 scalar loads. Where the
# row's length or the tile's columns are not a multiple of 4, nothing is aligned and the loads
# stay scalar (a ragged last block of columns: FITTED_BLOCKS). bench/conv_window_ab.py natively,
# GPU timestamps, best of 16-20 interleaved A/B in one process, load 2.4-3.9 on 2 shared CPUs, ms
# (scalar -> words; a 1x1 conv compiled the same both ways moved 1-2 % in the 20-round run, up
# to 2x in others): lavapipe 3x3 96->24 at 80x80 10.4 -> 8.8 and 21.2 -> 18.0, at 40x40
# 4.7 -> 3.5 and 12.0 -> 9.4, 64->64 at 56x56 (bench/peers.py's conv) 20.6 -> 17.3 and
# 37.1 -> 28.2; SwiftShader within its noise (80x80 154 -> 148, 40x40 35 -> 39, 56x56 139 -> 139).

# FITTED_BLOCKS (issue 42): where the tile's columns do not divide the output's (ddddocr
# common_det's 52-wide convs in 8-column tiles), the last block starts at n - C (tile_grid.
# block_start), overlapping the block before it, rather than clamping every column index: the
# indices stay sums of multiples of 4 where C and n are (aligned vec4 words: ALIGNED_WINDOWS) and
# the stores need no column gates. The overlap recomputes what the clamped columns recomputed.
# bench/conv_window_ab.py --only ddddocr, lavapipe, GPU timestamps, best (median) of 16
# interleaved rounds in one process, load 2.3 on 2 shared CPUs, clamped -> fitted, ms: 3x3
# 48->48 18.8 (18.9) -> 9.9 (10.2), 96->96 36.5 (68.1) -> 19.8 (39.1); SwiftShader tiles these
# 13 columns wide (its kernels are unchanged).
# (False: every column of a ragged grid clamped, as before; bench/conv_window_ab.py's baseline)
FIT_RAGGED = True

def tile_lanes(src: LazyOp, cols: int, staged: set) -> int:
  """How many of the register tile's columns share one vector: the widest of at most 4 that
  divides `cols`, where the reduction's source (up to the staged operands) is plain arithmetic
  on numbers (1 where it is not: bool values, bitcasts)."""
  stack, seen = [src], set()
  while stack:
    node = stack.pop()
    if id(node) in seen:
      continue
    seen.add(id(node))
    if node.dtype == dtypes.bool or node.op is L.BITCAST:
      return 1
    if id(node) not in staged and node.op is not L.CONST:
      stack.extend(node.src)
  return max(w for w in (1, 2, 4) if cols % w == 0)


def tile_accumulators(lw: Lowerer, p, tile: tuple, lanes: int, operand, unroll: int,
                  valid: list | None, fma: bool, ranges: list, barrier: bool = False,
                  vector_rows: bool = False, start: list | None = None,
                  aligned: bool = False) -> list:
  """The register tile's accumulators after their loop over `ranges` (AFTER nodes: Lowerer.
  accumulators, `barrier` as there), row by row, a vector of `lanes` columns each: acc op= the
  reduction's source at elements 0..unroll-1 of this trip, computed from
  `operand(node, i, g, kk)` (A's value at row i: a scalar; B's at the columns of vector g: a
  vector) through the elementwise ops above them; valid[kk] gates element kk (lanes 1). With
  `fma`, a sum of float products accumulates with MULACC. With `vector_rows` (Opts.tile_unroll),
  a row's loads of consecutive elements 0..unroll-1 (A's row in a matmul) are vector loads
  (SwiftShader loads every lane's value on its own: 4 scalar loads cost about 4 vector ones).
  `start`: the accumulators' values before the loop (an earlier loop's results), else the
  identity. With `aligned` (Opts.upcast_vec), runs of 4 gated loads at aligned indices are vec4
  words (ALIGNED_WINDOWS)."""
  src, memo = p.source, {}
  a_ids, b_ids = {id(n) for n in p.a}, {id(n) for n in p.b}

  def compute(node: LazyOp, i: int, g: int, kk: int) -> UOp:
    """The value of `node` at row i, columns g*lanes.. (a vector, or a scalar when it does not
    depend on the column), element kk."""
    return trampoline.run(computed(node, i, g, kk))

  def computed(node: LazyOp, i: int, g: int, kk: int):
    """compute() as a trampolined walk (uop/trampoline.py): no recursion on the graph's depth."""
    key = (id(node), 0 if id(node) in b_ids else i, 0 if id(node) in a_ids else g, kk)
    if key in memo:
      return memo[key]
    if id(node) in a_ids or id(node) in b_ids:
      got = operand(node, i, g, kk)
    elif node.op is L.CONST:
      got = UOp.const(node.dtype, node.arg)
    elif node.op is L.VAR:
      got = lw.value(node, (), None)
    else:
      srcs = []
      for s in node.src:
        srcs.append((yield computed(s, i, g, kk)))
      width = max(u.dtype.count for u in srcs)
      dt = node.dtype.vec(width) if width > 1 else node.dtype
      srcs = [splat(u, width) for u in srcs]
      if node.op is L.CAST:
        got = srcs[0].cast(dt)
      elif node.op is L.BITCAST:
        got = srcs[0].bitcast(dt)
      elif node.op is L.CONTIGUOUS:
        got = srcs[0]
      else:
        got = lw._alu(node, srcs, dt)
    memo[key] = got
    return got

  op, dtype = p.reduce.arg[0], src.dtype
  if dtype == dtypes.bool:
    op = BOOL_REDUCE[op]
  vdtype = dtype.vec(lanes) if lanes > 1 else dtype
  init = UOp.const(vdtype, identity_element(op, dtype))
  # (not where the product is an operand itself: plan() stages a product that reads neither
  # tiled axis whole, as `zeros @ x` folds to one constant, and compute() reads no deeper)
  fused = fma and op is Ops.ADD and src.op is L.ALU and src.arg is Ops.MUL and \
    id(src) not in a_ids | b_ids and dtype.is_float() and \
    (valid is None or valid.count(None) == len(valid))
  blocks = list(itertools.product(range(tile[0]), range(tile[1] // lanes)))

  def step(k: int) -> UOp:
    i, g = blocks[k]
    body = None
    for kk in range(unroll):
      v = splat(compute(src, i, g, kk), lanes)
      if valid is not None and valid[kk] is not None:
        v = valid[kk].where(v, init)
      body = v if body is None else UOp(op, vdtype, (body, v))
    return body

  if tile[0] > 1 and not barrier:   # A's loads of consecutive rows merged (_row_vectors); not
    # a staged tile's (A read from workgroup memory: merged there, a third barrier appeared)
    for node in p.a:
      for kk in range(unroll):
        _row_vectors(memo, node, operand, tile[0], kk)

  steps = {}
  if vector_rows and not fused and unroll > 1:     # every block's step, its row loads merged
    steps = dict(enumerate(b for b, _ in vector_loads([(step(k), None)
                                                          for k in range(len(blocks))], unroll)))
  if aligned and not fused:    # a padded window's rows: runs of 4 gated loads as vec4 words
    bodies = [steps[k] if k in steps else step(k) for k in range(len(blocks))]
    steps = dict(enumerate(aligned_loads(bodies)))

  def update(k: int, acc: UOp) -> UOp:
    i, g = blocks[k]
    if fused:                # acc = a*b + acc per element, in order
      total = acc
      for kk in range(unroll):
        a, b = (splat(compute(s, i, g, kk), lanes) for s in src.src)
        total = UOp(Ops.MULACC, vdtype, (a, b, total))
      return total
    return UOp(op, vdtype, (acc, steps[k] if k in steps else step(k)))

  return lw.accumulators(start or [init] * len(blocks), update, ranges, barrier=barrier)


def _row_vectors(memo: dict, node: LazyOp, operand, rows: int, kk: int) -> None:
  """A's value `node` at element kk of rows 0..rows-1 into compute()'s `memo`, each run of loads
  at consecutive addresses in consecutive rows read as one vector load (vector_loads): A's rows
  consecutive in memory, as a conv's output channels are in weights held taps-last
  (onnx/operators/weights.py held_taps_last): 4 rows' weights at one tap in one load."""
  merged = vector_loads([(operand(node, i, 0, kk), None) for i in range(rows)], rows)
  for i, (value, _) in enumerate(merged):
    memo[(id(node), i, 0, kk)] = value


def tile_stores(lw: Lowerer, tile: tuple, axes: tuple, base: list, first: tuple, steps: tuple,
                 blocks: tuple, lanes: int, results: list, gate: UOp | None,
                 fitted: bool = False) -> list:
  """The stores of the register tile (`results`: its accumulators after their loop, from
  tile_accumulators): elementwise ops after the reduction at each point, at
  clamped indices, stores gated at the edges (and by `gate`). Output (i, lane v of vector g)
  sits at row first[0] + steps[0]*i and column first[1] + steps[1]*g + v (blocks: the rows and
  columns that one block of threads covers, so n % block says whether edges need gates). A
  vector's columns are consecutive: one vector store where the output's are too. `fitted`: the
  blocks' columns never pass the output's (tile_grid.block_start): no clamps, no gates there."""
  out = lw.item.out
  (rows, cols), (ar, ac) = tile, axes
  nr, nc = out.shape[ar], out.shape[ac]
  strides = contiguous_strides(out.shape)
  idxs = list(base)
  idxs[ar], idxs[ac] = first
  flat0 = linear_index([(u, s, n) for u, s, n in zip(idxs, strides, out.shape) if n > 1], 0)
  wide = lanes > 1 and strides[ac] == 1 and (nc % blocks[1] == 0 or fitted and nc % lanes == 0)

  def place(axis: int, n: int, block: int, index: UOp) -> tuple:
    """(index clamped to the axis, the gate of a store there)"""
    if n % block == 0 or (fitted and axis == ac):
      return index, None
    inside = index.lt(int_const(n))
    return inside.where(index, int_const(n - 1)), inside

  stores, template = [], None
  for (i, g), result in zip(itertools.product(range(rows), range(cols // lanes)), results):
    row, row_gate = place(ar, nr, blocks[0], plus_offset(first[0], steps[0] * i))
    if template and template[0] is template[1] and wide:   # the output is the reduction itself
      flat = plus_offset(flat0, steps[0] * i * strides[ar] + steps[1] * g)
      stores.append(lw.params[0].store(flat, result, gate_and(gate, row_gate)))
      continue
    values = []
    for lane in range(lanes):
      at = list(base)
      at[ar] = row
      at[ac], col_gate = place(ac, nc, blocks[1], plus_offset(first[1], steps[1] * g + lane))
      store_gate = gate_and(gate_and(gate, row_gate), col_gate)
      lw.result = result.gep(lane)
      if template:     # the first output's value with this output's reduction
        values.append(rebuilt(template[0], template[1], lw.result, {}))
      else:
        values.append(lw.value(out, tuple(at), gate))
        template = (values[-1], lw.result) if reads_only(values[-1], lw.result) else False
      if not wide:
        flat = plus_offset(flat0, steps[0] * i * strides[ar] + (steps[1] * g + lane) * strides[ac])
        stores.append(lw.params[0].store(flat, values[-1], store_gate))
    if wide:
      flat = plus_offset(flat0, steps[0] * i * strides[ar] + steps[1] * g)
      stores.append(lw.params[0].store(flat, gather_lanes(values), store_gate))
  return stores


# nodes whose value depends on where (which thread, loop trip or memory) it is computed
_PLACED = frozenset({Ops.LOAD, Ops.SPECIAL, Ops.RANGE, Ops.VAR, Ops.PARAM, Ops.DEFINE_LOCAL,
                     Ops.DEFINE_ACC, Ops.AFTER})


def reads_only(value: UOp, result: UOp) -> bool:
  """Whether an output's `value` reads nothing but the reduction's `result` and constants
  (elementwise ops on it through views without masks): then every output's value is the same
  graph over its own result (rebuilt), lowered once."""
  stack, seen = [value], set()
  while stack:
    u = stack.pop()
    if u is result or u in seen:
      continue
    seen.add(u)
    if u.op in _PLACED or (not u.src and u.op is not Ops.CONST):
      return False
    stack.extend(u.src)
  return True


def rebuilt(u: UOp, old: UOp, new: UOp, memo: dict) -> UOp:
  """`u` with `old` replaced by `new` (`u` reads nothing else but constants: reads_only)."""
  return trampoline.run(_rebuilt(u, old, new, memo))


def _rebuilt(u: UOp, old: UOp, new: UOp, memo: dict):
  if u is old:
    return new
  if not u.src:
    return u
  if u not in memo:
    src = []
    for x in u.src:
      src.append((yield _rebuilt(x, old, new, memo)))
    src = tuple(src)
    memo[u] = u if all(a is b for a, b in zip(src, u.src)) else u.replace(src=src)
  return memo[u]


# ops whose lanes gather_lanes joins into one vector op (lane-wise arithmetic every target renders
# on vectors; nothing on bool, nothing with C integer division semantics)
_LANEWISE = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.MIN, Ops.NEG, Ops.FDIV, Ops.MULACC,
                       Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.RECIP, Ops.CAST})


# ops gather_lanes joins on unsigned lanes too: no sign, so C's division is the floor's, and
# every target renders them on vectors (a packed weight's fields: onnx/operators/quant_tiled.py)
_UNSIGNED_LANEWISE = frozenset({Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHR})


def _lanewise(u: UOp) -> bool:
  """u's op joins lanes into one vector op (_LANEWISE, _UNSIGNED_LANEWISE on unsigned ints)."""
  return u.op in _LANEWISE or u.op in _UNSIGNED_LANEWISE and u.dtype.is_unsigned()


def _power_of_two_step(u: UOp) -> UOp:
  """An unsigned u // 2^k as u >> k and u % 2^k as u & (2^k - 1) (the divisor simplified to a
  constant first): joined into a vector op, a division by a constant vector is left as one
  (the simplifier's rules are scalar), which a driver may not turn into a shift."""
  if u.op not in (Ops.IDIV, Ops.MOD) or not u.dtype.is_unsigned() or u.dtype.count != 1:
    return u
  d = simplify(u.src[1])
  if d.op is not Ops.CONST or d.arg <= 0 or d.arg & (d.arg - 1):
    return u
  if u.op is Ops.MOD:
    return UOp(Ops.AND, u.dtype, (u.src[0], UOp.const(u.dtype, d.arg - 1)))
  return UOp(Ops.SHR, u.dtype, (u.src[0], UOp.const(u.dtype, d.arg.bit_length() - 1)))


def gather_lanes(values: list, memo: dict | None = None) -> UOp:
  """The scalar lanes `values` (one output each) as one vector, joined where they are alike: a
  vector's GEPs in order -> the vector; the same lane-wise op on each -> that op on the joined
  sources; consecutive loads -> a vector load (_packed); else a VECTORIZE."""
  return trampoline.run(_gathered(values, {} if memo is None else memo))


def _gathered(values: list, memo: dict):
  """gather_lanes as a trampolined walk (uop/trampoline.py): no recursion on the graph's depth."""
  values = [_power_of_two_step(v) for v in values]
  key = tuple(values)
  if key in memo:
    return memo[key]
  first, n = values[0], len(values)
  src = first.src[0] if first.op is Ops.GEP else None
  if src is not None and src.dtype.count == n and \
     all(v.op is Ops.GEP and v.src[0] is src and v.arg == k for k, v in enumerate(values)):
    got = src
  elif first.op is Ops.LOAD:
    got = _packed(values)
  elif _lanewise(first) and first.dtype.count == 1 and first.dtype != dtypes.bool and \
      all(s.dtype.count == 1 and s.dtype != dtypes.bool for s in first.src) and \
      all(v.op is first.op and v.arg == first.arg and v.dtype == first.dtype and
          len(v.src) == len(first.src) for v in values):
    srcs = []
    for k in range(len(first.src)):
      srcs.append((yield _gathered([v.src[k] for v in values], memo)))
    srcs = tuple(srcs)
    got = UOp(first.op, first.dtype.vec(n), srcs, first.arg)
  else:
    got = vectorize(values)
  memo[key] = got
  return got


def _packed(values: list) -> UOp:
  """Loads of consecutive elements of one buffer (ungated) as one vector load; else the values
  as a VECTORIZE."""
  first = values[0]
  if len(values) > 1 and all(v.op is Ops.LOAD and len(v.src) == 2 and v.src[0] is first.src[0]
                             for v in values) and first.src[0].op is Ops.PARAM and \
     first.dtype.count == 1 and first.dtype != dtypes.bool and \
     first.dtype.itemsize * len(values) <= 16:
    lins = [linear_sum(v.src[1]) if v.src[1].op is not Ops.CONST else ({}, v.src[1].arg)
            for v in values]
    if all(x is not None and x[0] == lins[0][0] and x[1] == lins[0][1] + k
           for k, x in enumerate(lins)):
      return first.src[0].load(first.src[1], dtype=first.dtype.vec(len(values)))
  return vectorize(values)


def tiled_stores(lw: Lowerer, opts, axes: tuple) -> list[UOp] | None:
  """The stores of a kernel with register tiles (`Opts.tile`, not staged), computed from the
  plan's operands with the tile's columns in vectors (see `tile_accumulators`); None where plan()
  does not apply (lower.py then lowers each output of the tile on its own). Each thread's
  R x C block: rows R*r + i, columns C*c + j of its place (r, c) in the grid of blocks; one loop
  over the reduced elements (Lowerer._tile_loop: conv2d's window unrolled in it), or over a
  symbolic length without its padding's mask two loops that stop there (exact_loops)."""
  item, out = lw.item, lw.item.out
  (rows, cols), (ar, ac) = opts.tile, axes
  p = plan(item, (ar, ac))
  if p is None:
    return None
  lw = StageLowerer(item, p.reduce)
  lw.tile_inner, lw.tile_unroll = opts.tile_inner, opts.tile_unroll
  rr, rc = p.axes
  # a static grid's threads past its end read the last block's operands ungated (CLAMPED_READS)
  clamp = grid_axis(out) is None
  base, gate = tile_threads(out.shape, opts.tile, (ar, ac), opts.local, grid_axis(out),
                           opts.tile_chunk, clamp, opts.shares_quads())
  read_gate = None if clamp else gate
  nc = out.shape[ac]
  fitted = FIT_RAGGED and cols > 1 and nc % cols != 0 and nc >= cols and grid_axis(out) != ac
  first = [base[ar] * int_const(rows) if rows > 1 else base[ar],
           block_start(base[ac], cols, nc) if fitted else
           base[ac] * int_const(cols) if cols > 1 else base[ac]]
  probe = list(base)
  probe[ar], probe[ac] = first
  lw.value(out, tuple(probe), read_gate)   # where the reduction is read: its other indices
  src_base = list(lw.seen[-1])
  lw.cache.clear()
  red_axes = p.reduce.arg[1]
  red_shape = [p.reduce.src[0].shape[a] for a in red_axes]
  limit = lw.limit(p.reduce, red_axes)
  if p.exact:          # the padding's mask dropped: loops that stop at the run-time length
    loops = exact_loops(lw, red_shape, limit, opts.tile_unroll or TILE_UNROLL)
  else:
    loops = [lw._tile_loop(red_shape, limit)]
  valid = [v for _, v in loops[0][1]]
  lanes = tile_lanes(p.source, cols, {id(n) for n in p.a + p.b}) \
    if valid.count(None) == len(valid) else 1

  def at(axis: int, k: int, n: int) -> UOp:
    index = plus_offset(first[k], n)
    if out.shape[axis] % (rows, cols)[k] and not (k == 1 and fitted):
      index = index.lt(int_const(out.shape[axis])).where(index, int_const(out.shape[axis] - 1))
    return index

  def operand_at(points: list):
    """operand(node, i, g, kk): A's value at row i or B's at the columns of vector g, at the
    reduced element of points[kk]."""
    def operand(node: LazyOp, i: int, g: int, kk: int) -> UOp:
      where, valid = points[kk]
      idxs = list(src_base)
      for a, u in zip(red_axes, where):
        idxs[a] = u
      idxs[rr], idxs[rc] = at(ar, 0, i), at(ac, 1, g * lanes)
      load_gate = gate_and(read_gate, valid)
      if id(node) in a_ids:
        return lw.value(node, tuple(idxs), load_gate)
      values = []
      for lane in range(lanes):
        idxs[rc] = at(ac, 1, g * lanes + lane)
        values.append(lw.value(node, tuple(idxs), load_gate))
      return gather_lanes(values, gathered)
    return operand

  a_ids, gathered = {id(n) for n in p.a}, {}
  results = None
  for ranges, points in loops:
    valid = [v for _, v in points]
    results = tile_accumulators(lw, p, (rows, cols), lanes, operand_at(points), len(points),
                                valid, opts.fma, ranges, vector_rows=opts.tile_unroll > 1,
                                start=results, aligned=opts.upcast_vec)
  return tile_stores(lw, opts.tile, axes, base, tuple(first), (1, lanes), (rows, cols), lanes,
                      results, gate, fitted)


def exact_loops(lw: Lowerer, shape: list, limit: UOp, unroll: int) -> list:
  """[(ranges, [(indices, None)])] of a tiled reduction over `shape` (flattened, row-major) whose
  elements from the run-time `limit` on are padding (TileOperands.exact): a loop of `unroll`
  elements per trip, limit // unroll trips, then a loop of one element per trip over the
  limit % unroll left (none with unroll 1). No element read is at or past the limit, so none
  needs a gate (the padding's mask is always true there).

  Measured (bench/symbolic_static.py, lavapipe, best of 5, load ~24 on 2 CPUs), (64, k) @ (k, 64)
  with k in 1..2048, symbolic / static GPU time at k = 77, 1000, 2048: before (the mask kept,
  each output of the tile lowered on its own) 1.00x 21x 1.88x, after 0.58x 0.97x 1.00x. At k = 1
  and 2 (no unrolled step, one or two tail steps) the kernel takes 1.3-1.6 ms where it takes
  0.025 ms at k = 4 and 0.030 at k = 5 (20-30x the static kernel): lavapipe, cause not found."""
  total = prod(shape)
  while math.ceil(total / unroll) > MAX_TRIPS:
    unroll *= 2
  unroll = max(1, min(unroll, total))
  main = UOp(Ops.RANGE, I32, (limit // int_const(unroll) if unroll > 1 else limit,), lw._id())
  firsts = [linear_index([(main, unroll, total // unroll)], u) for u in range(unroll)]
  loops = [([main], firsts)]
  if unroll > 1:
    done = main.src[0] * int_const(unroll)
    tail = UOp(Ops.RANGE, I32, (limit - done,), lw._id())
    loops.append(([tail], [done + tail]))
  return [(ranges, [(unravel([(i, 1, total)], 0, shape), None) for i in indices])
          for ranges, indices in loops]
