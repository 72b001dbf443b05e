"""Compile cost in the optimizer's choices: what a kernel costs the driver to build, weighed
against how often it will run.

Unrolled windows, large register tiles and many query rows per thread win GPU time, and the
kernels they make are long straight-line code that a software adapter's shader compiler (Mesa
lavapipe's LLVM, SwiftShader's) takes seconds to tens of seconds to build at first use. A user
waits for that once per kernel: a one-off run (a realize, a model's first run) pays it in full,
a training loop or a jit'd step spreads it over every run.

The model: the adapter's table (render/wgsl/adapters.py, DRIVER_COST, measured with
bench/compile_cost.py) gives the driver's compile of one kernel as

    driver ms = a * uops + b * uops^2 / 1000

in the UOps of its lowered graph (the optimizer's measure of size: it has them before rendering),
per adapter class and shape class (the cost per UOp differs: an attention kernel's float work
costs lavapipe ten times a windowed conv's index math), and reaches the optimizer as the adapter
default `driver_cost` = (a, b); kernelgen's own compile adds PYTHON_MS_PER_UOP per UOp. Option `runs` is how
many times the caller expects to run the plan (1 unless said: realize and a model's first run;
kg.jit and a plan realized again ask for RUNS_MANY). A choice whose estimate passes
`budget_ms` = ONE_OFF_MS * runs takes the next smaller one; adapters without a measured cost
(GPUs, unknown) are not capped, so their kernels are as before.

An exported bundle is compiled for a one-off run unless export is given `runs`: a page loads it
once and its user waits for every pipeline before the first result. SwiftShader weighs its long
register tiles too (long_tiles_cost, as lavapipe; plain tiles within the budget where a one-off
run's estimate passes it): SmolLM2's prefill at 2 layers, q4, 128 tokens, had 16x16 tiles
unrolled 4 times over the 4-bit words' decoding, ~10,000 lines of WGSL each, which Chromium's
SwiftShader built in 4-10 s each (bench/bundle_load.py, load ~12: 148 s for the prefill's
pipelines, 98 s one after another); capped, ~1,000 lines each, 8.8 s for all of them (load ~9).
Their run is slower (natively, bench/bundle_compile_cost.py, load ~10: the whole prefill's GPU
time 7.6 -> 15.2 s, most of it the LM head over every position) but far less than the build.
"""
from __future__ import annotations

from ..graph.lazy import L
from ..graph.schedule import ScheduleItem, kernel_reduces
from ..graph.view import prod

# the estimated build (kernelgen's compile + the driver's) one kernel of a one-off run may cost,
# ms: a kernel's one run takes milliseconds to tens of ms on a CPU adapter, so a second of build
# is not won back (lavapipe, CPU ms: a 5x5 depthwise conv of 96x80x80 builds in 1.9 s as 8x8
# unrolled windows and runs in ~6 ms, in 0.3 s looped and runs in 20-40; ShuffleNet's 3x3
# depthwise r_1_112_1_28_28 in 3.6 s as 4x4 windows; fused sdpa L=512 d=64 builds in 2.7 s with
# a query row per thread and runs 1.3-2.2 s, in 7.7 s with 4 rows and runs 1.3 s, in ~30 s with
# 32 and runs 0.23 s: bench/compile_cost.py, render/wgsl/adapters.py DRIVER_COST)
ONE_OFF_MS = 1000.0
# kernelgen's own compile per UOp, ms (CPython; Pyodide is slower): adapters.py DRIVER_COST
PYTHON_MS_PER_UOP = 0.04
# the runs a plan that runs many times is taken to have (kg.jit, a graph realized again): its
# kernels may take the large forms, whose GPU time pays for their compile over that many runs
RUNS_MANY = 100
# the multiply-adds per ms a CPU adapter (the only kind with a measured driver_cost) runs a
# register-tiled kernel at, for the GPU time of a kernel's work: a build a one-off run pays for
# speed (the long tiles, the unrolled reduction) is won back only out of that time, so it may
# cost at most that (work_ms; conv2d 64ch 3x3 56x56, 116 M multiply-adds: SwiftShader natively,
# load ~16, CPU ms, its 16x8 unrolled tiles build in 721 and run in 279, its 8x8 tiles build in
# 62 and run in 288; in Chromium at load ~7 the unrolled kernel's pipeline took 3.5 s of the
# first result's 4.5; Chromium runs such tiles at 1-4 M multiply-adds per ms: matmul 1024^3 in
# 0.3-1.1 s, conv2d 16x8 in 27-50 ms, render/wgsl/adapters.py)
CPU_MACS_PER_MS = 1_000_000


# option tile_rate (an adapter's: render/wgsl/adapters.py) is the multiply-adds per microsecond a
# 16x16 register tile runs at; a tile of R x C runs at (TILE_FLOOR + 1/16 + 1/16) /
# (TILE_FLOOR + 1/R + 1/C) of it: its loads per multiply-add (1/R + 1/C) and a floor per
# multiply-add, fitted on lavapipe's matmul 1024^3 natively (bench/lavapipe_tiles.py, best of 10
# interleaved, load ~1.7 on 2 shared CPUs, tiles unrolled 4 times, ms): 16x16 74.5 | 16x8 83.3 |
# 8x16 89.1 | 8x8 105.2. lavapipe's rate is Chromium's (16x16 172-201 ms at load 11-16: 5,000
# per us; natively at idle ~14,000): a slower run favours the larger tiles.
TILE_FLOOR = 0.19


def first_result_ms(options: dict, uops: int, macs: int, tile: tuple) -> float:
  """The estimated build (estimate_ms) of a register-tiled kernel of `uops` UOps plus its runs
  (option runs) of `macs` multiply-adds in tile `tile` at the adapter's tile_rate: what a caller
  waits for its results. Options without tile_rate or driver_cost: 0 (no estimate)."""
  rate, build = options.get("tile_rate"), estimate_ms(options, uops)
  if not rate or build is None:
    return 0.0
  share = (TILE_FLOOR + 1 / tile[0] + 1 / tile[1]) / (TILE_FLOOR + 1 / 8)
  return build + macs / (rate * 1000.0) * share * runs(options)


def runs(options: dict) -> int:
  """The runs the caller expects of the kernel (option `runs`, 1 when not given)."""
  return max(int(options.get("runs") or 1), 1)


def estimate_ms(options: dict, uops: int) -> float | None:
  """The estimated build (ms) of a kernel of `uops` UOps on the options' adapter: the driver's
  compile (its `driver_cost`) and kernelgen's (PYTHON_MS_PER_UOP); None where the adapter has no
  measured cost for the kernel's shape class (a GPU, an unknown adapter: no cap)."""
  cost = options.get("driver_cost")
  if not cost:
    return None
  a, b = cost                      # (checked by Target.check_options)
  return (a + PYTHON_MS_PER_UOP) * uops + b * uops * uops / 1000.0


def budget_ms(options: dict) -> float:
  """The most estimated build one kernel may cost: ONE_OFF_MS per expected run."""
  return ONE_OFF_MS * runs(options)


def affordable(options: dict, uops: int, macs: int | None = None) -> bool:
  """A kernel of `uops` UOps fits the compile budget (always, where the adapter has no cost);
  given its work `macs` (item_macs), within the GPU time of that work per run too (work_ms)."""
  estimate = estimate_ms(options, uops)
  return estimate is None or estimate <= budget_ms(options) and \
    (macs is None or estimate <= work_ms(macs) * runs(options))


def item_macs(item: ScheduleItem) -> int | None:
  """The multiply-adds (reduced elements per output times outputs) of a reducing kernel; None
  over a symbolic dim (its work is the bound value's: its variants take the static kernels'
  tiles, lowering/variants.py)."""
  if _symbolic(item.out):
    return None
  reduce = kernel_reduces(item)[0]
  return prod(reduce.src[0].shape[a] for a in reduce.arg[1]) * item.out.size


def item_work(item: ScheduleItem) -> tuple:
  """The kernel's work as factors whose product at the dims' bound values estimates it (Launch
  .work): its outputs times the elements its first reduction reduces per output (item_macs),
  each symbolic axis (of the output or of the reduced source) a factor ((dim, c), ...), const)
  and the static axes together one ((), size). A floored symbolic size counts as its top."""
  static, factors = 1, []
  reduces = kernel_reduces(item)
  axes = [(item.out, a) for a in range(len(item.out.shape))]
  if reduces:
    axes += [(reduces[0].src[0], a) for a in reduces[0].arg[1]]
  for node, a in axes:
    sym = node.sym[a] if node.sym is not None else None
    if sym is not None and not isinstance(sym, int) and getattr(sym, "div", 1) == 1:
      factors.append((tuple(sym.terms), sym.const))
    else:
      static *= node.shape[a]
  return (((), static),) + tuple(factors)


def _symbolic(out) -> bool:
  """Some node of the kernel's graph `out` has a symbolic axis or is a symbolic dim."""
  stack, seen = [out], set()
  while stack:
    node = stack.pop()
    if id(node) in seen:
      continue
    seen.add(id(node))
    if node.sym is not None or node.op is L.VAR:
      return True
    stack.extend(node.src)
  return False


def work_ms(macs: int) -> float:
  """The GPU time (ms) a CPU adapter takes for `macs` multiply-adds (CPU_MACS_PER_MS)."""
  return macs / CPU_MACS_PER_MS


def saves_more_than_builds(options: dict, uops: int, more_uops: int, macs: int,
                           waste: float) -> bool:
  """A kernel of `more_uops` UOps instead of `uops` builds (estimate_ms) for less than the run
  time it saves: the GPU time of its work (work_ms of `macs`) times `waste`, the fraction of
  the computed outputs the smaller kernel throws away, times the runs. True where the adapter
  has no measured cost (no build to weigh)."""
  more, less = estimate_ms(options, more_uops), estimate_ms(options, uops)
  return more is None or more - less < work_ms(macs) * waste * runs(options)


def capped(options: dict) -> bool:
  """The options' choices may be capped by compile cost: the adapter has a measured cost and the
  caller expects fewer than RUNS_MANY runs (where the cap bites, a plan realized again may swap
  in the kernel compiled for RUNS_MANY: realize.py)."""
  return bool(options.get("driver_cost")) and runs(options) < RUNS_MANY
