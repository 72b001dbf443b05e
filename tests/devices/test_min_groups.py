"""Option min_groups (issue 42; lowering/threads.py, both CPU adapters' register tiles and slid
windows): a kernel whose workgroup size leaves fewer than 8 workgroups takes smaller workgroups
(multiples of the 8 lanes dividing its threads), since a CPU adapter runs each workgroup on one
core: ddddocr's 3x3 conv 64 -> 256 channels at 8x20 ran as one workgroup, PP-OCRv4 detection's
5x5 depthwise convs at 10x10 as three. What it changes in the launch, where it does not apply,
and that the kernels compute numpy's values on both sides of the threshold (PYTHON with the same
layout forced, natively on WEBGPU under both CPU adapters' tables)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.compile_cost import RUNS_MANY
from kernelgen.lowering.threads import local_size, spread_groups
from ops_util import on  # noqa: F401  (fixture)


@pytest.mark.parametrize("n, size, want", [
  (256, 256, 32),    # one workgroup of 256 -> 8 of 32
  (384, 128, 48),    # 3 of 128 -> 8 of 48
  (768, 256, 96),    # 3 of 256 -> 8 of 96
  (1200, 48, 48),    # 25 workgroups already: unchanged
  (60, 60, 60),      # no multiple of 8 (at least 16) divides 60: one workgroup, as before
  (48, 48, 16)])     # 16 threads at the least: 3 workgroups, the most there can be
def test_spread_groups_cuts_the_workgroup_to_leave_eight(n, size, want):
  assert spread_groups(n, size, 8, 8) == want


def test_local_size_spreads_only_with_lanes_and_groups():
  assert local_size(256, 256, 8, 8) == 32
  assert local_size(256, 256, 8) == 256 and local_size(256, 256, 0, 8) == 256


def _conv(ci: int, co: int, h: int, w: int, k: int, groups: int, **options):
  x = kg.Tensor.empty(1, ci, h, w, name="x")
  wt = kg.Tensor.empty(co, ci // groups, k, k, name="w")
  (kernel,) = kg.compile(x.conv2d(wt, padding=k // 2, groups=groups), target="wgsl",
                         runs=RUNS_MANY, **options)
  return kernel


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_ddddocr_conv_spreads_over_eight_workgroups(adapter):
  """ddddocr's 3x3 conv 64 -> 256 at 8x20: its 256 threads of register tiles in 8 workgroups of
  32 (before: one of 256); without the option, or on a discrete adapter's table, one."""
  k = _conv(64, 256, 8, 20, 3, 1, adapter=adapter)
  assert k.global_size == (8, 1, 1) and k.local_size == (32, 1, 1)
  assert _conv(64, 256, 8, 20, 3, 1, adapter=adapter, min_groups=0).global_size == (1, 1, 1)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_ppocr_depthwise_5x5_spreads_over_eight_workgroups(adapter):
  """PP-OCRv4 detection's slid 5x5 depthwise conv of 384 channels at 10x10: 384 threads (C = 10
  columns each: slide.whole_blocks) in 8 workgroups of 48 (before: 3 of 128); at 80x80 its
  workgroups already number more: unchanged."""
  k = _conv(384, 384, 10, 10, 5, 384, adapter=adapter)
  assert k.global_size == (8, 1, 1) and k.local_size == (48, 1, 1)
  assert _conv(384, 384, 10, 10, 5, 384, adapter=adapter, min_groups=0).global_size == (3, 1, 1)
  big, before = (_conv(96, 96, 80, 80, 5, 96, adapter=adapter, min_groups=m) for m in (8, 0))
  assert big.global_size == before.global_size and big.global_size[0] >= 8


def _want(x, w, groups: int):
  k = w.shape[-1]
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
  c, o = x.shape[1] // groups, w.shape[0] // groups
  return np.concatenate([np.einsum("nchwij,ocij->nohw", win[:, g * c:(g + 1) * c],
                                   w[g * o:(g + 1) * o]) for g in range(groups)], axis=1)


# (ci, co, h, w, k, groups): spread (fewer than 8 workgroups before) and not (more already)
CONVS = [(64, 256, 8, 20, 3, 1), (16, 32, 16, 40, 3, 1), (192, 192, 10, 10, 5, 192),
         (32, 32, 40, 40, 5, 32)]


def _operands(ci, co, h, w, k, groups):
  rng = np.random.default_rng(7)
  return (rng.standard_normal((1, ci, h, w), np.float32),
          rng.standard_normal((co, ci // groups, k, k), np.float32) * 0.2)


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
@pytest.mark.parametrize("spec", CONVS)
def test_spread_convs_compute_right_on_webgpu(on, adapter, spec):
  on("WEBGPU", adapter=adapter, runs=RUNS_MANY)
  x, w = _operands(*spec)
  got = kg.Tensor(x).conv2d(kg.Tensor(w), padding=spec[4] // 2, groups=spec[5]).numpy()
  np.testing.assert_allclose(got, _want(x, w, spec[5]), rtol=1e-4, atol=1e-4)


def test_spread_depthwise_computes_right_on_python(on):
  """The reference interpreter runs a spread slide (96 channels at 10x10, C = 10 columns: 96
  threads, 3 workgroups of 32 before, now 6 of 16, the most a multiple of the lanes allows, as
  the CPU adapters' tables choose it) and agrees with numpy."""
  spec = (96, 96, 10, 10, 5, 96)
  assert _conv(*spec, adapter="lavapipe").global_size == (6, 1, 1)
  on("PYTHON", slide=True, exact_local=8, min_groups=8)
  x, w = _operands(*spec)
  (k,) = kg.compile(kg.Tensor(x).conv2d(kg.Tensor(w), padding=2, groups=96), target="python",
                    slide=True, exact_local=8, min_groups=8)
  assert k.local_size == (16, 1, 1) and k.global_size == (6, 1, 1)
  got = kg.Tensor(x).conv2d(kg.Tensor(w), padding=2, groups=96).numpy()
  np.testing.assert_allclose(got, _want(x, w, 96), rtol=1e-4, atol=1e-4)
