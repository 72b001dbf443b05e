"""Tiling of matmul/conv2d through workgroup memory (`Opts.stage`).

A workgroup of TR x TC threads (lid1 x lid0) computes a block of BR x BC outputs of the two
tiled axes (BR = TR*R, BC = TC*C: each thread an R x C register tile, `Opts.tile`, its rows
lid1 + TR*i and its columns in vectors of V (4, 2 or 1 dividing C): lid0*V + TC*V*g + v for
vector g, lane v; a warp's vector loads and stores cover consecutive memory); gid0 counts the
column blocks, gid1 the row blocks times the other output axes. The reduction runs in steps of
BK elements. Per step the workgroup cooperatively computes its operands into workgroup memory:
the "A" values (the largest parts of the reduction's source, through elementwise ops, that do
not depend on the column axis) for BR x BK, the "B" values (not depending on the row axis) for
BK x BC, each thread a run of up to 4 consecutive elements per round (one vector load and store
where they are consecutive in memory); BARRIER; each thread accumulates its tile from workgroup
memory in a loop over the step's elements (regtile.py: vector accumulators, a V-lane load of B
and one A value per row and element); BARRIER; next step. Fused elementwise ops, casts, masks
(conv padding) and broadcasts below an operand are applied while loading, so each is computed
once per block. Rows and columns past the edge load at clamped indices and gate their
stores; the last step's elements past the reduction are gated out. The step loop has a uniform
trip count and the only gated stores are single stores, so both barriers are in uniform control
flow.
"""
from __future__ import annotations

import math

from ..errors import UnsupportedError
from ..graph.lazy import LazyOp
from .index_math import I32, gate_and, int_const, unravel
from .lowerer import Lowerer
from ..uop.ops import Ops, UOp
from .index_math import plus_offset
from .regtile import gather_lanes, tile_accumulators, tile_lanes, tile_stores
from .tileplan import StageLowerer, plan
from ..graph.view import prod

# reduced elements per trip of the loop over a step's elements in workgroup memory (a step of
# any other size is unrolled whole)
STAGE_UNROLL = 1


def staged_stores(lw: Lowerer, opts) -> list[UOp]:
  """The stores of a kernel tiled through workgroup memory (see the module docstring)."""
  item, out = lw.item, lw.item.out   # lowered again here, the reduction read from the tiles
  (rows, cols), (ar, ac) = opts.tile, opts.tile_axes
  trows, tcols, step = opts.stage
  p = plan(item, (ar, ac))
  if p is None or p.exact:   # optimize only stages kernels plan() accepts, and not over a
    # symbolic length (exact); a hand-made Opts may ask for it
    raise UnsupportedError(f"Opts.stage does not apply to kernel {item.name!r}: its reduction "
                           f"cannot be read as row x column tiles (or runs over a symbolic "
                           f"length); lower it without stage")
  lw = StageLowerer(item, p.reduce)
  rr, rc = p.axes
  brows, bcols = trows * rows, tcols * cols
  nr, nc = out.shape[ar], out.shape[ac]
  others = [a for a in range(len(out.shape)) if a not in (ar, ac)]
  other_shape = [out.shape[a] for a in others]
  row_blocks = math.ceil(nr / brows)
  gid0 = UOp(Ops.SPECIAL, I32, (), ("gid", 0, math.ceil(nc / bcols)))
  gid1 = UOp(Ops.SPECIAL, I32, (), ("gid", 1, row_blocks * prod(other_shape)))
  lid0 = UOp(Ops.SPECIAL, I32, (), ("lid", 0, tcols))
  lid1 = UOp(Ops.SPECIAL, I32, (), ("lid", 1, trows))
  block_row = gid1 % int_const(row_blocks) if gid1.arg[2] > row_blocks else gid1
  base = [int_const(0)] * len(out.shape)
  if prod(other_shape) > 1:
    rest = gid1 // int_const(row_blocks) if row_blocks > 1 else gid1
    for a, u in zip(others, unravel([(rest, 1, prod(other_shape))], 0, other_shape)):
      base[a] = u
  row0, col0 = block_row * int_const(brows), gid0 * int_const(bcols)
  lw.value(out, tuple(base), None)          # where the reduction is read: its other indices
  src_base = list(lw.seen[-1])
  lw.cache.clear()

  def clamp(index: UOp, n: int, block: int) -> UOp:
    return index.lt(int_const(n)).where(index, int_const(n - 1)) if n % block else index

  src = p.reduce.src[0]
  red_axes = p.reduce.arg[1]
  red_shape = [src.shape[a] for a in red_axes]
  total = prod(red_shape)
  steps = math.ceil(total / step)
  k0 = lw._range(steps) if steps > 1 else int_const(0)
  threads = trows * tcols
  tid = lid1 * int_const(tcols) + lid0 if tcols > 1 else lid1

  # load phase: every thread computes its share of each operand into workgroup memory
  locals_, stores = {}, []
  for node, kind in [(n, "a") for n in p.a] + [(n, "b") for n in p.b]:
    width = brows if kind == "a" else bcols
    count = width * step
    local = UOp(Ops.DEFINE_LOCAL, node.dtype.ptr(count, local=True), (), lw._id())
    locals_[id(node)] = local
    # each thread a run of `run` consecutive elements per round (a vector load and store where
    # they are consecutive in memory too), the workgroup's runs consecutive
    run = next((v for v in (4, 2) if count % (threads * v) == 0 and
                (step if kind == "a" else width) % v == 0 and node.dtype.itemsize * v <= 16), 1)
    for s in range(math.ceil(count / (threads * run))):
      q = tid + int_const(threads * s) if s else tid      # the run's number
      first = q * int_const(run) if run > 1 else q
      inside = first.lt(int_const(count)) if threads * run * (s + 1) > count else None
      values = []
      per = (step if kind == "a" else width) // run      # runs per row (A) or step element (B)
      major, minor = q // int_const(per), q % int_const(per)
      minor = minor * int_const(run) if run > 1 else minor      # (a multiple of run: aligned vectors)
      at0, kk0 = (major, minor) if kind == "a" else (minor, major)
      for lane in range(run):
        idxs = list(src_base)
        if kind == "a":
          kk = plus_offset(kk0, lane)
          idxs[rr] = clamp(row0 + at0, nr, brows)
        else:
          kk = kk0
          idxs[rc] = clamp(plus_offset(col0 + at0, lane), nc, bcols)
        k = k0 * int_const(step) + kk if steps > 1 else kk
        valid = k.lt(int_const(total)) if steps * step > total else None
        for a, u in zip(red_axes, unravel([(k, 1, total)], 0, red_shape)):
          idxs[a] = u
        values.append(lw.value(node, tuple(idxs), gate_and(inside, valid)))
      value = gather_lanes(values) if run > 1 else values[0]
      stores.append(local.store(first, value, inside) if inside is not None else
                    local.store(first, value))
  barrier = UOp(Ops.BARRIER, None, tuple(stores))
  ready = {k: UOp(Ops.AFTER, v.dtype, (v, barrier)) for k, v in locals_.items()}

  # compute phase: each thread accumulates its register tile from workgroup memory, in a loop
  # over the step's elements (STAGE_UNROLL of them per trip; ptxas/Tint unroll short loops)
  a_ids = {id(n) for n in p.a}
  unroll = STAGE_UNROLL if step % STAGE_UNROLL == 0 else step
  inner = lw._range(step // unroll) if step > unroll else None
  lanes = tile_lanes(src, cols, set(ready)) if steps * step == total else 1

  def at(kk: int) -> UOp:     # the step's element kk of this trip
    if inner is None:
      return int_const(kk)
    return inner * int_const(unroll) + int_const(kk) if unroll > 1 else inner

  def operand(node: LazyOp, i: int, g: int, kk: int) -> UOp:
    """Operand A at row i, or B at columns g*lanes.. (one vector), of step element kk."""
    if id(node) in a_ids:
      if trows > 1:
        index = (lid1 + int_const(trows * i)) * int_const(step) + at(kk)
      else:
        index = int_const(i * step) + at(kk)
      return ready[id(node)].load(index)
    # the thread's columns: lid0*lanes + tcols*lanes*g + lane
    index = at(kk) * int_const(bcols) + int_const(tcols * lanes * g)
    if tcols > 1:
      index = index + (lid0 * int_const(lanes) if lanes > 1 else lid0)
    return ready[id(node)].load(index, dtype=node.dtype.vec(lanes) if lanes > 1 else None)

  valid = None
  if steps * step > total:
    valid = [(k0 * int_const(step) + at(kk) if steps > 1 else at(kk)).lt(int_const(total))
             for kk in range(unroll)]
  # the step loop (k0) ends each trip with a BARRIER: the next trip refills workgroup memory
  ranges = ([k0] if steps > 1 else []) + ([inner] if inner is not None else [])
  results = tile_accumulators(lw, p, (rows, cols), lanes, operand, unroll, valid, opts.fma,
                              ranges, barrier=steps > 1)
  first = lid0 * int_const(lanes) if lanes > 1 else lid0
  return tile_stores(lw, opts.tile, opts.tile_axes, base, (row0 + lid1, col0 + first),
                      (trows, tcols * lanes), (brows, bcols), lanes, results, None)
