"""Shared by the tests of the Tensor operations (test_indexing_ops.py, test_shape_ops.py,
test_model_ops.py, test_einsum.py, test_scan_sort.py): the `on` fixture, numpy comparison
helpers and check_compiles (WGSL and PTX validated). The `device` fixture is conftest.py's (the
devices: tools.DEVICES)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kernelgen as kg
from tools import device_fixture, device_runtime, ptxas_check, wgsl_validate  # noqa: F401


@pytest.fixture
def on(monkeypatch):
  """`on(device, **options)`: make `device` the default for the test, with extra front-end
  options on top of its own; returns the device's runtime."""
  def configure(device: str, **extra):
    rt = device_runtime(device)
    options = {**rt.render_options(), **extra}
    monkeypatch.setattr(rt, "render_options", lambda: options)
    monkeypatch.delenv("KERNELGEN_DEVICE", raising=False)
    monkeypatch.setattr(kg.Device, "_default", device)
    return rt
  return configure


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


def check_compiles(tensors, arch="sm_80"):
  """Every kernel of `tensors` compiles: its WGSL validates (wgpu) and its PTX assembles (ptxas)."""
  for kernel in kg.compile(tensors, target="wgsl"):
    wgsl_validate(kernel.source)
  for kernel in kg.compile(tensors, target="ptx", arch=arch):
    ptxas_check(kernel.source, arch)


def sdpa_np(q, k, v, mask=None, causal=False, scale=None):
  """torch's definition in float64; a fully masked row is NaN."""
  q, k, v = (a.astype(np.float64) for a in (q, k, v))
  scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
  s = q @ np.swapaxes(k, -1, -2) * scale
  if causal:
    mask = np.tril(np.ones(s.shape[-2:], bool))
  if mask is not None:
    s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
  with np.errstate(invalid="ignore"):
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def softmax_edge_rows(x: np.ndarray) -> np.ndarray:
  """x (at least 6 rows of 40) with softmax's edge rows: all -inf, -inf first then finite (masked
  keys), a NaN, a +inf, a max that comes last, every other value -inf."""
  x[0] = -np.inf
  x[1, :17] = -np.inf
  x[2, 3] = np.nan
  x[3, 5] = np.inf
  x[4] = np.arange(x.shape[1]) * 3.0
  x[5, ::2] = -np.inf
  return x
