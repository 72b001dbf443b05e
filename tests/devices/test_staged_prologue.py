"""Staged prologues (lowering/staged.py): a projection of ONE normalized row (a decode step's
LayerNorm or RMSNorm, then a Linear) is one kernel at any size up to STAGED_MAX elements a row,
each workgroup computing the row's statistics and the normalized row once into workgroup memory;
longer rows, or several rows past PROLOGUE_WORK, keep a row kernel of their own. Likewise a
decode step's attention (one query row per head) read whole by an output projection of at most
STAGED_ATTENTION_OUTPUTS outputs is computed by the projection's kernel; more outputs, or more
query rows, keep the attention kernel. Values against numpy on every device, at sizes that
divide no workgroup (outputs and row lengths); the kernels are valid WGSL (wgpu) and PTX
(ptxas)."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.graph.prologue import PROLOGUE_WORK, STAGED_ATTENTION_OUTPUTS, STAGED_MAX
from tools import ptxas_check, wgsl_validate


def _case(rows: int, k: int, n: int, rms: bool = False):
  """(kernelgen's norm(x) @ w.T + b, numpy's), x of `rows` rows of k, n outputs."""
  rng = np.random.default_rng(rows * 7 + k + n)
  x = (rng.standard_normal((rows, k)) + 0.5).astype(np.float32)
  g = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
  beta = (0.1 * rng.standard_normal(k)).astype(np.float32)
  w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
  b = rng.standard_normal(n).astype(np.float32)
  h = x.astype(np.float64)
  if rms:
    h = h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-5) * g
    t = kg.Tensor(x).rms_norm(k, kg.Tensor(g), 1e-5)
  else:
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * g + beta
    t = kg.Tensor(x).layernorm(-1, 1e-5, kg.Tensor(g), kg.Tensor(beta))
  return t @ kg.Tensor(w).T + kg.Tensor(b), h @ w.T.astype(np.float64) + b


# (rows, k, n, kernels): one row past PROLOGUE_WORK is staged (1 kernel), at STAGED_MAX too; a
# longer row, or two rows past PROLOGUE_WORK, keep the row kernel (2)
CASES = [(1, 256, 100, 1), (1, 300, 64, 1), (1, STAGED_MAX, 8, 1), (1, STAGED_MAX + 64, 8, 2),
         (2, 256, 100, 2)]


def test_the_cases_lie_on_both_sides_of_the_thresholds():
  for rows, k, n, _ in CASES:
    assert n * k > PROLOGUE_WORK


@pytest.mark.parametrize("rows,k,n,kernels", CASES)
def test_a_projection_of_one_normalized_row_is_one_kernel(device, rows, k, n, kernels):
  got, want = _case(rows, k, n)
  names = [c.name for c in kg.compile(got, target="wgsl")]
  assert len(names) == kernels, names
  np.testing.assert_allclose(got.numpy(), want, rtol=2e-4, atol=2e-4)


def test_rms_norm_is_staged_too(device):
  got, want = _case(1, 320, 72, rms=True)
  assert len(kg.compile(got, target="wgsl")) == 1
  np.testing.assert_allclose(got.numpy(), want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("k,n", [(256, 100), (STAGED_MAX, 8)])
def test_staged_kernels_are_valid_wgsl_and_ptx(k, n):
  got, _ = _case(1, k, n)
  (kernel,) = kg.compile(got, target="wgsl")
  assert "var<workgroup>" in kernel.source
  wgsl_validate(kernel.source)
  for kernel in kg.compile(got, target="ptx", arch="sm_80"):
    ptxas_check(kernel.source, "sm_80")


def _attention_case(queries: int, n: int, heads: int = 4, hd: int = 8, keys: int = 11):
  """(kernelgen's sdpa(q, k, v) rows @ w.T + b, numpy's): `queries` query rows per head."""
  rng = np.random.default_rng(queries + n)
  q, k, v = (rng.standard_normal((1, heads, m, hd)).astype(np.float32)
             for m in (queries, keys, keys))
  w = (rng.standard_normal((n, heads * hd)) / np.sqrt(heads * hd)).astype(np.float32)
  b = rng.standard_normal(n).astype(np.float32)
  s = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
  e = np.exp(s - s.max(-1, keepdims=True))
  att = (e / e.sum(-1, keepdims=True) @ v).transpose(0, 2, 1, 3).reshape(queries, heads * hd)
  with kg.no_grad():
    got = kg.scaled_dot_product_attention(kg.Tensor(q), kg.Tensor(k), kg.Tensor(v))
    got = got.swapaxes(1, 2).reshape(queries, heads * hd) @ kg.Tensor(w).T + kg.Tensor(b)
  return got, att @ w.T.astype(np.float64) + b


# (query rows, outputs, kernels): one query row per head into at most STAGED_ATTENTION_OUTPUTS
# outputs: one kernel; one more output, or two query rows: the attention kernel and the projection
ATTENTION_CASES = [(1, 40, 1), (1, STAGED_ATTENTION_OUTPUTS, 1),
                   (1, STAGED_ATTENTION_OUTPUTS + 1, 2), (2, 40, 2)]


@pytest.mark.parametrize("queries,n,kernels", ATTENTION_CASES)
def test_a_decode_attention_is_computed_by_its_output_projection(device, queries, n, kernels):
  got, want = _attention_case(queries, n)
  names = [c.name for c in kg.compile(got, target="wgsl")]
  assert len(names) == kernels, names
  assert names[0].startswith("attn_" if kernels == 2 else "attn_r_")   # (staged: named so)
  np.testing.assert_allclose(got.numpy(), want, rtol=2e-4, atol=2e-4)


def test_a_staged_attention_kernel_is_valid_wgsl_and_ptx():
  got, _ = _attention_case(1, 40)
  (kernel,) = kg.compile(got, target="wgsl")
  wgsl_validate(kernel.source)
  for kernel in kg.compile(got, target="ptx", arch="sm_80"):
    ptxas_check(kernel.source, "sm_80")
