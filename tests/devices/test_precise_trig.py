"""float32 sin and cos from adds, multiplies and bit operations (rules/transcendental.py sin_f32,
cos_f32: the same reduction, cos with the quadrant shifted by one), the default for WGSL and PTX
(fast_math=True keeps the native instruction), vs numpy's float64 sin;
and log2_f32, the default for WGSL.

The rewrite is run three ways: by the PYTHON interpreter on the rewritten graph (exact IEEE float32
per op), on WEBGPU (wgpu/lavapipe) and on PTXSIM. Measured max error, in float32 ulps of the
float64 result (4000-value sets; interpreter / WEBGPU, PTXSIM as the interpreter): tiny
(1e-38..1e-3) 0.48, [-pi, pi] 1.44, |x| < 1e3 1.93, |x| < 1.31e5 2.02, float32 neighbours of
k pi/2 (k < 80000) 1.82, 2**17..2**24 2.50 / 2.05, 2**24..2**128 1.92 / 2.12, the hardest
arguments (closest to multiples of pi, sin ~ 1e-8) 0.85. Below 2**17 the reduction is Cody-Waite,
above it Payne-Hanek. NaN and +-inf give NaN, +-0.0 and subnormals give themselves.
cos, measured max ulp (interpreter / WEBGPU / PTXSIM): tiny 0.50 / 0.49 / 0.45, [-pi, pi]
1.22 / 1.28 / 1.35, |x| < 1e3 1.76 / 1.64 / 1.19, |x| < 1.31e5 1.55 / 2.39 / 1.48, neighbours of
k pi/2 1.81 / 1.80 / 1.55, 2**17..2**24 1.81 / 2.00 / 1.47, 2**24..2**128 1.61 / 1.89 / 1.44,
hardest 0.24; NaN and +-inf give NaN, cos(+-0) = 1. (cos was sin(pi/2 - x), with pi/2 - x
rounded to float32 first: ulp(x)/2 absolute off, hundreds of ulp at x ~ 1e4.)
log2, measured max ulp (interpreter / WEBGPU): [0.99, 1.01] 3.01 / 3.03, [0.5, 2] 3.45 / 2.91,
normal 2.29 / 2.10, subnormal 0.5; +-0 -> -inf, inf -> inf, negative, -inf and NaN -> NaN.
"""
from __future__ import annotations

import numpy as np
import pytest

from kernelgen import Tensor, compiler
from kernelgen.dtype import dtypes
from kernelgen.uop.ops import Ops
from kernelgen.uop.pattern import PatternMatcher, UPat, graph_rewrite
from kernelgen.rules.transcendental import FLOAT32, SIN32_EXACT_LIMIT
from kernelgen.graph.schedule import schedule
from kernelgen.render.target import Target
from tools import ptxas_check, tint_validate, wgsl_validate

RNG = np.random.default_rng(1)


def f32(values) -> np.ndarray:
  return np.asarray(values, dtype=np.float32)


def _near_half_pi(count: int) -> np.ndarray:
  k = np.concatenate([np.arange(1, count // 2), RNG.integers(1, 80000, count // 2)])
  near = f32(k * np.pi / 2)
  return np.concatenate([near, np.nextafter(near, f32(np.inf)), np.nextafter(near, f32(-np.inf))])


# float32 values closest to multiples of pi (found from 1/pi's continued fractions per exponent):
# sin is about 1e-8 there, so the reduction must keep ~30 more bits than the result has
HARDEST = f32([1.5458357838905804e+29, 43998769152.0, 3.0916715677811608e+29, 87997538304.0,
               505.7964172363281, 9.276366765566932e+25, 3045577981952.0, 1011.5928344726562,
               9.42477798461914, 105032.8671875, 2023.1856689453125, 18.84955596923828,
               3.4028235e38, 131072.0, np.nextafter(f32(131072.0), f32(0))])


def ranges(count: int) -> dict[str, np.ndarray]:
  """Named float32 inputs (each with its negatives) and the max ulp error allowed there."""
  out = {
    "tiny": (f32(np.exp(RNG.uniform(np.log(1e-38), np.log(1e-3), count))), 1),
    "pi": (f32(RNG.uniform(-np.pi, np.pi, count)), 2),
    "1e3": (f32(RNG.uniform(-1e3, 1e3, count)), 3),
    "1e5": (f32(RNG.uniform(-1.31e5, 1.31e5, count)), 3),
    "k pi/2": (_near_half_pi(count), 2),
    "2**17..2**24": (f32(np.exp2(RNG.uniform(17, 24, count))), 3),
    "2**24..2**128": (f32(np.exp2(RNG.uniform(24, 128, count))), 3),
    "hardest": (HARDEST, 1),
  }
  return {name: (np.concatenate([x, -x]), bound) for name, (x, bound) in out.items()}


SPECIAL = f32([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-45, 1e-40, -3e-39, 1.1754944e-38])


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
  """|got - want| in float32 ulps of want (want in float64)."""
  spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
  return np.abs(got.astype(np.float64) - want) / spacing


def check_special(got: np.ndarray) -> None:
  assert np.isnan(got[2:5]).all(), got                       # NaN, +-inf -> NaN
  assert got[:2].tolist() == [0.0, 0.0] and np.signbit(got[:2]).tolist() == [False, True]
  np.testing.assert_array_equal(got[5:], SPECIAL[5:])       # sin(x) = x below 2**-12


@pytest.fixture
def python_rewrite(monkeypatch):
  """The PYTHON target with sin_f32 as its legalize rule: the interpreter runs the rewrite."""
  rewrites = []

  def rewrite(x):
    rewrites.append(x)
    return FLOAT32[x.op](x.src[0])
  rule = PatternMatcher([(UPat((Ops.SIN, Ops.COS, Ops.LOG2), name="x"), rewrite)])
  real = Target.legalize

  def legalize(target, sink, options):
    return graph_rewrite(sink, rule) if target.name == "python" else real(target, sink, options)
  monkeypatch.setattr(Target, "legalize", legalize)
  yield
  assert rewrites, "the interpreter ran the rewritten graph"


def check_cos_special(got: np.ndarray) -> None:
  assert np.isnan(got[2:5]).all(), got                       # NaN, +-inf -> NaN
  np.testing.assert_array_equal(got[[0, 1, *range(5, len(SPECIAL))]], 1.0)   # cos(+-0, tiny) = 1


CHECK_SPECIAL = {"sin": check_special, "cos": check_cos_special}


def sin_on(device: str, x: np.ndarray, op: str = "sin") -> np.ndarray:
  return getattr(Tensor(x, device=device), op)().numpy()


def reference(x: np.ndarray, op: str) -> np.ndarray:
  return getattr(np, op)(x.astype(np.float64))


@pytest.mark.parametrize("op", ["sin", "cos"])
@pytest.mark.parametrize("name", list(ranges(1)))
def test_rewrite_in_the_interpreter_is_within_a_few_ulp(python_rewrite, name, op):
  x, bound = ranges(400)[name]
  assert ulps(sin_on("PYTHON", x, op), reference(x, op)).max() <= bound


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_rewrite_in_the_interpreter_keeps_special_values(python_rewrite, op):
  with np.errstate(invalid="ignore"):
    CHECK_SPECIAL[op](sin_on("PYTHON", SPECIAL, op))


@pytest.mark.parametrize("op", ["sin", "cos"])
@pytest.mark.parametrize("device", ["WEBGPU", "PTXSIM"])
def test_sin_on_device_is_within_a_few_ulp_over_each_range(device, op):
  count = 4000 if device == "WEBGPU" else 300
  for name, (x, bound) in ranges(count).items():
    error = ulps(sin_on(device, x, op), reference(x, op)).max()
    assert error <= bound, (name, error)
  CHECK_SPECIAL[op](sin_on(device, SPECIAL, op))


@pytest.mark.parametrize("device", ["PYTHON", "WEBGPU"])
def test_cos_of_large_x_is_within_a_few_ulp_where_sin_of_half_pi_minus_x_is_not(device):
  # the old formula, sin(pi/2 - x), rounds pi/2 - x to float32 first: ulp(x)/2 absolute off
  x = f32(np.concatenate([RNG.uniform(1e3, 1.31e5, 2000), np.exp2(RNG.uniform(17, 40, 500))]))
  x = np.concatenate([x, -x])
  want = np.cos(x.astype(np.float64))
  assert ulps(Tensor(x, device=device).cos().numpy(), want).max() <= 3
  old = (np.pi / 2 - Tensor(x, device=device)).sin().numpy()
  assert ulps(old, want).max() > 100


@pytest.mark.parametrize("device", ["WEBGPU", "PTXSIM"])
def test_cos_and_tan_match_the_interpreter(device):
  # tan = sin / cos: the same float32 formulas as PYTHON computes
  x = f32(RNG.uniform(-100, 100, 500))
  for op in ("cos", "tan"):
    got = getattr(Tensor(x, device=device), op)().numpy()
    want = getattr(Tensor(x, device="PYTHON"), op)().numpy()
    np.testing.assert_allclose(got, want, rtol=4e-6 if op == "cos" else 2e-5, atol=1e-7)


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_float16_sin_is_the_float32_result_rounded(op):
  x = np.concatenate([f32(RNG.uniform(-1000, 1000, 500)), f32(RNG.uniform(-4, 4, 500))])
  got = sin_on("WEBGPU", x.astype(np.float16), op)
  want = reference(x.astype(np.float16), op).astype(np.float16)
  assert got.dtype == np.float16
  # at most one float16 ulp (the float32 result is rounded a second time)
  assert (np.abs(got.astype(np.float64) - want) <= np.spacing(np.abs(want))).all()


def _compiled(target: str, options: dict, dtype=dtypes.float32, op: str = "sin"):
  x = Tensor(f32(RNG.uniform(-10, 10, 300)), device="PYTHON")
  (item,) = schedule([getattr(x.cast(dtype), op)().node])
  return compiler.compile_item(item, target, options)


OPS = {"sin": Ops.SIN, "cos": Ops.COS}


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_no_native_sin_is_left(op):
  uops = _compiled("wgsl", {}, op=op).kernel.uops
  assert not any(u.op in (Ops.SIN, Ops.COS) for u in uops)
  assert any(u.op is Ops.CONST and u.arg == SIN32_EXACT_LIMIT for u in uops)


@pytest.mark.parametrize("op", ["sin", "cos"])
@pytest.mark.parametrize("target", ["wgsl", "ptx"])
def test_fast_math_keeps_the_builtin(target, op):
  compiled = _compiled(target, {"fast_math": True}, op=op)
  uops = compiled.kernel.uops
  assert [u.arg for u in uops if u.op in (Ops.SIN, Ops.COS)] == [None]
  assert [u.op for u in uops if u.op in (Ops.SIN, Ops.COS)] == [OPS[op]]
  assert not any(u.op is Ops.TRUNC for u in uops)
  source = compiled.launch.source if target == "wgsl" else compiled.source
  assert (f"{op}(" if target == "wgsl" else f"{op}.approx.f32") in source


@pytest.mark.parametrize("op", ["sin", "cos"])
@pytest.mark.parametrize("options", [{}, {"fast_math": True}, {"f16": True}])
def test_wgsl_with_precise_sin_is_valid_for_wgpu_and_tint(options, op):
  dtype = dtypes.float16 if options.get("f16") else dtypes.float32
  compiled = _compiled("wgsl", options, dtype, op)
  wgsl_validate(compiled.launch.source, compiled.launch.entry_point)
  tint_validate(compiled.launch.source, compiled.launch.entry_point)
  assert ("trunc(" in compiled.launch.source) != bool(options.get("fast_math"))


@pytest.mark.parametrize("op", ["sin", "cos"])
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_ptx_with_precise_sin_assembles(arch, op):
  for dtype in (dtypes.float32, dtypes.float16, dtypes.float64):
    compiled = _compiled("ptx", {"arch": arch}, dtype, op)
    assert "cvt.rzi.f32.f32" in compiled.source or dtype == dtypes.float64
    ptxas_check(compiled.source, arch)


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_ptx_fast_math_cos_assembles(arch):
  for dtype in (dtypes.float32, dtypes.float16):
    compiled = _compiled("ptx", {"arch": arch, "fast_math": True}, dtype, "cos")
    assert "cos.approx.f32" in compiled.source
    ptxas_check(compiled.source, arch)


# ---- log2 (WGSL only: its builtin promises 2**-21 absolute on [0.5, 2], so log(x) near 1 is off
# by up to 2**-21 / |log(x)| relative; exp2 is left native: its bound, 3 + 2|x| ulp, is relative)

def log_ranges(count: int) -> dict[str, tuple[np.ndarray, float]]:
  return {"near 1": (f32(RNG.uniform(0.99, 1.01, count)), 4),
          "[0.5, 2]": (f32(RNG.uniform(0.5, 2, count)), 4),
          "normal": (f32(np.exp2(RNG.uniform(-126, 128, count))), 3),
          "subnormal": (f32(np.exp2(RNG.uniform(-149, -126, count))), 1)}


LOG_SPECIAL = f32([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1.0, 2.0, 0.5, 1e-45])
LOG_WANT = [-np.inf, -np.inf, np.inf, np.nan, np.nan, np.nan, 0.0, 1.0, -1.0, -149.0]


def check_log(device: str, count: int) -> None:
  for name, (x, bound) in log_ranges(count).items():
    got = Tensor(x, device=device).log2().numpy()
    error = ulps(got, np.log2(x.astype(np.float64))).max()
    assert error <= bound, (name, error)
  got = Tensor(LOG_SPECIAL, device=device).log2().numpy()
  np.testing.assert_array_equal(got, f32(LOG_WANT))


def test_log2_rewrite_in_the_interpreter_is_within_a_few_ulp(python_rewrite):
  check_log("PYTHON", 300)


def test_log2_on_webgpu_is_within_a_few_ulp():
  check_log("WEBGPU", 4000)


def test_log2_fast_math_keeps_the_builtin():
  x = Tensor(f32([0.5, 1.5]), device="PYTHON")
  (item,) = schedule([x.log2().node])
  for options, count in (({}, 0), ({"fast_math": True}, 1)):
    compiled = compiler.compile_item(item, "wgsl", options)
    assert sum(u.op is Ops.LOG2 for u in compiled.kernel.uops) == count
    assert ("log2(" in compiled.launch.source) == bool(count)
    wgsl_validate(compiled.launch.source, compiled.launch.entry_point)
    tint_validate(compiled.launch.source, compiled.launch.entry_point)
