"""64-bit host data on WEBGPU: numpy's default float64 and int64 arrays. WebGPU kernels have no
64-bit types, so `.cast()` of such data before any other op is done on the host
(tensor/data.host_narrowed), with the CAST op's conversions; any other use of it in a
kernel is a typed UnsupportedError that names both fixes. numpy is the oracle."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
import tools

T = kg.Tensor


@pytest.fixture(scope="module")
def webgpu():
  tools.device_runtime("WEBGPU")


def test_float64_data_cast_to_float32_on_webgpu_rounds_as_numpy(webgpu):
  x = np.array([0.1, -2.5, 1e300, -1e300, np.nan, np.inf, 3.0000001, 1e-310], np.float64)
  got = T(x).cast("float32").numpy()
  with np.errstate(over="ignore"):
    want = x.astype(np.float32)
  assert got.dtype == np.float32
  np.testing.assert_array_equal(got, want)


def test_narrowed_data_feeds_kernels_and_gradients(webgpu):
  x = np.linspace(-1, 1, 12).reshape(3, 4)           # float64, as numpy makes it
  y = (T(x).float() * 2 + 1).sum(axis=1)
  np.testing.assert_allclose(y.numpy(), (x.astype(np.float32) * 2 + 1).sum(1), rtol=1e-6)
  w = T(x).float().requires_grad_()
  (w * w).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), 2 * x.astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("src,dst", [(np.int64, "int32"), (np.uint64, "uint32"),
                                     (np.int64, "float32"), (np.float64, "int32")])
def test_other_64bit_casts_on_webgpu(webgpu, src, dst):
  x = np.array([0, 1, 7, 2**31 - 1, 123456], src) if src != np.float64 else \
    np.array([0.0, -1.9, 2.9, -2**31, 2**31 - 1], np.float64)
  if src == np.int64:
    x = np.concatenate([x, np.array([-5, 2**40 + 3], np.int64)])   # int -> int wraps
  got = T(x).cast(dst).numpy()
  np.testing.assert_array_equal(got, x.astype(dst))


def test_64bit_data_in_a_kernel_is_a_typed_error_naming_the_fix(webgpu):
  with pytest.raises(kg.UnsupportedError, match=r"float64 is not available.*dtype='float32'"):
    (T(np.arange(3.0)) + 1).numpy()
  with pytest.raises(kg.UnsupportedError, match=r"int64 is not available.*dtype='int32'"):
    (T(np.arange(3)) * 2).numpy()


def test_only_unuploaded_webgpu_data_is_narrowed_on_the_host(webgpu):
  x = np.arange(4.0)
  np.testing.assert_array_equal(T(x, device="PYTHON").cast("float32").numpy(),
                                x.astype(np.float32))      # a CAST in a kernel there
  stored = T(x).realize()                              # on the device already: a kernel's cast
  with pytest.raises(kg.UnsupportedError, match="float64"):
    stored.cast("float32").numpy()
  assert T(x, dtype="float32").cast("float16").numpy().dtype == np.float16
