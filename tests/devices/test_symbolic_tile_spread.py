"""An adapter's option variant_groups (SwiftShader's: 8; lowering/variants.py): a symbolic
register tile's variants spread their threads over several workgroups, as the static kernels of
those shapes do (an adapter runs a workgroup on one core). Issue 34: SwiftShader ran the m = 1
variant of (m, 512) @ (512, 512) (64 threads in one workgroup) 1.45x the GPU time of the static
kernel (a 1-row matvec in 8 workgroups), and (64, k) @ (k, 64) at k = 1 (the kernel's one
workgroup of 256 threads) 1.34x the static kernel (elementwise, 16 workgroups): that kernel now
spreads at every k (the tile option min_groups). Checked: the workgroups each small value
launches, that adapters without the option keep theirs, and that each spread kernel is right on
PYTHON and WEBGPU (the inputs' padding NaN), one workgroup fewer leaving outputs unwritten.
Lavapipe's variants take the static kernel's workgroups (options exact_local and min_groups, at
the values each is sized for): its m = 2 and 3 variants ran in one workgroup of 64 where the
static kernels take 4 of 16, 1.50x and 1.51x their GPU time at idle (bench/symbolic_static.py);
checked: their launch, and the symbolic matmul against numpy from m = 1 to the range's top."""
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
  assert picked.launch.grid                                      # static kernels' workgroups)
  assert picked.local_size == (64, 1, 1)     # threads.GRID_LOCAL, as before
  assert not _gram(2048, **options).variants


@pytest.mark.parametrize("m", [2, 3])
def test_lavapipes_small_m_variants_launch_as_the_static_kernels(m):
  """A 2 x 8 (3 x 8) tile, 64 threads: 4 workgroups of 16, as the static kernel of (m, 512)
  @ (512, 512) (was one of 64: one CPU of lavapipe's pool)."""
  picked = variant_for(_matmul(512, 512, adapter="lavapipe"), {"m": m})
  x, w = kg.Tensor.empty(m, 512, name="x"), kg.Tensor.empty(512, 512, name="w")
  (static,) = kg.compile(x @ w, "wgsl", adapter="lavapipe")
  assert picked.launch.grid and picked.local_size == static.local_size == (16, 1, 1)
  assert launch_dispatch(picked.launch, {"m": m}) == static.global_size == (4, 1, 1)


@pytest.mark.parametrize("device, k, hi", [("PYTHON", 8, 64), ("WEBGPU", 512, 2048)])
def test_lavapipes_symbolic_m_matmul_is_right_from_1_to_the_top(device, k, hi):
  """(m, k) @ (k, 512) in lavapipe's kernel and variants, the inputs' padding NaN (PYTHON: a
  short k, the interpreter's time)."""
  runtime = device_runtime(device)
  kernel = kg.compile(kg.Tensor.empty(kg.Dim("m", 1, hi), k, name="x") @
                      kg.Tensor.empty(k, 512, name="w"), "wgsl", adapter="lavapipe")[0]
  assert [most for _, most, _ in kernel.variants][:3] == [1, 2, 3]
  w = np.random.default_rng(0).standard_normal((k, 512)).astype(np.float32)
  for m in (1, 2, 3, 4, 5, 17, hi):
    x = np.full((hi, k), np.nan, np.float32)
    x[:m] = np.random.default_rng(m).standard_normal((m, k))
    got = run_named(runtime, kernel, {"x": x, "w": w}, {"m": m}, out_fill=np.nan)
    np.testing.assert_allclose(got.reshape(hi, 512)[:m], x[:m] @ w, rtol=1e-4, atol=1e-4,
                               err_msg=f"m = {m}")


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
