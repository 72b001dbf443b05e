"""Write fusion (graph/schedule.py): an in-place write at a symbolic position (a KV cache's)
whose value is a projection that no other kernel reads computes the projection in the write's own
kernel, its LayerNorm prologue (graph/prologue.py) and bias with it: a thread per element for a
short reduction, a workgroup per element for a long one (a grouped reduction, optimize.py
group_size); values stored straight into the cache. A projection that another kernel reads as a
whole stays a kernel of its own, and the write copies it. Checked against numpy on every device;
the kernels are valid WGSL (wgpu) and PTX (ptxas)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import nn
from kernelgen.graph import prologue
from kernelgen.lowering.optimize import GROUP_MIN_REDUCE
from tools import ptxas_check, wgsl_validate

MAX, POS = 9, 5


def _case(n: int, k: int, norm: bool = False, seed: int = 0):
  """(cache with its row POS written from y = linear(x) (of layernorm(x) with `norm`), y, numpy's
  expected cache, numpy's y)."""
  rng = np.random.default_rng(seed + n + k)
  x = rng.standard_normal((1, k)).astype(np.float32)
  layer = nn.Linear(k, n)
  w, b = layer.weight.numpy().astype(np.float64), layer.bias.numpy().astype(np.float64)
  h, t = x.astype(np.float64), kg.Tensor(x)
  if norm:
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
    t = nn.LayerNorm(k)(t)
  want_y = h @ w.T + b
  cache, y = kg.Tensor.zeros(MAX, n).realize(), layer(t)
  p = kg.Dim("pos", 0, MAX - 1).bind(POS)
  cache[p:p + 1] = y
  want = np.zeros((MAX, n))
  want[POS] = want_y[0]
  return cache, y, want, want_y


# (n outputs, k reduced): a thread per element below GROUP_MIN_REDUCE, a workgroup above
SIZES = [(24, 16), (40, GROUP_MIN_REDUCE + 64)]


@pytest.mark.parametrize("n,k", SIZES)
def test_a_projection_written_in_place_is_one_kernel(device, n, k):
  cache, _, want, _ = _case(n, k)
  with kg.no_grad():
    kernels = kg.compile(cache, target="wgsl")
    assert [c.name for c in kernels] == [f"write_1_{n}"]
    grouped = k >= GROUP_MIN_REDUCE           # (its lanes fold through workgroup memory)
    assert ("var<workgroup>" in kernels[0].source) == grouped
    np.testing.assert_allclose(cache.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("k,staged,kernels", [(16, True, 1), (256, True, 1), (16, False, 1),
                                               (256, False, 2)])
def test_a_normed_projection_written_in_place(device, monkeypatch, k, staged, kernels):
  """The norm is the write's prologue, staged (lowering/staged.py: one row); without staging
  only within PROLOGUE_WORK (graph/prologue.py), else a row kernel before the write."""
  monkeypatch.setattr(prologue, "STAGED", staged)
  n = 40
  cache, _, want, _ = _case(n, k, norm=True)
  with kg.no_grad():
    names = [c.name for c in kg.compile(cache, target="wgsl")]
    assert names[-1] == f"write_1_{n}" and len(names) == kernels, names
    np.testing.assert_allclose(cache.numpy(), want, rtol=1e-4, atol=1e-4)


def test_the_normed_cases_lie_on_both_sides_of_the_prologue_threshold():
  assert prologue.PROLOGUE_WORK // 40 in range(16, 256)


def test_a_projection_another_kernel_reads_is_its_own_kernel(device):
  """A sum over the projection reads it as a whole: the projection is a kernel, the write copies
  it (plus its bias), and the sum reads it."""
  n, k = 24, 16
  cache, y, want, want_y = _case(n, k)
  with kg.no_grad():
    out = cache[POS:POS + 1] + y.sum()
    names = [c.name for c in kg.compile(out, target="wgsl")]
    assert f"write_1_{n}" in names and f"r_1_{n}__{k}" in names, names
    np.testing.assert_allclose(out.numpy(), want[POS:POS + 1] + want_y.sum(), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("n,k", SIZES)
def test_fused_write_kernels_are_valid_wgsl_and_ptx(n, k):
  cache, _, _, _ = _case(n, k, norm=True)
  for kernel in kg.compile(cache, target="wgsl"):
    wgsl_validate(kernel.source)
  for kernel in kg.compile(cache, target="ptx", arch="sm_80"):
    ptxas_check(kernel.source, "sm_80")
