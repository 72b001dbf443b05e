"""Option small_tiles (lavapipe's and SwiftShader's default for matmul-like kernels, render/wgsl/adapters.py;
lowering/optimize.py _small_tile): a reduction with few outputs (under TILE_MIN_SIZE) over a
reduction long enough to be grouped (GROUP_MIN_REDUCE) takes a register tile of outputs that share
loads instead of a workgroup per output; the values on the WEBGPU device (lavapipe here) match
numpy. The option exists on WGSL only: PYTHON and PTX never read it (their kernels are
unchanged)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.optimize import GROUP_MIN_REDUCE
from kernelgen.lowering.tile_shape import TILE_MIN_SIZE

from ops_util import on  # noqa: F401 (a fixture)
from tools import device_runtime


def _dispatch(k, m, **options):
  a = kg.Tensor(np.ones((32, k), np.float32), device="PYTHON")
  b = kg.Tensor(np.ones((k, m), np.float32), device="PYTHON")
  (kernel,) = kg.compile([a @ b], target="wgsl", **options)
  return kernel.launch.dispatch[0]


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("k, m, tiled", [(3136, 10, True), (256, 15, True), (255, 10, False)])
def test_cpu_adapters_tile_a_long_reduction_with_few_outputs(adapter, k, m, tiled):
  """32 x m outputs (< TILE_MIN_SIZE): from GROUP_MIN_REDUCE = 256 reduced elements, a
  workgroup per output elsewhere; on lavapipe one workgroup of 8x8-output threads. Under 256
  both keep one thread per output (5 workgroups of 64)."""
  assert GROUP_MIN_REDUCE == 256 and 32 * m < TILE_MIN_SIZE
  grouped = _dispatch(k, m, adapter="discrete")
  assert grouped == (32 * m if k >= GROUP_MIN_REDUCE else 32 * m // 64)
  assert _dispatch(k, m, adapter=adapter) == (1 if tiled else grouped)
  assert _dispatch(k, m, adapter=adapter, small_tiles=False) == grouped


@pytest.mark.parametrize("shape", [(32, 3136, 10), (33, 300, 13)])
def test_small_tiles_values_on_webgpu(shape):
  runtime = device_runtime("WEBGPU")
  n, k, m = shape
  rng = np.random.default_rng(k)
  a, b = rng.standard_normal((n, k)), rng.standard_normal((k, m))
  out = kg.Tensor(a.astype(np.float32), device="WEBGPU").relu() @ \
    kg.Tensor(b.astype(np.float32), device="WEBGPU")
  want = np.maximum(a.astype(np.float32), 0).astype(np.float64) @ b.astype(np.float32)
  err = np.abs(out.numpy() - want).max() / np.abs(want).max()
  assert err <= 1e-5, (shape, err, runtime.render_options()["adapter"])


def test_swiftshader_tiles_silero_vads_spectrogram_conv(on):
  """Silero VAD's STFT: 258 filters of 256 taps at stride 128 over a 640-sample chunk (1032
  outputs). SwiftShader ran it as 1032 workgroups of 16 lanes folding through workgroup memory
  (6-10 ms natively, load 11-17); tiled, no workgroup fold, 0.3-0.7 ms. Values as numpy's on the
  WEBGPU device with SwiftShader's options."""
  rng = np.random.default_rng(7)
  x, w = rng.standard_normal((1, 1, 640)), rng.standard_normal((258, 1, 256))
  xt, wt = kg.Tensor(x.astype(np.float32)), kg.Tensor(w.astype(np.float32))
  (kernel,) = kg.compile([xt.conv1d(wt, stride=128)], target="wgsl", adapter="swiftshader")
  assert "workgroupBarrier" not in kernel.source and kernel.launch.dispatch[0] < 8
  on("WEBGPU", adapter="swiftshader")
  got = kg.Tensor(x.astype(np.float32)).conv1d(kg.Tensor(w.astype(np.float32)), stride=128)
  frames = np.stack([x[0, 0, 128 * i:128 * i + 256] for i in range(4)])
  want = (frames.astype(np.float32).astype(np.float64) @ w[:, 0].astype(np.float32).T).T
  np.testing.assert_allclose(got.numpy()[0], want, rtol=1e-4, atol=1e-4)
