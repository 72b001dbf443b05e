"""How grouped reductions read (Opts.group_unroll, Opts.group_vec) and fold (in lane 0 only,
unless another reduction uses the result).

Values are checked against numpy on PYTHON, PTXSIM and WEBGPU (wgpu + lavapipe) with the read
options forced, for divisible and ragged reduce sizes, several ops and dtypes, reductions over
two axes, and a reduction nested inside another; the lowered graph and WGSL show the vector loads.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import dtypes
from kernelgen import search
from kernelgen.lowering import optimize as opt
from kernelgen.render.targets import PTX, TARGETS, WGSL
from kernelgen.compiler import compile_item, target_of
from kernelgen.lowering.lower import Opts, lower
from kernelgen.uop.ops import GroupOp, Ops, toposort
from kernelgen.graph.schedule import ScheduleItem, schedule
from tools import DEVICES, missing_tool, tint_validate, wgsl_validate

READS = [(1, 1), (4, 1), (1, 4), (4, 4), (2, 4)]     # (group_unroll, group_vec)

REDUCTIONS = {
  "sum": (lambda t: t.sum(axis=1), lambda x: x.sum(axis=1, dtype=np.float64)),
  "max": (lambda t: t.max(axis=1), lambda x: x.max(axis=1)),
  "min": (lambda t: t.min(axis=1), lambda x: x.min(axis=1)),
  "mean": (lambda t: t.mean(axis=1), lambda x: x.astype(np.float64).mean(axis=1)),
  "softmax": (lambda t: t.softmax(axis=1),
              lambda x: (lambda e: e / e.sum(axis=1, keepdims=True))(
                np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True)))),
  "weighted": (lambda t: (t * kg.Tensor.arange(t.shape[1], dtype="float32")).sum(axis=1),
               lambda x: (x.astype(np.float64) * np.arange(x.shape[1])).sum(axis=1)),
  "sum+max": (lambda t: t.sum(axis=1) + t.max(axis=1),     # two folds (and barriers) in one kernel
              lambda x: x.sum(axis=1, dtype=np.float64) + x.max(axis=1)),
  "sum2": (lambda t: t.reshape(t.shape[0], 8, -1).sum(axis=(1, 2)),
           lambda x: x.sum(axis=1, dtype=np.float64)),
  "plus-first": (lambda t: (t * t[:, :1]).sum(axis=1),         # broadcast along the vector
                 lambda x: (x.astype(np.float64) * x[:, :1]).sum(axis=1)),
}


def runtime(name: str):
  try:
    return kg.Device[name]
  except kg.DeviceError as error:
    missing_tool(f"device {name}", f"pip install wgpu; apt-get install mesa-vulkan-drivers ({error})")


@pytest.fixture
def forced(monkeypatch):
  """Make `device` the default with `group` threads per output and the read options forced."""
  def configure(device: str, group: int, unroll: int, vec: int, chunk: bool = False):
    rt = runtime(device)
    base = rt.render_options()
    options = {**base, "group": group, "group_unroll": unroll, "group_vec": vec,
               "group_chunk": chunk}
    monkeypatch.setattr(rt, "render_options", lambda: options)
    monkeypatch.delenv("KERNELGEN_DEVICE", raising=False)
    monkeypatch.setattr(kg.Device, "_default", device)
    return rt
  return configure


def data(dtype: str, shape, seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  if dtype.startswith("float"):
    return rng.standard_normal(shape).astype(dtype)
  return rng.integers(-100, 100, shape).astype(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("unroll,vec", READS)
@pytest.mark.parametrize("op", list(REDUCTIONS))
@pytest.mark.parametrize("cols", [1024, 296, 256])   # 296: 16 lanes x 4 do not divide it; 256: no loop
def test_values_match_numpy(forced, device, unroll, vec, op, cols):
  forced(device, 16, unroll, vec)
  x = data("float32", (3, cols))
  got = REDUCTIONS[op][0](kg.Tensor(x)).numpy()
  # weighted: terms up to ~3000 in size, so float32 rounding is ~1e-4 each (sums near 0 occur)
  atol = 1e-2 if op == "weighted" else 1e-5
  np.testing.assert_allclose(got, REDUCTIONS[op][1](x), rtol=1e-5, atol=atol)


# each lane reads one run (Opts.group_chunk: CPU adapters); 1000 columns over 16 lanes: runs of
# 63 (vec 1; of 16 vectors of 4 with 1024), the last lane's gated at the end; 296: 19, not unrolled
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("unroll,vec", [(1, 1), (4, 4), (2, 4)])
@pytest.mark.parametrize("op", list(REDUCTIONS))
@pytest.mark.parametrize("cols", [1024, 1000, 296])
def test_chunked_values_match_numpy(forced, device, unroll, vec, op, cols):
  forced(device, 16, unroll, vec, chunk=True)
  x = data("float32", (3, cols), seed=3)
  got = REDUCTIONS[op][0](kg.Tensor(x)).numpy()
  np.testing.assert_allclose(got, REDUCTIONS[op][1](x), rtol=1e-5,
                             atol=1e-2 if op == "weighted" else 1e-5)


@pytest.mark.parametrize("vec", [1, 4])
def test_chunked_lanes_read_one_run_each(vec):
  """Lane l of 16 reads elements [l*64, l*64 + 64) of a row of 1024: the lane's stride is the
  run, the loop's the unrolled step (the strided order has them the other way round)."""
  x = kg.Tensor(np.zeros((3, 1024), np.float32))
  item = item_of(x.sum(axis=1))
  strided = compile_item(item, "wgsl", {"group": 16, "group_unroll": 2, "group_vec": vec})
  chunked = compile_item(item, "wgsl", {"group": 16, "group_unroll": 2, "group_vec": vec,
                                        "group_chunk": True})
  assert "kg_lid0 * 64i" in chunked.source and "kg_lid0 * 64i" not in strided.source
  loop = re.search(r"(r\d+) < (\d+)i", chunked.source)
  assert int(loop.group(2)) == 64 // (2 * vec)                    # 2 unrolled steps of vec
  assert re.search(rf"{loop.group(1)} \* {2 * vec}i", chunked.source)
  wgsl_validate(chunked.source)
  assert opt.optimize(item, WGSL, {"group_chunk": True}).group_chunk
  assert not opt.optimize(item, WGSL).group_chunk and not opt.optimize(item, PTX).group_chunk
  # long rows: fewer lanes per group when chunked
  item = item_of(kg.Tensor(np.zeros((64, 1 << 14), np.float32)).sum(axis=1))
  assert opt.optimize(item, WGSL).group == 128
  assert opt.optimize(item, WGSL, {"group_chunk": True}).group == opt.CHUNK_MAX_GROUP == 32


def test_webgpu_on_a_cpu_adapter_reads_chunks():
  """The native WEBGPU device names its adapter's class (render/wgsl/adapters.py), whose
  defaults turn group_chunk on exactly for CPU adapters (lavapipe here)."""
  from kernelgen.render.wgsl.adapters import SOFTWARE, defaults
  rt = runtime("WEBGPU")
  cpu = rt.adapter.info["adapter_type"] == "CPU"
  assert (rt.render_options()["adapter"] in SOFTWARE) == cpu
  assert defaults(rt.render_options()["adapter"], "rows").get("group_chunk", False) == cpu


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["int32", "uint32", "float16"])
def test_other_dtypes(forced, device, dtype):
  forced(device, 16, 4, 4)
  x = data(dtype, (3, 512)) if dtype != "uint32" else data("int32", (3, 512)) % 100
  x = x.astype(dtype)
  t = kg.Tensor(x)
  want_sum = x.sum(axis=1, dtype=np.float64 if dtype == "float16" else dtype)
  tol = 0.5 if dtype == "float16" else 0
  np.testing.assert_allclose(t.sum(axis=1).numpy().astype(np.float64), want_sum, atol=tol,
                             rtol=1e-2 if tol else 0)
  np.testing.assert_array_equal(t.max(axis=1).numpy(), x.max(axis=1))


@pytest.mark.parametrize("device", DEVICES)
def test_a_reduction_inside_another_is_folded_by_every_thread(forced, device):
  """Every lane needs the inner max in its loop: its fold is not limited to lane 0."""
  rt = forced(device, 16, 4, 4)
  x = data("float32", (2, 256))
  t = kg.Tensor(x).realize()
  y = (t - t.max(axis=1, keepdim=True)).exp().sum(axis=1)
  item = ScheduleItem(y.node, (t.node,), "nested")
  compiled = compile_item(item, rt.target or "python", rt.render_options())
  out = rt.alloc(2 * 4)
  rt.run(compiled, [out, t.node.buffer.handle], {})
  got = np.frombuffer(bytes(rt.copyout(out)), np.float32)[:2]
  np.testing.assert_allclose(got, np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1),
                             rtol=1e-5)


def item_of(t: kg.Tensor):
  (item,) = schedule([t.node])
  return item


def test_vector_loads_replace_runs_of_four():
  item = item_of(kg.Tensor(np.zeros((3, 1024), np.float32)).sum(axis=1))
  sink, _ = lower(item, Opts(local=16, group=16, group_unroll=2, group_vec=4))
  loads = [u for u in toposort([sink]) if u.op is Ops.LOAD and u.src[0].op is Ops.PARAM]
  assert [u.dtype for u in loads] == [dtypes.float32.vec(4)] * 2     # two steps unrolled
  # the steps added as vectors (lane-wise), their sum's lanes added up into a scalar accumulator
  # (on lavapipe a vector accumulator ran sum 16M ~5% slower)
  nodes = toposort([sink])
  adds = [u for u in nodes if u.op is Ops.ADD and u.dtype == dtypes.float32.vec(4)]
  assert len(adds) == 1 and all(u.op is Ops.LOAD for u in adds[0].src)
  geps = [u for u in nodes if u.op is Ops.GEP]
  assert sorted(u.arg for u in geps) == [0, 1, 2, 3] and all(u.src[0] is adds[0] for u in geps)
  assert all(u.dtype == dtypes.float32 for u in nodes if u.op is Ops.DEFINE_ACC)
  # 1024 = 16 lanes x 4 elements x 2 unrolled x 8 trips
  assert sorted(u.src[0].arg for u in toposort([sink]) if u.op is Ops.RANGE
                and u.src[0].op is Ops.CONST) == [8]


def test_ragged_sizes_and_other_widths_read_one_element_at_a_time():
  item = item_of(kg.Tensor(np.zeros((3, 296), np.float32)).sum(axis=1))
  sink, _ = lower(item, Opts(local=16, group=16, group_vec=4))
  assert all(u.dtype.count == 1 for u in toposort([sink]) if u.op is Ops.LOAD)
  item = item_of(kg.Tensor(np.zeros((3, 1024), np.int8)).sum(axis=1))
  sink, _ = lower(item, Opts(local=16, group=16, group_vec=4))
  assert all(u.dtype.count == 1 for u in toposort([sink]) if u.op is Ops.LOAD)


def test_wgsl_declares_the_input_as_vec4():
  item = item_of(kg.Tensor(np.zeros((4096, 1024), np.float32)).max(axis=1))
  compiled = compile_item(item, "wgsl")
  o = opt.optimize(item, WGSL)
  assert (o.group_unroll, o.group_vec) == (TARGETS["wgsl"].group_unroll, TARGETS["wgsl"].group_vec)
  assert "array<vec4<f32>>" in compiled.source
  wgsl_validate(compiled.source)


def test_the_fold_is_skipped_by_other_lanes_in_wgsl():
  item = item_of(kg.Tensor(np.zeros((64, 1024), np.float32)).sum(axis=1))
  source = compile_item(item, "wgsl").source
  assert "select(0i, 16i," in source


def test_grouped_defaults_per_target():
  item = item_of(kg.Tensor(np.zeros((64, 8192), np.float32)).sum(axis=1))
  for target in ("wgsl", "ptx", "python"):
    o = opt.optimize(item, TARGETS[target])
    assert o.group_unroll == TARGETS[target].group_unroll and o.group_vec == TARGETS[target].group_vec


# ---- elementwise kernels: upcast outputs as vectors (Opts.upcast_vec) ---------------------------

ELEMENTWISE = {
  "exp-divide": (lambda a, b: (a - b[:, :1]).exp() / b[:, 1:2],
                 lambda a, b: np.exp(a.astype(np.float64) - b[:, :1]) / b[:, 1:2]),
  "transpose": (lambda a, b: a.T * 2 + b, lambda a, b: a.T * 2 + b),
  "int8": (lambda a, b: a.cast("int8") + b.cast("int8"),
           lambda a, b: a.astype(np.int8) + b.astype(np.int8)),
  "compare": (lambda a, b: a < b, lambda a, b: a < b),
  "half": (lambda a, b: (a.cast("float16") * b.cast("float16")).cast("float32"),
           lambda a, b: (a.astype(np.float16) * b.astype(np.float16)).astype(np.float32)),
  "int32": (lambda a, b: (a * 10).cast("int32") * 3 - b.cast("int32"),
            lambda a, b: (a * 10).astype(np.int32) * 3 - b.astype(np.int32)),
  "row": (lambda a, b: a * b[:1] + 1.5, lambda a, b: a * b[:1] + 1.5),    # broadcast down rows
  "divide-by-zero": (lambda a, b: a / 0.0 + b, lambda a, b: a / np.float32(0.0) + b),
  "bits": (lambda a, b: ((a * 100).cast("int32") & 255) ^ ((b * 10).cast("int32") | 3),
           lambda a, b: ((a * 100).astype(np.int32) & 255) ^ ((b * 10).astype(np.int32) | 3)),
  "unsigned": (lambda a, b: (b * 100).cast("uint32") * 3 + 7,
               lambda a, b: (b * 100).astype(np.uint32) * 3 + 7),
  "calls": (lambda a, b: b.sqrt() + b.log() - a.sin() * b.reciprocal(),
            lambda a, b: np.sqrt(b) + np.log(b) - np.sin(a) / b),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(ELEMENTWISE))
@pytest.mark.parametrize("shape", [(4, 1024), (10, 30)])    # 300 outputs: the last group is gated
def test_vector_outputs_match_numpy(monkeypatch, device, name, shape):
  rt = runtime(device)
  options = {**rt.render_options(), "local": 256, "upcast": 4, "upcast_vec": True}
  monkeypatch.setattr(rt, "render_options", lambda: options)
  monkeypatch.delenv("KERNELGEN_DEVICE", raising=False)
  monkeypatch.setattr(kg.Device, "_default", device)
  rng = np.random.default_rng(1)
  a = rng.uniform(-3, 3, shape).astype(np.float32)
  b = rng.uniform(1, 3, shape).astype(np.float32)
  if name == "transpose":
    b = rng.uniform(1, 3, shape[::-1]).astype(np.float32)
  build, want = ELEMENTWISE[name]
  y = build(kg.Tensor(a), kg.Tensor(b))
  if shape == (4, 1024) and name == "exp-divide":     # the runs of loads do become vectors
    (item,) = schedule([y.node])
    sink, _ = lower(item, opt.optimize(item, target_of(rt), options))
    assert any(u.op is Ops.LOAD and u.dtype.count == 4 for u in toposort([sink]))
  with np.errstate(divide="ignore"):
    np.testing.assert_allclose(y.numpy(), want(a, b), rtol=1e-5 if name != "half" else 1e-3)


def vector_alu(t: kg.Tensor, options: dict) -> tuple:
  """(the vector ALU ops, the GEPs) of `t`'s kernel lowered with `options` for WGSL."""
  (item,) = schedule([t.node])
  nodes = toposort([lower(item, opt.optimize(item, WGSL, options))[0]])
  return ([u for u in nodes if u.op in GroupOp.ALU and u.dtype.count > 1],
          [u for u in nodes if u.op is Ops.GEP])


def test_elementwise_kernels_are_lowered_as_vectors():
  """Each vector of outputs is one expression of vector loads and lane-wise ALU ops (a value
  broadcast along the rows read once and repeated), not four scalar copies."""
  a = kg.Tensor(np.zeros((4, 1024), np.float32))
  b = kg.Tensor(np.ones((4, 2), np.float32))
  options = {"local": 256, "upcast": 8, "upcast_vec": True}
  alu, geps = vector_alu((a - b[:, :1]).exp() / b[:, 1:2], options)
  assert not geps and {u.op for u in alu} >= {Ops.SUB, Ops.FDIV}
  assert all(u.dtype == dtypes.float32.vec(4) for u in alu)
  assert len([u for u in alu if u.op is Ops.FDIV]) == 2          # 8 outputs: two vectors
  # where lanes are not consecutive in every buffer, or not 32-bit: lowered point by point
  for t in (kg.Tensor(np.zeros((1024, 4), np.float32)).T * 2, a.cast("float16") * 2, (a < 1).where(a, 0.0),
            kg.Tensor(np.zeros((1024, 3), np.float32)) * 2):
    alu, _ = vector_alu(t, options)
    assert not alu


def test_vector_kernels_are_valid_wgsl():
  """naga and Tint accept the vector expressions (casts, helpers lane by lane, x / 0.0, a vector
  accumulator)."""
  a = kg.Tensor(np.zeros((64, 1024), np.float32))
  b = kg.Tensor(np.ones((64, 1), np.float32))
  for t in ((a * 10).cast("int32") * 3 - b.cast("int32"), (a - b).exp().maximum(a) / 0.0,
            a.sqrt().sum(axis=1), (a - b).exp().max(axis=1)):
    item = item_of(t)
    source = compile_item(item, "wgsl").source
    assert re.search(r": vec4<\w+> = (v\d+ [-+*/] |vec4<f32>\(kg_f)", source)   # vector ALU
    wgsl_validate(source)
    tint_validate(source)


def test_vector_outputs_in_wgsl():
  a = kg.Tensor(np.zeros((4096, 1024), np.float32))
  b = kg.Tensor(np.ones((4096, 1), np.float32))
  item = item_of(a.exp() / b)
  assert opt.optimize(item, WGSL).upcast_vec and not opt.optimize(item, PTX).upcast_vec
  source = compile_item(item, "wgsl").source
  # the output and the 4096x1024 input as vec4 arrays; the per-row divisor element by element
  assert source.count("array<vec4<f32>>") == 2 and "array<f32>" in source
  wgsl_validate(source)
  sink, _ = lower(item, opt.optimize(item, WGSL))
  stores = [u for u in toposort([sink]) if u.op is Ops.STORE]
  assert len(stores) == opt.optimize(item, WGSL).upcast // 4
  assert all(store.src[2].dtype == dtypes.float32.vec(4) for store in stores)


def test_reductions_and_ragged_outputs_store_one_element_at_a_time():
  item = item_of(kg.Tensor(np.zeros((300,), np.float32)).exp())
  sink, _ = lower(item, Opts(local=64, upcast=4, upcast_vec=True))    # 300 = 75 threads: gated
  assert all(u.src[2].dtype.count == 1 for u in toposort([sink]) if u.op is Ops.STORE)
  item = item_of(kg.Tensor(np.zeros((1 << 16, 4), np.float32)).sum(axis=1))
  assert not opt.optimize(item, WGSL, {"upcast": 4}).upcast_vec


@pytest.mark.parametrize("device", DEVICES)
def test_wider_reads_split_into_vectors_of_four(monkeypatch, device):
  """WGSL has no vec8: 8 outputs per thread are two vec4 stores, group_vec=8 two vec4 loads."""
  rt = runtime(device)
  x = data("float32", (4, 2048))
  for extra, build, want in (({"local": 256, "upcast": 8, "upcast_vec": True},
                              lambda t: (t * 2).exp(), lambda a: np.exp(a * 2)),
                             ({"group": 16, "group_unroll": 2, "group_vec": 8},
                              lambda t: t.sum(axis=1), lambda a: a.sum(axis=1))):
    options = {**rt.render_options(), **extra}
    monkeypatch.setattr(rt, "render_options", lambda: options)
    monkeypatch.delenv("KERNELGEN_DEVICE", raising=False)
    monkeypatch.setattr(kg.Device, "_default", device)
    y = build(kg.Tensor(x))
    (item,) = schedule([y.node])
    sink, _ = lower(item, opt.optimize(item, target_of(rt), options))
    counts = {u.dtype.count for u in toposort([sink]) if u.op is Ops.LOAD}
    counts |= {u.src[2].dtype.count for u in toposort([sink]) if u.op is Ops.STORE}
    assert 4 in counts and max(counts) == 4
    if rt.target == "wgsl":                     # naga, on the device (it may have subgroups)
      rt.pipeline(compile_item(item, "wgsl", options).launch)
    np.testing.assert_allclose(y.numpy(), want(x), rtol=1e-5, atol=1e-4)


VECTOR_EDGES = {     # (expression over a (64, 1028), b (64, 1024), c (256, 3, 4), numpy reference)
  "unaligned": (lambda a, b, c: a[:, 1:1025] + b, lambda a, b, c: a[:, 1:1025] + b),
  "itself-broadcast": (lambda a, b, c: b * b[:, :1], lambda a, b, c: b * b[:, :1]),
  "padded": (lambda a, b, c: b[:, 2:].pad(((0, 0), (0, 2))) + b,
             lambda a, b, c: np.pad(b[:, 2:], ((0, 0), (0, 2))) + b),
  "flipped": (lambda a, b, c: b.flip(1) * 2, lambda a, b, c: b[:, ::-1] * 2),
  "last-axis-4": (lambda a, b, c: c.exp() + c[:, :1], lambda a, b, c: np.exp(c) + c[:, :1]),
  "unaligned-sum": (lambda a, b, c: a[:, 1:1025].sum(axis=1),
                    lambda a, b, c: a[:, 1:1025].astype(np.float64).sum(axis=1)),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(VECTOR_EDGES))
def test_vector_lowering_edges_match_numpy(monkeypatch, device, name):
  """Reads that are not aligned vectors, masks, negative strides, a vector that is a whole last
  axis: lowered as vectors or point by point, the values are numpy's."""
  rt = runtime(device)
  forced = {"group": 16, "group_vec": 4, "group_unroll": 4} if name.endswith("sum") else \
    {"local": 64, "upcast": 8, "upcast_vec": True}
  options = {**rt.render_options(), **forced}
  monkeypatch.setattr(rt, "render_options", lambda: options)
  monkeypatch.delenv("KERNELGEN_DEVICE", raising=False)
  monkeypatch.setattr(kg.Device, "_default", device)
  rng = np.random.default_rng(2)
  x = [rng.standard_normal(s).astype(np.float32) for s in ((64, 1028), (64, 1024), (256, 3, 4))]
  build, want = VECTOR_EDGES[name]
  (item,) = schedule([build(*[kg.Tensor(v) for v in x]).node])
  alu = [u for u in toposort([lower(item, opt.optimize(item, WGSL, forced))[0]])
         if u.op in GroupOp.ALU and u.dtype.count == 4]     # lowered as vectors, or point by point
  assert bool(alu) == (name not in ("padded", "flipped"))
  got = build(*[kg.Tensor(v) for v in x]).numpy()
  np.testing.assert_allclose(got, want(*x), rtol=1e-5, atol=1e-4)
