"""A kernel's threads over the blocks of its output: which two axes a register tile spans
(tile_axes), which block each thread computes and the gate of the threads past the grid
(tile_threads), and the axis a run-time grid follows (grid_axis: compiler.with_grid launches
only the threads a smaller bound value needs).
"""
from __future__ import annotations

import math

from .index_math import I32, int_const, unravel
from ..graph.dims import Sym
from ..graph.lazy import LazyOp
from ..uop.ops import Ops, UOp
from ..graph.view import prod

# QUAD_ROWS (issue 42): where a quad's 4 lanes share their row block's loads (Opts.quad,
# quad_share.py), they must be 4 consecutive threads of one row block, so the threads of a row
# block (its blocks over the axes after the tile's row axis) must be a multiple of 4; else
# (PP-OCRv4 rec's 480 -> 480 1x1 convs at 3x80: 3 x 5 blocks of 16 pixels a row block) quads
# straddle two row blocks and nothing is shared. There a row block takes up to 3 more threads
# (a multiple of 4), which compute its last block again (the same values written twice, as
# FITTED_BLOCKS' overlap), where that adds at most 1 / QUAD_PAD_MAX of the threads.
# Same-process A/B (padding off -> on, order alternated, GPU timestamps, best (median) ms, load
# 19-20 on 2 shared CPUs): lavapipe, 12 rounds, rec's conv with hardswish 20.8 (40.3) -> 6.5
# (11.4), its FC 40x120 @ 120x6625 25.4 (63.2) -> 13.9 (35.0), 40x360 @ 360x120 0.67 (0.80) ->
# 0.48 (0.54); SwiftShader, 6 rounds: the conv 222 (279) -> 175 (204), the FC 244 (344) -> 196
# (276). In the 600-seed corpus and PP-OCRv4 det no kernel changes (bench/dump_kernels.py
# --adapter lavapipe,swiftshader --runs 100 --subgroups); in rec 9 of 68 do.
QUAD, QUAD_PAD_MAX = 4, 8


def tile_axes(shape) -> tuple[int, int] | None:
  """The output axes a register tile spans: the last two of size > 1 (None: fewer than two)."""
  axes = [a for a, n in enumerate(shape) if n > 1]
  return (axes[-2], axes[-1]) if len(axes) >= 2 else None


def tile_grid(shape, tile: tuple, axes: tuple) -> list:
  """The blocks of `tile` along each axis of `shape` (tile over `axes`; 1 block elsewhere)."""
  grid = list(shape)
  for axis, size in zip(axes, tile):
    grid[axis] = math.ceil(grid[axis] / size)
  return grid


def quad_row(grid: list, axes: tuple, first: int | None = None) -> int:
  """The threads a row block of `grid` takes where quads share its loads (QUAD_ROWS): its blocks
  over the axes after the row axis, rounded up to a multiple of 4 where the rows' axis comes
  before the columns', no axis comes first (`first`: a run-time grid) and that adds at most
  1 / QUAD_PAD_MAX of the threads; else those blocks as they are."""
  row, col = axes
  n = prod(grid[row + 1:])
  padded = -(-n // QUAD) * QUAD
  if first is not None or row > col or (padded - n) * QUAD_PAD_MAX > n:
    return n
  return padded


def tiled_threads(shape, tile: tuple, axes: tuple, quad: bool = False,
                  first: int | None = None) -> int:
  """The threads of a grid of `tile` blocks over `axes` of `shape`: one per block, and with
  `quad` (Opts.quad) a row block's padding for its quads (quad_row)."""
  grid = tile_grid(shape, tile, axes)
  if quad:
    return prod(grid[:axes[0] + 1]) * quad_row(grid, axes, first)
  return prod(grid)


def tile_threads(shape, tile: tuple, axes: tuple, local: int, first: int | None = None,
                 chunk: int = 0, clamp: bool = False,
                 quad: bool = False) -> tuple[list, UOp | None]:
  """(each axis's block index, gate) of this thread in the grid of R x C blocks over `axes` of
  `shape` (one thread per block; the gate is None where the threads fit the grid exactly).
  Threads run over the blocks in row-major order, but with axis `first` (grid_axis: a symbolic
  size) outermost, so the blocks a smaller bound value needs are the first threads and a
  run-time grid (compiler.with_grid) can launch only those. With `chunk` (Opts.tile_chunk, a
  divisor of that axis's blocks) the blocks of axis `first` go in runs of `chunk`, outermost,
  and the other axes' blocks, then `chunk` consecutive blocks of `first` innermost: the lanes of
  a workgroup walk that axis first, as a static kernel's lanes walk its last axis. With `clamp`,
  the threads past the grid take the last block's indices (the gate still says which they are):
  their reads need no gate (regtile.tiled_stores). With `quad` (Opts.quad), a row of blocks may
  take up to 3 more threads, which compute its last block again (QUAD_ROWS)."""
  grid = tile_grid(shape, tile, axes)
  threads = tiled_threads(shape, tile, axes, quad, first)
  groups = max(1, math.ceil(threads / local))
  gid = UOp(Ops.SPECIAL, I32, (), ("gid", 0, groups))
  lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, local))
  thread = gid * int_const(local) + lid if local > 1 else gid
  gate = thread.lt(int_const(threads)) if groups * local > threads else None
  if clamp and gate is not None:
    thread = gate.where(thread, int_const(threads - 1))
  order = list(range(len(grid)))
  if first is not None and chunk > 1 and grid[first] % chunk == 0:
    rest = [a for a in order if a != first]
    idx = unravel([(thread, 1, threads)], 0,
                  [grid[first] // chunk] + [grid[a] for a in rest] + [chunk])
    base = [None] * len(grid)
    for a, u in zip(rest, idx[1:-1]):
      base[a] = u
    base[first] = idx[0] * int_const(chunk) + idx[-1]
    return base, gate
  if first:
    order = [first] + [a for a in order if a != first]
  if threads != prod(grid):        # QUAD_ROWS: a row block's extra threads take its last block
    row, inner = axes[0] + 1, prod(grid[axes[0] + 1:])
    outer = unravel([(thread, 1, threads)], 0, grid[:row] + [threads // prod(grid[:row])])
    last = outer[-1].minimum(int_const(inner - 1))
    return outer[:-1] + unravel([(last, 1, inner)], 0, grid[row:]), gate
  base = [None] * len(grid)
  for a, u in zip(order, unravel([(thread, 1, threads)], 0, [grid[a] for a in order])):
    base[a] = u
  return base, gate


def block_start(block: UOp, size: int, n: int) -> UOp:
  """The first index of block number `block` of `size` along an axis of `n` (n % size != 0,
  n >= size): block * size, but the ragged last block moved back to end at n (it starts at
  n - size, overlapping the block before it, whose outputs it writes again with the same
  values), so no index of a block is past the axis and none needs a clamp or a gate (FITTED_BLOCKS
  in regtile.py). Written as q * min(block * size/q, (n - size)/q), q = gcd(size, n): a multiple
  of q that vector.aligned_loads and the writers prove (q = 4: aligned vec4 words)."""
  q = math.gcd(size, n)
  scaled = block * int_const(size // q) if size > q else block
  start = scaled.minimum(int_const((n - size) // q))
  return start * int_const(q) if q > 1 else start


def grid_axis(out: LazyOp) -> int | None:
  """The output axis a run-time grid follows: the only symbolic one of `out` (None where it has
  none or several)."""
  axes = [a for a, s in enumerate(out.sym or ()) if isinstance(s, Sym)]
  return axes[0] if len(axes) == 1 else None
