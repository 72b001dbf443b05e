"""The conv2d a one-off run takes on SwiftShader (plain 8x8 tiles, capped by its work's GPU time:
lowering/compile_cost.py work_ms) and the one many runs take (16x8 unrolled) compute the same
values as numpy, run on the WEBGPU device here (their WGSL runs on any adapter)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.compile_cost import RUNS_MANY

from tools import device_runtime, run_named


def _want(x, w):
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
  return np.einsum("nchwij,ocij->nohw", win, w.astype(np.float64))


@pytest.mark.parametrize("runs", [1, RUNS_MANY])
def test_swiftshader_conv_values(runs):
  runtime = device_runtime("WEBGPU")
  rng = np.random.default_rng(runs)
  x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
  w = (rng.standard_normal((64, 64, 3, 3)) * 0.1).astype(np.float32)
  out = kg.Tensor(x, device="PYTHON").conv2d(kg.Tensor(w, device="PYTHON"), padding=1)
  kernel, = kg.compile([out], target="wgsl", adapter="swiftshader", runs=runs)
  assert kernel.capped == (runs == 1)
  got = run_named(runtime, kernel, {"in1": x, "in2": w}, {}, out_fill=np.nan)
  want = _want(x, w)
  assert np.abs(got.reshape(want.shape) - want).max() <= 1e-4 * np.abs(want).max()
