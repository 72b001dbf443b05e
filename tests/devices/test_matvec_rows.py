"""A 1-row fp32 matrix-vector product x (1, K) @ w.T (w (N, K): the CPU adapters' weights_t layout
of a matmul weight, an LM's head and decode projections) on the CPU adapters takes the packed-weight
matvec's layout (issue 35): its one reduced axis split (K // t, t) (lowering/lowerer.py
split_shape), the t elements unrolled in each trip of a loop (reduce_inner) and reduce_rows outputs
per thread sharing the loop (reduce_step: lowering/threads.py _stepped), so each trip's loads of x
serve several outputs. The bug: a thread per output (or a workgroup per output below
group_outputs) ran at 0.5-0.9x of this layout's speed (bench/group_outputs.py, `rows8`). Other
adapters keep their layout; values as numpy's on WEBGPU at sizes no tile divides and at SmolLM2's."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.render.wgsl.adapters import ROWS
from ops_util import on  # noqa: F401  (fixture)

CPU_ADAPTERS = ("lavapipe", "swiftshader")


def head(n: int, k: int, x=None, w=None):
  """x (1, k) @ w.T for a weight w (n, k)."""
  x = kg.Tensor.empty(1, k, name="x") if x is None else x
  w = kg.Tensor.empty(n, k, name="w") if w is None else w
  return x @ w.permute(1, 0)


def layout(n: int, k: int, **options) -> tuple[int, str]:
  """(outputs per thread, WGSL) of head(n, k)'s one kernel."""
  (kernel,) = kg.compile(head(n, k), target="wgsl", **options)
  threads = kernel.launch.workgroup_size[0] * kernel.launch.dispatch[0]
  return n // threads if threads < n else 0, kernel.launch.source


@pytest.mark.parametrize("adapter", CPU_ADAPTERS)
def test_lm_head_takes_the_rows_layout_on_cpu_adapters(adapter):
  """SmolLM2's head, 576 -> 49152: ROWS outputs a thread, a loop of 576 / 32 = 18 trips over
  runs of 32 elements read as vec4 (x and w), no workgroup memory."""
  rows, src = layout(49152, 576, adapter=adapter)
  assert rows == ROWS, src
  assert "< 18i;" in src and src.count("array<vec4<f32>>") == 2 and "var<workgroup>" not in src


@pytest.mark.parametrize("adapter", CPU_ADAPTERS)
def test_decode_projections_take_the_rows_layout(adapter):
  """The decode projections' sizes (576 -> 1536, 1536 -> 576, 576 -> 576) too, where grouped
  lanes per output ran slower (bench/group_outputs.py)."""
  for n, k in ((1536, 576), (576, 1536), (576, 576)):
    rows, src = layout(n, k, adapter=adapter)
    assert rows > 1 and "var<workgroup>" not in src and f"< {k // 32}i;" in src, (n, k, src)


def test_other_adapters_keep_their_layout():
  """A discrete GPU and an unknown adapter: a workgroup of lanes per output as before; a CPU
  adapter with reduce_inner=0 a thread per output (option group_outputs)."""
  for options in ({"adapter": "discrete"}, {}):
    rows, src = layout(49152, 576, **options)
    assert rows == 0 and "var<workgroup>" in src, options
  rows, src = layout(49152, 576, adapter="lavapipe", reduce_inner=0)
  assert rows == 0 and "var<workgroup>" not in src and "< 18i;" not in src


def test_k_no_step_divides():
  """K = 100 splits (4, 25): a loop of 4 trips over 25 unrolled elements; K = 97 (prime) has no
  split and keeps a thread per output."""
  _, src = layout(1000, 100, adapter="lavapipe")
  assert "< 4i;" in src and "var<workgroup>" not in src
  assert "< 4i;" not in layout(1000, 97, adapter="lavapipe")[1]


@pytest.mark.parametrize("adapter", CPU_ADAPTERS)
@pytest.mark.parametrize("n, k", [(1000, 100), (1000, 97), (49152, 576), (576, 1536), (1000, 40)])
def test_matvec_rows_values_on_webgpu(on, adapter, n, k):
  """Natively (wgpu) under each CPU adapter's table, against numpy (float64)."""
  on("WEBGPU", adapter=adapter)
  rng = np.random.default_rng(n + k)
  x, w = rng.standard_normal((1, k), np.float32), rng.standard_normal((n, k), np.float32)
  got = head(n, k, x=kg.Tensor(x), w=kg.Tensor(w)).numpy()
  np.testing.assert_allclose(got, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-4,
                             atol=1e-4)


@pytest.mark.parametrize("adapter", CPU_ADAPTERS)
def test_matvec_rows_fp16_values_on_webgpu(on, adapter):
  """fp16 x and w (storage emulated where the adapter lacks shader-f16) take the same layout;
  the result is within fp16 rounding of numpy's product of the same fp16 values."""
  half = kg.dtypes.float16
  x16, w16 = kg.Tensor.empty(1, 100, dtype=half), kg.Tensor.empty(1000, 100, dtype=half)
  (kernel,) = kg.compile(head(1000, 100, x16, w16), target="wgsl", adapter=adapter)
  assert "< 4i;" in kernel.launch.source and "var<workgroup>" not in kernel.launch.source
  on("WEBGPU", adapter=adapter)
  rng = np.random.default_rng(7)
  x = rng.standard_normal((1, 100)).astype(np.float16)
  w = rng.standard_normal((1000, 100)).astype(np.float16)
  got = head(1000, 100, x=kg.Tensor(x), w=kg.Tensor(w)).numpy()
  assert got.dtype == np.float16
  want = x.astype(np.float64) @ w.T.astype(np.float64)
  np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("adapter", CPU_ADAPTERS)
def test_fc_layer_with_epilogue_values_on_webgpu(on, adapter):
  """A classifier's 1-row FC layer (AlexNet's, ResNet-50's: the kernels this layout changed in
  bench/dump_kernels.py's light models), relu(x @ w.T + b), against numpy."""
  src = layout(1000, 2048, adapter=adapter)[1]     # 1000 outputs: a row per thread, 64 trips
  assert "< 64i;" in src and "var<workgroup>" not in src
  on("WEBGPU", adapter=adapter)
  rng = np.random.default_rng(5)
  x, w = rng.standard_normal((1, 2048), np.float32), rng.standard_normal((1000, 2048), np.float32)
  b = rng.standard_normal(1000).astype(np.float32)
  got = (head(1000, 2048, x=kg.Tensor(x), w=kg.Tensor(w)) + kg.Tensor(b)).relu().numpy()
  want = np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
