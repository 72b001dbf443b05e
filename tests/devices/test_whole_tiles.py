"""Option whole_tiles (issue 42; lowering/optimize._whole_tile, both CPU adapters' register
tiles): a tile that leaves partial tiles on an axis (8x8 over PP-OCRv4 detection's 10-column
and 20-column maps: 16 and 24 columns computed, the rest gated) takes the first preferred tile
whose sizes, moved up to the least divisor of their axis up to twice them, divide both axes and
hold no more outputs than the largest preferred tile (8x8 -> 8x10 over 10 or 20 columns). Where it applies and where not (a tile that
divides already; a discrete adapter's table; the option off), and the values against numpy
natively under both CPU adapters' tables and on PYTHON with the layout forced."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.compile_cost import RUNS_MANY
from kernelgen.lowering.tile_shape import near_divisor
from ops_util import on  # noqa: F401  (fixture)


def compiled(ci: int, co: int, hw: int, k: int = 1, **options):
  x, w = kg.Tensor.empty(1, ci, hw, hw, name="x"), kg.Tensor.empty(co, ci, k, k, name="w")
  (kernel,) = kg.compile(x.conv2d(w, padding=k // 2), target="wgsl", **options)
  return kernel


def threads(ci: int, co: int, hw: int, k: int = 1, **options) -> int:
  """The threads of the conv's one kernel (outputs / the tile's outputs)."""
  kernel = compiled(ci, co, hw, k, **options)
  return kernel.global_size[0] * kernel.local_size[0]


@pytest.mark.parametrize("n, size, want", [
  (10, 8, 10), (20, 16, 20), (20, 8, 10), (12, 8, 12), (40, 8, 8), (14, 4, 7), (56, 16, 28),
  (10, 16, 16),      # no divisor from 16 to 32: unchanged
  (13, 8, 13), (17, 8, 8)])   # 17: a prime past twice 8, unchanged
def test_near_divisor(n, size, want):
  assert near_divisor(n, size) == want


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("runs", [1, RUNS_MANY])
@pytest.mark.parametrize("ci, co, hw, whole, partial", [
  (384, 384, 10, 48 * 10, 48 * 10 * 2),     # 8x10 tiles; 8x8: 2 per 10-column row
  (192, 192, 20, 24 * 20 * 2, 24 * 20 * 3)])  # 8x10 (8x20 holds more than 8x16); 8x8: 3 a row
def test_ppocr_small_map_convs_take_whole_tiles(adapter, runs, ci, co, hw, whole, partial):
  """Many runs take the whole tile, which saves the 8x8's wasted outputs (37 % of 10 columns,
  17 % of 20) of 14.7 and 7.1 M multiply-adds. A one-off run takes the 8x8 tile, capped (a plan
  realized again swaps in the whole one): its ragged last block of columns starts at n - 8
  (tile_grid.block_start, regtile FITTED_BLOCKS), so it lowers with no column gates, to fewer UOps
  than the whole tile, whose extra build no longer pays for a single run
  (compile_cost.saves_more_than_builds)."""
  kernel = compiled(ci, co, hw, adapter=adapter, runs=runs)
  assert kernel.global_size[0] * kernel.local_size[0] == (partial if runs == 1 else whole)
  assert kernel.capped == (runs == 1)
  assert threads(ci, co, hw, adapter=adapter, runs=runs, whole_tiles=False) == partial
  assert threads(ci, co, hw, adapter="discrete", runs=runs) == partial


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_one_off_keeps_a_partial_tile_whose_whole_tile_builds_longer(adapter):
  """SqueezeNet's 13x13 expand conv (48 -> 192, 1.6 M multiply-adds): the whole 8x13 tile
  lowers to twice the UOps of the 8x8 (an estimated 230-630 ms more build) to save the run
  time of 8x8's wasted outputs (34 %: ~0.5 ms). A one-off run keeps the partial 8x8 tile,
  capped, so a plan realized again swaps in the whole one; many runs take it."""
  one_off = compiled(48, 192, 13, adapter=adapter)
  many = compiled(48, 192, 13, adapter=adapter, runs=RUNS_MANY)
  assert one_off.capped and not many.capped
  assert threads(48, 192, 13, adapter=adapter) == \
    threads(48, 192, 13, adapter=adapter, whole_tiles=False) == 24 * 13 * 2
  assert many.global_size[0] * many.local_size[0] == 24 * 13


@pytest.mark.parametrize("ci, co, hw, k", [(96, 96, 40, 1), (96, 24, 80, 3)])
def test_dividing_tiles_are_unchanged(ci, co, hw, k):
  """8x8 divides 40 columns, 8x16 80: the option changes nothing."""
  for adapter in ("lavapipe", "swiftshader"):
    assert threads(ci, co, hw, k, adapter=adapter) == \
      threads(ci, co, hw, k, adapter=adapter, whole_tiles=False)


def _conv_hswish(x, w, b, tensor):
  y = tensor(x).conv2d(tensor(w), tensor(b), padding=w.shape[-1] // 2)
  return y * (y + 3).clip(0, 6) / 6


def _want(x, w, b):
  k = w.shape[-1]
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
  y = np.einsum("nchwij,ocij->nohw", win, w) + b.reshape(1, -1, 1, 1)
  return y * np.clip(y + 3, 0, 6) / 6


def _operands(ci: int, co: int, hw: int, k: int = 1):
  rng = np.random.default_rng(42)
  return (rng.standard_normal((1, ci, hw, hw), np.float32),
          rng.standard_normal((co, ci, k, k), np.float32) * 0.1,
          rng.standard_normal(co).astype(np.float32))


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("ci, co, hw", [(384, 360, 10), (192, 96, 20), (96, 96, 40)])
def test_whole_tile_convs_compute_right_on_webgpu(on, adapter, ci, co, hw):
  """Natively under both CPU adapters' tables (runs=RUNS_MANY): 8x10 tiles with a hard-swish
  epilogue, and a map 8x8 divides, against numpy."""
  on("WEBGPU", adapter=adapter, runs=RUNS_MANY)
  ops = _operands(ci, co, hw)
  np.testing.assert_allclose(_conv_hswish(*ops, kg.Tensor).numpy(), _want(*ops),
                             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tile", [(8, 10), (4, 7)])
def test_whole_tile_layout_computes_right_on_python(on, tile):
  """The reference interpreter runs the layouts the option picks (forced) against numpy: 8x10
  over 10 columns, 4x7 over 14 (a 3x3 conv)."""
  on("PYTHON", tile=tile)
  ops = _operands(16, 16, 10, 1) if tile == (8, 10) else _operands(8, 8, 14, 3)
  np.testing.assert_allclose(_conv_hswish(*ops, kg.Tensor).numpy(), _want(*ops),
                             rtol=1e-4, atol=1e-4)
