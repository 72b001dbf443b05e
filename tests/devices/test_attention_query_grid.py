"""Fused attention over a symbolic query count (the page bundle's `seq` new tokens): a run-time
grid over the blocks of query rows and variants of one row per thread for small counts
(lowering/attention.py query_grid, _query_variants; compiler.with_grid), so a one-token step
does not compute a whole workgroup of padding rows, each walking every key; right against numpy
at each variant's range and past it, on PYTHON, PTXSIM and WEBGPU."""
from __future__ import annotations

import numpy as np
import kernelgen as kg
from kernelgen.uop.program import launch_dispatch, variant_for
from ops_util import sdpa_np

HI, KEYS, E = 40, 24, 16
RNG = np.random.default_rng(3)
Q, K, V = (RNG.standard_normal(s).astype(np.float32) for s in
           ((2, 3, HI, E), (2, 3, KEYS, E), (2, 3, KEYS, E)))


def _attention(q, causal=False):
  return kg.scaled_dot_product_attention(q, kg.Tensor(K), kg.Tensor(V), is_causal=causal)


def test_a_symbolic_query_count_launches_only_the_rows_it_needs():
  m = kg.Dim("m", 1, HI)
  kernel, = kg.compile(_attention(kg.Tensor.empty(2, 3, m, E, name="q")), "wgsl")
  assert kernel.launch.grid, "no run-time grid over the query rows"
  assert [(dim, most) for dim, most, _ in kernel.variants] == [("m", 1), ("m", 8)]
  for value, rows in ((1, 1), (5, 8), (8, 8)):
    picked = variant_for(kernel, {"m": value})
    assert picked.launch.workgroup_size[0] == rows
    assert launch_dispatch(picked.launch, {"m": value})[0] == 6      # one block per head
  # past the variants: the kernel's own workgroups (64 rows: one per batch entry)
  assert variant_for(kernel, {"m": 9}) is kernel
  assert launch_dispatch(kernel.launch, {"m": 9})[0] == 6


def test_causal_attention_over_a_symbolic_query_count_is_right(device):
  m = kg.Dim("m", 1, HI)
  for v in (1, 5, 9, HI):        # each variant, the kernel, the top
    q = kg.Tensor(Q[:, :, :v]).symbolic(2, 3, m.bind(v), E)
    got = _attention(q, True).numpy()
    mask = np.tril(np.ones((v, KEYS), bool))
    np.testing.assert_allclose(got, sdpa_np(Q[:, :, :v], K, V, mask=mask), rtol=1e-4, atol=1e-4)


def _rows_per_thread(kernel) -> int:
  """Query rows one thread of attention `kernel` computes: the values it stores over E."""
  width = 4 if "b0_out: array<vec4<f32>>" in kernel.source else 1
  return sum(width for line in kernel.source.splitlines()
             if line.lstrip().startswith("b0_out[") and " = " in line) // E


def test_a_symbolic_query_count_spreads_its_rows_over_threads_issue_37():
  """The tiny LM's decode step (seq 1..31, a recording's kernel for many runs on lavapipe:
  32 rows per thread) had ONE thread per head walk all 31 rows, every row's q and dot products
  unrolled: 9,756 lines of WGSL. A symbolic count's rows per thread stop at the least count the
  kernel serves (9: 1..8 take the variants), as a static count's stop at that count."""
  # (lo, hi, the least count the kernel runs at, rows per thread)
  for lo, hi, least, rows in ((1, HI, 9, 8), (1, 16, 9, 8), (1, 5, 2, 2), (12, HI, 12, 8),
                              (1, 2, 2, 2)):
    m = kg.Dim("m", lo, hi)
    kernel, = kg.compile(_attention(kg.Tensor.empty(2, 3, m, E, name="q")), "wgsl", upcast=32)
    assert _rows_per_thread(kernel) == rows <= least, (lo, hi, _rows_per_thread(kernel))
  # a static count keeps the adapter's rows: 32 rows of 40 in one thread
  kernel, = kg.compile(_attention(kg.Tensor(Q)), "wgsl", upcast=32)
  assert _rows_per_thread(kernel) == 32
  # and 7 static rows take 8 per thread (halved while twice the count or more), not 4
  kernel, = kg.compile(_attention(kg.Tensor(Q[:, :, :7].copy())), "wgsl", upcast=32)
  assert _rows_per_thread(kernel) == 8
