"""A short reduction's window (lowering/optimize._window_tile, option tile_window: both CPU
adapters) unrolls only in a register tile of no fewer outputs than the looped kernel's tile
(issue 42): a first 3x3 conv of 3 channels (27 products per output, at most TILE_WINDOW_WORK
products per thread unrolled) took 4x4 tiles unrolled for many runs where 8x16 looped shares
more loads (PP-OCRv4 detection's stride-2 first conv, lavapipe natively: 10.5 -> 3.3 GPU ms).
The values of the looped layout on WEBGPU against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.compile_cost import RUNS_MANY
from ops_util import on  # noqa: F401  (fixture)


def _first_conv(side: int, x=None, w=None, s=None, b=None):
  """conv 3 -> 16, 3x3, stride 2, times a scale plus a bias per channel (a folded batch norm),
  ReLU."""
  x = kg.Tensor.empty(1, 3, side, side, name="x") if x is None else x
  w = kg.Tensor.empty(16, 3, 3, 3, name="w") if w is None else w
  s = kg.Tensor.empty(16, 1, 1, name="s") if s is None else s
  b = kg.Tensor.empty(16, 1, 1, name="b") if b is None else b
  return (x.conv2d(w, padding=1, stride=2) * s + b).relu()


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("runs", [1, RUNS_MANY])
def test_first_conv_keeps_the_larger_looped_tile(adapter, runs):
  """16 x 160 x 160 outputs in 8x16 tiles looped (3200 threads), not 4x4 unrolled (25600)."""
  (kernel,) = kg.compile(_first_conv(320), target="wgsl", adapter=adapter, runs=runs)
  assert kernel.global_size[0] * kernel.local_size[0] == 16 * 160 * 160 // (8 * 16)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_first_conv_values_on_webgpu(on, adapter):
  on("WEBGPU", adapter=adapter, runs=RUNS_MANY)
  rng = np.random.default_rng(3)
  x = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
  w = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
  s, b = (rng.standard_normal((16, 1, 1)).astype(np.float32) for _ in range(2))
  got = _first_conv(64, *(kg.Tensor(a) for a in (x, w, s, b))).numpy()
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
  want = np.maximum(np.einsum("nchwij,ocij->nohw", win, w) * s + b, 0)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
