"""The optimizer: choose launch options for one scheduled kernel on one target.

Heuristics, as data: each target's workgroup limits, the preferred workgroup sizes, and when
to give one thread several outputs (upcast, or a register tile of two output axes for
matmul-like reductions), and when to tile those through workgroup memory with a 2-D workgroup
(wgtile.py: the PTX default; on WGSL, lavapipe measured it slower: Target.stage_default).
`optimize(item, target, options)` returns the Opts the lowering uses; options may force them
(`local=`, `upcast=`, `group=`, `tile=`, `stage=`). What differs between targets is read from
the Target object passed in (render/target.py). Timing candidates on a device is search.py's;
what a choice costs to compile, compile_cost.py's. One concept, the heuristics of one kernel's
launch options over the probes they share (_PROBED), so it runs past 500 lines.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import weakref

from ..dtype import dtypes
from ..errors import LimitError, UnsupportedError
from .lower import lower
from .lowerer import MAX_TRIPS, TILE_INNER, Opts, tile_loop_unroll
from . import compile_cost
from .attention import attention_opts
from .rows import row_opts
from .slide import slide_choices
from .staged import staged_rows
from .threads import OTHER_LAYOUTS, grid_chunk, grid_local, inner_opts, local_size, reduce_inner, \
  shares_a_vector, write_opts
from .tileplan import plan
from ..uop.ops import Ops, toposort
from ..graph.lazy import L
from ..graph.schedule import ScheduleItem, find_reduce, kernel_reduces
from ..graph.view import prod
from ..rules.symbolic import simplify
from ..render.target import Target

# One sentence per constant; per-target facts are Target fields (render/target.py), and the
# measurements behind both are the adapter table's notes (render/wgsl/adapters.py, MEASUREMENTS).

# elementwise kernels at least this large give each thread UPCAST consecutive outputs on GPUs
UPCAST_MIN_SIZE, UPCAST = 1 << 16, 4
# a reduction over at least GROUP_MIN_REDUCE elements with fewer than GROUP_MAX_OUTPUTS outputs
# (option group_outputs: another limit, the CPU adapters' from render/wgsl/adapters.py) gives each
# output a workgroup of at least GROUP_MIN threads (a grouped reduction)
GROUP_MIN_REDUCE, GROUP_MAX_OUTPUTS, GROUP_MIN = 256, 1 << 16, 16
# the fewest threads per output whose grouped reduction combines per subgroup (PTX: whole warps)
SUBGROUP_MIN_GROUP, WARP = 64, 32
# with option group_chunk (CPU adapters: each lane reads one run), at most this many lanes
CHUNK_MAX_GROUP = 32
# register tiles (matmul, conv2d): the first of TILES dividing both axes and leaving at least
# TILE_MIN_THREADS threads, for outputs of TILE_MIN_SIZE and reductions of TILE_MIN_REDUCE or
# more (an axis shorter than the tile is taken whole, _clip); a forced tile: MAX_TILE_ACC outputs
TILES, TILE_MIN_THREADS, TILE_MIN_SIZE, TILE_MIN_REDUCE, MAX_TILE_ACC = \
  ((8, 8), (4, 4)), 256, 4096, 8, 256
# option long_tiles (an adapter's choice) applies to kernels reducing at least this many elements
LONG_TILE_REDUCE = 256
# the tile that compares the loads of each choice of tiled axes
TILE_PROBE = (2, 2)
# a TILE_PROBE tile lowering to this many times one output's UOps shares too little: one row
TILE_SHARE_MAX = 2.4
# option tile_window unrolls a window of at most TILE_WINDOW elements, in the first preferred
# tile of at most TILE_WINDOW_WORK products per thread (_window_tile)
TILE_WINDOW, TILE_WINDOW_WORK = 49, 1600
# a tile above TILES[-1] lowering to more UOps than this takes the next smaller one (_within_size)
TILE_MAX_UOPS = 1600
# tiles through workgroup memory (wgtile.py, option stage): threads' tiles of at most STAGE_TILE,
# steps of STAGE_STEP reduced elements
STAGE_TILE, STAGE_STEP = (4, 4), 8

def optimize(item: ScheduleItem, target: Target, options: dict | None = None) -> Opts:
  """Launch options for `item` on `target`."""
  given, options = options or {}, with_adapter_defaults(item, target, options or {})
  if item.rows:
    return row_opts(item, target, options)        # row kernels: rows.py
  if item.out.op is L.ATTENTION:
    return attention_opts(item, target, options)  # fused attention: attention.py
  if item.out.op is L.WRITE:      # an in-place write: a thread (or workgroup) per element
    return write_opts(item, lambda value: optimize(value, target, given))
  n = max(item.out.size, 1)
  staged = staged_rows(item)
  attention = any(r.op is L.ATTENTION for r in staged.values())   # (lowered staged only)
  if staged and (attention or not any(k in options for k in OTHER_LAYOUTS)):
    # a prologue's one row, staged once per workgroup (staged.py): a thread per output; with an
    # attention staged, one workgroup (attention once)
    one = attention and n <= target.max_local
    return Opts(local=int(options.get("local", 0) or 0) or
                (n if one else local_size(n, target.max_local)))
  if reduce_inner(item, options):              # a packed weight's matvec on CPU adapters
    return inner_opts(item, target, options)
  group = int(options.get("group", -1))
  if group < 0:
    group = 0 if "local" in options or "upcast" in options or \
      options.get("stage") not in (None, False) else group_size(item, target, options)
    if group and target.tile_over_group and _shares_loads(item, target, options):
      group = 0                    # register tiles instead (conv2d, matmul with few outputs)
  if group:
    return Opts(local=group, upcast=1, group=group, subgroups=_subgroups(target, options, group),
                group_unroll=int(options.get("group_unroll", target.group_unroll)),
                group_vec=int(options.get("group_vec", target.group_vec)),
                group_chunk=bool(options.get("group_chunk", False)))
  slid = _slide(item, target, options)    # depthwise convs: slide.py
  if slid:
    return slid
  tile = _tile(item, target, options)
  staged = _stage(item, target, options, tile)
  if staged:
    return staged
  if tile:
    tile, axes = tile
    cut = _cut_by_budget(item, target, options, tile)
    tile, inner, capped = _window_tile(item, options, tile, axes)
    capped = capped or cut and not inner
    chosen = _tile_opts(item, target, options, tile, axes, inner, capped)
    plain = _long_over_budget(item, target, options, chosen)
    return plain or _quickest_first(item, target, options, chosen)
  upcast = int(options.get("upcast", _default_upcast(item, target, n)))
  if n % upcast:
    upcast = 1
  limit = target.max_local
  if upcast > 1 and "upcast" not in options:
    limit = min(limit, target.upcast_local or limit)
  local = int(options.get("local", 0)) or local_size(n // upcast, limit)
  vec = bool(options.get("upcast_vec", target.upcast_vec))
  return Opts(local=local, upcast=upcast, upcast_vec=vec and upcast > 1 and not _has_reduce(item),
              seq_vec=int(options.get("seq_vec", 0) or 0) if shares_a_vector(item) else 0)


def shape_class(item: ScheduleItem) -> str:
  """The shape class the adapter table (render/wgsl/adapters.py) keys on: "elementwise" (no
  reduction), "tile" (a reduction with two output axes to tile: matmul, conv2d), "reduce" (to
  one value), "rows" (a reduction per row) or "attention" (lowering/attention.py)."""
  if item.rows:
    return "rows"
  if item.out.op is L.ATTENTION:
    return "attention"
  if not kernel_reduces(item):
    return "elementwise"
  if _has_tile_axes(item):
    return "tile"
  return "reduce" if item.out.size == 1 else "rows"


def with_adapter_defaults(item: ScheduleItem, target: Target, options: dict) -> dict:
  """`options` over the defaults its `adapter` option's class has for this kernel's shape class
  (targets that key defaults on adapters: WGSL; explicit options win), with `adapter_chose` the
  names the adapter's defaults set (a compile-cost cap may cut those down, not given ones)."""
  if options.get("adapter") is None or not target.adapters:
    return options
  defaults = target.adapter_defaults(options["adapter"], shape_class(item))
  merged = {**defaults, **options, "adapter_chose": frozenset(defaults) - set(options)}
  if "tiles" in options and "long_tiles" not in options:
    merged.pop("long_tiles", None)      # given tiles win over the adapter's long_tiles
  return merged


def _subgroups(target: Target, options: dict, group: int) -> tuple:
  """The dtypes whose grouped reductions combine per subgroup first: with option subgroups=True
  (the WEBGPU device sets it when its adapter has subgroups), `group` threads per output (at
  least SUBGROUP_MIN_GROUP unless the group is forced; whole warps on PTX)."""
  forced = int(options.get("group", 0) or 0) > 0
  if not options.get("subgroups") or not (forced or group >= SUBGROUP_MIN_GROUP):
    return ()
  return () if target.subgroup_whole_warps and group % WARP else target.subgroup_dtypes


def group_size(item: ScheduleItem, target: Target, options: dict | None = None) -> int:
  """Threads per output for a grouped reduction (0: none): about sqrt(reduce size), a power of
  two within the target's workgroup size and workgroup memory (and CHUNK_MAX_GROUP with option
  group_chunk), leaving each lane at least Target.group_min_steps steps; none from
  GROUP_MAX_OUTPUTS outputs, or from option group_outputs where given."""
  reduces = kernel_reduces(item)
  most = int((options or {}).get("group_outputs", 0) or 0) or GROUP_MAX_OUTPUTS
  if not reduces or item.out.size >= most:
    return 0
  sizes = [prod(r.src[0].shape[a] for a in r.arg[1]) for r in reduces]
  if min(sizes) < GROUP_MIN_REDUCE or any(r.dtype == dtypes.bool for r in reduces):
    return 0
  limit = target.max_local
  if (options or {}).get("group_chunk"):
    limit = min(limit, CHUNK_MAX_GROUP)
  local_bytes = sum(r.dtype.itemsize for r in reduces)
  while limit * local_bytes > target.max_local_bytes:
    limit //= 2
  group, steps = GROUP_MIN, target.group_min_steps * target.group_vec
  while group * 2 <= limit and (group * 2) ** 2 <= min(sizes) and group * 2 * steps <= min(sizes):
    group *= 2
  return group if group <= limit else 0


def _tile(item: ScheduleItem, target: Target, options: dict) -> tuple:
  """((R, C), axes) of the register tile for `item`, or () for none; options["tile"] forces
  (R, C)."""
  if "tile" in options:
    tile = tuple(int(v) for v in options["tile"] or ())
    if tile and (len(tile) != 2 or min(tile) < 1 or tile[0] * tile[1] > MAX_TILE_ACC):
      raise UnsupportedError(f"tile={options['tile']!r}: give (rows, cols), both >= 1, at most "
                             f"{MAX_TILE_ACC} outputs per thread, or () for none")
    axes = _tile_axes(item) if tile else None
    return (tile, axes) if axes and _tileable(item, tile, axes) else ()
  if not target.register_tiles or "local" in options or "upcast" in options:
    return ()
  if not _has_tile_axes(item):
    return ()
  if item.out.size < TILE_MIN_SIZE:
    return _small_tile(item, options)
  axes = _tile_axes(item)
  short = _short_axes(item, axes)
  if not short and not _tileable(item, TILES[-1], axes):
    return ()
  reduce = kernel_reduces(item)[0]
  if prod(reduce.src[0].shape[a] for a in reduce.arg[1]) < TILE_MIN_REDUCE and \
      not (short and _probe_loads(item, TILE_PROBE, axes) < prod(TILE_PROBE) *
           _probe_loads(item, (1, 1), axes)):
    return ()
  long = prod(reduce.src[0].shape[a] for a in reduce.arg[1]) >= LONG_TILE_REDUCE
  tiles = [_clip(item, t, axes) for t in preferred_tiles(options, long)]
  fits = [t for t in tiles
          if _tileable(item, t, axes) and _tile_threads(item, t, axes) >= TILE_MIN_THREADS and
          (t in TILES or _divides(item, t, axes))]
  if not fits:
    return ()
  partial = _shared_only(item, fits[0], axes)
  tile = _shared_only(item, _whole_tile(item, options, long, axes, fits[0]), axes)
  # (long tiles are weighed by _long_over_budget, which falls back to these plain ones)
  budget = compile_cost.capped(options) and not (long and options.get("long_tiles")) and options
  if options.get("tile_size_cap") or budget:
    tile, partial = (_within_size(item, t, axes, fits, budget) for t in (tile, partial))
  return (tile if _whole_pays(item, options, axes, partial, tile) else partial), axes


def _within_size(item: ScheduleItem, tile: tuple, axes: tuple, fits: list,
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
    return _within_budget(item, axes, [tile] + smaller, budget)
  if not smaller or tile[0] * tile[1] <= prod(TILES[-1]):
    return tile
  return smaller[0] if _probe_uops(item, tile, axes) > TILE_MAX_UOPS else tile


def _within_budget(item: ScheduleItem, axes: tuple, tiles: list, options: dict) -> tuple:
  """The first of `tiles` (largest first) within TILE_MAX_UOPS (tiles above TILES[-1]) whose
  estimated build fits the one-off run's budget (compile_cost.py), else the last."""
  for tile in tiles[:-1]:
    uops = _probe_uops(item, tile, axes)
    if (tile[0] * tile[1] <= prod(TILES[-1]) or uops <= TILE_MAX_UOPS) and \
        compile_cost.affordable(options, uops):
      return tile
  return tiles[-1]


def _cut_by_budget(item: ScheduleItem, target: Target, options: dict, tile: tuple) -> bool:
  """`tile` (_tile's choice) is smaller than the run's compile budget alone made it: the choice
  for RUNS_MANY runs differs (a kept plan realized again compiles that one: realize.py)."""
  if "tile" in options or not compile_cost.capped(options):
    return False
  many = _tile(item, target, {**options, "runs": compile_cost.RUNS_MANY})
  return bool(many) and many[0] != tile


def _window_tile(item: ScheduleItem, options: dict, tile: tuple, axes: tuple) -> tuple:
  """(tile, Opts.tile_inner, capped): with option tile_window, a reduction of TILE_INNER to
  TILE_WINDOW elements whose rows (a 2 x 1 tile's) share more loads with the window unrolled
  than looped takes it unrolled, in the first preferred tile (or the forced one) with rows to
  share, at most TILE_WINDOW_WORK products per thread and an estimated driver compile within
  the run's budget (compile_cost.py; capped: the budget ruled out the first), and no fewer
  outputs than `tile` looped: a smaller unrolled tile shares fewer loads than the larger looped
  one (lavapipe natively, runs=100, GPU ms, best of 7 interleaved, load ~4.5 on 2 shared CPUs,
  unrolled -> looped: the first 3x3 convs of 3 channels, SqueezeNet 111x111 33.4 -> 6.3 in 8x8,
  VGG-19 224x224 51.2 -> 25.0, PP-OCRv4 det's stride-2 3.3 vs 10.5; SqueezeNet's 1x1 expand
  convs of 16-48 channels 1.3-2.7 -> 0.4-1.5; SwiftShader 1.0-3.6x faster or within noise,
  issue 42); else (tile, 0): as before."""
  if not options.get("tile_window"):
    return tile, 0, False
  reduce = kernel_reduces(item)[0]
  total = prod(reduce.src[0].shape[a] for a in reduce.arg[1])
  if not TILE_INNER < total <= TILE_WINDOW:
    return tile, 0, False          # (windows of up to TILE_INNER elements unroll anyway)
  looped, unrolled = (_window_loads(item, axes, 0), _window_loads(item, axes, total))
  if unrolled[0] * looped[1] >= looped[0] * unrolled[1]:
    return tile, 0, False          # the rows share no more loads with the window unrolled
  if "tile" in options:
    return tile, total, False
  fits = [t for t in (_clip(item, t, axes) for t in preferred_tiles(options))
          if t[0] > 1 and t[0] * t[1] * total <= TILE_WINDOW_WORK and _tileable(item, t, axes)
          and t[0] * t[1] >= tile[0] * tile[1]
          and _tile_threads(item, t, axes) >= TILE_MIN_THREADS
          and (t in TILES or _divides(item, t, axes))]
  # a one-off run's build above its work's GPU time is not won back (SqueezeNet's 1x1 expand
  # conv of 48 channels, 1.6 M multiply-adds: lavapipe natively, Mesa's cache off, driver CPU ms
  # / GPU ms, 4x4 tiles unrolled 584-610 / 0.66-1.16 -> 8x8 looped 174-206 / 0.46-1.07)
  macs = compile_cost.item_macs(item)
  cheap = [t for t in fits if not compile_cost.capped(options) or compile_cost.affordable(
    options, _window_uops(item, axes, total, t), macs)]
  return (cheap[0], total, cheap[:1] != fits[:1]) if cheap else (tile, 0, bool(fits))


def _slide(item: ScheduleItem, target: Target, options: dict) -> Opts | None:
  """The first of slide.py's choices for `item` whose estimated build fits the run's budget
  (compile_cost.py; the last whatever it costs, capped where it is not the first), or None."""
  choices = slide_choices(item, target, options)
  for k, opts in enumerate(choices):
    if k == len(choices) - 1 or not compile_cost.capped(options) or \
        compile_cost.affordable(options, len(toposort([lower(item, opts)[0]]))):
      return dataclasses.replace(opts, capped=k > 0)
  return None


def _long_over_budget(item: ScheduleItem, target: Target, options: dict,
                      chosen: Opts) -> Opts | None:
  """With option long_tiles_cost (lavapipe's, SwiftShader's: adapters.py): where the tiled kernel
  `chosen` under the adapter's long_tiles / tile_unroll lowers to a kernel whose estimated build
  passes the run's budget or its work's GPU time (compile_cost.py), the kernel as without them
  (capped), for a one-off run (ResNet-50 natively: 31 CPU s with, 65 without); else None. Forced
  tiles are kept. Which kernel is lowered first follows the long one's UOps estimated from small
  tiles already lowered (_long_uops): within the budget, the long one (kept where it is: matmul
  1024^3 lowers nothing else); else the plain one (_plain_over_budget: where it is over the
  budget already, the long one is not lowered at all). The order changes no choice (the long
  kernel holds the plain one's UOps); the lowering last made is the one compile_item asks for
  next (lower() keeps it)."""
  chose = options.get("adapter_chose", frozenset()) & {"long_tiles", "tile_unroll"}
  if not options.get("long_tiles_cost") or not chose or "tile" in options or \
      not compile_cost.capped(options):
    return None
  macs, estimate = compile_cost.item_macs(item), _long_uops(item, chosen)
  long_first = estimate is not None and compile_cost.affordable(options, estimate, macs)
  if long_first and compile_cost.affordable(options, len(toposort([lower(item, chosen)[0]])), macs):
    return None
  plain = dataclasses.replace(optimize(item, target, _without_long(options)), capped=True)
  if not long_first:
    if _plain_over_budget(item, options, chosen, plain, macs):
      return plain
    if compile_cost.affordable(options, len(toposort([lower(item, chosen)[0]])), macs):
      return None
  lower(item, plain)       # (kept for compile_item, as the long kernel's was)
  return plain


def _long_uops(item: ScheduleItem, chosen: Opts) -> int | None:
  """The UOps of `item` in the tile of `chosen` (Opts.tile_unroll as it gives), estimated low
  without lowering it: from the 1x1 and 2x2 tiles' UOps (_shared_only probed them already), their
  difference put on rows, columns or outputs, whichever grows least to the tile (each of those
  grows it linearly), and times the loop steps the long tile unrolls more
  (lowerer.tile_loop_unroll); None for a window (Opts.tile_inner), a short axis or a tile of one
  row or column (not estimated). Estimated / lowered, SwiftShader's long tiles: matmul 1024^3
  16x16 unrolled 4 times 696 / 1120, conv2d 64ch 3x3 56x56 16x8 1822 / 2193, 128ch 28x28 8x8
  1822 / 1677, a 1x1 conv 256 -> 1024 14x14 8x8 380 / 640. Over the peers rows and the light
  SqueezeNet, ShuffleNet, ResNet-50 and Inception v2 on both CPU adapters it orders all but one
  of their 235 long tiles as their lowering would (ResNet-50's one on SwiftShader: plain first)."""
  axes, tile = chosen.tile_axes, chosen.tile
  if chosen.tile_inner or not tile or min(tile) < 2 or _short_axes(item, axes) or \
      not _tileable(item, (2, 2), axes):
    return None
  one, four = _probe_uops(item, (1, 1), axes), _probe_uops(item, (2, 2), axes)
  reduce = kernel_reduces(item)[0]
  shape = [reduce.src[0].shape[a] for a in reduce.arg[1]]
  more = tile_loop_unroll(shape, 0, chosen.tile_unroll) / tile_loop_unroll(shape)
  rows, cols = tile
  return round(one + (four - one) * min(rows - 1, cols - 1, (rows * cols - 1) / 3) * more)


def _plain_over_budget(item: ScheduleItem, options: dict, chosen: Opts, plain: Opts,
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


def _tile_opts(item: ScheduleItem, target: Target, options: dict, tile: tuple, axes: tuple,
               inner: int = 0, capped: bool = False) -> Opts:
  """The launch options of `item` in register tile `tile` of `axes` (window `inner` unrolled)."""
  threads = _tile_threads(item, tile, axes)
  local = int(options.get("local", 0)) or local_size(
    threads, grid_local(item, target.max_local), int(options.get("exact_local", 0) or 0),
    int(options.get("min_groups", 0) or 0))
  chunk = int(options.get("tile_chunk", -1))
  return Opts(local=local, upcast=1, tile=tile, tile_axes=axes, fma=target.tile_fma,
              tile_inner=inner, tile_unroll=int(options.get("tile_unroll", 0) or 0),
              tile_chunk=chunk if chunk >= 0 else grid_chunk(item, tile, axes, local),
              capped=capped)


def _quickest_first(item: ScheduleItem, target: Target, options: dict, chosen: Opts) -> Opts:
  """With option tile_rate (lavapipe's: adapters.py) and a one-off run (compile_cost.capped):
  `chosen`, an adapter's long tile, or the smaller long tile whose estimated build plus run
  (compile_cost.first_result_ms) is the least, marked capped (a plan realized again swaps in
  the kernel for many runs: realize.py). lavapipe, matmul 1024^3, natively, Mesa's cache off
  (bench/compile_cost.py and lavapipe_tiles.py, load ~1.7, driver CPU ms + best run ms): 16x16
  unrolled 390-440 + 75 -> 8x8 unrolled 87-109 + 105. Forced tiles and windows keep `chosen`."""
  chose, axes = options.get("adapter_chose", frozenset()), chosen.tile_axes
  macs = compile_cost.item_macs(item)
  if not options.get("tile_rate") or "long_tiles" not in chose or "tile" in options or \
      chosen.tile_inner or not compile_cost.capped(options) or macs is None:
    return chosen
  area = chosen.tile[0] * chosen.tile[1]
  smaller = [t for t in (_clip(item, t, axes) for t in preferred_tiles(options, True))
             if t[0] * t[1] < area and _tileable(item, t, axes) and
             _tile_threads(item, t, axes) >= TILE_MIN_THREADS and (t in TILES or _divides(item, t, axes))]
  uops = len(toposort([lower(item, chosen)[0]]))       # (_long_over_budget's lowering, kept)
  best, best_ms = chosen.tile, compile_cost.first_result_ms(options, uops, macs, chosen.tile)
  for tile in smaller:     # UOps in proportion to the outputs per thread (matmul 1024^3: 8x8 357
    ms = compile_cost.first_result_ms(options, uops * tile[0] * tile[1] // area, macs, tile)
    if ms < best_ms:       # estimated 281, 8x16 599 / 563, 4x4 135 / 70; lowering each costs
      best, best_ms = tile, ms      # Pyodide ~15-30 ms a tile)
  return chosen if best == chosen.tile else _tile_opts(item, target, options, best, axes, capped=True)


def _without_long(options: dict) -> dict:
  """`options` without the adapter's long_tiles and tile_unroll (given ones stay)."""
  chose = options.get("adapter_chose", frozenset())
  return {**options, "long_tiles_cost": False,
          **({"long_tiles": None} if "long_tiles" in chose else {}),
          **({"tile_unroll": 0} if "tile_unroll" in chose else {})}


def _window_uops(item: ScheduleItem, axes: tuple, inner: int, tile: tuple) -> int:
  """The UOps of `item` in tile `tile` with its window of `inner` elements unrolled, estimated
  from the 1 x 1 and 2 x 1 tiles _window_loads lowered (each more output costs what the second
  row did: a 5x5 depthwise conv with a hard-swish, 185 + 199 per output; lowered, 8x8 12842)."""
  one, two = (len(toposort([_lowered(item, t, axes, inner)])) for t in ((1, 1), (2, 1)))
  return one + (tile[0] * tile[1] - 1) * (two - one)


def _shared_only(item: ScheduleItem, tile: tuple, axes: tuple) -> tuple:
  """`tile` as one row of its columns where its outputs share little: a TILE_PROBE tile lowers to
  at least TILE_SHARE_MAX times the UOps of one output (a depthwise conv, a pool: neighbouring
  windows share only the overlapping loads, and not even those where the index math differs;
  convs and matmuls share whole operands: 1.5-2.1 times). More rows would only repeat code:
  ShuffleNet's 3x3 depthwise convs over a fused batch norm + ReLU were 8 x 8 tiles of 4000-6000
  lines of WGSL each (lavapipe: 21-54 s to compile one at its first dispatch), 1 x 8 are under
  900 (1-2 s); its ten kernels this changes ran 262 ms in all instead of 286 (two slower, eight
  faster or the same; tests/onnx_import/onnx_light_times.txt)."""
  if min(tile) < 2 or _short_axes(item, axes):
    return tile
  one = _probe_uops(item, (1, 1), axes)
  return (1, tile[1]) if _probe_uops(item, TILE_PROBE, axes) >= TILE_SHARE_MAX * one else tile


def _probe_uops(item: ScheduleItem, tile: tuple, axes: tuple) -> int:
  """The UOps of `item` lowered with register tile `tile` of `axes`."""
  return _probe(item, tile, axes)[1]


def _small_tile(item: ScheduleItem, options: dict) -> tuple:
  """With option small_tiles (lavapipe's default, render/wgsl/adapters.py): a kernel with fewer
  than TILE_MIN_SIZE outputs and a reduction long enough to be grouped (GROUP_MIN_REDUCE) takes
  the first of TILES that its output holds, however few threads that leaves; optimize() then
  prefers it to the grouped reduction where it shares loads (lavapipe, a linear layer
  (32, 3136) @ (3136, 10): 8x8 tiles, 8 threads, 2-3 ms; 64 lanes per output 47-60 ms).
  SwiftShader's default too (issue 42): its workgroup folds cost per workgroup, GPU ms natively,
  best of 20-30 interleaved, load 11-17 on 2 CPUs, grouped -> small tiles: that linear layer
  11.6-24.7 -> 2.0, (4, 256) @ (256, 64) 1.1-1.3 -> 0.08, Silero VAD's STFT conv (258 filters
  of 256 taps, stride 128, 1032 outputs) 6.2-10.4 -> 0.72, its next convs (128 x 3 outputs of
  129 x 3 taps; 64 x 2 of 128 x 3) 3.2 -> 0.15 and 0.88 -> 0.12; the whole model's 11 kernels
  8.3-10.6 -> 2.5."""
  if not options.get("small_tiles"):
    return ()
  reduce = kernel_reduces(item)[0]
  if prod(reduce.src[0].shape[a] for a in reduce.arg[1]) < GROUP_MIN_REDUCE:
    return ()
  axes = _tile_axes(item)
  fits = [t for t in (_clip(item, t, axes) for t in TILES) if _tileable(item, t, axes)]
  return (fits[0], axes) if fits else ()


def _whole_tile(item: ScheduleItem, options: dict, long: bool, axes: tuple, tile: tuple) -> tuple:
  """`tile`, or with option whole_tiles (both CPU adapters', render/wgsl/adapters.py) where it
  leaves partial tiles (an axis it does not divide) the first preferred tile whose sizes, each
  moved up to the least divisor of its axis up to twice it, divide both axes, leave
  TILE_MIN_THREADS threads and hold no more outputs than the largest preferred, nor fewer than
  `tile`'s threads compute on average: a partial tile computes, loads and gates outputs past
  the axis (8x8 over 10 columns computes 16; over 14, 4x7 would share fewer loads: 0.65x).
  PP-OCRv4 detection's 1x1 convs over 10x10 and 20x20 maps took 8x8 tiles, 16 columns for 10
  or 24 for 20, now 8x10 (natively, GPU timestamps, best of 15 interleaved, load 10-12 on 2
  shared CPUs, ms, 8x8 -> 8x10): lavapipe 384->384 10x10 6.6 -> 2.4, 192->192 20x20
  4.9 -> 4.2; SwiftShader 62 -> 25 and 58 -> 31 (issue 42). The
  light models' shapes it changes (conv + bias + ReLU, runs=100, off / on, best of 6-10
  interleaved, load ~19): 1x1 1024->256 14x14, 512->128 28x28, 128->128 28x28, 64->64 55x55,
  3x3 256->256 14x14 lavapipe 1.59 / 1.79 / 0.91 / 1.00 / 3.57x, SwiftShader 1.34 / 1.63 /
  4.17 / 0.88 / 1.58x; 3x3 128->128 27x27 SwiftShader 1.81x (lavapipe's tile unchanged);
  at 7x7 (load ~12) 1x1 512->2048, 2048->512, 3x3 512->512 lavapipe 1.23 / 1.32 / 2.47x,
  SwiftShader 1.26 / 1.54 / 2.01x; 3x3 64->256 13x13 SwiftShader 2.10x. A one-off run
  (compile_cost.capped) takes it only where its longer build pays (_whole_pays)."""
  if not options.get("whole_tiles") or _divides(item, tile, axes):
    return tile
  prefs = [_clip(item, t, axes) for t in preferred_tiles(options, long)]
  most, least = max(r * c for r, c in prefs), item.out.size / _tile_threads(item, tile, axes)
  for pref in prefs:
    whole = tuple(_near_divisor(item.out.shape[a], n) for a, n in zip(axes, pref))
    if least <= whole[0] * whole[1] <= most and _tileable(item, whole, axes) and \
        _divides(item, whole, axes) and _tile_threads(item, whole, axes) >= TILE_MIN_THREADS:
      return whole
  return tile


def _whole_pays(item: ScheduleItem, options: dict, axes: tuple, tile: tuple, whole: tuple) -> bool:
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
  waste = 1 - item.out.size / (_tile_threads(item, tile, axes) * tile[0] * tile[1])
  return compile_cost.saves_more_than_builds(
    options, _probe_uops(item, tile, axes), _probe_uops(item, whole, axes), macs, waste)


def _near_divisor(n: int, size: int) -> int:
  """The least divisor of n from `size` to twice it (a tile never shrinks), else `size`."""
  return next((d for d in range(size, 2 * size + 1) if n % d == 0), size)


def _divides(item: ScheduleItem, tile: tuple, axes: tuple) -> bool:
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


def _short_axes(item: ScheduleItem, axes: tuple) -> bool:
  """One of the tiled axes is shorter than the smallest tile (and the other is not): the tile
  takes it whole (a pixel's colour channels)."""
  short = [item.out.shape[a] < n for a, n in zip(axes, TILES[-1])]
  return any(short) and not all(short)


def _clip(item: ScheduleItem, tile: tuple, axes: tuple) -> tuple:
  """`tile` with a short axis (_short_axes) taken whole."""
  return tuple(item.out.shape[a] if item.out.shape[a] < least else n
               for a, n, least in zip(axes, tile, TILES[-1]))


# item -> {(tile, axes): (loads, UOps), ("window", axes, inner): window loads of two tiles,
# ("sink", tile, axes, inner): the lowering}:
# _tile_axes, _tile, _shares_loads, _shared_only and _window_tile probe
# the same tiles of an item several times per optimize() (a lowering each; a CNN step's first
# compile spent half its optimize time there), the loads and the UOps from one lowering
_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _window_loads(item: ScheduleItem, axes: tuple, inner: int) -> tuple:
  """The loads per loop step of `item` in a 2 x 1 and a 1 x 1 tile of `axes` with
  Opts.tile_inner `inner`, simplified (a row's window and the next row's, shifted, are the same
  loads only once their indices are)."""
  probed = _PROBED.setdefault(item, {})
  key = ("window", tuple(axes), inner)
  if key not in probed:
    probed[key] = tuple(sum(u.op is Ops.LOAD for u in toposort([simplify(_lowered(
      item, t, axes, inner))])) for t in ((2, 1), (1, 1)))
  return probed[key]


def _lowered(item: ScheduleItem, tile: tuple, axes: tuple, inner: int = 0):
  """`item` lowered with register tile `tile` of `axes` (and Opts.tile_inner), once per item."""
  probed = _PROBED.setdefault(item, {})
  key = ("sink", tuple(tile), tuple(axes), inner)
  if key not in probed:
    probed[key] = lower(item, Opts(tile=tile, tile_axes=axes, tile_inner=inner))[0]
  return probed[key]


def _probe(item: ScheduleItem, tile: tuple, axes: tuple) -> tuple:
  """(loads per loop step, UOps) of `item` lowered with register tile `tile` of `axes`."""
  probed = _PROBED.setdefault(item, {})
  key = (tuple(tile), tuple(axes))
  if key not in probed:
    uops = toposort([_lowered(item, tile, axes)])
    probed[key] = (_loop_loads(uops), len(uops))
  return probed[key]


def _loop_loads(uops: list) -> int:
  """The loads of a lowered kernel's (toposorted) `uops` that its loop repeats: those whose
  address depends on a RANGE (all of them where there is no loop). An epilogue's loads (a
  batchnorm's per-channel parameters, once per output) are not per step: counted, they made a
  conv with a batchnorm epilogue tile rows x columns of one channel instead of channels x columns
  (PP-OCRv4 detection's head conv, issue 42). lavapipe, runs=100, GPU timestamps, best of 5-9
  interleaved at load ~14, all loads -> loop loads (ms): 3x3 + bn + relu 96->24 80x80 179 -> 47,
  64->64 56x56 253 -> 42; DenseNet's 1x1 with bn-relu on both sides 416->128 14x14 76 -> 1.7,
  96->128 56x56 179 -> 7.9; ResNet's 1x1 + bn + relu 64->64 56x56, 256->64 unchanged."""
  looped: set = set()
  for u in uops:
    if u.op is Ops.RANGE or any(s in looped for s in u.src):
      looped.add(u)
  loads = [u for u in uops if u.op is Ops.LOAD]
  return sum(u in looped for u in loads) if looped else len(loads)


def _probe_loads(item: ScheduleItem, tile: tuple, axes: tuple) -> int:
  """The loads of `item` lowered with register tile `tile` of `axes` (per loop step)."""
  return _probe(item, tile, axes)[0]


def _shares_loads(item: ScheduleItem, target: Target, options: dict) -> bool:
  """The register tile `_tile` picks for `item` shares loads between its outputs: a TILE_PROBE
  tile loads fewer values per step than its outputs would alone (matmul, conv2d; not a sum over
  rows), and its loop needs no unrolling to stay under MAX_TRIPS. Such kernels take tiles over a
  grouped reduction (lavapipe, conv2d 3x3 128ch 14x14: 8x8 tiles 8 ms, 16 threads per output
  130 ms; matmul 128x1024x128: 6 vs 39 ms)."""
  tile = _tile(item, target, options)
  if not tile:
    return False
  reduce = kernel_reduces(item)[0]
  if prod(reduce.src[0].shape[a] for a in reduce.arg[1]) > MAX_TRIPS:
    return False
  return _probe_loads(item, TILE_PROBE, tile[1]) < \
    TILE_PROBE[0] * TILE_PROBE[1] * _probe_loads(item, (1, 1), tile[1])


def _pow2_at_least(n: int) -> int:
  return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _stage(item: ScheduleItem, target: Target, options: dict, tile: tuple) -> Opts | None:
  """Opts tiling `item` through workgroup memory, or None (not wanted or not applicable);
  options["stage"] forces it on (True, or (TR, TC, BK)) or off (False)."""
  want = options.get("stage")
  forced = want is not None and want is not False
  if isinstance(want, (tuple, list)):
    if len(want) != 3 or any(not isinstance(v, int) or v < 1 for v in want):
      raise UnsupportedError(f"stage={want!r}: give (thread rows, thread cols, reduce step), "
                             f"all >= 1, or True / False")
  elif want not in (None, True, False):
    raise UnsupportedError(f"stage={want!r}: give True, False or (thread rows, thread cols, "
                           f"reduce step)")
  if not forced and (want is False or not tile or not target.stage_default or
                     _short_axes(item, tile[1])):
    return None                     # (a short axis taken whole stays a register tile)
  axes = tile[1] if tile else _tile_axes(item)
  p = _stage_plan(item, axes) if axes else None
  if p is None and axes:           # the register tile's axes cannot be staged: another pair
    sizes = [a for a, n in enumerate(item.out.shape) if n > 1]
    for pair in reversed(list(itertools.combinations(sizes, 2))):
      if (p := _stage_plan(item, pair)) is not None:
        axes, tile = pair, (tile[0], pair) if tile else tile
        break
  if p is None:
    return None
  shape = item.out.shape
  rows, cols = tile[0] if tile else \
    (min(STAGE_TILE[0], shape[axes[0]]), min(STAGE_TILE[1], shape[axes[1]]))
  total = prod(p.reduce.src[0].shape[a] for a in p.reduce.arg[1])
  if isinstance(want, (tuple, list)):
    trows, tcols, step = want
  else:
    most = target.stage_threads
    trows = min(most[0], _pow2_at_least(math.ceil(shape[axes[0]] / rows)))
    tcols = min(most[1], _pow2_at_least(math.ceil(shape[axes[1]] / cols)))
    if not tile:                 # no more register tile than the axis needs
      rows, cols = math.ceil(shape[axes[0]] / trows) if rows > 1 else 1, \
        math.ceil(shape[axes[1]] / tcols) if cols > 1 else 1
      rows, cols = min(rows, STAGE_TILE[0]), min(cols, STAGE_TILE[1])
    step = min(STAGE_STEP, _pow2_at_least(total))
    while step > 1 and p.local_bytes(trows * rows, tcols * cols, step) > \
        target.max_local_bytes:
      step //= 2
  what = f"tiling through workgroup memory ({trows}x{tcols} threads of {rows}x{cols} outputs, "\
         f"steps of {step})"
  need, limit = p.local_bytes(trows * rows, tcols * cols, step), target.max_local_bytes
  problem = None
  if trows * tcols > target.max_local:
    problem = f"needs {trows * tcols} threads per workgroup; {target.name} allows " \
              f"{target.max_local}: force fewer threads with stage=(rows, cols, step)"
  elif need > limit:
    problem = f"needs {need} bytes of workgroup memory; {target} allows {limit}: force a " \
              f"smaller tile=(R, C) or stage=(rows, cols, step)"
  elif math.ceil(total / step) > MAX_TRIPS:
    problem = f"loops {math.ceil(total / step)} times over {total} reduced elements; the most " \
              f"is {MAX_TRIPS}: force a larger step with stage=(rows, cols, step)"
  if problem:
    if forced:
      raise LimitError(f"{what} {problem}")
    return None                     # the default falls back to register tiles
  return Opts(local=trows * tcols, tile=(rows, cols), tile_axes=axes, stage=(trows, tcols, step),
              fma=target.tile_fma)


def _stage_plan(item: ScheduleItem, axes: tuple):
  """plan(item, axes) where wgtile.py can stage it (not over a symbolic length: exact), else
  None."""
  p = plan(item, axes)
  return None if p is None or p.exact else p


def _has_tile_axes(item: ScheduleItem) -> bool:
  """_tile_axes(item) is not None, without its probes: one reduction, two axes of size > 1."""
  return len(kernel_reduces(item)) == 1 and sum(n > 1 for n in item.out.shape) >= 2


def _tile_axes(item: ScheduleItem) -> tuple | None:
  """The two output axes to tile, for a kernel with one (not nested) reduction: of each pair of
  axes of size > 1, the one whose 2 x 2 tile loads the fewest values per step (later pairs win
  ties; matmul: its last two; conv2d: output channels and columns), except that a pair with a
  short axis (_short_axes) does not win a tie against one without (a 5x5 blur of (H, W, 3):
  rows x columns share the window's loads both ways, where columns x channels share them along
  the columns only; lavapipe in Chromium, 640x480: 8x8 tiles 63 ms, 8x3 75 ms)."""
  if len(kernel_reduces(item)) != 1:
    return None
  sizes = [a for a, n in enumerate(item.out.shape) if n > 1]
  if len(sizes) <= 2:
    return tuple(sizes) if len(sizes) == 2 else None   # one pair at most: nothing to compare
  best, best_loads = None, None
  for pair in itertools.combinations(sizes, 2):
    loads = _probe_loads(item, TILE_PROBE, pair)
    if best_loads is None or loads < best_loads or \
        loads == best_loads and (_short_axes(item, best) or not _short_axes(item, pair)):
      best, best_loads = pair, loads
  return best


def _tileable(item: ScheduleItem, tile: tuple, axes: tuple) -> bool:
  """The two tiled output axes are at least as long as the tile."""
  shape = item.out.shape
  return shape[axes[0]] >= tile[0] and shape[axes[1]] >= tile[1]


def _tile_threads(item: ScheduleItem, tile: tuple, axes: tuple) -> int:
  shape = list(item.out.shape)
  for axis, size in zip(axes, tile):
    shape[axis] = math.ceil(shape[axis] / size)
  return prod(shape)


def _has_reduce(item: ScheduleItem) -> bool:
  return find_reduce(item.out, item.inputs) is not None


def _default_upcast(item: ScheduleItem, target: Target, n: int) -> int:
  if not target.upcast:
    return 1
  upcast = target.upcast if n % target.upcast == 0 else UPCAST
  if n < UPCAST_MIN_SIZE or n % upcast:
    return 1
  return 1 if find_reduce(item.out, item.inputs) is not None else upcast
