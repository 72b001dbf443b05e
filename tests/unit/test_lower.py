"""Lowering: the UOp graph a scheduled kernel becomes (IR.md), and its index math."""
from __future__ import annotations

import itertools

import pytest

import kernelgen as kg
from tools import DEVICES, default_device, missing_tool
from kernelgen import Tensor
from kernelgen.lowering.lower import Opts, lower, unravel
from kernelgen.uop.ops import Ops, UOp, toposort
from kernelgen.rules.symbolic import simplify
from kernelgen.graph.schedule import schedule
from kernelgen.uop.verify import verify
from kernelgen.dtype import dtypes
from kernelgen.render.targets import TARGETS


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  with default_device(monkeypatch, "PYTHON"):
    yield


def lowered(t: Tensor, opts=Opts(local=4)) -> list[UOp]:
  (item,) = schedule([t.node])
  sink, _ = lower(item, opts)
  verify(sink)
  return toposort([simplify(sink)])


def ops_of(nodes) -> set:
  return {u.op for u in nodes}


def test_permute_and_expand_need_no_division():
  x = Tensor([[1.0] * 8] * 4)
  nodes = lowered((x.T + Tensor([1.0, 2.0, 3.0, 4.0])) * 2, Opts(local=32))
  # the only division is unravelling the thread index into the (8, 4) output: i // 4, i % 4
  assert sum(u.op is Ops.IDIV for u in nodes) == 1 and sum(u.op is Ops.MOD for u in nodes) == 1
  loads = [u for u in nodes if u.op is Ops.LOAD]
  assert len(loads) == 2 and all(len(u.src) == 2 for u in loads)   # no gates needed


def test_padding_becomes_gated_loads():
  nodes = lowered(Tensor([[1.0, 2.0], [3.0, 4.0]]).pad(((1, 1), (0, 0))), Opts(local=8))
  loads = [u for u in nodes if u.op is Ops.LOAD]
  assert len(loads) == 1 and len(loads[0].src) == 4    # (buf, index, gate, alt)


def test_bounds_gate_when_the_grid_overshoots():
  nodes = lowered(Tensor([1.0] * 100) * 2, Opts(local=64))
  stores = [u for u in nodes if u.op is Ops.STORE]
  assert len(stores) == 1 and len(stores[0].src) == 4
  assert any(u.op is Ops.SPECIAL and u.arg == ("gid", 0, 2) for u in nodes)


def test_reduction_is_a_loop_over_an_accumulator():
  nodes = lowered(Tensor([[1.0] * 8] * 4).sum(1), Opts(local=4))
  assert {Ops.RANGE, Ops.DEFINE_ACC, Ops.ASSIGN, Ops.ENDRANGE, Ops.AFTER} <= ops_of(nodes)
  (rng,) = [u for u in nodes if u.op is Ops.RANGE]
  assert rng.src[0].arg == 8


def test_upcast_stores_several_outputs_per_thread():
  nodes = lowered(Tensor([1.0] * 64) + 1, Opts(local=4, upcast=4))
  assert len([u for u in nodes if u.op is Ops.STORE]) == 4


def _eval_int(u: UOp, env: dict) -> int:
  if u.op is Ops.CONST:
    return u.arg
  if u.op in env:
    return env[u.op]
  a = [_eval_int(s, env) for s in u.src]
  if u.op is Ops.ADD:
    return a[0] + a[1]
  if u.op is Ops.MUL:
    return a[0] * a[1]
  if u.op is Ops.IDIV:
    return int(a[0] / a[1])
  if u.op is Ops.MOD:
    return a[0] - int(a[0] / a[1]) * a[1]
  raise AssertionError(u.op)


@pytest.mark.parametrize("shape,strides,offset", [
  ((6,), (1,), 0), ((3, 4), (4, 1), 0), ((4, 3), (1, 4), 0), ((2, 3, 4), (1, 8, 2), 0),
  ((3, 4), (-4, 1), 8), ((2, 2, 3), (0, 3, 1), 0),
])
def test_unravel_matches_python(shape, strides, offset):
  """unravel(linear) into a contiguous source shape == divmod arithmetic, for every index."""
  src_shape = (3, 4) if len(shape) == 2 or shape == (6,) else (2, 3, 4)
  src_shape = (2, 3) if shape == (6,) else src_shape
  src_shape = (2, 3) if shape == (2, 2, 3) else src_shape
  specials = [Ops.SPECIAL, Ops.RANGE, Ops.VAR][:len(shape)]
  idxs = [UOp(op, dtypes.int32, (), ("x", d, n)) if op is Ops.SPECIAL else
          UOp(op, dtypes.int32, (UOp.const(dtypes.int32, n),), d) if op is Ops.RANGE else
          UOp(op, dtypes.int32, (), ("v", 0, n - 1)) for d, (op, n) in enumerate(zip(specials,
                                                                                     shape))]
  terms = [(i, s, n) for i, s, n in zip(idxs, strides, shape)]
  got = unravel(terms, offset, src_shape)
  for point in itertools.product(*(range(n) for n in shape)):
    env = dict(zip(specials, point))
    lin = sum(p * s for p, s in zip(point, strides)) + offset
    want = []
    for k in range(len(src_shape)):
      inner = 1
      for n in src_shape[k + 1:]:
        inner *= n
      want.append(lin // inner % src_shape[k])
    assert [_eval_int(g, env) for g in got] == want, point


# ---- grouped reductions and long loops -------------------------------------------------------

def test_grouped_reduction_meets_in_workgroup_memory():
  nodes = lowered(Tensor([[1.0] * 300] * 3).sum(1), Opts(local=16, group=16))
  assert {Ops.DEFINE_LOCAL, Ops.BARRIER} <= ops_of(nodes)
  (local,) = [u for u in nodes if u.op is Ops.DEFINE_LOCAL]
  assert local.dtype.local and local.dtype.size == 16
  assert any(u.op is Ops.SPECIAL and u.arg == ("gid", 0, 3) for u in nodes)
  # 300 = 19 trips of 16 lanes minus 4: the strided loads are gated; lane 0 stores
  (store,) = [u for u in nodes if u.op is Ops.STORE and u.src[0].op is Ops.PARAM]
  assert len(store.src) == 4 and store.src[3].op is Ops.CMPEQ
  # the lanes' loop runs 19 trips; the fold over the 16 partials runs in lane 0 only
  (loop,) = [u for u in nodes if u.op is Ops.RANGE and u.src[0].op is Ops.CONST]
  (fold,) = [u for u in nodes if u.op is Ops.RANGE and u.src[0].op is Ops.WHERE]
  assert loop.src[0].arg == 19
  cond, taken, skipped = fold.src[0].src
  assert cond.op is Ops.CMPEQ and (taken.arg, skipped.arg) == (16, 0)


def test_long_loops_are_unrolled_below_the_trip_limit(monkeypatch):
  from kernelgen.tensor.ops import reduce as reduce_ops
  from kernelgen.lowering.lowerer import MAX_TRIPS
  monkeypatch.setattr(reduce_ops, "SPLIT_MIN_REDUCE", 1 << 30, raising=False)   # one kernel
  n = 4 * MAX_TRIPS + 3
  np = pytest.importorskip("numpy")
  nodes = lowered(Tensor(np.ones((2, n), np.float32)).sum(1), Opts(local=2))
  (rng,) = [u for u in nodes if u.op is Ops.RANGE]
  assert rng.src[0].arg == 8193     # 65539 elements: 8 loads per trip, the last 5 gated
  assert len([u for u in nodes if u.op is Ops.LOAD]) == 8


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("group", [16, 32])
def test_grouped_reduction_matches_numpy(device, group):
  """Reduce sizes that are not multiples of the group (bounds gates), padding inside."""
  from kernelgen.compiler import compile_item
  np = pytest.importorskip("numpy")
  runtime = _runtime(device)
  a = np.random.default_rng(0).standard_normal((3, 7, 45)).astype(np.float32)
  t = Tensor(a).pad(((0, 0), (1, 0), (0, 2))).max(axis=(1, 2)) * 2 + 1
  (item,) = schedule([t.node])
  compiled = compile_item(item, runtime.target or "python", {"group": group})
  assert compiled.local_size[0] == group
  out = runtime.alloc(3 * 4)
  inputs = [src.buffer for src in item.inputs]
  handles = [out] + [_upload(runtime, b) for b in inputs]
  runtime.run(compiled, [handles[b.slot] for b in compiled.buffers], {})
  got = np.frombuffer(bytes(runtime.copyout(out))[:12], np.float32)
  want = np.pad(a, ((0, 0), (1, 0), (0, 2))).max(axis=(1, 2)) * 2 + 1
  np.testing.assert_array_equal(got, want)


def _runtime(device: str):
  try:
    return kg.Device[device]
  except Exception as error:  # noqa: BLE001 - no adapter here: the CPU devices still run
    missing_tool(f"device {device}", f"pip install wgpu; apt-get install mesa-vulkan-drivers ({error})")


def _upload(runtime, buffer):
  handle = runtime.alloc(max(buffer.nbytes, 1))
  runtime.copyin(handle, buffer.copyout())
  return handle


def test_sum_past_65535_loop_iterations_on_webgpu():
  """Regression: lavapipe ends a thread's loops after 65535 iterations in all, so one thread
  summing 70000 ones gave 65535. Reductions now split across a workgroup and unroll."""
  np = pytest.importorskip("numpy")
  _runtime("WEBGPU")
  a = np.ones(70000, np.float32)
  assert Tensor(a).to("WEBGPU").sum().numpy() == 70000
  b = np.ones((2, 140000), np.float32)
  np.testing.assert_array_equal(Tensor(b).to("WEBGPU").sum(1).numpy(), [140000, 140000])


def _matmul_item(m: int, k: int, n: int):
  np = pytest.importorskip("numpy")
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
  (item,) = schedule([(Tensor(a) @ Tensor(b)).node])
  return item, a, b


@pytest.mark.parametrize("tile", [(4, 4), (2, 4), (4, 1)])
def test_register_tiles_share_one_loop_and_load_each_value_once(tile):
  """An R x C tile: R*C accumulator lanes updated in one loop that loads R values of A and C of
  B (K = 7: a prime, so the loop is not unrolled); a row's columns share vectors (of 4 where C
  allows: B's C values as C/4 vector loads, the products and stores as vectors)."""
  item, _, _ = _matmul_item(8, 7, 8)
  sink, _ = lower(item, Opts(local=2, tile=tile))
  verify(sink)
  nodes = toposort([simplify(sink)])
  rows, cols = tile
  lanes = 4 if cols % 4 == 0 else 1

  def elements(op, dtype=None):
    return sum(u.dtype.count for u in nodes if u.op is op and (dtype is None or
                                                               u.dtype.scalar == dtype))
  accs = [u for u in nodes if u.op is Ops.DEFINE_ACC]
  assert len(accs) == rows * cols // lanes and all(u.dtype.count == lanes for u in accs)
  assert sum(u.op is Ops.RANGE for u in nodes) == 1
  stores = [u for u in nodes if u.op is Ops.STORE]
  assert len(stores) == rows * cols // lanes
  assert sum(u.src[2].dtype.count for u in stores) == rows * cols
  loads = [u for u in nodes if u.op is Ops.LOAD]
  assert sorted(sum(u.dtype.count for u in loads if u.src[0].arg == s) for s in (1, 2)) == \
    sorted((rows, cols))
  assert sum(u.src[0].arg == 2 for u in loads) == cols // lanes
  assert elements(Ops.MUL, dtypes.float32) == rows * cols


@pytest.mark.parametrize("m,k,n,tile,local", [(8, 5, 12, (4, 4), 2), (6, 3, 10, (2, 2), 4),
                                              (8, 8, 8, (4, 2), 8), (4, 7, 8, (1, 8), 3),
                                              (7, 3, 10, (4, 4), 2), (5, 2, 9, (8, 8), 4)])
def test_register_tiles_compute_matmuls_on_python(m, k, n, tile, local):
  from kernelgen.compiler import compile_item
  np = pytest.importorskip("numpy")
  item, a, b = _matmul_item(m, k, n)
  compiled = compile_item(item, "python", {"tile": tile, "local": local})
  runtime = kg.Device["PYTHON"]
  out = runtime.alloc(m * n * 4)
  runtime.run(compiled, [out] + [src.buffer.handle for src in item.inputs], {})
  got = np.frombuffer(bytes(out), np.float32).reshape(m, n)
  np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def test_ragged_tiles_gate_their_stores_not_their_loads():
  """7 x 6 outputs in 4 x 4 tiles: loads stay shared (one per row of A per step) and ungated; the
  last block of columns starts at 2 (regtile.py FITTED_BLOCKS: no column past the edge), so B's
  4 columns are one vector load per step and only the stores of row 3 (row 7 in the second block
  of rows) are gated."""
  item, _, _ = _matmul_item(7, 5, 6)
  nodes = toposort([simplify(lower(item, Opts(local=4, tile=(4, 4)))[0])])
  loads = [u for u in nodes if u.op is Ops.LOAD]
  assert len(loads) == 4 + 1 and all(len(u.src) == 2 for u in loads)
  assert sorted(u.dtype.count for u in loads) == [1, 1, 1, 1, 4]
  stores = [u for u in nodes if u.op is Ops.STORE]
  gated = [u for u in stores if len(u.src) > 3 and u.src[3].op is not Ops.CONST]
  assert len(stores) == 16 and len(gated) == 4


def test_threads_past_a_tiled_grid_read_the_last_block_ungated():
  """2 x 3 blocks of 4 x 4 in workgroups of 4 (8 threads for 6 blocks): the 2 threads past the
  grid read the last block's operands (clamped), so no load is gated, and A's row steps merge
  into vector loads (tile_unroll); every store is gated. Numbers: the python matmul tests."""
  item, _, _ = _matmul_item(8, 8, 12)
  nodes = toposort([simplify(lower(item, Opts(local=4, tile=(4, 4), tile_unroll=4))[0])])
  loads = [u for u in nodes if u.op is Ops.LOAD]
  assert loads and all(len(u.src) == 2 for u in loads)
  assert any(u.src[0].arg == 1 and u.dtype.count == 4 for u in loads)
  stores = [u for u in nodes if u.op is Ops.STORE]
  assert stores and all(len(u.src) > 3 and u.src[3].op is not Ops.CONST for u in stores)


def test_tiled_loops_unroll_by_four_where_it_divides():
  """K = 8: the loop runs 8 / TILE_UNROLL times, each step loading TILE_UNROLL * (R + C) values
  for TILE_UNROLL * R * C products (B's C = 2 columns as one vector load)."""
  from kernelgen.lowering.loop_split import TILE_UNROLL
  item, _, _ = _matmul_item(4, 8, 4)
  nodes = toposort([simplify(lower(item, Opts(local=1, tile=(2, 2)))[0])])
  (loop,) = [u for u in nodes if u.op is Ops.RANGE]
  assert loop.src[0].arg == 8 // TILE_UNROLL
  loads = [u for u in nodes if u.op is Ops.LOAD]
  assert sum(u.dtype.count for u in loads) == TILE_UNROLL * (2 + 2)
  assert len(loads) == TILE_UNROLL * (2 + 1)
  assert sum(u.dtype.count for u in nodes if u.op is Ops.MUL and u.dtype.scalar ==
             dtypes.float32) == TILE_UNROLL * 4


def _conv_item(cin: int, cout: int, size: int, k: int, pad: int):
  np = pytest.importorskip("numpy")
  rng = np.random.default_rng(3)
  x = rng.standard_normal((1, cin, size, size)).astype(np.float32)
  w = rng.standard_normal((cout, cin, k, k)).astype(np.float32)
  (item,) = schedule([Tensor(x).conv2d(Tensor(w), padding=pad).node])
  padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  windows = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(2, 3))
  return item, np.einsum("nchwij,ocij->nohw", windows, w)


def test_tiled_conv_loops_over_channels_and_rows_and_unrolls_the_window_columns():
  """conv2d 3 x 3 in (output channels x columns) tiles: the loop runs over input channels x
  window rows, the window's 3 columns are unrolled inside it, so neighbouring output columns
  share the loads of overlapping windows: each step loads C + 2 inputs and 3 weights per output
  channel (not 3 * C and 3 per channel, as stepping one reduced element at a time would)."""
  from kernelgen.lowering.loop_split import TILE_INNER
  from kernelgen.uop.linearize import linearize
  assert 3 <= TILE_INNER < 9
  item, _ = _conv_item(5, 4, 8, 3, 1)
  rows, cols = 4, 4
  sink = simplify(lower(item, Opts(local=4, tile=(rows, cols), tile_axes=(1, 3)))[0])
  uops = linearize(sink)
  (loop,) = [u for u in uops if u.op is Ops.RANGE]
  assert loop.src[0].arg == 5 * 3
  body = uops[uops.index(loop):[u.op for u in uops].index(Ops.ENDRANGE)]
  loads = [u for u in body if u.op is Ops.LOAD]
  assert sorted(sum(u.src[0].arg == s for u in loads) for s in (1, 2)) == \
    sorted((cols + 2, 3 * rows))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cin,cout,size,k,pad,tile", [(5, 4, 8, 3, 1, (4, 4)),
                                                     (3, 6, 7, 3, 0, (4, 2)),
                                                     (2, 3, 6, 5, 2, (2, 4)),
                                                     (17, 8, 5, 1, 0, (8, 2))])
def test_tiled_convs_match_numpy(device, cin, cout, size, k, pad, tile):
  """Tiled convs whose reductions split into a loop and unrolled window columns (3 x 3 and
  5 x 5; 1 x 1: one loop), ragged tiles too."""
  from kernelgen.compiler import compile_item
  np = pytest.importorskip("numpy")
  runtime = _runtime(device)
  item, want = _conv_item(cin, cout, size, k, pad)
  compiled = compile_item(item, runtime.target or "python", {"tile": tile, "local": 4})
  out = runtime.alloc(item.out.size * 4)
  handles = [out] + [_upload(runtime, src.buffer) for src in item.inputs]
  runtime.run(compiled, [handles[b.slot] for b in compiled.buffers], {})
  got = np.frombuffer(bytes(runtime.copyout(out))[:item.out.size * 4], np.float32)
  np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def _range_depth(nodes: list) -> int:
  """The deepest nesting of loops in a linearized kernel."""
  depth = deepest = 0
  for u in nodes:
    depth += (u.op is Ops.RANGE) - (u.op is Ops.ENDRANGE)
    deepest = max(deepest, depth)
  return deepest


def _var_and_argmax(x: Tensor) -> list[Tensor]:
  m = x.max(1, keepdim=True)
  return [x.var(1), x.argmax(1), m + (x - m).exp().sum(1, keepdim=True).log()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [{"group": 16}, {"group": 16, "group_vec": 4,
                                                     "group_unroll": 2}, {"local": 2}])
def test_a_reduction_nested_in_another_runs_once_before_its_loop(device, options):
  """var (the mean inside the sum), argmax (the max inside the index max) and logsumexp are one
  kernel each; the inner reduction runs once per output, before the outer loop (45 columns:
  the lanes' last step is gated), never inside it; the values match numpy."""
  from kernelgen.compiler import compile_item, compile_kernel
  from kernelgen.lowering.optimize import optimize
  np = pytest.importorskip("numpy")
  runtime = _runtime(device)
  a = np.random.default_rng(1).standard_normal((3, 45)).astype(np.float32) * 4
  a[1, 7] = a[1, 30] = 20.0                      # a tie: argmax picks the first
  wants = [a.var(1), a.argmax(1), a.max(1) + np.log(np.exp(a - a.max(1, keepdims=True)).sum(1))]
  for t, want in zip(_var_and_argmax(Tensor(a)), wants):
    (item,) = schedule([t.node])
    target = runtime.target or "python"
    sink, _ = lower(item, optimize(item, TARGETS[target], options))
    assert _range_depth(compile_kernel(sink, "k", "python").uops) == 1
    compiled = compile_item(item, target, options)
    out = runtime.alloc(item.out.size * 4)
    handles = [out] + [_upload(runtime, src.buffer) for src in item.inputs]
    runtime.run(compiled, [handles[b.slot] for b in compiled.buffers], {})
    got = np.frombuffer(bytes(runtime.copyout(out))[:item.out.size * 4],
                        np.dtype(item.out.dtype.name)).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
