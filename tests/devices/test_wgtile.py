"""Tiling of matmul/conv2d through workgroup memory (option stage=, wgtile.py): values against
numpy on PYTHON, WEBGPU and PTXSIM (which also detects shared-memory races), 2-D workgroups,
barriers in uniform control flow, PTX through ptxas, WGSL through wgpu and Tint, limits."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kernelgen as kg
from kernelgen import Tensor, dtypes
from kernelgen import search
from kernelgen.lowering import optimize as opt
from kernelgen.lowering import stage_choice
from kernelgen.render.targets import PTX, PYTHON, TARGETS, WGSL
from kernelgen.errors import LimitError, UnsupportedError
from kernelgen.uop.ops import Ops
from kernelgen.graph.schedule import schedule
from tools import DEVICES, default_device, missing_tool, ptxas_check, tint_validate, wgsl_validate

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def python_device(monkeypatch):
  from kernelgen.tensor.ops import reduce as reduce_ops  # reductions stay one kernel (unsplit)
  monkeypatch.setattr(reduce_ops, "SPLIT_MIN_REDUCE", 1 << 62, raising=False)
  with default_device(monkeypatch, "PYTHON"):
    yield


CHOSEN: list = []


@pytest.fixture(autouse=True)
def staged_some_kernel(monkeypatch):
  """Records what the optimizer chose; a test that forced stage= on a device must have run a
  staged kernel."""
  CHOSEN.clear()
  real = opt.optimize

  def spy(item, target, options=None):
    CHOSEN.append(got := real(item, target, options))
    return got
  monkeypatch.setattr(opt, "optimize", spy)
  yield
  if getattr(_on, "forced", False):
    _on.forced = False
    assert any(o.stage for o in CHOSEN), "no kernel was tiled through workgroup memory"


def _on(device: str, monkeypatch, **options):
  """`device`, its realizing forced to use `options` (skips when the device is missing)."""
  try:
    runtime = kg.Device[device]
  except Exception as error:  # noqa: BLE001 - no adapter or simulator here
    missing_tool(f"device {device}", f"pip install wgpu; apt-get install mesa-vulkan-drivers ({error})")
  base = runtime.render_options
  monkeypatch.setattr(runtime, "render_options", lambda: {**base(), **options})
  _on.forced = bool(options.get("stage"))
  return device


def _randn(*shape, dtype=np.float32):
  return RNG.standard_normal(shape).astype(dtype)


def _item(t: Tensor):
  items = schedule([t.node])
  return items[-1]


def _conv_ref(x, w, stride=1, padding=0, dilation=1, groups=1):
  (sh, sw), p, d = (stride if isinstance(stride, tuple) else (stride, stride)), padding, dilation
  n, c, h, wd = x.shape
  o, cg, kh, kw = w.shape
  xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)))
  oh, ow = (h + 2 * p - d * (kh - 1) - 1) // sh + 1, (wd + 2 * p - d * (kw - 1) - 1) // sw + 1
  out = np.zeros((n, o, oh, ow))
  per = o // groups
  for g in range(groups):
    for i in range(kh):
      for j in range(kw):
        win = xp[:, g * cg:(g + 1) * cg, i * d:i * d + sh * oh:sh, j * d:j * d + sw * ow:sw]
        out[:, g * per:(g + 1) * per] += np.einsum("nchw,oc->nohw", win,
                                                   w[g * per:(g + 1) * per, :, i, j])
  return out


def _staged(t: Tensor, target: str, **options):
  """The compiled kernels of `t` with stage forced on; asserts the last one is staged."""
  kernels = kg.compile(t, target=target, stage=True, **options)
  kernel = kernels[-1]
  assert kernel.local_size[1] > 1 or kernel.local_size[0] > 1
  barrier = {"wgsl": "workgroupBarrier", "ptx": "bar.sync", "python": "barrier"}[target]
  assert kernel.source.count(barrier) >= 1, "the staged kernel has no barrier"
  return kernels


MATMULS = [((16, 16), (16, 16)), ((33, 17), (17, 65)), ((2, 9, 5), (2, 5, 70)),
           ((5, 40), (40, 7))]


@pytest.mark.parametrize("shape_a,shape_b", MATMULS)
@pytest.mark.parametrize("device", DEVICES)
def test_staged_matmuls_match_numpy(device, shape_a, shape_b, monkeypatch):
  dev = _on(device, monkeypatch, stage=True, tensor_cores=False)
  a, b = _randn(*shape_a), _randn(*shape_b)
  got = (Tensor(a).to(dev) @ Tensor(b).to(dev)).numpy()
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_staged_transposed_views_and_fused_inputs(device, monkeypatch):
  dev = _on(device, monkeypatch, stage=True, tensor_cores=False)
  a, b, bias = _randn(13, 20), _randn(11, 13), _randn(11)
  x, y = Tensor(a).to(dev), Tensor(b).to(dev)
  got = ((x.T.relu() * 2) @ (y.T + 1) + Tensor(bias).to(dev)).relu().numpy()
  want = np.maximum((np.maximum(a.T, 0) * 2) @ (b.T + 1) + bias, 0)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, np.int16])
@pytest.mark.parametrize("device", DEVICES)
def test_staged_int_matmul_is_exact(device, dtype, monkeypatch):
  dev = _on(device, monkeypatch, stage=True)
  a = RNG.integers(0 if dtype == np.uint8 else -50, 50, (21, 30)).astype(dtype)
  b = RNG.integers(0 if dtype == np.uint8 else -50, 50, (30, 19)).astype(dtype)
  got = (Tensor(a).to(dev) @ Tensor(b).to(dev)).numpy()
  assert got.dtype == dtype
  np.testing.assert_array_equal(got, a @ b)        # wrapping, as numpy's


def test_staged_mixed_dtypes_cast_while_loading(monkeypatch):
  dev = _on("PYTHON", monkeypatch, stage=True)
  a = RNG.integers(-8, 8, (9, 12)).astype(np.int8)
  b = _randn(12, 10)
  got = (Tensor(a).to(dev).astype(dtypes.float32) @ Tensor(b).to(dev)).numpy()
  np.testing.assert_allclose(got, a.astype(np.float32) @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_staged_f16_matmul(device, monkeypatch):
  dev = _on(device, monkeypatch, stage=True, tensor_cores=False)
  if device == "WEBGPU" and not kg.Device[dev].render_options().get("f16"):
    missing_tool("shader-f16 on the WebGPU adapter", "use an adapter with shader-f16 (lavapipe has it)")
  a, b = _randn(10, 24, dtype=np.float16), _randn(24, 18, dtype=np.float16)
  got = (Tensor(a).to(dev) @ Tensor(b).to(dev)).numpy()
  assert got.dtype == np.float16
  np.testing.assert_allclose(got.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32),
                             rtol=2e-2, atol=5e-2)


CONVS = [dict(padding=1), dict(stride=2, padding=1), dict(dilation=2, padding=2),
         dict(stride=(1, 2), padding=0)]


@pytest.mark.parametrize("kw", CONVS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("device", DEVICES)
def test_staged_conv2d_matches_numpy(device, kw, monkeypatch):
  dev = _on(device, monkeypatch, stage=True)
  small = device == "PTXSIM"
  x = _randn(1, 4, 6, 7) if small else _randn(2, 4, 11, 13)
  w, bias = _randn(6, 4 // kw.get("groups", 1), 3, 3), _randn(6)
  got = Tensor(x).to(dev).conv2d(Tensor(w).to(dev), Tensor(bias).to(dev), **kw).relu().numpy()
  want = np.maximum(_conv_ref(x, w, **kw) + bias[None, :, None, None], 0)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_grouped_conv2d_falls_back_to_register_tiles(monkeypatch):
  """groups > 1: the weights need the output channel and the input its group (both the tiled
  row axis), so nothing can be staged; a forced stage= leaves it to the register tiles."""
  dev = _on("PYTHON", monkeypatch, stage=True)
  _on.forced = False
  x, w = _randn(2, 4, 7, 9), _randn(6, 2, 3, 3)
  got = Tensor(x).to(dev).conv2d(Tensor(w).to(dev), padding=1, groups=2).numpy()
  np.testing.assert_allclose(got, _conv_ref(x, w, padding=1, groups=2), rtol=1e-4, atol=1e-4)
  assert CHOSEN and not any(o.stage for o in CHOSEN)


def _graphs():
  a, b = Tensor(_randn(33, 17)), Tensor(_randn(17, 65))
  x, w = Tensor(_randn(1, 8, 12, 12)), Tensor(_randn(16, 8, 3, 3))
  return {"matmul": a @ b, "batched": Tensor(_randn(3, 20, 9)) @ Tensor(_randn(3, 9, 40)),
          "conv": x.conv2d(w, padding=1).relu(), "conv_stride": x.conv2d(w, stride=2)}


@pytest.mark.parametrize("name", list(_graphs()))
def test_staged_ptx_assembles(name):
  for kernel in _staged(_graphs()[name], "ptx", arch="sm_80", tensor_cores=False):
    ptxas_check(kernel.source, "sm_80")


@pytest.mark.parametrize("name", list(_graphs()))
def test_staged_wgsl_validates(name):
  for kernel in _staged(_graphs()[name], "wgsl"):
    wgsl_validate(kernel.source)
    tint_validate(kernel.source)


@pytest.mark.parametrize("name", list(_graphs()))
def test_barriers_are_in_uniform_control_flow(name):
  (kernel,) = _staged(_graphs()[name], "python")[-1:]
  uops = kernel.kernel.uops
  depth, loops = 0, []
  for u in uops:
    if u.op is Ops.IF:
      depth += 1
    elif u.op is Ops.ENDIF:
      depth -= 1
    elif u.op is Ops.RANGE:
      loops.append(u)
    elif u.op is Ops.BARRIER:
      assert depth == 0, "a BARRIER inside an IF"
  # the loops a barrier sits in run the same trips on every thread
  assert all(r.src[0].op is Ops.CONST for r in loops)
  assert sum(u.op is Ops.BARRIER for u in uops) == (2 if loops else 1)   # one step: no loop
  assert kernel.local_size[0] > 1 and kernel.local_size[1] > 1     # a 2-D workgroup


def test_staged_launch_is_2d_with_a_2d_grid():
  (kernel,) = kg.compile(Tensor(_randn(3, 100, 9)) @ Tensor(_randn(3, 9, 80)), target="wgsl",
                         stage=(8, 16, 8), tile=(2, 2))
  assert kernel.local_size == (16, 8, 1)
  assert kernel.global_size == (3, 7 * 3, 1)    # column blocks x (row blocks x batch)
  assert kernel.launch.workgroup_size == (16, 8, 1)
  assert "@workgroup_size(16, 8, 1)" in kernel.source


def test_staged_grid_over_65535_workgroups_folds(monkeypatch):
  """On WEBGPU only: the interpreter would run each of the 70000 workgroups (too slow)."""
  dev = _on("WEBGPU", monkeypatch, stage=(1, 1, 4), tile=(1, 1))
  a, b = _randn(70000, 3), _randn(3, 2)
  got = (Tensor(a).to(dev) @ Tensor(b).to(dev)).numpy()
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_forced_stage_too_big_for_workgroup_memory_says_how_to_fix():
  t = Tensor(_randn(256, 256)) @ Tensor(_randn(256, 256))
  with pytest.raises(LimitError, match="workgroup memory.*force a smaller"):
    kg.compile(t, target="wgsl", stage=(16, 16, 64), tile=(8, 8))
  with pytest.raises(LimitError, match="threads per workgroup"):
    kg.compile(t, target="wgsl", stage=(32, 16, 8), tile=(2, 2))
  with pytest.raises(UnsupportedError, match="stage="):
    kg.compile(t, target="wgsl", stage=(16, 16))
  with pytest.raises(UnsupportedError, match="stage="):
    kg.compile(t, target="wgsl", stage="yes")


def test_stage_choices_and_defaults():
  big = _item(Tensor(_randn(256, 256)) @ Tensor(_randn(256, 256)))
  got = opt.optimize(big, PTX)                 # f32 on PTX: staged by default
  assert got.stage == (16, 16, stage_choice.STAGE_STEP) and got.tile == (8, 8) and got.local == 256
  assert opt.optimize(big, PTX, {"stage": False}).stage == ()
  assert opt.optimize(big, WGSL).stage == (() if not TARGETS["wgsl"].stage_default else
                                              (16, 16, stage_choice.STAGE_STEP))
  small = _item(Tensor(_randn(5, 3)) @ Tensor(_randn(3, 6)))
  forced = opt.optimize(small, PYTHON, {"stage": True})
  assert forced.stage and forced.stage[0] * forced.stage[1] <= TARGETS["python"].max_local
  assert forced.stage[0] * forced.tile[0] >= 5 and forced.stage[1] * forced.tile[1] >= 6
  elementwise = _item(Tensor(_randn(64, 64)) + 1)
  assert opt.optimize(elementwise, PTX, {"stage": True}).stage == ()   # not a matmul: ignored
  assert opt.optimize(small, PTX).stage == ()


def test_search_tries_register_tiles_and_staging(monkeypatch):
  search.SEARCHED.clear()
  item = _item(Tensor(_randn(32, 16)) @ Tensor(_randn(16, 32)))
  tried = []

  class Timed:
    target = "wgsl"

    def run(self, compiled, handles, var_values):
      tried.append(compiled)
      return 1.0 if compiled.get("stage") else 2.0    # the staged ones look fastest

    time_run = run

  monkeypatch.setattr("kernelgen.search.compile_item",
                      lambda item, target, options: _Variant(options))
  chosen = search.search(item, Timed(), [])
  assert chosen.stage and chosen.tile
  assert {tuple(o["tile"]) for o in tried if o.get("tile")} >= {(8, 8), (4, 4), (2, 2)}
  assert any(o.get("stage") is False and o.get("tile") for o in tried)
  assert search.search(item, Timed(), []) is chosen      # cached by kernel
  options = search.forced_options(chosen)
  assert opt.optimize(item, WGSL, options) == chosen
  search.SEARCHED.clear()


def test_staged_ptx_with_a_folded_grid_assembles():
  t = Tensor(_randn(70000, 3)) @ Tensor(_randn(3, 2))
  (kernel,) = kg.compile(t, target="ptx", arch="sm_80", stage=(1, 1, 4), tile=(1, 1))
  assert kernel.global_size == (2, 70000, 1) and "bar.sync" in kernel.source
  ptxas_check(kernel.source, "sm_80")


@pytest.mark.parametrize("device", ["WEBGPU", "PYTHON"])
def test_search_end_to_end_keeps_a_correct_choice(device, monkeypatch):
  dev = _on(device, monkeypatch)
  monkeypatch.setenv("KERNELGEN_SEARCH", "1")
  search.SEARCHED.clear()
  a, b = _randn(24, 20), _randn(20, 40)
  got = (Tensor(a).to(dev) @ Tensor(b).to(dev)).numpy()
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
  (chosen,) = search.SEARCHED.values()
  tried = {(o.tile, bool(o.stage)) for o in CHOSEN}
  assert {((8, 8), True), ((4, 4), False), ((2, 2), True)} <= tried     # tiles x staging tried
  assert CHOSEN[-1] == chosen      # the kernel that ran is the one search kept
  search.SEARCHED.clear()


def test_ptx_default_stages_large_f32_matmuls_and_conv(monkeypatch):
  """The PTX default (no options): staged, assembles, and PTXSIM (race checks on) agrees."""
  a, b = _randn(64, 40), _randn(40, 64)
  (kernel,) = kg.compile(Tensor(a) @ Tensor(b), target="ptx", arch="sm_80")
  assert "bar.sync" in kernel.source and kernel.local_size == (16, 16, 1)
  ptxas_check(kernel.source, "sm_80")
  x, w = _randn(1, 16, 16, 16), _randn(32, 16, 3, 3)
  (kernel,) = kg.compile(Tensor(x).conv2d(Tensor(w), padding=1), target="ptx", arch="sm_80")
  assert "bar.sync" in kernel.source
  ptxas_check(kernel.source, "sm_80")
  dev = _on("PTXSIM", monkeypatch)
  CHOSEN.clear()
  got = (Tensor(a).to(dev) @ Tensor(b).to(dev)).numpy()
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
  assert [o.stage for o in CHOSEN] == [(16, 16, stage_choice.STAGE_STEP)]


def test_step_loop_respects_max_trips(monkeypatch):
  monkeypatch.setattr(opt, "MAX_TRIPS", 2)
  monkeypatch.setattr(stage_choice, "MAX_TRIPS", 2)     # (the stage rule reads its own)
  item = _item(Tensor(_randn(128, 64)) @ Tensor(_randn(64, 128)))
  with pytest.raises(LimitError, match="loops 4 times .* the most is 2"):
    opt.optimize(item, PTX, {"stage": (16, 16, 16)})
  got = opt.optimize(item, PTX)          # the default falls back to a register tile
  assert got.stage == () and got.tile
  assert opt.optimize(item, PTX, {"stage": (16, 16, 32)}).stage == (16, 16, 32)


_A, _B = _randn(19, 23), _randn(23, 29)
GRAPHS = {
  "a@a.T": (lambda a, b: a @ a.T, lambda: _A @ _A.T),
  "eye@a": (lambda a, b: Tensor.eye(19).to(a.device) @ a, lambda: _A),
  "max-plus": (lambda a, b: (a[:, :, None] + b[None]).max(axis=1),
               lambda: (_A[:, :, None] + _B[None]).max(axis=1)),
  "min-times": (lambda a, b: (a[:, :, None] * b[None]).min(axis=1),
                lambda: (_A[:, :, None] * _B[None]).min(axis=1)),
  "where in the source": (lambda a, b: ((a[:, :, None] > 0).where(a[:, :, None], 0) * b[None])
                          .sum(axis=1), lambda: np.maximum(_A, 0) @ _B),
  "fused exp, tanh": (lambda a, b: a.exp() @ (b * 0.5).tanh(),
                      lambda: np.exp(_A) @ np.tanh(_B * 0.5)),
  "mean": (lambda a, b: (a[:, :, None] * b[None]).mean(axis=1), lambda: _A @ _B / 23),
}


@pytest.mark.parametrize("name", list(GRAPHS))
@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_staged_reductions_of_other_shapes(device, name, monkeypatch):
  dev = _on(device, monkeypatch, stage=True)
  build, want = GRAPHS[name]
  got = build(Tensor(_A).to(dev), Tensor(_B).to(dev)).numpy()
  np.testing.assert_allclose(got, want(), rtol=1e-4, atol=1e-4)


def _evaluate(u, env):
  if u.op is Ops.CONST:
    return u.arg
  if u.op is Ops.VAR:
    return env[u.arg[0]]
  a, b = (_evaluate(s, env) for s in u.src)
  return {Ops.ADD: a + b, Ops.MUL: a * b, Ops.IDIV: int(a / b), Ops.MOD: a - b * int(a / b)}[u.op]


def test_unravel_splits_a_term_whose_stride_divides_the_block():
  """(o*143 + h*13 + w) unravelled into (2, 3, 11, 13) (grouped conv channels): the first index
  is o // 3, free of h and w (so the tiled axes stay independent of it), and all are exact."""
  from kernelgen.lowering.index_math import I32, unravel
  from kernelgen.uop.ops import UOp, toposort
  o, h, w = (UOp(Ops.VAR, I32, (), (n, 0, e - 1)) for n, e in (("o", 6), ("h", 11), ("w", 13)))
  got = unravel([(o, 143, 6), (h, 13, 11), (w, 1, 13)], 0, (2, 3, 11, 13))
  assert {u.arg[0] for u in toposort([got[0]]) if u.op is Ops.VAR} == {"o"}
  for env in ({"o": oo, "h": hh, "w": ww} for oo in range(6) for hh in range(11) for ww in (0, 12)):
    flat = env["o"] * 143 + env["h"] * 13 + env["w"]
    assert [_evaluate(u, env) for u in got] == [flat // 429, flat // 143 % 3, flat // 13 % 11,
                                                flat % 13]


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_staged_conv2d_feeding_a_reduction(device, monkeypatch):
  """The conv's kernel writes relu(conv) as its epilogue (graph/epilogue.py), shaped (1, 5, 9,
  11); the register tile's axes (rows x columns, both in the input) cannot be staged, so staging
  picks another pair (output channels x columns: axes 1 and 3; 2 and 4 of the reduction's own
  7-d shape when the kernel wrote that, before the epilogue)."""
  dev = _on(device, monkeypatch, stage=True)
  x, w = _randn(1, 3, 9, 11), _randn(5, 3, 3, 3)
  got = Tensor(x).to(dev).conv2d(Tensor(w).to(dev), padding=1).relu().sum().numpy()
  want = np.maximum(_conv_ref(x, w, padding=1), 0).sum()
  np.testing.assert_allclose(got, want, rtol=1e-4)
  assert [o.tile_axes for o in CHOSEN if o.stage] == [(1, 3)]


class _Variant(dict):
  """What the mocked compile_item returns: the options it was given, binding no buffers."""
  buffers = ()


def test_a_hand_made_stage_for_a_kernel_without_tiles_is_a_typed_error():
  from kernelgen.lowering.lower import Opts, lower
  item = _item(Tensor(_randn(64, 64)) + 1)
  with pytest.raises(UnsupportedError, match="Opts.stage does not apply"):
    lower(item, Opts(local=256, tile=(2, 2), tile_axes=(0, 1), stage=(8, 8, 4)))


# ---- vector columns (register tiles from the plan's operands, and the staged compute) --------

def _vector_cases():
  a, b, bias = _randn(26, 40), _randn(40, 32), _randn(32)
  i, j = RNG.integers(-50, 50, (24, 40)).astype(np.int32), \
    RNG.integers(-50, 50, (40, 32)).astype(np.int32)
  h, k = _randn(24, 40, dtype=np.float16), _randn(40, 32, dtype=np.float16)
  f32 = lambda x: x.astype(np.float32)   # noqa: E731
  return {   # name -> (inputs, expression over tensors, numpy reference, tolerance)
    "f32": ((a, b), lambda x, y: x @ y, lambda x, y: x @ y, 1e-4),
    "wide": ((_randn(64, 24), _randn(24, 64)), lambda x, y: x @ y, lambda x, y: x @ y, 1e-4),
    "ragged": ((a[:, :30], b[:30, :30]), lambda x, y: x @ y, lambda x, y: x @ y, 1e-4),
    "bias_relu": ((a, b, bias), lambda x, y, c: (x @ y + c).relu(),
                  lambda x, y, c: np.maximum(x @ y + c, 0), 1e-4),
    "transposed_b": ((a, np.ascontiguousarray(b.T)), lambda x, y: x @ y.T,
                     lambda x, y: x @ y.T, 1e-4),
    "int32": ((i, j), lambda x, y: x @ y, lambda x, y: x @ y, 0),
    "f16": ((h, k), lambda x, y: x @ y, lambda x, y: f32(x) @ f32(y), 5e-2),
    "cast_a": ((i.astype(np.int8), b), lambda x, y: x.astype(dtypes.float32) @ y,
               lambda x, y: f32(x) @ y, 1e-4)}


@pytest.mark.parametrize("stage", [False, True])
@pytest.mark.parametrize("case", list(_vector_cases()))
@pytest.mark.parametrize("device", DEVICES)
def test_vector_column_tiles_match_numpy(device, case, stage, monkeypatch):
  """4 x 8 tiles: each row's 8 columns as two 4-lane vectors (vector accumulators, B loads and
  stores where consecutive, gathered where not: transposed B, ragged edges); staged, runs of 4
  elements per thread into workgroup memory (gated at ragged edges and reductions)."""
  dev = _on(device, monkeypatch, tile=(4, 8), stage=stage, tensor_cores=False)
  inputs, expr, ref, tol = _vector_cases()[case]
  if case == "f16" and device == "WEBGPU" and not kg.Device[dev].render_options().get("f16"):
    missing_tool("shader-f16 on the WebGPU adapter", "use an adapter with shader-f16 (lavapipe has it)")
  got = expr(*[Tensor(x).to(dev) for x in inputs]).numpy()
  want = ref(*inputs)
  if tol:
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)
  else:
    np.testing.assert_array_equal(got, want)
  tiled = [o for o in CHOSEN if o.tile == (4, 8)]
  assert tiled and all(bool(o.stage) == stage for o in tiled)


@pytest.mark.parametrize("case", list(_vector_cases()))
def test_vector_column_tiles_validate_and_assemble(case):
  """The same kernels as source: WGSL (f16 emulated on f32 where shader-f16 is off) through
  wgpu and Tint, PTX through ptxas, register tiles and staged."""
  inputs, expr, _, _ = _vector_cases()[case]
  t = expr(*[Tensor(x) for x in inputs])
  for stage in (False, True):
    for kernel in kg.compile(t, target="wgsl", tile=(4, 8), stage=stage):
      wgsl_validate(kernel.source)
      tint_validate(kernel.source)
    for kernel in kg.compile(t, target="ptx", arch="sm_80", tile=(4, 8), stage=stage,
                             tensor_cores=False):
      ptxas_check(kernel.source, "sm_80")


def test_tiles_are_vectors_of_columns_and_ptx_fuses_products():
  """A 512^3 matmul: 8 x 8 tiles as 16 accumulators of 4 lanes; WGSL loads B and stores the
  output as vec4 words; PTX stages it, loops over each step's elements (two loops), reads B from
  workgroup memory as v4 and multiplies-adds with fma; it stages A and B 4 elements at a time."""
  t = Tensor(_randn(512, 512)) @ Tensor(_randn(512, 512))
  item = _item(t)
  (wgsl,) = kg.compile(t, target="wgsl")
  assert "array<vec4<f32>>" in wgsl.source and "fma(" not in wgsl.source
  (ptx,) = kg.compile(t, target="ptx", arch="sm_80", tensor_cores=False)
  opts = opt.optimize(item, PTX)
  assert opts.stage and opts.tile == (8, 8) and opts.fma
  assert len(re.findall(r"^\$Lloop_\d+:$", ptx.source, re.M)) == 2
  assert "ld.shared.v4.f32" in ptx.source
  assert ptx.source.count("fma.rn.f32") == 64 and "mul.rn.f32" not in ptx.source
  assert ptx.source.count("st.global.v4.f32") == 16
  # staging: each thread loads 4 consecutive elements of A and of B per step as v4
  assert ptx.source.count("ld.global.v4.f32") == 2 and ptx.source.count("st.shared.v4.f32") == 2
  from kernelgen.lowering.lower import lower
  from kernelgen.uop.ops import toposort
  for target in ("wgsl", "ptx"):
    nodes = toposort([lower(item, opt.optimize(item, TARGETS[target]))[0]])
    accs = [u for u in nodes if u.op is Ops.DEFINE_ACC]
    assert len(accs) == 16 and all(u.dtype.count == 4 for u in accs)


def test_tile_epilogues_join_into_vector_ops():
  """(a @ b + bias).relu() in 4 x 8 tiles: each row's 4-column vectors get the bias as one
  vector load, the add and the max as vector ops, and one vector store."""
  from kernelgen.lowering.lower import lower
  from kernelgen.uop.ops import toposort
  t = (Tensor(_randn(24, 40)) @ Tensor(_randn(40, 32)) + Tensor(_randn(32))).relu()
  item = _item(t)
  nodes = toposort([lower(item, opt.optimize(item, WGSL, {"tile": (4, 8)}))[0]])
  stores = [u for u in nodes if u.op is Ops.STORE]
  assert len(stores) == 4 * 8 // 4
  assert all(u.src[2].op is Ops.MAX and u.src[2].dtype == dtypes.float32.vec(4) for u in stores)
  bias = [u for u in nodes if u.op is Ops.LOAD and u.src[0].arg == 3]
  assert len(bias) == 2 and all(u.dtype == dtypes.float32.vec(4) for u in bias)
