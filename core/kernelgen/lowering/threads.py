"""Thread-per-output launch choices the optimizer (optimize.py) shares: the workgroup size for n
threads, and reductions over several axes lowered a thread per output with their trailing
reduced axes unrolled (option reduce_inner: a packed weight's matrix-vector product, MatMulNBits
as onnx/operators/quant_nbits.matmul_words writes it, where each step loads one 32-bit word for
its 8 fields and each block's scale and zero point once; render/wgsl/adapters.py measures it on
CPU adapters).

Option reduce_step=S (CPU adapters' default) loops over such a reduction's blocks S reduced
elements a trip and gives each thread reduce_rows consecutive outputs in workgroups that divide
the outputs, their reductions sharing one loop, so each trip's loads of the vector serve all of a
thread's outputs; the loop body stays short, which the driver builds in about a second.
Option reduce_whole=W (asked for, not a default) unrolls such a reduction completely where it
holds at most W elements, reduce_rows outputs per thread: no loop and no gate, so every load of
the vector (the same address in every thread) is one load outside any control flow, which
llvmpipe (lavapipe) reads once and broadcasts (inside a loop or an `if` it loads it lane by
lane). Such a kernel is long straight-line code that lavapipe takes seconds to tens of seconds
to build: fewer rows per thread for long reductions (WHOLE_WORK); with a measured driver_cost a
one-off run takes fewer rows or the loop (compile_cost.py).
"""
from __future__ import annotations

from ..graph.lazy import L, LazyOp, chain_view
from ..graph.schedule import ScheduleItem, kernel_reduces
from ..graph.view import prod
from ..render.target import Target
from ..uop.ops import Ops
from . import compile_cost
from .opts import Opts
from .loop_split import inner_split, split_shape
from .tile_grid import grid_axis

# workgroup sizes to try, best first: a size that divides the output avoids bounds checks
PREFERRED_LOCAL = (256, 128, 64, 32)
# below this many outputs, one workgroup of exactly that many threads (no gated last workgroup)
MIN_GATED_LOCAL = 64
# EXACT_LOCAL (option exact_local=L, both CPU adapters' register tiles: their SIMD lanes, 8):
# threads no preferred size divides take a workgroup of a multiple of L dividing them instead of
# MIN_GATED_LOCAL gated, whose gate guards every load of the tile's loop. PP-OCRv4 detection's
# 3x3 convs 96 -> 24 channels at 80x80 (8x16 tiles, 1200 threads: 64 gated before, 48 now) by
# CPU ms of the dispatch (process time: the wall time on the shared 2 CPUs, load 12-14, was 3x
# it and noise), best of 8 interleaved, natively: lavapipe 32.0-32.3 -> 21.0-21.4 (local 48 or
# 16; 32 -> 24 channels 11.8 -> 7.9), SwiftShader 82.8 -> 74.1-76.4. Per CPU second lavapipe
# then runs it at 12.2-12.5 GFLOP/s, a dense 3x3 16 -> 16 channels (800 threads, 32 ungated)
# at 7.7-8.4, SwiftShader at 3.5 against 2.9. The whole model's warm call (1x3x320x320, CPU ms,
# median of 8 (SwiftShader 5), main / this interleaved per pair, load 7-17): lavapipe 231 / 204,
# 260 / 197, 251 / 239; SwiftShader 866 / 684, 719 / 702; outputs as onnxruntime's.
# option min_groups=G (both CPU adapters' register tiles and slid windows, with exact_local's
# lanes): a kernel whose workgroup size leaves fewer than G workgroups takes smaller ones
# (multiples of the lanes dividing its threads: spread_groups). A CPU adapter runs each workgroup
# on one core: ddddocr's 3x3 convs 64 -> 256 channels at 8x20 (256 threads of 8x16 tiles) ran as
# one workgroup, one core of two idle; PP-OCRv4 detection's 5x5 depthwise convs at 10x10 as 3.
# bench/min_groups_ab.py (natively, interleaved in one process, best of 9-15, load 18-24 on 2
# shared CPUs: wall times are directions only), before / after: the CPU ms of each dispatch are
# unchanged (lavapipe 64 -> 256 4.33 / 4.42, 48 -> 192 3.38 / 3.37, matmul 512^3 21.1 / 21.3;
# SwiftShader 14.9 / 15.0, 10.1 / 9.8, 80.4 / 80.3); the GPU-timestamp ms of the one-workgroup
# conv on SwiftShader 27.3 / 15.5, lavapipe's 48 -> 192 2.77 / 1.50 (median: noise).
# options that choose another layout: with any of them, reduce_inner does not apply
OTHER_LAYOUTS = ("group", "upcast", "tile", "stage")
# reduce_whole: workgroup sizes to try (one dividing the threads: no gate), best first
WHOLE_LOCAL = (64, 32, 16, 8)
# reduce_step: workgroups to make at least, where the outputs allow (a CPU adapter runs each
# workgroup on one core: 3 workgroups on 2 cores leave one idle a third of the time)
STEP_GROUPS = 8
# reduce_whole's UOps per reduced element: WHOLE_UOPS + WHOLE_ROW_UOPS per output of a thread
# (q4 matvec, K = 1536: 1 / 2 / 4 rows 13200 / 21632 / 38494 WGSL lines)
WHOLE_UOPS, WHOLE_ROW_UOPS = 2.5, 6.0
# reduce_whole: at most this many reduced elements times rows per thread (lavapipe, load ~8,
# builds a K = 1536 matvec with 1 / 2 / 4 rows per thread in 19 / 30 / 37 s; 4 rows ran it 0.58
# of a copy's time, 2 rows 0.50: K = 1536 takes 4, K = 2048 2)
WHOLE_WORK = 6144
# an in-place write (L.WRITE) takes WRITE_LOCAL threads per workgroup, a thread per element
WRITE_LOCAL = 64
# a register-tiled kernel over a symbolic axis (a run-time grid: compiler.with_grid) takes
# workgroups of at most GRID_LOCAL threads, so a small bound value, which launches few tiles,
# still spreads them over several workgroups (a CPU adapter runs a workgroup on one core)
GRID_LOCAL = 64
# such a kernel over a symbolic axis that a static kernel's threads walk first (a matmul's N:
# (64, 512) @ (512, n)) runs that axis's tiles outermost, so its lanes walked the other axis
# (a (64, 512) @ (512, 2048) in 16 x 16 tiles: lanes 4 row blocks apart, the static kernel's 16
# columns apart); grid_chunk gives its lanes runs of at most MAX_TILE_CHUNK tiles of that axis
# (Opts.tile_chunk: tile_grid.tile_threads), as the static kernel's, within the workgroups it
# launched before at every bound value. Lavapipe, that matmul at n = 2048, symbolic / static
# GPU time (timestamps, best of 7-9 per process, processes of main and this alternated, load
# 10-12 on 2 CPUs): before 1.15-1.54x, runs of 16 0.69-1.08x, of 8 0.63-1.06x
MAX_TILE_CHUNK = 16


def local_size(n: int, limit: int, lanes: int = 0, groups: int = 0) -> int:
  """Threads per workgroup for n threads: the first of PREFERRED_LOCAL (within `limit`) that
  divides n; else with `lanes` (option exact_local: a CPU adapter's register tiles) the largest
  multiple of `lanes`, at least 2 * lanes and at most MIN_GATED_LOCAL, that divides n (no gated
  last workgroup: EXACT_LOCAL); else MIN_GATED_LOCAL (gated), or n itself when fewer. With
  `lanes` and `groups` (option min_groups, above), a size that leaves fewer than `groups`
  workgroups is cut to a multiple of `lanes` dividing n (spread_groups)."""
  size = _first_local(n, limit, lanes)
  return spread_groups(n, size, lanes, groups) if lanes and groups else size


def spread_groups(n: int, size: int, lanes: int, groups: int) -> int:
  """`size` threads per workgroup for n threads, or where that leaves fewer than `groups`
  workgroups, the largest multiple of `lanes` (at least 2 * lanes) dividing n that leaves
  `groups`, else the least such multiple below `size` (the most workgroups it can have)."""
  if n // size >= groups:
    return size
  cuts = [s for s in range(2 * lanes, size, lanes) if n % s == 0]
  enough = [s for s in cuts if n // s >= groups]
  return enough[-1] if enough else (cuts[0] if cuts else size)


def _first_local(n: int, limit: int, lanes: int) -> int:
  for size in PREFERRED_LOCAL:
    if size <= limit and n % size == 0:
      return size
  if lanes and n >= MIN_GATED_LOCAL:
    exact = [s for s in range(2 * lanes, min(MIN_GATED_LOCAL, limit) + 1, lanes) if n % s == 0]
    if exact:
      return exact[-1]
  if n >= MIN_GATED_LOCAL:
    return min(MIN_GATED_LOCAL, limit)
  if n <= limit:
    return n       # one workgroup of exactly n threads (MIN_GATED_LOCAL)
  size = 1
  while size * 2 <= min(n, limit) and n % (size * 2) == 0:
    size *= 2
  return size


def grid_local(item: ScheduleItem, limit: int) -> int:
  """The most threads per workgroup for register-tiled `item`: GRID_LOCAL where its output has a
  symbolic axis (tile_grid.grid_axis), else `limit` (within `limit` either way)."""
  return min(limit, GRID_LOCAL) if grid_axis(item.out) is not None else limit


def grid_chunk(item: ScheduleItem, tile: tuple, axes: tuple, local: int) -> int:
  """Opts.tile_chunk of register-tiled `item` (`tile` over output `axes`, `local` threads per
  workgroup): where its symbolic axis (grid_axis) is the last of the grid of tiles with more than
  one tile, the largest power of two up to MAX_TILE_CHUNK that divides that axis's tiles and
  whose runs of tiles over the other axes' tiles divide `local` (so a bound value launches the
  same workgroups as without); else 0 (the tiles in their order: tile_threads)."""
  axis = grid_axis(item.out)
  if axis is None or axis not in axes:
    return 0
  sizes = dict(zip(axes, tile))
  grid = [-(-n // sizes.get(a, 1)) for a, n in enumerate(item.out.shape)]
  inner = prod(n for a, n in enumerate(grid) if a != axis)
  if inner == 1 or any(n > 1 for n in grid[axis + 1:]):
    return 0
  chunk = 1
  while chunk * 2 <= MAX_TILE_CHUNK and grid[axis] % (chunk * 2) == 0 and \
      local % (chunk * 2 * inner) == 0:
    chunk *= 2
  return chunk if chunk > 1 else 0


def _unrolled_tail(shape: list, most: int) -> int:
  """How many elements the trailing axes of `shape` (not the first) hold, taken while at most
  `most`."""
  tail = 1
  for size in reversed(shape[1:]):
    if tail * size > most:
      break
    tail *= size
  return tail


# A 1-row matvec's one reduced axis split (K // t, t) (loop_split.split_shape, issue 35), so the
# stepped rows layout above applies with reduce_step (both CPU adapters): bench/group_outputs.py,
# GPU ms best of 3 interleaved, copy of w / thread per output (main's layout from group_outputs
# outputs) / split, weights (N, K): load ~2.4, lavapipe K=576 N=49152 42.4 / 41.3 / 35.8, N=576
# 0.55 / 0.54 / 0.38, K=1536 N=576 1.34 / 1.24 / 0.88 (grouped 0.64, 1.45 there); SwiftShader
# 66.6 / 82.7 / 53.8, 1.45 / 1.88 / 1.01, 1.98 / 2.80 / 1.43 (grouped 3.58, 3.22). Weights (K, N)
# (load ~12, best of 4, main's layout / split): lavapipe K=576 N=1536 3.65 / 2.42, N=49152 323 /
# 339; SwiftShader 12.0 / 3.4, 951 / 619.
def reduce_inner(item: ScheduleItem, options: dict) -> int:
  """Option reduce_inner=R where it applies to `item`, else 0: no other layout is forced, there
  are at least MIN_GATED_LOCAL outputs, and every reduction is over several axes whose trailing
  ones (not all) hold 2..R elements; or, with option reduce_step, over one axis that split_shape
  splits, the kernel's only reduction, a sum of products whose outputs share a vector (a 1-row
  fp32 / fp16 matvec: the note above; an LSTM cell's two matvecs keep seq_vec's vec4 reads of
  their concatenated rows)."""
  most = int(options.get("reduce_inner", 0) or 0)
  if not most or any(k in options for k in OTHER_LAYOUTS) or item.out.size < MIN_GATED_LOCAL:
    return 0
  reduces = kernel_reduces(item)
  one_axis = any(len(r.arg[1]) == 1 for r in reduces)
  if one_axis and (len(reduces) > 1 or not options.get("reduce_step") or
                   not _sum_of_products(reduces[0], most) or not shares_a_vector(item)):
    return 0
  for r in reduces:
    shape = split_shape([r.src[0].shape[a] for a in r.arg[1]], most)
    tail = _unrolled_tail(shape, most)
    if len(shape) < 2 or tail < 2 or prod(shape) <= tail:
      return 0
  return most if reduces else 0


def _sum_of_products(r: LazyOp, most: int) -> bool:
  """Reduction `r` sums products (a matvec's x * w, cast up to f32 for fp16; not a scatter's
  one-hot selects) over more than `most` elements (a shorter one stays one unrolled run)."""
  src = r.src[0].src[0] if r.src[0].op is L.CAST else r.src[0]
  return r.arg[0] is Ops.ADD and src.op is L.ALU and src.arg is Ops.MUL and \
      prod(r.src[0].shape[a] for a in r.arg[1]) > most


def _reads_input(node: LazyOp, inputs: set) -> bool:
  """`node`'s value reads one of the kernel's input buffers."""
  stack, seen = [node], set()
  while stack:
    n = stack.pop()
    if id(n) in inputs:
      return True
    if id(n) not in seen:
      seen.add(id(n))
      stack.extend(n.src)
  return False


def shares_a_vector(item: ScheduleItem) -> bool:
  """Some reduction of `item` reads an input through a view that is the same for every output:
  zero strides along each kept axis of the reduction's source longer than 1 (the vector of a
  matrix-vector product; not a pooling's or a norm's rows, whose outputs read their own data)."""
  inputs = {id(n) for n in item.inputs}
  for r in kernel_reduces(item):
    shape, axes = r.src[0].shape, set(r.arg[1])
    kept = [a for a, size in enumerate(shape) if a not in axes and size > 1]
    stack, seen = [r.src[0]], set()
    while stack and kept:
      node = stack.pop()
      if id(node) in seen or id(node) in inputs:
        continue
      seen.add(id(node))
      if node.op is L.VIEW and node.shape == shape and \
          all(node.arg.strides[a] == 0 for a in kept) and _reads_input(node, inputs):
        return True
      stack.extend(node.src)
  return False


def _rows_local(n: int, rows: int, target: Target, fits, groups: int = 1) -> tuple[int, int] | None:
  """(rows, local): the most outputs per thread, from `rows` halving, that divide the `n`
  outputs, pass `fits(rows)` and leave a workgroup of WHOLE_LOCAL threads dividing the threads
  (the largest that makes at least `groups` workgroups, else the smallest); None if none does."""
  while rows >= 1:
    if n % rows == 0 and fits(rows):
      sizes = [s for s in WHOLE_LOCAL if s <= target.max_local and (n // rows) % s == 0]
      if sizes:
        return rows, next((s for s in sizes if n // rows // s >= groups), sizes[-1])
    rows //= 2
  return None


def _whole(item: ScheduleItem, target: Target, options: dict) -> tuple[Opts | None, bool]:
  """(Opts unrolling every reduction of a reduce_inner kernel whose outputs share a vector
  (shares_a_vector) completely (option reduce_whole=W: each holds at most W elements),
  reduce_rows outputs per thread (or fewer: the most that leaves a workgroup of WHOLE_LOCAL
  threads dividing the outputs, WHOLE_WORK elements per thread and, where the adapter has a
  measured driver_cost and the run is one-off, a build within compile_cost's budget), or None;
  capped: the budget ruled out a choice)."""
  most = int(options.get("reduce_whole", 0) or 0)
  sizes = [prod(r.src[0].shape[a] for a in r.arg[1]) for r in kernel_reduces(item)]
  if not most or max(sizes) > most or "local" in options or not shares_a_vector(item):
    return None, False
  capped = []

  def fits(rows: int) -> bool:
    uops = int(max(sizes) * (WHOLE_UOPS + WHOLE_ROW_UOPS * rows))
    if compile_cost.capped(options) and not compile_cost.affordable(options, uops):
      capped.append(rows)
      return False
    return rows == 1 or rows * max(sizes) <= WHOLE_WORK
  got = _rows_local(item.out.size, max(int(options.get("reduce_rows", 1) or 1), 1), target, fits)
  if got is None:
    return None, bool(capped)
  return Opts(local=got[1], upcast=got[0], reduce_inner=max(sizes), capped=bool(capped)), \
      bool(capped)


def _stepped(item: ScheduleItem, target: Target, options: dict, capped: bool) -> Opts | None:
  """Opts of a reduce_inner kernel whose outputs share a vector, looped in steps of option
  reduce_step=S reduced elements (Opts.reduce_unroll: the loop over the leading reduced axes
  unrolled S // (the unrolled trailing axes' elements) times, or the most below that dividing
  it), reduce_rows outputs per thread in workgroups that divide the outputs, at least
  STEP_GROUPS of them where they allow (_rows_local; else a row per thread), so each step's
  activation loads serve all of a thread's outputs; None where it does not apply."""
  step, most = int(options.get("reduce_step", 0) or 0), reduce_inner(item, options)
  if not step or not most or "local" in options or not shares_a_vector(item):
    return None
  shape = max(([r.src[0].shape[a] for a in r.arg[1]] for r in kernel_reduces(item)), key=prod)
  shape = split_shape(shape, most)
  k = inner_split(shape, most)
  outer = prod(shape[:k])
  unroll = max(min(step // prod(shape[k:]), outer), 1)
  while outer % unroll:
    unroll -= 1
  n, rows = item.out.size, max(int(options.get("reduce_rows", 1) or 1), 1)
  rows, local = _rows_local(n, rows, target, lambda _: True, STEP_GROUPS) or \
      (1, local_size(n, target.max_local))
  return Opts(local=local, upcast=rows, reduce_inner=most, reduce_unroll=unroll, capped=capped)


def inner_opts(item: ScheduleItem, target: Target, options: dict) -> Opts:
  """Opts of a reduce_inner kernel: a thread per output (option local= threads per workgroup,
  else local_size's), the trailing reduced axes unrolled (Opts.reduce_inner); with option
  reduce_whole, the whole reduction unrolled where it fits (_whole); else with option
  reduce_step, looped in steps of several blocks, reduce_rows outputs per thread (_stepped)."""
  whole, capped = _whole(item, target, options)
  if whole is not None:
    return whole
  stepped = _stepped(item, target, options, capped)
  if stepped is not None:
    return stepped
  n = max(item.out.size, 1)
  local = int(options.get("local", 0) or 0) or local_size(n, target.max_local)
  return Opts(local=local, reduce_inner=reduce_inner(item, options), capped=capped)


def write_opts(item: ScheduleItem, layout) -> Opts:
  """Opts of the in-place write `item` (L.WRITE): a thread per element of its value; where the
  value holds a reduction (graph/schedule.py's write fusion: a projection written into a KV
  cache), the layout `layout(value_item)` picks for the value as a flat kernel of its own when
  that is a thread or a workgroup per element (write_stores lowers those; others: a thread)."""
  value = item.out.src[1]
  plain = Opts(local=min(WRITE_LOCAL, max(value.size, 1)))
  if not kernel_reduces(item) or value.sym is not None:
    return plain
  flat = chain_view(value, "reshape", (value.size,))
  opts = layout(ScheduleItem(flat, item.inputs, recomputed=item.recomputed))
  if opts.group and opts.upcast == 1:
    return opts
  if opts.upcast == 1 and not (opts.tile or opts.stage or opts.slide or opts.row_lanes):
    return Opts(local=opts.local, reduce_inner=opts.reduce_inner)
  return plain
