"""Register-tile geometry: the tiles the heuristic tries (TILES, option tiles / long_tiles),
which two output axes a tile spans (best_tile_axes, probed), the predicates on a tile of those
axes (tileable, divides, threads_in_tiles, a short axis taken whole: clip), and shared_only (a
tile whose outputs share little kept to one row). optimize.py chooses among them.
"""
from __future__ import annotations

import itertools
import math

from ..errors import UnsupportedError
from .tile_probe import probe_loads, probe_uops
from ..graph.schedule import ScheduleItem, kernel_reduces
from ..graph.view import prod

# register tiles (matmul, conv2d): the first of TILES dividing both axes and leaving at least
# TILE_MIN_THREADS threads, for outputs of TILE_MIN_SIZE and reductions of TILE_MIN_REDUCE or
# more (an axis shorter than the tile is taken whole, clip); a forced tile: MAX_TILE_ACC outputs
TILES, TILE_MIN_THREADS, TILE_MIN_SIZE, TILE_MIN_REDUCE, MAX_TILE_ACC = \
  ((8, 8), (4, 4)), 256, 4096, 8, 256
# option long_tiles (an adapter's choice) applies to kernels reducing at least this many elements
LONG_TILE_REDUCE = 256
# the tile that compares the loads of each choice of tiled axes
TILE_PROBE = (2, 2)
# a TILE_PROBE tile lowering to this many times one output's UOps shares too little: one row
TILE_SHARE_MAX = 2.4


def shared_only(item: ScheduleItem, tile: tuple, axes: tuple) -> tuple:
  """`tile` as one row of its columns where its outputs share little: a TILE_PROBE tile lowers to
  at least TILE_SHARE_MAX times the UOps of one output (a depthwise conv, a pool: neighbouring
  windows share only the overlapping loads, and not even those where the index math differs;
  convs and matmuls share whole operands: 1.5-2.1 times). More rows would only repeat code:
  ShuffleNet's 3x3 depthwise convs over a fused batch norm + ReLU were 8 x 8 tiles of 4000-6000
  lines of WGSL each (lavapipe: 21-54 s to compile one at its first dispatch), 1 x 8 are under
  900 (1-2 s); its ten kernels this changes ran 262 ms in all instead of 286 (two slower, eight
  faster or the same; tests/onnx_import/onnx_light_times.txt)."""
  if min(tile) < 2 or short_axes(item, axes):
    return tile
  one = probe_uops(item, (1, 1), axes)
  return (1, tile[1]) if probe_uops(item, TILE_PROBE, axes) >= TILE_SHARE_MAX * one else tile


def near_divisor(n: int, size: int) -> int:
  """The least divisor of n from `size` to twice it (a tile never shrinks), else `size`."""
  return next((d for d in range(size, 2 * size + 1) if n % d == 0), size)


def divides(item: ScheduleItem, tile: tuple, axes: tuple) -> bool:
  """The tile divides both tiled axes: a preferred tile beyond TILES (option tiles) is taken
  only then (SwiftShader, conv2d's 56 columns: 8x16 with partial tiles ran slower than 8x8)."""
  return all(item.out.shape[a] % n == 0 for a, n in zip(axes, tile))


def preferred_tiles(options: dict, long: bool = False) -> tuple:
  """The register tiles the heuristic tries, best first: option tiles (an adapter's measured
  preference, render/wgsl/adapters.py) or TILES; for a `long` reduction (LONG_TILE_REDUCE),
  option long_tiles first where given."""
  name = "long_tiles" if long and options.get("long_tiles") else "tiles"
  tiles = options.get(name) or TILES
  pairs = isinstance(tiles, (tuple, list)) and all(
    isinstance(t, (tuple, list)) and len(t) == 2 and all(isinstance(v, int) for v in t)
    for t in tiles)
  if not pairs or any(min(t) < 1 or t[0] * t[1] > MAX_TILE_ACC for t in tiles):
    raise UnsupportedError(f"{name}={options[name]!r}: give (rows, cols) pairs, both >= 1, at "
                           f"most {MAX_TILE_ACC} outputs per thread, best first")
  return tuple(tuple(t) for t in tiles)


def short_axes(item: ScheduleItem, axes: tuple) -> bool:
  """One of the tiled axes is shorter than the smallest tile (and the other is not): the tile
  takes it whole (a pixel's colour channels)."""
  short = [item.out.shape[a] < n for a, n in zip(axes, TILES[-1])]
  return any(short) and not all(short)


def clip(item: ScheduleItem, tile: tuple, axes: tuple) -> tuple:
  """`tile` with a short axis (short_axes) taken whole."""
  return tuple(item.out.shape[a] if item.out.shape[a] < least else n
               for a, n, least in zip(axes, tile, TILES[-1]))


def has_tile_axes(item: ScheduleItem) -> bool:
  """best_tile_axes(item) is not None, without its probes: one reduction, two axes of size > 1."""
  return len(kernel_reduces(item)) == 1 and sum(n > 1 for n in item.out.shape) >= 2


def best_tile_axes(item: ScheduleItem) -> tuple | None:
  """The two output axes to tile, for a kernel with one (not nested) reduction: of each pair of
  axes of size > 1, the one whose 2 x 2 tile loads the fewest values per step (later pairs win
  ties; matmul: its last two; conv2d: output channels and columns), except that a pair with a
  short axis (short_axes) does not win a tie against one without (a 5x5 blur of (H, W, 3):
  rows x columns share the window's loads both ways, where columns x channels share them along
  the columns only; lavapipe in Chromium, 640x480: 8x8 tiles 63 ms, 8x3 75 ms)."""
  if len(kernel_reduces(item)) != 1:
    return None
  sizes = [a for a, n in enumerate(item.out.shape) if n > 1]
  if len(sizes) <= 2:
    return tuple(sizes) if len(sizes) == 2 else None   # one pair at most: nothing to compare
  best, best_loads = None, None
  for pair in itertools.combinations(sizes, 2):
    loads = probe_loads(item, TILE_PROBE, pair)
    if best_loads is None or loads < best_loads or \
        loads == best_loads and (short_axes(item, best) or not short_axes(item, pair)):
      best, best_loads = pair, loads
  return best


def tileable(item: ScheduleItem, tile: tuple, axes: tuple) -> bool:
  """The two tiled output axes are at least as long as the tile."""
  shape = item.out.shape
  return shape[axes[0]] >= tile[0] and shape[axes[1]] >= tile[1]


def threads_in_tiles(item: ScheduleItem, tile: tuple, axes: tuple) -> int:
  """The threads of `item` in tiles `tile` of `axes`: one per tile, partial tiles included."""
  shape = list(item.out.shape)
  for axis, size in zip(axes, tile):
    shape[axis] = math.ceil(shape[axis] / size)
  return prod(shape)
