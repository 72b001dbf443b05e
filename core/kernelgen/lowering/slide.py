"""Sliding windows (`Opts.slide`): a depthwise convolution (or a blur, or a grouped conv with
few input channels per group) whose window moves down a strip of output rows, each input row read
once.

A depthwise conv's outputs share no operand whole (a conv's output channels share its input, its
columns the weights): neighbouring windows only overlap. Register tiles of such a kernel were
either one row of columns with the window's rows in a loop (each output row re-reads the input
rows it shares with the next: a 5x5 window reads every input row five times), or the whole window
unrolled over an R x C tile (each input read once per tile, but R x C windows of straight-line
code: PP-OCR's 5x5 depthwise convs in 8x8 tiles were 290-325 KB of WGSL, 20-23 s of lavapipe's
compile each, issue 37).

Here each thread computes C adjacent output columns of one channel down a strip of R output
rows, in one loop over the strip's input rows. A trip reads the s rows (the row stride s) that
move the window down by one output row, each as (C-1)*s_w + kw values held in registers, and
adds their products with the window's weights (read once per thread, before the loop) into the
q = ceil(kh / s) output rows those input rows feed: q rows of C partial sums in flight, each
trip finishing one (stored) and starting one. The loop body is C * kh * kw products however long
the strip: a 5x5 depthwise conv of 8 columns is about 200 multiply-adds and 12 loads per trip
(where 8 x 8 unrolled tiles were 1600 multiply-adds and 144 loads once).

The accumulators shift by one row per trip: slot m (the output row m trips behind the newest)
takes the value of slot m-1. The finished row's sums go through an ASSIGN first (to slot 0's
accumulator, which holds nothing else: slot 0 starts from zero every trip), which the stores read;
then the shifts, oldest slot first, so each slot is read before it is overwritten (the linearizer
keeps graph order within a loop body, as for the online softmax in reductions.py; the PTX writer
computes a value read from an accumulator where it is used, so no store reads one). The first
q-1 trips of a strip only fill the slots (their rows belong to the previous strip and are not
stored).

It applies (`slide_plan`) where the kernel's one reduction is a sum of products of a window and
a weight: the window a strided view (no mask: padding is the view below it) whose output row
and kernel row steps through its source in the ratio s : 1 (an integer, at most kh - 1 so that
windows overlap) and likewise for columns, and the weight read the same by every output row and
column. The values a trip reads are the window's at (output row o0 + t, kernel row i) for i < s:
that ratio makes them the window at every (output row, kernel row) pair that reads that input
row. Option `slide` (render/wgsl/adapters.py sets it on CPU adapters) turns it on; a tuple
(R, C) forces the strip.

With `Opts.upcast_vec` (the WGSL target's default) a trip reads each window row's columns
together, its runs of 4 at an index provably a multiple of 4 as one vector load
(vector.aligned_loads), and stores each finished row 4 columns at a time where C is a multiple of
4, the columns are contiguous and no block is ragged: the WGSL writer declares such buffers
array<vec4<f32>> (a row of 80 columns: 8 columns per thread in 2 words, where the scalar kernel
made 8 per-lane loads and 8 per-lane stores). lavapipe's kernel was bound by those accesses, not
by its products: 3x3 windows ran at a third of a dense conv's GFLOP/s (issue 42; figures in
SLIDE_COLS' comment).

A grouped conv with cg > 1 input channels per group reduces over them too: each trip reads the
s rows of every one of its cg channels and adds cg * kh * kw products per column (the weights,
cg * kh * kw of them, read once per thread before the loop). It slides where cg is at most
SLIDE_MAX_CHANNELS and at most SLIDE_MAX_SHARED output channels read each window (the outputs
of a group: a thread computes one of them, so each reads the group's rows again; a dense conv,
whose output channels all read each window, keeps its register tiles, which share it).

The epilogue's loads that do not move with the row (a bias, a batch norm's four per-channel
tensors: PP-OCRv4 det's depthwise convs) are gated by the thread's and column's gate only, so
they are read once before the loop (hoist_row_free_loads; they were read every trip, gated by
the row). An output whose columns C = 8 leaves a ragged last block idling more than SLIDE_RAGGED
of them takes a C that divides them (whole_blocks: det's 10 and 20 columns in C = 10).
bench/slide_det_ab.py, det's 14 slid kernels, best of 15 interleaved, load 22-24 on 2 shared
CPUs, before -> now: lavapipe 8.01 -> 5.93 ms (driver compile 1682 -> 1511 ms), SwiftShader
44.8 -> 27.9 ms (1167 -> 967 ms).
"""
from __future__ import annotations

import itertools
import math
import weakref
from dataclasses import dataclass

from ..errors import UnsupportedError
from ..graph.lazy import L, LazyOp
from ..graph.schedule import ScheduleItem, kernel_reduces
from ..graph.view import contiguous_strides, prod
from ..uop.ops import Ops, UOp, toposort
from .index_math import gate_and, int_const, linear_index, plus_offset
from .lowerer import MAX_TRIPS
from .opts import Opts
from .tile_grid import tile_threads
from .threads import local_size, spread_groups
from .tileplan import StageLowerer, probe_vars, read_axes
from .vector import MAX_VECTOR, aligned_loads

# output columns per thread, tried in order: the first whose loop body has at most SLIDE_WORK
# products (C * kh * kw * cg) and whose kernel's estimated build fits the run's budget. C =
# SLIDE_WIDE only with vec4 words (upcast_vec), within SLIDE_WIDE_WORK products (3x3 windows) and
# where it divides the output's columns (a ragged last block stores scalars). bench/depthwise.py's
# convs on lavapipe natively, GPU timestamps, best of 15-21 interleaved in one process, load 12-15
# on 2 shared CPUs, ms:
#   vec4 words (upcast_vec) / scalar, C = 8: dw 3x3 s1 96x80x80 0.90 / 2.11, 5x5 s1 1.23 / 1.54,
#   3x3 s2 96x160x160 1.99 / 2.68, 5x5 s2 192x80x80 1.23 / 1.67, 5x5 s1 192x40x40 0.75 / 0.91
#   (dense 3x3 16ch 80x80 1.88: 3x3 s1 from 0.33x to 0.79x its GFLOP/s, s2 0.26x to 0.36x)
#   C = 16 / 8 (words): 3x3 s2 1.51 / 1.83 and 2.74 / 3.45, 3x3 s1 1.43 / 1.55, 5x5 s1 1.02 /
#   1.21 (not taken: twice the 5x5's loop body), 5x5 s2 (40 columns, ragged) 3.22 / 2.21
SLIDE_COLS = (16, 8, 4, 2, 1)
# a ragged last block idling more than this share of the output's columns takes a C that divides
# them where one fits (whole_blocks): 10 columns in C = 8 idle 6 (0.6), 20 idle 4 (0.2)
SLIDE_RAGGED = 0.125
SLIDE_WORK, SLIDE_WIDE, SLIDE_WIDE_WORK = 512, 16, 160
# a kernel with fewer outputs takes no slide (as register tiles: tile_shape.TILE_MIN_SIZE)
SLIDE_MIN_SIZE = 4096
# the rows are split into strips while the threads number fewer than this (each strip re-reads
# q - 1 input rows: strips are kept at least SLIDE_MIN_STRIP * (q - 1) rows long); C above 8
# (SLIDE_WIDE) needs as many output columns in flight as 8 columns' threads: 3x3 s1 96x80x80 in
# 16 columns ran in strips of 40 rows 1.50 ms, 80 1.50, 27 (1024 threads) 1.64; s2 2.88, 2.80,
# 3.10 (as above)
SLIDE_MIN_THREADS, SLIDE_MIN_STRIP = 1024, 4
# a grouped conv (input channels per group > 1) slides where it has at most SLIDE_MAX_CHANNELS
# of them and at most SLIDE_MAX_SHARED output channels per group read each window (more: the
# register tiles of a dense conv share the window between them). bench/depthwise.py "grp" rows,
# lavapipe natively, 3x3 over 40x40, GFLOP/s of the best of 7, load 22 on 2 shared CPUs (noisy:
# the same kernel twice read 0.98 and 5.65), slid / before (its 4x4 register tiles):
#   cg2 og2 5.19, 4.63 / 0.53    cg4 og4 0.98, 5.65 / 0.46    cg4 og1 5.19, 8.57 / 0.66
#   cg8 og8 1.22 / 0.49, 0.53    cg16 og16 0.65 (C = 1) / 0.46, 0.51; dense 3x3 16ch 8.73
# so og 8 still slides (2.3x), og 16 gains 1.3x for 6x the driver compile (662 ms) and does not
SLIDE_MAX_CHANNELS, SLIDE_MAX_SHARED = 16, 8
# options that choose another layout: given, the adapter's slide default does not apply
_OTHER_LAYOUTS = ("tile", "stage", "group", "local", "upcast")


@dataclass(frozen=True)
class SlidePlan:
  """How a kernel's one reduction slides: the window and weight operands of its product."""
  reduce: LazyOp
  window: LazyOp      # the strided view read at (row, kernel row, column, kernel column)
  weight: LazyOp      # read the same at every output row and column
  axes: tuple         # (row, column) axes in the reduction's source
  kernel: tuple       # (kernel row, kernel column) axes in the reduction's source
  steps: tuple        # (s_h, s_w): input rows (columns) per output row (column), in kernel taps
  channel: int | None = None   # the input channels axis a grouped conv also reduces over

  @property
  def window_shape(self) -> tuple:
    """(kh, kw): the window's rows and columns."""
    src = self.reduce.src[0]
    return src.shape[self.kernel[0]], src.shape[self.kernel[1]]

  @property
  def channels(self) -> int:
    """Input channels each output sums over (1 for a depthwise conv or a blur)."""
    return self.reduce.src[0].shape[self.channel] if self.channel is not None else 1

  @property
  def slots(self) -> int:
    """q: the output rows one input row feeds at most (ceil(kh / s_h))."""
    return math.ceil(self.window_shape[0] / self.steps[0])


# item -> {axes: SlidePlan or None}: the optimizer and the lowering ask for the same plans
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def slide_plan(item: ScheduleItem, axes: tuple) -> SlidePlan | None:
  """The plan for sliding output `axes` (rows, columns) of `item`, or None where the kernel is
  not a sum of window x weight products that slides (see the module docstring)."""
  plans = _PLANS.setdefault(item, {})
  if tuple(axes) not in plans:
    plans[tuple(axes)] = _plan(item, tuple(axes))
  return plans[tuple(axes)]


def slide_axes(item: ScheduleItem) -> tuple | None:
  """The (rows, columns) output axes to slide: of the pairs of axes of size > 1, the last that
  slides (a conv's (OH, OW); an image's (H, W) before its channels)."""
  sizes = [a for a, n in enumerate(item.out.shape) if n > 1]
  if len(kernel_reduces(item)) != 1:
    return None
  for pair in reversed(list(itertools.combinations(sizes, 2))):
    if slide_plan(item, pair) is not None:
      return pair
  return None


def _plan(item: ScheduleItem, axes: tuple) -> SlidePlan | None:
  reduces = kernel_reduces(item)
  if len(reduces) != 1 or reduces[0].arg[0] is not Ops.ADD:
    return None
  reduce = reduces[0]
  src = reduce.src[0]
  big = [a for a in reduce.arg[1] if src.shape[a] > 1]
  if src.op is not L.ALU or src.arg is not Ops.MUL or not src.dtype.is_float() or \
      len(big) not in (2, 3):
    return None
  found = read_axes(item, reduce, axes)
  if found is None:
    return None
  lw, raxes = found
  probe = probe_vars(src.shape, "probe")
  kinds = [_kind(lw, s, probe, raxes) for s in src.src]
  if sorted(kinds) != ["weight", "window"]:
    return None
  window, weight = (src.src[kinds.index(k)] for k in ("window", "weight"))
  channel = big[0] if len(big) == 3 else None     # (C/groups, kh, kw): conv2d's order
  if channel is not None and not _few_channels(lw, window, probe, src, reduce.arg[1], raxes,
                                               channel):
    return None
  for kernel in (tuple(big[-2:]), tuple(reversed(big[-2:]))):
    steps = tuple(_step(window.arg, r, k) for r, k in zip(raxes, kernel))
    if None not in steps and steps[0] < src.shape[kernel[0]] and \
        steps[1] <= src.shape[kernel[1]]:
      return SlidePlan(reduce, window, weight, raxes, kernel, steps, channel)
  return None


def _few_channels(lw, window: LazyOp, probe: tuple, src: LazyOp, reduced: tuple, raxes: tuple,
                  channel: int) -> bool:
  """A reduction over input channels too slides (a grouped conv) where it has at most
  SLIDE_MAX_CHANNELS of them and at most SLIDE_MAX_SHARED outputs read each window (the output
  channels of a group: a dense conv's are all of them, which register tiles share)."""
  used = set(toposort([lw.value(window, probe, None)]))
  shared = prod(n for a, n in enumerate(src.shape)
                if a not in reduced and a not in raxes and probe[a] not in used)
  return src.shape[channel] <= SLIDE_MAX_CHANNELS and shared <= SLIDE_MAX_SHARED


def _kind(lw: StageLowerer, node: LazyOp, probe: tuple, raxes: tuple) -> str:
  """"weight" (reads neither slid axis), "window" (a strided view without a mask) or ""."""
  used = set(toposort([lw.value(node, probe, None)]))
  if not any(probe[a] in used for a in raxes):
    return "weight"
  return "window" if node.op is L.VIEW and node.arg.mask is None else ""


def _step(view, axis: int, kernel: int) -> int | None:
  """Input positions per output step along `axis`, in kernel taps along `kernel` (an int >= 1),
  or None where the view does not move along both the same way."""
  a, k = view.strides[axis], view.strides[kernel]
  if a <= 0 or k <= 0 or a % k:
    return None
  return a // k


def slide_choices(item: ScheduleItem, target, options: dict) -> list[Opts]:
  """Opts sliding `item`'s window (option slide: True, or (R, C) forced), best first: C from
  SLIDE_COLS within SLIDE_WORK products per trip (optimize.py takes the first whose estimated
  build fits the run's budget); none where it is off, the kernel does not slide, or the
  adapter's default (option adapter_chose) meets a given layout option or fewer than
  SLIDE_MIN_SIZE outputs."""
  want = options.get("slide")
  if want is None or want is False:
    return []
  forced = isinstance(want, (tuple, list))
  if want is not True and not (forced and len(want) == 2 and all(
      isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in want)):
    raise UnsupportedError(f"slide={want!r}: give True, False or (rows, cols) of outputs per "
                           f"thread, both >= 1")
  chose = options.get("adapter_chose", frozenset())
  if "slide" in chose and (item.out.size < SLIDE_MIN_SIZE or
                           any(options.get(k) not in (None, False) for k in _OTHER_LAYOUTS)):
    return []                      # (given, slide applies to any size)
  axes = slide_axes(item)
  if axes is None:
    return []
  p = slide_plan(item, axes)
  vec = bool(options.get("upcast_vec", target.upcast_vec))
  if forced:
    return [_opts(item, target, axes, min(want[0], MAX_TRIPS - p.slots + 1), want[1], vec)]
  spread = (int(options.get("exact_local", 0) or 0), int(options.get("min_groups", 0) or 0))
  kh, kw = p.window_shape
  work, nc = kh * kw * p.channels, item.out.shape[axes[1]]
  fits = [c for c in SLIDE_COLS if c * work <= SLIDE_WORK and
          (c < SLIDE_WIDE or vec and c * work <= SLIDE_WIDE_WORK and not nc % c)] or [1]
  fits = list(dict.fromkeys(min(c, nc) for c in fits))
  return [_opts(item, target, axes, _strip_rows(item, p, axes, c), c, vec, spread)
          for c in whole_blocks(fits, nc, work)]


def whole_blocks(fits: list, nc: int, work: int) -> list:
  """`fits` (columns per thread, best first) led by the narrowest C above fits[0], at most
  SLIDE_WIDE and within SLIDE_WORK products, that divides the `nc` output columns where fits[0]
  leaves a ragged last block of more than SLIDE_RAGGED of them idle: PP-OCRv4 det's 5x5 convs
  over 10 and 20 columns in C = 8 computed 16 and 24 (lavapipe, its 10x10 in C = 10 against 8:
  0.22 / 0.37 ms, issue 42)."""
  idle = -nc % fits[0]
  wide = [d for d in range(fits[0] + 1, SLIDE_WIDE + 1) if not nc % d and d * work <= SLIDE_WORK]
  return wide[:1] + fits if idle > nc * SLIDE_RAGGED and wide else fits


def _strip_rows(item: ScheduleItem, p: SlidePlan, axes: tuple, cols: int) -> int:
  """Output rows per thread: the whole column, split into strips while the threads number fewer
  than SLIDE_MIN_THREADS (fewer for C above 8: as many output columns), each at least
  SLIDE_MIN_STRIP * (q - 1) rows (and the loop within MAX_TRIPS)."""
  shape = item.out.shape
  rows = shape[axes[0]]
  columns = prod(shape) // rows // shape[axes[1]] * math.ceil(shape[axes[1]] / cols)
  splits = max(1, min(math.ceil(SLIDE_MIN_THREADS * 8 // max(cols, 8) / columns),
                      rows // (SLIDE_MIN_STRIP * (p.slots - 1))))
  strip = math.ceil(rows / splits)
  return min(strip, MAX_TRIPS - p.slots + 1)


def _opts(item: ScheduleItem, target, axes: tuple, rows: int, cols: int, vec: bool,
          spread: tuple = (0, 0)) -> Opts:
  """The launch of a slide of (rows, cols) outputs per thread; `spread` (lanes, groups): options
  exact_local and min_groups, the workgroups' split (threads.local_size)."""
  shape = item.out.shape
  threads = prod(shape) // shape[axes[0]] // shape[axes[1]] * \
    math.ceil(shape[axes[0]] / rows) * math.ceil(shape[axes[1]] / cols)
  local = local_size(threads, target.max_local)
  if all(spread):
    local = spread_groups(threads, local, *spread)
  return Opts(local=local, slide=(rows, cols), tile_axes=axes,
              fma=target.tile_fma, upcast_vec=vec)


def slide_stores(lw, opts: Opts) -> list[UOp]:
  """The kernel's stores (and its loop's ENDRANGE, for the SINK) under `opts.slide` (R, C): see
  the module docstring."""
  item, out = lw.item, lw.item.out
  (rows, cols), (ar, ac) = opts.slide, opts.tile_axes
  p = slide_plan(item, (ar, ac))
  lw = StageLowerer(item, p.reduce)
  base, gate = tile_threads(out.shape, (rows, cols), (ar, ac), opts.local)
  o0 = base[ar] * int_const(rows) if rows > 1 else base[ar]
  x0 = base[ac] * int_const(cols) if cols > 1 else base[ac]
  probe = list(base)
  probe[ar], probe[ac] = o0, x0
  lw.value(out, tuple(probe), gate)        # where the reduction is read: its other indices
  src_base = list(lw.seen[-1])
  lw.cache.clear()
  q = p.slots
  rng = lw._range(rows + q - 1)
  row = o0 + rng
  window = _window_reader(lw, p, src_base, (o0, x0), (rows, cols), row, gate, opts.upcast_vec)
  weights = _weights(lw, p, src_base, gate)
  partial = _partial_sums(p, cols, window, weights, opts.fma)
  dtype = p.reduce.src[0].dtype
  accs = {(m, c): UOp(Ops.DEFINE_ACC, dtype, (UOp.const(dtype, 0),), lw._id())
          for m in range(q) for c in range(cols)}
  sums = {(m, c): partial(m, c, accs[(m, c)] if m else None) for m in range(q)
          for c in range(cols)}
  # each finished sum through an ASSIGN of its own (slot 0's accumulator, otherwise unused):
  # the stores read that value, never an accumulator the trip overwrites later (a renderer may
  # compute a value that reads an accumulator where it is used: the PTX writer's deferral)
  done = [UOp(Ops.ASSIGN, dtype, (accs[(0, c)], sums[(q - 1, c)])) for c in range(cols)]
  stores = _stores(lw, opts, base, (o0, x0), plus_offset(row, -(q - 1)), rng, q, done, gate)
  shifts = [UOp(Ops.ASSIGN, dtype, (accs[(m, c)], sums[(m - 1, c)]))
            for m in reversed(range(1, q)) for c in range(cols)]
  return stores + [UOp(Ops.ENDRANGE, None, (rng, *done, *shifts))]


def _window_reader(lw, p: SlidePlan, src_base: list, first: tuple, tile: tuple, row: UOp, gate,
                   vec: bool):
  """window(i, u, ch): the window's value at input row i of this trip (of s_h) and column u of
  the strip's (C-1)*s_w + kw, of input channel ch of a grouped conv's (else 0), read once
  (memoized); gated where the last strip or column block reaches past the rows (columns) any
  output reads. With `vec`, a row's columns are read together, its aligned runs of 4 loads as
  vector loads (vector.aligned_loads: one vec4 word each where the writer can prove the
  alignment, issue 42)."""
  (rr, rc), (kr, kc), (sh, sw) = p.axes, p.kernel, p.steps
  (kh, kw), (rows, cols), (o0, x0) = p.window_shape, tile, first
  src = p.reduce.src[0]
  nr, nc = src.shape[rr], src.shape[rc]
  last_row, last_col = (nr - 1) * sh + kh - 1, (nc - 1) * sw + kw - 1
  top = (math.ceil(nr / rows) * rows + p.slots - 2) * sh       # the last trip's first row
  right = (math.ceil(nc / cols) - 1) * cols                       # the last block's first column
  memo = {}

  def read(i: int, u: int, ch: int = 0) -> UOp:
    if (ch, i, u) not in memo:
      c = min(u // sw, cols - 1)
      idxs = list(src_base)
      idxs[rr], idxs[kr] = row, int_const(i)
      idxs[rc], idxs[kc] = plus_offset(x0, c), int_const(u - c * sw)
      if p.channel is not None:
        idxs[p.channel] = int_const(ch)
      g = gate
      if top + i > last_row:           # the last strip's trips past the input's last row
        g = gate_and(g, row.lt(int_const((last_row - i) // sh + 1)))
      if (right + c) * sw + u - c * sw > last_col:    # the last block's columns past it
        g = gate_and(g, plus_offset(x0, c).lt(int_const((last_col - (u - c * sw)) // sw + 1)))
      memo[(ch, i, u)] = lw.value(p.window, tuple(idxs), g)
    return memo[(ch, i, u)]

  def read_row(i: int, u: int, ch: int = 0) -> UOp:
    if (ch, i, u) not in memo:
      span = range((cols - 1) * sw + kw)
      for v, got in zip(span, aligned_loads([read(i, v, ch) for v in span])):
        memo[(ch, i, v)] = got
    return memo[(ch, i, u)]
  return read_row if vec else read


def _weights(lw, p: SlidePlan, src_base: list, gate) -> dict:
  """The weight at each (input channel, kernel row, kernel column), read once per thread before
  the loop."""
  (kr, kc), (kh, kw) = p.kernel, p.window_shape
  out = {}
  for ch, j, jj in itertools.product(range(p.channels), range(kh), range(kw)):
    idxs = list(src_base)
    idxs[kr], idxs[kc] = int_const(j), int_const(jj)
    if p.channel is not None:
      idxs[p.channel] = int_const(ch)
    out[(ch, j, jj)] = lw.value(p.weight, tuple(idxs), gate)
  return out


def _partial_sums(p: SlidePlan, cols: int, window, weights: dict, fma: bool):
  """partial(m, c, acc): acc (None: 0) plus this trip's products into slot m's output at column
  c: kernel rows j = m*s_h + i for the trip's input rows i, every kernel column (and input
  channel of a grouped conv), in order (with `fma`, as MULACC)."""
  src = p.reduce.src[0]
  dtype, weight_first = src.dtype, src.src[0] is p.weight
  (sh, sw), (kh, kw) = p.steps, p.window_shape

  def partial(m: int, c: int, acc: UOp | None) -> UOp:
    total = acc
    for ch, i, jj in itertools.product(range(p.channels), range(sh), range(kw)):
      j = m * sh + i
      if j >= kh:
        continue
      a, w = window(i, c * sw + jj, ch), weights[(ch, j, jj)]
      x, y = (w, a) if weight_first else (a, w)
      if total is None:
        total = UOp(Ops.MUL, dtype, (x, y))
      elif fma:
        total = UOp(Ops.MULACC, dtype, (x, y, total))
      else:
        total = total + UOp(Ops.MUL, dtype, (x, y))
    return total if total is not None else UOp.const(dtype, 0)
  return partial


def _stores(lw, opts: Opts, base: list, first: tuple, row: UOp, rng: UOp, q: int, results: list,
            gate) -> list[UOp]:
  """Each trip's finished output row (`row`, q-1 trips behind the newest input row) at the
  strip's columns: the elementwise ops after the reduction, stored once the strip's first row
  is reached (and inside the output)."""
  out = lw.item.out
  (rows, cols), (ar, ac) = opts.slide, opts.tile_axes
  nr, nc = out.shape[ar], out.shape[ac]
  strides = contiguous_strides(out.shape)
  row_gate = gate_and(gate, rng.ge(int_const(q - 1)))
  if nr % rows:
    row_gate = gate_and(row_gate, row.lt(int_const(nr)))
  # with upcast_vec, runs of MAX_VECTOR consecutive outputs (the columns contiguous, none gated
  # off alone) are stored as one vector: an aligned vec4 word where the writer proves it
  width = MAX_VECTOR if opts.upcast_vec and strides[ac] == 1 and not cols % MAX_VECTOR and \
    not nc % cols and out.dtype.itemsize == 4 and out.dtype.is_float() else 1
  stores, run = [], []
  for c, result in enumerate(results):
    at = list(base)
    at[ar], at[ac] = row, plus_offset(first[1], c)
    store_gate = gate_and(row_gate, at[ac].lt(int_const(nc))) if nc % cols else row_gate
    lw.result = result
    col_gate = gate_and(gate, at[ac].lt(int_const(nc))) if nc % cols else gate
    value = hoist_row_free_loads(lw.value(out, tuple(at), store_gate), rng, col_gate)
    run.append(value)
    if len(run) < width:
      continue
    at[ac] = plus_offset(first[1], c + 1 - width)
    flat = linear_index([(u, s, n) for u, s, n in zip(at, strides, out.shape) if n > 1], 0)
    if width > 1:
      value = UOp(Ops.VECTORIZE, value.dtype.vec(width), tuple(run))
    stores.append(lw.params[0].store(flat, value, store_gate))
    run = []
  return stores


def hoist_row_free_loads(value: UOp, rng: UOp, gate) -> UOp:
  """`value` (a finished output's elementwise ops) with its gated loads whose address does not
  move with the strip's loop `rng` (a bias, a batch norm's per-channel tensors) gated by `gate`
  (the thread's and its column's, not the row's): loop-invariant, they are read once per thread
  before the loop, not once per trip (issue 42: det's depthwise epilogues read 4-5 per trip)."""
  order = toposort([value])
  moves: dict[UOp, bool] = {}
  for u in order:
    moves[u] = u is rng or any(moves[s] for s in u.src)
  new: dict[UOp, UOp] = {}
  for u in order:
    src = tuple(new[s] for s in u.src)
    if u.op is Ops.LOAD and len(src) == 4 and not moves[u.src[1]] and moves[u.src[2]]:
      src = src[:2] + ((gate, src[3]) if gate is not None else ())
    new[u] = u if src == u.src else u.replace(src=src)
  return new[value]
