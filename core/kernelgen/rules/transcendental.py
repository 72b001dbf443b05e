"""float64 exp2, log2, sin and cos from adds, multiplies and bit operations, for targets whose only
transcendental instructions are float32 approximations (PTX: ex2/lg2/sin.approx.f32); and
float32 sin, cos and log2 for targets whose own are only roughly accurate (WGSL promises sin 2**-11
absolute on [-pi, pi] and nothing outside, log2 2**-21 absolute on [0.5, 2]; PTX's sin.approx.f32
2**-20.9 within 100 pi). float32 exp2 stays native: WGSL bounds it relatively (3 + 2|x| ulp).

Each is a range reduction done exactly (float64 in float64, float32 in float32) and a Taylor
polynomial with enough terms that its truncation error is below half an ulp; the results are
within a few ulp (float64 about 1e-15 relative; float32 sin 3 ulp over all of float32, log2
4 ulp). Special values (NaN, +-inf, 0, negatives for log2, overflow and subnormal results) are
selected explicitly at the end. cos is sin's reduction with the quadrant shifted by one (never
sin(pi/2 - x), which rounds pi/2 - x first). Known limit: float64 sin and cos of |x| >= 2**30
use the float32 instruction on x rounded to float32 (NaN beyond float32's range).
"""
from __future__ import annotations

import math
from fractions import Fraction

from ..dtype import DType, dtypes
from ..uop.ops import Ops, UOp

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


def _trig_f64(x: UOp, op: Ops, shift: int) -> UOp:
  """sin(x + shift pi/2): x = k pi/2 + r with |r| <= pi/4 (three-part pi/2), then +-sin(r) or
  +-cos(r) by the quadrant k + shift mod 4. |x| >= 2**30, inf and NaN use the float32 `op`."""
  dt, i64 = x.dtype, _int64_like(x.dtype)
  exact = x.alu(Ops.MAX, -x).lt(SIN_EXACT_LIMIT)
  xc = exact.where(x, x.const_like(0.0))
  k = _round(xc * (2 / math.pi))
  r = xc - k * _P1 - k * _P2 - k * _P3
  r2 = r * r
  sin_r, cos_r = r * _poly(r2, _SIN), _poly(r2, _COS)
  quadrant = k.cast(i64) + shift
  out = (quadrant & 1).eq(1).where(cos_r, sin_r)
  out = (quadrant & 2).eq(2).where(-out, out)
  f32 = dtypes.float32 if dt.count == 1 else dtypes.float32.vec(dt.count)
  fallback = UOp(op, f32, (x.cast(f32),)).cast(dt)
  return exact.where(out, fallback)


def sin_f64(x: UOp) -> UOp:
  """sin(x) in float64 (_trig_f64)."""
  return _trig_f64(x, Ops.SIN, 0)


def cos_f64(x: UOp) -> UOp:
  """cos(x) = sin(x + pi/2) in float64: sin_f64's reduction with the quadrant shifted by one."""
  return _trig_f64(x, Ops.COS, 1)


# float32 sin below SIN32_EXACT_LIMIT: pi/2 in six 7-bit parts and a float32 tail, so that
# k * part is exact for |k| < 2**17 (a fused multiply-add changes nothing but the tail's) and the
# first subtractions, where cancellation happens, are exact; the later ones round values within
# 2**-10 of the reduced argument. At and above the limit: Payne-Hanek on integers
SIN32_EXACT_LIMIT = 2.0 ** 17
_P32 = []
_rest = _PI / 2
for _ in range(6):
  _P32.append(_split(_rest, 7))
  _rest -= Fraction(_P32[-1])
_P32.append(_split(_rest, 24))
_HALF_PI = [_split(_PI / 2, 12), float(_PI / 2 - Fraction(_split(_PI / 2, 12)))]
_SIN32 = [(-1) ** k / math.factorial(2 * k + 1) for k in range(1, 5)]
_COS32 = [(-1) ** k / math.factorial(2 * k) for k in range(1, 6)]


# 2/pi as 32-bit words, after one word of zeros: bit t of the table (from the top) weighs
# 2**(31 - t); enough for the 96-bit window that float32's largest exponent needs
_TWO_OVER_PI = [int(Fraction(2) / _PI * 2 ** (32 * w) % 2 ** 32) for w in range(8)]


def _u32(x: UOp, value: int) -> UOp:
  return x.const_like(value)


def _large_reduce(size: UOp) -> tuple[UOp, UOp]:
  """size * 2/pi for finite size >= 2**17 (Payne-Hanek): the quadrant mod 4 (uint32) and the
  fraction in [-1/2, 1/2] (float32). size = m * 2**(e - 23) with m a 24-bit integer, so only a
  96-bit window of 2/pi's bits, from bit e - 24, matters mod 4 (the bits after it change the
  result by less than 2**-70); m * window mod 2**96 holds the quadrant in its top two bits and
  the fraction below, computed in 16-bit limbs."""
  bits = size.bitcast(dtypes.uint32.vec(size.dtype.count))
  start = (bits >> 23) - 120                 # table bit of the window's top: exponent + 7
  word, shift = start >> 5, start & 31
  table = [_u32(bits, w) for w in _TWO_OVER_PI]

  def pick(offset: int) -> UOp:
    out = table[offset]
    for w in range(1, len(table) - offset):
      out = word.eq(w).where(table[w + offset], out)
    return out
  words, aligned, back = [pick(i) for i in range(4)], shift.eq(0), _u32(shift, 32) - shift
  window = [aligned.where(a, (a << shift) | (b >> back)) for a, b in zip(words, words[1:])]
  w = [limb for word_ in reversed(window) for limb in (word_ & 0xFFFF, word_ >> 16)]
  m = (bits & 0x7FFFFF) | 0x800000
  columns = [[] for _ in w]
  for i, mi in enumerate((m & 0xFFFF, m >> 16)):
    for j, wj in enumerate(w):
      product = mi * wj
      for column, part in ((i + j, product & 0xFFFF), (i + j + 1, product >> 16)):
        if column < len(w):
          columns[column].append(part)
  limbs, carry = [], None
  for terms in columns:
    acc = terms[0]
    for t in terms[1:] + ([carry] if carry is not None else []):
      acc = acc + t
    limbs.append(acc & 0xFFFF)
    carry = acc >> 16
  # bits 95..94: quadrant; 93..0: fraction. Past one half: next quadrant, fraction 2**94 - f
  quadrant, upper = limbs[5] >> 14, (limbs[5] & 0x2000).ne(0)
  negated, carry = [], _u32(bits, 1)
  for limb in limbs:
    value = (limb ^ 0xFFFF) + carry
    negated.append(value & 0xFFFF)
    carry = value >> 16
  limbs = [upper.where(n, limb) for n, limb in zip(negated, limbs)]
  # fraction bits 93..70, 69..46, 45..22 as exact float32 pieces (the rest is below 2**-72)
  p1 = ((limbs[5] & 0x3FFF) << 10) | (limbs[4] >> 6)
  p2 = ((limbs[4] & 0x3F) << 18) | (limbs[3] << 2) | (limbs[2] >> 14)
  p3 = ((limbs[2] & 0x3FFF) << 10) | (limbs[1] >> 6)
  f = (p3.cast(size.dtype) * 2.0 ** -72 + p2.cast(size.dtype) * 2.0 ** -48) \
    + p1.cast(size.dtype) * 2.0 ** -24
  return quadrant + upper.where(_u32(bits, 1), _u32(bits, 0)), upper.where(-f, f)


def _trig_f32(x: UOp, shift: int) -> UOp:
  """sin(x + shift pi/2) in float32 for finite x: x = k pi/2 + r with |r| <= pi/4, then +-sin(r)
  or +-cos(r) by k + shift mod 4 (Taylor polynomials). |x| < 2**17: Cody-Waite with a six-part
  pi/2; larger: Payne-Hanek (_large_reduce) on |x|. Also gives whether x is finite."""
  u32 = dtypes.uint32.vec(x.dtype.count)
  size = x.alu(Ops.MAX, -x)
  exact = size.lt(SIN32_EXACT_LIMIT)
  finite = size.lt(math.inf)
  xc = exact.where(x, x.const_like(0.0))
  k = _round(xc * (2 / math.pi))
  r = xc
  for part in _P32:
    r = r - k * part
  big_q, big_f = _large_reduce(finite.where(size, x.const_like(SIN32_EXACT_LIMIT)))
  negative = x.lt(0.0)
  # on |x|: sin(-y) = -sin(y), i.e. quadrant -q and fraction -f
  big_q = negative.where(_u32(big_q, 0) - big_q, big_q)
  big_f = negative.where(-big_f, big_f)
  r = exact.where(r, big_f * _HALF_PI[0] + big_f * _HALF_PI[1])
  quadrant = exact.where(k.cast(dtypes.int32.vec(x.dtype.count)).bitcast(u32), big_q)
  if shift:
    quadrant = quadrant + shift
  r2 = r * r
  sin_r = r + r * r2 * _poly(r2, _SIN32)
  cos_r = 1.0 + r2 * _poly(r2, _COS32)
  out = (quadrant & 1).eq(1).where(cos_r, sin_r)
  return (quadrant & 2).eq(2).where(-out, out), finite


def sin_f32(x: UOp) -> UOp:
  """sin(x) in float32 (float16 computed in float32), by _trig_f32. NaN and +-inf give NaN,
  +-0.0 keep their sign."""
  if x.dtype.scalar != dtypes.float32:
    return sin_f32(x.cast(dtypes.float32.vec(x.dtype.count))).cast(x.dtype)
  out, finite = _trig_f32(x, 0)
  out = x.eq(0.0).where(x, out)                                 # +-0 keep their sign
  return finite.where(out, x.const_like(math.nan))


def cos_f32(x: UOp) -> UOp:
  """cos(x) = sin(x + pi/2) in float32 (float16 computed in float32): sin_f32's reduction with
  the quadrant shifted by one, so x is never rounded first. NaN and +-inf give NaN."""
  if x.dtype.scalar != dtypes.float32:
    return cos_f32(x.cast(dtypes.float32.vec(x.dtype.count))).cast(x.dtype)
  out, finite = _trig_f32(x, 1)
  return finite.where(out, x.const_like(math.nan))


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
FLOAT64 = {Ops.EXP2: exp2_f64, Ops.LOG2: log2_f64, Ops.SIN: sin_f64, Ops.COS: cos_f64}
# op -> its precise float32 (and float16) decomposition
FLOAT32 = {Ops.SIN: sin_f32, Ops.COS: cos_f32, Ops.LOG2: log2_f32}
