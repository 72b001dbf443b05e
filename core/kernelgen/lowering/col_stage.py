"""Register tiles whose column operand is computed, not loaded (a packed weight's fields
dequantized: onnx/operators/quant_tiled.py), with that operand staged in workgroup memory once
per workgroup (Opts.stage_cols, option stage_cols; issue 35).

In a register-tiled q4 prompt GEMM each thread dequantizes its C columns' weights for its own R
rows, so with a prompt's rows split over many threads the same packed words are dequantized
once per row block. With stage_cols, a workgroup holds TR row blocks x TC column blocks (the
row blocks innermost: tile_grid.tile_threads' chunked order, Opts.tile_chunk = TR), and each
trip of the reduction loop the workgroup dequantizes its TC * C columns' values of the trip's
elements once into workgroup memory: each thread whole runs of the unrolled trailing axes (a
word's fields: one load of the word), TC * C * trips' elements in all, where every thread did
C * the trip's elements before. After a BARRIER each thread's tile reads its columns there as
vectors; the trip ends with a BARRIER (Lowerer.accumulators). The row operand is read from
global memory as before; the staged copy never leaves the workgroup (nothing dequantized is
written to global memory). A forced tile (the variants of a symbolic kernel, a cheap first
kernel) stays a plain register tile.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

from ..graph.lazy import L
from ..graph.schedule import ScheduleItem
from ..graph.view import prod
from ..uop.ops import Ops, UOp
from .index_math import I32, int_const, linear_index, plus_offset, unravel
from .loop_split import inner_split, tile_loop_unroll
from .opts import Opts
from .tile_grid import grid_axis, tile_grid
from .tileplan import plan

# column blocks per workgroup at most (fewer where they do not divide the column blocks)
STAGE_COL_BLOCKS = 4
# bytes of workgroup memory a staged step holds at most (several trips of the loop between two
# barriers; WebGPU guarantees 16384)
STAGE_BYTES = 8192


def computed_cols(item: ScheduleItem, p) -> bool:
  """Whether a column operand of plan `p` converts integers loaded from memory to floats inside
  `item` (a packed weight's fields dequantized), the work staging shares; a loaded float operand
  (an f32 matmul's) or integers computed in the kernel (a one-hot) are not staged."""
  inputs = {id(n) for n in item.inputs}

  def leaf(node) -> bool:
    return node.realized or (id(node) in inputs and node is not item.out)

  def walk(roots, found) -> bool:
    stack, seen = list(roots), set()
    while stack:
      node = stack.pop()
      if id(node) in seen:
        continue
      seen.add(id(node))
      if found(node):
        return True
      if not leaf(node):
        stack.extend(node.src)
    return False

  def loaded_ints(node) -> bool:
    return leaf(node) and node.dtype.is_int()

  def dequant(node) -> bool:
    return node.op is L.CAST and node.dtype.is_float() and node.src[0].dtype.is_int() and \
      not leaf(node) and walk(node.src, loaded_ints)
  return walk(p.b, dequant)


def stage_cols_opts(item: ScheduleItem, target, options: dict, opts: Opts | None) -> Opts | None:
  """`opts` (a register tile) staged through workgroup memory where option stage_cols (the row
  blocks a workgroup shares, at most) applies to `item` (see the module docstring): its tile
  not forced, not a window; its column operand computed (computed_cols); the tile's grid of
  blocks over the two tiled axes alone, whole column blocks, a whole trip per loop step; and at
  least 2 row blocks to share. A forced tile or workgroup stays as it is unless stage_cols is
  given too (not an adapter's default). Else `opts` unchanged."""
  most = int(options.get("stage_cols", 0) or 0)
  forced = "tile" in options or "local" in options     # (a variant's, a cheap first kernel's)
  if most < 2 or opts is None or not opts.tile or opts.stage or opts.tile_inner or \
     opts.slide or opts.group or opts.stage_cols or \
     forced and "stage_cols" in options.get("adapter_chose", ()):
    return opts
  out, (ar, ac), (rows, cols) = item.out, opts.tile_axes, opts.tile
  grid = tile_grid(out.shape, opts.tile, opts.tile_axes)
  if grid_axis(out) not in (None, ar) or ar > ac or out.shape[ac] % cols or \
     any(n > 1 for a, n in enumerate(grid) if a not in (ar, ac)):
    return opts
  p = plan(item, (ar, ac))
  if p is None or p.exact or not computed_cols(item, p):
    return opts
  trip = trip_elements(p, opts)
  tr = 1 << int(math.log2(most))
  while tr > 1 and grid[ar] % tr:
    tr //= 2
  tc = next(c for c in range(min(STAGE_COL_BLOCKS, grid[ac]), 0, -1) if grid[ac] % c == 0)
  need = tc * cols * (trip or 0) * sum(n.dtype.itemsize for n in p.b)
  if tr < 2 or not trip or need > target.max_local_bytes or tr * tc > target.max_local:
    return opts
  return dataclasses.replace(opts, local=tr * tc, tile_chunk=tr, stage_cols=tr, quad=False)


def trip_elements(p, opts: Opts) -> int:
  """The reduced elements one trip of the tile's loop (Lowerer._tile_loop) covers, or 0 where a
  trip may run past the reduction (its last trip gated) or its length is symbolic."""
  shape = [p.reduce.src[0].shape[a] for a in p.reduce.arg[1]]
  if not all(isinstance(n, int) for n in shape):
    return 0
  k = inner_split(shape, opts.tile_inner)
  unroll = tile_loop_unroll(shape, opts.tile_inner, opts.tile_unroll)
  if prod(shape[:k]) % unroll:
    return 0
  return unroll * prod(shape[k:])


def stage_trips(p, opts: Opts, width: int, trips: int) -> int:
  """Trips of the tile's loop staged at once (between two barriers): the most, a power of two
  dividing `trips`, whose copy of `width` columns fits STAGE_BYTES."""
  per = width * trip_elements(p, opts) * sum(n.dtype.itemsize for n in p.b)
  most = 1
  while trips % (most * 2) == 0 and per * most * 2 <= STAGE_BYTES:
    most *= 2
  return most


def staged_loop(lw, p, opts: Opts, src_base: list, col0: UOp) -> tuple:
  """([(ranges, points)], {id(B operand): read(g, kk, lanes)}): the tile's reduction loop
  (as Lowerer._tile_loop's, its trips nested in steps of stage_trips) with each column operand
  of plan `p` staged in workgroup memory each step; read gives the `lanes`-vector of the
  thread's columns g * lanes.. at element kk of the inner trip. `src_base`: the reduction's
  source indices at the thread's first output; `col0`: the thread's first column."""
  (rows, cols), (rr, rc) = opts.tile, p.axes
  tr, local = opts.stage_cols, opts.local
  width = (local // tr) * cols                    # the workgroup's columns
  shape = [p.reduce.src[0].shape[a] for a in p.reduce.arg[1]]
  k = inner_split(shape, opts.tile_inner)
  inner = list(itertools.product(*[range(n) for n in shape[k:]]))
  unroll = tile_loop_unroll(shape, opts.tile_inner, opts.tile_unroll)
  trips = prod(shape[:k]) // unroll
  steps = stage_trips(p, opts, width, trips)
  outer = lw._range(trips // steps) if trips > steps else None
  trip = lw._range(steps) if steps > 1 else None
  ranges = [r for r in (outer, trip) if r is not None]
  span = steps * unroll                           # outer elements staged per step
  loop = [(r, n, e) for r, n, e in ((outer, span, trips // steps), (trip, unroll, steps))
          if r is not None]
  points = [(unravel(loop, u, shape[:k]) + [int_const(t) for t in at], None)
            for u in range(unroll) for at in inner]
  lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, local))
  block = lid // int_const(tr)                    # the thread's column block in the workgroup
  first = col0 - block * int_const(cols)          # the workgroup's first column
  runs = width * span                             # (column, staged outer element) pairs
  memories, stores = {}, []
  for node in p.b:
    mem = UOp(Ops.DEFINE_LOCAL, node.dtype.ptr(runs * len(inner), local=True), (), lw._id())
    memories[id(node)] = mem
    for s in range(math.ceil(runs / local)):
      q = plus_offset(lid, s * local)
      inside = q.lt(int_const(runs)) if (s + 1) * local > runs else None
      at = inside.where(q, int_const(runs - 1)) if inside is not None else q
      column, u = at % int_const(width), at // int_const(width)
      terms = loop[:1 if outer is not None else 0] + [(u, 1, span)]
      where = unravel(terms, 0, shape[:k])
      for f, tail in enumerate(inner):
        idxs = list(src_base)
        for a, x in zip(p.reduce.arg[1], where + [int_const(t) for t in tail]):
          idxs[a] = x
        idxs[rc] = first + column
        spot = (u * int_const(len(inner)) + int_const(f)) * int_const(width) + column
        stores.append(mem.store(spot, lw.value(node, tuple(idxs), None), inside))
  barrier = UOp(Ops.BARRIER, None, tuple(stores))
  base = trip * int_const(unroll * len(inner) * width) if trip is not None else None

  def reader(mem: UOp):
    ready = UOp(Ops.AFTER, mem.dtype, (mem, barrier))

    def read(g: int, kk: int, lanes: int) -> UOp:
      index = linear_index([(block, cols, local // tr)], kk * width + g * lanes)
      index = base + index if base is not None else index
      return ready.load(index, dtype=mem.dtype.base.vec(lanes) if lanes > 1 else None)
    return read
  return [(ranges, points)], {key: reader(mem) for key, mem in memories.items()}
