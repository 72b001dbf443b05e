"""Device WEBGPU (runtime/webgpu_native.py): hand-built kernels rendered to WGSL, run on wgpu-py
(Mesa lavapipe here) and compared with numpy, one group per RENDERER-SPEC row W1-W14."""
from __future__ import annotations

import functools
import math

import pytest

from kernelgen.dtype import dtypes
from kernelgen.errors import CompileError, UnsupportedError
from kernelgen.uop.ops import Ops, UOp
from kernelgen.uop.program import CompiledKernel, Launch
from test_render_wgsl import (I32, build, const, elementwise, flat_index, isnan, param,
                              reverse_in_workgroup, row_sum, special)
from tools import missing_tool

np = pytest.importorskip("numpy")
F32, F16 = dtypes.float32, dtypes.float16
SENTINEL = 0xAB


@pytest.fixture(scope="module")
def rt():
  try:
    from kernelgen.runtime.webgpu_native import WebGPURuntime
    return WebGPURuntime()
  except Exception as error:  # noqa: BLE001 - no wgpu or no adapter: skip here, fail in CI
    missing_tool("device WEBGPU", f"pip install wgpu; apt-get install mesa-vulkan-drivers ({error})")


def run(rt, compiled: CompiledKernel, inputs: dict, var_values=None) -> dict:
  """Run with numpy `inputs` by slot; every other buffer starts as SENTINEL bytes. Returns every
  buffer's contents as numpy arrays by slot."""
  handles = []
  for b in compiled.launch.bindings:
    dtype = np.dtype(b.dtype)
    data = inputs.get(b.slot)
    raw = (np.asarray(data, dtype).tobytes() if data is not None
           else bytes([SENTINEL]) * (b.size * dtype.itemsize))
    handle = rt.alloc(len(raw))
    rt.copyin(handle, raw)
    handles.append(handle)
  rt.run(compiled, handles, var_values or {})
  return {b.slot: np.frombuffer(rt.copyout(h), np.dtype(b.dtype))
          for b, h in zip(compiled.launch.bindings, handles)}


def run_elementwise(rt, fn, arrays, out_dtype, local=64, **options):
  in_dtypes = [getattr(dtypes, a.dtype.name) for a in arrays]
  compiled = build(elementwise(fn, in_dtypes, out_dtype, len(arrays[0]), local), **options)
  return run(rt, compiled, {k + 1: a for k, a in enumerate(arrays)})[0]


def rand(dtype: str, n: int, seed: int = 0, lo=None, hi=None):
  rng = np.random.default_rng(seed)
  info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
  if info is not None:
    return rng.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1,
                        n, dtype=dtype)
  if dtype == "bool":
    return rng.integers(0, 2, n).astype(bool)
  return rng.uniform(-10 if lo is None else lo, 10 if hi is None else hi, n).astype(dtype)


def c_div(a, b):
  q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
  return (q * np.sign(a.astype(np.int64)) * np.sign(b.astype(np.int64))).astype(a.dtype)


# ---- W1: 32-bit arithmetic, comparisons, bitwise ops, shifts, select ---------------------------

BINARY = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum,
          Ops.MIN: np.minimum}
BITWISE = {Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor}
COMPARE = {Ops.CMPLT: np.less, Ops.CMPEQ: np.equal, Ops.CMPNE: np.not_equal}


@pytest.mark.parametrize("name", ["float32", "int32", "uint32"])
def test_w1_arithmetic_and_bitwise_match_numpy(rt, name):
  dtype = getattr(dtypes, name)
  a, b = rand(name, 300, 1), rand(name, 300, 2)
  b[::7] = a[::7]
  ops = {**BINARY, **({} if dtype.is_float() else BITWISE)}
  with np.errstate(all="ignore"):
    for op, ref in ops.items():
      got = run_elementwise(rt, lambda x, y, op=op: x.alu(op, y), [a, b], dtype)
      np.testing.assert_array_equal(got, ref(a, b), err_msg=op.name)


@pytest.mark.parametrize("name", ["float32", "int32", "uint32"])
def test_w1_comparisons_and_where_match_numpy(rt, name):
  a, b = rand(name, 300, 3), rand(name, 300, 4)
  b[::5] = a[::5]
  for op, ref in COMPARE.items():
    got = run_elementwise(rt, lambda x, y, op=op: x.alu(op, y), [a, b], dtypes.bool)
    np.testing.assert_array_equal(got, ref(a, b), err_msg=op.name)
  got = run_elementwise(rt, lambda x, y: x.lt(y).where(x, y), [a, b], getattr(dtypes, name))
  np.testing.assert_array_equal(got, np.where(a < b, a, b))


@pytest.mark.parametrize("name", ["int32", "uint32"])
def test_w1_division_remainder_and_shifts_match_c(rt, name):
  a, b = rand(name, 300, 5), rand(name, 300, 6, lo=1, hi=1000)
  got = run_elementwise(rt, lambda x, y: x // y, [a, b], getattr(dtypes, name))
  np.testing.assert_array_equal(got, c_div(a, b))
  got = run_elementwise(rt, lambda x, y: x % y, [a, b], getattr(dtypes, name))
  np.testing.assert_array_equal(got, (a.astype(np.int64) - b * c_div(a, b).astype(np.int64))
                                .astype(name))
  shift = rand(name, 300, 7, lo=0, hi=31)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x, s: x << s, [a, shift],
                                                getattr(dtypes, name)), a << shift)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x, s: x >> s, [a, shift],
                                                getattr(dtypes, name)), a >> shift)


def test_w1_unary_neg_and_not(rt):
  a = rand("int32", 100, 8)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x: -x, [a], I32), -a)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x: ~x, [a], I32), ~a)
  u = rand("uint32", 100, 9)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x: -x, [u], dtypes.uint32), -u)


# ---- W2: bool tensors -----------------------------------------------------------------------------

def test_w2_bool_tensors_stored_as_bytes(rt):
  a, b = rand("bool", 1001, 10), rand("bool", 1001, 11)
  for op, ref in {Ops.AND: np.logical_and, Ops.OR: np.logical_or, Ops.XOR: np.logical_xor,
                  Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal, Ops.CMPLT: np.less,
                  Ops.MAX: np.maximum}.items():
    got = run_elementwise(rt, lambda x, y, op=op: x.alu(op, y), [a, b], dtypes.bool)
    np.testing.assert_array_equal(got, ref(a, b), err_msg=op.name)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x: ~x, [a], dtypes.bool), ~a)


def test_w2_bool_casts(rt):
  x = rand("float32", 500, 12)
  x[::3] = 0
  got = run_elementwise(rt, lambda v: v.cast(dtypes.bool), [x], dtypes.bool)
  np.testing.assert_array_equal(got, x.astype(bool))
  flags = rand("bool", 500, 13)
  for name in ("float32", "int8", "uint16", "int32"):
    got = run_elementwise(rt, lambda v, name=name: v.cast(getattr(dtypes, name)), [flags],
                          getattr(dtypes, name))
    np.testing.assert_array_equal(got, flags.astype(name))


# ---- W3: 8- and 16-bit integers, concurrent neighbouring writes --------------------------------

NARROW = ["int8", "uint8", "int16", "uint16"]


@pytest.mark.parametrize("name", NARROW)
def test_w3_narrow_int_arithmetic_wraps_like_numpy(rt, name):
  dtype = getattr(dtypes, name)
  a, b = rand(name, 1001, 14), rand(name, 1001, 15)
  for op, ref in {**BINARY, **BITWISE}.items():
    got = run_elementwise(rt, lambda x, y, op=op: x.alu(op, y), [a, b], dtype)
    np.testing.assert_array_equal(got, ref(a, b), err_msg=op.name)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x: -x, [a], dtype), -a)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x: ~x, [a], dtype), ~a)
  nonzero = np.where(b == 0, 1, b).astype(name)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x, y: x // y, [a, nonzero], dtype),
                                c_div(a, nonzero))
  shift = rand(name, 1001, 16, lo=0, hi=dtype.bits - 1)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x, s: x << s, [a, shift], dtype),
                                a << shift)
  np.testing.assert_array_equal(run_elementwise(rt, lambda x, s: x >> s, [a, shift], dtype),
                                a >> shift)


@pytest.mark.parametrize("name", NARROW)
def test_w3_narrow_int_casts(rt, name):
  dtype = getattr(dtypes, name)
  wide = rand("int32", 1001, 17)
  np.testing.assert_array_equal(run_elementwise(rt, lambda v: v.cast(dtype), [wide], dtype),
                                wide.astype(name))
  a = rand(name, 1001, 18)
  for other in NARROW + ["int32", "uint32", "float32"]:
    got = run_elementwise(rt, lambda v, o=other: v.cast(getattr(dtypes, o)), [a],
                          getattr(dtypes, other))
    np.testing.assert_array_equal(got, a.astype(other), err_msg=other)
  info = np.iinfo(name)
  floats = rand("float32", 1001, 19, lo=info.min - 0.99, hi=info.max + 0.99)
  got = run_elementwise(rt, lambda v: v.cast(dtype), [floats], dtype)
  np.testing.assert_array_equal(got, np.trunc(floats).astype(name))


@pytest.mark.parametrize("name", NARROW + ["bool"])
def test_w3_neighbouring_threads_write_bytes_of_one_word(rt, name):
  # every thread writes one element; 4 (or 2) threads share each 32-bit word
  a = rand(name, 4099, 20)
  got = run_elementwise(rt, lambda x: x, [a], getattr(dtypes, name), local=256)
  np.testing.assert_array_equal(got, a)


@pytest.mark.parametrize("name", ["int8", "uint16", "bool"])
def test_w3_gated_store_keeps_its_gate(rt, name):
  n = 203
  dtype = getattr(dtypes, name)
  idx, in_bounds, _ = flat_index(n)
  x, out = param(1, dtype, n), param(0, dtype, n)
  gate = in_bounds & (idx % 3).eq(0)
  compiled = build(UOp(Ops.SINK, None, (out.store(idx, x.load(idx, in_bounds, 0), gate),)))
  a = rand(name, n, 21)
  got = run(rt, compiled, {1: a})[0]
  sentinel = np.frombuffer(bytes([SENTINEL]) * n * a.itemsize, name)
  np.testing.assert_array_equal(got, np.where(np.arange(n) % 3 == 0, a, sentinel))


# ---- W4: float16 on both paths ------------------------------------------------------------------

@pytest.mark.parametrize("native", [True, False], ids=["shader-f16", "packed"])
def test_w4_f16_arithmetic_matches_numpy(rt, native):
  if native and not rt.render_options()["f16"]:
    missing_tool("shader-f16 on the WebGPU adapter", "use an adapter with shader-f16 (lavapipe has it)")
  a, b = rand("float16", 1001, 22), rand("float16", 1001, 23, lo=0.5, hi=4)
  for op, ref in {**BINARY, Ops.FDIV: np.divide}.items():
    got = run_elementwise(rt, lambda x, y, op=op: x.alu(op, y), [a, b], F16, f16=native)
    np.testing.assert_array_equal(got, ref(a, b), err_msg=op.name)
  got = run_elementwise(rt, lambda x, y: x.lt(y), [a, b], dtypes.bool, f16=native)
  np.testing.assert_array_equal(got, a < b)
  got = run_elementwise(rt, lambda x: x.cast(F32), [a], F32, f16=native)
  np.testing.assert_array_equal(got, a.astype(np.float32))
  wide = rand("float32", 1001, 24, lo=-60000, hi=60000)
  got = run_elementwise(rt, lambda x: x.cast(F16), [wide], F16, f16=native)
  np.testing.assert_array_equal(got, wide.astype(np.float16))
  got = run_elementwise(rt, lambda x: UOp(Ops.SQRT, F16, (x,)), [b], F16, f16=native)
  np.testing.assert_array_equal(got, np.sqrt(b))


# ---- W6: NaN and inf ----------------------------------------------------------------------------

SPECIALS = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 3.0e38], np.float32)


@pytest.mark.parametrize("native", [None, True, False], ids=["f32", "f16-native", "f16-packed"])
def test_w6_isnan_max_min_and_comparisons_with_nan(rt, native):
  name = "float32" if native is None else "float16"
  dtype, options = getattr(dtypes, name), ({} if native is None else {"f16": native})
  with np.errstate(all="ignore"):
    a = np.repeat(SPECIALS, len(SPECIALS)).astype(name)
    b = np.tile(SPECIALS, len(SPECIALS)).astype(name)
    np.testing.assert_array_equal(run_elementwise(rt, isnan, [a], dtypes.bool, **options),
                                  np.isnan(a))
    for op, ref in {Ops.MAX: np.maximum, Ops.MIN: np.minimum, Ops.ADD: np.add,
                    Ops.MUL: np.multiply}.items():
      got = run_elementwise(rt, lambda x, y, op=op: x.alu(op, y), [a, b], dtype, **options)
      np.testing.assert_array_equal(got, ref(a, b), err_msg=op.name)
    for op, ref in COMPARE.items():
      got = run_elementwise(rt, lambda x, y, op=op: x.alu(op, y), [a, b], dtypes.bool, **options)
      np.testing.assert_array_equal(got, ref(a, b), err_msg=op.name)


def test_w6_nan_and_inf_constants(rt):
  a = rand("float32", 64, 25)
  for value in (math.inf, -math.inf, math.nan):
    got = run_elementwise(rt, lambda x, v=value: x * 0 + const(F32, v), [a], F32)
    np.testing.assert_array_equal(got, a * 0 + np.float32(value))


def test_w6_division_by_constant_zero_gives_inf_and_nan(rt):
  x = np.array([1.0, -1.0, 0.0, np.nan, np.inf], np.float32)
  with np.errstate(all="ignore"):
    for zero in (0.0, -0.0):
      got = run_elementwise(rt, lambda v, z=zero: v / const(F32, z), [x], F32)
      np.testing.assert_array_equal(got, x / np.float32(zero))


# x - x, x + -x, x * 0 and fma(x, 0, y): Mesa folds them to 0 (IEEE: NaN for x inf or NaN), and
# a division by that known 0 left the output unwritten
ZERO_RESULTS = {
  "x/(x-x)": (lambda v: v / (v - v), lambda x: x / (x - x)),
  "x-x": (lambda v: v - v, lambda x: x - x),
  "x+-x": (lambda v: v + (-v), lambda x: x + -x),
  "-x+x": (lambda v: (-v) + v, lambda x: -x + x),
  "x*0": (lambda v: v * 0.0, lambda x: x * x.dtype.type(0.0)),
  "-0*x": (lambda v: v.const_like(-0.0) * v, lambda x: x * x.dtype.type(-0.0)),
  "x/(x*0)": (lambda v: v / (v * 0.0), lambda x: x / (x * x.dtype.type(0.0))),
  "(x-x)/(x-x)": (lambda v: (v - v) / (v - v), lambda x: (x - x) / (x - x)),
  "1/(x-x)": (lambda v: UOp(Ops.RECIP, v.dtype, (v - v,)), lambda x: 1 / (x - x)),
  "x*(x-x)": (lambda v: v * (v - v), lambda x: x * (x - x)),
  "fma(x,0,2)": (lambda v: UOp(Ops.MULACC, v.dtype, (v, v.const_like(0.0), v.const_like(2.0))),
                 lambda x: x * x.dtype.type(0.0) + x.dtype.type(2.0)),
}


def assert_same_floats(got, want, msg=""):
  """Equal values, NaN for NaN, and zeros with their sign."""
  np.testing.assert_array_equal(got, want, err_msg=msg)
  zeros = want == 0
  np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=msg)


@pytest.mark.parametrize("native", [None, True, False], ids=["f32", "f16-native", "f16-packed"])
def test_w6_zero_results_keep_inf_and_nan_regression_x_over_x_minus_x(rt, native):
  """Regression: b / (b - b) gave 0 on lavapipe (an unwritten output here), numpy inf."""
  dt, name = (F32, "float32") if native is None else (F16, "float16")
  options = {} if native is None else {"f16": native}
  if native and not rt.render_options()["f16"]:
    missing_tool("shader-f16 on the WebGPU adapter", "use an adapter with shader-f16 (lavapipe has it)")
  with np.errstate(all="ignore"):
    x = SPECIALS.astype(name)
    for case, (fn, ref) in ZERO_RESULTS.items():
      assert_same_floats(run_elementwise(rt, fn, [x], dt, **options), ref(x), case)


@pytest.mark.parametrize("native", [None, True, False], ids=["f32", "f16-native", "f16-packed"])
def test_w6_nan_cast_to_bool_is_true_regression_fuzz_log2_cast_bool(rt, native):
  """Regression (fuzz: log2 of negative float16 cast to bool): NaN gave False on lavapipe (it
  renders x != 0.0 as ordered), numpy True."""
  name = "float32" if native is None else "float16"
  dt, options = getattr(dtypes, name), ({} if native is None else {"f16": native})
  if native and not rt.render_options()["f16"]:
    missing_tool("shader-f16 on the WebGPU adapter", "use an adapter with shader-f16 (lavapipe has it)")
  with np.errstate(all="ignore"):
    x = SPECIALS.astype(name)
    got = run_elementwise(rt, lambda v: v.cast(dtypes.bool), [x], dtypes.bool, **options)
    np.testing.assert_array_equal(got, x.astype(bool))
    got = run_elementwise(rt, lambda v: UOp(Ops.LOG2, dt, (v,)).cast(dtypes.bool), [x],
                          dtypes.bool, **options)
    np.testing.assert_array_equal(got, np.log2(x).astype(bool))
  v4 = F32.vec(4)
  got = run_elementwise(rt, lambda v: UOp(Ops.VECTORIZE, v4, (v, -v, v, v)).cast(dtypes.bool.vec(4)
                        ).gep(1), [SPECIALS], dtypes.bool)
  np.testing.assert_array_equal(got, SPECIALS.astype(bool))


def test_w6_division_by_a_zero_the_compiler_finds_by_reassociation(rt):
  """Mesa reassociates (x + 1) - x - 1 to 0 (exact for these x), then left x / 0 unwritten; the
  divisor's bits are OR'd with a value it cannot know (num_workgroups.x == 0), so the division
  happens. (For inf or huge x the reassociation itself is wrong: not fixed, see the report.)"""
  x = np.array([1.5, -2.0, 0.0, 7.0, -0.25, 3.0], np.float32)
  with np.errstate(all="ignore"):
    got = run_elementwise(rt, lambda v: v / (((v + 1.0) - v) - 1.0), [x], F32)
    np.testing.assert_array_equal(got, x / (((x + 1) - x) - 1))
    got = run_elementwise(rt, lambda v: UOp(Ops.RECIP, F32, (((v + 1.0) - v) - 1.0,)) * v, [x], F32)
    np.testing.assert_array_equal(got, 1 / (((x + 1) - x) - 1) * x)


@pytest.mark.parametrize("lane", [0, 3])
def test_w6_zero_results_on_vectors(rt, lane):
  x, v4 = np.tile(SPECIALS, 8), F32.vec(4)

  def fn(a):
    vec = UOp(Ops.VECTORIZE, v4, (a, a * const(F32, 0.5), a, -a))
    zero = UOp(Ops.VECTORIZE, v4, (const(F32, -0.0),) * 4)
    return ((vec - vec) + vec * zero).gep(lane)
  with np.errstate(all="ignore"):
    y = x if lane == 0 else -x
    assert_same_floats(run_elementwise(rt, fn, [x], F32), (y - y) + y * np.float32(-0.0))


@pytest.mark.parametrize("native", [None, True, False], ids=["f32", "f16-native", "f16-packed"])
def test_w6_exp2_of_y_log2_x_keeps_inf_and_nan_regression_zero_pow_minus_one(rt, native):
  """Regression: 0 ** -1 gave 0 on lavapipe (Mesa fuses exp2(y * log2(x)) into its own pow,
  which returns 0 for x = 0 and for NaN); numpy gives inf and NaN."""
  dt, name = (F32, "float32") if native is None else (F16, "float16")
  x = np.array([0.0, 0.0, 0.0, np.nan, 2.0, np.inf, np.inf, 1e-30, 3.0, 0.5] * 4, name)
  y = np.array([-1.0, 1.0, -2.5, 2.0, np.nan, 1.0, -1.0, -2.0, 100.0, -300.0] * 4, name)
  options = {} if native is None else {"f16": native}
  got = run_elementwise(rt, lambda a, b: UOp(Ops.EXP2, dt, (b * UOp(Ops.LOG2, dt, (a,)),)),
                        [x, y], dt, **options)
  with np.errstate(all="ignore"):
    want = np.exp2(y.astype(np.float32) * np.log2(x.astype(np.float32))).astype(name)
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("lane", [0, 1])
def test_w6_exp2_special_arguments_on_vectors(rt, lane):
  x = np.array([np.inf, -np.inf, np.nan, 128.0, 127.5, -150.5, -10.0, 0.0] * 8, np.float32)
  v4 = F32.vec(4)

  def fn(a):
    vec = UOp(Ops.VECTORIZE, v4, (a, a * const(F32, 0.5), a, a))
    return UOp(Ops.EXP2, v4, (vec,)).gep(lane)
  got = run_elementwise(rt, fn, [x], F32)
  np.testing.assert_allclose(got, np.exp2(x * np.float32(0.5 if lane else 1.0)), rtol=1e-6)


def test_w6_float_to_int_saturates_and_nan_gives_zero(rt):
  x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7, 0.0], np.float32)
  got = run_elementwise(rt, lambda v: v.cast(I32), [x], I32)
  np.testing.assert_array_equal(got, [0, 2**31 - 1, -2**31, 2**31 - 1, -2**31, 2, -2, 0])


# ---- W7: transcendental ops ---------------------------------------------------------------------

# op -> (numpy reference, input range, relative tolerance, absolute tolerance)
TRANSCENDENTAL = {
  Ops.EXP2: (np.exp2, (-20, 20), 1e-6, 0),
  Ops.LOG2: (np.log2, (1e-3, 1e4), 1e-6, 1e-6),
  Ops.SIN: (np.sin, (-math.pi, math.pi), 0, 2e-6),
  Ops.COS: (np.cos, (-math.pi, math.pi), 0, 2e-6),
  Ops.SQRT: (np.sqrt, (0, 1e4), 1e-7, 0),
  Ops.RECIP: (np.reciprocal, (0.01, 100), 1e-7, 0),
}


@pytest.mark.parametrize("op", list(TRANSCENDENTAL), ids=lambda op: op.name)
def test_w7_transcendental_accuracy(rt, op):
  ref, (lo, hi), rtol, atol = TRANSCENDENTAL[op]
  x = rand("float32", 2000, 26, lo=lo, hi=hi)
  got = run_elementwise(rt, lambda v: UOp(op, F32, (v,)), [x], F32)
  np.testing.assert_allclose(got, ref(x), rtol=rtol, atol=atol)


@pytest.mark.parametrize("native", [True, False], ids=["shader-f16", "packed"])
def test_w7_f16_transcendentals_are_computed_in_f32(rt, native):
  x = rand("float16", 500, 27, lo=-4, hi=4)
  got = run_elementwise(rt, lambda v: UOp(Ops.EXP2, F16, (v,)), [x], F16, f16=native)
  np.testing.assert_allclose(got.astype(np.float32), np.exp2(x).astype(np.float32), rtol=1e-3)


# ---- W8, W9, W10: launch geometry, workgroup memory, scalar arguments -----------------------------

def test_w8_grid_over_65535_workgroups_covers_every_element(rt):
  n = 100_003
  a = np.arange(n, dtype=np.int32)
  got = run_elementwise(rt, lambda x: x * 2 + 1, [a], I32, local=1)
  np.testing.assert_array_equal(got, a * 2 + 1)


def test_w8_two_dimensional_grid(rt):
  rows, cols = 70_000, 3
  out = param(0, I32, rows * cols)
  r, c = special("gid", 0, rows), special("gid", 1, cols)
  compiled = build(UOp(Ops.SINK, None, (out.store(r * cols + c, r * 10 + c),)))
  got = run(rt, compiled, {})[0].reshape(rows, cols)
  np.testing.assert_array_equal(got, np.arange(rows)[:, None] * 10 + np.arange(cols)[None, :])


@pytest.mark.parametrize("name", ["float32", "int8", "uint16", "float16"])
def test_w9_workgroup_memory_and_barrier(rt, name):
  local, groups = 64, 5
  a = rand(name, local * groups, 28)
  got = run(rt, build(reverse_in_workgroup(local, groups, getattr(dtypes, name))), {1: a})[0]
  np.testing.assert_array_equal(got, a.reshape(groups, local)[:, ::-1].reshape(-1))


def test_w10_scalar_arguments_in_a_uniform_buffer(rt):
  n, scale = UOp(Ops.VAR, I32, (), ("n", 0, 256)), UOp(Ops.VAR, I32, (), ("scale", -9, 9))
  idx, _, _ = flat_index(256)
  x, out = param(1, I32, 256), param(0, I32, 256)
  gate = idx.lt(n)
  compiled = build(UOp(Ops.SINK, None, (out.store(idx, x.load(idx, gate, 0) * scale, gate),)))
  a = rand("int32", 256, 29, lo=-1000, hi=1000)
  got = run(rt, compiled, {1: a, 0: np.zeros(256, np.int32)}, {"n": 100, "scale": -3})[0]
  np.testing.assert_array_equal(got, np.where(np.arange(256) < 100, a * -3, 0))


# ---- W11: bitcasts ------------------------------------------------------------------------------

def test_w11_bitcast_32_bit(rt):
  x = SPECIALS.copy()
  got = run_elementwise(rt, lambda v: v.bitcast(dtypes.uint32), [x], dtypes.uint32)
  np.testing.assert_array_equal(got, x.view(np.uint32))
  i = rand("int32", 100, 30)
  got = run_elementwise(rt, lambda v: v.bitcast(F32).bitcast(I32), [i], I32)
  np.testing.assert_array_equal(got, i)


@pytest.mark.parametrize("native", [True, False], ids=["shader-f16", "packed"])
def test_w11_bitcast_16_bit(rt, native):
  h = rand("float16", 300, 31)
  got = run_elementwise(rt, lambda v: v.bitcast(dtypes.int16), [h], dtypes.int16, f16=native)
  np.testing.assert_array_equal(got, h.view(np.int16))
  u = h.view(np.uint16)
  got = run_elementwise(rt, lambda v: v.bitcast(F16), [u], F16, f16=native)
  np.testing.assert_array_equal(got.view(np.uint16), u)


# ---- W12: binding limits, the device's real limits ---------------------------------------------

def test_w12_device_reports_its_real_limits_and_runs_nine_buffers(rt):
  options = rt.render_options()
  assert options["max_storage_buffers"] >= 8 and options["max_workgroups_per_dim"] >= 65535
  arrays = [rand("float32", 50, 40 + k) for k in range(8)]
  fn = lambda *xs: sum(xs[1:], xs[0])  # noqa: E731
  got = run_elementwise(rt, fn, arrays, F32, max_storage_buffers=options["max_storage_buffers"])
  np.testing.assert_allclose(got, sum(arrays[1:], arrays[0]), rtol=1e-6)


# ---- W14 and the rest: vectors, loops, errors, timing --------------------------------------------

def test_w14_vector_loads_and_stores(rt):
  n = 64
  x, out = param(1, F32, n * 4), param(0, F32, n * 4)
  i = special("gid", 0, n) * 4
  v = x.load(i, dtype=F32.vec(4))
  w = UOp(Ops.VECTORIZE, F32.vec(4), tuple(v.gep(3 - k) for k in range(4)))
  compiled = build(UOp(Ops.SINK, None, (out.store(i, w + v),)))
  a = rand("float32", n * 4, 32)
  got = run(rt, compiled, {1: a})[0].reshape(n, 4)
  np.testing.assert_array_equal(got, a.reshape(n, 4)[:, ::-1] + a.reshape(n, 4))


@pytest.mark.parametrize("name,offset", [("float32", 4), ("int32", 8), ("uint32", 1),
                                         ("float32", 3)])
def test_w14_vec4_and_scalar_access_with_a_gate_match_numpy(rt, name, offset):
  n, dt = 64, getattr(dtypes, name)
  v4 = dt.vec(4)
  x, out = param(1, dt, n * 4 + 8), param(0, dt, n * 4)
  i = special("gid", 0, n) * 4
  gate = special("gid", 0, n).lt(const(I32, n // 2))
  alt = UOp.const(v4, 7)
  v = UOp(Ops.LOAD, v4, (x, i + const(I32, offset), gate, alt))
  w = UOp(Ops.VECTORIZE, v4, tuple(v.gep(3 - k) for k in range(4)))
  compiled = build(UOp(Ops.SINK, None, (out.store(i, w + v),)))
  assert ("array<vec4<" in compiled.source.split("var<storage, read> ")[1].split(";")[0]) \
    == (offset % 4 == 0)
  a = rand(name, n * 4 + 8, 33, lo=0, hi=1000)
  got = run(rt, compiled, {1: a})[0].reshape(n, 4)
  rows = np.stack([a[offset + 4 * t: offset + 4 * t + 4] for t in range(n)])
  rows[n // 2:] = 7
  np.testing.assert_array_equal(got, rows[:, ::-1] + rows)


@pytest.mark.parametrize("name", ["float32", "int32", "int8", "uint16", "float16"])
def test_reduction_loop(rt, name):
  # regression: 8/16-bit and packed-f16 accumulators once read through a hoisted cast
  a = rand(name, 37 * 11, 33, lo=0 if name.startswith("u") else -5, hi=5)
  got = run(rt, build(row_sum(37, 11, getattr(dtypes, name))), {1: a})[0]
  sequential = np.cumsum(a.reshape(37, 11), axis=1, dtype=name)[:, -1]
  np.testing.assert_array_equal(got, sequential)


def test_shader_compile_error_carries_the_wgsl_line(rt):
  compiled = build(elementwise(lambda a: a + a, [I32], I32, 4))
  bad = compiled.launch.source.replace("kg_gid0 * 64i", "kg_gid0 * 64u")
  launch = Launch(**{**compiled.launch.__dict__, "source": bad})
  broken = CompiledKernel(**{**compiled.__dict__, "source": bad, "launch": launch})
  with pytest.raises(CompileError) as info:
    run(rt, broken, {1: np.arange(4, dtype=np.int32)})
  line = bad.splitlines().index(next(s for s in bad.splitlines() if "64u" in s)) + 1
  assert info.value.line == line and "64u" in str(info.value)


def test_timed_run_returns_seconds(rt):
  compiled = build(elementwise(lambda a: a + a, [F32], F32, 4096))
  handles = [rt.alloc(4096 * 4) for _ in range(2)]
  seconds = rt.run(compiled, handles, {}, timed=True)
  assert 0 < seconds < 10


def test_pipeline_cache_is_keyed_by_source(rt):
  compiled = build(elementwise(lambda a: a - a, [F32], F32, 16))
  run(rt, compiled, {1: np.ones(16, np.float32)})
  count = len(rt.pipelines)
  run(rt, compiled, {1: np.ones(16, np.float32)})
  assert len(rt.pipelines) == count


def test_a_prepared_pipeline_is_built_in_the_background_and_kept(rt):
  compiled = build(elementwise(lambda a: a * a, [F32], F32, 64))
  rt.prepare(compiled)
  rt.prepare(compiled)                       # once per source: the second is a no-op
  a = np.arange(64, dtype=np.float32)
  np.testing.assert_array_equal(run(rt, compiled, {1: a})[0], a * a)
  assert isinstance(rt.pipeline(compiled.launch), tuple)   # the built pipeline, not its Future


def test_a_prepared_kernel_that_fails_to_build_raises_at_its_run(rt):
  compiled = build(elementwise(lambda a: a + a, [I32], I32, 8))
  bad = compiled.launch.source.replace("kg_gid0 * 64i", "kg_gid0 * 64u")
  launch = Launch(**{**compiled.launch.__dict__, "source": bad})
  broken = CompiledKernel(**{**compiled.__dict__, "source": bad, "launch": launch})
  rt.prepare(broken)                         # no error yet: the build runs on the builder thread
  for _ in range(2):                         # the failure is not kept: each run builds again
    with pytest.raises(CompileError) as info:
      run(rt, broken, {1: np.arange(8, dtype=np.int32)})
    assert "64u" in str(info.value)


# ---- the Tensor front-end suite (test_tensor.py), run again on WEBGPU -----------------------------

@pytest.fixture()
def webgpu_device(rt):
  import kernelgen as kg
  previous = kg.Device._default
  kg.Device.DEFAULT = "WEBGPU"
  yield
  kg.Device._default = previous


# known failures of the Tensor suite on WEBGPU, with why (strict: a fix makes them fail loudly)
KNOWN_FAILURES = {
}


def _expect_64_bit_refusal(fn):
  """On WGSL a 64-bit dtype is a typed error by design (W5): such a test xfails on that error."""
  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    try:
      return fn(*args, **kwargs)
    except UnsupportedError as error:
      if error.target == "wgsl" and error.dtype is not None and error.dtype.itemsize == 8:
        pytest.xfail(f"W5: {error.dtype.name} is refused on WGSL with a typed error")
      raise
  return wrapper


def _tensor_suite_on_webgpu():
  """Every test of test_tensor.py as `test_tensor_on_webgpu_<name>`, with WEBGPU the default."""
  try:
    import test_tensor
  except ImportError:  # the front end is not importable: nothing to run again
    return {}
  tests = {}
  for name, fn in vars(test_tensor).items():
    if name.startswith("test_") and callable(fn):
      wrapped = pytest.mark.usefixtures("webgpu_device")(_expect_64_bit_refusal(fn))
      if name in KNOWN_FAILURES:
        wrapped = pytest.mark.xfail(reason=KNOWN_FAILURES[name], strict=True)(wrapped)
      tests[f"test_tensor_on_webgpu_{name[5:]}"] = wrapped
  return tests


globals().update(_tensor_suite_on_webgpu())
