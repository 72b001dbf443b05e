"""A register-tiled kernel's run-time grid over its symbolic axis (compiler.with_grid,
uop/program.py launch_dispatch) launches exactly the workgroups its tiles need: ceil(S / R) rows
of R x C tiles (S the bound value), T tiles a row, threads in workgroups of L, so
ceil(ceil(S / R) * T / L) workgroups. Where a workgroup covers less than a row (T > L) the grid
rounds S * T up to whole rows (its `unit`) before dividing; it used to launch
ceil((S + R - 1) * T / (R * L)), a workgroup of padding more at some values (issue 34:
lavapipe's m <= 2 variant launched 2 workgroups at m = 2 where one computes both rows, 1.7x the
static kernel's GPU time).

Checked against the kernels themselves on PYTHON, the padding of the input and the whole output
filled with NaN: the grid's workgroups write every wanted output, and one workgroup fewer leaves
one unwritten. Each kernel and variant is right on PYTHON, WEBGPU and PTXSIM (its PTX assembled
by ptxas) at the range's ends and at values that divide no tile."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.uop.program import grid_from_json, grid_json, launch_dispatch, variant_for, \
  with_variants
from tools import device_runtime, ptxas_check, run_named

HI, K, N = 256, 16, 64
VALUES = (1, 2, 3, 4, 5, 7, 9, 16, 17, 33, 100, 255, HI)
W = np.random.default_rng(1).standard_normal((K, N)).astype(np.float32)
ADAPTERS = [{}, {"adapter": "lavapipe"}, {"adapter": "swiftshader"}]


def _rows(v):
  return np.random.default_rng(v).standard_normal((v, K)).astype(np.float32)


def _matmul(target="wgsl", **options):
  x = kg.Tensor.empty(kg.Dim("m", 1, HI), K, name="x")
  (kernel,) = kg.compile(x @ kg.Tensor.empty(K, N, name="w"), target, **options)
  return kernel


def _run(runtime, kernel, v: int) -> np.ndarray:
  """`kernel` on `runtime` at m = v, the rows past v and the whole output NaN: (HI, N)."""
  data = {"x": np.full((HI, K), np.nan, np.float32), "w": W}
  data["x"][:v] = _rows(v)
  return run_named(runtime, kernel, data, {"m": v}, out_fill=np.nan).reshape(HI, N)


def _launching(kernel, workgroups: int):
  """`kernel` (no variants) launching `workgroups` workgroups whatever the bound value."""
  launch = dataclasses.replace(kernel.launch, grid=(), dispatch=(workgroups, 1, 1))
  return dataclasses.replace(kernel, launch=launch, variants=())


@pytest.mark.parametrize("options", ADAPTERS)
def test_the_grid_launches_exactly_the_workgroups_the_tiles_need(options):
  kernel = _matmul(**options)
  # a grid rounded to whole rows of tiles: a variant whose workgroups cover less than a row
  assert any(len(each.launch.grid[0]) == 4 for each in with_variants(kernel))
  runtime = device_runtime("PYTHON")
  for v in VALUES:
    picked = variant_for(kernel, {"m": v})
    x = launch_dispatch(picked.launch, {"m": v})[0]
    want = _rows(v) @ W
    np.testing.assert_allclose(_run(runtime, picked, v)[:v], want, rtol=1e-4, atol=1e-4,
                               err_msg=f"m = {v}")
    if x > 1:
      fewer = _run(runtime, _launching(picked, x - 1), v)[:v]
      assert np.isnan(fewer).any(), f"m = {v}: {x - 1} workgroups computed every row"


def test_a_grid_with_a_unit_survives_json():
  # (m = 1's static kernel has none, graph/at_value.py; an elementwise kernel's has no unit)
  (flat,) = kg.compile(kg.Tensor.empty(kg.Dim("m", 1, HI), K, name="x") * 2, "wgsl")
  grids = [each.launch.grid for each in with_variants(_matmul(adapter="lavapipe"))
           if each.launch.grid] + [flat.launch.grid]
  assert any(len(g[0]) == 4 for g in grids) and any(len(g[0]) == 3 for g in grids)
  assert [grid_from_json(grid_json(g)) for g in grids] == grids


@pytest.mark.parametrize("options", ADAPTERS[1:])
def test_each_variant_is_right_on_webgpu(options):
  runtime = device_runtime("WEBGPU")
  kernel = _matmul(**options)
  for v in VALUES:
    np.testing.assert_allclose(_run(runtime, kernel, v)[:v], _rows(v) @ W, rtol=1e-4,
                               atol=1e-4, err_msg=f"m = {v}")


def test_each_ptx_variant_assembles_and_is_right_on_ptxsim():
  kernel = _matmul("ptx", arch="sm_80", stage=False)   # (PTX stages matmuls by default: no grid)
  assert any(len(each.launch.grid[0]) == 4 for each in with_variants(kernel))
  for each in with_variants(kernel):
    ptxas_check(each.source, "sm_80")
  runtime = device_runtime("PTXSIM")
  for v in (1, 2, 3, 17, 255, HI):
    np.testing.assert_allclose(_run(runtime, kernel, v)[:v], _rows(v) @ W, rtol=1e-4,
                               atol=1e-4, err_msg=f"m = {v}")
