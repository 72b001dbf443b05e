"""Option group_outputs (render/wgsl/adapters.py, GROUP_OUTPUTS): on the CPU adapters a reduction
with at least that many outputs takes a thread per output (its row read as vec4 loads: seq_vec),
not a workgroup per output (lowering/optimize.py group_size, whose own limit GROUP_MAX_OUTPUTS
stays for the other adapters). The bug: an LM's head on its last position only (576 -> 49152,
SmolLM2-135M) ran grouped on lavapipe at about twice the time of a thread per output."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.optimize import GROUP_MAX_OUTPUTS
from kernelgen.render.wgsl.adapters import GROUP_OUTPUTS, defaults
from ops_util import on  # noqa: F401  (fixture)

CPU_ADAPTERS = ("lavapipe", "swiftshader")


def head(n: int, k: int = 576, x=None, w=None):
  """x (1, k) @ w.T for a weight w (n, k): a 1-row reduction with n outputs (the CPU adapters'
  weights_t layout of a matmul weight)."""
  x = kg.Tensor.empty(1, k, name="x") if x is None else x
  w = kg.Tensor.empty(n, k, name="w") if w is None else w
  return x @ w.permute(1, 0)


def grouped(n: int, **options) -> bool:
  """The kernel of head(n) gives each output a workgroup of lanes (its partial sums in workgroup
  memory, more threads than outputs)."""
  (k,) = kg.compile(head(n), target="wgsl", **options)
  threads = k.launch.workgroup_size[0] * k.launch.dispatch[0]
  assert ("var<workgroup>" in k.launch.source) == (threads > n), k.launch.source
  return threads > n


def test_lm_head_matvec_is_not_grouped_on_cpu_adapters():
  """SmolLM2's head, 576 -> 49152: a thread per output on both CPU adapters; grouped as before
  on a discrete GPU and where the adapter is unknown."""
  for adapter in CPU_ADAPTERS:
    assert defaults(adapter, "rows")["group_outputs"] == GROUP_OUTPUTS < GROUP_MAX_OUTPUTS
    assert not grouped(49152, adapter=adapter), adapter
  assert grouped(49152, adapter="discrete") and grouped(49152)


@pytest.mark.parametrize("adapter", CPU_ADAPTERS)
def test_group_outputs_threshold_sides(adapter):
  """GROUP_OUTPUTS outputs take a thread each, half as many stay grouped; an explicit
  group_outputs wins over the table (and moves the default adapter's limit too). Without
  reduce_inner: with it, a 1-row matvec takes the split layout on either side
  (test_matvec_rows.py)."""
  assert not grouped(GROUP_OUTPUTS, adapter=adapter, reduce_inner=0)
  assert grouped(GROUP_OUTPUTS // 2, adapter=adapter, reduce_inner=0)
  assert grouped(GROUP_OUTPUTS, adapter=adapter, reduce_inner=0, group_outputs=GROUP_MAX_OUTPUTS)
  assert grouped(GROUP_OUTPUTS) and not grouped(GROUP_OUTPUTS, group_outputs=GROUP_OUTPUTS)


@pytest.mark.parametrize("adapter", CPU_ADAPTERS)
@pytest.mark.parametrize("n", [GROUP_OUTPUTS // 2, GROUP_OUTPUTS])
def test_group_outputs_computes_right(on, adapter, n):
  """Natively (wgpu) under each CPU adapter's table, both sides of the limit, against numpy."""
  on("WEBGPU", adapter=adapter)
  rng = np.random.default_rng(n)
  x, w = rng.standard_normal((1, 576), np.float32), rng.standard_normal((n, 576), np.float32)
  got = head(n, x=kg.Tensor(x), w=kg.Tensor(w)).numpy()
  np.testing.assert_allclose(got, x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)
