"""Subgroup reductions (RENDERER-SPEC W14): grouped reductions that combine partials per subgroup
(SUBGROUP_REDUCE), claim compact slots with ATOMIC_ADD and fold one slot per subgroup.

Values are checked against numpy on the reference interpreter for several subgroup sizes and
both subgroup layouts (workgroups that are not a multiple of the size included), and on WEBGPU
(wgpu + lavapipe); the WGSL is validated by naga (wgpu) and Tint (with `enable subgroups;`).
"""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import dtypes
from kernelgen.uop import interpret
from kernelgen import search
from kernelgen.lowering import optimize as opt
from kernelgen.render.targets import PTX, TARGETS, WGSL
from kernelgen.compiler import compile_kernel
from kernelgen.errors import DeviceError, UnsupportedError, VerifyError
from kernelgen.lowering.lower import Opts, lower
from kernelgen.uop.ops import Ops, UOp
from kernelgen.graph.schedule import schedule
from kernelgen.uop.verify import verify
from test_browser import site  # noqa: F401  (fixture: the built site, served locally)
from tools import default_device, ptxas_check, tint_validate, missing_tool

I32 = dtypes.int32

# dtypes whose grouped reductions use subgroup ops, and some that fold through memory only
SG = TARGETS["python"].subgroup_dtypes
FALLBACK = ("int8", "uint8", "int16")


def data(dtype: str, shape, op: str, seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  if dtype.startswith("float"):
    x = rng.uniform(0.9, 1.1, shape) if op == "prod" else rng.standard_normal(shape)
  else:
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True)
    x = rng.integers(1, 3, shape) if op == "prod" else x
  return x.astype(dtype)


REDUCTIONS = {
  "sum": (lambda t: t.sum(axis=1), lambda x, d: x.sum(axis=1, dtype=d)),
  "max": (lambda t: t.max(axis=1), lambda x, d: x.max(axis=1)),
  "min": (lambda t: t.min(axis=1), lambda x, d: x.min(axis=1)),
  "prod": (lambda t: t.prod(axis=1), lambda x, d: x.prod(axis=1, dtype=d)),
  "mean": (lambda t: t.mean(axis=1), lambda x, d: x.astype(np.float64).mean(axis=1)),
  "softmax": (lambda t: t.softmax(axis=1),
              lambda x, d: (lambda e: e / e.sum(axis=1, keepdims=True))(
                np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True)))),
}
FLOAT_ONLY = {"mean", "softmax"}


def check(got: np.ndarray, x: np.ndarray, op: str, out_dtype) -> None:
  want = REDUCTIONS[op][1](x, np.dtype(out_dtype.name) if out_dtype.name != "bool" else None)
  if np.dtype(out_dtype.name).kind == "f":
    tol = 2e-2 if "float16" in (x.dtype.name, out_dtype.name) else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)
  else:
    np.testing.assert_array_equal(got, want.astype(got.dtype))


def cases(names):
  return [(d, op) for d in names for op in REDUCTIONS
          if not (op in FLOAT_ONLY and not d.startswith("float"))]


# ---- the reference interpreter ----------------------------------------------------------------

@pytest.fixture
def python_subgroups(monkeypatch):
  """PYTHON with subgroups on; returns a setter for (group, size, layout)."""
  rt = kg.Device["PYTHON"]

  def configure(group: int, size: int, layout: str = "linear"):
    monkeypatch.setattr(rt, "render_options", lambda: {"subgroups": True, "group": group})
    monkeypatch.setattr(rt, "subgroup_size", size)
    monkeypatch.setattr(rt, "subgroup_layout", layout)

  with default_device(monkeypatch, "PYTHON"):
    yield configure


def subgroup_ops(t: kg.Tensor, **options) -> int:
  """How many SUBGROUP_REDUCE nodes the kernels of `t` have, compiled for PYTHON."""
  return sum(u.op is Ops.SUBGROUP_REDUCE for k in kg.compile(t, target="python", **options)
             for u in k.kernel.uops)


# (threads per output, subgroup size, layout): whole, partial and one-thread-short subgroups
GEOMETRIES = [(16, 4, "linear"), (24, 8, "strided"), (16, 32, "linear"), (20, 8, "linear"),
              (24, 5, "strided"), (32, 32, "strided")]


@pytest.mark.parametrize("group,size,layout", GEOMETRIES)
@pytest.mark.parametrize("dtype,op", cases(("float32", "int32")))
def test_interpreter_matches_numpy(python_subgroups, group, size, layout, dtype, op):
  python_subgroups(group, size, layout)
  x = data(dtype, (3, 70), op)
  y = REDUCTIONS[op][0](kg.Tensor(x))
  assert subgroup_ops(y, subgroups=True, group=group) > 0
  check(y.numpy(), x, op, y.dtype)


@pytest.mark.parametrize("dtype,op", cases(("float16", "uint32")) + cases(FALLBACK))
def test_interpreter_other_dtypes(python_subgroups, dtype, op):
  python_subgroups(24, 8, "strided")
  x = data(dtype, (2, 70), op)
  y = REDUCTIONS[op][0](kg.Tensor(x))
  check(y.numpy(), x, op, y.dtype)


def test_fallback_dtypes_fold_through_memory_only(python_subgroups):
  """max of int8 stays int8 (no subgroup ops); its sum accumulates in int32 (subgroup ops)."""
  x = kg.Tensor(data("int8", (2, 300), "max"))
  assert subgroup_ops(x.max(axis=1), subgroups=True, group=16) == 0
  assert subgroup_ops(x.sum(axis=1), subgroups=True, group=16) > 0
  assert subgroup_ops(x.float().sum(axis=1), subgroups=False, group=16) == 0


def test_nan_propagates_through_subgroup_max(python_subgroups):
  python_subgroups(16, 4, "strided")
  x = data("float32", (3, 70), "max")
  x[1, 33] = np.nan
  got = kg.Tensor(x).max(axis=1).numpy()
  assert np.isnan(got[1]) and not np.isnan(got[[0, 2]]).any()


def test_broken_subgroup_op_is_caught(python_subgroups, monkeypatch):
  """Negative control: an interpreter whose float SUBGROUP_REDUCE leaves out the last lane of
  each subgroup gives wrong sums, so the tests above would see a wrong subgroup result. (One
  that returns each thread's own value would not: that is a valid subgroup size of 1, and every
  thread then leads its own subgroup.)"""
  python_subgroups(16, 4)
  x = data("float32", (3, 70), "sum")
  real = interpret._HANDLERS[Ops.SUBGROUP_REDUCE]

  def broken(wg, u, lanes):
    real(wg, u, lanes)
    if u.dtype.is_float():
      value = wg.env[u.src[0]]
      last = {wg.p.subgroup[t]: t for t in sorted(lanes, key=lambda t: wg.p.sglane[t])}
      wg.env[u] = [None if v is None else v - value[last[wg.p.subgroup[t]]]
                   for t, v in enumerate(wg.env[u])]

  monkeypatch.setitem(interpret._HANDLERS, Ops.SUBGROUP_REDUCE, broken)
  with pytest.raises(AssertionError):
    check(kg.Tensor(x).sum(axis=1).numpy(), x, "sum", dtypes.float32)
  monkeypatch.setitem(interpret._HANDLERS, Ops.SUBGROUP_REDUCE, real)
  check(kg.Tensor(x).sum(axis=1).numpy(), x, "sum", dtypes.float32)


def test_strided_layout_breaks_layout_assumptions():
  """The strided model: not consecutive, lanes numbered down, a partial subgroup lacks lane 0."""
  group, lane = interpret.subgroup_layout_of(10, 4, "strided")
  assert group == [0, 1, 2] * 3 + [0]
  assert [lane[t] for t in range(10) if group[t] == 1] == [3, 2, 1]
  assert interpret.subgroup_layout_of(10, 4, "linear") == ([0] * 4 + [1] * 4 + [2] * 2,
                                                           [0, 1, 2, 3] * 2 + [0, 1])
  with pytest.raises(kg.ExecutionError, match="subgroup_size"):
    interpret.subgroup_layout_of(8, 256, "linear")


# ---- when the lowering uses them ----------------------------------------------------------------

def item_of(t: kg.Tensor):
  (item,) = schedule([t.node])
  return item


def test_heuristic_uses_subgroups_for_big_groups_only(monkeypatch):
  with default_device(monkeypatch, "PYTHON"):
    big = item_of(kg.Tensor(np.ones((4, 1 << 14), np.float32)).sum(axis=1))
    small = item_of(kg.Tensor(np.ones((4, 1024), np.float32)).sum(axis=1))
  assert opt.optimize(big, WGSL, {"subgroups": True}).subgroups
  assert opt.optimize(big, WGSL, {}).group and not opt.optimize(big, WGSL, {}).subgroups
  assert opt.optimize(big, PTX, {"subgroups": True}).subgroups == ("float32", "int32", "uint32")
  assert not opt.optimize(big, PTX, {"subgroups": True, "group": 48}).subgroups  # not warps
  assert opt.optimize(small, WGSL, {"subgroups": True}).group < opt.SUBGROUP_MIN_GROUP
  assert not opt.optimize(small, WGSL, {"subgroups": True}).subgroups
  assert opt.optimize(small, WGSL, {"subgroups": True, "group": 32}).subgroups


def test_bare_compiles_get_no_subgroup_ops(monkeypatch):
  with default_device(monkeypatch, "PYTHON"):
    y = kg.Tensor(np.ones((4, 1 << 14), np.float32)).sum(axis=1)
  for target in ("wgsl", "ptx"):
    (k,) = kg.compile(y, target=target)
    assert not any(u.op in (Ops.SUBGROUP_REDUCE, Ops.ATOMIC_ADD) for u in k.kernel.uops)
    assert k.launch.features == ()
  assert "subgroup" not in k.source


def run_item(item, opts: Opts, inputs: list, size: int, layout: str) -> tuple:
  """Lower `item` with `opts`, run it on the interpreter; (output, subgroup op count)."""
  from kernelgen.graph.schedule import ScheduleItem  # noqa: F401  (the item's type)
  sink, _ = lower(item, opts)
  kernel = compile_kernel(sink, "k", "python")
  out = bytearray(item.out.size * item.out.dtype.itemsize)
  interpret.execute(kernel, [out] + [bytearray(x.tobytes()) for x in inputs],
                    subgroup_size=size, subgroup_layout=layout)
  used = sum(u.op is Ops.SUBGROUP_REDUCE for u in kernel.uops)
  return np.frombuffer(bytes(out), np.dtype(item.out.dtype.name)), used


@pytest.mark.parametrize("size,layout", [(4, "strided"), (8, "linear")])
def test_two_subgroup_folds_in_one_kernel(monkeypatch, size, layout):
  """sum + max over rows is one kernel with two grouped reductions: two counters, two folds."""
  x = data("float32", (3, 70), "sum")
  with default_device(monkeypatch, "PYTHON"):
    t = kg.Tensor(x).realize()
    (item,) = schedule([(t.sum(axis=1) + t.max(axis=1)).node])
  got, used = run_item(item, Opts(local=24, group=24, subgroups=SG), [x], size, layout)
  assert used == 3                          # each fold's values, and one leader lane for both
  np.testing.assert_allclose(got, x.sum(axis=1) + x.max(axis=1), rtol=1e-5)


def test_a_grouped_reduction_inside_another_is_hoisted_and_folds_per_subgroup(monkeypatch):
  """The max read (broadcast along the row) inside the sum's source fuses into the sum's kernel
  and is lowered once, before the sum's loop (40 elements over 16 lanes: the loop's last step is
  gated), not inside it: so it folds per subgroup too, with its own counter, and is right."""
  x = data("float32", (2, 40), "sum")
  with default_device(monkeypatch, "PYTHON"):
    t = kg.Tensor(x).realize()
    y = (t - t.max(axis=1, keepdim=True)).sum(axis=1)
    (item,) = schedule([y.node])
  got, used = run_item(item, Opts(local=16, group=16, subgroups=SG), [x], 4, "strided")
  assert used == 3                          # each fold's values, and one leader lane for both
  np.testing.assert_allclose(got, (x - x.max(axis=1, keepdims=True)).sum(axis=1), rtol=1e-4)


# ---- the verifier and the renderer's checks ---------------------------------------------------

def test_verifier_rejects_bad_subgroup_and_atomic_nodes():
  f = UOp.const(dtypes.float32, 1.0)
  lane = UOp(Ops.SPECIAL, I32, (), ("sglane", 0, 32))
  local_f = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(4, local=True), (), 0)
  bad = [UOp(Ops.SUBGROUP_REDUCE, dtypes.float32, (f,), Ops.AND),
         UOp(Ops.SUBGROUP_REDUCE, dtypes.float32, (f,), Ops.SUB),
         UOp(Ops.SUBGROUP_REDUCE, dtypes.bool, (f.lt(2.0),), Ops.OR),
         UOp(Ops.SUBGROUP_REDUCE, I32, (f,), Ops.ADD),
         UOp(Ops.ATOMIC_ADD, dtypes.float32, (local_f, UOp.const(I32, 0), f)),
         UOp(Ops.SPECIAL, I32, (), ("sglane", 1, 32))]
  for node in bad:
    with pytest.raises(VerifyError):
      verify(node)
  verify(UOp(Ops.SUBGROUP_REDUCE, I32, (lane,), Ops.MIN))


def test_subgroup_ops_and_barriers_must_not_be_inside_if():
  from kernelgen.uop.verify import verify_linear
  lane = UOp(Ops.SPECIAL, I32, (), ("sglane", 0, 32))
  cond = lane.lt(3)
  block = UOp(Ops.IF, None, (cond,), 0)
  reduce = UOp(Ops.SUBGROUP_REDUCE, I32, (lane,), Ops.ADD)
  with pytest.raises(VerifyError, match="uniform control flow"):
    verify_linear([lane, UOp.const(I32, 3), cond, block, reduce, UOp(Ops.ENDIF, None, (block,))])
  verify_linear([lane, reduce])


def test_ptx_refuses_what_warps_cannot_do(monkeypatch):
  """Warp shuffles move 32 bits, and a PTX warp reduction needs whole warps."""
  with default_device(monkeypatch, "PYTHON"):
    half = item_of(kg.Tensor(np.ones((2, 4096), np.float16)).max(axis=1))
    item = item_of(kg.Tensor(np.ones((2, 4096), np.float32)).sum(axis=1))
  sink, _ = lower(half, Opts(local=64, group=64, subgroups=("float16",)))
  with pytest.raises(UnsupportedError, match="without subgroups"):
    compile_kernel(sink, "k", "ptx", {})
  sink, _ = lower(item, Opts(local=48, group=48, subgroups=SG))
  with pytest.raises(UnsupportedError, match="whole warps"):
    compile_kernel(sink, "k", "ptx", {})


def test_wgsl_refuses_subgroup_ops_without_the_option(monkeypatch):
  with default_device(monkeypatch, "PYTHON"):
    item = item_of(kg.Tensor(np.ones((2, 4096), np.float32)).sum(axis=1))
  sink, _ = lower(item, Opts(local=64, group=64, subgroups=SG))
  with pytest.raises(UnsupportedError, match="subgroups=True"):
    compile_kernel(sink, "k", "wgsl", {})
  assert "subgroupAdd" in compile_kernel(sink, "k", "wgsl", {"subgroups": True}).source


# ---- WGSL on wgpu (lavapipe) and Tint ---------------------------------------------------------

@pytest.fixture(scope="module")
def rt():
  try:
    runtime = kg.Device["WEBGPU"]
  except kg.DeviceError as error:
    missing_tool("device WEBGPU", f"pip install wgpu; apt-get install mesa-vulkan-drivers ({error})")
  if not runtime.render_options().get("subgroups"):
    missing_tool("subgroups on the WebGPU adapter", "use an adapter with the subgroups feature (lavapipe has it)")
  return runtime


def tint_check(launch) -> None:
  assert "enable subgroups;" not in launch.source      # naga rejects it; Tint runtimes add it
  tint_validate("enable subgroups;\n" * ("subgroups" in launch.features) + launch.source,
                launch.entry_point)


@pytest.fixture
def webgpu_subgroups(rt, monkeypatch):
  """WEBGPU with `group` threads per output forced and subgroups on; returns the setter."""
  base = rt.render_options()

  def configure(group: int, f16: bool | None = None):
    options = {**base, "subgroups": True, "group": group}
    options["f16"] = base["f16"] if f16 is None else f16 and base["f16"]
    monkeypatch.setattr(rt, "render_options", lambda: options)
    return options

  with default_device(monkeypatch, "WEBGPU"):
    yield configure


@pytest.mark.parametrize("group", [20, 64, 256])
@pytest.mark.parametrize("dtype,op", cases(("float32", "int32", "uint32")))
def test_webgpu_matches_numpy(webgpu_subgroups, rt, group, dtype, op):
  options = webgpu_subgroups(group)
  x = data(dtype, (5, 1000), op)
  y = REDUCTIONS[op][0](kg.Tensor(x))
  kernels = kg.compile(y, target="wgsl", **options)
  assert any("subgroups" in k.launch.features for k in kernels)
  for k in kernels:
    rt.pipeline(k.launch)                                  # naga, on a device with subgroups
    tint_check(k.launch)
  check(y.numpy(), x, op, y.dtype)


@pytest.mark.parametrize("f16", [True, False])
@pytest.mark.parametrize("op", list(REDUCTIONS))
def test_webgpu_float16_both_paths(webgpu_subgroups, rt, f16, op):
  options = webgpu_subgroups(64, f16)
  if f16 and not options["f16"]:
    missing_tool("shader-f16 on the WebGPU adapter", "use an adapter with shader-f16 (lavapipe has it)")
  x = data("float16", (3, 1000), op)
  y = REDUCTIONS[op][0](kg.Tensor(x))
  for k in kg.compile(y, target="wgsl", **options):
    tint_check(k.launch)
  check(y.numpy(), x, op, y.dtype)


@pytest.mark.parametrize("dtype,op", cases(FALLBACK))
def test_webgpu_fallback_dtypes(webgpu_subgroups, dtype, op):
  webgpu_subgroups(64)
  x = data(dtype, (3, 1000), op)
  y = REDUCTIONS[op][0](kg.Tensor(x))
  check(y.numpy(), x, op, y.dtype)


def check_nan_max(shape, row: int, col: int):
  """max over rows where one row holds a NaN: that row's max is NaN, the others exact."""
  x = data("float32", shape, "max")
  x[row, col] = np.nan
  got = kg.Tensor(x).max(axis=1).numpy()
  others = [r for r in range(shape[0]) if r != row]
  assert np.isnan(got[row]) and np.array_equal(got[others], x[others].max(axis=1))


def test_webgpu_nan_max_and_big_sum(webgpu_subgroups):
  webgpu_subgroups(256)
  check_nan_max((4, 5000), 2, 4321)
  big = data("float32", (1 << 20,), "sum")
  np.testing.assert_allclose(kg.Tensor(big).sum().numpy(), big.sum(dtype=np.float64), rtol=1e-4)


def test_webgpu_device_uses_subgroups_by_default(rt, monkeypatch):
  """The device turns the option on itself; a 16384-long row sum gets subgroup ops in the groups
  of 128 lanes a GPU adapter gets. (lavapipe is a CPU adapter: its groups read a run per lane,
  in at most 32 lanes, too few for subgroups: group_chunk, turned off here.)"""
  assert rt.render_options()["subgroups"]
  gpu_like = {**rt.render_options(), "group_chunk": False}
  monkeypatch.setattr(rt, "render_options", lambda: gpu_like)
  with default_device(monkeypatch, "WEBGPU"):
    x = data("float32", (8, 1 << 14), "sum")
    y = kg.Tensor(x).sum(axis=1)
    (k,) = kg.compile(y, target="wgsl", **rt.render_options())
    assert k.launch.features == ("subgroups",) and "subgroupAdd" in k.source
    np.testing.assert_allclose(y.numpy(), x.sum(axis=1, dtype=np.float64), rtol=1e-4)


def test_launch_needing_a_missing_feature_is_a_device_error(rt, monkeypatch):
  with default_device(monkeypatch, "WEBGPU"):
    y = kg.Tensor(data("float32", (2, 1 << 14), "sum")).sum(axis=1)
  (k,) = kg.compile(y, target="wgsl", subgroups=True)
  assert k.launch.to_json()["features"] == ["subgroups"]
  monkeypatch.setattr(rt, "features", [f for f in rt.features if "subgroup" not in f])
  monkeypatch.setattr(rt, "pipelines", {})
  with pytest.raises(DeviceError, match="subgroups"):
    rt.pipeline(k.launch)


# ---- the page: navigator.gpu on SwiftShader has `subgroups` (4 lanes) ---------------------------

PAGE_CODE = """_rt = kg.Device["WEBGPU"]
_base = _rt.render_options
# SwiftShader is a CPU adapter (group_chunk: at most 32 lanes per group, too few for subgroups):
# the strided order of GPU adapters, 64 lanes and more, combines per subgroup
_rt.render_options = lambda: {**_base(), "group_chunk": False}
x = Tensor.rand(4, 8192, seed=11) - 0.5
out = x.sum(axis=1) + x.max(axis=1)
kernels = kg.compile(out, target="wgsl", **kg.Device["WEBGPU"].render_options())
assert all("subgroups" in k.launch.features for k in kernels), "no subgroup ops"
"""


@pytest.mark.timeout(900)
def test_page_runs_subgroup_reductions_on_swiftshader(site, chromium, monkeypatch):
  """The page's device turns subgroups on (SwiftShader has them); gpu.js adds `enable
  subgroups;` for Tint; the values match numpy and the page's own PYTHON reference."""
  from browser_util import local_page
  from test_browser import RUN, boot
  with default_device(monkeypatch, "PYTHON"):
    x = (kg.Tensor.rand(4, 8192, seed=11) - 0.5).numpy()
  with local_page(chromium, service_workers="block") as page:
    boot(page, site.url("index.html"))
    assert "subgroups yes" in page.inner_text("#adapter")
    result = page.evaluate(RUN, PAGE_CODE)
  assert "error" not in result, result
  assert result["device"] == "WEBGPU" and result["reference"]["match"], result["reference"]
  np.testing.assert_allclose(result["data"], x.sum(axis=1) + x.max(axis=1), rtol=1e-4)


# ---- PTX: warps (shfl.sync.bfly) on the simulator, checked by ptxas ----------------------------

@pytest.fixture
def ptxsim_subgroups(monkeypatch):
  rt = kg.Device["PTXSIM"]
  base = rt.render_options()

  def configure(group: int):
    options = {**base, "subgroups": True, "group": group}
    monkeypatch.setattr(rt, "render_options", lambda: options)
    return options

  with default_device(monkeypatch, "PTXSIM"):
    yield configure


@pytest.mark.parametrize("group", [32, 96])
@pytest.mark.parametrize("dtype,op", cases(("float32", "int32", "uint32")) +
                         [("float16", "max"), ("int8", "max")])
def test_ptx_warp_reductions_on_the_simulator(ptxsim_subgroups, group, dtype, op):
  options = ptxsim_subgroups(group)
  x = data(dtype, (3, 300), op)
  y = REDUCTIONS[op][0](kg.Tensor(x))
  kernels = kg.compile(y, target="ptx", **options)
  shuffles = sum(k.source.count("shfl.sync.bfly") for k in kernels)
  assert (shuffles > 0) == (dtype in TARGETS["ptx"].subgroup_dtypes)
  for k in kernels:
    ptxas_check(k.source, "sm_80")
  check(y.numpy(), x, op, y.dtype)


def test_ptx_nan_max_over_warps(ptxsim_subgroups):
  ptxsim_subgroups(64)
  check_nan_max((3, 300), 0, 77)


def test_simulator_checks_shfl_convergence():
  """shfl.sync executed by part of the warp is an error, not a silent value."""
  from kernelgen.ptxsim.machine import launch, program
  from kernelgen.ptxsim.memory import GlobalMemory
  source = """.version 7.8
.target sm_80
.address_size 64

.visible .entry k(
	.param .u64 data0
)
.maxntid 32, 1, 1
{
	.reg .pred %p<1>;
	.reg .b32 %r<3>;
	mov.u32 %r0, %laneid;
	setp.lt.u32 %p0, %r0, 16;
	@%p0 shfl.sync.bfly.b32 %r1, %r0, 1, 31, -1;
	ret;
}
"""
  with pytest.raises(kg.ExecutionError, match="member mask"):
    launch(program(source), (1, 1, 1), (32, 1, 1), [0], GlobalMemory())
