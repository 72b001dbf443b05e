"""Short reductions recomputed where they are read (graph/schedule.py RECOMPUTE_LENGTH): a sum
or max over at most 4 elements, read per element by a kernel that evaluates it at most 4 times
per output, is unrolled in that kernel instead of being a kernel of its own. The values match
numpy on every device (the interpreter, the PTX simulator, wgpu on lavapipe), NaN and inf
included, and the kernel counts show what fused and what did not."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

LUMA = (0.299, 0.587, 0.114)
SEPIA = ((0.393, 0.769, 0.189), (0.349, 0.686, 0.168), (0.272, 0.534, 0.131))


def wgsl_kernels(t) -> list[str]:
  return [k.name for k in kg.compile(t, target="wgsl")]


def chain(T, img):
  """The image-filter demo's gray level and sepia (bench/peers.py chain) on img (H, W, 3)."""
  gray = (img * T(list(LUMA))).sum(axis=-1, keepdim=True)
  mixed = gray + (img - gray) * 1.2
  return mixed @ T([list(r) for r in SEPIA]).T


def test_the_gray_level_is_recomputed_in_the_sepia_kernel(device):
  img = np.random.default_rng(0).random((48, 64, 3), dtype=np.float32)
  out = chain(kg.Tensor, kg.Tensor(img))
  assert len(wgsl_kernels(out)) == 1       # gray level, colour and sepia: one kernel
  gray = (img.astype(np.float64) * LUMA).sum(-1, keepdims=True)
  want = (gray + (img - gray) * 1.2) @ np.array(SEPIA).T
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)


def test_a_short_reduction_broadcast_into_a_wider_kernel(device):
  """A sum over 3 read through a broadcast by a kernel of another shape (not a row kernel)."""
  rng = np.random.default_rng(1)
  x, y = rng.standard_normal((64, 3)).astype(np.float32), rng.standard_normal((64, 100))
  y = y.astype(np.float32)
  out = kg.Tensor(x).sum(-1, keepdim=True) * kg.Tensor(y)
  assert len(wgsl_kernels(out)) == 1
  np.testing.assert_allclose(out.numpy(), x.sum(-1, keepdims=True) * y, rtol=1e-5, atol=1e-6)


def test_a_recomputed_max_propagates_nan_and_inf(device):
  x = np.array([[1.0, 2.0], [np.nan, 5.0], [3.0, np.inf], [-np.inf, -np.inf], [0.0, -0.0]] * 4,
               np.float32)
  out = kg.Tensor(x).max(-1, keepdim=True) + kg.Tensor(np.zeros((20, 7), np.float32))
  assert len(wgsl_kernels(out)) == 1
  np.testing.assert_array_equal(out.numpy(), np.broadcast_to(x.max(-1, keepdims=True), (20, 7)))


def test_a_row_kernel_reads_a_recomputed_reduction(device):
  """softmax over rows of (sum over 3) * y: the row kernel's three passes each recompute it."""
  rng = np.random.default_rng(2)
  x = rng.standard_normal((16, 1, 3)).astype(np.float32)
  y = rng.standard_normal((16, 40, 1)).astype(np.float32)
  out = (kg.Tensor(x).sum(-1, keepdim=True) * kg.Tensor(y)).reshape(16, 40).softmax(-1)
  assert len(wgsl_kernels(out)) == 1
  z = (x.astype(np.float64).sum(-1, keepdims=True) * y).reshape(16, 40)
  e = np.exp(z - z.max(-1, keepdims=True))
  np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_integer_and_bool_reductions(device, dtype):
  rng = np.random.default_rng(3)
  if dtype == "bool":
    x, y = rng.random((32, 4)) < 0.3, rng.random((32, 9)) < 0.5
    out = kg.Tensor(x).any(-1, keepdim=True) & kg.Tensor(y)
    want = x.any(-1, keepdims=True) & y
  else:
    x, y = (rng.integers(-50, 50, s).astype(np.int32) for s in ((32, 4), (32, 9)))
    out = kg.Tensor(x).sum(-1, keepdim=True) * kg.Tensor(y)
    want = x.sum(-1, keepdims=True) * y
  assert len(wgsl_kernels(out)) == 1
  np.testing.assert_array_equal(out.numpy(), want)


def test_what_stays_a_kernel_of_its_own():
  """Longer than 4 elements, or read more than 4 times per output (inside a matmul's reduction),
  or reading a reduction itself: a kernel of its own, as before."""
  rng = np.random.default_rng(4)
  five = kg.Tensor(rng.random((64, 5), dtype=np.float32))
  wide = kg.Tensor(rng.random((64, 100), dtype=np.float32))
  assert len(wgsl_kernels(five.sum(-1, keepdim=True) * wide)) == 2
  pairs, w = rng.random((32, 32, 2), dtype=np.float32), rng.random((32, 8), dtype=np.float32)
  out = kg.Tensor(pairs).sum(-1) @ kg.Tensor(w)
  assert len(wgsl_kernels(out)) == 2
  np.testing.assert_allclose(out.numpy(), pairs.sum(-1) @ w, rtol=1e-5)
  x = kg.Tensor(rng.random((8, 3, 3), dtype=np.float32))
  nested = x.sum(-1).sum(-1, keepdim=True) * wide[:8]
  assert len(wgsl_kernels(nested)) == 2    # the inner sum recomputed in the outer's kernel
  np.testing.assert_allclose(nested.numpy(), x.numpy().sum(-1).sum(-1, keepdims=True)
                             * wide.numpy()[:8], rtol=1e-5)
