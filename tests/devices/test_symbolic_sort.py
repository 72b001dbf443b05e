"""sort, argsort and topk along a symbolic axis (kg.Dim): the padding past the bound size sorts
after every value (NaN and ties included, stable), at both ends of the range and at a value that
divides no tile, on PYTHON, PTXSIM and WEBGPU against numpy, one compile for every value."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

HI = 40
VALUES = (1, 13, HI)


def _data(v: int, cols: int = 3):
  a = np.random.default_rng(v).standard_normal((v, cols)).astype(np.float32)
  a[0, 0] = np.nan                  # NaN: last ascending, first descending
  if v > 2:
    a[2, 1] = a[1, 1]               # a tie: stable
  return a


def _descending(a):
  """torch's descending order along axis 0: NaN first, then the values largest first, stably."""
  order = np.stack([np.argsort(-np.nan_to_num(c, nan=np.inf), kind="stable") for c in a.T], 1)
  return np.take_along_axis(a, order, 0), order


def _once(check):
  kg.clear_cache()
  misses = None
  for v in VALUES:
    check(v)
    now = kg.cache_info()["misses"]
    assert misses is None or now == misses, f"n = {v} compiled again"
    misses = now


@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_along_a_symbolic_axis(device, descending):
  n = kg.Dim("n", 1, HI)

  def check(v):
    a = _data(v)
    x = kg.Tensor(a).symbolic(n.bind(v), 3)
    values, indices = x.sort(0, descending=descending), x.argsort(0, descending=descending)
    assert values.symbolic_shape == (n, 3) and indices.symbolic_shape == (n, 3)
    want, order = _descending(a) if descending else (np.sort(a, 0),
                                                     np.argsort(a, 0, kind="stable"))
    np.testing.assert_array_equal(values.numpy(), want, err_msg=f"n = {v}")
    np.testing.assert_array_equal(indices.numpy(), order, err_msg=f"n = {v}")
  _once(check)


def test_topk_along_a_symbolic_last_axis(device):
  n = kg.Dim("n", 2, HI)

  def check(v):
    a = np.ascontiguousarray(_data(v).T)
    values, indices = kg.Tensor(a).symbolic(3, n.bind(v)).topk(2, -1)
    order = np.argsort(-np.nan_to_num(a, nan=np.inf), -1, kind="stable")[:, :2]
    np.testing.assert_array_equal(indices.numpy(), order, err_msg=f"n = {v}")
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(a, order, -1))
  for v in (2, 13, HI):
    check(v)


def test_topk_past_the_lowest_size_is_a_shape_error():
  n = kg.Dim("n", 2, HI)
  x = kg.Tensor(np.zeros((3, 5), np.float32)).symbolic(3, n.bind(5))
  with pytest.raises(kg.ShapeError, match="k must be 0..2"):
    x.topk(3, -1)
