"""Symbolic kernels take the static kernels' fast forms (issue 34, "no speed lost to generality").

- Softmax over rows of n: the padding's mask (tensor/symbolic.masked) does not hide the max from
  the online softmax (reductions.unmasked): a thread per row takes max and exp-sum in one loop,
  and every exp2 is the bare one of softmax's non-positive argument, as the static kernel's
  (SwiftShader, (64, n): 1.43-1.46x the static kernel's GPU time at n = 1000 and 4096 before).
- Short symbolic rows: a variant with a thread per row reading scalars up to the adapter's
  row_short (lavapipe ran a thread per row with vec4 loads 1000x slower at n = 1..16), lane
  variants unrolled once (variants.SHORT_ROW_OPTIONS, LANE_VARIANT_OPTIONS).
- Fused attention over n keys: the key loop runs n // 4 trips of 4 keys, then the rest a key per
  trip (attention._split_key_loops), reading no key past n, so no k or v value is masked (the
  one loop of ceil(n / 4) trips masked every value: 1.3-1.4x, 2.3x at n = 1); below 4 keys a
  variant of one key per trip (lavapipe ran the 4-key loop making no trip 1000x slower).
Values against numpy at the range's ends and at sizes that divide no unroll or vector width,
with NaN and inf in the padding, on PYTHON, PTXSIM and WEBGPU; WGSL validates, PTX assembles."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.variants import LANE_VARIANT_OPTIONS, SHORT_ROW_OPTIONS
from kernelgen.uop.ops import EXP2_BOUNDS, Ops, toposort
from kernelgen.uop.program import variant_for
from ops_util import on, sdpa_np, softmax_edge_rows  # noqa: F401 (a fixture)
from tools import ptxas_check, wgsl_validate

HI = 512
VALUES = (1, 2, 3, 4, 5, 7, 9, 40, 77, 255, HI)
THREAD = {"row_lanes": 1, "row_online": True}


def _uops(tensor, target="wgsl", **options):
  (kernel,) = kg.compile(tensor, target=target, **options)
  return kernel.kernel.uops


def _var_loops(uops) -> int:
  return sum(u.op is Ops.RANGE and any(s.op is Ops.VAR for s in toposort([u.src[0]]))
             for u in uops)


def test_symbolic_softmax_takes_the_online_form_of_the_static_one():
  sym = _uops(kg.Tensor.empty(3, kg.Dim("n", 1, HI), name="x").softmax(-1), **THREAD)
  static = _uops(kg.Tensor.empty(3, HI, name="x").softmax(-1), **THREAD)
  ranges = [sum(u.op is Ops.RANGE for u in uops) for uops in (sym, static)]
  assert ranges == [2, 2], ranges          # max and exp-sum in one loop, then the stores
  assert _var_loops(sym) == 2
  exps = [u.arg for u in sym if u.op is Ops.EXP2]
  assert exps and all(arg in EXP2_BOUNDS for arg in exps), exps


def _padded_rows(v: int) -> np.ndarray:
  out = softmax_edge_rows(np.random.default_rng(v).standard_normal((6, HI)).astype(np.float32))
  out[:, v:] = np.where(np.arange(HI - v) % 2, np.nan, np.inf)
  return out


def _softmax_np(x):
  x = x.astype(np.float64)
  with np.errstate(invalid="ignore"):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("adapter, short, local", [("lavapipe", 96, 8), ("swiftshader", 8, 64)])
def test_short_symbolic_rows_take_a_thread_per_row_reading_scalars(adapter, short, local):
  x = kg.Tensor.empty(64, kg.Dim("n", 1, 4096), name="x")
  (kernel,) = kg.compile(x.softmax(-1), "wgsl", adapter=adapter)
  dim, most, variant = kernel.variants[1]           # (variants[0]: n = 1 alone, below)
  assert (dim, most, variant.local_size[0]) == ("n", short, local)   # (row_short_groups)
  assert "array<f32>" in variant.source and "vec4" not in variant.source
  assert variant_for(kernel, {"n": 2}) is variant and variant_for(kernel, {"n": short + 1}) \
    is not variant
  wgsl_validate(variant.source)
  (static,) = kg.compile(kg.Tensor.empty(64, 77, name="x").softmax(-1), "wgsl", adapter=adapter)
  assert static.variants == ()


@pytest.mark.parametrize("adapter", ["lavapipe", "swiftshader"])
def test_a_symbolic_row_at_the_low_end_of_its_range_runs_without_loops(adapter):
  """n = 1 (the range's low end) runs a variant with the dim read as 1: no loop to the run-time
  length (SwiftShader ran those loops 1.3-1.8x slower than the static kernel), the one read of
  the uniform left gating the stores, so it binds what the kernel binds."""
  x = kg.Tensor.empty(64, kg.Dim("n", 1, 4096), name="x")
  (kernel,) = kg.compile(x.softmax(-1), "wgsl", adapter=adapter)
  dim, most, pinned = kernel.variants[0]
  assert (dim, most) == ("n", 1) and variant_for(kernel, {"n": 1}) is pinned
  assert "for (" not in pinned.source and pinned.source.count("kg_vars.u0_n") == 1
  assert "if (" in pinned.source.split("kg_vars.u0_n == 1i")[1]
  assert pinned.launch.uniforms == kernel.launch.uniforms
  assert pinned.launch.bindings == kernel.launch.bindings
  wgsl_validate(pinned.source)


@pytest.mark.parametrize("layout", [THREAD, {}, SHORT_ROW_OPTIONS,
                                    {"row_lanes": 8, "group_vec": 4, **LANE_VARIANT_OPTIONS}])
def test_symbolic_online_softmax_with_edge_rows_at_every_value(device, on, layout):
  """Rows all -inf, -inf first, with a NaN or a +inf, as numpy, the padding NaN and inf."""
  on(device, **layout)
  n = kg.Dim("n", 1, HI)
  for v in VALUES:
    rows = _padded_rows(v)
    got = kg.Tensor(rows)[:, :n.bind(v)].softmax(-1).numpy()
    np.testing.assert_allclose(got, _softmax_np(rows[:, :v]).astype(np.float32), rtol=2e-5,
                               atol=2e-5, err_msg=f"n = {v}")


def _sdpa(q, keys):
  kv = kg.Tensor.empty(1, 8, keys, 64, name="kv")
  return kg.scaled_dot_product_attention(q, kv, kv)


def test_symbolic_attention_masks_no_key_values():
  """Two key loops that read n, with the WHEREs of the static kernel's one loop each (its
  online softmax's guard): no k or v value is selected."""
  q = kg.Tensor.empty(1, 8, 1, 64, name="q")
  sym, static = _uops(_sdpa(q, kg.Dim("n", 1, 2048))), _uops(_sdpa(q, 2048))
  assert _var_loops(sym) == 2
  wheres = [sum(u.op is Ops.WHERE for u in uops) for uops in (sym, static)]
  assert wheres[0] <= 2 * wheres[1], wheres


KEYS = np.random.default_rng(1).standard_normal((2, HI, 8)).astype(np.float32)


def test_attention_takes_one_key_per_trip_below_its_block():
  q = kg.Tensor.empty(1, 8, 1, 64, name="q")
  (kernel,) = kg.compile(_sdpa(q, kg.Dim("n", 1, 2048)), target="wgsl")
  [(_, low, pinned), (dim, most, variant)] = kernel.variants    # (n = 1 alone: pinned.py)
  assert (dim, most) == ("n", 3) and _var_loops(variant.kernel.uops) == 1
  assert low == 1 and _var_loops(pinned.kernel.uops) == 0 and "for (" not in pinned.source
  assert pinned.launch.uniforms == kernel.launch.uniforms
  assert variant_for(kernel, {"n": 1}) is pinned and variant_for(kernel, {"n": 2}) is variant
  assert variant_for(kernel, {"n": 3}) is variant and variant_for(kernel, {"n": 4}) is kernel
  wgsl_validate(variant.source)
  wgsl_validate(pinned.source)
  (static,) = kg.compile(_sdpa(q, 3), target="wgsl")
  assert static.variants == ()
  pos = kg.Dim("pos", 0, 2047)          # a cache read up to pos + 1: pos <= 2 is 3 keys or fewer
  cache = kg.Tensor.empty(1, 8, 2048, 64, name="cache")[:, :, :pos + 1]
  (decode,) = kg.compile(kg.scaled_dot_product_attention(q, cache, cache), target="wgsl")
  assert [(dim, most) for dim, most, _ in decode.variants] == [("pos", 0), ("pos", 2)]


@pytest.mark.parametrize("queries, causal, options", [(1, False, {}), (3, False, {"upcast": 2}),
                                                      (2, True, {}), (3, True, {"upcast": 2}),
                                                      (3, False, {"attention_keys": 1})])
def test_symbolic_attention_split_loops_at_every_value(device, on, queries, causal, options):
  """q of `queries` rows over the first n keys of a cache NaN and inf past them (causal: the
  queries are the last positions, offset n - queries), with `options` (rows per thread, keys per
  trip), against numpy at every n."""
  on(device, **options)
  query = np.random.default_rng(queries).standard_normal((2, queries, 8)).astype(np.float32)
  n = kg.Dim("n", 1, HI)
  for v in VALUES:
    if causal and v < queries:
      continue
    cache = KEYS.copy()
    cache[:, v:] = np.where(np.arange(HI - v)[:, None] % 2, np.nan, np.inf)[None]
    kv = kg.Tensor(cache)[:, :n.bind(v)]
    got = kg.scaled_dot_product_attention(kg.Tensor(query), kv, kv, is_causal=causal,
                                          offset=n.bind(v) - queries if causal else None)
    mask = np.arange(v)[None, :] <= np.arange(queries)[:, None] + v - queries if causal else None
    want = sdpa_np(query, KEYS[:, :v], KEYS[:, :v], mask=mask).astype(np.float32)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5, err_msg=f"n = {v}")


@pytest.mark.parametrize("target", ["wgsl", "ptx"])
def test_symbolic_attention_split_loops_validate_and_assemble(target):
  q = kg.Tensor.empty(1, 8, 3, 64, name="q")
  options = {"arch": "sm_80"} if target == "ptx" else {"upcast": 2}
  for kernel in kg.compile(_sdpa(q, kg.Dim("n", 1, 2048)), target=target, **options):
    if target == "ptx":
      ptxas_check(kernel.source, "sm_80")
    else:
      wgsl_validate(kernel.source)
