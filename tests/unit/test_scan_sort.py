"""Scans (cumsum, cumprod, cummax, cummin) and sorting (sort, argsort, topk) against numpy, on
the PYTHON, PTXSIM and WEBGPU devices with small sizes, and compiled (WGSL validated by wgpu,
PTX assembled by ptxas) at large sizes."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.tensor.ops.scan import SCAN_BLOCK
from ops_util import check_compiles, device_fixture
from tools import DEVICES, default_device, missing_tool, ptxas_check, wgsl_validate

RNG = np.random.default_rng(0)
B = SCAN_BLOCK


device = device_fixture(DEVICES)


def data(shape, dtype="float32", lo=-5, hi=5):
  if np.dtype(dtype).kind == "f":
    return RNG.uniform(lo, hi, shape).astype(dtype)
  if np.dtype(dtype).kind == "b":
    return RNG.integers(0, 2, shape).astype(bool)
  return RNG.integers(max(np.iinfo(dtype).min, lo), min(np.iinfo(dtype).max, hi) + 1,
                      shape).astype(dtype)


def same(got: Tensor, want, rtol=1e-5, atol=1e-5):
  want = np.asarray(want)
  out = got.numpy()
  assert out.shape == want.shape, (out.shape, want.shape)
  assert out.dtype == want.dtype, (out.dtype, want.dtype)
  if want.dtype.kind == "f":
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol, equal_nan=True)
  else:
    np.testing.assert_array_equal(out, want)


# ---- scans -----------------------------------------------------------------------------------

# lengths on both sides of the block size and of one and two levels of blocks
LENGTHS = [1, 7, B - 1, B, B + 1, 3 * B + 5, B * B + 3]


@pytest.mark.parametrize("n", LENGTHS)
def test_cumsum_of_lengths_around_the_block_size(device, n):
  x = data((2, n))
  same(Tensor(x).cumsum(1), np.cumsum(x, 1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, -3])
def test_cumsum_axes(device, axis):
  x = data((3, 4, 5), "int32")
  same(Tensor(x).cumsum(axis), np.cumsum(x, axis).astype(np.int32))


@pytest.mark.parametrize("dtype,out", [("int8", "int32"), ("uint8", "uint32"), ("bool", "int32"),
                                       ("int32", "int32"), ("float16", "float16")])
def test_cumsum_accumulates_as_sum_does(device, dtype, out):
  x = data((B + 3,), dtype, 0, 3)
  want = np.cumsum(x.astype(np.float32 if dtype == "float16" else np.int64)).astype(out)
  same(Tensor(x).cumsum(), want, rtol=1e-3)
  assert Tensor(x).cumsum().dtype == Tensor(x).sum().dtype


def test_cumprod(device):
  x = data((3, 2 * B + 1), "float32", 0.9, 1.1)
  same(Tensor(x).cumprod(1), np.cumprod(x, 1), rtol=1e-5)
  i = data((2, 9), "int32", -2, 2)
  same(Tensor(i).cumprod(1), np.cumprod(i, 1).astype(np.int32))


@pytest.mark.parametrize("n", [5, B + 2])
def test_cummax_and_cummin_values_and_torch_indices(device, n):
  x = data((3, n), "int32", 0, 4)              # many ties: indices take the last one
  v, i = Tensor(x).cummax(1)
  same(v, np.maximum.accumulate(x, 1))
  want = np.array([[max(j for j in range(k + 1) if row[j] == row[:k + 1].max())
                    for k in range(n)] for row in x], np.int32)
  same(i, want)
  v, i = Tensor(x).cummin(-1)
  same(v, np.minimum.accumulate(x, 1))
  same(i, np.array([[max(j for j in range(k + 1) if row[j] == row[:k + 1].min())
                     for k in range(n)] for row in x], np.int32))


def test_nan_propagates_through_scans(device):
  x = np.array([1, 2, np.nan, 5, -np.inf, np.nan, 0] + [1.0] * B, np.float32)
  same(Tensor(x).cumsum(), np.cumsum(x))
  v, i = Tensor(x).cummax(0)
  same(v, np.maximum.accumulate(x))
  assert i.tolist()[:7] == [0, 1, 2, 2, 2, 5, 5]     # torch: the latest NaN
  v, _ = Tensor(np.array([-np.inf, -np.inf, 3], np.float32)).cummax(0)
  assert v.tolist() == [-np.inf, -np.inf, 3.0]


def test_empty_and_zero_d_scans(device):
  same(Tensor(np.zeros((0, 3), np.float32)).cumsum(0), np.zeros((0, 3), np.float32))
  same(Tensor(np.zeros((2, 0), np.int32)).cumsum(1), np.zeros((2, 0), np.int32))
  same(Tensor(np.float32(4)).cumsum(), np.cumsum(np.float32(4)))
  assert Tensor(np.zeros((0,), np.float32)).cummax(0)[0].shape == (0,)


def test_scan_errors():
  with pytest.raises(kg.ShapeError, match="one axis"):
    Tensor([1, 2]).cumsum((0,))
  with pytest.raises(kg.ShapeError):
    Tensor([1, 2]).cumsum(3)


def test_float32_cumsum_of_a_million_values_on_webgpu(monkeypatch):
  """The accuracy the scan module documents: 1e-6 of the running sum of magnitudes."""
  if not kg.Device.available("WEBGPU"):
    missing_tool("device WEBGPU", "pip install wgpu; apt-get install mesa-vulkan-drivers")
  x = RNG.uniform(-1, 1, 10 ** 6).astype(np.float32)
  with default_device(monkeypatch, "WEBGPU"):
    got = Tensor(x).cumsum().numpy()
  want = np.cumsum(x.astype(np.float64))
  scale = np.cumsum(np.abs(x.astype(np.float64)))
  assert (np.abs(got - want) / scale).max() < 1e-6


def test_a_long_scan_is_a_few_parallel_kernels():
  kernels = kg.compile(Tensor.rand(10 ** 6).cumsum(), target="wgsl")
  assert len(kernels) == 7                          # 3 levels of blocks: 3 + 1 + 3
  assert all(math.prod(k.global_size) * math.prod(k.local_size) > 1 for k in kernels)   # threads


@pytest.mark.parametrize("make", [lambda t: t.cumsum(), lambda t: t.cummax(0)[1],
                                  lambda t: t.reshape(1000, 1000).cumprod(0)])
def test_large_scans_compile_for_wgsl_and_ptx(make):
  out = make(Tensor.rand(10 ** 6))
  check_compiles(out)


def test_module_level_scans():
  x = np.arange(6, dtype=np.int32).reshape(2, 3)
  same(kg.cumsum(Tensor(x), 1), np.cumsum(x, 1).astype(np.int32))
  same(kg.cumprod(Tensor(x)), np.cumprod(x).astype(np.int32))
  same(kg.cummax(Tensor(x), 0)[0], np.maximum.accumulate(x, 0))
  same(kg.cummin(Tensor(x), 0)[0], np.minimum.accumulate(x, 0))


# ---- sorting ---------------------------------------------------------------------------------

def stable_desc(x, axis):
  """numpy has no descending sort: torch's stable descending order (NaN first) by hand."""
  x = np.moveaxis(x, axis, -1)
  order = np.array([sorted(range(len(r)), key=lambda j: (
    0 if np.isnan(r[j]) else 1, -float(r[j]) if not np.isnan(r[j]) else 0, j))
    for r in x.reshape(-1, x.shape[-1])], np.int32).reshape(x.shape)
  return np.moveaxis(order, -1, axis)


# lengths on both sides of powers of two and of 16 (the pairs one thread sorts in one kernel)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 100])
def test_sort_and_argsort_with_nan_ties_and_signed_zeros(device, n):
  x = RNG.integers(-2, 3, (2, n)).astype(np.float32)
  x[0, ::3] = np.nan
  x[1, 1::2] = -0.0
  x[1, ::4] = np.inf
  t = Tensor(x)
  want = np.sort(x, -1, kind="stable")
  got = t.sort().numpy()
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(np.signbit(got), np.signbit(want))    # -0.0 kept bit for bit
  same(t.argsort(), np.argsort(x, -1, kind="stable").astype(np.int32))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "uint32", "bool", "float16"])
def test_sort_dtypes(device, dtype):
  lo, hi = (0, 1) if dtype == "bool" else (-100, 100)
  x = data((3, 11), dtype, lo, hi)
  same(Tensor(x).sort(), np.sort(x, -1, kind="stable"))
  same(Tensor(x).argsort(0), np.argsort(x, 0, kind="stable").astype(np.int32))


def test_sort_extremes_of_int32_and_uint32(device):
  i = np.array([2 ** 31 - 1, -2 ** 31, 0, -1, 1, -2 ** 31], np.int32)
  same(Tensor(i).sort(), np.sort(i))
  same(Tensor(i).argsort(descending=True), stable_desc(i, -1))
  u = np.array([2 ** 32 - 1, 0, 2 ** 31, 1, 2 ** 32 - 1], np.uint32)
  same(Tensor(u).sort(descending=True), np.sort(u)[::-1])
  same(Tensor(u).argsort(), np.argsort(u, kind="stable").astype(np.int32))


@pytest.mark.parametrize("axis", [None, 0, 1, -1, -3])
def test_sort_axes(device, axis):
  x = data((3, 4, 5), "int32", -3, 3)
  same(Tensor(x).sort(axis), np.sort(x, axis, kind="stable"))
  same(Tensor(x).argsort(axis), np.argsort(x, axis, kind="stable").astype(np.int32))


def test_descending_is_stable_with_nan_first(device):
  x = np.array([[1, np.nan, 3, 1, -np.inf, np.nan, 3, 0]], np.float32)
  order = stable_desc(x, 1)
  same(Tensor(x).argsort(1, descending=True), order)
  same(Tensor(x).sort(1, descending=True), np.take_along_axis(x, order, 1))


def test_topk(device):
  x = np.array([[4, 1, 4, np.nan, 2, 9, 2], [0, 0, 0, 1, 0, 0, -1]], np.float32)
  v, i = Tensor(x).topk(3)
  order = stable_desc(x, 1)[:, :3]
  same(i, order)
  same(v, np.take_along_axis(x, order, 1))
  v, i = Tensor(x).topk(2, axis=1, largest=False)
  order = np.argsort(x, 1, kind="stable")[:, :2].astype(np.int32)
  same(i, order)
  same(v, np.take_along_axis(x, order, 1))
  v, i = Tensor(x).topk(1, axis=0)
  same(i, stable_desc(x, 0)[:1])


def test_empty_and_zero_d_sorts(device):
  e = np.zeros((2, 0), np.float32)
  same(Tensor(e).sort(), e)
  same(Tensor(e).argsort(), e.astype(np.int32))
  same(Tensor(np.zeros((0, 3), np.int32)).sort(0), np.zeros((0, 3), np.int32))
  same(Tensor(np.float32(2)).sort(None), np.sort(np.float32(2), None))
  v, i = Tensor(e).topk(0)
  assert v.shape == i.shape == (2, 0)


def test_sort_errors():
  with pytest.raises(kg.ShapeError, match="k must be 0..3"):
    Tensor([1, 2, 3]).topk(4)
  with pytest.raises(kg.ShapeError, match="one axis"):
    Tensor([1, 2, 3]).sort((0,))
  with pytest.raises(kg.ShapeError):
    Tensor([1, 2, 3]).argsort(1)


def test_module_level_sorts():
  x = np.array([3, 1, 2], np.int32)
  same(kg.sort(Tensor(x)), np.sort(x))
  same(kg.argsort(Tensor(x), descending=True), np.array([0, 2, 1], np.int32))
  assert kg.topk(Tensor(x), 1)[0].tolist() == [3]


def test_sort_runs_several_network_steps_per_kernel():
  """The 55 steps of 2^10 (partner bits 0 | 1 0 | 2 1 0 | 3 2 1 0 | 4 3 2 1 0 | ...) in runs of
  at most 4 distinct bits, each run one kernel (16 pairs per thread): 13 kernels, then the
  values; 2^4 sorts in one."""
  assert len(kg.compile(Tensor.rand(1 << 10).sort(), target="wgsl")) == 13 + 1
  assert len(kg.compile(Tensor.rand(16).sort(), target="wgsl")) == 1 + 1
  assert len(kg.compile(Tensor.rand(17).sort(), target="wgsl")) == 3 + 1   # 32: 15 steps


def test_long_rows_sort_on_webgpu(monkeypatch):
  """5000 per row (m = 8192: steps whose direction bit is above a thread's pairs, many
  threads per row), 3 rows, ties: values and a stable argsort as numpy."""
  try:
    kg.Device["WEBGPU"]
  except kg.DeviceError as error:
    missing_tool("device WEBGPU", f"pip install wgpu ({error})")
  x = RNG.integers(-500, 500, (3, 5000)).astype(np.float32)
  with default_device(monkeypatch, "WEBGPU"):
    np.testing.assert_array_equal(Tensor(x).sort().numpy(), np.sort(x, -1))
    np.testing.assert_array_equal(Tensor(x).argsort(descending=True).numpy(), stable_desc(x, -1))


def test_large_sort_compiles_for_wgsl_and_ptx():
  v, i = Tensor.rand(8, 1 << 12).topk(5)
  sources = {k.source: k for k in kg.compile([v, i], target="wgsl")}
  for source in sources:
    wgsl_validate(source)
  ptx = {k.source for k in kg.compile([v, i], target="ptx", arch="sm_80")}
  for source in ptx:
    ptxas_check(source, "sm_80")


# ---- fuzz programs (tests/helpers/fuzz_scan_sort.py) that use these ops and einsum -------------------

# two or more seeds per op
FUZZ_SEEDS = [7, 8, 16, 17, 21, 25, 27, 40, 64, 73, 78, 114, 118, 129, 211, 240, 251, 350]


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_fuzz_programs_with_scans_sorts_and_einsum_agree_on_every_device(seed):
  from fuzz_programs import RandomChooser, generate
  from fuzz_runner import available_devices, run_program
  from fuzz_scan_sort import OPS
  program = generate(RandomChooser(seed))
  assert program.ops() & set(OPS), f"seed {seed} no longer reaches a scan/sort/einsum step"
  outcome = run_program(program, available_devices(DEVICES), seed)
  assert not outcome.failed, f"seed {seed}:\n{outcome.program}\n{outcome.messages}"


@pytest.mark.parametrize("dtype", ["float64", "int64", "uint64"])
def test_64bit_sorts_and_scans(device, dtype):
  x = data((2, 9), dtype, -50, 50)
  if dtype == "float64":
    x[0, ::4] = np.nan
  if device == "WEBGPU":       # WGSL has no 64-bit types: a typed error, not wrong numbers
    with pytest.raises(kg.UnsupportedError):
      Tensor(x).sort().numpy()
    return
  same(Tensor(x).sort(), np.sort(x, -1, kind="stable"))
  same(Tensor(x).argsort(0, descending=True), stable_desc(x, 0))
  same(Tensor(x).cumsum(1), np.cumsum(x, 1), rtol=1e-12)
  same(Tensor(x).cummax(1)[0], np.maximum.accumulate(x, 1))
