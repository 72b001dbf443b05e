"""Big reductions into few outputs run as two kernels (chunk partials, then their reduction) and
still match numpy: sum/prod/max/min, ints and floats, sizes the chunk does not divide, NaN."""
from __future__ import annotations

import os

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.tensor.ops import reduce as reduce_ops
from kernelgen.graph.schedule import schedule
from tools import DEVICES, missing_tool



@pytest.fixture(autouse=True)
def small_split(monkeypatch):
  """Small thresholds so the split path runs on test-sized inputs."""
  monkeypatch.delenv("KERNELGEN_DEVICE", raising=False)
  monkeypatch.setattr(reduce_ops, "SPLIT_MIN_REDUCE", 64)
  monkeypatch.setattr(reduce_ops, "SPLIT_GROUPS", 8)
  previous = kg.Device._default
  kg.Device.DEFAULT = os.environ.get("KERNELGEN_TEST_DEVICE", "PYTHON")
  yield
  kg.Device._default = previous


def on(device: str):
  if device == "WEBGPU":
    try:
      from kernelgen.runtime.webgpu_native import WebGPURuntime
      WebGPURuntime()
    except Exception as error:  # noqa: BLE001 - no wgpu or no adapter
      missing_tool("device WEBGPU",
                   f"pip install wgpu; apt-get install mesa-vulkan-drivers ({error})")
  kg.Device.DEFAULT = device


def kernels(t: Tensor) -> int:
  return len(schedule([t.node]))


def test_big_sum_is_two_kernels():
  x = Tensor(np.ones(1000, np.float32))
  assert kernels(x.sum()) == 2


def test_small_or_wide_reductions_stay_one_kernel():
  assert kernels(Tensor(np.ones(63, np.float32)).sum()) == 1
  assert kernels(Tensor(np.ones((300, 100), np.float32)).sum(1)) == 1   # 300 outputs


def test_default_threshold_16m_sum_is_two_kernels(monkeypatch):
  monkeypatch.setattr(reduce_ops, "SPLIT_MIN_REDUCE", 1 << 16)
  monkeypatch.setattr(reduce_ops, "SPLIT_GROUPS", 256)
  big, small = Tensor.ones(16 * 1024 * 1024).contiguous(), Tensor.ones(1 << 15).contiguous()
  assert kernels(big) == 1 and kernels(big.sum()) == 1 + 2     # the input's kernel, then two
  assert kernels(small.sum()) == 1 + 1


CASES = [(n, dt, op) for n in (1000, 997) for dt in ("float32", "int32")
         for op in ("sum", "max", "min", "prod")]


def data(n: int, dt: str, op: str, seed: int = 0):
  rng = np.random.default_rng(seed)
  if op == "prod":
    return (rng.choice([-1, 1, 1, 1], n) * (rng.random(n) < 0.95 + 0)).astype(dt) + \
      (rng.random(n) < 0.01).astype(dt)
  if dt == "int32":
    return rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
  return rng.standard_normal(n).astype(dt)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n,dt,op", CASES)
def test_full_reduce_matches_numpy(device, n, dt, op):
  on(device)
  a = data(n, dt, op)
  got = getattr(Tensor(a), op)().numpy()
  want = getattr(np, op)(a, dtype=np.int32) if dt == "int32" and op in ("sum", "prod") \
    else getattr(np, op)(a)
  if dt == "int32":
    assert got == want
  else:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_few_outputs_axis_and_keepdim(device):
  on(device)
  a = np.random.default_rng(1).standard_normal((3, 5, 71)).astype(np.float32)
  t = Tensor(a)
  assert kernels(t.sum((0, 2))) == 2
  np.testing.assert_allclose(t.sum((0, 2)).numpy(), a.sum((0, 2)), rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(t.max(2, keepdim=True).numpy(), a.max(2, keepdims=True))
  np.testing.assert_allclose(t.min(axis=None, keepdim=True).numpy(), a.min(keepdims=True))


@pytest.mark.parametrize("device", DEVICES)
def test_max_min_propagate_nan(device):
  on(device)
  a = np.random.default_rng(2).standard_normal(997).astype(np.float32)
  a[513] = np.nan
  assert np.isnan(Tensor(a).max().numpy()) and np.isnan(Tensor(a).min().numpy())
  b = np.full(997, -np.inf, np.float32)
  assert Tensor(b).max().numpy() == -np.inf


@pytest.mark.parametrize("device", DEVICES)
def test_mean_var_std_argmax_and_bool(device):
  on(device)
  a = np.random.default_rng(3).standard_normal(997).astype(np.float32)
  t = Tensor(a)
  for name in ("mean", "var", "std"):
    np.testing.assert_allclose(getattr(t, name)().numpy(), getattr(a, name)(), rtol=1e-4)
  assert t.argmax().numpy() == a.argmax() and t.argmin().numpy() == a.argmin()
  flags = a > 2.5
  assert (Tensor(flags).max().numpy() == flags.max()) and (Tensor(flags).sum().numpy()
                                                           == flags.sum())
  u = np.random.default_rng(4).integers(0, 2**32 - 1, 997, dtype=np.uint32)
  assert Tensor(u).min().numpy() == u.min() and Tensor(u).max().numpy() == u.max()
