"""lowering/gather.py: gathers with indices computed on the device are indirect loads (one load of
the index, one clamped load of the table per output element), against numpy on PYTHON, PTXSIM
and WEBGPU; their work does not grow with the table; out-of-range indices read 0 and never leave
the buffer; WGSL and PTX checked by naga and ptxas; gradients (a scatter_add: test_scatter_fast.py
has the sorted form)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.uop.ops import Ops
from ops_util import check_compiles, same


def table_np(rows: int, cols: int, dtype) -> np.ndarray:
  return (np.arange(rows * cols).reshape(rows, cols) * 3 - 7).astype(dtype)


def table(rows: int, cols: int, dtype):
  """The same values built lazily by creation functions (the gather fuses them at the index)."""
  return (Tensor.arange(rows * cols).reshape(rows, cols) * 3 - 7).cast(dtype)


def expected_rows(tab: np.ndarray, idx) -> np.ndarray:
  """numpy's tab[idx] with the documented rule for device indices: negative ones count from the
  end once, any still outside 0..n-1 gives a row of zeros."""
  idx = np.asarray(idx)
  n = tab.shape[0]
  wrapped = np.where(idx < 0, idx + n, idx)
  inside = (wrapped >= 0) & (wrapped < n)
  out = tab[np.clip(wrapped, 0, n - 1)]
  return np.where(inside.reshape(inside.shape + (1,) * (tab.ndim - 1)), out, 0).astype(tab.dtype)


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "float16"])
def test_rows_of_int_and_float_tables(device, dtype):
  idx = [[3, 9, 0], [-1, 3, -10]]
  same(table(10, 5, dtype)[Tensor(idx)], expected_rows(table_np(10, 5, dtype), idx))


@pytest.mark.parametrize("tokens", [3, 700])   # outputs below and above the upcast size
def test_embedding_lookup_sizes(device, tokens):
  rows, cols = 300, 8
  idx = (np.arange(tokens) * 37 % (2 * rows)) - rows // 2       # negatives, out-of-range ones
  got = table(rows, cols, "float32")[Tensor(idx.astype(np.int32))]
  same(got, expected_rows(table_np(rows, cols, np.float32), idx))


def test_out_of_range_device_indices_read_zero(device):
  idx = Tensor([5, 6, 100, -6, -7, -1000, 2147483647, -2147483648], dtype="int32")
  x = Tensor.arange(6, dtype="float32") + 1
  same(x[idx], np.float32([6, 0, 0, 1, 0, 0, 0, 0]))
  same(kg.take(x, idx), np.float32([6, 0, 0, 1, 0, 0, 0, 0]))


@pytest.mark.parametrize("index_dtype", ["int8", "uint8", "int16", "uint32"])
def test_index_dtypes(device, index_dtype):
  values = [0, 3, 100, 7, 1] if index_dtype[0] == "u" else [0, 3, 100, 7, -3]
  idx = np.array(values, dtype=index_dtype)
  x = Tensor.arange(8, dtype="float32") * 2
  same(x[Tensor(idx)], expected_rows(np.arange(8, dtype=np.float32) * 2, idx.astype(np.int64)))


def test_take_and_take_along_axis(device):
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 5
  x = Tensor.arange(24, dtype="float32").reshape(2, 3, 4) - 5
  idx = np.array([[2, -1], [0, 1]], dtype=np.int32)
  same(kg.take(x, Tensor(idx), axis=1), np.take(a, idx, axis=1))
  along = np.array([[[3, 0, -2, 1]], [[0, 0, 3, -4]]], dtype=np.int32)             # (2, 1, 4): broadcast rows
  same(x.gather(2, Tensor(along)), np.take_along_axis(a, along % 4, axis=2))
  same(x.take_along_axis(Tensor(along[:, :, :2]), 2),
       np.take_along_axis(a, along[:, :, :2] % 4, axis=2))


def test_embedding_module(device):
  emb = kg.nn.Embedding(40, 6)
  w = emb.weight.numpy()
  idx = np.array([[1, 39, 0], [7, 7, 2]], dtype=np.int32)
  same(emb(Tensor(idx)), w[idx])


def _ops(y) -> dict:
  (k,) = kg.compile(y, target="wgsl")
  counts: dict = {}
  for u in k.kernel.uops:
    counts[u.op] = counts.get(u.op, 0) + 1
  return counts


def test_gather_work_does_not_grow_with_the_table():
  """The same UOps (no loop, no compare per row) for a 50-row and a 50,000-row table."""
  counts = []
  for rows in (50, 50000):
    tab = Tensor.empty(rows, 64)
    counts.append(_ops(tab[Tensor.empty(4096, dtype="int32")]))
  assert counts[0] == counts[1]
  assert Ops.RANGE not in counts[1]
  assert counts[1][Ops.LOAD] <= 2 * 8      # per thread: its 8 outputs' index and table loads


def test_gather_fuses_index_math_and_table_expression():
  x = Tensor.randn(100, 4, seed=3)
  y = (x * 2 + 1)[(Tensor.arange(6) * 7 - 3) % 100].exp()
  assert len(kg.compile(y)) == 1
  xn = x.numpy()
  np.testing.assert_allclose(y.numpy(), np.exp(xn * 2 + 1)[(np.arange(6) * 7 - 3) % 100],
                             rtol=1e-6)


def test_gather_renders_for_naga_and_ptxas():
  tab = Tensor.empty(1000, 16, dtype="float16")
  check_compiles([tab[Tensor.empty(33, dtype="int32")], tab[Tensor.empty(5, dtype="uint8")],
                  Tensor.empty(300).gather(0, Tensor.empty(7, dtype="int16"))])


def test_gather_int64_index_on_ptx(monkeypatch):
  import tools
  with tools.default_device(monkeypatch, "PTXSIM"):
    idx = Tensor(np.array([2, -1, 1 << 40, 0], dtype=np.int64))
    same(Tensor([1.0, 2.0, 3.0])[idx], np.float32([3, 3, 0, 1]))
    tools.ptxas_check(kg.compile(Tensor.empty(9)[Tensor.empty(4, dtype="int64")],
                                 target="ptx")[0].source, "sm_80")


def test_gradient_of_a_gather_adds_duplicates(device):
  w = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3), requires_grad=True)
  idx = np.array([2, 0, 2, -1, 9], dtype=np.int32)      # duplicates, a negative, out of range
  g = np.arange(15, dtype=np.float32).reshape(5, 3)
  (w[Tensor(idx)] * Tensor(g)).sum().backward()
  want = np.zeros((4, 3), np.float32)
  for k, i in enumerate(idx):
    if -4 <= i < 4:
      want[i % 4] += g[k]
  same(w.grad, want)


def test_gradient_of_take_along_axis(device):
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  x = Tensor(a, requires_grad=True)
  idx = np.array([[0, 0, 3], [1, 2, 1], [3, 3, 3]], dtype=np.int32)
  (x.gather(1, Tensor(idx)) * 2).sum().backward()
  want = np.zeros_like(a)
  for r in range(3):
    for c in idx[r]:
      want[r, c] += 2
  same(x.grad, want)
