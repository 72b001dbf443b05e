"""float64 exp2, log2 and sin from adds, multiplies and bit operations, for targets whose only
transcendental instructions are float32 approximations (PTX: ex2/lg2/sin.approx.f32); and
float32 sin and log2 for targets whose own are only roughly accurate (WGSL promises sin 2**-11
absolute on [-pi, pi] and nothing outside, log2 2**-21 absolute on [0.5, 2]; PTX's sin.approx.f32
2**-20.9 within 100 pi). float32 exp2 stays native: WGSL bounds it relatively (3 + 2|x| ulp).

Each is a range reduction done exactly (float64 in float64, float32 in float32) and a Taylor
polynomial with enough terms that its truncation error is below half an ulp; the results are
within a few ulp (float64 about 1e-15 relative; float32 sin 3 ulp, log2 4 ulp). Special values
(NaN, +-inf, 0, negatives for log2, overflow and subnormal results) are selected explicitly at
the end. Known limits: float64 sin of |x| >= 2**30 uses the float32 instruction on x rounded to
float32 (NaN beyond float32's range); float32 sin of finite |x| >= 2**17 uses the native one.
"""
from __future__ import annotations

import math
from fractions import Fraction

from ..dtype import DType, dtypes
from ..ops import Ops, UOp

LN2 = math.log(2.0)
# pi/2 to 160 bits, split into three float64 parts with 26 significant bits in the first two,
# so that k * part is exact for |k| < 2**27 (Cody-Waite reduction)
_PI = Fraction("3.14159265358979323846264338327950288419716939937510582097494459230781640628")
SIN_EXACT_LIMIT = 2.0 ** 30     # beyond it, sin falls back to float32 (the reduction loses bits)


def _split(value: Fraction, bits: int) -> float:
  exponent = math.frexp(float(value))[1]
  scale = Fraction(2) ** (bits - exponent)
  return float(Fraction(math.floor(value * scale)) / scale)


_P1 = _split(_PI / 2, 26)
_P2 = _split(_PI / 2 - Fraction(_P1), 26)
_P3 = float(_PI / 2 - Fraction(_P1) - Fraction(_P2))
# Taylor coefficients: e**t (1/k!), atanh series (1/(2k+1)), sin ((-1)**k/(2k+1)!), cos
_EXP = [1 / math.factorial(k) for k in range(14)]
_ATANH = [1 / (2 * k + 1) for k in range(12)]
_SIN = [(-1) ** k / math.factorial(2 * k + 1) for k in range(9)]
_COS = [(-1) ** k / math.factorial(2 * k) for k in range(10)]


def _int64_like(dt: DType) -> DType:
  return dtypes.int64 if dt.count == 1 else dtypes.int64.vec(dt.count)


def _poly(x: UOp, coefficients: list[float]) -> UOp:
  """sum(c[k] * x**k) by Horner's rule."""
  out = x.const_like(coefficients[-1])
  for c in reversed(coefficients[:-1]):
    out = out * x + c
  return out


def _pick(cond: UOp, like: UOp, a, b) -> UOp:
  """where(cond, a, b) for Python constants a and b, in like's dtype."""
  return cond.where(like.const_like(a), like.const_like(b))


def _round(x: UOp) -> UOp:
  """x rounded to the nearest integer (halves away from zero), as a float."""
  return UOp(Ops.TRUNC, x.dtype, (x + _pick(x.lt(0.0), x, -0.5, 0.5),))


def _pow2(k: UOp, dt: DType) -> UOp:
  """2**k as a float64 for int64 k in the normal exponent range."""
  return ((k + 1023) << 52).bitcast(dt)


def exp2_f64(x: UOp) -> UOp:
  """2**x: x = n + f with |f| <= 1/2, 2**f = e**(f ln 2) by polynomial, times 2**n in two
  steps (so subnormal results round once and large n overflows to inf)."""
  dt, i64 = x.dtype, _int64_like(x.dtype)
  c = x.alu(Ops.MAX, -1100.0).alu(Ops.MIN, 1100.0)
  n = _round(c)
  p = _poly((c - n) * LN2, _EXP)
  k = n.cast(i64)
  half = k >> 1
  out = p * _pow2(half, dt) * _pow2(k - half, dt)
  return x.ne(x).where(x, out)


def log2_f64(x: UOp) -> UOp:
  """log2(x): x = m * 2**e with m in [sqrt(1/2), sqrt(2)), log2(m) = 2 atanh(s) / ln 2 with
  s = (m - 1) / (m + 1) by its series; subnormals are scaled by 2**54 first."""
  dt, i64 = x.dtype, _int64_like(x.dtype)
  tiny = x.lt(2.0 ** -1022)
  bits = tiny.where(x * 2.0 ** 54, x).bitcast(i64)
  e = ((bits >> 52) & 0x7FF) - _pick(tiny, bits, 1023 + 54, 1023)
  m = ((bits & 0xFFFFFFFFFFFFF) | 0x3FF0000000000000).bitcast(dt)
  big = x.const_like(math.sqrt(2.0)).lt(m)
  m, e = big.where(m * 0.5, m), e + _pick(big, e, 1, 0)
  s = (m - 1.0) / (m + 1.0)
  out = e.cast(dt) + s * _poly(s * s, _ATANH) * (2 / LN2)
  out = x.eq(math.inf).where(x, x.eq(0.0).where(x.const_like(-math.inf), out))
  return x.ne(x).where(x, x.lt(0.0).where(x.const_like(math.nan), out))


def sin_f64(x: UOp) -> UOp:
  """sin(x): x = k pi/2 + r with |r| <= pi/4 (three-part pi/2), then +-sin(r) or +-cos(r) by
  the quadrant k mod 4. |x| >= 2**30, inf and NaN use the float32 instruction."""
  dt, i64 = x.dtype, _int64_like(x.dtype)
  exact = x.alu(Ops.MAX, -x).lt(SIN_EXACT_LIMIT)
  xc = exact.where(x, x.const_like(0.0))
  k = _round(xc * (2 / math.pi))
  r = xc - k * _P1 - k * _P2 - k * _P3
  r2 = r * r
  sin_r, cos_r = r * _poly(r2, _SIN), _poly(r2, _COS)
  quadrant = k.cast(i64)
  out = (quadrant & 1).eq(1).where(cos_r, sin_r)
  out = (quadrant & 2).eq(2).where(-out, out)
  f32 = dtypes.float32 if dt.count == 1 else dtypes.float32.vec(dt.count)
  fallback = UOp(Ops.SIN, f32, (x.cast(f32),)).cast(dt)
  return exact.where(out, fallback)


# float32 sin: pi/2 in five 7-bit parts and a float32 tail, so that k * part is exact for
# |k| < 2**17 and every subtraction but the last is exact (the reduced argument is off by less
# than 2**-40 + half an ulp; no fused multiply-add needed, and one changes nothing)
SIN32_EXACT_LIMIT = 2.0 ** 17   # beyond it (finite), sin32 falls back to the native instruction
NATIVE = "native"               # arg of a SIN that stays the target's instruction (not rewritten)
_P32 = []
_rest = _PI / 2
for _ in range(5):
  _P32.append(_split(_rest, 7))
  _rest -= Fraction(_P32[-1])
_P32.append(_split(_rest, 24))
_SIN32 = [(-1) ** k / math.factorial(2 * k + 1) for k in range(1, 5)]
_COS32 = [(-1) ** k / math.factorial(2 * k) for k in range(1, 6)]


def sin_f32(x: UOp) -> UOp:
  """sin(x) in float32 (float16 computed in float32): x = k pi/2 + r with |r| <= pi/4 (six-part
  pi/2), then +-sin(r) or +-cos(r) by k mod 4 (Taylor polynomials). NaN and +-inf give NaN,
  -0.0 gives -0.0; finite |x| >= SIN32_EXACT_LIMIT uses the native instruction."""
  if x.dtype.scalar != dtypes.float32:
    f32 = dtypes.float32.vec(x.dtype.count)
    return sin_f32(x.cast(f32)).cast(x.dtype)
  i32 = dtypes.int32.vec(x.dtype.count)
  size = x.alu(Ops.MAX, -x)
  exact = size.lt(SIN32_EXACT_LIMIT)
  xc = exact.where(x, x.const_like(0.0))
  k = _round(xc * (2 / math.pi))
  r = xc
  for part in _P32:
    r = r - k * part
  r2 = r * r
  sin_r = r + r * r2 * _poly(r2, _SIN32)
  cos_r = 1.0 + r2 * _poly(r2, _COS32)
  quadrant = k.cast(i32)
  out = (quadrant & 1).eq(1).where(cos_r, sin_r)
  out = (quadrant & 2).eq(2).where(-out, out)
  native = size.lt(math.inf).where(UOp(Ops.SIN, x.dtype, (x,), NATIVE), x.const_like(math.nan))
  return exact.where(x.eq(0.0).where(x, out), native)   # +-0 keep their sign


def log2_f32(x: UOp) -> UOp:
  """log2(x) in float32 (float16 computed in float32), as log2_f64: x = m * 2**e with m in
  [sqrt(1/2), sqrt(2)), log2(m) = 2 atanh(s) / ln 2 with s = (m - 1) / (m + 1); subnormals are
  scaled by 2**24 first. Relative error a few ulp also near x = 1 (WGSL promises only 2**-21
  absolute on [0.5, 2])."""
  if x.dtype.scalar != dtypes.float32:
    return log2_f32(x.cast(dtypes.float32.vec(x.dtype.count))).cast(x.dtype)
  i32 = dtypes.int32.vec(x.dtype.count)
  tiny = x.lt(2.0 ** -126)
  bits = tiny.where(x * 2.0 ** 24, x).bitcast(i32)
  e = ((bits >> 23) & 0xFF) - _pick(tiny, bits, 127 + 24, 127)
  m = ((bits & 0x7FFFFF) | 0x3F800000).bitcast(x.dtype)
  big = x.const_like(math.sqrt(2.0)).lt(m)
  m, e = big.where(m * 0.5, m), e + _pick(big, e, 1, 0)
  s = (m - 1.0) / (m + 1.0)
  out = e.cast(x.dtype) + s * _poly(s * s, _ATANH[:6]) * (2 / LN2)
  out = x.eq(math.inf).where(x, x.eq(0.0).where(x.const_like(-math.inf), out))
  return x.ne(x).where(x, x.lt(0.0).where(x.const_like(math.nan), out))


# op -> its float64 decomposition
FLOAT64 = {Ops.EXP2: exp2_f64, Ops.LOG2: log2_f64, Ops.SIN: sin_f64}
# op -> its precise float32 (and float16) decomposition
FLOAT32 = {Ops.SIN: sin_f32, Ops.LOG2: log2_f32}
