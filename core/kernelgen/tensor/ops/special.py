"""Special functions as Tensor methods (numpy / torch spellings): erf, the inverse and hyperbolic
trigonometric functions, log1p and expm1 accurate near 0, atan2, square. Each is built from the
IR's primitives (exp2, log2, sqrt, reciprocal, select), so it fuses like any elementwise op and
differentiates through them; half-precision inputs compute in float32 (elementwise.float_math).
The ONNX importer's Erf, Atan, Asin, ... use these methods.
"""
from __future__ import annotations

import math

from ...dtype import dtypes
from ..operands import TensorOps, coerce, float_of, public_names
from .elementwise import float_math

ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
               -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erf(x):
  """A Taylor series below 0.5, Numerical Recipes' erfc (relative error < 1.2e-7) above."""
  a = x.abs()
  a2 = a * a
  series, term = a, a
  for k in range(1, 8):
    term = term * a2 * -1 / k
    series = series + term / (2 * k + 1)
  series = series * (2 / math.sqrt(math.pi))
  t = 1 / (1 + 0.5 * a)
  poly = t * 0 + ERFC_COEFFS[-1]
  for c in reversed(ERFC_COEFFS[:-1]):
    poly = poly * t + c
  erfc = t * (-a2 + poly).exp()
  return x.sign() * (a < 0.5).where(series, 1 - erfc)


def _atan(x):
  """|x| > 1 by pi/2 - atan(1/|x|), two half-angle steps, then the Taylor series."""
  a = x.abs()
  big = a > 1
  r = big.where(1 / big.where(a, 1), a)
  for _ in range(2):
    r = r / (1 + (1 + r * r).sqrt())
  r2, term, total = r * r, r, r
  for k in range(1, 9):
    term = term * r2 * -1
    total = total + term / (2 * k + 1)
  total = total * 4
  return x.sign() * big.where(math.pi / 2 - total, total)


def _asin(x):
  return (x.abs() == 1).where(x * (math.pi / 2), _atan(x / (1 - x * x).sqrt()))


def _acos(x):
  return math.pi / 2 - _asin(x)


def _sinh(x):
  return (x.exp() - (-x).exp()) * 0.5


def _cosh(x):
  return (x.exp() + (-x).exp()) * 0.5


def _asinh(x):
  return x.sign() * (x.abs() + (x * x + 1).sqrt()).log()


def _acosh(x):
  return (x + (x * x - 1).sqrt()).log()


def _atanh(x):
  return ((1 + x) / (1 - x)).log() * 0.5


def _log1p(x):
  """log(1 + x): 2 atanh(x / (2 + x)) by its series on -0.5..1 (|s| <= 1/3, no cancellation, so
  no reliance on the shader compiler keeping (1 + x) - 1 as written), log(1 + x) outside."""
  s = x / (2 + x)
  s2 = s * s
  poly = s2 * 0 + 1 / 19
  for k in range(8, -1, -1):
    poly = poly * s2 + 1 / (2 * k + 1)
  return ((x < -0.5) | (x > 1)).where((1 + x).log(), 2 * s * poly)


def _expm1(x):
  """exp(x) - 1 accurate near 0 (Kahan): x where exp(x) rounds to 1."""
  u = x.exp()
  ratio = (u - 1) * (x / u.log())
  return (u == 1).where(x, (u - 1 == -1).where(-1.0, (u.isinf()).where(u, ratio)))


def _atan2(y, x):
  """The angle of (x, y) in -pi..pi, numpy's arctan2 (signed zeros aside)."""
  base = _atan(y / (x == 0).where(1, x))
  left = x < 0
  out = left.where((y >= 0).where(base + math.pi, base - math.pi), base)
  axis = (x == 0).where((y > 0).where(math.pi / 2, (y < 0).where(-math.pi / 2, 0.0)), out)
  return (x.isnan() | y.isnan()).where(math.nan, axis)


@public_names
class SpecialOps(TensorOps):
  """Tensor methods: erf, atan, asin, acos, sinh, cosh, asinh, acosh, atanh, log1p, expm1,
  atan2, square."""
  __slots__ = ()
  erf = float_math(_erf, "The Gauss error function (relative error below 1.2e-7).")
  atan = float_math(_atan, "The inverse tangent, in -pi/2..pi/2. Also `arctan`.")
  asin = float_math(_asin, "The inverse sine, in -pi/2..pi/2 (NaN outside -1..1). Also `arcsin`.")
  acos = float_math(_acos, "The inverse cosine, in 0..pi (NaN outside -1..1). Also `arccos`.")
  sinh = float_math(_sinh, "The hyperbolic sine, (exp(x) - exp(-x)) / 2.")
  cosh = float_math(_cosh, "The hyperbolic cosine, (exp(x) + exp(-x)) / 2.")
  asinh = float_math(_asinh, "The inverse hyperbolic sine. Also `arcsinh`.")
  acosh = float_math(_acosh, "The inverse hyperbolic cosine (NaN below 1). Also `arccosh`.")
  atanh = float_math(_atanh, "The inverse hyperbolic tangent (NaN outside -1..1, +-inf at +-1). "
                     "Also `arctanh`.")
  log1p = float_math(_log1p, "log(1 + x), accurate for x near 0.")
  expm1 = float_math(_expm1, "exp(x) - 1, accurate for x near 0.")
  arcsin, arccos, arctan, arcsinh, arccosh, arctanh = asin, acos, atan, asinh, acosh, atanh

  def atan2(self, other):
    """The angle of the point (x=other, y=self) in -pi..pi, numpy's arctan2(self, other): the
    two broadcast and promote as numpy, the result is a float dtype (float32 for ints). Also
    `arctan2`.

    Raises ShapeError when the shapes do not broadcast."""
    y, x = coerce(self, other)
    out = float_of(y.dtype)
    work = dtypes.float32 if out in (dtypes.float16, dtypes.bfloat16) else out
    return _atan2(y.cast(work), x.cast(work)).cast(out)

  arctan2 = atan2

  def square(self):
    """x * x elementwise, same shape and dtype."""
    return self * self
