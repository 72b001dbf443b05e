"""tensor/ops/sorted_scatter.py: scatter_add, scatter, `t[idx] = v` and a gather's gradient with device
indices, by sorting above COMPARE_MAX (outputs x indices) and by comparing below it: values against
numpy (np.add.at; numpy assignment, where the last duplicate wins) on PYTHON, PTXSIM and WEBGPU,
with duplicates, negative and out-of-range indices (they write nothing), float and int dtypes;
bit-identical reruns; gradients; the sorted form's kernels have no loop over the indices or the
outputs; WGSL and PTX checked by naga and ptxas."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.tensor.ops.scan import SCAN_BLOCK
from kernelgen.tensor.ops.sorted_scatter import COMPARE_INDICES, COMPARE_MAX
from kernelgen.uop.ops import Ops
from ops_util import check_compiles, same

# (outputs n, indices m): n * m on each side of COMPARE_MAX (65536), m above SCAN_BLOCK
SIZES = {"compared": (40, 50), "sorted": (300, 400)}


def indices(n: int, m: int) -> np.ndarray:
  """m int32 indices into n: duplicates (runs longer than SCAN_BLOCK), negatives, out of range."""
  rng = np.random.default_rng(n + m)
  idx = rng.integers(-n - 5, n + 5, m)
  idx[: m // 3] = 7                                  # one long segment of duplicates
  return idx.astype(np.int32)


def kept(idx: np.ndarray, n: int) -> np.ndarray:
  """The documented rule: negatives count from the end once; still out of range writes nothing."""
  return (idx >= -n) & (idx < n)


def base(n: int, dtype: str):
  """The target built by creation functions, and the same in numpy."""
  return (Tensor.arange(n) % 9 - 4).cast(dtype), (np.arange(n) % 9 - 4).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("size", list(SIZES))
def test_scatter_add_matches_add_at(device, size, dtype):
  n, m = SIZES[size]
  idx = indices(n, m)
  t, want = base(n, dtype)
  src = (Tensor.arange(m) % 13 - 6).cast(dtype)        # integer values: exact sums in float32
  ok = kept(idx, n)
  np.add.at(want, idx[ok], ((np.arange(m) % 13 - 6).astype(dtype))[ok])
  same(t.scatter_add(0, Tensor(idx), src), want)


@pytest.mark.parametrize("size", list(SIZES))
def test_scatter_and_setitem_last_duplicate_wins(device, size):
  n, m = SIZES[size]
  idx = indices(n, m)
  ok = kept(idx, n)
  values = (np.arange(m) * 3 + 1).astype(np.float32)
  want = base(n, "float32")[1]
  want[idx[ok]] = values[ok]                           # numpy: the last duplicate wins
  t = base(n, "float32")[0]
  same(t.scatter(0, Tensor(idx), Tensor.arange(m, dtype="float32") * 3 + 1), want)
  t[Tensor(idx)] = Tensor.arange(m, dtype="float32") * 3 + 1
  same(t, want)


def test_rows_with_a_shared_index_along_an_axis(device):
  """An Embedding-shaped scatter: one index per row of a (rows, 3) table, expanded over the
  columns (sorted and searched once); and a 2-d index that differs per column."""
  n, m = 400, 300
  idx = indices(n, m)
  ok = kept(idx, n)
  src = np.arange(m * 3, dtype=np.float32).reshape(m, 3) % 17
  want = np.zeros((n, 3), np.float32)
  np.add.at(want, idx[ok], src[ok])
  shared = Tensor(idx).reshape(m, 1).expand(m, 3)
  got = Tensor.zeros(n, 3).scatter_add(0, shared, Tensor.arange(m * 3).reshape(m, 3) % 17)
  same(got, want)
  cols = np.stack([idx, idx[::-1], (idx * 7) % n], 1).astype(np.int32)
  want = np.zeros((n, 3), np.float32)
  for c in range(3):
    ok = kept(cols[:, c], n)
    np.add.at(want[:, c], cols[ok, c], src[ok, c])
  got = Tensor.zeros(n, 3).scatter_add(0, Tensor(cols), Tensor.arange(m * 3).reshape(m, 3) % 17)
  same(got, want)


def test_float_sums_are_bit_identical_across_runs(device):
  n, m = SIZES["sorted"]
  rng = np.random.default_rng(5)
  idx, src = indices(n, m), rng.standard_normal(m).astype(np.float32)
  runs = [Tensor.zeros(n).scatter_add(0, Tensor(idx), Tensor(src)).numpy() for _ in range(2)]
  assert runs[0].tobytes() == runs[1].tobytes()
  want = np.zeros(n)
  ok = kept(idx, n)
  np.add.at(want, idx[ok], src[ok].astype(np.float64))
  np.testing.assert_allclose(runs[0], want, rtol=1e-5, atol=1e-5)


def test_gradients_through_the_sorted_forms():
  n, m = SIZES["sorted"]
  idx = indices(n, m)
  ok = kept(idx, n)
  g = (np.arange(n, dtype=np.float32) % 5) - 2
  w = Tensor(np.zeros(n, np.float32), requires_grad=True)
  (w[Tensor(idx)] * Tensor(np.arange(m, dtype=np.float32))).sum().backward()   # gather's grad
  want = np.zeros(n, np.float32)
  np.add.at(want, idx[ok], np.arange(m, dtype=np.float32)[ok])
  same(w.grad, want)
  t = Tensor(np.zeros(n, np.float32), requires_grad=True)
  s = Tensor(np.ones(m, np.float32), requires_grad=True)
  (t.scatter_add(0, Tensor(idx), s) * Tensor(g)).sum().backward()
  same(t.grad, g)
  same(s.grad, np.where(ok, g[idx % n], 0).astype(np.float32))
  t.grad = s.grad = None
  (t.scatter(0, Tensor(idx), s) * Tensor(g)).sum().backward()
  last = {}
  for k in np.nonzero(ok)[0]:
    last[idx[k] % n] = k
  won = np.zeros(m, bool)
  won[list(last.values())] = True
  written = np.zeros(n, bool)
  written[list(last)] = True
  same(t.grad, np.where(written, 0, g).astype(np.float32))
  same(s.grad, np.where(won, g[idx % n], 0).astype(np.float32))


def _kernels(n: int, m: int):
  y = Tensor.zeros(n).scatter_add(0, Tensor.empty(m, dtype="int32"), Tensor.empty(m))
  return kg.compile(y, target="wgsl")


def _loops(kernel) -> list:
  return [u.src[0].arg for u in kernel.kernel.uops if u.op is Ops.RANGE]


def test_threshold_sides_and_work_that_does_not_grow_as_outputs_times_indices():
  (compared,) = _kernels(256, 256)                     # n * m == COMPARE_MAX: one reduction
  assert 256 * 256 == COMPARE_MAX and compared.name.startswith("r_")
  assert len(_kernels(257, 256)) > 10                  # one more output: sorted
  assert len(_kernels(5000, COMPARE_INDICES)) == 1     # few indices per row: compared
  small, large = _kernels(20000, 1024), _kernels(40000, 1024)
  assert len(small) == len(large)                      # more outputs: the same kernels, wider
  assert len(_kernels(20000, 2048)) <= len(small) + 5  # more indices: a few more sort steps
  for k in large:                                      # no loop over the indices or the outputs
    assert max(_loops(k), default=0) <= SCAN_BLOCK, (k.name, _loops(k))
    loads = sum(1 for u in k.kernel.uops if u.op is Ops.LOAD)
    assert loads <= 8 * (1024).bit_length() * 2, (k.name, loads)  # upcast 8: log2(m) probes


def test_sorted_scatters_render_for_naga_and_ptxas():
  idx, ints = Tensor.empty(400, dtype="int32"), Tensor.empty(400, dtype="int32")
  check_compiles([Tensor.empty(300).scatter_add(0, idx, Tensor.empty(400)),
                  Tensor.empty(300, dtype="int32").scatter(0, idx, ints)])
