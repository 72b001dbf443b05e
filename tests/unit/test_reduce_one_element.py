"""A reduction over axes of one element each (issue 42: Silero VAD's mean over its one frame)
is its element: no kernel of its own, so it fuses with what follows or what made it (the model's
last kernel computed the probability, a second one copied it through the mean). Values as
numpy's for every reduction, on PYTHON and WEBGPU."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg

REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def _head(t, name: str):
  """Silero VAD's tail: a linear layer's sigmoid over 2 rows, reduced over its one column."""
  x, w = t
  return getattr((x @ w).sigmoid(), name)(axis=1)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_a_reduction_of_one_element_makes_no_kernel(name):
  x, w = kg.Tensor.empty(2, 128, name="x"), kg.Tensor.empty(128, 1, name="w")
  assert len(kg.compile([_head((x, w), name)], target="wgsl")) == 1
  assert len(kg.compile([x.sum(axis=1)], target="wgsl")) == 1


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_values_as_numpy(device, name):
  rng = np.random.default_rng(3)
  x = rng.standard_normal((2, 128)).astype(np.float32)
  w = rng.standard_normal((128, 1)).astype(np.float32)
  got = _head((kg.Tensor(x, device=device), kg.Tensor(w, device=device)), name).numpy()
  want = REDUCTIONS[name](1 / (1 + np.exp(-(x.astype(np.float64) @ w))), axis=1)
  assert got.shape == want.shape == (2,)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_keepdim_and_dtypes():
  """keepdim keeps the axis; a bool sum counts in int32 (as any sum of bools)."""
  b = kg.Tensor(np.array([[True], [False]]))
  got = b.sum(axis=1, keepdim=True)
  assert got.shape == (2, 1) and got.dtype == kg.dtypes.int32
  assert got.numpy().tolist() == [[1], [0]]
