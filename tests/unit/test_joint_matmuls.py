"""Two matmuls one kernel would compute fused (an MLP's silu(gate) * up): each gets a kernel of
one reduction, so the optimizer can give it register tiles (schedule._joint_matmuls)."""
from __future__ import annotations

import numpy as np
import pytest

from tools import device_runtime
from kernelgen import Tensor
from kernelgen.graph.schedule import TILED_REDUCE_MIN, kernel_reduces, schedule
from kernelgen.lowering.optimize import optimize
from kernelgen.render.targets import WGSL


def swiglu(rows: int, cols: int, device: str):
  """(silu(x @ wg) * (x @ wu), its numpy value): x (rows, 32), wg and wu (32, cols)."""
  rng = np.random.default_rng(rows)
  x, wg, wu = (rng.standard_normal(s).astype(np.float32) for s in
               ((rows, 32), (32, cols), (32, cols)))
  xt, gt, ut = (Tensor(a, device=device) for a in (x, wg, wu))
  g, u = x.astype(np.float64) @ wg, x.astype(np.float64) @ wu
  return (xt @ gt).silu() * (xt @ ut), g / (1 + np.exp(-g)) * u


def test_an_mlps_gate_and_up_are_two_tiled_kernels():
  y, _ = swiglu(64, 64, "PYTHON")                  # 4096 outputs: matmuls (TILED_REDUCE_MIN)
  items = schedule([y.node])
  assert [len(kernel_reduces(item)) for item in items] == [1, 1]
  assert all(optimize(item, WGSL).tile for item in items)


def test_small_projections_stay_one_kernel():
  y, _ = swiglu(8, 64, "PYTHON")                   # 512 outputs: below TILED_REDUCE_MIN
  assert 8 * 64 < TILED_REDUCE_MIN
  (item,) = schedule([y.node])
  assert len(kernel_reduces(item)) == 2


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("rows,cols", [(8, 64), (64, 64)])
def test_swiglu_values(device, rows, cols):
  if device == "WEBGPU":
    device_runtime(device)
  y, want = swiglu(rows, cols, device)
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
