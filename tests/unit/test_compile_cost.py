"""Compile cost in the optimizer's choices (lowering/compile_cost.py, issue 37): on an adapter with a
measured driver cost (render/wgsl/adapters.py DRIVER_COST: lavapipe, SwiftShader, other CPU
adapters) a one-off run (option runs, 1 unless given) takes the smaller kernel where the large
one's estimated driver compile passes the budget; runs=RUNS_MANY (kg.jit, a plan realized again)
keeps the large one; adapters without a cost (GPUs, unknown) are never capped."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering import compile_cost
from kernelgen.lowering.compile_cost import RUNS_MANY
from kernelgen.render.wgsl import adapters


def _dwconv(channels=96, side=80):
  """PP-OCR's depthwise 5x5 conv with bias and hard-swish, inputs on PYTHON (compile only)."""
  rng = np.random.default_rng(0)
  x = kg.Tensor(rng.standard_normal((1, channels, side, side)).astype(np.float32), device="PYTHON")
  w = kg.Tensor(rng.standard_normal((channels, 1, 5, 5)).astype(np.float32), device="PYTHON")
  b = kg.Tensor(rng.standard_normal(channels).astype(np.float32), device="PYTHON")
  y = x.conv2d(w, b, padding=2, groups=channels)
  return y * (y + 3).clip(0, 6) / 6


def _sdpa(length=512, dim=64):
  q, k, v = (kg.Tensor.empty(1, 8, length, dim, device="PYTHON") for _ in range(3))
  return q.scaled_dot_product_attention(k, v)


def _one(out, **options):
  kernels = kg.compile([out], target="wgsl", **options)
  assert len(kernels) == 1
  return kernels[0]


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_a_one_off_depthwise_5x5_conv_takes_a_smaller_kernel(adapter):
  """The unrolled window in 8x8 tiles (PP-OCR's 140-330 KB kernels) is for many runs; a one-off
  run takes a smaller tile or the window in a loop (a third of the source or less) and says it
  was capped. (These adapters slide the window by default, lowering/slide.py, a kernel small
  enough for any run: slide=False here.)"""
  out = _dwconv()
  one_off, many = (_one(out, adapter=adapter, slide=False, runs=runs) for runs in (1, RUNS_MANY))
  assert one_off.capped and not many.capped
  assert "for (" not in many.source
  assert len(one_off.source) * 3 < len(many.source)
  assert many.source == _one(out, adapter=adapter, runs=RUNS_MANY + 1, slide=False).source


@pytest.mark.parametrize("adapter", ["unknown", "discrete", "integrated"])
def test_adapters_without_a_measured_cost_are_not_capped(adapter):
  for out in (_dwconv(), _sdpa()):
    one_off, many = _one(out, adapter=adapter), _one(out, adapter=adapter, runs=RUNS_MANY)
    assert one_off.source == many.source and not one_off.capped


def test_a_one_off_sdpa_takes_fewer_query_rows_per_thread():
  """sdpa at L=512, d=64: lavapipe's 32 query rows per thread are 23,000 lines of WGSL; a one-off
  run's kernel fits the budget, far smaller; a forced upcast= is kept whatever it costs."""
  out = _sdpa()
  one_off, many = _one(out, adapter="lavapipe"), _one(out, adapter="lavapipe", runs=RUNS_MANY)
  assert one_off.capped and not many.capped
  assert len(one_off.source) * 20 < len(many.source)    # one row, one key per trip
  forced = _one(out, adapter="lavapipe", upcast=32)
  assert forced.source == many.source and not forced.capped


def _conv1x1(channels=(64, 64, 64), out=64, side=28):
  """A 1x1 conv over a batch norm + ReLU of a channel concat (Inception's), inputs on PYTHON."""
  rng = np.random.default_rng(0)

  def t(*shape):
    return kg.Tensor(rng.standard_normal(shape).astype(np.float32), device="PYTHON")
  x = kg.cat([t(1, c, side, side) for c in channels], axis=1)
  cin = sum(channels)
  x = (x * t(1, cin, 1, 1) + t(1, cin, 1, 1)).relu()
  return x.conv2d(t(out, cin, 1, 1), t(out)).relu()


def test_a_one_off_plain_tile_fits_the_budget():
  """lavapipe's plain register tiles (tile_size_cap) weigh their estimated build too: where the
  8x8 tile's estimate passes a one-off run's budget (here a driver cost given high, as
  Inception v2's 1x1 convs are at lavapipe's own: 1.45 s each) it takes 4x4 and says it was
  capped; for many runs the 8x8 tile as before. At lavapipe's own cost the 8x8 tile fits the
  budget but not this conv's work (10 M multiply-adds, ~10 ms: compile_cost.work_ms)."""
  out, cost = _conv1x1(), (2.0, 0.5)
  one_off, many = (_one(out, adapter="lavapipe", driver_cost=cost, runs=runs)
                   for runs in (1, RUNS_MANY))
  assert one_off.capped and not many.capped
  assert len(one_off.source) * 2 < len(many.source)
  assert many.source == _one(out, adapter="lavapipe", runs=RUNS_MANY).source
  own = _one(out, adapter="lavapipe")       # lavapipe's own cost: within the budget, not the work
  assert own.capped and len(own.source) < len(many.source)       # (not unrolled: 27 vs 41 KB)


def _conv3x3(channels=64, side=56):
  """bench/peers.py's conv2d row: 1 x 64 x 56 x 56, 64 x 64 x 3 x 3, pad 1 (116 M multiply-adds)."""
  x = kg.Tensor.empty(1, channels, side, side, device="PYTHON")
  return x.conv2d(kg.Tensor.empty(channels, channels, 3, 3, device="PYTHON"), padding=1)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_a_one_off_conv_of_little_work_takes_plain_tiles(adapter):
  """SwiftShader's 16x8 tiles unrolled 4 times for the 3x3 64-channel conv (1,564 lines, built in
  0.7 CPU s, 3.5 s of the page's 4.5 s cold first result) estimate 0.8 s, within the one-off
  budget, but its 116 M multiply-adds run in ~0.1 s (compile_cost.work_ms): a one-off run takes
  the plain 8x8 tile (~300 lines, as lavapipe's), capped; many runs keep the unrolled tiles."""
  out = _conv3x3()
  one_off, many = (_one(out, adapter=adapter, runs=runs) for runs in (1, RUNS_MANY))
  assert one_off.capped and not many.capped
  assert len(one_off.source.splitlines()) < 400 < 1000 < len(many.source.splitlines())
  assert one_off.source == _one(out, adapter=adapter, long_tiles=None, tile_unroll=0).source


def test_a_one_off_matmul_of_much_work_keeps_its_unrolled_tiles():
  """matmul 1024^3 (1.07 G multiply-adds, ~1 s of work) keeps SwiftShader's 16x16 unrolled tiles
  for a one-off run: their build (estimated 0.8 s) is won back by their run."""
  a, b = (kg.Tensor.empty(1024, 1024, device="PYTHON") for _ in range(2))
  one_off = _one(a @ b, adapter="swiftshader")
  assert not one_off.capped
  assert one_off.source == _one(a @ b, adapter="swiftshader", runs=RUNS_MANY).source


def test_the_estimate_and_the_budget():
  options = {"driver_cost": (0.5, 0.1)}
  python = compile_cost.PYTHON_MS_PER_UOP * 1000
  assert compile_cost.estimate_ms(options, 1000) == pytest.approx(600.0 + python)
  assert compile_cost.estimate_ms({}, 10 ** 6) is None and compile_cost.affordable({}, 10 ** 9)
  assert compile_cost.budget_ms({**options, "runs": 3}) == 3 * compile_cost.ONE_OFF_MS
  assert compile_cost.capped(options) and not compile_cost.capped({**options, "runs": RUNS_MANY})
  macs = 300 * compile_cost.CPU_MACS_PER_MS          # 300 ms of a CPU adapter's work
  assert compile_cost.work_ms(macs) == pytest.approx(300.0)
  assert compile_cost.affordable(options, 600) and compile_cost.affordable(options, 600, macs * 2)
  assert not compile_cost.affordable(options, 600, macs)     # 360 ms > 300
  assert compile_cost.affordable({**options, "runs": 3}, 600, macs)
  for shape in ("tile", "attention"):
    assert adapters.defaults("lavapipe", shape)["driver_cost"] == \
      adapters.DRIVER_COST[("lavapipe", shape)]
    assert "driver_cost" not in adapters.defaults("discrete", shape)


def test_a_larger_kernel_pays_where_its_build_is_less_than_the_run_it_saves():
  """saves_more_than_builds (the whole register tile over a partial one, issue 42): 1000 ->
  1100 UOps at (0.5, 0.1) builds 75 ms more; a third of 300 ms of work wasted saves 100 ms
  in one run, a tenth of 30 ms saves 3 ms (paid back only over 25 runs); fewer UOps always pay;
  an adapter without a measured cost has no build to weigh."""
  options, macs = {"driver_cost": (0.5, 0.1)}, 300 * compile_cost.CPU_MACS_PER_MS
  extra = compile_cost.estimate_ms(options, 1100) - compile_cost.estimate_ms(options, 1000)
  assert extra == pytest.approx(50 + 21 + compile_cost.PYTHON_MS_PER_UOP * 100)
  assert compile_cost.saves_more_than_builds(options, 1000, 1100, macs, 1 / 3)
  assert not compile_cost.saves_more_than_builds(options, 1000, 1100, macs // 10, 0.1)
  assert compile_cost.saves_more_than_builds({**options, "runs": 40}, 1000, 1100, macs // 10, 0.1)
  assert compile_cost.saves_more_than_builds(options, 1100, 1000, 0, 0.0)
  assert compile_cost.saves_more_than_builds({}, 1000, 10 ** 6, 0, 0.0)


@pytest.mark.parametrize("options, words", [
  ({"runs": 0}, "runs=0"), ({"runs": "many"}, "runs='many'"),
  ({"driver_cost": (1.0,)}, "driver_cost=(1.0,)"), ({"driver_cost": (-1, 0)}, "driver_cost")])
def test_bad_options_are_typed_errors(options, words):
  with pytest.raises(kg.UnsupportedError, match=words.replace("(", r"\(").replace(")", r"\)")):
    kg.compile([_dwconv(8, 16)], target="wgsl", adapter="lavapipe", **options)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_a_one_off_conv_over_budget_never_lowers_the_long_tile(adapter, monkeypatch):
  """The plain 8x8 tile of the 3x3 64-channel conv is over its one-off budget already (its 116 M
  multiply-adds' ~116 ms: compile_cost.work_ms), so the 16x8 tile unrolled 4 times, which holds
  it, is too: optimize() takes the plain kernel without lowering the long one (2197 UOps, ~40%
  of our compile of it), and compile_item reuses the plain kernel's lowering. The kernel is the
  one the long tile's estimate chose before (test_a_one_off_conv_of_little_work_takes_plain_tiles)."""
  from kernelgen.lowering import lower as lowering
  made, real = [], lowering._lower

  def counted(item, opts):
    made.append(opts)
    return real(item, opts)
  monkeypatch.setattr(lowering, "_lower", counted)
  kernel = _one(_conv3x3(), adapter=adapter)
  assert kernel.capped and len(kernel.source.splitlines()) < 400
  assert not [o for o in made if o.tile_unroll], [(o.tile, o.tile_unroll) for o in made]
  assert sum(o.tile == (8, 8) and o.local > 1 for o in made) == 1     # the kernel, lowered once


def _lowerings(monkeypatch) -> list:
  """The Opts of every lowering made from now on (lower._lower, counted)."""
  from kernelgen.lowering import lower as lowering
  made, real = [], lowering._lower

  def counted(item, opts):
    made.append(opts)
    return real(item, opts)
  monkeypatch.setattr(lowering, "_lower", counted)
  return made


@pytest.mark.parametrize("adapter, kernels", [
  ("swiftshader", [((16, 16), 4)]), ("lavapipe", [((16, 16), 4), ((8, 8), 4)])])
def test_a_one_off_matmul_within_budget_lowers_only_its_long_tile(adapter, kernels, monkeypatch):
  """matmul 1024^3's 16x16 tile unrolled 4 times fits a one-off run's budget
  (test_a_one_off_matmul_of_much_work_keeps_its_unrolled_tiles; lavapipe's tile_rate then takes
  8x8 unrolled: optimize._quickest_first): its UOps, estimated from the 1x1 and 2x2 tiles
  (tile_budget.long_uops), fit it, so the long tile is lowered first, once, and the plain kernel
  it would fall back to (8x16) is never lowered (it was: our compile of the cold matmul row on
  SwiftShader 61 -> 134 ms in Pyodide)."""
  made = _lowerings(monkeypatch)
  a, b = (kg.Tensor.empty(1024, 1024, device="PYTHON") for _ in range(2))
  _one(a @ b, adapter=adapter)
  assert [(o.tile, o.tile_unroll) for o in made if o.local > 1] == kernels
  assert not [o for o in made if o.tile == (8, 16)], [(o.tile, o.local) for o in made]


def _q4_gemm_item(rows=128, k=576, n=1536, block=32):
  """SmolLM2-135M's q4 up/gate GEMM at a 128-token prompt (onnx/operators/quant_tiled.py: the
  4-bit fields by unsigned division and remainder, the column operand a vector), scheduled."""
  from kernelgen.graph.schedule import schedule
  from kernelgen.onnx.operators.quant_tiled import matmul_dequant
  words = kg.Tensor.empty(n, k // 8, dtype=kg.dtypes.uint32, device="PYTHON")
  x, scale = (kg.Tensor.empty(*s, device="PYTHON") for s in ((rows, k), (n, k // block)))
  return schedule([matmul_dequant(x, words, scale, 8.0, 4, block).node])[-1]


@pytest.mark.parametrize("k, n", [(576, 1536), (1536, 576)])       # up/gate, down
def test_the_estimate_orders_a_vectorized_q4_gemms_tiles_as_their_builds(k, n):
  """lavapipe's estimate of the q4 prompt GEMM's rolled tiles from their probed UOps (327 | 780
  | 1302 -> 225 | 611 | 1163 ms): 4x4 < 8x8 (the one-off choice, test_onnx_q4_prompt_tile.py)
  <= the budget < 8x16, the order of their measured builds (bench/compile_cost.py, Mesa's cache
  off, load 5-6 on 2 shared CPUs, two rounds, lowered UOps -> driver CPU ms: 4x4 307 -> 64-82 |
  8x8 742 -> 183-207 | 8x16 1264 -> 353-393). The estimate is about 3x those (the table's
  worst-case cost per UOp, from ShuffleNet's windows), where matmul 512^3 and conv2d 3x3 in 8x8
  are about 2x (249 / 140, 272 / 130 ms): vec4 loads and field extraction cost lavapipe less per
  UOp than those kernels' work, not more. (A guard: passes on main too.)"""
  from kernelgen.lowering.optimize import with_adapter_defaults
  from kernelgen.lowering.tile_probe import probe_uops
  from kernelgen.render.targets import get_target
  item = _q4_gemm_item(k=k, n=n)
  options = with_adapter_defaults(item, get_target("wgsl"), {"adapter": "lavapipe"})
  small, plain, large = (compile_cost.estimate_ms(options, probe_uops(item, tile, (0, 1)))
                         for tile in ((4, 4), (8, 8), (8, 16)))
  assert small < plain <= compile_cost.budget_ms(options) < large, (small, plain, large)


def _q4_symbolic_kernel(runs: int, adapter: str = "lavapipe"):
  """The q4 down GEMM (1536 -> 576) over `seq` in 1..128 rows (the page's prefill bundle) for
  `adapter`, option `runs`."""
  from kernelgen.onnx.operators.quant_tiled import matmul_dequant
  x = kg.Tensor.empty(kg.Dim("seq", 1, 128), 1536, device="PYTHON")
  words = kg.Tensor.empty(576, 1536 // 8, dtype=kg.dtypes.uint32, device="PYTHON")
  scale = kg.Tensor.empty(576, 1536 // 32, device="PYTHON")
  return _one(matmul_dequant(x, words, scale, 8.0, 4, 32), adapter=adapter, runs=runs)


def test_a_one_off_symbolic_q4_gemms_variants_stay_within_its_capped_tile():
  """A one-off run's capped kernel (8x8 rolled, 646 lines) served seq = 49..128 in variants of
  the heuristic's tiles unrolled (2220 and 6582 lines), each built with the kernel: seq = 128's
  first run cost lavapipe 3.5-4.5 CPU s against the kernel's 0.3 (variants.py VARIANT_BUDGET).
  Now no variant's tile passes the kernel's (the low counts' small tiles, up to 1177 lines, stay
  as they were: decoding's seq = 1 among them), seq = 25..128 run the kernel; for many runs the
  wide variants stay."""
  from kernelgen.uop.program import variant_for
  one_off, many = _q4_symbolic_kernel(1), _q4_symbolic_kernel(RUNS_MANY)
  assert one_off.capped and not many.capped
  assert all(len(v.source) < 2 * len(one_off.source) for _, _, v in one_off.variants), \
    [len(v.source.splitlines()) for _, _, v in one_off.variants]
  assert all(variant_for(one_off, {"seq": m}) is one_off for m in (25, 64, 127, 128))
  assert max(len(v.source) for _, _, v in many.variants) > 4 * len(one_off.source)


def test_a_one_off_symbolic_q4_gemm_is_first_the_cheapest_tile_to_build():
  """A page's load() builds each kernel, not its variants, so its first prefill waited for the
  one-off q4 GEMMs' capped tiles (SmolLM2-135M's q4 bundle on SwiftShader in Chromium, Mesa's
  cache off: load() 7-13 s). With SwiftShader's option cheap_first the kernel is the smallest
  tile, rolled (lowering/cheap_first.py: under half its lines), and the capped tile its variant
  up to the top, after the low counts' variants (decoding's seq = 1 among them): natively every
  value runs what it ran. lavapipe (whose drivers build at the first dispatch) and many runs
  keep the capped kernel."""
  from kernelgen.uop.program import variant_for
  one_off = _q4_symbolic_kernel(1, "swiftshader")
  dim, most, top = one_off.variants[-1]
  assert (dim, most) == ("seq", 128) and one_off.capped
  assert len(one_off.source) < 0.5 * len(top.source), (len(one_off.source), len(top.source))
  assert top.launch.grid and one_off.launch.grid
  assert all(variant_for(one_off, {"seq": m}) is top for m in (113, 127, 128))
  assert len(variant_for(one_off, {"seq": 1}).source) < len(top.source)
  for kernel in (_q4_symbolic_kernel(1), _q4_symbolic_kernel(RUNS_MANY, "swiftshader")):
    assert all(m < 128 for _, m, _ in kernel.variants), [m for _, m, _ in kernel.variants]
