"""An adapter's option variant_groups (SwiftShader's: 8; lowering/variants.py): a symbolic
register tile's variants spread their threads over several workgroups, as the static kernels of
those shapes do (an adapter runs a workgroup on one core). Issue 34: SwiftShader ran the m = 1
variant of (m, 512) @ (512, 512) (64 threads in one workgroup) 1.45x the GPU time of the static
kernel (a 1-row matvec in 8 workgroups), and (64, k) @ (k, 64) at k = 1 (the kernel's one
workgroup of 256 threads) 1.34x the static kernel (elementwise, 16 workgroups): that kernel now
spreads at every k (the tile option min_groups). Checked: the workgroups each small value
launches, that adapters without the option keep theirs, and that each spread kernel is right on
PYTHON and WEBGPU (the inputs' padding NaN), one workgroup fewer leaving outputs unwritten."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.uop.program import launch_dispatch, variant_for
from tools import device_runtime, run_named


def _matmul(k: int, n: int, **options):
  x = kg.Tensor.empty(kg.Dim("m", 1, 2048), k, name="x")
  (kernel,) = kg.compile(x @ kg.Tensor.empty(k, n, name="w"), "wgsl", **options)
  return kernel


def _gram(hi: int, **options):
  x = kg.Tensor.empty(64, kg.Dim("k", 1, hi), name="x")
  (kernel,) = kg.compile(x @ x.T, "wgsl", **options)
  return kernel


def _fewer(kernel, groups: int):
  """`kernel` (no variants) launching `groups` workgroups whatever the bound value."""
  launch = dataclasses.replace(kernel.launch, grid=(), dispatch=(groups, 1, 1))
  return dataclasses.replace(kernel, launch=launch, variants=())


def test_swiftshaders_small_m_variants_launch_8_workgroups_of_8():
  kernel = _matmul(512, 512, adapter="swiftshader")
  for m in (1, 2, 3):
    picked = variant_for(kernel, {"m": m})
    # a 1 x 8, 2 x 8, 3 x 8 tile: 64 threads, in 8 workgroups of 8 (was one of 64)
    assert picked is not kernel and picked.local_size == (8, 1, 1), f"m = {m}"
    assert launch_dispatch(picked.launch, {"m": m})[0] == 8, f"m = {m}"


@pytest.mark.parametrize("options", [{"adapter": "lavapipe"}, {}])
def test_adapters_without_the_option_keep_their_workgroups(options):
  picked = variant_for(_matmul(512, 512, **options), {"m": 4})   # (lavapipe's m = 1..3: the
  assert picked.launch.grid                                      # static kernels)
  assert picked.local_size == (64, 1, 1)     # threads.GRID_LOCAL, as before
  assert not _gram(2048, **options).variants


def test_swiftshaders_symbolic_k_kernel_spreads_at_every_k():
  """(64, k) @ (k, 64): its 4 x 4 tiles, 256 threads, run 8 workgroups of 32 at every k (the
  tile option min_groups, threads.spread_groups), so no low-k variant is needed."""
  kernel = _gram(2048, adapter="swiftshader")
  assert kernel.local_size == (32, 1, 1) and kernel.global_size == (8, 1, 1)
  assert not kernel.variants


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_spread_variants_write_every_output(device):
  """Right at m = 1, 3 and k = 1 (the padding NaN); on PYTHON one workgroup fewer leaves
  outputs unwritten."""
  runtime = device_runtime(device)
  k, n = 8, 512
  kernel = _matmul(k, n, adapter="swiftshader")
  w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
  for m in (1, 3):
    picked = variant_for(kernel, {"m": m})
    x = np.full((2048, k), np.nan, np.float32)
    x[:m] = np.random.default_rng(m).standard_normal((m, k))
    groups = launch_dispatch(picked.launch, {"m": m})[0]
    assert groups > 1, f"m = {m}"
    got = run_named(runtime, picked, {"x": x, "w": w}, {"m": m}, out_fill=np.nan)
    np.testing.assert_allclose(got.reshape(2048, n)[:m], x[:m] @ w, rtol=1e-4, atol=1e-4)
    if device == "PYTHON":
      fewer = run_named(runtime, _fewer(picked, groups - 1), {"x": x, "w": w}, {"m": m},
                        out_fill=np.nan)
      assert np.isnan(fewer.reshape(2048, n)[:m]).any(), f"m = {m}"
  variant = _gram(64, adapter="swiftshader")
  x = np.full((64, 64), np.nan, np.float32)
  x[:, :1] = np.random.default_rng(1).standard_normal((64, 1))
  got = run_named(runtime, variant, {"x": x}, {"k": 1}, out_fill=np.nan).reshape(64, 64)
  np.testing.assert_allclose(got, x[:, :1] @ x[:, :1].T, rtol=1e-5, atol=1e-6)
  if device == "PYTHON":
    fewer = run_named(runtime, _fewer(variant, variant.global_size[0] - 1), {"x": x}, {"k": 1},
                      out_fill=np.nan)
    assert np.isnan(fewer).any()
