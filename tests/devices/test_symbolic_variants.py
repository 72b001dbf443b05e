"""A symbolic matmul's variants for small bound values (lowering/variants.py): which register
tile each range of the leading dim gets, that the runtime picks it by the bound value
(uop/program.py variant_for), that all of them are compiled with the kernel (no bound value
compiles a kernel or creates a pipeline), and that every variant is right against numpy at the
range's ends and at values that divide no tile, on PYTHON, PTXSIM and WEBGPU; each variant's
WGSL validates and its PTX assembles. Static kernels take none."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.lowering.compile_cost import RUNS_MANY
from kernelgen.uop.ops import Ops
from kernelgen.uop.program import variant_for, with_variants
from tools import device_runtime, ptxas_check, wgsl_validate

HI, K, N = 256, 16, 64
VALUES = (1, 2, 3, 17, 255, HI)   # the ends, each variant's range, values that divide no tile
W = np.random.default_rng(1).standard_normal((K, N)).astype(np.float32)


def _rows(v):
  return np.random.default_rng(v).standard_normal((v, K)).astype(np.float32)


def _matmul(target="wgsl", m=None, **options):
  m = kg.Dim("m", 1, HI) if m is None else m
  x, w = kg.Tensor.empty(m, K, name="x"), kg.Tensor.empty(K, N, name="w")
  kernels = kg.compile(x @ w, target, **options)
  assert len(kernels) == 1        # kg.compile shows the symbolic kernel once
  return kernels[0]


def _rows_per_thread(kernel) -> int:
  """The register tile's rows: the run-time grid's threads per workgroup over its workgroup."""
  (_, _, per, *_), = kernel.launch.grid
  return per // kernel.local_size[0]


def test_a_symbolic_matmul_carries_a_tile_for_each_range_of_small_values():
  kernel = _matmul()
  # (1, 4) tiles for m = 1, (2, 4) for m = 2, (3, 4) for 3, (4, 4) up to 248, the kernel's own
  # (8, 8) above (where the heuristic's tile changes, value by value: variants.tile_ladder)
  assert [(dim, most) for dim, most, _ in kernel.variants] == \
    [("m", 1), ("m", 2), ("m", 3), ("m", 248)]
  assert [_rows_per_thread(v) for _, _, v in kernel.variants] == [1, 2, 3, 4]
  assert _rows_per_thread(kernel) == 8
  picked = {v: variant_for(kernel, {"m": v}) for v in VALUES}
  assert [picked[v] for v in (1, 2, 3, 17)] == [k for _, _, k in kernel.variants]
  assert picked[255] is kernel and picked[HI] is kernel
  for each in with_variants(kernel):
    assert each.launch.bindings == kernel.launch.bindings
    assert each.launch.uniforms == kernel.launch.uniforms


def test_lavapipes_tiles_follow_its_preferences_down_the_range():
  w = kg.Tensor.empty(512, 512, name="w")
  kernel = kg.compile(kg.Tensor.empty(kg.Dim("m", 1, 2048), 512, name="x") @ w, "wgsl",
                      adapter="lavapipe")[0]
  # 1 x 8, 2 x 8 and 3 x 8 (small_tiles), 4 x 4 to 24, 8 x 8 to 48, 16 x 8 to 112; the
  # kernel's 16 x 16 from m = 113 (long_tiles: K = 512, within a one-off compile budget)
  assert [most for _, most, _ in kernel.variants] == [1, 2, 3, 24, 48, 112]
  assert [_rows_per_thread(v) for _, _, v in kernel.variants] == [1, 2, 3, 4, 8, 16]
  assert _rows_per_thread(kernel) == 16
  assert len({v.source for v in with_variants(kernel)}) == 7


@pytest.mark.parametrize("adapter, values", [("lavapipe", (3, 17, 24, 25, 40)),
                                             ("swiftshader", (17, 24, 25, 40))])
def test_values_past_a_representative_run_the_tile_of_the_static_kernel(adapter, values):
  """(m, 512) @ (512, 512), m in 1..2048: past a representative value (3 > 2, 17 > 16, 25, 40)
  the variant that runs has the register tile of the static kernel of that shape (its WGSL
  with the tile forced is the static kernel's), where a tile picked at the top of its range
  (the ladder before variants.tile_ladder: 8 x 8 from m = 17 up to 32) left a few workgroups
  of padding rows (SwiftShader at m = 17: 1.36x the static kernel's GPU time)."""
  w = kg.Tensor.empty(512, 512, name="w")
  kernel = kg.compile(kg.Tensor.empty(kg.Dim("m", 1, 2048), 512, name="x") @ w, "wgsl",
                      adapter=adapter)[0]
  for v in values:
    picked = variant_for(kernel, {"m": v})
    rows = _rows_per_thread(picked)
    columns = 4 * sum(1 for u in picked.kernel.uops if u.op is Ops.DEFINE_ACC) // rows
    # (for many runs: a one-off run's static kernel of this little work may drop the adapter's
    # unrolled reduction, lowering/compile_cost.py work_ms; its tile is the same)
    static = kg.compile(kg.Tensor.empty(v, 512, name="x") @ w, "wgsl", adapter=adapter,
                        runs=RUNS_MANY)[0]
    forced = kg.compile(kg.Tensor.empty(v, 512, name="x") @ w, "wgsl", tile=(rows, columns),
                        adapter=adapter)[0]
    assert forced.source == static.source, f"m = {v}: the static kernel's tile is not {rows} " \
                                           f"x {columns}"


@pytest.mark.parametrize("build", [
  lambda: kg.Tensor.empty(HI, K, name="x") @ kg.Tensor.empty(K, N, name="w"),     # static
  lambda: kg.Tensor.empty(kg.Dim("m", 1, HI), K, name="x").sum(-1),               # no tile
  lambda: kg.Tensor.empty(kg.Dim("m", 1, 4), K, name="x") @ kg.Tensor.empty(K, N, name="w")])
def test_kernels_without_a_symbolic_register_tile_take_no_variants(build):
  assert all(k.variants == () for k in kg.compile(build(), "wgsl"))


def test_a_forced_tile_takes_no_variants():
  assert _matmul(tile=(4, 4)).variants == ()


def test_every_variant_validates_as_wgsl_and_assembles_as_ptx():
  wgsl = _matmul()
  ptx = _matmul("ptx", arch="sm_80", stage=False)    # (PTX stages matmuls by default: no grid)
  assert len(wgsl.variants) == len(ptx.variants) == 4
  for each in with_variants(wgsl):
    wgsl_validate(each.source)
  for each in with_variants(ptx):
    ptxas_check(each.source, "sm_80")


def test_symbolic_matmul_is_right_at_every_value_and_compiles_once(device):
  m = kg.Dim("m", 1, HI)
  w = kg.Tensor(W, device=device).realize()
  runtime = device_runtime(device)
  misses = pipelines = None
  for v in VALUES:
    x = kg.Tensor(_rows(v), device=device).symbolic(m.bind(v), K)
    np.testing.assert_allclose((x @ w).numpy(), _rows(v) @ W, rtol=1e-4, atol=1e-4)
    built = len(getattr(runtime, "pipelines", ()))
    if misses is None:
      misses, pipelines = kg.cache_info()["misses"], built
    assert (kg.cache_info()["misses"], built) == (misses, pipelines), f"m = {v} compiled"


def test_each_ptx_variant_is_right_on_ptxsim():
  """PTXSIM's own compile stages a matmul (no variants); the register-tiled kernel with its
  variants, run on PTXSIM at each value (the runtime picks the variant)."""
  runtime = device_runtime("PTXSIM")
  kernel = _matmul("ptx", stage=False)
  assert kernel.variants
  for v in VALUES:
    got = _run(runtime, kernel, {"x": _rows(v), "w": W}, {"m": v})
    np.testing.assert_allclose(got[:v], _rows(v) @ W, rtol=1e-4, atol=1e-4)


def test_a_replay_keeps_a_bind_group_per_variant():
  """WEBGPU's run_many (ONNX replays) keeps bind groups per launch: each variant's own (a
  bind group made for one pipeline's layout does not fit another's)."""
  runtime = device_runtime("WEBGPU")
  kernel, keep = _matmul(**runtime.render_options()), {}
  for v in (1, HI, 2, 1, HI):
    got = _run(runtime, kernel, {"x": _rows(v), "w": W}, {"m": v}, keep)
    np.testing.assert_allclose(got[:v], _rows(v) @ W, rtol=1e-4, atol=1e-4)


def _run(runtime, kernel, inputs: dict, values: dict, keep: dict | None = None) -> np.ndarray:
  """`kernel` run on `runtime` with `inputs` (padded to each buffer's size) by name (with
  `keep`, through run_many, keeping its bind groups there, on the same buffers every time: a
  kept bind group binds them); the output buffer (the one not named in `inputs`) as float32
  rows of N."""
  if keep is None or "buffers" not in keep:
    handles = [runtime.alloc(spec.size * 4) for spec in kernel.buffers]
    if keep is not None:
      keep["buffers"] = handles
  handles = keep["buffers"] if keep is not None else handles
  for spec, handle in zip(kernel.buffers, handles):
    if spec.name in inputs:
      data = np.zeros(spec.size, np.float32)
      data[:inputs[spec.name].size] = inputs[spec.name].ravel()
      runtime.copyin(handle, data.tobytes())
    else:
      out = handle
  if keep is None:
    runtime.run(kernel, handles, values)
  else:
    runtime.run_many([(kernel, handles, "matmul")], values, keep)
  return np.frombuffer(runtime.copyout(out), np.float32).reshape(-1, N)
