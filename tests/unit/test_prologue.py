"""A matmul computes the row norm it reads (graph/prologue.py): a decode step's LayerNorm or
RMSNorm of one row is no kernel of its own while the matmul's outputs times the row length are
at most PROLOGUE_WORK; past it (a prompt's many rows, a wide projection) the norm keeps its row
kernel, but for one row (of at most STAGED_MAX), which is staged (lowering/staged.py; the tests
of PROLOGUE_WORK turn staging off, tests/devices/test_staged_prologue.py tests it). Values
against numpy on both sides, in the thread-per-output, grouped and staged layouts."""
from __future__ import annotations

import os

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor
from kernelgen.graph import prologue
from kernelgen.graph.schedule import kernel_reduces, schedule
from tools import default_device, ptxas_check, wgsl_validate


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  with default_device(monkeypatch, os.environ.get("KERNELGEN_TEST_DEVICE", "PYTHON")):
    yield


def _data(*shape, seed=0):
  return np.random.default_rng(seed + 7 * len(shape)).standard_normal(shape).astype(np.float32)


def _layernorm(x, w, b):
  x = x.astype(np.float64)
  return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b


def _rmsnorm(x, w, eps=1e-6):
  x = x.astype(np.float64)
  return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _projection(rows: int, d: int, n: int, norm: str = "layer"):
  """(out, numpy's value): norm(x) @ W^T + bias, as nn.Linear computes it."""
  x, w, b = _data(rows, d), 1 + 0.1 * _data(d, seed=1), 0.1 * _data(d, seed=2)
  weight, bias = (_data(n, d, seed=3) / np.sqrt(d)).astype(np.float32), _data(n, seed=4)
  if norm == "layer":
    h, want = Tensor(x).layernorm(-1, 1e-5, Tensor(w), Tensor(b)), _layernorm(x, w, b)
  else:
    h, want = Tensor(x).rms_norm(d, Tensor(w), 1e-6), _rmsnorm(x, w)
  out = h @ Tensor(weight).T + Tensor(bias)
  return out, want @ weight.T.astype(np.float64) + bias


def _has_rows(items) -> bool:
  return any(item.rows for item in items)


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_a_decode_rows_norm_is_computed_by_the_projection(norm):
  out, want = _projection(1, 64, 96, norm)
  items = schedule([out.node])
  assert len(items) == 1 and not _has_rows(items)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("d, n", [(64, prologue.PROLOGUE_WORK // 64),        # at the threshold
                                  (256, prologue.PROLOGUE_WORK // 256)])
def test_at_the_threshold_the_norm_is_a_prologue(d, n):
  out, _ = _projection(1, d, n)
  assert len(schedule([out.node])) == 1


@pytest.mark.parametrize("rows, d, n", [(1, 64, prologue.PROLOGUE_WORK // 64 + 1),   # wide
                                        (64, 64, 96),                               # a prompt
                                        (1, 1024, prologue.PROLOGUE_WORK // 1024 + 1)])
def test_past_the_threshold_the_norm_keeps_its_row_kernel(monkeypatch, rows, d, n):
  monkeypatch.setattr(prologue, "STAGED", False)
  out, _ = _projection(rows, d, n)
  assert rows * n * d > prologue.PROLOGUE_WORK
  items = schedule([out.node])
  assert len(items) == 2 and items[0].rows and not items[1].rows


@pytest.mark.parametrize("rows, d, n", [(1, 64, prologue.PROLOGUE_WORK // 64 + 1),
                                        (1, 1024, prologue.PROLOGUE_WORK // 1024 + 1)])
def test_past_the_threshold_one_row_is_staged(rows, d, n):
  out, want = _projection(rows, d, n)
  assert len(schedule([out.node])) == 1
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows, d, n", [(1, 32, 24), (3, 32, 24), (1, 256, 40), (2, 300, 17)])
def test_values_on_both_sides_of_the_threshold(monkeypatch, rows, d, n):
  """The same projections with PROLOGUE_WORK just above and just below their work: both
  schedules give numpy's values (d = 256, 300: long enough for a grouped reduction on GPUs)."""
  monkeypatch.setattr(prologue, "STAGED", False)
  for work, kernels in ((rows * n * d, 1), (rows * n * d - 1, 2)):
    monkeypatch.setattr(prologue, "PROLOGUE_WORK", work)
    kg.clear_cache()            # no plan of the other schedule
    out, want = _projection(rows, d, n)
    assert len(schedule([out.node])) == kernels
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_without_row_kernels_there_is_no_prologue():
  out, want = _projection(1, 32, 16)
  assert len(schedule([out.node], row_max=0)) > 1
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_softmax_read_by_a_matmul_keeps_its_row_kernel():
  """Its exp varies per element: recomputed per output, it would run n times per element."""
  p, v = _data(1, 32), _data(32, 16, seed=1)
  out = Tensor(p).softmax(-1) @ Tensor(v)
  assert len(kernel_reduces(schedule([out.node])[-1])) == 1    # the matmul's only
  e = np.exp(p - p.max(-1, keepdims=True))
  np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True) @ v, rtol=1e-4, atol=1e-5)


def test_a_norm_whose_rows_are_not_the_reduced_axis_is_no_prologue():
  """norm(x)^T @ W reduces across rows, not along them: each step would need a row's stats."""
  x, w = _data(8, 16), _data(8, 4, seed=1)
  out = Tensor(x).layernorm().T @ Tensor(w)
  assert len(kernel_reduces(schedule([out.node])[-1])) == 1    # the matmul's only
  ln = _layernorm(x, 1.0, 0.0)
  np.testing.assert_allclose(out.numpy(), ln.T @ w, rtol=1e-4, atol=1e-4)


def test_a_norm_read_by_two_projections_is_computed_by_each():
  x, w1, w2 = _data(1, 32), _data(32, 8, seed=1), _data(32, 12, seed=2)
  h = Tensor(x).layernorm()
  a, b = h @ Tensor(w1), h @ Tensor(w2)
  assert len(schedule([a.node, b.node])) == 2
  ln = _layernorm(x, 1.0, 0.0)
  np.testing.assert_allclose(a.numpy(), ln @ w1, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(b.numpy(), ln @ w2, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("d, staged", [(32, False), (256, False), (32, True), (256, True)])
def test_prologue_kernels_are_valid_wgsl_and_ptx(monkeypatch, d, staged):
  """The thread-per-output (d = 32) and grouped (d = 256: workgroup memory, barriers) layouts,
  and staged (workgroup memory); WGSL with lavapipe's adapter defaults too."""
  monkeypatch.setattr(prologue, "STAGED", staged)
  out, _ = _projection(1, d, prologue.PROLOGUE_WORK // d)
  for options in ({}, {"adapter": "lavapipe"}):
    kernels = kg.compile(out, target="wgsl", **options)
    assert len(kernels) == 1
    wgsl_validate(kernels[0].source)
  for kernel in kg.compile(out, target="ptx", arch="sm_80"):
    ptxas_check(kernel.source, "sm_80")
