"""Row kernels (ScheduleItem.rows, graph/schedule.py): an elementwise output whose reductions run
along its own rows (softmax, log_softmax, layernorm, rmsnorm, ...), lowered as ONE kernel: each
row's threads loop over the row for the reductions (nested ones in order: the max, then the
exp-sum that reads it), then loop over it again to store the row's outputs, reading the
reductions as per-row values. Two layouts (`Opts.row_lanes`):

  1   a thread per row: plain loops, `Opts.local` rows per workgroup (no barrier, no workgroup
      memory: issue 22 measured tinygrad's one-thread-per-row kernels 2x faster than our
      grouped reductions on SwiftShader; slower than lanes on lavapipe, see ROW_LANES below);
      reductions that do not read each other share one loop (reductions.sibling_reduces:
      layernorm's two sums), and with option row_online softmax's max and exp-sum share one
      too (reductions.online_pairs: the online softmax)
  G   a workgroup of G lanes per row: the reductions are grouped reductions (lowerer.py: lanes
      share the row, fold through workgroup memory or subgroups; every lane folds, since every
      lane stores), and each lane stores every G-th output (or one run, with group_chunk)

Over a symbolic row (graph/dims.py) every loop stops at the row's bound value, a run-time
argument (the reductions': Lowerer.limit; the stores': _row_limit), in both layouts and with
group_chunk, so a short row costs what a short static one does; the padding is not stored.

`row_opts` is the optimizer's choice between them (option row_lanes= forces one; option
row_thread_rows= moves the rows from which a thread per row is the default; option min_groups=
spreads few rows over more workgroups, a CPU adapter's cores: SPREAD_LOCAL below).
"""
from __future__ import annotations

import math

from ..graph.schedule import ScheduleItem, kernel_reduces, row_node
from ..graph.dims import Sym
from ..graph.view import contiguous_strides, prod
from ..render.target import Target
from ..uop.ops import Ops, UOp
from .index_math import I32, gate_and, int_const, linear_index, unravel
from .lowerer import MAX_TRIPS
from .opts import Opts
from .reductions import nested_reduces, online_pairs, sibling_reduces
from .vector import vector_stores

# the default layout: a thread per row where there are at least ROW_THREAD_MIN_ROWS rows (enough
# threads to fill the device) of at most ROW_THREAD_MAX elements; else ROW_LANES lanes per row
# (fewer for short rows: at least ROW_MIN_STEPS elements per lane and pass). Measured with
# bench/row_kernels.py (lavapipe, llvmpipe 256 bits on a 2-core AMD EPYC shared with other jobs,
# so slow and noisy: compare within a run; group_chunk and vec4 reads as the WEBGPU device sets
# them; best of 12 interleaved rounds, ms): softmax 4096x1024 f32: split (3 kernels) 319, row
# kernel with a thread per row 351, 16 / 32 / 64 / 128 lanes 341 / 223 / 327 / 641; layernorm
# 4096x1024: split 348, thread per row 389, 16 / 32 / 64 / 128 lanes 264 / 259 / 370 / 806.
# A second run (8 rounds, a thread per row now reading vec4): softmax split 337, thread per row
# 350, 16 / 32 / 64 / 128 lanes 370 / 255 / 328 / 731; layernorm split 300, thread per row 275,
# 16 / 32 / 64 / 128 lanes 230 / 254 / 319 / 679.
# SwiftShader (issue 22: its grouped reductions lose 2x to one thread per row) is measured in
# Chromium by the per-adapter bench; option row_lanes= (and search) picks per adapter.
ROW_THREAD_MIN_ROWS, ROW_THREAD_MAX = 1 << 14, 1024
ROW_LANES, ROW_MIN_STEPS = 32, 8
# a thread per row: rows per workgroup
ROW_LOCAL = 64
# option min_groups=G (SwiftShader's rows; lowering/threads.py has the register tiles' rule): a CPU
# adapter runs a workgroup on one core, and PP-OCRv4 rec's last softmax (40 rows of 6625) ran as
# one workgroup of 64 rows. A thread per row whose ROW_LOCAL rows per workgroup leave fewer than G
# workgroups takes fewer rows per workgroup (halving, down to SPREAD_LOCAL: SwiftShader runs 4
# invocations as one SIMD batch) where its rows hold at least SPREAD_MIN_ELEMENTS elements; fewer
# than G rows of at least SPREAD_LANES_MIN elements take SPREAD_LANES lanes per row instead (a
# workgroup each), unless the layout was given. Measured natively on SwiftShader's Vulkan ICD
# (bench/row_spread_ab.py: GPU-timestamp ms best / median of 25-31 interleaved in one process,
# 2 CPUs shared with other jobs at load 5.5-6.3; CPU ms of the process beside): softmax 40x6625
# one workgroup of 64 rows 18.8 / 51.9 (CPU 14.3) | 10 of 4 4.1 / 7.8 (CPU 8.1) | 5 of 8 4.6 /
# 10.7 | 8 lanes per row 9.3 / 23.0; 20x6625 6.8 / 28.8 | 5 of 4 2.3 / 3.7 | 8 lanes 2.4 / 5.3;
# 6x6625 1.66 / 1.90 | 2 of 4 0.94 / 1.79 | 8 lanes 0.74 / 1.43; 3x6625 0.83 / 1.01 | 8 lanes
# 0.52 / 0.74; 1x6625 0.71 / 0.90 | 8 lanes 0.24 / 0.34 (4 or 16: the same); 1x1024 0.056 | 4
# lanes 0.042 | 8 0.050; layernorm 40x120 0.086 / 0.122 | 10 of 4 0.057 / 0.093; 40x64 0.056 |
# 0.044; 3x120 a thread per row 0.019 | 8 lanes 0.031. Shorter rows gain nothing: softmax 320x40
# 5 of 64 0.134 | 80 of 4 0.161, 64x16 0.032 | 0.044, layernorm 64x32 0.037 | 0.048. Where the
# rows already fill 4 workgroups on these 2 CPUs, the same: softmax 256x1024 4 of 64 1.54 / 3.16
# | 8 of 32 2.07 / 3.46 | 64 of 4 1.62 / 3.05 (noise; more cores than 2 would take the 8).
# The whole rec call (1x3x48x320) does not show it: the softmax was 32 of its ~1040 ms of
# SwiftShader kernel time (bench/pypi_kernels.py, load 4-7); natively (bench/pypi_models.py,
# median of 10, main / this alternated, load 12-17) 7862 / 5233, 5871 / 6175 ms; in the page
# (bench/pypi_page.py, median of 7, one run each, load 12-19) SwiftShader 1933 / 2293, lavapipe
# (kernels unchanged) 893 / 659: the load's noise; outputs as onnxruntime's.
SPREAD_LOCAL, SPREAD_MIN_ELEMENTS = 4, 64
SPREAD_LANES, SPREAD_LANES_MIN = 8, 1024
# lanes per row from which they fold per subgroup by default (option subgroups)
ROW_SUBGROUP_MIN = 32


def row_opts(item: ScheduleItem, target: Target, options: dict, length: int = 0) -> Opts:
  """Opts for the row kernel `item`: option row_lanes (1: a thread per row; G > 1: G lanes per
  row; else option group=, threads per output, as lanes) or the default above; a thread per row
  takes option local= rows per workgroup, else rows_local's (with option min_groups: few rows
  spread, or lanes where the adapter chose a thread per row: spread_lanes). With option
  subgroups, lanes fold per subgroup first
  when forced or at least ROW_SUBGROUP_MIN (whole warps on PTX). `length`: choose as if each row
  held that many elements (a symbolic row's variants, lowering/variants.py)."""
  rows, n = _rows(item)
  n = length or n
  forced = int(options.get("row_lanes", 0) or 0) or max(int(options.get("group", 0) or 0), 0)
  lanes = forced or default_lanes(rows, n, target, int(options.get("row_thread_rows", 0) or 0))
  groups = int(options.get("min_groups", 0) or 0)
  if lanes == 1 and "row_lanes" in options.get("adapter_chose", ()):
    lanes = spread_lanes(rows, n, groups)
  lanes = max(1, min(lanes, target.max_local))
  while lanes < target.max_local and _passes(item, lanes) * math.ceil(n / lanes) >= 4 * MAX_TRIPS:
    lanes *= 2                     # llvmpipe's budget of loop trips per thread (lowerer.py)
  if lanes == 1:
    local = int(options.get("local", 0) or 0) or \
      rows_local(rows, n, target, groups)
    return Opts(local=local, row_lanes=1, group_vec=_vec(options, target),
                row_online=bool(options.get("row_online", False)))
  local_bytes = sum(r.dtype.itemsize for r in kernel_reduces(item))
  while lanes > 1 and lanes * local_bytes > target.max_local_bytes:
    lanes //= 2
  subgroups = target.subgroup_dtypes if options.get("subgroups") and \
    (forced or lanes >= ROW_SUBGROUP_MIN) and not (target.subgroup_whole_warps and lanes % 32) \
    else ()
  return Opts(local=lanes, group=lanes, row_lanes=lanes, subgroups=subgroups,
              group_chunk=bool(options.get("group_chunk", False)),
              group_unroll=int(options.get("group_unroll", target.group_unroll)),
              group_vec=_vec(options, target))


def rows_local(rows: int, n: int, target: Target, groups: int = 0) -> int:
  """Rows per workgroup of a thread per row over `rows` rows of `n` elements: ROW_LOCAL (at most
  the rows rounded up to a power of two), halved while that leaves fewer than `groups` workgroups
  (option min_groups), down to SPREAD_LOCAL, where rows hold at least SPREAD_MIN_ELEMENTS."""
  local = min(ROW_LOCAL, target.max_local, _pow2(rows))
  if n < SPREAD_MIN_ELEMENTS:
    return local
  while local > SPREAD_LOCAL and -(-rows // local) < groups:
    local //= 2
  return local


def spread_lanes(rows: int, n: int, groups: int) -> int:
  """Lanes per row of `rows` rows of `n` elements where a thread per row is the adapter's layout
  (option min_groups: `groups`): SPREAD_LANES for fewer than `groups` rows of at least
  SPREAD_LANES_MIN elements, else 1."""
  return SPREAD_LANES if rows < groups and n >= SPREAD_LANES_MIN else 1


def _vec(options: dict, target: Target) -> int:
  """Consecutive outputs a row's thread stores per step (as one vector where they divide the
  row) and, with lanes, elements per lane and step of its reductions: option group_vec or the
  target's."""
  return int(options.get("group_vec", target.group_vec))


def default_lanes(rows: int, n: int, target: Target, thread_rows: int = 0) -> int:
  """Lanes per row by default: 1 for many short rows (at least `thread_rows`, an adapter's
  option row_thread_rows, else ROW_THREAD_MIN_ROWS), else ROW_LANES (fewer for short rows)."""
  if rows >= (thread_rows or ROW_THREAD_MIN_ROWS) and n <= ROW_THREAD_MAX:
    return 1
  lanes = ROW_LANES
  while lanes > 1 and lanes * ROW_MIN_STEPS > n:
    lanes //= 2
  return min(lanes, target.max_local)


def lane_steps(lo: int, hi: int) -> list[int]:
  """The row lengths in lo+1..hi at which default_lanes may choose differently than just below
  (where ROW_MIN_STEPS steps per lane first fit more lanes, and past ROW_THREAD_MAX), sorted."""
  steps, lanes = {ROW_THREAD_MAX + 1}, 2
  while lanes <= ROW_LANES:
    steps.add(lanes * ROW_MIN_STEPS)
    lanes *= 2
  return sorted(s for s in steps if lo < s <= hi)


def row_stores(lw, opts: Opts) -> list[UOp]:
  """The row kernel's stores: per row (a thread or a workgroup), its outputs in a loop over the
  row, every reduction of the kernel computed once per row before that loop."""
  out = row_node(lw.item.out)    # stored as lw.item.out: a reshape of it at the same positions
  axes = lw.item.rows
  outer = [a for a in range(len(out.shape)) if a not in axes]
  oshape, rshape = [out.shape[a] for a in outer], [out.shape[a] for a in axes]
  rows, n = prod(oshape), prod(rshape)
  lanes = max(opts.row_lanes, 1)
  lw.nested = lw.nested | {id(r) for r in kernel_reduces(lw.item)}    # every lane folds: all store
  vec = max(opts.group_vec, 1)
  trailing = tuple(axes) == tuple(range(len(out.shape) - len(axes), len(out.shape)))
  if n % (lanes * vec) or out.dtype.itemsize != 4 or not trailing:
    vec = 1                        # (a row's consecutive elements are consecutive in memory)
  if lanes > 1:
    row, gate = UOp(Ops.SPECIAL, I32, (), ("gid", 0, max(rows, 1))), None
    lw.group, lw.subgroups, lw.chunk = lanes, opts.subgroups, opts.group_chunk
    lw.unroll, lw.vec = max(opts.group_unroll, 1), max(opts.group_vec, 1)
    lw.lane = UOp(Ops.SPECIAL, I32, (), ("lid", 0, lanes))
    _, points = lw._loop(math.ceil(n // vec / lanes), lanes, lw.lane, n // vec, 1,
                         opts.group_chunk, _row_limit(out, axes, vec))
  else:
    local = max(opts.local, 1)
    groups = max(1, math.ceil(rows / local))
    gid = UOp(Ops.SPECIAL, I32, (), ("gid", 0, groups))
    lid = UOp(Ops.SPECIAL, I32, (), ("lid", 0, local))
    row = gid * int_const(local) + lid if local > 1 else gid
    gate = row.lt(int_const(rows)) if groups * local > rows else None
    lw.seq_vec = vec               # the reductions read vectors too (one axis, where vec divides)
    if opts.row_online:            # softmax's max and exp-sum in one loop (reductions.online_pairs)
      lw.online = online_pairs(lw.item)
    _, points = lw._loop(n // vec, limit=_row_limit(out, axes, vec))
  at_row = unravel([(row, 1, max(rows, 1))], 0, oshape)
  strides = contiguous_strides(out.shape)
  stores = []
  for index, valid in points:
    at = index if valid is None else valid.where(index, int_const(n // vec - 1))   # clamped
    run = []
    for k in range(vec):
      element = at * int_const(vec) + int_const(k) if vec > 1 else at
      idxs = [None] * len(out.shape)
      for a, u in zip(outer, at_row):
        idxs[a] = u
      for a, u in zip(axes, unravel([(element, 1, n)], 0, rshape)):
        idxs[a] = u
      flat = linear_index([(u, s, k) for u, s, k in zip(idxs, strides, out.shape) if k > 1], 0)
      value = lw.value(out, tuple(idxs), gate)
      run.append(lw.params[0].store(flat, value, gate_and(gate, valid)))
    stores += vector_stores(run, vec) if vec > 1 and gate is None and valid is None else run
  return stores


def _row_limit(out, axes, vec: int) -> UOp | None:
  """How many of a row's `vec`-element steps hold values, as a run-time UOp, when the row's first
  axis is symbolic and the others are not (as Lowerer.limit): the store loop stops there (the
  padding past a symbolic size is never read as a value); else None."""
  sym = out.sym
  if sym is None or not isinstance(sym[axes[0]], Sym) or any(isinstance(sym[a], Sym)
                                                             for a in axes[1:]):
    return None
  s = sym[axes[0]]
  count = s.runtime(lambda name, lo, hi: UOp(Ops.VAR, I32, (), (name, lo, hi)), int_const)
  count = count.minimum(int_const(out.shape[axes[0]])).maximum(int_const(0))
  rest = prod(out.shape[a] for a in axes[1:])
  count = count * int_const(rest) if rest != 1 else count
  return (count + int_const(vec - 1)) // int_const(vec) if vec > 1 else count


def _rows(item: ScheduleItem) -> tuple[int, int]:
  """(rows, elements per row) of a row kernel."""
  shape = row_node(item.out).shape
  n = prod(shape[a] for a in item.rows)
  return prod(shape) // max(n, 1), n


def _passes(item: ScheduleItem, lanes: int) -> int:
  """Loops over the row each row's threads run: one per reduction, one for the outputs; with a
  thread per row, reductions that share a loop (reductions.sibling_reduces) count once."""
  reduces = kernel_reduces(item)
  if lanes > 1:
    return len(reduces) + 1
  siblings = sibling_reduces(item, nested_reduces(item))
  return len({frozenset([id(r)] + [id(s) for s in siblings.get(id(r), ())]) for r in reduces}) + 1


def _pow2(n: int) -> int:
  return 1 << max(0, math.ceil(math.log2(max(n, 1))))
