"""A symbolic register tile's variant for the low end of its dim's range is the static kernel of
that size (graph/at_value.py, pinned.STATIC; issue 34, "no speed lost to generality"): lavapipe
ran matmul (m, 512) @ (512, 512) at m = 1 1.28-1.33x the static kernel's GPU time, whose 1-row
matvec reads a thread's rows as vector loads in a grid of exactly its threads, where the m = 1
variant was a 1 x 8 register tile. Checked: the variant's WGSL is the static kernel's but for
its name, on both CPU adapters' options with option static_low_end set; without it (every
adapter's default: lowering/variants.py) the tile variant stays; it binds the kernel's buffers
at their padded sizes; a dim whose axis does not lead the output (a symbolic N) takes none; and values
against numpy at m = 1, 2, 3, 4 and one that divides no tile, the padding NaN, on PYTHON and
WEBGPU."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.uop.program import variant_for
from tools import device_runtime, run_named, wgsl_validate

HI, K, N = 64, 32, 40


def _unnamed(source: str) -> str:
  return re.sub(r"\bfn \w+\(", "fn kernel(", source)


def _compile(x, w, **options):
  (kernel,) = kg.compile(x @ w, "wgsl", **options)
  return kernel


@pytest.mark.parametrize("options", [{"adapter": "lavapipe", "static_low_end": True},
                                     {"adapter": "swiftshader", "static_low_end": True}])
def test_the_low_end_variant_is_the_static_kernel_of_that_size(options):
  w = kg.Tensor.empty(512, 512, name="w")
  kernel = _compile(kg.Tensor.empty(kg.Dim("m", 1, 2048), 512, name="x"), w, **options)
  static = _compile(kg.Tensor.empty(1, 512, name="x"), w, **options)
  picked = variant_for(kernel, {"m": 1})
  assert kernel.variants[0][:2] == ("m", 1) and picked is kernel.variants[0][2]
  assert _unnamed(picked.source) == _unnamed(static.source)
  assert (picked.local_size, picked.global_size) == (static.local_size, static.global_size)
  assert picked.launch.bindings == kernel.launch.bindings and not picked.launch.grid
  assert variant_for(kernel, {"m": 2}) is not picked      # (it serves m = 1 only)
  wgsl_validate(picked.source)


@pytest.mark.parametrize("options", [{"adapter": "lavapipe"}, {"adapter": "swiftshader"}, {}])
def test_adapters_without_static_low_end_keep_the_tile_variant(options):
  """No adapter sets the option: SwiftShader ran the 1 x 8 tile variant faster than the static
  m = 1 kernel; lavapipe's page built the static variants for tens of seconds (variants.py)."""
  w = kg.Tensor.empty(512, 512, name="w")
  kernel = _compile(kg.Tensor.empty(kg.Dim("m", 1, 2048), 512, name="x"), w, **options)
  assert all(v.launch.grid for _, _, v in kernel.variants)


def test_a_dim_that_does_not_lead_the_output_takes_no_static_variant():
  a = kg.Tensor.empty(64, 512, name="a")
  kernel = _compile(a, kg.Tensor.empty(512, kg.Dim("n", 1, 2048), name="x"), adapter="lavapipe",
                    static_low_end=True)
  assert kernel.variants and all(v.launch.grid for _, _, v in kernel.variants)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_symbolic_m_matmul_is_right_at_small_values(device):
  runtime = device_runtime(device)
  kernel = _compile(kg.Tensor.empty(kg.Dim("m", 1, HI), K, name="x"),
                    kg.Tensor.empty(K, N, name="w"), adapter="lavapipe", static_low_end=True)
  w = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32)
  for m in (1, 2, 3, 4, 7):
    x = np.full((HI, K), np.nan, np.float32)
    x[:m] = np.random.default_rng(m).standard_normal((m, K))
    got = run_named(runtime, kernel, {"x": x, "w": w}, {"m": m}, out_fill=np.nan)
    np.testing.assert_allclose(got.reshape(HI, N)[:m], x[:m] @ w, rtol=1e-4, atol=1e-4,
                               err_msg=f"m = {m}")


def test_an_input_read_elementwise_is_cut_too():
  """(x * 2).exp() @ w: the input read at its own shape (an elementwise prologue) is cut to its
  first rows (graph/at_value.py _prefix), so m = 1..3 take the static kernels of those sizes (m = 1
  the same WGSL; m = 2, 3 read x as scalars, the kernel's binding); it took the tile variants
  before. Found by the symbolic fuzzer's cut pass (fuzz_symbolic.py
  static_cuts), which no program starting elementwise on its input reached."""
  w = kg.Tensor.empty(512, 512, name="w")

  def kernel(rows):
    return _compile((kg.Tensor.empty(rows, 512, name="x") * 2.0).exp(), w, adapter="lavapipe",
                    static_low_end=True)
  symbolic = kernel(kg.Dim("m", 1, 2048))
  assert [(most, v.exact, bool(v.launch.grid)) for _, most, v in symbolic.variants[:3]] == \
    [(1, True, False), (2, True, False), (3, True, False)]
  assert _unnamed(variant_for(symbolic, {"m": 1}).source) == _unnamed(kernel(1).source)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_a_cut_elementwise_prologue_is_right(device):
  runtime = device_runtime(device)
  x = kg.Tensor.empty(kg.Dim("m", 1, HI), K, name="x")
  kernel = _compile((x * 0.5).exp(), kg.Tensor.empty(K, N, name="w"), adapter="lavapipe",
                    static_low_end=True)
  w = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32)
  for m in (1, 2, 3, 4, 7):
    data = np.full((HI, K), np.nan, np.float32)
    data[:m] = np.random.default_rng(m).standard_normal((m, K))
    got = run_named(runtime, kernel, {"x": data, "w": w}, {"m": m}, out_fill=np.nan)
    np.testing.assert_allclose(got.reshape(HI, N)[:m], np.exp(data[:m] * 0.5) @ w, rtol=1e-4,
                               atol=1e-4, err_msg=f"m = {m}")
