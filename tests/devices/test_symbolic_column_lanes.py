"""A register-tiled matmul over a symbolic N, (M, K) @ (K, n), runs its tiles with n outermost
so its run-time grid shrinks with the bound value (lowering/tile_grid.py tile_threads); its lanes
now walk runs of column tiles first (Opts.tile_chunk, lowering/threads.py grid_chunk), as a
static kernel's lanes walk its columns (issue 34, lavapipe (64, 512) @ (512, n) at n = 2048:
lanes 4 row blocks apart ran 1.2-1.3x the static kernel's GPU time). Structure: the lanes'
column tile is the lane index modulo a run of 8 or more, in the kernel and in the static one.
Values against numpy at the range's ends and at values that divide no tile or run of tiles, on
PYTHON (the WGSL kernel linearized), WEBGPU and PTXSIM (the PTX kernel), the kernel itself
(without its variants) and the runtime's pick."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.uop.program import launch_dispatch
from tools import device_runtime, run_named

M, K, HI = 32, 8, 2048
VALUES = (1, 17, 77, 1000, 2047, 2048)
A = np.random.default_rng(3).standard_normal((M, K)).astype(np.float32)


def _cols(v):
  return np.random.default_rng(v).standard_normal((K, v)).astype(np.float32)


def _column_lanes(source: str, cols: int) -> int:
  """The run of lanes along the columns in WGSL `source`: N where the thread's first column is
  built from `kg_lid0 % N` times the tile's `cols`, the workgroup's size where a workgroup's
  lanes span its row of tiles (`kg_lid0` times `cols`), 0 where the lane index does not give
  it."""
  found = re.search(rf"let (v\d+): i32 = kg_lid0 % (\d+)i;\n\s*let v\d+: i32 = \1 \* {cols}i;",
                    source)
  if found:
    return int(found.group(2))
  whole = re.search(rf"let v\d+: i32 = kg_lid0 \* {cols}i;", source)
  size = re.search(r"@workgroup_size\((\d+)", source)
  return int(size.group(1)) if whole and size else 0


def test_lavapipes_symbolic_n_kernel_walks_the_columns_first_as_the_static_one():
  a = kg.Tensor.empty(64, 512, name="a")
  (kernel,) = kg.compile(a @ kg.Tensor.empty(512, kg.Dim("n", 1, 2048), name="x"), "wgsl",
                         adapter="lavapipe")
  (static,) = kg.compile(a @ kg.Tensor.empty(512, 2048, name="x"), "wgsl", adapter="lavapipe")
  assert kernel.launch.grid and kernel.variants        # the kernel serves the top of the range
  assert _column_lanes(static.source, 16) >= 8          # the static kernel's 16 x 16 tiles
  assert _column_lanes(kernel.source, 16) >= 8
  # the same workgroups launched at every bound value as with the tiles in their old order:
  # ceil(column tiles * row tiles / workgroup)
  for v in (1009, 1025, 1100, 2047, 2048):
    assert launch_dispatch(kernel.launch, {"n": v})[0] == -(-(-(-v // 16) * 4) // 64), v


def test_a_forced_tile_chunk_of_zero_keeps_the_tiles_order():
  a = kg.Tensor.empty(64, 512, name="a")
  x = kg.Tensor.empty(512, kg.Dim("n", 1, 2048), name="x")
  (kernel,) = kg.compile(a @ x, "wgsl", adapter="lavapipe", tile_chunk=0)
  assert _column_lanes(kernel.source, 16) == 0


def _matmul(target: str, **options):
  n = kg.Dim("n", 1, HI)
  a, x = kg.Tensor.empty(M, K, name="a"), kg.Tensor.empty(K, n, name="x")
  (kernel,) = kg.compile(a @ x, target, **options)
  return kernel


def _run(runtime, kernel, v: int, strip: bool) -> np.ndarray:
  if strip:
    kernel = dataclasses.replace(kernel, variants=())
  padded = np.zeros((K, HI), np.float32)
  padded[:, :v] = _cols(v)
  out = run_named(runtime, kernel, {"a": A, "x": padded}, {"n": v}, out_fill=np.nan)
  return out.reshape(M, HI)[:, :v]


@pytest.mark.parametrize("device, target", [("PYTHON", "wgsl"), ("WEBGPU", "wgsl"),
                                            ("PTXSIM", "ptx")])
def test_the_column_first_kernel_is_right_at_every_value(device, target):
  runtime = device_runtime(device)
  options = {"arch": "sm_80", "stage": False} if target == "ptx" else {}
  kernel = _matmul(target, **options)
  assert kernel.launch.grid
  if target == "wgsl":
    assert _column_lanes(kernel.source, 8) >= 8      # its 8 x 8 tiles at the range's top
  for v in VALUES:
    want = A @ _cols(v)
    np.testing.assert_allclose(_run(runtime, kernel, v, True), want, rtol=1e-4, atol=1e-4,
                               err_msg=f"the kernel, n = {v}")
    np.testing.assert_allclose(_run(runtime, kernel, v, False), want, rtol=1e-4, atol=1e-4,
                               err_msg=f"the runtime's pick, n = {v}")


B = np.random.default_rng(4).standard_normal((3, 40, 64)).astype(np.float32)


def test_a_batched_symbolic_n_matmul_is_right_at_every_value_and_compiles_once(device):
  """(3, 40, 64) @ (3, 64, n): the batch's and the rows' tiles both inside each run of column
  tiles (on lavapipe, the variants for n up to 7 and 32: runs of 4 column tiles, 30 threads of
  batch and row tiles, workgroups of 120)."""
  n = kg.Dim("n", 1, 128)
  b = kg.Tensor(B, device=device).realize()
  misses = None
  for v in (1, 5, 7, 17, 32, 77, 127, 128):
    cols = np.random.default_rng(v).standard_normal((3, 64, v)).astype(np.float32)
    x = kg.Tensor(cols, device=device).symbolic(3, 64, n.bind(v))
    np.testing.assert_allclose((b @ x).numpy(), B @ cols, rtol=1e-4, atol=1e-4,
                               err_msg=f"n = {v}")
    if misses is None:
      misses = kg.cache_info()["misses"]
    assert kg.cache_info()["misses"] == misses, f"n = {v} compiled"
