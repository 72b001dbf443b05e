"""Shared by the tests of the model operations (test_indexing_ops.py, test_shape_ops.py,
test_model_ops.py): a `device` fixture that runs a test on PYTHON, PTXSIM and WEBGPU (wgpu on
lavapipe; missing, it fails under KERNELGEN_REQUIRE_ALL=1) and CUDA where a GPU is here, and
numpy comparison helpers."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from tools import default_device, missing_tool

DEVICES = ("PYTHON", "PTXSIM", "WEBGPU") + (("CUDA",) if kg.Device.available("CUDA") else ())


@pytest.fixture(params=DEVICES)
def device(request, monkeypatch):
  """The device name; it is also the default device during the test."""
  name = request.param
  if name == "WEBGPU":
    try:
      kg.Device["WEBGPU"]
    except kg.DeviceError as error:
      missing_tool("device WEBGPU", f"pip install wgpu; apt-get install mesa-vulkan-drivers "
                                    f"({error})")
  with default_device(monkeypatch, name):
    yield name


def same(t, expected, rtol=0.0, atol=0.0):
  """t (a Tensor) has expected's shape, dtype and values (exactly unless a tolerance is given)."""
  got = t.numpy()
  expected = np.asarray(expected)
  assert got.shape == expected.shape, (got.shape, expected.shape)
  assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
  if rtol or atol:
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
  else:
    np.testing.assert_array_equal(got, expected)
