"""Instruction-level tests of the PTX simulator, written from the PTX ISA document.

Each test names the ISA rule it checks; expected values come from that rule (exact arithmetic,
numpy where numpy implements the same IEEE operation), never from our renderer's output.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from test_ptxsim_kit import elementwise, f32

F32_MAX = float(np.finfo(np.float32).max)
INF, NAN = math.inf, math.nan


def bits(x) -> np.ndarray:
  return np.asarray(x, dtype=np.float32).view(np.uint32)


def same_f32(got, want) -> bool:
  """Equal as f32 bit patterns (so -0.0 != 0.0), any NaN equal to any NaN."""
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  both_nan = np.isnan(got) & np.isnan(want)
  return bool(np.all(both_nan | (bits(got) == bits(want))))


# ---- float arithmetic and rounding modifiers --------------------------------------------------

def test_add_rn_f32_is_ieee_round_to_nearest_even():
  """add.rn.f32: IEEE 754 addition rounded to nearest even (numpy float32 add is the same)."""
  rng = np.random.default_rng(0)
  a = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-30, 30, 200),
                      f32(F32_MAX, -F32_MAX, INF, -INF, NAN, 0.0, -0.0, 1e-45)]).astype(np.float32)
  b = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-30, 30, 200),
                      f32(F32_MAX, -1.0, -INF, -INF, 1.0, -0.0, -0.0, 1e-45)]).astype(np.float32)
  assert same_f32(elementwise("add.rn.f32 %d, %a, %b", [("f32", a), ("f32", b)], "f32"), a + b)


@pytest.mark.parametrize("mode,want", [("rn", 1.0), ("rz", 1.0), ("rm", 1.0),
                                       ("rp", float(np.nextafter(np.float32(1), np.float32(2))))])
def test_add_directed_rounding_modes(mode, want):
  """add.{rn,rz,rm,rp}.f32: 1 + 2^-30 rounds to 1 except toward +inf (.rp gives 1 + 2^-23)."""
  got = elementwise(f"add.{mode}.f32 %d, %a, %b", [("f32", [1.0]), ("f32", [2.0 ** -30])], "f32")
  assert same_f32(got, [want])


def test_directed_rounding_of_negative_results():
  """.rm rounds toward -inf, .rz toward zero: -(1 + 2^-30) -> -(1 + 2^-23) and -1."""
  args = [("f32", [-1.0]), ("f32", [-(2.0 ** -30)])]
  assert same_f32(elementwise("add.rm.f32 %d, %a, %b", args, "f32"), [-(1 + 2.0 ** -23)])
  assert same_f32(elementwise("add.rz.f32 %d, %a, %b", args, "f32"), [-1.0])


def test_overflow_rounds_to_inf_or_max_by_mode():
  """Overflow: .rn gives inf; .rz gives the largest finite value (IEEE directed rounding)."""
  args = [("f32", [F32_MAX, -F32_MAX]), ("f32", [2.0, 2.0])]
  assert same_f32(elementwise("mul.rn.f32 %d, %a, %b", args, "f32"), [INF, -INF])
  assert same_f32(elementwise("mul.rz.f32 %d, %a, %b", args, "f32"), [F32_MAX, -F32_MAX])


def test_fma_rounds_once():
  """fma.rn.f32 computes a*b+c with infinite precision and rounds once.

  a*b+c = 1 + 2^-24 + 2^-54 exactly: one rounding gives 1 + 2^-23, while rounding to double
  first lands on the tie 1 + 2^-24 and then on 1.0 (the double-rounding trap)."""
  a, b, c = -(2.0 ** -24) * (1 + 2.0 ** -15), 1 - 2.0 ** -15, 1 + 2.0 ** -23
  got = elementwise("fma.rn.f32 %d, %a, %b, %c", [("f32", [a]), ("f32", [b]), ("f32", [c])], "f32")
  assert same_f32(got, [1 + 2.0 ** -23])


def test_div_rn_f32_ieee_with_zero_divisors():
  """div.rn.f32: IEEE division; x/0 = signed inf, 0/0 = NaN, inf/inf = NaN."""
  a = f32(1.0, -1.0, 0.0, INF, 7.0, 1.0, 3.0)
  b = f32(0.0, 0.0, 0.0, INF, 3.0, -0.0, 1e-40)
  with np.errstate(all="ignore"):
    want = a / b
  assert same_f32(elementwise("div.rn.f32 %d, %a, %b", [("f32", a), ("f32", b)], "f32"), want)


def test_sqrt_and_rcp_rn_are_correctly_rounded():
  """sqrt.rn.f32 / rcp.rn.f32: IEEE correctly rounded; sqrt(-x) = NaN, sqrt(-0) = -0."""
  rng = np.random.default_rng(1)
  x = np.concatenate([rng.uniform(0, 1e6, 100), f32(-1.0, -0.0, 0.0, INF)]).astype(np.float32)
  with np.errstate(all="ignore"):
    assert same_f32(elementwise("sqrt.rn.f32 %d, %a", [("f32", x)], "f32"), np.sqrt(x))
    assert same_f32(elementwise("rcp.rn.f32 %d, %a", [("f32", x)], "f32"),
                    np.float32(1) / x)


def test_sat_clamps_to_unit_interval_and_nan_to_zero():
  """.sat on a float result: clamp to [0.0, 1.0]; NaN results become +0.0."""
  a = f32(0.5, 2.0, -3.0, NAN, -0.0)
  got = elementwise("add.sat.f32 %d, %a, %b", [("f32", a), ("f32", [0.0] * 5)], "f32")
  assert same_f32(got, [0.5, 1.0, 0.0, 0.0, 0.0])


def test_ftz_flushes_subnormal_inputs_and_results():
  """.ftz: subnormal f32 inputs and results are flushed to sign-preserving zero."""
  tiny = 1e-40   # subnormal in f32
  args = [("f32", [tiny, -tiny]), ("f32", [0.0, -0.0])]
  assert same_f32(elementwise("add.ftz.f32 %d, %a, %b", args, "f32"), [0.0, -0.0])
  assert same_f32(elementwise("add.f32 %d, %a, %b", args, "f32"), f32(tiny, -tiny))


def test_min_max_return_the_non_nan_operand():
  """min/max.f32: if one operand is NaN the result is the other; both NaN gives NaN."""
  a, b = f32(NAN, 1.0, NAN, -0.0), f32(2.0, NAN, NAN, 0.0)
  assert same_f32(elementwise("min.f32 %d, %a, %b", [("f32", a), ("f32", b)], "f32"),
                  [2.0, 1.0, NAN, -0.0])
  assert same_f32(elementwise("max.f32 %d, %a, %b", [("f32", a), ("f32", b)], "f32"),
                  [2.0, 1.0, NAN, 0.0])


def test_neg_flips_the_sign_of_zero():
  """neg.f32 negates the sign bit: neg(+0) = -0."""
  assert same_f32(elementwise("neg.f32 %d, %a", [("f32", [0.0, -2.0])], "f32"), [-0.0, 2.0])


def test_f16_arithmetic_rounds_once_to_half():
  """add.rn.f16 / mul.rn.f16 / fma.rn.f16: exact result rounded once to f16 (overflow to inf)."""
  rng = np.random.default_rng(2)
  a = np.concatenate([rng.standard_normal(100) * 100, [60000.0]]).astype(np.float16)
  b = np.concatenate([rng.standard_normal(100) * 100, [60000.0]]).astype(np.float16)
  c = rng.standard_normal(101).astype(np.float16)
  ref = lambda x: x.astype(np.float16)
  a64, b64, c64 = (v.astype(np.float64) for v in (a, b, c))
  args = [("f16", a), ("f16", b)]
  assert np.array_equal(elementwise("add.rn.f16 %d, %a, %b", args, "f16"), ref(a64 + b64))
  assert np.array_equal(elementwise("mul.rn.f16 %d, %a, %b", args, "f16"), ref(a64 * b64))
  got = elementwise("fma.rn.f16 %d, %a, %b, %c", args + [("f16", c)], "f16")
  assert np.array_equal(got, ref(a64 * b64 + c64))


# ---- approximate instructions, within the documented error ---------------------------------------

def test_ex2_approx_within_documented_error():
  """ex2.approx.f32: max relative error 2^-22 (ISA table); ex2(-inf) = +0, ex2(+inf) = +inf."""
  x = np.linspace(-100, 100, 801).astype(np.float32)
  got = elementwise("ex2.approx.f32 %d, %a", [("f32", x)], "f32").astype(np.float64)
  want = np.exp2(x.astype(np.float64))
  assert np.all(np.abs(got - want) <= 2.0 ** -22 * want)
  assert same_f32(elementwise("ex2.approx.f32 %d, %a", [("f32", [-INF, INF])], "f32"), [0.0, INF])


def test_lg2_approx_within_documented_error_and_special_values():
  """lg2.approx.f32: abs error <= 2^-22 on [0.5, 2]; lg2(0) = -inf, lg2(x<0) = NaN."""
  x = np.linspace(0.5, 2, 301).astype(np.float32)
  got = elementwise("lg2.approx.f32 %d, %a", [("f32", x)], "f32").astype(np.float64)
  assert np.all(np.abs(got - np.log2(x.astype(np.float64))) <= 2.0 ** -22)
  special = elementwise("lg2.approx.f32 %d, %a", [("f32", [0.0, -1.0, INF])], "f32")
  assert same_f32(special, [-INF, NAN, INF])


def test_sin_approx_within_documented_error():
  """sin.approx.f32: max absolute error 2^-20.9 in [-pi, pi]; sin(inf) = NaN."""
  x = np.linspace(-math.pi, math.pi, 401).astype(np.float32)
  got = elementwise("sin.approx.f32 %d, %a", [("f32", x)], "f32").astype(np.float64)
  assert np.all(np.abs(got - np.sin(x.astype(np.float64))) <= 2.0 ** -20.9)
  assert np.isnan(elementwise("sin.approx.f32 %d, %a", [("f32", [INF])], "f32")[0])


def test_cos_approx_within_documented_error():
  """cos.approx.f32: max absolute error 2^-20.9 in [-pi, pi]; cos(-inf) = NaN, cos(-0) = 1."""
  x = np.linspace(-math.pi, math.pi, 401).astype(np.float32)
  got = elementwise("cos.approx.f32 %d, %a", [("f32", x)], "f32").astype(np.float64)
  assert np.all(np.abs(got - np.cos(x.astype(np.float64))) <= 2.0 ** -20.9)
  special = elementwise("cos.approx.f32 %d, %a", [("f32", [-INF, -0.0])], "f32")
  assert np.isnan(special[0]) and special[1] == 1.0


# ---- comparisons with NaN ----------------------------------------------------------------------

A_CMP = f32(1.0, 2.0, NAN, 1.0, NAN)
B_CMP = f32(1.0, 1.0, 1.0, NAN, NAN)


@pytest.mark.parametrize("cmp,want", [
  ("eq", [1, 0, 0, 0, 0]), ("ne", [0, 1, 0, 0, 0]),    # ordered: false when either is NaN
  ("lt", [0, 0, 0, 0, 0]), ("ge", [1, 1, 0, 0, 0]),
  ("equ", [1, 0, 1, 1, 1]), ("neu", [0, 1, 1, 1, 1]),  # unordered: true when either is NaN
  ("ltu", [0, 0, 1, 1, 1]), ("geu", [1, 1, 1, 1, 1]),
  ("num", [1, 1, 0, 0, 0]), ("nan", [0, 0, 1, 1, 1])])
def test_setp_float_ordered_and_unordered(cmp, want):
  """setp.CMP.f32: ordered comparisons are false with a NaN operand, the u forms true."""
  got = elementwise(f"setp.{cmp}.f32 %p, %a, %b; selp.u32 %d, 1, 0, %p",
                    [("f32", A_CMP), ("f32", B_CMP)], "u32")
  assert got.tolist() == want


def test_setp_signed_vs_unsigned_integers():
  """setp.lt.s32 compares two's complement values, setp.lt.u32 / setp.lo.u32 unsigned bits."""
  a, b = np.array([-1, 1], np.int32), np.array([1, -1], np.int32)
  lines = "setp.{}.{} %p, %a, %b; selp.u32 %d, 1, 0, %p"
  assert elementwise(lines.format("lt", "s32"), [("s32", a), ("s32", b)], "u32").tolist() == [1, 0]
  assert elementwise(lines.format("lt", "u32"), [("s32", a), ("s32", b)], "u32").tolist() == [0, 1]
  assert elementwise(lines.format("lo", "u32"), [("s32", a), ("s32", b)], "u32").tolist() == [0, 1]


def test_selp_picks_by_predicate():
  """selp.T d, a, b, c: d = c ? a : b."""
  got = elementwise("setp.gt.s32 %p, %a, 0; selp.s32 %d, %a, %b, %p",
                    [("s32", [5, -5]), ("s32", [7, 7])], "s32")
  assert got.tolist() == [5, 7]


# ---- integers: wrap-around, signedness, shifts ------------------------------------------------------

def test_integer_add_and_mul_lo_wrap_around():
  """add/mul.lo on 32-bit types keep the low 32 bits (two's complement wrap-around)."""
  a = np.array([0x7FFFFFFF, -1, 65536], np.int32)
  b = np.array([1, 1, 65536], np.int32)
  assert elementwise("add.s32 %d, %a, %b", [("s32", a), ("s32", b)], "s32").tolist() == \
    [-2 ** 31, 0, 131072]
  assert elementwise("mul.lo.s32 %d, %a, %b", [("s32", a), ("s32", b)], "s32").tolist() == \
    [0x7FFFFFFF, -1, 0]


def test_mul_hi_and_wide_by_signedness():
  """mul.hi gives the high half of the 2n-bit product; mul.wide the whole product in 2n bits."""
  a, b = np.array([-2, 3], np.int32), np.array([3, 0x40000000], np.int32)
  assert elementwise("mul.hi.s32 %d, %a, %b", [("s32", a), ("s32", b)], "s32").tolist() == [-1, 0]
  assert elementwise("mul.hi.u32 %d, %a, %b", [("s32", a), ("s32", b)], "u32").tolist() == [2, 0]
  got = elementwise("mul.wide.s32 %d, %a, %b", [("s32", a), ("s32", b)], "s64")
  assert got.tolist() == [-6, 3 * 0x40000000]


def test_add_sat_s32_clamps():
  """add.sat.s32: the result is clamped to [MININT, MAXINT] instead of wrapping."""
  a, b = np.array([0x7FFFFFFF, -2 ** 31, 5], np.int32), np.array([1, -1, -7], np.int32)
  assert elementwise("add.sat.s32 %d, %a, %b", [("s32", a), ("s32", b)], "s32").tolist() == \
    [0x7FFFFFFF, -2 ** 31, -2]


def test_div_rem_truncate_toward_zero_by_signedness():
  """div.s32 truncates toward zero, rem.s32 has the dividend's sign; .u32 uses the raw bits."""
  a, b = np.array([-7, 7, -7], np.int32), np.array([2, -2, -2], np.int32)
  assert elementwise("div.s32 %d, %a, %b", [("s32", a), ("s32", b)], "s32").tolist() == [-3, -3, 3]
  assert elementwise("rem.s32 %d, %a, %b", [("s32", a), ("s32", b)], "s32").tolist() == [-1, 1, -1]
  got = elementwise("div.u32 %d, %a, %b", [("s32", a), ("s32", b)], "u32")
  assert got.tolist() == [(2 ** 32 - 7) // 2, 0, 0]


def test_shift_amounts_past_the_width_are_clamped():
  """shl/shr: amounts greater than the width are clamped to N: shl and shr.u give 0, shr.s
  fills with the sign bit."""
  a = np.array([1, -8, 8, -8, 0x1234], np.int32)
  n = np.array([32, 40, 40, 1, 4], np.uint32)
  assert elementwise("shl.b32 %d, %a, %b", [("s32", a), ("u32", n)], "s32").tolist() == \
    [0, 0, 0, -16, 0x12340]
  assert elementwise("shr.s32 %d, %a, %b", [("s32", a), ("u32", n)], "s32").tolist() == \
    [0, -1, 0, -4, 0x123]
  assert elementwise("shr.u32 %d, %a, %b", [("s32", a), ("u32", n)], "u32").tolist() == \
    [0, 0, 0, (2 ** 32 - 8) >> 1, 0x123]


def test_sixteen_bit_shifts_and_wrap():
  """16-bit integer ops wrap at 16 bits; shr.s16 is arithmetic."""
  a, n = np.array([-32768, 0x7FFF], np.int16), np.array([1, 1], np.uint32)
  got = elementwise("shr.s16 %d, %a, %b", [("s16", a), ("u32", n)], "s16")
  assert got.tolist() == [-16384, 0x3FFF]
  got = elementwise("add.s16 %d, %a, %a", [("s16", a)], "s16")
  assert got.tolist() == [0, -2]


# ---- conversions ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,want", [("rzi", [2, -2, 2, 3, 0]), ("rni", [3, -3, 2, 4, 0]),
                                       ("rmi", [2, -3, 2, 3, -1]), ("rpi", [3, -2, 3, 4, 0])])
def test_cvt_float_to_int_rounding_modes(mode, want):
  """cvt.{rzi,rni,rmi,rpi}.s32.f32: round toward zero / nearest even / -inf / +inf."""
  x = f32(2.7, -2.7, 2.5, 3.5, -0.25)
  assert elementwise(f"cvt.{mode}.s32.f32 %d, %a", [("f32", x)], "s32").tolist() == want


def test_cvt_float_to_int_saturates_and_nan_is_zero():
  """Float-to-integer cvt clamps to the destination range (.sat is implied); NaN gives 0."""
  x = f32(3e9, -3e9, NAN, INF, -INF)
  got = elementwise("cvt.rzi.s32.f32 %d, %a", [("f32", x)], "s32").tolist()
  assert got == [2 ** 31 - 1, -2 ** 31, 0, 2 ** 31 - 1, -2 ** 31]
  got = elementwise("cvt.rzi.u32.f32 %d, %a", [("f32", f32(-1.5, 5e9))], "u32").tolist()
  assert got == [0, 2 ** 32 - 1]


def test_cvt_int_to_float_rounding():
  """cvt.rn.f32.s32 rounds to nearest even; cvt.rz rounds toward zero."""
  x = np.array([16777217, 16777219, -16777217, 2 ** 31 - 1], np.int32)
  rn = elementwise("cvt.rn.f32.s32 %d, %a", [("s32", x)], "f32")
  assert rn.tolist() == [16777216.0, 16777220.0, -16777216.0, 2.0 ** 31]
  rz = elementwise("cvt.rz.f32.s32 %d, %a", [("s32", x)], "f32")
  assert rz.tolist() == [16777216.0, 16777218.0, -16777216.0, 2147483520.0]


def test_cvt_f32_to_f16_rounding_and_overflow():
  """cvt.rn.f16.f32: nearest even, overflow to inf; cvt.rz.f16.f32: overflow to the max 65504."""
  x = f32(70000.0, 65519.0, 65520.0, 1.0 + 2.0 ** -11, -70000.0, NAN)
  got = elementwise("cvt.rn.f16.f32 %d, %a", [("f32", x)], "f16")
  assert np.array_equal(got, x.astype(np.float16), equal_nan=True)
  got = elementwise("cvt.rz.f16.f32 %d, %a", [("f32", x)], "f16")
  assert got[:5].tolist() == [65504.0, 65504.0, 65504.0, 1.0, -65504.0]
  back = elementwise("cvt.f32.f16 %d, %a", [("f16", got[:5])], "f32")
  assert back.tolist() == got[:5].astype(np.float32).tolist()


def test_cvt_rn_bf16_f32_nearest_even_on_the_top_16_bits():
  """cvt.rn.bf16.f32: round the f32 to 8 significant bits, ties to even; NaN stays NaN."""
  x = f32(1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20, 3.0e38, NAN)
  got = elementwise("cvt.rn.bf16.f32 %d, %a", [("f32", x)], "bf16")
  want_values = [1.0, 1.0 + 2 * 2.0 ** -7, 1.0 + 2.0 ** -7]
  as_f32 = (got.astype(np.uint32) << 16).view(np.float32)
  assert as_f32[:3].tolist() == want_values
  assert np.isinf(as_f32[3]) is np.False_ and np.isnan(as_f32[4])


def test_cvt_rna_tf32_rounds_ties_away_and_clears_low_bits():
  """cvt.rna.tf32.f32: 10 explicit mantissa bits, ties away from zero, low 13 bits zero."""
  x = f32(1.0 + 2.0 ** -11, -(1.0 + 2.0 ** -11), 1.0 + 2.0 ** -12)
  got = elementwise("cvt.rna.tf32.f32 %d, %a", [("f32", x)], "u32")
  assert (got & 0x1FFF).tolist() == [0, 0, 0]
  assert got.view(np.float32).tolist() == [1.0 + 2.0 ** -10, -(1.0 + 2.0 ** -10), 1.0]


def test_cvt_integer_widening_and_narrowing():
  """cvt between integers: widening sign-/zero-extends by the source type, narrowing wraps,
  .sat clamps to the destination range."""
  x = np.array([-5, 300, 200], np.int32)
  assert elementwise("cvt.u8.s32 %d, %a", [("s32", x)], "u8").tolist() == [251, 44, 200]
  assert elementwise("cvt.sat.u8.s32 %d, %a", [("s32", x)], "u8").tolist() == [0, 255, 200]
  assert elementwise("cvt.s8.s32 %d, %a", [("s32", x)], "s16").tolist() == [-5, 44, -56]
  small = np.array([-5, 100], np.int8)
  assert elementwise("cvt.s32.s8 %d, %a", [("s8", small)], "s32").tolist() == [-5, 100]
  assert elementwise("cvt.u32.u8 %d, %a", [("s8", small)], "u32").tolist() == [251, 100]


def test_ld_s8_sign_extends_into_a_16_bit_register():
  """ld.global.s8 into a wider register sign-extends; ld.u8 zero-extends."""
  x = np.array([-3, 120], np.int8)
  assert elementwise("mov.b16 %d, %a", [("s8", x)], "s16").tolist() == [-3, 120]
  assert elementwise("mov.b16 %d, %a", [("u8", x.view(np.uint8))], "s16").tolist() == [253, 120]


def test_mov_packs_and_unpacks_halves():
  """mov.b32 d, {a, b} puts a in the low 16 bits; mov.b32 {a, b}, d splits low first."""
  a, b = np.array([0x1111, 0xBEEF], np.uint16), np.array([0x2222, 0x0001], np.uint16)
  got = elementwise("mov.b32 %d, {%a, %b}", [("u16", a), ("u16", b)], "u32")
  assert got.tolist() == [0x22221111, 0x0001BEEF]
  got = elementwise("mov.b32 {%h0, %h1}, %a; mov.b16 %d, %h1", [("u32", [0x22221111])], "u16",
                    extra_regs="\t.reg .b16 %h<2>;")
  assert got.tolist() == [0x2222]
