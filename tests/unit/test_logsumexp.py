"""Tensor.logsumexp (torch.logsumexp / scipy.special.logsumexp): values against numpy's
max-shifted formula in float64 on PYTHON, PTXSIM and WEBGPU (axes, keepdim, None; rows of -inf,
an inf, NaN, an empty axis, float16 in), one kernel for a row reduction, and its gradient
(softmax) against central differences in float64."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

T = kg.Tensor


def _ref(a, axis=None, keepdims=False):
  a = a.astype(np.float64)
  with np.errstate(invalid="ignore", divide="ignore"):
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isinf(m), 0, m)
    out = np.log(np.exp(a - m).sum(axis=axis, keepdims=True)) + m
  return out if keepdims else np.squeeze(out, axis=axis)


@pytest.mark.parametrize("axis,keepdim", [(-1, False), (0, True), ((0, 2), False), (None, False)])
def test_values(device, axis, keepdim):
  a = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32) * 30
  got = T(a).logsumexp(axis, keepdim).numpy()
  np.testing.assert_allclose(got, _ref(a, axis, keepdim), rtol=1e-5, atol=1e-5)


def test_special_rows(device):
  a = np.array([[1, 2, 3], [-np.inf] * 3, [np.inf, 1, 2], [np.nan, 1, 2], [-np.inf, 0, 88]],
               np.float32)
  np.testing.assert_allclose(T(a).logsumexp(1).numpy(), _ref(a, 1), rtol=1e-6)
  assert T(np.zeros((2, 0), np.float32)).logsumexp(1).numpy().tolist() == [-np.inf] * 2
  half = np.linspace(-5, 5, 12, dtype=np.float16).reshape(3, 4)
  np.testing.assert_allclose(T(half).logsumexp(1).numpy(), _ref(half, 1), rtol=2e-3)


def test_a_row_is_one_kernel():
  assert len(kg.compile(T.empty(256, 1024).logsumexp(-1), target="wgsl")) == 1


def test_gradient_is_softmax_and_matches_central_differences():
  a = np.random.default_rng(1).standard_normal((2, 4))
  x = T(a, dtype="float64", device="PYTHON", requires_grad=True)
  (x.logsumexp(1) * T([1.0, 2.0], dtype="float64", device="PYTHON")).sum().backward()
  e = np.exp(a - a.max(1, keepdims=True))
  np.testing.assert_allclose(x.grad.numpy(), e / e.sum(1, keepdims=True) * [[1], [2]], rtol=1e-10)
  h, num = 1e-6, np.zeros_like(a)
  for i in np.ndindex(a.shape):
    d = np.zeros_like(a)
    d[i] = h
    num[i] = ((_ref(a + d, 1) - _ref(a - d, 1)) * [1, 2]).sum() / (2 * h)
  np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-6)
