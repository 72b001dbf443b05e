"""Option tile_rate (lavapipe's table, render/wgsl/adapters.py; issue 37): a one-off run takes the
long register tile whose estimated build plus run is the least (lowering/compile_cost.py
first_result_ms), not the largest: matmul 1024^3 on lavapipe compiles 8x8 unrolled tiles
(about 300 lines of WGSL) instead of 16x16 (about 1000), marked capped so that a plan realized
again swaps in the 16x16 kernel that many runs take. The kernels compute numpy's values, run on
the WEBGPU device here (their WGSL runs on any adapter)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.errors import UnsupportedError
from kernelgen.lowering.compile_cost import RUNS_MANY

from tools import device_runtime, run_named


def _matmul(m=1024, k=1024, n=1024):
  a, b = kg.Tensor.empty(m, k, name="a"), kg.Tensor.empty(k, n, name="b")
  return a @ b


def kernel(tensor, **options):
  (k,) = kg.compile(tensor, target="wgsl", **options)
  return k


def test_one_off_matmul_takes_the_quicker_tile():
  mm = _matmul()
  one_off = kernel(mm, adapter="lavapipe")
  assert one_off.capped
  assert one_off.launch.source == kernel(mm, adapter="lavapipe", tile=(8, 8)).launch.source
  assert one_off.launch.source.count("\n") < 400


def test_many_runs_keep_the_largest_tile():
  mm = _matmul()
  many = kernel(mm, adapter="lavapipe", runs=RUNS_MANY)
  assert not many.capped
  assert many.launch.source == kernel(mm, adapter="lavapipe", tile=(16, 16)).launch.source


def test_tile_rate_zero_keeps_the_former_choice():
  mm = _matmul()
  before = kernel(mm, adapter="lavapipe", tile_rate=0)
  assert not before.capped
  assert before.launch.source == kernel(mm, adapter="lavapipe", runs=RUNS_MANY).launch.source


def test_more_work_takes_a_larger_tile():
  """2048^3 (8x the work) wins back more build: a tile between 8x8 and 16x16."""
  src = kernel(_matmul(2048, 2048, 2048), adapter="lavapipe").launch.source
  assert src != kernel(_matmul(2048, 2048, 2048), adapter="lavapipe", tile=(8, 8)).launch.source
  assert src != kernel(_matmul(2048, 2048, 2048), adapter="lavapipe",
                       tile=(16, 16)).launch.source


def test_tile_rate_must_be_an_int():
  with pytest.raises(UnsupportedError, match="tile_rate"):
    kernel(_matmul(), adapter="lavapipe", tile_rate=2.5)


@pytest.mark.parametrize("runs", [1, RUNS_MANY])
def test_lavapipe_matmul_values(runs):
  runtime = device_runtime("WEBGPU")
  rng = np.random.default_rng(runs)
  a = rng.standard_normal((1024, 1024)).astype(np.float32)
  b = rng.standard_normal((1024, 1024)).astype(np.float32)
  out = kg.Tensor(a, device="PYTHON") @ kg.Tensor(b, device="PYTHON")
  compiled = kernel(out, adapter="lavapipe", runs=runs)
  assert compiled.capped == (runs == 1)
  got = run_named(runtime, compiled, {"in1": a, "in2": b}, {}, out_fill=np.nan)
  want = a.astype(np.float64) @ b.astype(np.float64)
  assert np.abs(got.reshape(want.shape) - want).max() <= 1e-4 * np.abs(want).max()
