"""Variants of a symbolic kernel for small bound values: no speed lost to generality (issue 34).

A kernel whose leading output axis is a symbolic dim (`kg.Dim("m", 1, 4096)`) is optimized for
its padded shape, the top of the range: a matmul (m, 512) @ (512, 512) gets the register tile
of m = 4096 (8 x 16 on lavapipe), and at m = 1 that leaves 32 threads, each computing 8 rows of
which 7 are padding (lavapipe, 2048 x 512 x 512: 4-8 times the static kernel's GPU time at
m = 1 to 3; bench/symbolic_static.py). No one tile serves the whole range (m = 1 runs best in
1 x 4 tiles, 5 times slower than 8 x 16 at m = 2048), so such a kernel gets a few variants:
the same computation with the register tile the heuristic (optimize.py `_tile`'s rule: the
first preferred tile that leaves TILE_MIN_THREADS threads) picks at representative bound
values, lo, lo * VARIANT_STEP, ... below hi. Each variant is compiled with the kernel, at its
first compile, and runs where the bound value is at most its representative value
(uop/program.py `variant_for`); the kernel itself serves the rest. All variants are correct at
every value (each masks the padding as the kernel does), so no bound value ever compiles
anything, and one that ran another variant would only be slower.

Measured (bench/symbolic_static.py, matmul (m, 512) @ (512, 512), m in 1..2048, GPU time
symbolic / static, best of 5-9 interleaved rounds, on a machine at load 12-18 on 2 CPUs, so
single figures are noisy): lavapipe, one kernel before -> with variants: m = 1 4.5-7.3x ->
0.1-1.0x, m = 2 7.5-38x -> 1.7-5x (the variant's WGSL is the static kernel's but for the
workgroup's row offset), m = 3 8.6-9.6x -> 2.8-4x (a 4 x 4 tile where the static kernel takes
3 x 8), m = 5..16 1.5-3x -> 0.5-1.9x, m >= 17 unchanged (the same kernel); SwiftShader m = 1..3
0.1-0.2x, m = 17 2.3x (one run), m >= 77 0.9-1.1x. Each variant costs a compile and a pipeline
at the kernel's first compile (lavapipe: 4 variants and the kernel, 5 pipelines).
"""
from __future__ import annotations

import math

from ..graph.schedule import ScheduleItem, kernel_reduces
from ..graph.view import prod
from .lowerer import Opts
from .threads import local_size
from .optimize import TILE_MIN_THREADS, TILES, LONG_TILE_REDUCE, preferred_tiles, \
  with_adapter_defaults
from ..render.target import Target

# representative bound values: the range's low end, then this factor up, below the top
VARIANT_STEP = 2
# at most this many variants besides the kernel itself (each costs a compile and a pipeline)
MAX_VARIANTS = 4


def tile_variants(item: ScheduleItem, target: Target, options: dict, opts: Opts | None) -> list:
  """[(dim, most, options)]: the variants of register-tiled `item` (chosen `opts`) for bound
  values of its leading symbolic dim up to `most`, each as the options that force its tile,
  smallest first; [] where the kernel takes none (not a register tile, staged, a forced tile,
  no leading plain dim, or the same tile all the way down)."""
  dim = _leading_dim(item)
  if dim is None or opts is None or not opts.tile or opts.stage or "tile" in options or \
     0 not in (opts.tile_axes or ()):
    return []
  name, lo, hi = dim
  merged = with_adapter_defaults(item, target, options)
  reduce = kernel_reduces(item)[0]
  long = prod(reduce.src[0].shape[a] for a in reduce.arg[1]) >= LONG_TILE_REDUCE
  preferred = preferred_tiles(merged, long)
  ladder, value = [], lo
  while value < hi:
    tile = tile_at(item, opts.tile_axes, preferred, value, bool(merged.get("small_tiles")))
    if ladder and ladder[-1][1] == tile:
      ladder[-1] = (value, tile)          # the same tile further up: one variant
    else:
      ladder.append((value, tile))
    value *= VARIANT_STEP
  while ladder and ladder[-1][1] == tuple(opts.tile):
    ladder.pop()                          # the kernel's own tile serves those values
  return [(name, most, {"tile": tile, "group": 0, "local": local_size(
    _threads(item, tile, opts.tile_axes, most), target.max_local)})
    for most, tile in ladder[:MAX_VARIANTS]]


def tile_at(item: ScheduleItem, axes: tuple, preferred: tuple, value: int,
            small: bool = False) -> tuple:
  """The register tile optimize.py's rule picks for `item` with its leading axis at `value`:
  the first of `preferred` (a short axis taken whole) that leaves TILE_MIN_THREADS threads
  and divides the static tiled axis (or is one of TILES); else, with option `small` (lavapipe's
  small_tiles, optimize.py _small_tile), the first of TILES that the shape holds; else the
  smallest clipped tile."""
  shape = (value,) + tuple(item.out.shape[1:])
  clipped = [_clip(shape, t, axes) for t in preferred]
  held = [t for t in (_clip(shape, t, axes) for t in TILES)
          if all(shape[a] >= n for a, n in zip(axes, t))]
  for tile in clipped:
    threads = _threads(item, tile, axes, value)
    other = axes[1] if axes[0] == 0 else axes[0]
    if threads >= TILE_MIN_THREADS and (tile in TILES or shape[other] % tile[axes.index(other)]
                                        == 0):
      return tile
  return held[0] if small and held else min(clipped, key=lambda t: (t[0] * t[1], t))


def _threads(item: ScheduleItem, tile: tuple, axes: tuple, value: int) -> int:
  """The threads `tile` of `axes` leaves with the leading axis at `value`."""
  shape = (value,) + tuple(item.out.shape[1:])
  return prod(math.ceil(n / tile[axes.index(a)]) if a in axes else n for a, n in enumerate(shape))


def _clip(shape: tuple, tile: tuple, axes: tuple) -> tuple:
  """`tile` with an axis shorter than the smallest of TILES taken whole (optimize.py _clip)."""
  return tuple(shape[a] if shape[a] < least else n for a, n, least in zip(axes, tile, TILES[-1]))


def _leading_dim(item: ScheduleItem) -> tuple | None:
  """(name, lo, hi) of the plain dim that is the output's leading axis, the only symbolic one;
  None otherwise."""
  from ..graph.dims import Sym
  sym = item.out.sym
  if sym is None or not isinstance(sym[0], Sym) or any(isinstance(s, Sym) for s in sym[1:]):
    return None
  s = sym[0]
  if len(s.terms) != 1 or s.terms[0][1] != 1 or s.const:
    return None
  name = s.terms[0][0]
  return (name,) + tuple(s.ranges[name])
