"""Kernels of the light ONNX models' shapes that once took minutes on lavapipe (see
tests/onnx_light_times.txt): their WGSL's shape (counted, never timed) and their values against
numpy on WEBGPU.

lavapipe compiles a kernel with LLVM at its first dispatch, in time superlinear in the kernel's
basic blocks; a register-tiled 3x3 max pool over a 4-way concat (Inception's pool branch) had a
branch per gated load, ~1300 of them: 45-160 s to compile one kernel.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import kernelgen as kg
from tools import missing_tool


@pytest.fixture(scope="module")
def webgpu():
  try:
    kg.Device["WEBGPU"]
  except kg.KernelgenError as error:
    missing_tool("device WEBGPU", f"pip install wgpu; apt-get install mesa-vulkan-drivers "
                 f"({error})")
  return "WEBGPU"


def _concat_pool(parts, biases):
  """max_pool2d(3, 1, 1) of the channel concat of relu(part + bias), as Inception's pool branch."""
  x = kg.cat([(p + b.reshape(1, -1, 1, 1)).relu() for p, b in zip(parts, biases)], axis=1)
  return x.max_pool2d(3, 1, 1)


def _numpy_concat_pool(parts, biases):
  x = np.concatenate([np.maximum(p + b.reshape(1, -1, 1, 1), 0) for p, b in zip(parts, biases)],
                     axis=1)
  n, c, h, w = x.shape
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
  return np.max([xp[:, :, i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=0)


@pytest.mark.parametrize("side", [9, 27])     # 27: register-tiled windows; 9: not
def test_gated_loads_are_selects_not_branches(side):
  chans = (8, 16, 4, 4)
  # buffers (kernels of their own), read through the concat's masks: gated loads
  parts = [kg.Tensor.rand(1, c, side, side).contiguous() for c in chans]
  biases = [kg.Tensor.rand(c).contiguous() for c in chans]
  kernels = kg.compile(_concat_pool(parts, biases), target="wgsl")
  pools = [k for k in kernels if k.name.endswith("__3_3")]
  assert len(pools) == 1
  source = pools[0].source
  assert not re.search(r"if \([^)]*\) \{ v\d+ = ", source), "a gated load became a branch"
  assert source.count("select(") >= 2 * len(chans)


@pytest.mark.parametrize("side", [9, 27])
def test_concat_pool_matches_numpy_on_webgpu(side, webgpu):
  rng = np.random.default_rng(side)
  chans = (8, 16, 4, 4)
  parts = [rng.standard_normal((1, c, side, side)).astype(np.float32) for c in chans]
  biases = [rng.standard_normal(c).astype(np.float32) for c in chans]
  got = _concat_pool([kg.Tensor(p, device=webgpu) for p in parts],
                     [kg.Tensor(b, device=webgpu) for b in biases]).numpy()
  np.testing.assert_array_equal(got, _numpy_concat_pool(parts, biases))
