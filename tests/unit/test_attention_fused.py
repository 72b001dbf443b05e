"""Fused attention (lazy ATTENTION, lowering/attention.py): scaled_dot_product_attention as ONE
kernel that walks the keys once per query row with an online softmax, and its fallback to
matmul -> softmax -> matmul (head dims past ATTENTION_MAX_DIM, autograd recording).

Values against numpy (float64) on PYTHON, PTXSIM and WEBGPU with one and several query rows per
thread (ragged: L not a multiple of them): causal and not, L != S, bool and additive masks (a
fully masked row is NaN, -inf entries), batch broadcasting, NaN inputs, float16, head dims on
both sides of the threshold, long key loops; kernel counts; the autograd fallback's gradient;
WGSL validation (naga and Tint) and ptxas-clean PTX (sm_75, sm_90, sm_120).
"""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.tensor.ops.attention import ATTENTION_MAX_DIM
from kernelgen.lowering import attention as attention_lowering
from tools import DEVICES, ptxas_check, tint_validate, wgsl_validate
from ops_util import on, sdpa_np  # noqa: F401 (on: a fixture)

RNG = np.random.default_rng(7)


def data(*shape, dtype=np.float32):
  return RNG.standard_normal(shape).astype(dtype)


def attention(q, k, v, mask=None, **kw):
  t = lambda a: None if a is None else kg.Tensor(a)
  return kg.scaled_dot_product_attention(t(q), t(k), t(v), mask=t(mask), **kw)


def kernel_count(tensor, target: str = "python") -> int:
  return len(kg.compile(tensor, target=target))


def _bool_mask():
  mask = RNG.random((5, 7)) > 0.4
  mask[:, 0], mask[2] = True, False            # row 2 fully masked: NaN
  return mask


def _float_mask():
  mask = data(3, 5, 7)
  mask[:, 1, 3:] = -np.inf
  return mask


# name -> (q, k, v, mask, keyword arguments)
CASES = {
  "plain L<S, E!=Ev": lambda: (data(2, 3, 5, 4), data(2, 3, 7, 4), data(2, 3, 7, 3), None, {}),
  "causal L<S": lambda: (data(2, 5, 4), data(2, 7, 4), data(2, 7, 4), None, {"is_causal": True}),
  "causal L>S": lambda: (data(2, 7, 4), data(2, 5, 4), data(2, 5, 2), None, {"is_causal": True}),
  "bool mask": lambda: (data(2, 5, 4), data(2, 7, 4), data(2, 7, 4), _bool_mask(), {}),
  "additive mask, -inf": lambda: (data(2, 3, 5, 4), data(2, 3, 7, 4), data(2, 3, 7, 4),
                                  _float_mask(), {}),
  "batch broadcast, scale": lambda: (data(2, 3, 5, 4), data(3, 7, 4), data(1, 3, 7, 4), None,
                                     {"scale": 0.3}),
  "one query row, causal": lambda: (data(3, 1, 4), data(3, 6, 4), data(3, 6, 4), None,
                                    {"is_causal": True}),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [1, 4])
def test_values_match_numpy(on, device, rows):
  on(device, upcast=rows)
  for name, make in CASES.items():
    q, k, v, mask, kw = make()
    out = attention(q, k, v, mask, **kw)
    assert out.node.op.name == "ATTENTION", name
    want = sdpa_np(q, k, v, mask, kw.get("is_causal", False), kw.get("scale"))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_a_one_off_kernel_over_its_compile_budget_takes_a_key_per_trip(on, device):
  """A one-off run whose one-row kernel is still over the compile budget (a driver cost given
  high: lavapipe's makes sdpa L=512 d=64 so, lowering/compile_cost.py) walks one key per trip
  (ONE_OFF_KEYS): a smaller kernel, the same values, said to be capped."""
  on(device, driver_cost=(100.0, 0.0))
  for name, make in CASES.items():
    q, k, v, mask, kw = make()
    out = attention(q, k, v, mask, **kw)
    (kernel,) = kg.compile(out, target="wgsl", driver_cost=(100.0, 0.0))
    (usual,) = kg.compile(out, target="wgsl")
    assert kernel.capped and not usual.capped and len(kernel.source) < len(usual.source), name
    want = sdpa_np(q, k, v, mask, kw.get("is_causal", False), kw.get("scale"))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_long_key_loops_unroll(on, device, monkeypatch):
  """More keys than MAX_TRIPS blocks: the loop takes more keys per trip (lavapipe's loop budget,
  lowerer.py), the last trip's extra keys masked; causal ends vary per thread."""
  monkeypatch.setattr(attention_lowering, "MAX_TRIPS", 2)
  on(device, upcast=2)
  q, k, v = data(2, 5, 4), data(2, 21, 4), data(2, 21, 3)
  for causal in (False, True):
    got = attention(q, k, v, is_causal=causal).numpy()
    np.testing.assert_allclose(got, sdpa_np(q, k, v, causal=causal), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_nan_and_inf_inputs_poison_their_rows(on, device):
  on(device, upcast=2)
  q, k, v = data(1, 4, 4), data(1, 6, 4), data(1, 6, 4)
  q[0, 1, 2] = np.nan                        # row 1: NaN
  k[0, 4, 0] = np.inf                        # key 4: +inf score for rows with q > 0 there
  want = sdpa_np(q, k, v, causal=True)
  got = attention(q, k, v, is_causal=True).numpy()
  assert np.isnan(got[0, 1]).all()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_constant_all_false_mask_gives_nan_rows(on, device, dtype):
  """Found by the fuzzer (fuzz_ops_deep seed 61): with a mask made by a creation function the
  shader compiler knows every score is -inf, proved the accumulators 0 and folded acc / l (0 / 0)
  to 0 on WEBGPU; a fully masked row is NaN, as torch (the numerator is opaque now)."""
  on(device)
  q, k, v = (kg.Tensor.randn(*shape, seed=i, dtype=dtype)
             for i, shape in enumerate(((2, 3), (3, 3), (3, 8))))
  for mask in (kg.Tensor.zeros(3, dtype="bool"), kg.Tensor.zeros(2, 3, dtype="bool")):
    out = kg.scaled_dot_product_attention(q, k, v, mask)
    assert out.node.op.name == "ATTENTION"
    assert np.isnan(out.numpy()).all()


@pytest.mark.parametrize("device", DEVICES)
def test_float16_accumulates_in_float32(on, device):
  on(device)
  q, k, v = (data(2, 6, 8, dtype=np.float16) * 3 for _ in range(3))
  out = attention(q, k, v, is_causal=True)
  assert out.dtype == kg.dtypes.float16 and out.node.op.name == "ATTENTION"
  want = sdpa_np(q, k, v, causal=True)
  np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [ATTENTION_MAX_DIM, ATTENTION_MAX_DIM + 1])
def test_head_dims_on_both_sides_of_the_threshold(on, device, dim):
  on(device)
  q, k, v = data(2, 3, dim) * 0.3, data(2, 4, dim) * 0.3, data(2, 4, dim)
  out = attention(q, k, v, is_causal=True)
  assert (out.node.op.name == "ATTENTION") == (dim <= ATTENTION_MAX_DIM)
  np.testing.assert_allclose(out.numpy(), sdpa_np(q, k, v, causal=True), rtol=1e-5, atol=1e-5)


def test_kernel_counts():
  """L = 1024 (B=1, H=8, d=64): one kernel, causal or not; the fallbacks: 4 (scores, row max,
  row sum, the normalize fused into the second matmul)."""
  q, k, v = (kg.Tensor.empty(1, 8, 1024, 64) for _ in range(3))
  for causal in (False, True):
    for target in ("python", "wgsl", "ptx"):
      assert kernel_count(q.scaled_dot_product_attention(k, v, is_causal=causal), target) == 1
  wide = [kg.Tensor.empty(1, 2, 1024, ATTENTION_MAX_DIM + 32) for _ in range(3)]
  assert kernel_count(kg.scaled_dot_product_attention(*wide, is_causal=True)) == 4
  ints = [kg.Tensor.empty(1, 2, 16, 8, dtype="int32") for _ in range(3)]
  assert kg.scaled_dot_product_attention(*ints).node.op.name != "ATTENTION"


def test_autograd_keeps_the_split_form_and_its_gradients():
  """With q recording a gradient sdpa is the split form (differentiable); its gradient matches
  central differences of numpy's sdpa; under no_grad the same call is fused."""
  q, k, v, w = data(1, 3, 4), data(1, 5, 4), data(1, 5, 2), data(1, 3, 2)
  tq = kg.Tensor(q, requires_grad=True)
  out = kg.scaled_dot_product_attention(tq, kg.Tensor(k), kg.Tensor(v), is_causal=True)
  assert out.node.op.name != "ATTENTION"
  (out * kg.Tensor(w)).sum().backward()
  loss = lambda x: (sdpa_np(x, k, v, causal=True) * w).sum()
  num, eps = np.zeros(q.shape), 1e-6
  for idx in np.ndindex(q.shape):
    up, down = q.astype(np.float64), q.astype(np.float64)
    up[idx] += eps
    down[idx] -= eps
    num[idx] = (loss(up) - loss(down)) / (2 * eps)
  np.testing.assert_allclose(tq.grad.numpy(), num, rtol=1e-3, atol=1e-4)
  with kg.no_grad():
    fused = kg.scaled_dot_product_attention(tq, kg.Tensor(k), kg.Tensor(v), is_causal=True)
  assert fused.node.op.name == "ATTENTION"
  np.testing.assert_allclose(fused.numpy(), out.numpy(), rtol=1e-5, atol=1e-6)


def _programs():
  q, k, v = (kg.Tensor.empty(2, 5, 8) for _ in range(3))
  mask_b = kg.Tensor.empty(5, 5, dtype="bool")
  mask_f = kg.Tensor.empty(2, 5, 5)
  h = [kg.Tensor.empty(2, 5, 8, dtype="float16") for _ in range(3)]
  return [q.scaled_dot_product_attention(k, v, is_causal=True),
          q.scaled_dot_product_attention(k, v, mask=mask_b),
          q.scaled_dot_product_attention(k, v, mask=mask_f), kg.scaled_dot_product_attention(*h)]


@pytest.mark.parametrize("rows", [1, 4])
def test_wgsl_validates(rows):
  for program in _programs():
    for kernel in kg.compile(program, target="wgsl", upcast=rows):
      wgsl_validate(kernel.source, kernel.name)
      tint_validate(kernel.source, kernel.name)


@pytest.mark.parametrize("arch", ["sm_75", "sm_90", "sm_120"])
def test_ptx_assembles(arch):
  for program in _programs():
    for kernel in kg.compile(program, target="ptx", arch=arch):
      ptxas_check(kernel.source, arch)
