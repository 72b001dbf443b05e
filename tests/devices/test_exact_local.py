"""Option exact_local (issue 42; lowering/threads.py EXACT_LOCAL, both CPU adapters' register
tiles): a register-tiled kernel whose threads no preferred workgroup size divides takes a
workgroup of a multiple of 8 threads that divides them, instead of 64 threads with the last
workgroup gated (a bounds check on every load of the tile's loop: 1.5x on lavapipe for
PP-OCRv4 detection's 3x3 convs 96 -> 24 channels at 80x80, 1200 threads of 8x16 tiles). What it
changes in the launch and the WGSL, where it applies, and that the kernels compute numpy's values
(PYTHON's interpreter with the same layout forced, natively on WEBGPU under both CPU adapters'
tables)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.compile_cost import RUNS_MANY
from kernelgen.lowering.threads import local_size
from ops_util import on  # noqa: F401  (fixture)


def conv_kernel(ci: int, co: int, hw: int, **options):
  x, w = kg.Tensor.empty(1, ci, hw, hw, name="x"), kg.Tensor.empty(co, ci, 3, 3, name="w")
  (k,) = kg.compile(x.conv2d(w, padding=1), target="wgsl", runs=RUNS_MANY, **options)
  return k


@pytest.mark.parametrize("n, lanes, want", [
  (1200, 8, 48),     # PP-OCRv4's 96 -> 24 conv: 1200 threads, 48 x 25 workgroups
  (600, 8, 40),      # 40 x 15
  (1200, 0, 64),     # without the option: 64 threads, the 19th workgroup gated
  (1208, 8, 64),     # 8 x 151: only 8 divides it, below 2 * lanes: gated as before
  (800, 8, 32),      # a preferred size divides it: unchanged
  (40, 8, 40)])      # fewer than 64: one workgroup of exactly n, as before
def test_local_size_divides_the_threads_with_lanes(n, lanes, want):
  assert local_size(n, 256, lanes) == want


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_ppocr_conv_96_to_24_workgroups_are_not_gated(adapter):
  """PP-OCRv4 detection's 3x3 conv 96 -> 24 channels at 80x80: 8x16 tiles, 1200 threads in
  workgroups of 48 with no bounds check on the thread index (before: 64, `v < 1200i` guarding
  every load); a discrete adapter's table keeps 64 gated."""
  k = conv_kernel(96, 24, 80, adapter=adapter)
  assert k.local_size == (48, 1, 1) and k.global_size == (25, 1, 1)
  assert "< 1200i" not in k.launch.source
  gated = conv_kernel(96, 24, 80, adapter=adapter, exact_local=0)
  assert gated.local_size == (64, 1, 1) and "< 1200i" in gated.launch.source
  assert conv_kernel(96, 24, 80, adapter="discrete").local_size[0] % 32 == 0


def _bn_relu_conv(x, w, mean, var, scale, bias, tensor):
  y = tensor(x).conv2d(tensor(w), padding=1)
  shape = (1, -1, 1, 1)
  norm = (y - tensor(mean).reshape(shape)) / (tensor(var).reshape(shape) + 1e-5).sqrt()
  return (norm * tensor(scale).reshape(shape) + tensor(bias).reshape(shape)).relu()


def _want(x, w, mean, var, scale, bias):
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
  y = np.einsum("nchwij,ocij->nohw", win, w)
  s = (1, -1, 1, 1)
  y = (y - mean.reshape(s)) / np.sqrt(var.reshape(s) + 1e-5) * scale.reshape(s) + bias.reshape(s)
  return np.maximum(y, 0)


def _operands(ci: int, co: int, hw: int):
  rng = np.random.default_rng(42)
  return (rng.standard_normal((1, ci, hw, hw), np.float32),
          rng.standard_normal((co, ci, 3, 3), np.float32) * 0.2,
          rng.standard_normal(co).astype(np.float32), rng.random(co, np.float32) + 0.5,
          rng.standard_normal(co).astype(np.float32), rng.standard_normal(co).astype(np.float32))


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("ci, co, hw", [(96, 24, 80), (4, 24, 40)])
def test_ungated_tile_conv_computes_right_on_webgpu(on, adapter, ci, co, hw):
  """Natively under both CPU adapters' tables (runs=RUNS_MANY: the unrolled long tiles where
  they apply): the conv + batch norm + ReLU as PP-OCRv4 has it, and a small one (600 threads of
  8x8 tiles: workgroups of 40), against numpy."""
  on("WEBGPU", adapter=adapter, runs=RUNS_MANY)
  ops = _operands(ci, co, hw)
  got = _bn_relu_conv(*ops, kg.Tensor).numpy()
  np.testing.assert_allclose(got, _want(*ops), rtol=1e-4, atol=1e-4)


def test_ungated_tile_conv_computes_right_on_python(on):
  """The reference interpreter runs the same layout (8x8 tiles, 600 threads in workgroups of
  40, forced) and agrees with numpy."""
  on("PYTHON", tile=(8, 8), local=40)
  ops = _operands(4, 24, 40)
  (k,) = kg.compile(_bn_relu_conv(*ops, kg.Tensor), target="python", tile=(8, 8), local=40)
  assert k.local_size == (40, 1, 1) and k.global_size == (15, 1, 1)
  got = _bn_relu_conv(*ops, kg.Tensor).numpy()
  np.testing.assert_allclose(got, _want(*ops), rtol=1e-4, atol=1e-4)
