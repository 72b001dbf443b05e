"""The Tensor's elementwise operations: Python's operators and elementwise math, built from the
lazy ALU ops and casts.

Everything here composes a few IR ops: floor `//` and `%` from C IDIV/MOD, exp/log from EXP2/LOG2,
tan from SIN/COS, tanh/sigmoid/silu from exp, pow from exp2/log2 (or repeated squaring for
integer exponents). Reductions are in reduce.py, matmul in linalg.py. The methods are grouped in
the mixin classes at the end of the module (ArithmeticOps, MathOps) that `Tensor` lists among its
bases; they build results from Tensor methods on `self` and construct tensors with `type(self)`,
so this module does not import tensor.py.
"""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import DTypeError
from ...uop.ops import Ops
from ..operands import TensorOps, public_names, coerce, float_of

LOG2_E = 1 / math.log(2)
LN_2 = math.log(2)
FLOAT_RESULT = ("\n\nElementwise, same shape; the result is a float dtype: the input's for floats "
                "(float16 and bfloat16 compute in float32), float32 for integers and bool.")


# ---- arithmetic ------------------------------------------------------------------------------

def add(a, b): return a._binary(Ops.ADD, b)
def radd(a, b): return a._binary(Ops.ADD, b, True)
def sub(a, b): return a._binary(Ops.SUB, b)
def rsub(a, b): return a._binary(Ops.SUB, b, True)
def mul(a, b): return a._binary(Ops.MUL, b)
def rmul(a, b): return a._binary(Ops.MUL, b, True)


def _check_numeric(*xs):
  for x in xs:
    if isinstance(x, TensorOps) and x.dtype == dtypes.bool:
      raise DTypeError("this arithmetic is not defined for bool tensors: cast to int32 first")


def truediv(a, b, reverse=False):
  x, y = (b, a) if reverse else (a, b)
  x, y = coerce(x, y)
  dtype = float_of(x.dtype)
  return x.cast(dtype)._binary(Ops.FDIV, y.cast(dtype))


def _floor_int(q: TensorOps, r: TensorOps, y: TensorOps) -> TensorOps:
  """C quotient q, remainder r of x/y -> the floor quotient (numpy //)."""
  adjust = (r != 0) & ((r < 0) != (y < 0))
  return q - adjust.cast(q.dtype)


def floordiv(a, b, reverse=False):
  x, y = coerce(*((b, a) if reverse else (a, b)))
  _check_numeric(x)
  if x.dtype.is_float():
    return (x / y).floor()
  q, r = x._binary(Ops.IDIV, y), x._binary(Ops.MOD, y)
  return q if x.dtype.is_unsigned() else _floor_int(q, r, y)


def mod(a, b, reverse=False):
  x, y = coerce(*((b, a) if reverse else (a, b)))
  _check_numeric(x)
  if x.dtype.is_float():
    r = x - (x / y).trunc() * y
  else:
    r = x._binary(Ops.MOD, y)
    if x.dtype.is_unsigned():
      return r
  fix = (r != 0) & ((r < 0) != (y < 0))
  return fix.where(r + y, r)


def pow_(a, b, reverse=False):
  x, y = (b, a) if reverse else (a, b)
  if isinstance(y, int) and not isinstance(y, bool) and isinstance(x, TensorOps) and 0 <= y < 64:
    return _int_pow(x, y)
  x, y = coerce(x, y)
  if not x.dtype.is_float():
    return _int_pow_tensor(x, y)
  return _float_pow(x, y)


def _int_pow(x: TensorOps, n: int) -> TensorOps:
  """x ** n for a small non-negative Python int n: repeated squaring, exact for ints."""
  result, base = x._const(1), x
  while n:
    if n & 1:
      result = result * base
    n >>= 1
    if n:
      base = base * base
  return result


def _int_pow_tensor(x: TensorOps, y: TensorOps) -> TensorOps:
  result, base, e = x._const(1), x, y
  for _ in range(x.dtype.bits):
    result = ((e & 1) != 0).where(result * base, result)
    base, e = base * base, e >> 1
  return (y < 0).where(x._const(0), result) if not y.dtype.is_unsigned() else result


def _float_pow(x: TensorOps, y: TensorOps) -> TensorOps:
  if x.dtype in (dtypes.float16, dtypes.bfloat16):   # one rounding, not one per step
    return _float_pow(x.cast(dtypes.float32), y.cast(dtypes.float32)).cast(x.dtype)
  mag = (y * x.abs().log2()).exp2()
  y_int = y.trunc() == y
  odd = y_int & ((y * 0.5).trunc() != y * 0.5)
  neg = y_int.where(odd.where(-mag, mag), x._const(math.nan))
  out = (x < 0).where(neg, mag)
  zero_base = (y < 0).where(x._const(math.inf), x._const(0))   # explicit: GPUs' log2(0) varies
  return (y == 0).where(x._const(1), (x == 0).where(zero_base, out))


def neg(x):
  """-x elementwise, same dtype (for bool: logical not)."""
  if x.dtype == dtypes.bool:
    return x.logical_not()
  return x._unary(Ops.NEG)


def abs_(x):
  """|x| elementwise, same dtype (unsigned and bool values are returned as they are; the most
  negative int wraps, as in numpy)."""
  if x.dtype.is_unsigned() or x.dtype == dtypes.bool:
    return x
  return (x < 0).where(-x, x)


def sign(x):
  """-1, 0 or 1 by the sign of each element, same dtype (NaN stays NaN; unsigned: 0 or 1)."""
  one = x._const(1)
  s = (x > 0).where(one, (x < 0).where(x._const(-1) if not x.dtype.is_unsigned() else one,
                                       x._const(0)))
  return (x != x).where(x, s) if x.dtype.is_float() else s


# ---- comparisons and bitwise -----------------------------------------------------------------

def lt(a, b): return a._binary(Ops.CMPLT, b)
def gt(a, b): return a._binary(Ops.CMPLT, b, True)
def eq(a, b): return a._binary(Ops.CMPEQ, b)
def ne(a, b): return a._binary(Ops.CMPNE, b)
def le(a, b): return (a < b) | (a == b)
def ge(a, b): return (a > b) | (a == b)


def _check_bitwise(*xs):
  for x in xs:
    if isinstance(x, TensorOps) and x.dtype.is_float() or isinstance(x, float):
      raise DTypeError(f"bitwise ops need integer or bool tensors, got "
                       f"{x.dtype if isinstance(x, TensorOps) else 'float'}: cast first "
                       f"(or bitcast to reinterpret the bits)")


def _bitwise(op: Ops):
  def method(a, b, reverse=False):
    _check_bitwise(a, b)
    return a._binary(op, b, reverse)
  return method


def invert(x):
  _check_bitwise(x)
  return x._unary(Ops.NOT)


def logical_not(x):
  """Elementwise not of the values' truth (nonzero is true), a bool tensor."""
  return x.cast(dtypes.bool)._unary(Ops.NOT)


def _shift(left: bool):
  def method(a, b, reverse=False):
    _check_bitwise(a, b)
    x, y = coerce(*((b, a) if reverse else (a, b)))
    if x.dtype == dtypes.bool:
      x, y = x.cast(dtypes.int32), y.cast(dtypes.int32)
    bits = x.dtype.bits
    amount = y & (bits - 1)
    shifted = x._binary(Ops.SHL if left else Ops.SHR, amount)
    big = (y >= bits) | (y < 0) if not y.dtype.is_unsigned() else y >= bits
    fill = x._const(0) if left or x.dtype.is_unsigned() else \
      (x < 0).where(x._const(-1), x._const(0))
    return big.where(fill, shifted)
  return method


# ---- min/max and friends ---------------------------------------------------------------------

def maximum(a, b):
  """The elementwise larger of self and `other` (a Tensor or a Python number), broadcast and
  promoted as numpy.maximum.

  Raises ShapeError when the shapes do not broadcast."""
  return a._binary(Ops.MAX, b) if isinstance(a, TensorOps) else b._binary(Ops.MAX, a, True)


def minimum(a, b):
  """The elementwise smaller of self and `other` (a Tensor or a Python number), broadcast and
  promoted as numpy.minimum.

  Raises ShapeError when the shapes do not broadcast."""
  return a._binary(Ops.MIN, b) if isinstance(a, TensorOps) else b._binary(Ops.MIN, a, True)


def clip(x, lo=None, hi=None):
  """The values limited to [lo, hi] (numpy.clip; either bound may be None, a number or a Tensor that
  broadcasts): maximum(x, lo) then minimum(..., hi). Also `clamp`."""
  out = x
  if lo is not None:
    out = maximum(out, lo)
  if hi is not None:
    out = minimum(out, hi)
  return out


# ---- transcendental and activation functions --------------------------------------------------

def float_math(fn, doc: str | None = None):
  """Run `fn` in float32 for half types (then cast back), and in float for ints; `doc` is the
  method's docstring (a user's help text), with a note on the result's dtype added."""
  def method(x, *args):
    out = float_of(x.dtype)
    work = dtypes.float32 if out in (dtypes.float16, dtypes.bfloat16) else out
    return fn(x.cast(work), *args).cast(out)
  method.__name__ = fn.__name__
  if doc is not None:
    method.__doc__ = doc + FLOAT_RESULT
  return method


def _exp2(x): return x._unary(Ops.EXP2)
def _log2(x): return x._unary(Ops.LOG2)
def _sin(x): return x._unary(Ops.SIN)
def _sqrt(x): return x._unary(Ops.SQRT)
def _reciprocal(x): return x._unary(Ops.RECIP)
def _exp(x): return (x * LOG2_E)._unary(Ops.EXP2)
def _log(x): return x._unary(Ops.LOG2) * LN_2
def _cos(x): return x._unary(Ops.COS)
def _tan(x): return _sin(x) / _cos(x)
def _rsqrt(x): return _sqrt(x)._unary(Ops.RECIP)
def _sigmoid(x): return _reciprocal(1 + _exp(-x))
def _tanh(x): return 2 * _sigmoid(2 * x) - 1
def _silu(x): return x * _sigmoid(x)


def relu(x):
  """max(x, 0) elementwise, same dtype."""
  return maximum(x, 0) if x.dtype != dtypes.bool else x


def trunc(x):
  """The values rounded toward zero, same dtype (integers are returned as they are)."""
  return x._unary(Ops.TRUNC) if x.dtype.is_float() else x


def floor(x):
  """The largest integer <= each value, same dtype (integers are returned as they are)."""
  if not x.dtype.is_float():
    return x
  t = x.trunc()
  return t - (x < t).cast(x.dtype)


def ceil(x):
  """The smallest integer >= each value, same dtype (integers are returned as they are)."""
  if not x.dtype.is_float():
    return x
  t = x.trunc()
  return t + (x > t).cast(x.dtype)


def round_(x):
  """Round half to even, as numpy.round."""
  if not x.dtype.is_float():
    return x
  f = (x + 0.5).floor()
  tie = (f - x) == 0.5
  odd = (f * 0.5).trunc() != f * 0.5
  return (tie & odd).where(f - 1, f)


def isnan(x):
  """True where a value is NaN, a bool tensor of the same shape (all False for integer dtypes)."""
  return x != x if x.dtype.is_float() else x._const(False, dtypes.bool)


def isinf(x):
  """True where a value is +inf or -inf, a bool tensor of the same shape (all False for integer
  dtypes)."""
  return (x.abs() == math.inf) if x.dtype.is_float() else x._const(False, dtypes.bool)


# ---- the mixins Tensor lists among its bases ---------------------------------------------------

class ArithmeticOps(TensorOps):
  """Python's operators: arithmetic (numpy's promotion, floor // and %), comparisons, bitwise
  ops and shifts, each with its reflected form."""
  __slots__ = ()
  __add__, __radd__, __sub__, __rsub__, __mul__, __rmul__ = add, radd, sub, rsub, mul, rmul
  __truediv__, __floordiv__, __mod__, __pow__ = truediv, floordiv, mod, pow_
  __lt__, __gt__, __le__, __ge__, __eq__, __ne__ = lt, gt, le, ge, eq, ne
  __and__, __or__, __xor__ = _bitwise(Ops.AND), _bitwise(Ops.OR), _bitwise(Ops.XOR)
  __lshift__, __rshift__ = _shift(True), _shift(False)
  __neg__, __abs__, __invert__ = neg, abs_, invert
  __hash__ = object.__hash__      # defining __eq__ would otherwise make tensors unhashable

  def __rtruediv__(self, other): return truediv(self, other, True)
  def __rfloordiv__(self, other): return floordiv(self, other, True)
  def __rmod__(self, other): return mod(self, other, True)
  def __rpow__(self, other): return pow_(self, other, True)
  def __rand__(self, other): return _bitwise(Ops.AND)(self, other, True)
  def __ror__(self, other): return _bitwise(Ops.OR)(self, other, True)
  def __rxor__(self, other): return _bitwise(Ops.XOR)(self, other, True)
  def __rlshift__(self, other): return _shift(True)(self, other, True)
  def __rrshift__(self, other): return _shift(False)(self, other, True)


@public_names
class MathOps(TensorOps):
  """Elementwise math: abs, sign, min/max, clip, exp/log, trigonometry, activations, rounding
  (special.py and activations.py have the rest)."""
  __slots__ = ()
  abs, sign, neg, maximum, minimum, clip = abs_, sign, neg, maximum, minimum, clip
  exp = float_math(_exp, "e ** x.")
  log = float_math(_log, "The natural logarithm (NaN below 0, -inf at 0).")
  exp2 = float_math(_exp2, "2 ** x.")
  log2 = float_math(_log2, "The base-2 logarithm (NaN below 0, -inf at 0).")
  sqrt = float_math(_sqrt, "The square root (NaN below 0).")
  rsqrt = float_math(_rsqrt, "1 / sqrt(x).")
  reciprocal = float_math(_reciprocal, "1 / x.")
  sin = float_math(_sin, "The sine of x (radians).")
  cos = float_math(_cos, "The cosine of x (radians).")
  tan = float_math(_tan, "The tangent of x (radians), sin(x) / cos(x).")
  sigmoid = float_math(_sigmoid, "The logistic function 1 / (1 + exp(-x)).")
  tanh = float_math(_tanh, "The hyperbolic tangent, 2 sigmoid(2x) - 1.")
  silu = float_math(_silu, "SiLU (swish): x * sigmoid(x).")
  relu = relu
  trunc, floor, ceil, round = trunc, floor, ceil, round_
  isnan, isinf, logical_not = isnan, isinf, logical_not


