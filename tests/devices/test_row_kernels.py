"""Row kernels (graph/schedule.py ScheduleItem.rows, lowering/rows.py): softmax, log_softmax,
layernorm, rmsnorm, group/instance norm... as ONE kernel whose rows loop over their reductions,
then over their outputs; in both layouts (a thread per row, a workgroup of lanes per row).

Kernel counts and the fallbacks (rows longer than the limit, option row_kernels=False, other
shapes); values against numpy on PYTHON, PTXSIM and WEBGPU (wgpu + lavapipe) in each layout,
with ragged rows (not a multiple of lanes x vector), rows of -inf, inf and NaN, float16; the
default layout on both sides of its thresholds; WGSL validation and ptxas-clean PTX.
"""
from __future__ import annotations

import numpy as np
import pytest

import kernelgen as kg
from kernelgen.compiler import compile_item, target_of
from kernelgen.graph.schedule import ROW_MAX, schedule
from kernelgen.lowering import rows as rowmod
from kernelgen.lowering.optimize import optimize
from kernelgen.render.targets import TARGETS, WGSL
from tools import DEVICES, ptxas_check, wgsl_validate
from ops_util import on, softmax_edge_rows  # noqa: F401 (on: a fixture)



def np_softmax(x, axis=-1):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


def np_log(x):
  with np.errstate(divide="ignore"):       # log(0) = -inf, as ours
    return np.log(x)


def np_layernorm(x, w=1.0, b=0.0):
  c = x - x.mean(-1, keepdims=True)
  return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b


def np_rmsnorm(x):
  return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)


def np_group_norm(x, groups, eps=1e-5):
  flat = x.reshape(x.shape[0], groups, -1)
  c = flat - flat.mean(-1, keepdims=True)
  return (c / np.sqrt((c * c).mean(-1, keepdims=True) + eps)).reshape(x.shape)


def rmsnorm(t):
  return t * ((t * t).mean(-1, keepdim=True) + 1e-6).rsqrt()


# name -> (ours, numpy's, shape)
FUNCS = {
  "softmax": (lambda t: t.softmax(-1), np_softmax),
  "log_softmax": (lambda t: t.log_softmax(-1), lambda x: np_log(np_softmax(x))),
  "softmax_axis0": (lambda t: t.softmax(0), lambda x: np_softmax(x, 0)),
  "layernorm": (lambda t: t.layernorm(), np_layernorm),
  "layernorm_affine": (lambda t: t.layernorm(weight=kg.Tensor(np.linspace(0.5, 2, t.shape[-1],
                                                                          dtype=np.float32)),
                                             bias=kg.Tensor.full((t.shape[-1],), 0.25)),
                       lambda x: np_layernorm(x, np.linspace(0.5, 2, x.shape[-1]), 0.25)),
  "rmsnorm": (rmsnorm, np_rmsnorm),
}


def row_items(t: kg.Tensor, row_max: int = ROW_MAX):
  return schedule([t.node], None, row_max)


def data(shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- kernel counts ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(FUNCS))
def test_one_row_kernel(name):
  t = kg.Tensor(data((6, 40)))
  items = row_items(FUNCS[name][0](t))
  assert len(items) == 1 and items[0].rows == ((0,) if name == "softmax_axis0" else (1,))


def test_group_and_instance_norm_are_one_row_kernel():
  x = kg.Tensor(data((2, 6, 3, 3)))
  w = kg.Tensor(np.arange(6, dtype=np.float32))
  for out in (x.group_norm(3), x.group_norm(3, w, w), x.instance_norm(), x.instance_norm(w, w)):
    items = row_items(out)
    assert len(items) == 1 and items[0].rows


def test_fallback_to_split_kernels():
  """Off (row_kernels=False: row_max 0), rows longer than ROW_MAX, and reductions not shaped
  like the output keep today's kernels; a reduction's output (logsumexp) is no row kernel."""
  t = kg.Tensor(data((4, 16)))
  assert len(row_items(t.softmax(-1), 0)) == 3 and len(row_items(t.layernorm(), 0)) == 3
  assert len(row_items(t.softmax(-1), 16)) == 1 and len(row_items(t.softmax(-1), 15)) == 3
  long = kg.Tensor(np.zeros((2, ROW_MAX + 1), np.float32))
  assert [i.rows for i in row_items(long.softmax(-1))] == [(), (), ()]
  assert len(row_items(kg.Tensor(np.zeros((2, ROW_MAX), np.float32)).softmax(-1))) == 1
  m = t.max(-1, keepdim=True)
  (lse,) = row_items(m + (t - m).exp().sum(-1, keepdim=True).log())
  assert lse.rows == ()
  assert [i.rows for i in row_items(t - t.mean())] == [(), ()]      # a flattened reduction


def test_row_kernels_option_reaches_the_schedule():
  t = kg.Tensor(data((4, 16)))
  from kernelgen.compiler import compile_plan
  assert len(compile_plan([t.softmax(-1).node], "python")) == 1
  assert len(compile_plan([t.softmax(-1).node], "python", {"row_kernels": False})) == 3


# ---- values on every device, both layouts -----------------------------------------------------



# (row_lanes, group_chunk): a thread per row, 4 lanes (ragged rows of 37: 4 x 4 do not divide),
# 16 lanes each reading one run
LAYOUTS = [(1, False), (4, False), (16, True)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lanes,chunk", LAYOUTS)
def test_values_match_numpy(on, device, lanes, chunk):
  on(device, row_lanes=lanes, group_chunk=chunk)
  for shape in ((5, 37), (3, 64)):
    x = data(shape, seed=shape[1])
    for name, (ours, ref) in FUNCS.items():
      got = ours(kg.Tensor(x)).numpy()
      np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=1e-5, atol=2e-6,
                                 err_msg=f"{name} {shape}")


@pytest.mark.parametrize("device", DEVICES)
def test_group_norm_values(on, device):
  on(device, row_lanes=4)
  x = data((2, 6, 3, 5))
  np.testing.assert_allclose(kg.Tensor(x).group_norm(3).numpy(), np_group_norm(x, 3),
                             rtol=1e-5, atol=2e-6)
  np.testing.assert_allclose(kg.Tensor(x).instance_norm().numpy(), np_group_norm(x, 6),
                             rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lanes", [1, 8])
def test_inf_and_nan_rows_as_numpy(on, device, lanes):
  on(device, row_lanes=lanes)
  x = data((5, 24))
  x[0] = -np.inf                  # every exp(-inf - -inf): NaN, as numpy
  x[1, 3] = np.nan
  x[2, 5] = np.inf
  x[3, ::2] = -np.inf             # half the row masked out (attention's causal mask)
  with np.errstate(invalid="ignore"):
    for name in ("softmax", "log_softmax", "layernorm"):
      ours, ref = FUNCS[name]
      got, want = ours(kg.Tensor(x)).numpy(), ref(x.astype(np.float64))
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lanes", [1, 16])
def test_float16(on, device, lanes):
  on(device, row_lanes=lanes)
  x = data((4, 48)).astype(np.float16)
  got = kg.Tensor(x).softmax(-1).numpy()
  assert got.dtype == np.float16
  np.testing.assert_allclose(got.astype(np.float64), np_softmax(x.astype(np.float64)),
                             rtol=2e-3, atol=1e-4)
  got = kg.Tensor(x).layernorm().numpy()
  np.testing.assert_allclose(got.astype(np.float64), np_layernorm(x.astype(np.float64)),
                             rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_subgroups(on, device):
  """Lanes folding per subgroup (64 lanes; the interpreter's strided subgroup layout, lavapipe's
  own subgroups)."""
  rt = on(device, row_lanes=64, subgroups=True)
  x = data((3, 1000))
  (item,) = row_items(kg.Tensor(x).softmax(-1))
  assert optimize(item, target_of(rt), rt.render_options()).subgroups
  if device == "PYTHON":
    rt.subgroup_layout = "strided"
  try:
    np.testing.assert_allclose(kg.Tensor(x).softmax(-1).numpy(), np_softmax(x), rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(kg.Tensor(x).layernorm().numpy(), np_layernorm(x), rtol=1e-5,
                               atol=2e-6)
  finally:
    if device == "PYTHON":
      del rt.subgroup_layout


# ---- independent reductions share one loop -------------------------------------------------------

def ranges(out, target="wgsl", **options) -> int:
  """Loops in the lowered kernel of `out` (one kernel)."""
  from kernelgen.lowering.lower import lower
  from kernelgen.uop.ops import Ops, toposort
  (item,) = row_items(out)
  sink, _ = lower(item, optimize(item, TARGETS[target], options))
  return sum(1 for u in toposort([sink]) if u.op is Ops.RANGE)


def test_layernorm_reads_its_row_twice():
  """A thread per row takes layernorm's two sums (of x - x0 and its squares) in one loop, then
  stores in a second: in WGSL, both read vec4 words, the shift x0 one lane of a word."""
  t = kg.Tensor(data((64, 256)))
  assert ranges(t.layernorm(), row_lanes=1) == 2
  assert ranges(t.softmax(-1), row_lanes=1) == 3          # the sum reads the max: its own loop
  (item,) = row_items(t.layernorm())
  source = compile_item(item, "wgsl", {"row_lanes": 1}).source
  assert source.count("for (") == 2 and "b1_in1: array<vec4<f32>>" in source
  wgsl_validate(source)


def independent(t):
  return t - t.max(-1, keepdim=True) + t.min(-1, keepdim=True) + t.sum(-1, keepdim=True)


@pytest.mark.parametrize("device", DEVICES)
def test_independent_reductions_share_one_loop(on, device):
  """Reductions of one row that do not read each other run in one loop (a thread per row, and a
  thread per output of a plain reduction kernel): values against numpy, ragged and vector rows,
  and rows of ROW_MAX on WEBGPU (2 passes of 16384: inside lavapipe's loop budget)."""
  on(device, row_lanes=1)
  assert ranges(independent(kg.Tensor(data((4, 64)))), row_lanes=1) == 2
  assert ranges(kg.Tensor(data((4, 64))).sum(-1) * kg.Tensor(data((4, 64))).max(-1)) == 1
  shapes = [(5, 37), (3, 64)] + ([(2, ROW_MAX)] if device == "WEBGPU" else [])
  for shape in shapes:
    x = data(shape, seed=shape[1])
    got = independent(kg.Tensor(x)).numpy()
    want = x - x.max(-1, keepdims=True) + x.min(-1, keepdims=True) + \
      x.astype(np.float64).sum(-1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * shape[1] ** 0.5, err_msg=shape)
    t = kg.Tensor(x)
    stats = ((t * t).sum(-1) + t.max(-1) - (t - 1).abs().min(-1)).numpy()
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(stats, (x64 * x64).sum(-1) + x64.max(-1) - np.abs(x64 - 1).min(-1),
                               rtol=1e-5, atol=1e-4, err_msg=shape)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lanes", [1, 16])
def test_layernorm_statistics_are_exact_to_rounding(on, device, lanes):
  """The shifted statistics against numpy in float64: rows offset by 1e4 (where a mean taken
  first, or sum(x^2) - sum(x)^2 / n, loses digits), a far outlier as the shift x0, a constant row
  (0, exactly), a tiny scale."""
  on(device, row_lanes=lanes)
  x = data((5, 1024), seed=3)
  x[0] += 1e4
  x[1, 0] = 1000.0
  x[2] = 3.0
  x[3] *= 1e-3
  x[4, 1:] += 50.0
  got = kg.Tensor(x).layernorm().numpy()
  np.testing.assert_allclose(got, np_layernorm(x.astype(np.float64)), rtol=1e-5, atol=2e-6)
  assert not got[2].any()


# ---- the online softmax (option row_online) -------------------------------------------------------

def test_online_softmax_takes_max_and_sum_in_one_loop():
  t = kg.Tensor(data((64, 256)))
  for out in (t.softmax(-1), t.log_softmax(-1)):
    assert ranges(out, row_lanes=1, row_online=True) == 2
    assert ranges(out, row_lanes=1) == 3
  assert ranges(t.softmax(-1), row_lanes=16, row_online=True) > 2     # lanes: no online pair
  m = t.max(-1, keepdim=True)       # not softmax's pair: the sum's exp is not of x - max(x)
  assert ranges(t - m + (t * 2 - m).exp().sum(-1, keepdim=True), row_lanes=1, row_online=True) == 3
  (item,) = row_items(t.softmax(-1))
  wgsl_validate(compile_item(item, "wgsl", {"row_lanes": 1, "row_online": True}).source)


@pytest.mark.parametrize("device", DEVICES)
def test_online_softmax_values(on, device):
  """Against numpy: ragged rows and rows of one vector step (no loop), rows of -inf (NaN, as
  numpy), -inf first then finite (masked keys), NaN, +inf, a row whose max comes last, float16."""
  on(device, row_lanes=1, row_online=True)
  for shape in ((5, 37), (3, 64), (4, 4), (6, 1000)):
    x = data(shape, seed=shape[1])
    for name in ("softmax", "log_softmax", "layernorm"):
      ours, ref = FUNCS[name]
      np.testing.assert_allclose(ours(kg.Tensor(x)).numpy(), ref(x.astype(np.float64)),
                                 rtol=1e-5, atol=2e-6, err_msg=f"{name} {shape}")
  x = softmax_edge_rows(data((6, 40)))
  with np.errstate(invalid="ignore"):
    for name in ("softmax", "log_softmax"):
      ours, ref = FUNCS[name]
      np.testing.assert_allclose(ours(kg.Tensor(x)).numpy(), ref(x.astype(np.float64)),
                                 rtol=1e-5, atol=2e-6, err_msg=name)
  h = data((4, 48)).astype(np.float16)
  got = kg.Tensor(h).softmax(-1).numpy()
  assert got.dtype == np.float16
  np.testing.assert_allclose(got.astype(np.float64), np_softmax(h.astype(np.float64)),
                             rtol=2e-3, atol=1e-4)


def test_softmax_exp2_needs_no_overflow_or_nan_guard():
  """Softmax's exp2((x - max(x)) * c) is never above 0 (lowering/reductions.max_shifted): WGSL
  gives it one NaN select (kg_exp2_nonpositive) and none inside the online loop, whose sum is
  made NaN after the loop instead (EXP2_NAN_UNREAD); any other exp keeps kg_exp2."""
  t = kg.Tensor(data((64, 256)))
  (item,) = row_items(t.softmax(-1))
  online = compile_item(item, "wgsl", {"row_lanes": 1, "row_online": True}).source
  wgsl_validate(online)
  assert "kg_exp2(" not in online and "kg_exp2_nonpositive(v" in online   # the output loop
  assert online.count(" = exp2(") >= 2                 # the loop's terms and its rescale
  lanes = compile_item(item, "wgsl", {"row_lanes": 16}).source
  assert "kg_exp2(" not in lanes and " = exp2(" not in lanes and "kg_exp2_nonpositive(" in lanes
  m = t.max(-1, keepdim=True)
  others = [(m - t).exp(), (t * 2 - m).exp(), (t - kg.Tensor(data((64, 256), seed=1)).max(-1, keepdim=True)).exp(),
            ((t - m) * -1.0).exp(), t.exp() / t.exp().sum(-1, keepdim=True)]
  for out in others:
    for item in row_items(out):
      src = compile_item(item, "wgsl", {"row_lanes": 1, "row_online": True}).source
      assert "kg_exp2_nonpositive" not in src and " = exp2(" not in src, out


@pytest.mark.tools
def test_online_softmax_ptx_assembles():
  (item,) = row_items(kg.Tensor(data((8, 256))).softmax(-1))
  ptxas_check(compile_item(item, "ptx", {"row_lanes": 1, "row_online": True, "arch": "sm_90"})
              .source, "sm_90", "12")


# ---- the optimizer's layout choice --------------------------------------------------------------

def test_default_layout_thresholds():
  short = rowmod.ROW_THREAD_MAX
  many = rowmod.ROW_THREAD_MIN_ROWS
  cases = [((many, short), 1), ((many - 1, short), rowmod.ROW_LANES),
           ((many, short + 1), rowmod.ROW_LANES), ((4, 64), 8), ((4, 7), 1)]
  for shape, lanes in cases:
    (item,) = row_items(kg.Tensor(np.zeros(shape, np.float32)).softmax(-1))
    assert optimize(item, WGSL).row_lanes == lanes, shape
  (item,) = row_items(kg.Tensor(np.zeros((4, 64), np.float32)).softmax(-1))
  assert optimize(item, WGSL, {"row_lanes": 1}).row_lanes == 1
  assert optimize(item, WGSL, {"row_lanes": 32}).group == 32


# ---- rendered source ------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{"row_lanes": 1}, {"row_lanes": 16, "group_chunk": True}])
def test_wgsl_validates(options):
  for t in (kg.Tensor(data((8, 256))), kg.Tensor(data((5, 37)))):
    for out in (t.softmax(-1), t.layernorm()):
      (item,) = row_items(out)
      wgsl_validate(compile_item(item, "wgsl", options).source)


@pytest.mark.tools
@pytest.mark.parametrize("arch,which", [("sm_75", "12"), ("sm_90", "12"), ("sm_120", "13")])
def test_ptx_assembles(arch, which):
  t = kg.Tensor(data((8, 256)))
  for lanes in (1, 32):
    for out in (t.softmax(-1), t.layernorm()):
      (item,) = row_items(out)
      ptxas_check(compile_item(item, "ptx", {"row_lanes": lanes, "arch": arch}).source, arch,
                  which)


def test_search_tries_both_layouts_and_forces_its_choice_again():
  from kernelgen import search
  (item,) = row_items(kg.Tensor(np.zeros((64, 512), np.float32)).softmax(-1))
  found = [opts for opts, _ in search.candidates(item, WGSL, {})]
  assert {o.row_lanes for o in found} >= {1, 16, 64, 256}
  for opts in found:
    assert optimize(item, WGSL, search.forced_options(opts)) == opts


def test_a_thread_per_row_stays_under_llvmpipe_loop_budget():
  """A thread's loops run at most 65535 trips in all on lavapipe: 4 passes over rows of 16384
  (3 reductions, each reading the one before, + the outputs) take 2 lanes per row even when a
  thread per row is asked for; 3 independent reductions share one pass (2 in all), so rows of
  16384 (ROW_MAX) keep a thread per row."""
  def chained(n):
    t = kg.Tensor(np.zeros((2, n), np.float32))
    a = (t - t.max(-1, keepdim=True)).sum(-1, keepdim=True)
    (it,) = row_items(t - (t - a).min(-1, keepdim=True))
    return it

  def independent(n):
    t = kg.Tensor(np.zeros((2, n), np.float32))
    (it,) = row_items(t - t.max(-1, keepdim=True) + t.min(-1, keepdim=True)
                      + t.sum(-1, keepdim=True))
    return it
  assert optimize(chained(16384), WGSL, {"row_lanes": 1}).row_lanes == 2
  assert optimize(chained(16383), WGSL, {"row_lanes": 1}).row_lanes == 1
  assert optimize(independent(16384), WGSL, {"row_lanes": 1}).row_lanes == 1


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
@pytest.mark.parametrize("lanes", [1, 2])
def test_rows_along_inner_axes_with_vectors(on, device, lanes):
  """Rows along a leading or middle axis (not consecutive in memory) with 4-wide vectors
  asked for: only rows along the trailing axes are read and stored as vectors."""
  on(device, row_lanes=lanes, group_vec=4)
  x = data((8, 8, 4))
  for axis in (0, 1, 2):
    np.testing.assert_allclose(kg.Tensor(x).softmax(axis).numpy(), np_softmax(x, axis),
                               rtol=1e-5, atol=1e-7, err_msg=f"axis {axis}")


def test_contiguous_output_is_a_row_kernel():
  t = kg.Tensor(data((6, 40)))
  (item,) = row_items(t.softmax(-1).contiguous())
  assert item.rows == (1,)
  (item,) = row_items(t.layernorm().reshape(240))
  assert item.rows == (1,)
  x = data((6, 40))
  np.testing.assert_allclose(kg.Tensor(x).softmax(-1).contiguous().numpy(), np_softmax(x),
                             rtol=1e-5, atol=1e-7)
