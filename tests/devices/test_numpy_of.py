"""kg.numpy_of, as a user calls it: tensors from the creation functions, of several dtypes,
lazy or computed already, on one device or several, each equal to its own .numpy()."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor, dtypes
from tools import DEVICES


def _tensors(device: str) -> list:
  # bfloat16 where the device has it (WGSL has no bfloat16 type: a typed error, tested elsewhere)
  half = dtypes.float16 if device == "WEBGPU" else dtypes.bfloat16
  return [Tensor.zeros(3, device=device), Tensor.arange(5, device=device) * 2,
          Tensor.full((2, 3), 1.5, device=device).cast(dtypes.float16),
          Tensor.ones(4, device=device).cast(half) / 3,
          Tensor.eye(3, device=device) > 0, Tensor.randn(2, 2, device=device).realize(),
          Tensor([[7, -8]], dtype=dtypes.int32, device=device)]


@pytest.mark.parametrize("device", DEVICES)
def test_numpy_of_equals_each_tensors_numpy(device):
  tensors = _tensors(device)
  got = kg.numpy_of(*tensors)
  assert len(got) == len(tensors)
  for g, t in zip(got, tensors):
    want = t.numpy()
    assert g.dtype == want.dtype and g.shape == want.shape
    np.testing.assert_array_equal(g, want)
  np.testing.assert_array_equal(got[1], np.arange(5) * 2)


def test_numpy_of_reads_tensors_of_several_devices_in_their_order():
  tensors = [Tensor.arange(4, device=d) + i for i, d in enumerate(DEVICES)]
  got = kg.numpy_of(*tensors)
  for i, g in enumerate(got):
    np.testing.assert_array_equal(g, np.arange(4) + i)
  assert kg.numpy_of() == []


def test_numpy_of_names_what_is_not_a_tensor():
  with pytest.raises(kg.DTypeError, match="kg.numpy_of takes Tensors, got a list"):
    kg.numpy_of(Tensor.zeros(2), [1, 2])
