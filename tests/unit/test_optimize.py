"""The optimizer's choices, and the search mode that times candidates on a device."""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from tools import default_device, missing_tool
from kernelgen import Tensor
from kernelgen import search
from kernelgen.lowering import optimize as opt
from kernelgen.render.targets import PTX, PYTHON, TARGETS, WGSL
from kernelgen.lowering.lower import Opts
from kernelgen.graph.schedule import schedule


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  with default_device(monkeypatch, "PYTHON"):
    yield


@pytest.fixture
def one_kernel(monkeypatch):
  """Reductions stay one kernel (not split in two: reduce_ops.SPLIT_MIN_REDUCE)."""
  from kernelgen.tensor.ops import reduce as reduce_ops
  monkeypatch.setattr(reduce_ops, "SPLIT_MIN_REDUCE", 1 << 62, raising=False)


def item_of(t: Tensor):
  (item,) = schedule([t.node])
  return item


@pytest.mark.parametrize("n,target,local", [(1024, "wgsl", 256), (1000, "wgsl", 64),
                                            (96, "ptx", 32), (6, "wgsl", 6), (7, "ptx", 7),
                                            (1024, "python", 64)])
def test_workgroup_size_divides_or_is_capped(n, target, local):
  x = Tensor(np.ones(n, np.float32))
  assert opt.optimize(item_of(x + 1), TARGETS[target]).local == local


def test_big_elementwise_kernels_upcast_on_gpus_only():
  item = item_of(Tensor.zeros(1 << 16) + 1)
  assert opt.optimize(item, PTX).upcast == opt.UPCAST
  upcast, most = TARGETS["wgsl"].upcast, TARGETS["wgsl"].upcast_local
  o = opt.optimize(item, WGSL)
  assert o.upcast == upcast and o.local <= most and o.upcast_vec
  # a size the target's upcast does not divide falls back to UPCAST
  assert opt.optimize(item_of(Tensor.zeros((1 << 16) + 4) + 1), WGSL).upcast == opt.UPCAST
  assert opt.optimize(item, PYTHON).upcast == 1
  assert opt.optimize(item_of((Tensor.zeros(1 << 16, 2) + 1).sum(1)), PTX).upcast == 1


def test_options_force_opts():
  item = item_of(Tensor.zeros(64) + 1)
  assert opt.optimize(item, WGSL, {"local": 16, "upcast": 2}) == Opts(16, 2, upcast_vec=True)
  assert opt.optimize(item, WGSL, {"local": 16, "upcast": 2, "upcast_vec": False}) == Opts(16, 2)
  assert opt.optimize(item, PTX, {"local": 16, "upcast": 2}) == Opts(16, 2)


@pytest.mark.parametrize("local,upcast", [(1, 1), (4, 2), (64, 1), (32, 4), (8, 3)])
def test_every_opts_computes_the_same(local, upcast):
  from kernelgen.compiler import compile_item
  a = np.arange(96, dtype=np.float32).reshape(8, 12)
  item = item_of(Tensor(a).T.sum(1) * 2)
  compiled = compile_item(item, "python", {"local": local, "upcast": upcast})
  assert compiled.local_size[0] == local
  runtime = kg.Device["PYTHON"]
  out = runtime.alloc(12 * 4)
  runtime.run(compiled, [out] + [src.buffer.handle for src in item.inputs], {})
  np.testing.assert_allclose(np.frombuffer(bytes(out), np.float32), a.T.sum(1) * 2)


def test_search_times_candidates_and_caches(monkeypatch):
  monkeypatch.setenv("KERNELGEN_SEARCH", "1")
  search.SEARCHED.clear()
  a = np.arange(256, dtype=np.float32)
  got = (Tensor(a) * 3).numpy()
  np.testing.assert_allclose(got, a * 3)
  assert len(search.SEARCHED) == 1
  (chosen,) = search.SEARCHED.values()
  assert chosen.local in search.SEARCH_LOCAL and chosen.upcast in search.SEARCH_UPCAST


@pytest.mark.parametrize("shape,axis,group", [((1 << 20,), None, 256), ((4096, 1024), 1, 16),
                                               ((8, 300), 1, 16), ((1024, 1024), None, 256),
                                               ((256, 16384), 1, 128)])
@pytest.mark.usefixtures("one_kernel")
def test_small_outputs_of_big_reductions_are_grouped(shape, axis, group):
  item = item_of(Tensor.zeros(*shape).sum(axis))
  assert opt.optimize(item, WGSL) == Opts(local=group, upcast=1, group=group,
                                            group_unroll=TARGETS["wgsl"].group_unroll,
                                            group_vec=TARGETS["wgsl"].group_vec)


def test_grouped_rows_of_1024_keep_sqrt_threads_without_vector_loads():
  # GROUP_MIN_STEPS counts steps of GROUP_VEC elements: PTX reads one element per step
  item = item_of(Tensor.zeros(4096, 1024).sum(1))
  assert opt.optimize(item, PTX).group == 32


@pytest.mark.parametrize("t", [Tensor.zeros(1 << 16, 256).sum(1), Tensor.zeros(64, 100).sum(1),
                               (Tensor.zeros(64, 4096) > 0).max(1)])   # a bool reduction
def test_many_outputs_short_reductions_and_bools_are_not_grouped(t):
  assert opt.optimize(item_of(t), WGSL).group == 0


@pytest.mark.parametrize("target", ["wgsl", "ptx", "python"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.usefixtures("one_kernel")
def test_grouped_reductions_respect_the_targets_limits(target, dtype):
  from kernelgen.compiler import compile_item
  x = Tensor.zeros(4, 1 << 20, dtype=dtype)
  item = item_of(x.sum(1) + x.max(1))
  o = opt.optimize(item, TARGETS[target])
  assert 0 < o.group <= TARGETS[target].max_local
  assert 2 * o.group * getattr(kg.dtypes, dtype).itemsize <= TARGETS[target].max_local_bytes
  if target == "wgsl" and dtype == "float64":
    return
  compiled = compile_item(item, target)
  assert compiled.local_size[0] == o.group


def _mm(shape_a, shape_b):
  rng = np.random.default_rng(2)
  return (rng.standard_normal(shape_a).astype(np.float32),
          rng.standard_normal(shape_b).astype(np.float32))


@pytest.mark.parametrize("target", ["wgsl", "ptx"])
def test_matmuls_get_register_tiles_within_limits(target):
  a, b = _mm((64, 32), (32, 128))
  got = opt.optimize(item_of(Tensor(a) @ Tensor(b)), TARGETS[target])
  assert got.tile == (4, 4) and got.group == 0     # 8x8 would leave 128 threads
  assert got.tile_axes == (0, 1)
  batched = item_of(Tensor(a[None]) @ Tensor(b[None]))
  assert opt.optimize(batched, TARGETS[target]).tile_axes == (1, 2)
  assert got.local <= TARGETS[target].max_local and (64 * 128 // 16) % got.local == 0
  a, b = _mm((256, 32), (32, 512))
  got = opt.optimize(item_of(Tensor(a) @ Tensor(b)), TARGETS[target])
  assert got.tile == (8, 8) and got.tile[0] * got.tile[1] <= opt.MAX_TILE_ACC
  assert got.local <= TARGETS[target].max_local and (256 * 512 // 64) % got.local == 0
  assert opt.optimize(item_of(Tensor(a) @ Tensor(b)), PYTHON).tile == ()


def test_ragged_matmuls_get_gated_tiles_and_short_reductions_none():
  a, b = _mm((66, 32), (32, 66))
  assert opt.optimize(item_of(Tensor(a) @ Tensor(b)), WGSL).tile == (4, 4)
  a, b = _mm((64, 1), (1, 128))
  assert opt.optimize(item_of(Tensor(a) @ Tensor(b)), WGSL).tile == ()
  assert opt.optimize(item_of(Tensor.zeros(128, 128) + 1), WGSL).tile == ()


def test_bad_forced_tiles_say_how_to_fix():
  a, b = _mm((8, 4), (4, 8))
  with pytest.raises(kg.errors.UnsupportedError, match="rows, cols"):
    opt.optimize(item_of(Tensor(a) @ Tensor(b)), WGSL, {"tile": (32, 16)})


def _on(device: str):
  try:
    kg.Device[device]
  except Exception as error:  # noqa: BLE001 - no adapter or simulator here
    missing_tool(f"device {device}", f"pip install wgpu; apt-get install mesa-vulkan-drivers ({error})")
  return device


@pytest.mark.parametrize("device", ["WEBGPU", "PTXSIM"])
@pytest.mark.parametrize("shape_a,shape_b", [((64, 24), (24, 64)), ((2, 32, 16), (2, 16, 64)),
                                             ((66, 8), (8, 66)), ((128, 12), (12, 256)),
                                             ((3, 70, 9), (3, 9, 61)), ((2, 4), (4, 5000))])
def test_tiled_and_fallback_matmuls_match_numpy(device, shape_a, shape_b):
  a, b = _mm(shape_a, shape_b)
  got = (Tensor(a).to(_on(device)) @ Tensor(b).to(device)).numpy()
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ["WEBGPU", "PTXSIM"])
def test_tiled_conv2d_matches_numpy(device):
  x, w = _mm((1, 3, 34, 34), (4, 3, 3, 3))
  item = item_of(Tensor(x).conv2d(Tensor(w)))
  got = opt.optimize(item, WGSL)
  assert got.tile in opt.TILES and got.tile_axes == (1, 3)   # output channels x columns
  got = Tensor(x).to(_on(device)).conv2d(Tensor(w).to(device)).numpy()
  want = np.zeros((1, 4, 32, 32), np.float32)
  for i in range(3):
    for j in range(3):
      want += np.einsum("chw,oc->ohw", x[0, :, i:i + 32, j:j + 32], w[:, :, i, j])[None]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ["WEBGPU", "PTXSIM"])
def test_a_batchnorm_epilogue_keeps_channels_by_columns_tiles(device):
  """The tile's axes weigh the loads the loop repeats: a batchnorm's per-channel parameters,
  loaded once per output after the loop, do not turn a conv's output channels x columns tile
  into rows x columns of one channel (issue 42: 1.9-6x slower on lavapipe). Values match numpy."""
  rng = np.random.default_rng(3)
  x, w = _mm((1, 8, 34, 34), (16, 8, 3, 3))
  m, s, b = (rng.standard_normal((1, 16, 1, 1)).astype(np.float32) for _ in "msb")

  def conv_bn_relu(dev):
    t = Tensor(x).to(dev).conv2d(Tensor(w).to(dev), padding=1) - Tensor(m).to(dev)
    return (t * Tensor(s).to(dev) + Tensor(b).to(dev)).relu()
  for options in ({}, {"adapter": "lavapipe"}, {"adapter": "lavapipe", "runs": 100}):
    got = opt.optimize(item_of(conv_bn_relu("PYTHON")), WGSL, options)
    assert got.tile and got.tile_axes == (1, 3)   # output channels x columns
  want = np.zeros((1, 16, 34, 34), np.float64)
  padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  for i in range(3):
    for j in range(3):
      want += np.einsum("chw,oc->ohw", padded[0, :, i:i + 34, j:j + 34], w[:, :, i, j])[None]
  np.testing.assert_allclose(conv_bn_relu(_on(device)).numpy(),
                             np.maximum((want - m) * s + b, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ["WEBGPU", "PTXSIM"])
def test_tiles_beat_grouping_where_outputs_share_loads(device):
  """On WGSL a conv2d or matmul with fewer outputs than GROUP_MAX_OUTPUTS but enough for register
  tiles takes the tiles (its outputs share loads; PTX keeps the grouped reduction); a sum over
  rows with as many outputs stays a grouped reduction (its tile would share nothing). Values
  match numpy."""
  x, w = _mm((1, 32, 16, 16), (32, 32, 3, 3))
  a, b = _mm((128, 320), (320, 64))
  rows = np.random.default_rng(4).standard_normal((16, 16, 512)).astype(np.float32)
  conv, mm = item_of(Tensor(x).conv2d(Tensor(w), padding=1)), item_of(Tensor(a) @ Tensor(b))
  for item in (conv, mm):
    assert 0 < item.out.size < opt.GROUP_MAX_OUTPUTS and opt.group_size(item, WGSL)
    got = opt.optimize(item, WGSL)
    assert got.tile and not got.group
    assert opt.optimize(item, PTX).group == opt.group_size(item, PTX)   # TILE_OVER_GROUP
  got = opt.optimize(item_of(Tensor(rows).sum(2)), WGSL)
  assert got.group and not got.tile
  padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
  want = np.einsum("nchwij,ocij->nohw", windows, w)
  got = Tensor(x).to(_on(device)).conv2d(Tensor(w).to(device), padding=1).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((Tensor(a).to(device) @ Tensor(b).to(device)).numpy(), a @ b,
                             rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(Tensor(rows).to(device).sum(2).numpy(), rows.sum(2),
                             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", ["WEBGPU", "PTXSIM"])
def test_search_times_candidates_on_gpu_devices(monkeypatch, device):
  """WEBGPU's run does not wait for the GPU: the search must time through time_run (it used to
  see no times there and silently keep the heuristic's choice, caching nothing)."""
  if device == "WEBGPU":
    from tools import wgpu_adapter
    wgpu_adapter()
  monkeypatch.setenv("KERNELGEN_SEARCH", "1")
  search.SEARCHED.clear()
  timed = []
  runtime = kg.Device[device]
  real = runtime.time_run
  monkeypatch.setattr(runtime, "time_run", lambda *args: timed.append(real(*args)) or timed[-1])
  a = np.arange(64, dtype=np.float32)
  np.testing.assert_allclose((Tensor(a, device=device) * 3).numpy(), a * 3)
  assert len(search.SEARCHED) == 1 and len(timed) > 2 and all(t > 0 for t in timed)
  search.SEARCHED.clear()


def test_search_also_times_the_register_tile(monkeypatch):
  monkeypatch.setattr(opt, "TILE_MIN_SIZE", 16)
  monkeypatch.setattr(opt, "TILE_MIN_THREADS", 1)
  search.SEARCHED.clear()
  a, b = _mm((16, 8), (8, 16))
  item = item_of(Tensor(a) @ Tensor(b))
  runtime = kg.Device["PYTHON"]
  out = runtime.alloc(16 * 16 * 4)
  handles = [out] + [src.buffer.handle for src in item.inputs]
  times = iter(range(100, 0, -1))        # each run looks faster than the last

  class Timed:
    target = "wgsl"

    def time_run(self, compiled, handles, var_values):
      return next(times)

  monkeypatch.setattr("kernelgen.search.compile_item",
                      lambda item, target, options: _Variant(options))
  chosen = search.search(item, Timed(), handles)
  assert chosen.tile == () and chosen.local == search.SEARCH_LOCAL[-1]    # the last was fastest
  search.SEARCHED.clear()
  times = iter(range(1, 100))            # the first (the heuristic's tile) was fastest
  assert search.search(item, Timed(), handles).tile == (8, 8)
  search.SEARCHED.clear()


class _Variant(dict):
  """What the mocked compile_item returns: the options it was given, binding no buffers."""
  buffers = ()
