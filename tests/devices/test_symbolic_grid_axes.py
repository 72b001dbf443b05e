"""Run-time grids along a symbolic axis that is not the leading one, and variants for it (issue
34, "no speed lost to generality"): a register-tiled matmul with symbolic N, (M, K) @ (K, n),
runs its threads over the tiles with n outermost (lowering/tile_grid.py tile_threads), so its
launch (Launch.grid, uop/program.py launch_dispatch) shrinks with the bound value, and it carries
tile variants for small n (lowering/variants.py); a row kernel over a symbolic row (softmax over
rows of n) carries variants with fewer lanes per row. Values against numpy at the range's ends
and at values that divide no tile, lane or workgroup: the WGSL kernel and each variant run on
PYTHON (its linearized form) and WEBGPU, the PTX one (unstaged) on PTXSIM, a PTX bundle, and
kg.Dim programs on every device with one compile for every value."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.uop.program import launch_dispatch, variant_for, with_variants
from tools import device_runtime, ptxas_check, wgsl_validate

M, K, HI = 64, 16, 128
VALUES = (1, 2, 3, 13, 77, HI)     # the ends, the variants' ranges, values that divide no tile
A = np.random.default_rng(1).standard_normal((M, K)).astype(np.float32)


def _cols(v):
  return np.random.default_rng(v).standard_normal((K, v)).astype(np.float32)


def _matmul(target="wgsl", **options):
  n = kg.Dim("n", 1, HI)
  a, x = kg.Tensor.empty(M, K, name="a"), kg.Tensor.empty(K, n, name="x")
  (kernel,) = kg.compile(a @ x, target, **options)   # kg.compile shows the kernel once
  return kernel


def _threads(kernel, v) -> int:
  return int(np.prod(launch_dispatch(kernel.launch, {"n": v}))) * kernel.local_size[0]


def test_a_symbolic_n_matmul_launches_only_the_tiles_its_bound_value_needs():
  kernel = _matmul()
  assert kernel.launch.grid and [name for name, _ in kernel.launch.grid[0][0]] == ["n"]
  for each in with_variants(kernel):
    sizes = [launch_dispatch(each.launch, {"n": v})[0] for v in VALUES]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1] == each.launch.dispatch[0], sizes
  # the kernel's (4, 4) tiles: 16 row blocks, ceil(n / 4) column blocks, whole workgroups
  rows, cols = M // 4, -(-77 // 4)
  assert rows * cols <= _threads(kernel, 77) < rows * cols + kernel.local_size[0] + rows


def test_a_symbolic_n_matmul_carries_a_tile_for_each_range_of_small_values():
  kernel = _matmul()
  # (4, 1) tiles for n = 1, (4, 2) for n = 2, (4, 3) for n = 3, the kernel's own (4, 4) above
  assert [(dim, most) for dim, most, _ in kernel.variants] == [("n", 1), ("n", 2), ("n", 3)]
  assert [variant_for(kernel, {"n": v}) for v in (1, 2, 3)] == \
    [k for _, _, k in kernel.variants]
  assert all(variant_for(kernel, {"n": v}) is kernel for v in (4, 13, HI))
  assert [_threads(v, 1) for _, _, v in kernel.variants] == [M // 4] * 3
  for each in with_variants(kernel):
    assert each.launch.bindings == kernel.launch.bindings
    assert each.launch.uniforms == kernel.launch.uniforms
    wgsl_validate(each.source)
  for each in with_variants(_matmul("ptx", arch="sm_80", stage=False)):
    assert each.launch.grid
    ptxas_check(each.source, "sm_80")


def test_lavapipes_symbolic_n_tiles_follow_its_preferences_down_the_range():
  a, x = kg.Tensor.empty(64, 512, name="a"), kg.Tensor.empty(512, kg.Dim("n", 1, 2048), name="x")
  (kernel,) = kg.compile(a @ x, "wgsl", adapter="lavapipe")
  assert kernel.launch.grid and kernel.variants
  mosts = [most for _, most, _ in kernel.variants]
  assert mosts == sorted(mosts) and mosts[0] == 1 and mosts[-1] < 2048
  assert _threads(kernel.variants[0][2], 1) <= 16
  assert _threads(variant_for(kernel, {"n": 1}), 1) < _threads(kernel, 2048) // 32


def _run_n(runtime, kernel, v, strip: bool = True) -> np.ndarray:
  """`kernel` (without its variants where `strip`: that kernel itself, not the one variant_for
  picks) on `runtime` at n = v: A @ _cols(v), its output's first v columns."""
  if strip:
    kernel = dataclasses.replace(kernel, variants=())
  handles = [runtime.alloc(spec.size * 4) for spec in kernel.buffers]
  padded = np.zeros((K, HI), np.float32)
  padded[:, :v] = _cols(v)
  data = {"a": A, "x": padded}
  for spec, handle in zip(kernel.buffers, handles):
    if spec.name in data:
      runtime.copyin(handle, data[spec.name].tobytes())
    else:
      out = handle
  runtime.run(kernel, handles, {"n": v})
  return np.frombuffer(runtime.copyout(out), np.float32).reshape(M, HI)[:, :v]


@pytest.mark.parametrize("device, target", [("PYTHON", "wgsl"), ("WEBGPU", "wgsl"),
                                            ("PTXSIM", "ptx")])
def test_the_kernel_and_each_variant_are_right_at_every_value(device, target):
  runtime = device_runtime(device)
  options = {"arch": "sm_80", "stage": False} if target == "ptx" else {}
  kernel = _matmul(target, **options)
  assert kernel.variants and kernel.launch.grid
  for each in with_variants(kernel):
    for v in VALUES:
      np.testing.assert_allclose(_run_n(runtime, each, v), A @ _cols(v), rtol=1e-4, atol=1e-4,
                                 err_msg=f"n = {v}")
  for v in VALUES:                    # the runtime's own pick
    np.testing.assert_allclose(_run_n(runtime, kernel, v, strip=False), A @ _cols(v), rtol=1e-4,
                               atol=1e-4, err_msg=f"n = {v}")


def test_python_runs_fewer_workgroups_for_a_smaller_n():
  runtime = device_runtime("PYTHON")
  kernel = dataclasses.replace(_matmul(), variants=())
  counts = []
  for v in (1, 77, HI):
    before = runtime.workgroups
    _run_n(runtime, kernel, v)
    counts.append(runtime.workgroups - before)
  assert counts[0] < counts[1] < counts[2] == int(np.prod(kernel.launch.dispatch)), counts


def test_symbolic_n_matmul_is_right_at_every_value_and_compiles_once(device):
  n = kg.Dim("n", 1, HI)
  a = kg.Tensor(A, device=device).realize()
  runtime = device_runtime(device)
  misses = pipelines = None
  for v in VALUES:
    x = kg.Tensor(_cols(v), device=device).symbolic(K, n.bind(v))
    np.testing.assert_allclose((a @ x).numpy(), A @ _cols(v), rtol=1e-4, atol=1e-4,
                               err_msg=f"n = {v}")
    built = len(getattr(runtime, "pipelines", ()))
    if misses is None:
      misses, pipelines = kg.cache_info()["misses"], built
    assert (kg.cache_info()["misses"], built) == (misses, pipelines), f"n = {v} compiled"


def test_a_ptx_bundle_launches_the_blocks_a_symbolic_n_needs(tmp_path):
  """The bundle keeps the kernel's grid and its variants (manifest kernels[i].variants, their
  own files); Bundle.run launches the variant the value picks, with its grid."""
  n = kg.Dim("n", 1, HI)
  program = {"y": kg.Tensor(A).realize() @ kg.Tensor.empty(K, n, name="x")}
  bundle = kg.export(program, str(tmp_path), format="ptx", stage=False)
  (kernel,) = kg.compile(program["y"], target="ptx", arch="sm_80", stage=False)
  assert kernel.launch.grid and kernel.variants
  (entry,) = bundle.manifest["kernels"]
  assert [(v["dim"], v["most"]) for v in entry["variants"]] == \
      [(dim, most) for dim, most, _ in kernel.variants]
  assert [(tmp_path / v["file"]).read_text() for v in entry["variants"]] == \
      [k.source for _, _, k in kernel.variants]
  for v in (1, 2, 13, HI):
    blocks = {}

    def progress(info):
      if info["blocks"] is not None:
        blocks[info["kernel"]] = info["blocks"][1]
    got = bundle.run({"x": _cols(v)}, device="PTXSIM", progress=progress)
    np.testing.assert_allclose(got["y"].numpy(), A @ _cols(v), rtol=1e-4, atol=1e-4)
    want = int(np.prod(launch_dispatch(variant_for(kernel, {"n": v}).launch, {"n": v})))
    assert blocks.get(1, want) == want
    assert (want < int(np.prod(kernel.launch.dispatch))) == (v < HI)


# ---- a row kernel over a symbolic row: lanes per row for short rows ---------------------------

ROWS = np.random.default_rng(2).standard_normal((8, 512)).astype(np.float32) * 3


def test_a_softmax_over_a_symbolic_row_carries_fewer_lanes_for_short_rows():
  x = kg.Tensor.empty(8, kg.Dim("n", 1, 512), name="x")
  (kernel,) = kg.compile(x.softmax(-1), "wgsl")
  # rows.py's default: 32 lanes per row for the longest row; a lane per 8 elements at least
  # below (a thread per row under 16 elements, which variants take as 2 lanes:
  # variants.ROW_VARIANT_MIN_LANES)
  assert [(dim, most) for dim, most, _ in kernel.variants] == \
      [("n", 31), ("n", 63), ("n", 127), ("n", 255)]
  assert [v.local_size[0] for _, _, v in kernel.variants] == [2, 4, 8, 16]
  assert kernel.local_size[0] == 32
  assert [variant_for(kernel, {"n": v}).local_size[0] for v in (1, 15, 16, 77, 256, 512)] == \
      [2, 2, 2, 8, 32, 32]
  for each in with_variants(kernel):
    wgsl_validate(each.source)
  static = kg.compile(kg.Tensor.empty(8, 512, name="x").softmax(-1), "wgsl")
  assert all(k.variants == () for k in static)
  forced = kg.compile(x.softmax(-1), "wgsl", row_lanes=16)
  assert all(k.variants == () for k in forced)


@pytest.mark.parametrize("op", ["softmax", "layernorm"])
def test_row_kernels_over_a_symbolic_row_are_right_at_every_value(device, op):
  n = kg.Dim("n", 1, 512)
  kg.clear_cache()
  misses = None
  for v in (1, 7, 15, 16, 33, 77, 255, 512):
    x = kg.Tensor(ROWS[:, :v], device=device).symbolic(8, n.bind(v))
    got = getattr(x, op)(-1).numpy()
    a = ROWS[:, :v].astype(np.float64)
    if op == "softmax":
      want = np.exp(a - a.max(-1, keepdims=True))
      want /= want.sum(-1, keepdims=True)
    else:
      want = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=2e-5, atol=2e-5,
                               err_msg=f"n = {v}")
    misses = kg.cache_info()["misses"] if misses is None else misses
    assert kg.cache_info()["misses"] == misses, f"n = {v} compiled again"
