"""Kernels of the light ONNX models' shapes that once took minutes on lavapipe (see
tests/onnx_import/onnx_light_times.txt): their WGSL's shape (counted, never timed) and their values against
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
from tools import device_runtime


@pytest.fixture(scope="module")
def webgpu():
  device_runtime("WEBGPU")
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
  # the concat is read by overlapping windows: a kernel of its own (REREAD_LOADS), whose loads
  # are gated by the concat's masks; the pool's are gated by its -inf padding
  source = "\n".join(k.source for k in kernels)
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


# ---- an expensive fused producer under a pool or conv is computed once, not once per read ----

def _lrn(x, size=5, alpha=1e-4, beta=0.75, bias=1.0):
  """ONNX LRN across channels, as kernelgen's ONNX front end builds it: shifted slices summed."""
  c = x.shape[1]
  padded = (x * x).pad(((0, 0), (size // 2, size // 2), (0, 0), (0, 0)))
  total = None
  for k in range(size):
    part = padded.shrink(((0, x.shape[0]), (k, k + c), (0, x.shape[2]), (0, x.shape[3])))
    total = part if total is None else total + part
  return x / (bias + (alpha / size) * total) ** beta


def _numpy_lrn(x, size=5, alpha=1e-4, beta=0.75, bias=1.0):
  c = x.shape[1]
  padded = np.pad(x * x, ((0, 0), (size // 2, size // 2), (0, 0), (0, 0)))
  total = sum(padded[:, k:k + c] for k in range(size))
  return x / (bias + (alpha / size) * total) ** beta


def _numpy_max_pool(x, k, s):
  n, c, h, w = x.shape
  oh, ow = (h - k) // s + 1, (w - k) // s + 1
  return np.max([x[:, :, i:i + s * oh:s, j:j + s * ow:s] for i in range(k) for j in range(k)],
                axis=0)


def _kernels(y):
  return [k for k in kg.compile(y, target="wgsl") if not k.name.startswith("E_1_16_13_13_n")]


def test_lrn_under_a_pool_is_its_own_kernel_and_matches_numpy():
  """relu(conv + bias) -> LRN -> 3x3/2 max pool (AlexNet, Inception v1): the LRN reads 12 buffer
  elements per element (the 5 channel neighbours and itself, each conv + bias); fused into the
  pool it was recomputed for every window that holds it (and register-tiled, a 16,000-line
  kernel). It is a kernel of its own: the pool reads it, one load per window element."""
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((1, 16, 13, 13)), rng.standard_normal(16)
  a, b = a.astype(np.float32), b.astype(np.float32)
  conv = kg.Tensor(a).contiguous()     # a kernel's output, as the conv before it
  y = _lrn((conv + kg.Tensor(b).reshape(1, -1, 1, 1)).relu()).max_pool2d(3, 2)
  kernels = kg.compile(y, target="wgsl")
  assert [k.name.split("_")[0] for k in kernels] == ["E", "E", "r"], [k.name for k in kernels]
  pool = kernels[-1].source
  assert pool.count("b1_") + pool.count("b2_") <= 2 * 9 + 4, "the pool recomputes the LRN"
  want = _numpy_max_pool(_numpy_lrn(np.maximum(a + b.reshape(1, -1, 1, 1), 0)), 3, 2)
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)


def test_cheap_producer_under_a_pool_stays_fused():
  """relu(conv + bias) (2 loads) and batchnorm (5) under a pool stay in the pool's kernel."""
  rng = np.random.default_rng(1)
  a = rng.standard_normal((1, 16, 13, 13)).astype(np.float32)
  mean, var, scale, shift = (rng.uniform(0.5, 1.5, 16).astype(np.float32) for _ in range(4))
  conv = kg.Tensor(a).contiguous()
  col = lambda v: kg.Tensor(v).reshape(1, -1, 1, 1)  # noqa: E731
  bn = ((conv - col(mean)) / (col(var) + 1e-5).sqrt() * col(scale) + col(shift)).relu()
  y = bn.max_pool2d(3, 2)
  assert [k.name.split("_")[0] for k in kg.compile(y, target="wgsl")] == ["E", "r"]
  c = lambda v: v.reshape(1, -1, 1, 1)  # noqa: E731
  want_bn = np.maximum((a - c(mean)) / np.sqrt(c(var) + 1e-5) * c(scale) + c(shift), 0)
  np.testing.assert_allclose(y.numpy(), _numpy_max_pool(want_bn, 3, 2), rtol=1e-5, atol=1e-6)
