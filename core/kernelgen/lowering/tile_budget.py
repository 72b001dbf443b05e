"""The compile-budget rules of a register tile: what a tile may cost to build. A size cap
(within_size: option tile_size_cap), a one-off run's budget (compile_cost.capped: within_budget,
whole_pays, plain_over_budget) and the estimates they rest on without lowering the candidate
(long_uops, window_uops). optimize.py applies them while it chooses a tile; without_long is the
options a long tile over budget falls back to.
"""
from __future__ import annotations

from . import compile_cost
from .lower import lower
from .opts import Opts
from .loop_split import tile_loop_unroll
from .tile_probe import lowered, probe_uops
from .tile_shape import TILES, short_axes, threads_in_tiles, tileable
from ..uop.ops import toposort
from ..graph.schedule import ScheduleItem, kernel_reduces
from ..graph.view import prod

# a tile above TILES[-1] lowering to more UOps than this takes the next smaller one (within_size)
TILE_MAX_UOPS = 1600


def within_size(item: ScheduleItem, tile: tuple, axes: tuple, fits: list,
                 budget: dict | bool = False) -> tuple:
  """With option tile_size_cap (lavapipe's default, render/wgsl/adapters.py, where the driver
  compiles at first dispatch; other adapters' tiles were measured without it) or a one-off
  run's `budget` on an adapter with a measured cost (SwiftShader too): `tile`, or the
  next smaller of `fits` where `tile` lowers to more than TILE_MAX_UOPS UOps (a fused prologue
  that its outputs do not share, repeated R x C times: ResNet-50's 1x1 convs over a batch norm +
  ReLU of a residual sum were 8x8 tiles of 2100-2300 WGSL lines; see TILE_MAX_UOPS). With
  `budget` (the options of a one-off run, compile_cost.capped), the first of those whose
  estimated build also fits the run's budget (the smallest whatever it costs): Inception v2's
  1x1 convs, 8x8 tiles of about 1500 UOps, were estimated at 1.45 s each."""
  smaller = [t for t in fits if t[0] * t[1] < tile[0] * tile[1]]
  if budget and smaller:
    return within_budget(item, axes, [tile] + smaller, budget)
  if not smaller or tile[0] * tile[1] <= prod(TILES[-1]):
    return tile
  return smaller[0] if probe_uops(item, tile, axes) > TILE_MAX_UOPS else tile


def within_budget(item: ScheduleItem, axes: tuple, tiles: list, options: dict) -> tuple:
  """The first of `tiles` (largest first) within TILE_MAX_UOPS (tiles above TILES[-1]) whose
  estimated build fits the one-off run's budget (compile_cost.py), else the last."""
  for tile in tiles[:-1]:
    uops = probe_uops(item, tile, axes)
    if (tile[0] * tile[1] <= prod(TILES[-1]) or uops <= TILE_MAX_UOPS) and \
        compile_cost.affordable(options, uops):
      return tile
  return tiles[-1]


def long_uops(item: ScheduleItem, chosen: Opts) -> int | None:
  """The UOps of `item` in the tile of `chosen` (Opts.tile_unroll as it gives), estimated low
  without lowering it: from the 1x1 and 2x2 tiles' UOps (shared_only probed them already), their
  difference put on rows, columns or outputs, whichever grows least to the tile (each of those
  grows it linearly), and times the loop steps the long tile unrolls more
  (loop_split.tile_loop_unroll); None for a window (Opts.tile_inner), a short axis or a tile of one
  row or column (not estimated). Estimated / lowered, SwiftShader's long tiles: matmul 1024^3
  16x16 unrolled 4 times 696 / 1120, conv2d 64ch 3x3 56x56 16x8 1822 / 2193, 128ch 28x28 8x8
  1822 / 1677, a 1x1 conv 256 -> 1024 14x14 8x8 380 / 640. Over the peers rows and the light
  SqueezeNet, ShuffleNet, ResNet-50 and Inception v2 on both CPU adapters it orders all but one
  of their 235 long tiles as their lowering would (ResNet-50's one on SwiftShader: plain first)."""
  axes, tile = chosen.tile_axes, chosen.tile
  if chosen.tile_inner or not tile or min(tile) < 2 or short_axes(item, axes) or \
      not tileable(item, (2, 2), axes):
    return None
  one, four = probe_uops(item, (1, 1), axes), probe_uops(item, (2, 2), axes)
  reduce = kernel_reduces(item)[0]
  shape = [reduce.src[0].shape[a] for a in reduce.arg[1]]
  more = tile_loop_unroll(shape, 0, chosen.tile_unroll) / tile_loop_unroll(shape)
  rows, cols = tile
  return round(one + (four - one) * min(rows - 1, cols - 1, (rows * cols - 1) / 3) * more)


def plain_over_budget(item: ScheduleItem, options: dict, chosen: Opts, plain: Opts,
                       macs: int | None) -> bool:
  """`plain`, the kernel without the long tiles, is over the one-off run's budget itself, and
  `chosen` (the long tile) holds its tile in both axes with the same window and as much
  unrolling: the long kernel, a superset of its outputs and unrolled steps, lowers to at least
  as many UOps, so it is over the budget too, and lowering it to learn so is waste. conv2d 64ch
  3x3 56x56 one-off (bench/peers.py's row) on SwiftShader: its 16x8 tile unrolled 4 times lowers
  to 2197 UOps against the plain 8x8 tile's 576, ~40% of our compile (CPython, cProfile; in
  Pyodide kg py was ~770 of a ~1630 ms cold first result at load ~9)."""
  if not plain.tile or plain.tile_axes != chosen.tile_axes or \
      plain.tile_inner != chosen.tile_inner or plain.tile_unroll > chosen.tile_unroll or \
      any(p > c for p, c in zip(plain.tile, chosen.tile)):
    return False
  return not compile_cost.affordable(options, len(toposort([lower(item, plain)[0]])),
                                     macs)


def without_long(options: dict) -> dict:
  """`options` without the adapter's long_tiles and tile_unroll (given ones stay)."""
  chose = options.get("adapter_chose", frozenset())
  return {**options, "long_tiles_cost": False,
          **({"long_tiles": None} if "long_tiles" in chose else {}),
          **({"tile_unroll": 0} if "tile_unroll" in chose else {})}


def window_uops(item: ScheduleItem, axes: tuple, inner: int, tile: tuple) -> int:
  """The UOps of `item` in tile `tile` with its window of `inner` elements unrolled, estimated
  from the 1 x 1 and 2 x 1 tiles window_loads lowered (each more output costs what the second
  row did: a 5x5 depthwise conv with a hard-swish, 185 + 199 per output; lowered, 8x8 12842)."""
  one, two = (len(toposort([lowered(item, t, axes, inner)])) for t in ((1, 1), (2, 1)))
  return one + (tile[0] * tile[1] - 1) * (two - one)


def whole_pays(item: ScheduleItem, options: dict, axes: tuple, tile: tuple, whole: tuple) -> bool:
  """`whole` (the tile chosen from _whole_tile's) over `tile` (the one chosen without it): many
  runs, the same tile, or a one-off run (compile_cost.capped) where `whole`'s extra estimated
  build is less than the run time `tile` wastes on outputs past the axes
  (compile_cost.saves_more_than_builds); else _cut_by_budget marks `tile` capped, so that a
  plan realized again swaps in the whole one. SqueezeNet's 13x13 expand conv (1.6 M
  multiply-adds; 8x8 computes 256 outputs of 169 a channel) would build 546 -> 858 WGSL lines
  to save ~0.3 ms: kept; PP-OCRv4 detection's 1x1 convs over 10x10 and 20x20 take 8x10 (no
  more UOps than the gated 8x8)."""
  macs = compile_cost.item_macs(item)
  if tile == whole or not compile_cost.capped(options):
    return True
  if macs is None:
    return False
  waste = 1 - item.out.size / (threads_in_tiles(item, tile, axes) * tile[0] * tile[1])
  return compile_cost.saves_more_than_builds(
    options, probe_uops(item, tile, axes), probe_uops(item, whole, axes), macs, waste)
