"""Variants of a symbolic kernel for small bound values: no speed lost to generality (issue 34).

A kernel whose leading output axis is a symbolic dim (`kg.Dim("m", 1, 4096)`) is optimized for
its padded shape, the top of the range: a matmul (m, 512) @ (512, 512) gets the register tile
of m = 4096 (8 x 16 on lavapipe), and at m = 1 that leaves 32 threads, each computing 8 rows of
which 7 are padding (lavapipe, 2048 x 512 x 512: 4-8 times the static kernel's GPU time at
m = 1 to 3; bench/symbolic_static.py). No one tile serves the whole range (m = 1 runs best in
1 x 4 tiles, 5 times slower than 8 x 16 at m = 2048), so such a kernel gets a few variants:
the same computation with the register tile the heuristic (optimize.py `_tile`'s rule: the
first preferred tile that leaves TILE_MIN_THREADS threads) picks at each bound value below hi,
as runs of values with one tile (`tile_ladder`: the tiles at lo, lo * VARIANT_STEP, ..., hi - 1
and the values between two of those where the tile changes, found by bisection; before, each
range up to a representative value took the tile picked at its top, so m = 17..32 ran 8 x 8
tiles where m = 17 takes 4 x 4: a third of its rows padding, 1.36x the static kernel's GPU
time on SwiftShader). At most MAX_VARIANTS runs: past that the run that is shortest for its
values joins the one below it. Each variant is compiled with the kernel, at its
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
at the kernel's first compile (lavapipe, m in 1..2048: 6 variants and the kernel, 7 pipelines).

Later (issue 34): the static kernel of m = 1 got faster (a 1-row matvec reading a thread's rows
as vector loads, lower._rows_vector_loads; threads past a static tiled grid reading the last
block ungated), while the m = 1 variant stayed a 1 x 8 tile (lavapipe 1.28-1.33x the static
kernel's GPU time). So where the dim leads the output and the graph cuts to one value without
moving an address (graph/at_value.py item_at), a register tile's variant for the range's low end
is the static kernel of that size itself (pinned.STATIC: its WGSL is the static kernel's but for
its name; no run-time grid, as it serves that one value), in place of the ladder's run there.
Then the next values too (STATIC_VALUES: m = 1, 2, 3, each the static kernel of its size, the
ladder from m = 4 up): each is pinned to its one value (CompiledKernel.exact: its stores are
gated by m == value, so every runtime's pick, natively, in the page and in model.js, takes it at
that value only: uop/program.py serves; a fallback to another built variant skips it).
Only with option static_low_end, which no adapter table sets: SwiftShader ran the old 1 x 8
variant faster than the static kernel (bench/symbolic_static.py, m = 1, sym / static: 0.89x at
load 1.2, 0.71-0.82x per kernel at load ~3); on lavapipe the pins met the ratio natively, but in
the page their lazy builds cost tens of seconds beside the run (bench/lm_page.py, SmolLM2 q4,
2 layers, 3 rounds at idle: prefill 19 against 775 tok/s without them, decode 20 against 34:
the static 1-row kernels of the LM's projections and head are long, and lavapipe built them in
the rounds). It stays an option until a pin's build is weighed against what it saves.

Rechecked (stop 58: the m = 1..3 cells had been reported at 1.4-1.6x natively on lavapipe; not
reproduced). bench/symbolic_static.py --only "matmul (m", the ladder's variants (no pins), median
| min ratio, m = 1, 2, 3: lavapipe 0.81 | 0.81, 1.00 | 1.00, 1.01 | 1.01 (load 4.2), 0.81 | 0.81,
0.73 | 1.34, 1.01 | 1.03 (load 5.2), 0.53 | 0.80, 1.27 | 0.46, 1.03 | 1.02 (load 6.5);
SwiftShader 0.52 | 0.44, 1.00 | 1.01, 1.52 | 1.85 (load 5.2), 0.83 | 0.84, 1.02 | 1.02, 1.03 |
0.82 (load 6.5): every cell above 1.15 in one run is under it in the other. With the pins (the
option forced on natively, one process each, alternated with it off, 15 rounds, load 6.7-7.6)
no cell moved beyond that noise (lavapipe m = 3: 1.15 and 1.37 on, 0.75 and 0.89 off), and the
first call (compile with every variant) took lavapipe 2.2 / 2.5 s on against 2.0 / 2.1 off,
SwiftShader 6.3 / 4.6 against 6.2 / 5.5. What a pin costs is its source: the static kernel of
m = 1 (a rows-per-thread matvec, 64 threads) is 32.5 KB of WGSL where the ladder's m = 1 variant
(a 1 x 8 tile) is 2.5 KB and takes 0.81x its GPU time; m = 2 and 3 are 3.7 and 5.0 KB against
3.7 and 5.2. Its pipeline, natively, each the first of its process (Mesa's shader cache off,
load 6.5), built in 298 / 431 ms against the 1 x 8 tile's 199 / 239 on lavapipe (whose LLVM
compile may come at the first dispatch: not timed here) and 1.79 / 1.80 s against 0.31 / 0.32 on
SwiftShader. So no adapter sets static_low_end: natively the ladder meets the goal at m = 1..3
and the pins buy nothing there, and in the page they would only add long builds. At load 10-15
(bench/symbolic_static.py --option static_low_end=true, alternated with runs without) single
medians say little: the pins, the static kernels' own WGSL, ran m = 2 at 1.56x in one run and
m = 3 at 2.08x by the min in another, as the ladder's m = 2 took 1.50x and 1.49x (min) in two.
A lead, not taken (it changes every lavapipe tile variant's workgroups, the page's too, and the
page was not measured): the ladder's m = 1..3 variants take workgroups of 64 threads (m = 1:
one, on one CPU) where the static kernels take 8 of 8 (m = 1) and 4 of 16; variant_groups 8 on
lavapipe (SwiftShader's: those variants in 8 workgroups of 8) gave medians m = 1, 2, 3 of
0.75 1.03 1.00 and 0.83 0.89 0.95 where the runs between, without it, gave 1.21 0.93 0.61 and
1.18 0.82 1.28 (lavapipe, load 11-13), but a third pair 0.82 1.03 0.98 against 0.81 1.02 1.02
(load 13): no gain shown beyond the noise yet. Taken later: at idle (load 0.8) the ladder's m = 2
and 3 ran 1.50x and 1.51x the static kernels, one workgroup of 64 on one CPU of lavapipe's pool
where the static kernels take 4 of 16. Each variant now takes the static kernel's workgroups at
the values it is sized for (_split: options exact_local and min_groups): lavapipe's m = 1..3 run
4 of 16 (the least of 4 processes x 15-21 interleaved rounds, load 7-10, ms: m = 2 main 0.245,
now 0.146, static 0.142; m = 3 0.276, 0.242, 0.207); SwiftShader's spread as before (8 of 8).

The same holds for any one symbolic output axis of a register tile (a matmul's N: (64, 512) @
(512, n)): its threads run over the tiles with that axis outermost (tile_grid.tile_threads), so
the run-time grid launches only the tiles the bound value needs, and its variants take the
tiles the heuristic picks with that axis at the representative values. Within a run of tiles of
that axis (Opts.tile_chunk, threads.grid_chunk) its lanes walk that axis first, as the static
kernel's lanes walk its last axis (lanes along rows ran lavapipe's n = 2048 1.2-1.3x static).
The kernel and its variants take workgroups of at most threads.GRID_LOCAL threads, so a value
that launches few tiles still spreads them over several workgroups (cores, on CPU adapters). A
row kernel over a symbolic row (softmax over rows of n) has no grid to cut, but its lanes per
row, chosen for the longest row (32 lanes and a fold through workgroup memory per row on
lavapipe), waste a short one: it takes a variant for each range of row lengths where rows.py's
default is fewer lanes (`row_variants`: 2 lanes below 32 elements, see ROW_VARIANT_MIN_LANES).

Measured (bench/symbolic_static.py, best of 9 interleaved rounds, load 7-10 on 2 CPUs: single
figures vary up to 3x between runs), symbolic / static GPU time before -> after, at n = 1, 77,
1000, top: matmul (64, 512) @ (512, n) lavapipe 131x 8.2x 1.6x 1.03x -> 0.73x 0.90x 0.48x
0.81x, SwiftShader 331x 112x 1.8x 0.48x -> 0.27x 1.07x 0.68x 1.33x; softmax over rows of n
(64, n) lavapipe 11x 4.5x 0.84x 1.13x -> 4.3x 2.7x 0.79x 1.11x (the 2-lane and 8-lane variants
are 3-4x the static kernel of the same lanes there). Found for n = 77: each of the 8 lanes read
one run of the padded row (512 elements), so lane 0 took all 77; lanes now share the bound
length (Lowerer._run_loop): per-kernel GPU time (load ~19) 0.136 ms against the static 0.062 ->
0.099 against 0.088. At n = 1 the static kernel is elementwise (a reduction of one element), the
2-lane variant 64 workgroups: 0.051 against 0.014 ms. A thread per row (row_lanes=1) over the
symbolic row ran 2.2 ms at n = 1 and 43 ms at n = 16 but 0.067 at n = 77 with the same WGSL
(hi 128 or 4096 alike): lavapipe, cause not found (see ROW_VARIANT_MIN_LANES).

Later (issue 34, load 15-19): the cause was the thread's vec4 loads (group_vec 4): the same
kernel reading scalars runs as the static one, so up to an adapter's option row_short a row
kernel takes a thread per row reading scalars (SHORT_ROW_OPTIONS; lavapipe 96, SwiftShader 8:
render/wgsl/adapters.py has the figures), and lane variants unroll their short runs once. A
fused attention kernel over a bare symbolic key count takes a variant of one key per trip below
its keys per trip (attention.attention_variants: lavapipe runs a 4-key loop that makes no trip
1000x slower).

Rechecked (issue 34: lavapipe 1.46x at n = 77 and 1.89x at 4096 had been reported, load unknown):
softmax (64, n) symbolic / static, best of 5-9 interleaved rounds, lavapipe n = 1, 77, 1000, 4096
1.01 1.08 0.83 1.01 (load 0.2), 1.28 0.94 0.80 1.00 (load 1.9), 1.14 1.22 0.81 1.05 (load 12.6);
SwiftShader 1.76 0.47 1.11 1.03, 1.56 0.56 1.03 1.05, 1.43 0.55 1.04 1.76: no form slower at 77
or 4096, the figures above 1.15 there come and go with the load. What stays is n = 1 on
SwiftShader (0.009 against 0.006 ms): the short-row variant's two loops to the run-time row
length; without them (WGSL edited for n = 1 only, GPU timestamps, best of 40 interleaved) it
takes 0.0064 ms against the static kernel's 0.0060 (the variant 0.0086; the static kernel with
the uniform bound and read: 0.0058), and fully unrolled to its 8 values behind `i < n` it took
0.011 (0.012 at n = 8, where the loop took 0.018, the static kernel 0.011). Workgroups of 8 or
16 threads for the variant changed nothing measurable on either adapter.

Looked into (issue 34: lavapipe softmax (64, n) at n = 77, the symbolic kernel 0.051-0.053 ms
in every idle run, the static one 0.046-0.048 in some processes and 0.035-0.036 in others).
GPU timestamps through wgpu, best of 150-300 interleaved in one process, several processes,
load 5-17 on 2 CPUs (no idle machine), ms:
- Where the work runs. llvmpipe (Mesa 22.3) runs a dispatch's workgroups on its compute
  pool (lp_cs_tpool: a thread per CPU, each taking a chunk of workgroups_count / threads, the
  first awake taking the next chunk too); its timestamps are taken on the submitting thread. The
  static kernel's 8 lanes a row are 64 workgroups: two chunks, on two CPUs when the second
  thread wakes in time; the short-row variant was one workgroup of 64 rows: one CPU always. With
  LP_NUM_THREADS=0 (workgroups run on the submitting thread) the two take the same time (0.0415
  | 0.0422); under load the less busy worker ran 3 us a dispatch for both (one worker ran it all),
  so the two-CPU mode was not seen here: the variant now spreads its rows (row_short_groups,
  short_row_local), which ties under load (0.0918 | 0.0943 old at load 12, 0.0575 | 0.0597 at 15).
- Where the rows lie. The symbolic rows are padded to the dim's top: 4096 floats, 16 KB apart,
  so row i's column c and row j's share an L1 set. The same kernel (a thread per row, scalars,
  8 rows a workgroup) over rows padded to 4112 ran as the static kernel of that form (inline
  0.0358-0.0367 | 0.0324-0.0359; threaded 0.0522 | 0.0503) and at 4096 0.045 | 0.060 (three
  runs); each lane's loops started 16 columns apart (WGSL edited) 0.0429 against 0.0451. Which
  buffers a run binds moves it too: the variant over input and output allocated back to back
  (addresses equal mod 4 KB) 0.041-0.044 and with 512 bytes between them 0.034-0.036 in two
  processes, the same in a third; sizes padded off 4 KB in the runtime changed nothing in the
  jit flow. Not fixed: rows padded off a power of two (the symbolic layout) is the lead. (The
  static kernel's own 8 lanes ran 0.040-0.044 inline, its thread per row 0.032-0.036.)
"""
from __future__ import annotations

import math

from ..graph.at_value import item_at
from ..graph.lazy import L
from ..graph.schedule import ScheduleItem, kernel_reduces, row_node
from . import compile_cost
from .attention import attention_variants
from ..graph.view import prod
from .opts import Opts
from .tile_grid import grid_axis
from .pinned import PIN, STATIC
from .rows import ROW_LOCAL, lane_steps, row_opts
from .threads import grid_local, local_size
from .optimize import with_adapter_defaults
from .tile_shape import TILE_MIN_THREADS, TILES, LONG_TILE_REDUCE, preferred_tiles
from ..render.target import Target

# representative bound values: the range's low end, then this factor up, below the top
VARIANT_STEP = 2
# a row kernel's lane variants take at least this many lanes per row: lavapipe ran a thread per
# row over a symbolic row padded to 4096 (softmax (64, n), the 1-lane variant alone, best of 3
# under load 9 on 2 CPUs) in 1.6 ms at n = 1 and 5 ms at n = 16, where 2 lanes took 0.05 and 32
# lanes 0.12 (the static kernel's thread per row: 0.014 / 0.026): its vec4 loads (below)
ROW_VARIANT_MIN_LANES = 2
# a symbolic row's variant for bound values up to option row_short (render/wgsl/adapters.py): a
# thread per row reading one element per step. lavapipe ran a thread per row over rows padded to
# 4096 with vec4 loads (the group_vec default) 1.3 ms at n = 1, 3.4 at n = 16 (the same kernel
# reading scalars 0.019 / 0.035, the static kernel 0.012 / 0.036): the vec4 loads, not the
# thread per row, were ROW_VARIANT_MIN_LANES's slowness (softmax (64, n), best of 7-9
# interleaved, load 15-16 on 2 CPUs). Natively, ms, SwiftShader static | vec4 (the kernel) |
# scalars: n = 1 0.0085 | 0.017 | 0.013, 5 0.019 | 0.027 | 0.021, 16 0.020 | 0.022 | 0.033, 77
# 0.10 | 0.057 | 0.11 (its row_short: 8); lavapipe static | the lane variant | 8 lanes unrolled
# once | scalars: n = 1 0.018 | 0.043 | 0.035 | 0.017, 16 0.022 | 0.041 | 0.031 | 0.020, 31
# 0.043 | 0.032 | 0.031 | 0.028, 77 0.042 | 0.075 | 0.069 | 0.050, 127 0.059 | 0.064 | 0.062 |
# 0.072 (its row_short: 96). Its rows spread only by row_short_groups (below), not by option
# min_groups (rows.py, chosen for the kernel's padded row): min_groups 0
SHORT_ROW_OPTIONS = {"row_lanes": 1, "group_vec": 1, "min_groups": 0}
# with an adapter's option row_short_groups (lavapipe's: 8), a short-row variant
# (and the pinned one) spreads its rows over at least that many workgroups of at least
# SHORT_ROW_LOCAL threads, where rows.py's default (ROW_LOCAL rows per workgroup) puts (64, n)
# in one: lavapipe runs a dispatch's workgroups in one chunk per thread of its pool (llvmpipe's
# lp_cs_tpool, a thread per CPU), so one workgroup runs on one CPU, where the static kernel of
# the same rows (8 lanes a row: 64 workgroups) may run on two (see the module docstring).
# SHORT_ROW_LOCAL: llvmpipe's vector of 8 f32 (256 bits)
SHORT_ROW_LOCAL = 8
# The pinned variant at a range's low end of 1 does not spread its rows: there the static
# kernel reduces nothing (a row of one element: an elementwise kernel, E_64_1 for (64, 1) in one
# workgroup of 64 threads). Spread over 8 workgroups of 8 rows it took 1.44-1.48x the static
# kernel's GPU time, in rows.py's default workgroup of 64 rows 0.99-1.02x (lavapipe, softmax
# (64, n) at n = 1, the median of 41 interleaved rounds, each the mean of 200 back-to-back
# dispatches between one pair of timestamps as bench/symbolic_static.py times them, 3 processes
# of each alternated, load 8 on 2 CPUs): 0.028 against 0.019 ms, 0.020 against 0.019. Such a
# dispatch is mostly llvmpipe's pool handing out its workgroups (with LP_NUM_THREADS=0 both
# forms take about 1 us).
# a lane variant's runs are short (rows.py: at least 8 elements per lane, so 2-4 vec4 steps):
# unrolled once, the lanes share a row of 77 as 3 steps each, where 4 unrolled steps left 3 of
# 8 lanes idle (lavapipe, (64, 77) in 8 lanes, same load: 0.069-0.053 ms against 0.075-0.060)
LANE_VARIANT_OPTIONS = {"group_unroll": 1}
# with an adapter's option variant_groups (SwiftShader's: 8), a register tile's variants spread
# their threads over at least that many workgroups (at a variant's `most`, where its threads
# allow), halving the workgroup down to option exact_local (the adapter's lanes), as the static
# kernel of a short M does (threads.STEP_GROUPS: a 1-row matvec's reduce_step layout, 8
# workgroups of 8): the adapter runs a workgroup on one core, and matmul (m, 512) @ (512, 512)'s
# m = 1 variant (a 1 x 8 tile, 64 threads in one workgroup) took 1.45x the static kernel's GPU
# time (0.695 against 0.481 ms, bench/symbolic_static.py at idle). Not lavapipe's: its m = 1
# variant in one workgroup already ran 0.66x the static kernel there.
# with option static_low_end, the values lo .. lo + STATIC_VALUES - 1 (below hi) each take the
# static kernel of that size (pinned.STATIC), the ladder starting above them: lavapipe ran the
# ladder's m = 2 and 3 variants 1.61x and 1.44x the static kernels' GPU time (matmul (m, 512) @
# (512, 512), bench/symbolic_static.py at load 1.2; later median ratios 0.66-1.70x and
# 0.55-2.68x, 5 runs at load 1.6-8.5); as the static kernels (the same WGSL) 0.72-1.06x and
# 0.97-1.02x (4 runs, load 3.7-7.4)
STATIC_VALUES = 3
# at most this many variants besides the kernel itself (each costs a compile and a pipeline; a
# symbolic N matmul on lavapipe, (64, 512) @ (512, n) in 1..2048, takes 8: the tile changes at
# n = 2, 3, 4, 8, 61, 249, 497, 505 and 1009, 497..504 joining the run below, and a value
# served by a larger tile than the static kernel's runs its tiles on fewer cores)
MAX_VARIANTS = 8
# (issue 35) a kernel whose tile a one-off run's compile budget cut (Opts.capped: a q4 prefill's
# dequantizing matmul, SmolLM2 1536 x 576, 4 x 4 where the heuristic picks 16 x 16) took the
# values up to hi - 1 in the ladder's uncapped tiles but served the top value itself: the page's
# prefill of exactly `step` tokens ran the capped tile. Natively (lavapipe, (m, 576) q4 in
# 1536 columns, m in 1..128, one-off, load 5-7 on 2 CPUs), m = 127 in the variant's 16 x 16
# 16-20 CPU ms, m = 128 in the kernel's 4 x 4 53-70. So the ladder of a capped kernel runs to
# the top: its last variant serves hi too (the same variants as before, one value more).
# VARIANT_BUDGET: (issue 37) those variants were the heuristic's tiles in the adapter's unrolling,
# unweighed by the budget, and each is built with the kernel: SmolLM2-135M's q4 prefill bundle
# (2 layers, seq in 1..128, lavapipe natively, Mesa's cache off, load 12-16) ran seq = 128 in a
# 16 x 16 variant of 6582 WGSL lines where the kernel is 8 x 8 rolled in 646: its first run 3.5-4.5
# CPU s (the static 8 x 8 kernel's 0.3), its 7 prompt GEMMs 30 of the first prefill's 36 CPU s.
# A capped kernel's variants take at most its tile (within_kernels_tile; in the adapter's
# unrolling: rolled, seq = 1's decoding variant ran 5x the wall time, at the same CPU time). The
# bundle's cold first result (export + first prefill, Mesa's cache off, CPU s / wall s, main
# -> this, at load ~2): export 11.4 / 11.6 -> 7.5 / 7.7, first prefill 30.0 / 32.2 -> 5.1 / 5.2
# (its prompt GEMMs 2.9-4.9 CPU s each -> 0.24-0.39, at load 5-9); its later prefills 0.17 ->
# 0.23-0.25 CPU s (seq = 128 in the rolled 8 x 8 kernel), break-even after ~400 prefills.


def variants(item: ScheduleItem, target: Target, options: dict, opts: Opts | None,
             gridded: bool) -> list:
  """[(dim, most, options)]: the variants `item` (chosen `opts`) takes for small bound values
  of its symbolic dim: a row kernel's over a symbolic row (row_variants), a register tile's
  where the kernel has a run-time grid (`gridded`: tile_variants); else []."""
  if item.out.op is L.ATTENTION:
    return attention_variants(item, options, opts)
  if item.rows:
    return row_variants(item, target, options, opts)
  return tile_variants(item, target, options, opts) if gridded else []


def row_variants(item: ScheduleItem, target: Target, options: dict, opts: Opts | None) -> list:
  """[(dim, most, options)]: a row kernel over a symbolic row length (its first row axis a plain
  dim, the only symbolic axis) takes, for bound values up to option row_short (an adapter's:
  SHORT_ROW_OPTIONS), a thread per row reading scalars, then for each range of bound values
  where rows.py's default lanes per row are fewer than the kernel's (chosen at the top of the
  range), those lanes (each lane's run unrolled once: LANE_VARIANT_OPTIONS), smallest first;
  [] where the lanes are forced or the same all the way down."""
  out = row_node(item.out)
  dim = grid_dim(item, out)
  if dim is None or opts is None or dim[0] != item.rows[0] or "row_lanes" in options or \
     int(options.get("group", 0) or 0) > 0:
    return []
  _, name, lo, hi = dim
  rest = prod(out.shape[a] for a in item.rows[1:])
  merged = with_adapter_defaults(item, target, options)
  short = min(int(merged.get("row_short", 0) or 0) // rest, hi - 1)
  lanes = _lane_variants(item, target, merged, opts, (name, lo, hi), rest)
  if short < lo:
    return lanes
  rows = prod(n for a, n in enumerate(out.shape) if a not in item.rows)
  groups = int(merged.get("row_short_groups", 0) or 0)
  spread = {**SHORT_ROW_OPTIONS, "local": short_row_local(rows, groups, target)} if groups \
    else SHORT_ROW_OPTIONS
  # the range's low end (pinned.py); at 1 in rows.py's default workgroups (see SHORT_ROW_LOCAL)
  pinned = [(name, lo, {**(SHORT_ROW_OPTIONS if lo == 1 else spread), PIN: lo})]
  if opts.row_lanes == 1 and opts.group_vec == 1:    # (the kernel's own form)
    return pinned + lanes
  return pinned + [(name, short, spread)] * (short > lo) + [v for v in lanes if v[1] > short]


def short_row_local(rows: int, groups: int, target: Target) -> int:
  """Rows per workgroup of a short-row variant over `rows` rows (option row_short_groups:
  `groups`): rows.py's default (ROW_LOCAL, at most the rows rounded up to a power of two),
  halved while that leaves fewer than `groups` workgroups, down to SHORT_ROW_LOCAL."""
  local = min(ROW_LOCAL, target.max_local, 1 << max(rows - 1, 0).bit_length())
  while local > SHORT_ROW_LOCAL and -(-rows // local) < groups:
    local //= 2
  return local


def _lane_variants(item: ScheduleItem, target: Target, merged: dict, opts: Opts, dim: tuple,
                   rest: int) -> list:
  """row_variants' lane ladder for `dim` (name, lo, hi), `rest` elements per row per value."""
  name, lo, hi = dim
  starts = sorted({lo} | {-(-s // rest) for s in lane_steps(lo * rest, hi * rest)})
  ladder = []
  for start, end in zip(starts, starts[1:] + [hi + 1]):
    lanes = max(row_opts(item, target, merged, start * rest).row_lanes, ROW_VARIANT_MIN_LANES)
    if ladder and ladder[-1][1] == lanes:
      ladder[-1] = (end - 1, lanes)      # the same lanes further up: one variant
    else:
      ladder.append((end - 1, lanes))
  kept = [(most, lanes) for most, lanes in ladder if lanes < max(opts.row_lanes, 1) and most < hi]
  return [(name, most, {"row_lanes": lanes, **LANE_VARIANT_OPTIONS}) for most, lanes in kept]


def tile_variants(item: ScheduleItem, target: Target, options: dict, opts: Opts | None) -> list:
  """[(dim, most, options)]: the variants of register-tiled `item` (chosen `opts`) for bound
  values of its symbolic dim (the only symbolic output axis, one it tiles) up to `most`, each as
  the options that force its tile, smallest first; [] where the kernel takes none (not a
  register tile, staged, a forced tile, no such plain dim, or the same tile all the way down)."""
  dim = grid_dim(item)
  if dim is None or opts is None or not opts.tile or opts.stage or "tile" in options or \
     dim[0] not in (opts.tile_axes or ()):
    return []
  axis, name, lo, hi = dim
  merged = with_adapter_defaults(item, target, options)
  reduce = kernel_reduces(item)[0]
  long = prod(reduce.src[0].shape[a] for a in reduce.arg[1]) >= LONG_TILE_REDUCE
  preferred = preferred_tiles(merged, long)

  def at(value: int) -> tuple:
    return tile_at(item, opts.tile_axes, preferred, value, bool(merged.get("small_tiles")), axis)
  static = [(name, v, {STATIC: (name, lo, hi)}) for v in range(lo, min(lo + STATIC_VALUES, hi))
            if merged.get("static_low_end") and item_at(item, name, v)]
  start = static[-1][1] + 1 if static else lo   # (each static kernel serves its value only)
  # a capped kernel (a one-off run's compile budget cut its tile) is not left to serve the
  # top: the ladder's tiles are uncapped, so the top run's variant is built anyway (CAPPED_TOP)
  top = hi + 1 if opts.capped else hi
  ladder = tile_ladder(at, start, top) if start < top else []
  if opts.capped and compile_cost.capped(merged):
    ladder = within_kernels_tile(ladder, tuple(opts.tile))
  while ladder and ladder[-1][1] == tuple(opts.tile):
    ladder.pop()                          # the kernel's own tile serves those values
  spread, split = _spread(merged), _split(merged)
  return static + [(name, most, {"tile": tile, "group": 0,
                                 "local": _local(item, tile, opts.tile_axes, most, axis, target,
                                                 spread, split)})
                   for most, tile in _within(ladder, MAX_VARIANTS)]


def within_kernels_tile(ladder: list, tile: tuple) -> list:
  """`ladder` (tile_ladder's) of a kernel whose tile a one-off run's compile budget cut, each
  run's tile at most `tile` (the kernel's) in each axis, runs of one tile joined: the ladder's
  tiles are the heuristic's, unweighed by the budget, and a variant is built with the kernel
  (VARIANT_BUDGET)."""
  cut = []
  for most, own in ladder:
    own = tuple(min(a, b) for a, b in zip(own, tile))
    if cut and cut[-1][1] == own:
      cut[-1] = (most, own)
    else:
      cut.append((most, own))
  return cut


def _spread(merged: dict) -> tuple:
  """(groups, lanes): options variant_groups and exact_local ((0, 0) without the first)."""
  groups = int(merged.get("variant_groups", 0) or 0)
  return (groups, max(int(merged.get("exact_local", 0) or 0), 1)) if groups else (0, 0)


def _split(merged: dict) -> tuple:
  """(lanes, groups): options exact_local and min_groups, as a static tile's workgroups take them
  (optimize.py _tile_opts: threads.local_size; the module docstring has the figures)."""
  return (int(merged.get("exact_local", 0) or 0), int(merged.get("min_groups", 0) or 0))


def _spread_local(threads: int, local: int, groups: int, lanes: int) -> int:
  """`local` threads per workgroup, halved while `threads` fill fewer than `groups`
  workgroups, down to `lanes` (each halving a multiple of `lanes` dividing `threads`); `local`
  where groups is 0."""
  while groups and (local // 2) % lanes == 0 and local // 2 >= lanes and \
      -(-threads // local) < groups and threads % (local // 2) == 0:
    local //= 2
  return local


def _local(item: ScheduleItem, tile: tuple, axes: tuple, most: int, axis: int, target,
           spread: tuple = (0, 0), split: tuple = (0, 0)) -> int:
  """A variant's threads per workgroup: sized for its threads at `most` rounded up to a power
  of two (a `most` such as 248 leaves 992 threads, whose largest preferred divisor is 32: twice
  the workgroups), unless that is more than the threads at `most`, by the static kernel's rule
  (threads.local_size with `split`: (lanes, groups), _split); then spread
  (`spread`: (groups, lanes), _spread) over the adapter's variant_groups workgroups
  (_spread_local)."""
  limit = grid_local(item, target.max_local)
  threads = _threads(item, tile, axes, most, axis)
  rounded = local_size(_threads(item, tile, axes, 1 << (most - 1).bit_length(), axis), limit,
                       *split)
  return _spread_local(threads, rounded if rounded <= threads else
                       local_size(threads, limit, *split), *spread)


def tile_ladder(at, lo: int, hi: int) -> list:
  """[(most, tile)]: the tile `at(value)` picks for each value in lo..hi - 1, as runs of
  values (each up to `most`, the last to hi - 1): found at lo, lo * VARIANT_STEP, ... and
  hi - 1, and by bisection between two of those whose tiles differ (a change and back within
  one step is missed)."""
  points = sorted({lo, max(lo, hi - 1)} | {lo * VARIANT_STEP ** i for i in range(64)
                                           if lo * VARIANT_STEP ** i < hi})
  tiles = {v: at(v) for v in points}
  starts = [(lo, tiles[lo])]
  for a, b in zip(points, points[1:]):
    _bisect(at, a, tiles[a], b, tiles[b], starts)
  ends = [start - 1 for start, _ in starts[1:]] + [max(lo, hi - 1)]
  return [(most, tile) for most, (_, tile) in zip(ends, starts)]


def _bisect(at, a: int, ta: tuple, b: int, tb: tuple, starts: list) -> None:
  """Append to `starts` (value, tile) where the tile changes between a (tile ta) and b (tb)."""
  if ta == tb:
    return
  if b - a == 1:
    starts.append((b, tb))
    return
  mid = (a + b) // 2
  tm = at(mid)
  _bisect(at, a, ta, mid, tm, starts)
  _bisect(at, mid, tm, b, tb, starts)


def _within(ladder: list, most: int) -> list:
  """`ladder` cut to `most` runs: the run above the first that is shortest for its values
  (values / its most) joins the one below it (its values take that smaller tile), and runs of
  one tile become one, until it fits."""
  ladder = list(ladder)
  while len(ladder) > most:
    sizes = [(ladder[i][0] - ladder[i - 1][0]) / ladder[i][0] for i in range(1, len(ladder))]
    i = 1 + sizes.index(min(sizes))
    ladder[i - 1:i + 1] = [(ladder[i][0], ladder[i - 1][1])]
    ladder = [run for j, run in enumerate(ladder)
              if j + 1 == len(ladder) or ladder[j + 1][1] != run[1]]
  return ladder


def tile_at(item: ScheduleItem, axes: tuple, preferred: tuple, value: int,
            small: bool = False, axis: int = 0) -> tuple:
  """The register tile optimize.py's rule picks for `item` with its output axis `axis` (the
  symbolic one) at `value`: the first of `preferred` (a short axis taken whole) that leaves
  TILE_MIN_THREADS threads and divides the static tiled axis (or is one of TILES); else, with
  option `small` (lavapipe's small_tiles, optimize.py _small_tile), the first of TILES that the
  shape holds; else the smallest clipped tile."""
  shape = _at(item, axis, value)
  clipped = [_clip(shape, t, axes) for t in preferred]
  held = [t for t in (_clip(shape, t, axes) for t in TILES)
          if all(shape[a] >= n for a, n in zip(axes, t))]
  for tile in clipped:
    threads = _threads(item, tile, axes, value, axis)
    other = axes[1] if axes[0] == axis else axes[0]
    if threads >= TILE_MIN_THREADS and (tile in TILES or shape[other] % tile[axes.index(other)]
                                        == 0):
      return tile
  return held[0] if small and held else min(clipped, key=lambda t: (t[0] * t[1], t))


def _at(item: ScheduleItem, axis: int, value: int) -> tuple:
  """The output's shape with axis `axis` at `value`."""
  shape = list(item.out.shape)
  shape[axis] = value
  return tuple(shape)


def _threads(item: ScheduleItem, tile: tuple, axes: tuple, value: int, axis: int = 0) -> int:
  """The threads `tile` of `axes` leaves with output axis `axis` at `value`."""
  shape = _at(item, axis, value)
  return prod(math.ceil(n / tile[axes.index(a)]) if a in axes else n for a, n in enumerate(shape))


def _clip(shape: tuple, tile: tuple, axes: tuple) -> tuple:
  """`tile` with an axis shorter than the smallest of TILES taken whole (optimize.py _clip)."""
  return tuple(shape[a] if shape[a] < least else n for a, n, least in zip(axes, tile, TILES[-1]))


def grid_dim(item: ScheduleItem, out=None) -> tuple | None:
  """(axis, name, lo, hi) of the plain dim that is the only symbolic axis of the output (or of
  `out`, a row kernel's row node; tile_grid.grid_axis); None otherwise."""
  out = item.out if out is None else out
  axis = grid_axis(out)
  if axis is None:
    return None
  s = out.sym[axis]
  if not s.is_dim:
    return None
  name = s.terms[0][0]
  return (axis, name) + tuple(s.ranges[name])
