"""A matmul whose reduction is symbolic, (M, k) @ (k, N) with kg.Dim k (issue 34, "no speed lost
to generality"): its register tiles (lowering/regtile.py) compute from the operands as a static
matmul's do, without the padding's mask (tileplan.py `exact`): a loop of whole unrolled steps to
the bound value, then a loop over the one to three elements left (regtile.exact_loops). The
padding past k is filled with NaN here, so a read of it would show. Values: the range's ends and
both sides of every unroll (2, 4), vector width (4) and tile size (4, 8, 16), on PYTHON (the WGSL
kernel's linearized form), WEBGPU and PTXSIM (the PTX kernel, assembled by ptxas), and through
the public API on every device with one compile for every value."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.uop.ops import Ops, toposort
from tools import device_runtime, ptxas_check, run_named, wgsl_validate

M, N, HI = 64, 64, 40
VALUES = (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, HI)


def _pair(v):
  rng = np.random.default_rng(v)
  return (rng.standard_normal((M, v)).astype(np.float32),
          rng.standard_normal((v, N)).astype(np.float32))


def _matmul(target="wgsl", hi=HI, **options):
  k = kg.Dim("k", 1, hi)
  a, b = kg.Tensor.empty(M, k, name="a"), kg.Tensor.empty(k, N, name="b")
  (kernel,) = kg.compile(a @ b, target, **options)
  return kernel


def _run_k(runtime, kernel, v) -> np.ndarray:
  """`kernel` on `runtime` at k = v, the operands' padding NaN: (M, N)."""
  a, b = _pair(v)
  pa = np.full((M, HI), np.nan, np.float32)
  pa[:, :v] = a
  pb = np.full((HI, N), np.nan, np.float32)
  pb[:v] = b
  return run_named(runtime, kernel, {"a": pa, "b": pb}, {"k": v}).reshape(M, N)


def _masks_in_loops(kernel) -> int:
  """The WHEREs whose condition depends on a loop's index (a per-element mask)."""
  return sum(1 for u in kernel.kernel.uops if u.op is Ops.WHERE and
             any(s.op is Ops.RANGE for s in toposort([u.src[0]])))


def _loops_to_k(kernel) -> int:
  return sum(1 for u in kernel.kernel.uops if u.op is Ops.RANGE and
             any(s.op is Ops.VAR for s in toposort([u.src[0]])))


OPTIONS = [{}, {"adapter": "lavapipe"}, {"adapter": "swiftshader"},
           {"tile": (4, 4), "tile_unroll": 0}, {"tile": (8, 8), "tile_unroll": 4},
           {"tile": (8, 16), "tile_unroll": 8}]


@pytest.mark.parametrize("options", OPTIONS)
def test_a_symbolic_k_matmul_is_tiled_from_its_operands_without_a_mask(options):
  kernel = _matmul(**options)
  static = kg.compile(kg.Tensor.empty(M, HI, name="a") @ kg.Tensor.empty(HI, N, name="b"),
                      "wgsl", **options)[0]
  assert _masks_in_loops(kernel) == 0
  assert _loops_to_k(kernel) in (1, 2)       # the unrolled steps, the tail (none unrolled: one)
  # the tile's accumulators, vectors of its columns, as in the static kernel of the same shape
  accs = [u.dtype for u in kernel.kernel.uops if u.op is Ops.DEFINE_ACC]
  static_accs = [u.dtype for u in static.kernel.uops if u.op is Ops.DEFINE_ACC]
  assert accs[:len(static_accs)] == static_accs and len(accs) in (len(static_accs),
                                                                   2 * len(static_accs))
  wgsl_validate(kernel.source)


@pytest.mark.parametrize("options", OPTIONS[3:])
def test_a_symbolic_k_kernel_is_right_at_every_value_on_python_and_webgpu(options):
  kernel = _matmul(**options)
  for device in ("PYTHON", "WEBGPU"):
    runtime = device_runtime(device)
    for v in VALUES:
      a, b = _pair(v)
      np.testing.assert_allclose(_run_k(runtime, kernel, v), a @ b, rtol=1e-4, atol=1e-4,
                                 err_msg=f"{device} k = {v}")


@pytest.mark.parametrize("options", [{"stage": False}, {"tile": (8, 8), "tile_unroll": 4}])
def test_a_symbolic_k_ptx_kernel_assembles_and_is_right_on_ptxsim(options):
  kernel = _matmul("ptx", arch="sm_80", **options)
  assert _masks_in_loops(kernel) == 0 and _loops_to_k(kernel) in (1, 2)
  ptxas_check(kernel.source, "sm_80")
  runtime = device_runtime("PTXSIM")
  for v in (1, 3, 4, 9, 17, HI):
    a, b = _pair(v)
    np.testing.assert_allclose(_run_k(runtime, kernel, v), a @ b, rtol=1e-4, atol=1e-4,
                               err_msg=f"k = {v}")


def test_a_symbolic_k_matmul_is_right_at_every_value_and_compiles_once(device):
  k = kg.Dim("k", 1, HI)
  kg.clear_cache()
  misses = None
  for v in VALUES:
    a, b = _pair(v)
    x = kg.Tensor(a, device=device).symbolic(M, k.bind(v))
    y = kg.Tensor(b, device=device).symbolic(k.bind(v), N)
    np.testing.assert_allclose((x @ y).numpy(), a @ b, rtol=1e-4, atol=1e-4, err_msg=f"k = {v}")
    misses = kg.cache_info()["misses"] if misses is None else misses
    assert kg.cache_info()["misses"] == misses, f"k = {v} compiled again"


def test_a_symbolic_k_sum_of_products_with_a_prologue_is_right(device):
  """A fused elementwise op under the product (a scale and a ReLU on A) and a bias after it: the
  operands are computed, not only loaded, and the padding is never one of them."""
  k = kg.Dim("k", 1, HI)
  bias = np.linspace(-1, 1, N).astype(np.float32)
  for v in (1, 6, HI):
    a, b = _pair(v)
    x = kg.Tensor(a, device=device).symbolic(M, k.bind(v))
    y = kg.Tensor(b, device=device).symbolic(k.bind(v), N)
    got = ((x * 2).relu() @ y + kg.Tensor(bias, device=device)).numpy()
    np.testing.assert_allclose(got, np.maximum(a * 2, 0) @ b + bias, rtol=1e-4, atol=1e-4,
                               err_msg=f"k = {v}")
