"""Row reductions over a symbolic axis (issue 34, "no speed lost to generality"): their loops, and
the row kernel's store loop, stop at the bound value (a run-time argument), in every layout (a
thread per row, lanes strided, lanes chunked: lowerer.py's _loop, rows.py's _row_limit), so a
short row costs what a short static row costs. Values against numpy at the range's ends and at
sizes that divide no lane, vector or unroll count, on PYTHON, PTXSIM and WEBGPU; one compile for
every value; WGSL validates and PTX assembles; static kernels keep constant loop ends."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.uop.ops import Ops, toposort
from ops_util import on  # noqa: F401 (a fixture)
from tools import ptxas_check, wgsl_validate

HI = 512
VALUES = (1, 2, 3, 17, 255, HI)
ROWS = np.random.default_rng(0).standard_normal((3, HI)).astype(np.float32) * 3

# a thread per row (its online softmax), 32 lanes reading a run each (CPU adapters), 16 strided
LAYOUTS = {"thread": {"row_lanes": 1, "row_online": True},
           "chunked": {"row_lanes": 32, "group_chunk": True},
           "strided": {"row_lanes": 16, "group_chunk": False}}


def _np(op, x):
  x = x.astype(np.float64)
  if op == "softmax":
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
  if op == "logsumexp":
    return np.log(np.exp(x).sum(-1))
  if op == "layernorm":
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
  if op == "rms_norm":
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
  return getattr(np, op)(x, axis=-1)


def _ours(op, x):
  if op == "rms_norm":
    return x * ((x * x).mean(-1, keepdim=True) + 1e-6).rsqrt()
  return getattr(x, op)(-1)


OPS = ("softmax", "logsumexp", "layernorm", "rms_norm", "sum", "max")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", OPS)
def test_row_ops_over_a_symbolic_axis_at_every_value(device, on, layout, op):
  on(device, **LAYOUTS[layout])
  n = kg.Dim("n", 1, HI)
  kg.clear_cache()
  misses = None
  for v in VALUES:
    x = kg.Tensor(ROWS[:, :v]).symbolic(3, n.bind(v))
    got = _ours(op, x).numpy()
    np.testing.assert_allclose(got, _np(op, ROWS[:, :v]).astype(np.float32), rtol=2e-5,
                               atol=2e-5, err_msg=f"n = {v}")
    misses = kg.cache_info()["misses"] if misses is None else misses
    assert kg.cache_info()["misses"] == misses, f"n = {v} compiled again"


def _loop_ends(tensor, target: str, **options) -> list[tuple[bool, int]]:
  """Every loop of every kernel: (whether its end reads a symbolic dim, the largest constant its
  end is made of), with the kernel's threads per workgroup."""
  out = []
  for kernel in kg.compile(tensor, target=target, **options):
    threads = int(np.prod(kernel.launch.workgroup_size))
    for u in kernel.kernel.uops:
      if u.op is Ops.RANGE:
        graph = toposort([u.src[0]])
        out.append((any(v.op is Ops.VAR for v in graph),
                    max([v.arg for v in graph if v.op is Ops.CONST] or [0]), threads))
  return out


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", OPS)
def test_every_loop_over_the_row_stops_at_the_bound_value(layout, op):
  """Each loop either reads the dim (the reductions' and the stores') or folds the lanes' partials
  (at most a trip per lane); the same program with a static row keeps its constant ends."""
  n = kg.Dim("n", 1, 4096)
  ends = _loop_ends(_ours(op, kg.Tensor.empty(64, n, name="x")), "wgsl", **LAYOUTS[layout])
  assert ends and all(sym or end <= threads for sym, end, threads in ends), ends
  assert sum(sym for sym, _, _ in ends) >= (1 if op in ("sum", "max") else 2), ends
  static = _loop_ends(_ours(op, kg.Tensor.empty(64, 4096, name="x")), "wgsl", **LAYOUTS[layout])
  assert static and not any(sym for sym, _, _ in static), static


@pytest.mark.parametrize("layout", LAYOUTS)
def test_symbolic_row_kernels_validate_and_assemble(layout):
  n = kg.Dim("n", 1, 4096)
  x = kg.Tensor.empty(64, n, name="x")
  outs = [x.softmax(-1), x.layernorm(-1), x.logsumexp(-1)]
  for kernel in kg.compile(outs, target="wgsl", **LAYOUTS[layout]):
    assert "u0_n" in kernel.source
    wgsl_validate(kernel.source)
  for kernel in kg.compile(outs, target="ptx", arch="sm_80", **LAYOUTS[layout]):
    ptxas_check(kernel.source, "sm_80")


# ---- fused attention over a symbolic number of keys ----------------------------------------------

KEYS = np.random.default_rng(1).standard_normal((2, HI, 8)).astype(np.float32)
QUERY = np.random.default_rng(2).standard_normal((2, 1, 8)).astype(np.float32)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_over_n_keys_with_nan_past_them(device, causal):
  """One query over the first n keys of a cache whose rows past n are NaN and inf (what a buffer
  holds there is unspecified): the key loop's last trip reads key n-1 in their place, and the
  result is numpy's at every n, with one compile."""
  from ops_util import sdpa_np
  n = kg.Dim("n", 1, HI)
  kg.clear_cache()
  misses = None
  for v in VALUES:
    cache = KEYS.copy()
    cache[:, v:] = np.where(np.arange(HI - v)[:, None] % 2, np.nan, np.inf)[None]
    kv = kg.Tensor(cache)[:, :n.bind(v)]
    got = kg.scaled_dot_product_attention(kg.Tensor(QUERY), kv, kv, is_causal=causal,
                                          offset=n.bind(v) - 1 if causal else None).numpy()
    want = sdpa_np(QUERY, KEYS[:, :v], KEYS[:, :v]).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"n = {v}")
    misses = kg.cache_info()["misses"] if misses is None else misses
    assert kg.cache_info()["misses"] == misses, f"n = {v} compiled again"


def test_attention_over_symbolic_keys_loads_whole_vectors():
  """The symbolic key loops' loads are the static kernel's vec4 loads (no per-element gated
  loads), and one key's more in the loop over the keys past the last whole trip
  (attention._split_key_loops); the kernel validates and assembles."""
  q = kg.Tensor.empty(1, 8, 1, 64, name="q")

  def sdpa(keys):
    kv = kg.Tensor.empty(1, 8, keys, 64, name="kv")
    return kg.scaled_dot_product_attention(q, kv, kv)
  (sym,) = kg.compile(sdpa(kg.Dim("n", 1, 2048)), target="wgsl")
  (static,) = kg.compile(sdpa(2048), target="wgsl")
  loads = [s.count(": vec4<f32> = b1_kv[") for s in (sym.source, static.source)]
  assert loads[0] == loads[1] + 64 // 4 and loads[1] > 0 and "b1_kv[select(" not in sym.source, \
    loads
  wgsl_validate(sym.source)
  (ptx,) = kg.compile(sdpa(kg.Dim("n", 1, 2048)), target="ptx", arch="sm_80")
  ptxas_check(ptx.source, "sm_80")
