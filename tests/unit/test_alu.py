"""alu.py against numpy: every ALU op on every scalar dtype numpy has, bfloat16 against a
brute-force nearest-value reference, casts and bitcasts between all dtypes."""
from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kernelgen.uop.alu import exec_alu, exec_bitcast, exec_cast, round_exact
from kernelgen.dtype import bf16_bits, bf16_from_bits, dtypes, from_bits, to_bits, truncate
from kernelgen.errors import DTypeError
from kernelgen.uop.ops import Ops

INTS = dtypes.ints + dtypes.uints
NP_FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)
settings.register_profile("alu", max_examples=60, deadline=None)
settings.load_profile("alu")


def np_dtype(dt):
  return np.dtype(dt.name)


def int_values(dt):
  lo, hi = (-(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1) if dt.kind == "i" else (0, (1 << dt.bits) - 1)
  edges = st.sampled_from([lo, hi, 0, 1, -1 if lo else 2, lo + 1, hi - 1])
  return st.one_of(edges, st.integers(lo, hi))


def float_values(dt):
  """Any value of the dtype, NaN/inf/-0 and subnormals included."""
  if dt == dtypes.bfloat16:
    return st.integers(0, 0xFFFF).map(bf16_from_bits)
  return st.integers(0, (1 << dt.bits) - 1).map(lambda b: from_bits(b, dt))


def same(got, want) -> bool:
  """Equal values, or both NaN; zeros compared with their sign."""
  if isinstance(want, float) and math.isnan(want):
    return isinstance(got, float) and math.isnan(got)
  return got == want and type(got) is type(want) and (
    not isinstance(want, float) or math.copysign(1, got) == math.copysign(1, want))


def np_scalar(value, dt):
  return np.array([value], dtype=np_dtype(dt))


def np_result(fn, dt, *values):
  with warnings.catch_warnings(), np.errstate(all="ignore"):
    warnings.simplefilter("ignore")
    out = fn(*(np_scalar(v, dt) for v in values))[0]
  return out.item()


# ---- integers ----------------------------------------------------------------------------------

def np_c_div(a, b):
  """C division from numpy: floor division corrected toward zero where the remainder is nonzero."""
  q = np.floor_divide(a, b)
  return q + ((np.fmod(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


INT_BINARY = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum,
              Ops.MIN: np.minimum, Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or,
              Ops.XOR: np.bitwise_xor, Ops.IDIV: np_c_div, Ops.MOD: np.fmod}


@pytest.mark.parametrize("dt", INTS, ids=str)
@pytest.mark.parametrize("op", INT_BINARY, ids=lambda o: o.name)
def test_int_binary_matches_numpy(op, dt):
  @given(int_values(dt), int_values(dt))
  def check(a, b):
    if op in (Ops.IDIV, Ops.MOD) and b == 0:
      assert exec_alu(op, dt, [a, b]) == 0   # IR.md: x / 0 and x % 0 give 0 in the interpreter
      return
    assert exec_alu(op, dt, [a, b]) == np_result(INT_BINARY[op], dt, a, b)
  check()


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_division_signs_are_c(dt):
  lo = -8 if dt.kind == "i" else 0
  for a in range(lo, 9):
    for b in [x for x in range(lo, 9) if x]:
      q, r = exec_alu(Ops.IDIV, dt, [a, b]), exec_alu(Ops.MOD, dt, [a, b])
      assert q == int(a / b) and q * b + r == a, (a, b)
      assert r == 0 or (r < 0) == (a < 0), (a, b)


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_shifts_take_the_amount_modulo_width(dt):
  @given(int_values(dt), int_values(dt))
  def check(a, b):
    amount = b % dt.bits
    want_shl = np_result(np.left_shift, dt, a, amount)
    want_shr = np_result(np.right_shift, dt, a, amount)
    assert exec_alu(Ops.SHL, dt, [a, b]) == want_shl
    assert exec_alu(Ops.SHR, dt, [a, b]) == want_shr
  check()
  if dt.kind == "i":
    assert exec_alu(Ops.SHR, dt, [-1 << (dt.bits - 1), 1]) < 0          # arithmetic
  else:
    assert exec_alu(Ops.SHR, dt, [1 << (dt.bits - 1), dt.bits - 1]) == 1  # logical


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_unary_and_ternary(dt):
  @given(int_values(dt), int_values(dt), int_values(dt))
  def check(a, b, c):
    assert exec_alu(Ops.NEG, dt, [a]) == np_result(np.negative, dt, a)
    assert exec_alu(Ops.NOT, dt, [a]) == np_result(np.invert, dt, a)
    assert exec_alu(Ops.MULACC, dt, [a, b, c]) == np_result(lambda x, y, z: x * y + z, dt, a, b, c)
    for op, fn in ((Ops.CMPLT, np.less), (Ops.CMPEQ, np.equal), (Ops.CMPNE, np.not_equal)):
      assert exec_alu(op, dtypes.bool, [a, b]) is np_result(fn, dt, a, b)
  check()


def test_int_wraps_around():
  assert exec_alu(Ops.ADD, dtypes.int8, [127, 1]) == -128
  assert exec_alu(Ops.SUB, dtypes.uint8, [0, 1]) == 255
  assert exec_alu(Ops.MUL, dtypes.int32, [1 << 30, 4]) == 0
  assert exec_alu(Ops.IDIV, dtypes.int32, [-(1 << 31), -1]) == -(1 << 31)


# ---- floats ------------------------------------------------------------------------------------

FLOAT_BINARY = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply,
                Ops.FDIV: np.divide, Ops.MAX: np.maximum, Ops.MIN: np.minimum}


@pytest.mark.parametrize("dt", NP_FLOATS, ids=str)
@pytest.mark.parametrize("op", FLOAT_BINARY, ids=lambda o: o.name)
def test_float_binary_matches_numpy(op, dt):
  @given(float_values(dt), float_values(dt))
  def check(a, b):
    got, want = exec_alu(op, dt, [a, b]), np_result(FLOAT_BINARY[op], dt, a, b)
    if op in (Ops.MAX, Ops.MIN) and a == b == 0:
      assert got == 0   # numpy returns its first operand for equal zeros
    else:
      assert same(got, want), (a, b, got, want)
  check()


@pytest.mark.parametrize("dt", NP_FLOATS, ids=str)
def test_float_comparisons_and_nan(dt):
  @given(float_values(dt), float_values(dt))
  def check(a, b):
    for op, fn in ((Ops.CMPLT, np.less), (Ops.CMPEQ, np.equal), (Ops.CMPNE, np.not_equal)):
      assert exec_alu(op, dtypes.bool, [a, b]) is np_result(fn, dt, a, b)
  check()
  nan = math.nan
  assert exec_alu(Ops.CMPNE, dtypes.bool, [nan, nan]) is True
  assert exec_alu(Ops.CMPLT, dtypes.bool, [nan, 1.0]) is False
  assert math.isnan(exec_alu(Ops.MAX, dt, [nan, 1.0])) and math.isnan(exec_alu(Ops.MIN, dt, [1.0, nan]))


UNARY_F64_THEN_ROUND = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.COS: np.cos,
                        Ops.SQRT: np.sqrt, Ops.RECIP: np.reciprocal, Ops.TRUNC: np.trunc,
                        Ops.NEG: np.negative}


@pytest.mark.parametrize("dt", NP_FLOATS, ids=str)
@pytest.mark.parametrize("op", UNARY_F64_THEN_ROUND, ids=lambda o: o.name)
def test_float_unary_is_float64_then_rounded(op, dt):
  @given(float_values(dt))
  def check(a):
    want = np_result(lambda x: UNARY_F64_THEN_ROUND[op](x.astype(np.float64)).astype(x.dtype), dt, a)
    assert same(exec_alu(op, dt, [a]), want), a
  check()


@pytest.mark.parametrize("dt", (dtypes.float16, dtypes.float32), ids=str)
def test_sqrt_is_correctly_rounded(dt):
  @given(float_values(dt))
  def check(a):
    assert same(exec_alu(Ops.SQRT, dt, [a]), np_result(np.sqrt, dt, a))
  check()


def nearest(exact: Fraction, dt) -> float:
  """Brute-force reference: the value of `dt` nearest to `exact` (ties to the even bit pattern),
  from the neighbours of a numpy rounding; overflow counts 2**(emax+1) as the next value."""
  try:
    approx = float(exact)
  except OverflowError:
    approx = math.inf if exact > 0 else -math.inf
  if dt == dtypes.float64:
    return approx   # Fraction -> float is correctly rounded
  with np.errstate(all="ignore"):
    near = np.array([approx]).astype(np.float16 if dt == dtypes.float16 else np.float32)[0]
  guess = to_bits(float(near), dtypes.float32) >> 16 if dt == dtypes.bfloat16 else to_bits(float(near), dt)
  best = None
  for bits in range(max(guess - 2, 0), guess + 3):
    bits &= (1 << dt.bits) - 1
    value = from_bits(bits, dt)
    if math.isnan(value):
      continue
    finite = Fraction(value) if math.isfinite(value) else (
      Fraction(2) ** (16 if dt == dtypes.float16 else 128) * (1 if value > 0 else -1))
    key = (abs(finite - exact), bits & 1)
    if (math.isfinite(value) or abs(exact) >= 1) and (best is None or key < best[0]):
      best = (key, math.copysign(value, 1 if exact > 0 else -1) if value == 0 else value)
  return best[1]


@pytest.mark.parametrize("op", FLOAT_BINARY, ids=lambda o: o.name)
def test_bfloat16_binary_matches_bit_level_reference(op):
  f64 = {Ops.ADD: lambda a, b: Fraction(a) + Fraction(b), Ops.SUB: lambda a, b: Fraction(a) - Fraction(b),
         Ops.MUL: lambda a, b: Fraction(a) * Fraction(b)}

  @given(float_values(dtypes.bfloat16), float_values(dtypes.bfloat16))
  def check(a, b):
    got = exec_alu(op, dtypes.bfloat16, [a, b])
    if op in f64 and all(map(math.isfinite, (a, b))) and f64[op](a, b) != 0:
      assert same(got, nearest(f64[op](a, b), dtypes.bfloat16)), (a, b)
    elif op is Ops.FDIV and math.isfinite(a) and math.isfinite(b) and b != 0 and a != 0:
      assert same(got, nearest(Fraction(a) / Fraction(b), dtypes.bfloat16)), (a, b)
    else:   # specials: the float64 result has the right value and bits already
      assert same(got, np_result(FLOAT_BINARY[op], dtypes.float64, a, b)), (a, b)
  check()


@pytest.mark.parametrize("dt", dtypes.floats, ids=str)
def test_mulacc_is_fused(dt):
  @given(float_values(dt), float_values(dt), float_values(dt))
  def check(a, b, c):
    got = exec_alu(Ops.MULACC, dt, [a, b, c])
    if all(map(math.isfinite, (a, b, c))) and Fraction(a) * Fraction(b) + Fraction(c) != 0:
      assert same(got, nearest(Fraction(a) * Fraction(b) + Fraction(c), dt)), (a, b, c)
    elif not all(map(math.isfinite, (a, b, c))):
      assert same(got, a * b + c)
  check()
  # one rounding: 0.1f * 3 - 0.3f is not 0 when fused (it is after rounding the product)
  a, c = truncate(0.1, dtypes.float32), truncate(-0.30000001192092896, dtypes.float32)
  assert exec_alu(Ops.MULACC, dtypes.float32, [a, 3.0, c]) == float(Fraction(a) * 3 + Fraction(c))


def test_round_exact_handles_subnormals_and_overflow():
  assert round_exact(Fraction(1, 2 ** 24), dtypes.float16) == 2.0 ** -24
  assert round_exact(Fraction(1, 2 ** 25), dtypes.float16) == 0.0           # tie to even: 0
  assert round_exact(Fraction(3, 2 ** 26), dtypes.float16) == 2.0 ** -24
  assert round_exact(65520, dtypes.float16) == math.inf
  assert round_exact(65519, dtypes.float16) == 65504.0
  assert round_exact(-(2 ** 64 + 1), dtypes.float32) == -(2.0 ** 64)


def test_bfloat16_rounds_float64_once():
  # just above the halfway point between two bfloat16 values, but a float32 rounding would
  # land exactly on it and round to even (down)
  x = 1 + 2 ** -8 + 2 ** -40
  assert truncate(x, dtypes.bfloat16) == 1 + 2 ** -7
  assert bf16_bits(-x) == 0x8000 | bf16_bits(x)


# ---- casts and bitcasts ------------------------------------------------------------------------

NP_ALL = (dtypes.bool,) + INTS + NP_FLOATS


def cast_input(src):
  return st.booleans() if src == dtypes.bool else int_values(src) if src.is_int() else float_values(src)


@pytest.mark.parametrize("dst", NP_ALL, ids=str)
@pytest.mark.parametrize("src", NP_ALL, ids=str)
def test_cast_matches_numpy(src, dst):
  @given(cast_input(src))
  def check(v):
    if src.is_float() and dst.is_int():
      if not math.isfinite(v) or not (-(1 << 63) < v < (1 << 63)):
        return
      t = math.trunc(v)
      lo, hi = (-(1 << (dst.bits - 1)), (1 << (dst.bits - 1)) - 1) if dst.kind == "i" else (0, (1 << dst.bits) - 1)
      if not lo <= t <= hi:   # numpy leaves out-of-range undefined; we saturate
        assert exec_cast(v, src, dst) == max(lo, min(hi, t))
        return
    want = np_result(lambda x: x.astype(np_dtype(dst)), src, v)
    assert same(exec_cast(v, src, dst), want), v
  check()


def test_cast_float_to_int_saturates_and_nan_is_zero():
  assert exec_cast(math.nan, dtypes.float32, dtypes.int32) == 0
  assert exec_cast(-math.inf, dtypes.float32, dtypes.int8) == -128
  assert exec_cast(300.7, dtypes.float32, dtypes.uint8) == 255
  assert exec_cast(-2.9, dtypes.float32, dtypes.int32) == -2
  assert exec_cast(math.nan, dtypes.float32, dtypes.bool) is True


@pytest.mark.parametrize("src", (dtypes.bool,) + INTS + dtypes.floats, ids=str)
def test_cast_to_bfloat16_rounds_once(src):
  @given(cast_input(src))
  def check(v):
    got = exec_cast(v, src, dtypes.bfloat16)
    if isinstance(v, float) and (not math.isfinite(v) or v == 0):
      assert same(got, float(v))
    elif v == 0:
      assert got == 0
    else:
      assert same(got, nearest(Fraction(v), dtypes.bfloat16)), v
  check()


@pytest.mark.parametrize("pair", [(dtypes.float32, dtypes.uint32), (dtypes.int32, dtypes.float32),
                                  (dtypes.float16, dtypes.int16), (dtypes.float64, dtypes.int64),
                                  (dtypes.uint8, dtypes.int8)], ids=str)
def test_bitcast_matches_numpy_view(pair):
  src, dst = pair

  @given(cast_input(src))
  def check(v):
    want = np_scalar(v, src).view(np_dtype(dst))[0].item()
    assert same(exec_bitcast(v, src, dst), want)
  check()


def test_bitcast_vectors_and_bfloat16():
  assert exec_bitcast((1.0, -2.0), dtypes.float16.vec(2), dtypes.uint32) == 0xC0003C00
  assert exec_bitcast(0x3F80, dtypes.uint16, dtypes.bfloat16) == 1.0
  assert exec_bitcast(0xC0003C00, dtypes.uint32, dtypes.float16.vec(2)) == (1.0, -2.0)


# ---- vectors and errors ------------------------------------------------------------------------

def test_vector_ops_are_lane_wise():
  v = dtypes.int8.vec(3)
  assert exec_alu(Ops.ADD, v, [(1, 127, -128), (1, 1, -1)]) == (2, -128, 127)
  assert exec_alu(Ops.CMPLT, dtypes.bool.vec(2), [(1.0, 2.0), (2.0, 1.0)]) == (True, False)
  assert exec_alu(Ops.WHERE, dtypes.float32.vec(2), [(True, False), (1.0, 2.0), (3.0, 4.0)]) == (1.0, 4.0)


def test_bool_logic():
  for a in (False, True):
    for b in (False, True):
      assert exec_alu(Ops.AND, dtypes.bool, [a, b]) is (a and b)
      assert exec_alu(Ops.OR, dtypes.bool, [a, b]) is (a or b)
      assert exec_alu(Ops.XOR, dtypes.bool, [a, b]) is (a != b)
    assert exec_alu(Ops.NOT, dtypes.bool, [a]) is (not a)


def test_int_only_op_on_float_says_to_cast():
  with pytest.raises(DTypeError, match=r"IDIV is not defined on float32: it needs integer operands; cast"):
    exec_alu(Ops.IDIV, dtypes.float32, [1.0, 2.0])
  with pytest.raises(DTypeError, match="SQRT is not defined on int32: it needs float operands"):
    exec_alu(Ops.SQRT, dtypes.int32, [4])
