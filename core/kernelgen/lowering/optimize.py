"""The optimizer: choose launch options for one scheduled kernel on one target.

Heuristics, as data: each target's workgroup limits, the preferred workgroup sizes, and when
to give one thread several outputs (upcast, or a register tile of two output axes for
matmul-like reductions), and when to tile those through workgroup memory with a 2-D workgroup
(wgtile.py: the PTX default; on WGSL, lavapipe measured it slower: Target.stage_default).
`optimize(item, target, options)` returns the Opts the lowering uses; options may force them
(`local=`, `upcast=`, `group=`, `tile=`, `stage=`). What differs between targets is read from
the Target object passed in (render/target.py). Timing candidates on a device is search.py's;
what a choice costs to compile, compile_cost.py's. The register tile's pieces live beside it:
its probe lowerings (tile_probe.py), geometry (tile_shape.py) and compile-budget rules
(tile_budget.py); tiles through workgroup memory are stage_choice.py's.
"""
from __future__ import annotations

import dataclasses

from ..dtype import dtypes
from ..errors import UnsupportedError
from .lower import lower
from .lowerer import MAX_TRIPS
from .opts import Opts
from .loop_split import TILE_INNER
from . import compile_cost
from .attention import attention_opts
from .rows import row_opts
from .slide import slide_choices
from .stage_choice import stage_opts
from .staged import staged_rows
from .threads import OTHER_LAYOUTS, grid_chunk, grid_local, inner_opts, local_size, reduce_inner, \
  shares_a_vector, write_opts
from .tile_budget import long_uops, plain_over_budget, whole_pays, window_uops, within_size, \
  without_long
from .tile_grid import grid_axis, tiled_threads
from .tile_probe import probe_loads, window_loads
from .tile_shape import LONG_TILE_REDUCE, MAX_TILE_ACC, TILE_MIN_REDUCE, TILE_MIN_SIZE, \
  TILE_MIN_THREADS, TILE_PROBE, TILES, best_tile_axes, clip, divides, has_tile_axes, \
  near_divisor, preferred_tiles, shared_only, short_axes, threads_in_tiles, tileable
from ..uop.ops import toposort
from ..graph.lazy import L
from ..graph.schedule import ScheduleItem, find_reduce, kernel_reduces
from ..graph.view import prod
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
# option tile_window unrolls a window of at most TILE_WINDOW elements, in the first preferred
# tile of at most TILE_WINDOW_WORK products per thread (_window_tile)
TILE_WINDOW, TILE_WINDOW_WORK = 49, 1600

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
  staged = stage_opts(item, target, options, tile)
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
  if has_tile_axes(item):
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
    axes = best_tile_axes(item) if tile else None
    return (tile, axes) if axes and tileable(item, tile, axes) else ()
  if not target.register_tiles or "local" in options or "upcast" in options:
    return ()
  if not has_tile_axes(item):
    return ()
  if item.out.size < TILE_MIN_SIZE:
    return _small_tile(item, options)
  axes = best_tile_axes(item)
  short = short_axes(item, axes)
  if not short and not tileable(item, TILES[-1], axes):
    return ()
  reduce = kernel_reduces(item)[0]
  if prod(reduce.src[0].shape[a] for a in reduce.arg[1]) < TILE_MIN_REDUCE and \
      not (short and probe_loads(item, TILE_PROBE, axes) < prod(TILE_PROBE) *
           probe_loads(item, (1, 1), axes)):
    return ()
  long = prod(reduce.src[0].shape[a] for a in reduce.arg[1]) >= LONG_TILE_REDUCE
  tiles = [clip(item, t, axes) for t in preferred_tiles(options, long)]
  fits = [t for t in tiles
          if tileable(item, t, axes) and threads_in_tiles(item, t, axes) >= TILE_MIN_THREADS and
          (t in TILES or divides(item, t, axes))]
  if not fits:
    return ()
  partial = shared_only(item, fits[0], axes)
  tile = shared_only(item, _whole_tile(item, options, long, axes, fits[0]), axes)
  # (long tiles are weighed by _long_over_budget, which falls back to these plain ones)
  budget = compile_cost.capped(options) and not (long and options.get("long_tiles")) and options
  if options.get("tile_size_cap") or budget:
    tile, partial = (within_size(item, t, axes, fits, budget) for t in (tile, partial))
  return (tile if whole_pays(item, options, axes, partial, tile) else partial), axes


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
  looped, unrolled = (window_loads(item, axes, 0), window_loads(item, axes, total))
  if unrolled[0] * looped[1] >= looped[0] * unrolled[1]:
    return tile, 0, False          # the rows share no more loads with the window unrolled
  if "tile" in options:
    return tile, total, False
  fits = [t for t in (clip(item, t, axes) for t in preferred_tiles(options))
          if t[0] > 1 and t[0] * t[1] * total <= TILE_WINDOW_WORK and tileable(item, t, axes)
          and t[0] * t[1] >= tile[0] * tile[1]
          and threads_in_tiles(item, t, axes) >= TILE_MIN_THREADS
          and (t in TILES or divides(item, t, axes))]
  # a one-off run's build above its work's GPU time is not won back (SqueezeNet's 1x1 expand
  # conv of 48 channels, 1.6 M multiply-adds: lavapipe natively, Mesa's cache off, driver CPU ms
  # / GPU ms, 4x4 tiles unrolled 584-610 / 0.66-1.16 -> 8x8 looped 174-206 / 0.46-1.07)
  macs = compile_cost.item_macs(item)
  cheap = [t for t in fits if not compile_cost.capped(options) or compile_cost.affordable(
    options, window_uops(item, axes, total, t), macs)]
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
  tiles already lowered (long_uops): within the budget, the long one (kept where it is: matmul
  1024^3 lowers nothing else); else the plain one (plain_over_budget: where it is over the
  budget already, the long one is not lowered at all). The order changes no choice (the long
  kernel holds the plain one's UOps); the lowering last made is the one compile_item asks for
  next (lower() keeps it)."""
  chose = options.get("adapter_chose", frozenset()) & {"long_tiles", "tile_unroll"}
  if not options.get("long_tiles_cost") or not chose or "tile" in options or \
      not compile_cost.capped(options):
    return None
  macs, estimate = compile_cost.item_macs(item), long_uops(item, chosen)
  long_first = estimate is not None and compile_cost.affordable(options, estimate, macs)
  if long_first and compile_cost.affordable(options, len(toposort([lower(item, chosen)[0]])), macs):
    return None
  plain = dataclasses.replace(optimize(item, target, without_long(options)), capped=True)
  if not long_first:
    if plain_over_budget(item, options, chosen, plain, macs):
      return plain
    if compile_cost.affordable(options, len(toposort([lower(item, chosen)[0]])), macs):
      return None
  lower(item, plain)       # (kept for compile_item, as the long kernel's was)
  return plain


def _tile_opts(item: ScheduleItem, target: Target, options: dict, tile: tuple, axes: tuple,
               inner: int = 0, capped: bool = False) -> Opts:
  """The launch options of `item` in register tile `tile` of `axes` (window `inner` unrolled)."""
  quad = bool(options.get("quad_weights") and options.get("subgroups"))
  threads = tiled_threads(item.out.shape, tile, axes, quad, grid_axis(item.out))  # QUAD_ROWS
  local = int(options.get("local", 0)) or local_size(
    threads, grid_local(item, target.max_local), int(options.get("exact_local", 0) or 0),
    int(options.get("min_groups", 0) or 0))
  chunk = int(options.get("tile_chunk", -1))
  return Opts(local=local, upcast=1, tile=tile, tile_axes=axes, fma=target.tile_fma,
              upcast_vec=bool(options.get("upcast_vec", target.upcast_vec)), tile_inner=inner,
              tile_unroll=int(options.get("tile_unroll", 0) or 0),
              tile_chunk=chunk if chunk >= 0 else grid_chunk(item, tile, axes, local),
              capped=capped, quad=quad)


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
  smaller = [t for t in (clip(item, t, axes) for t in preferred_tiles(options, True))
             if t[0] * t[1] < area and tileable(item, t, axes) and
             threads_in_tiles(item, t, axes) >= TILE_MIN_THREADS and (t in TILES or divides(item, t, axes))]
  uops = len(toposort([lower(item, chosen)[0]]))       # (_long_over_budget's lowering, kept)
  best, best_ms = chosen.tile, compile_cost.first_result_ms(options, uops, macs, chosen.tile)
  for tile in smaller:     # UOps in proportion to the outputs per thread (matmul 1024^3: 8x8 357
    ms = compile_cost.first_result_ms(options, uops * tile[0] * tile[1] // area, macs, tile)
    if ms < best_ms:       # estimated 281, 8x16 599 / 563, 4x4 135 / 70; lowering each costs
      best, best_ms = tile, ms      # Pyodide ~15-30 ms a tile)
  return chosen if best == chosen.tile else _tile_opts(item, target, options, best, axes, capped=True)


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
  axes = best_tile_axes(item)
  fits = [t for t in (clip(item, t, axes) for t in TILES) if tileable(item, t, axes)]
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
  (compile_cost.capped) takes it only where its longer build pays (whole_pays)."""
  if not options.get("whole_tiles") or divides(item, tile, axes):
    return tile
  prefs = [clip(item, t, axes) for t in preferred_tiles(options, long)]
  most, least = max(r * c for r, c in prefs), item.out.size / threads_in_tiles(item, tile, axes)
  for pref in prefs:
    whole = tuple(near_divisor(item.out.shape[a], n) for a, n in zip(axes, pref))
    if least <= whole[0] * whole[1] <= most and tileable(item, whole, axes) and \
        divides(item, whole, axes) and threads_in_tiles(item, whole, axes) >= TILE_MIN_THREADS:
      return whole
  return tile


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
  return probe_loads(item, TILE_PROBE, tile[1]) < \
    TILE_PROBE[0] * TILE_PROBE[1] * probe_loads(item, (1, 1), tile[1])


def _has_reduce(item: ScheduleItem) -> bool:
  return find_reduce(item.out, item.inputs) is not None


def _default_upcast(item: ScheduleItem, target: Target, n: int) -> int:
  if not target.upcast:
    return 1
  upcast = target.upcast if n % target.upcast == 0 else UPCAST
  if n < UPCAST_MIN_SIZE or n % upcast:
    return 1
  return 1 if find_reduce(item.out, item.inputs) is not None else upcast
