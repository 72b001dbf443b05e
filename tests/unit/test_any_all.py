"""Tensor.any / Tensor.all (numpy's): over axes, keepdim, None; NaN counts as true; empty axes
give False / True; bool, int and float inputs; against numpy on PYTHON, PTXSIM and WEBGPU."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

T = kg.Tensor
CASES = [np.array([[0, 1, 0], [0, 0, 0], [2, 3, 4]], np.int32),
         np.array([[0.0, np.nan], [0.5, -0.0]], np.float32),
         np.array([[True, False], [True, True]]),
         np.zeros((0, 3), np.float32)]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("axis,keepdim", [(None, False), (0, False), (1, True), ((0, 1), True)])
def test_against_numpy(device, case, axis, keepdim):
  a = CASES[case]
  for name in ("any", "all"):
    got = getattr(T(a), name)(axis, keepdim).numpy()
    want = getattr(np, name)(a, axis=axis, keepdims=keepdim)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want, err_msg=f"{name} axis={axis}")


def test_a_computed_mask_in_one_kernel():
  x = T.empty(64, 1024)
  assert len(kg.compile((x > 3).any(-1), target="wgsl")) == 1
