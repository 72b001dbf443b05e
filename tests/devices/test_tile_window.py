"""Option tile_window (lavapipe's and SwiftShader's default for tiled kernels, render/wgsl/adapters.py;
lowering/optimize.py _window_tile): a reduction of TILE_INNER < n <= TILE_WINDOW elements whose
tile rows share more loads with the whole window unrolled than looped (a blur: output rows slide
along the window's rows) unrolls it in a tile with rows; other kernels are unchanged. The values
on the WEBGPU device (lavapipe here) match numpy (and in the page on SwiftShader:
test_filter_kernels)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.compile_cost import RUNS_MANY
from kernelgen.lowering.loop_split import TILE_INNER
from kernelgen.lowering.optimize import TILE_WINDOW

from tools import device_runtime

SHAPE = (3, 64, 96)      # 18432 outputs: 288 threads of 8 x 8


def _blur(x, k: int, mode: str):
  """A k x k box-weighted depthwise blur of x (C, H, W), padded to the same size."""
  c = x.shape[0]
  w = np.arange(1, k * k + 1, dtype=np.float32).reshape(1, 1, k, k) / (k * k * k * k)
  weights = kg.Tensor(np.repeat(w, c, 0), device=x.device)
  if mode == "zero":
    return x.unsqueeze(0).conv2d(weights, padding=k // 2, groups=c)
  padded = x.unsqueeze(1).pad(((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)), mode="edge")
  return padded.conv2d(weights[:1]).squeeze(1)


def _want(x, k: int, mode: str):
  w = np.arange(1, k * k + 1, dtype=np.float64).reshape(k, k) / (k * k * k * k)
  xp = np.pad(x.astype(np.float64), ((0, 0), (k // 2, k // 2), (k // 2, k // 2)),
              mode="constant" if mode == "zero" else "edge")
  win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(1, 2))
  return np.einsum("chwij,ij->chw", win, w)


def _source(out, **options) -> str:
  kernels = kg.compile([out], target="wgsl", **options)
  return kernels[-1].launch.source


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("k", [3, 5, 7])
@pytest.mark.parametrize("mode", ["zero", "edge"])
def test_cpu_adapters_unroll_a_window_whose_rows_share_loads(adapter, k, mode):
  """3x3 (9), 5x5 (25) and 7x7 (49 = TILE_WINDOW) windows: no loop on lavapipe and SwiftShader
  for a kernel run many times (a one-off run may take a smaller tile or the loop, where the
  unrolled window's build passes its budget: test_compile_cost.py), the window's rows in a loop
  under tile_window=False and on other adapters. (These adapters slide such a window down its
  rows by default, lowering/slide.py: slide=False here.)"""
  assert TILE_INNER < 9 and TILE_WINDOW == 49
  x = kg.Tensor(np.ones(SHAPE, np.float32), device="PYTHON")
  out = _blur(x, k, mode)
  assert "for (" not in _source(out, adapter=adapter, runs=RUNS_MANY, slide=False)
  assert "for (" in _source(out, adapter=adapter, tile_window=False, slide=False)
  for other in ("discrete", "integrated", "unknown"):
    assert "for (" in _source(out, adapter=other), other


def test_a_window_over_tile_window_loops():
  """9x9 = 81 > TILE_WINDOW elements: the window's rows loop as before."""
  x = kg.Tensor(np.ones(SHAPE, np.float32), device="PYTHON")
  out = _blur(x, 9, "zero")
  assert _source(out, adapter="lavapipe") == _source(out, adapter="lavapipe", tile_window=False)


@pytest.mark.parametrize("k", [8, 32])
def test_matmul_is_unchanged(k):
  """A matmul's tile rows share the other operand's loads whether the reduction loops or not:
  its kernel is the same with and without tile_window (k = 8 unrolls anyway, 32 loops)."""
  a = kg.Tensor(np.ones((256, k), np.float32), device="PYTHON")
  b = kg.Tensor(np.ones((k, 256), np.float32), device="PYTHON")
  assert _source(a @ b, adapter="lavapipe") == \
    _source(a @ b, adapter="lavapipe", tile_window=False)


@pytest.mark.parametrize("k, mode", [(5, "zero"), (5, "edge"), (3, "edge"), (7, "zero")])
def test_window_values_on_webgpu(k, mode):
  runtime = device_runtime("WEBGPU")
  x = np.random.default_rng(k).random(SHAPE, dtype=np.float32)
  got = _blur(kg.Tensor(x, device="WEBGPU"), k, mode).numpy().reshape(SHAPE)
  want = _want(x, k, mode)
  err = np.abs(got - want).max() / np.abs(want).max()
  assert err <= 1e-5, (k, mode, err, runtime.render_options()["adapter"])


@pytest.mark.parametrize("k, mode", [(5, "edge"), (7, "zero")])
def test_window_values_on_webgpu_for_many_runs(k, mode):
  """Under kg.jit (compiled for many runs: the unrolled windows, whatever their build costs)."""
  device_runtime("WEBGPU")
  x = np.random.default_rng(k).random(SHAPE, dtype=np.float32)
  step = kg.jit(lambda t: _blur(t, k, mode))
  want = _want(x, k, mode)
  for _ in range(2):
    got = step(kg.Tensor(x, device="WEBGPU")).numpy().reshape(SHAPE)
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-5, (k, mode)
