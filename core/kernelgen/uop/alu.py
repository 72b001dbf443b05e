"""Exact scalar semantics of every ALU op (IR.md): one definition shared by constant folding,
the reference interpreter and the simulators.

Values are Python numbers already held as their dtype holds them (`dtype.truncate`): bool, int,
or float. `exec_alu(op, dtype, operands)` returns the result as the node's dtype holds it: ints
wrap around; a float result is the exact result rounded once to the dtype (to nearest, ties to
even), with IEEE NaN/inf; MULACC on floats is fused (one rounding of the exact a*b+c);
transcendental ops are computed in float64, then rounded. Vector dtypes work lane-wise on tuples.
"""
from __future__ import annotations

import math
import operator
from fractions import Fraction
from functools import lru_cache
from typing import Callable

from ..dtype import DType, dtypes, from_bits, to_bits, truncate
from ..errors import DTypeError
from .ops import GroupOp, Ops

# ---- exact rounding of rationals ---------------------------------------------------------------

# significand bits (with the implicit one), smallest normal exponent, largest exponent
FLOAT_FORMAT = {"float16": (11, -14, 15), "bfloat16": (8, -126, 127),
                "float32": (24, -126, 127), "float64": (53, -1022, 1023)}


def _floor_log2(num: int, den: int) -> int:
  """floor(log2(num / den)) for positive ints."""
  e = num.bit_length() - den.bit_length()
  below = num < (den << e) if e >= 0 else (num << -e) < den
  return e - 1 if below else e


def round_exact(x: int | Fraction, dt: DType) -> float:
  """The rational `x` rounded once (to nearest, ties to even) to the float dtype `dt`."""
  if x == 0:
    return 0.0
  bits, emin, emax = FLOAT_FORMAT[dt.scalar.name]
  x = Fraction(x)
  sign = -1.0 if x < 0 else 1.0
  num, den = abs(x.numerator), x.denominator
  shift = max(_floor_log2(num, den), emin) - (bits - 1)   # the result is a multiple of 2**shift
  if shift >= 0:
    den <<= shift
  else:
    num <<= -shift
  q, r = divmod(num, den)
  if 2 * r > den or (2 * r == den and q & 1):
    q += 1
  if q.bit_length() + shift > emax + 1:
    return sign * math.inf
  return sign * math.ldexp(q, shift)


# ---- float ops: exact result, rounded by the caller ---------------------------------------------

def _fdiv(a: float, b: float) -> float:
  if b == 0:
    if a == 0 or math.isnan(a):
      return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)
  return a / b


def _fmax(a: float, b: float) -> float:
  if a != a or b != b:
    return math.nan
  if a == b == 0:
    return 0.0 if math.copysign(1.0, a) > 0 or math.copysign(1.0, b) > 0 else -0.0
  return a if a > b else b


def _fmin(a: float, b: float) -> float:
  if a != a or b != b:
    return math.nan
  if a == b == 0:
    return -0.0 if math.copysign(1.0, a) < 0 or math.copysign(1.0, b) < 0 else 0.0
  return a if a < b else b


def _exp2(x: float) -> float:
  try:
    return math.pow(2.0, x)
  except OverflowError:
    return math.inf


def _log2(x: float) -> float:
  if x == 0:
    return -math.inf
  if x < 0:
    return math.nan
  return math.log2(x) if math.isfinite(x) else x


def _sin(x: float) -> float:
  return math.sin(x) if math.isfinite(x) else math.nan


def _cos(x: float) -> float:
  return math.cos(x) if math.isfinite(x) else math.nan


def _sqrt(x: float) -> float:
  if x < 0:
    return math.nan
  return math.sqrt(x) if math.isfinite(x) else x


def _recip(x: float) -> float:
  return _fdiv(1.0, x)


def _ftrunc(x: float) -> float:
  if not math.isfinite(x):
    return x
  return math.copysign(float(math.trunc(x)), x)


def _fma_exact(a: float, b: float, c: float, dt: DType) -> float:
  """a*b + c rounded once to `dt` (the fused multiply-add of IEEE 754)."""
  if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
    return truncate(a * b + c, dt)
  if dt.name != "float64":
    # the product of two values of <= 24 significand bits is exact in a double; the sum is
    # exact when its rounding error (TwoSum) is zero, and then it is rounded only once
    p = a * b
    s = p + c
    bp = s - c
    err = (p - bp) + (c - (s - bp))
    if err == 0:
      return truncate(s, dt)
  exact = Fraction(a) * Fraction(b) + Fraction(c)
  if exact == 0:
    # an exact zero is +0, unless it is (-0) + (-0)
    negative = math.copysign(1.0, a) * math.copysign(1.0, b) < 0 and math.copysign(1.0, c) < 0
    return -0.0 if negative and a * b == 0 else 0.0
  return round_exact(exact, dt)


# ---- integer ops --------------------------------------------------------------------------------

def _idiv(a: int, b: int) -> int:
  """C division: truncate toward zero; x / 0 gives 0 (IR.md)."""
  if b == 0:
    return 0
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q


def _imod(a: int, b: int) -> int:
  """C remainder: the sign of the dividend; x % 0 gives 0 (IR.md)."""
  if b == 0:
    return 0
  return a - b * _idiv(a, b)


def _where(c, x, y):
  return x if c else y


def _int_mulacc(a: int, b: int, c: int) -> int:
  return a * b + c


# ---- the op tables: exact results before rounding to the dtype ---------------------------------

_COMPARE = {Ops.CMPLT: operator.lt, Ops.CMPEQ: operator.eq, Ops.CMPNE: operator.ne}

FLOAT_OPS: dict[Ops, Callable] = {
  Ops.ADD: operator.add, Ops.SUB: operator.sub, Ops.MUL: operator.mul, Ops.FDIV: _fdiv,
  Ops.MAX: _fmax, Ops.MIN: _fmin, Ops.NEG: operator.neg, Ops.EXP2: _exp2, Ops.LOG2: _log2,
  Ops.SIN: _sin, Ops.COS: _cos, Ops.SQRT: _sqrt, Ops.RECIP: _recip, Ops.TRUNC: _ftrunc,
  Ops.WHERE: _where}

INT_OPS: dict[Ops, Callable] = {
  Ops.ADD: operator.add, Ops.SUB: operator.sub, Ops.MUL: operator.mul, Ops.IDIV: _idiv,
  Ops.MOD: _imod, Ops.MAX: max, Ops.MIN: min, Ops.NEG: operator.neg, Ops.NOT: operator.invert,
  Ops.AND: operator.and_, Ops.OR: operator.or_, Ops.XOR: operator.xor, Ops.WHERE: _where,
  Ops.MULACC: _int_mulacc}

# bool arithmetic is arithmetic on 0/1 converted back to bool (!= 0): + is or, * is and
BOOL_OPS: dict[Ops, Callable] = {
  Ops.AND: operator.and_, Ops.OR: operator.or_, Ops.XOR: operator.xor, Ops.NOT: operator.not_,
  Ops.ADD: operator.or_, Ops.MUL: operator.and_, Ops.MAX: operator.or_, Ops.MIN: operator.and_,
  Ops.CMPLT: operator.lt, Ops.CMPEQ: operator.eq, Ops.CMPNE: operator.ne, Ops.WHERE: _where,
  Ops.MULACC: lambda a, b, c: (a and b) or c}


def _rounder(dt: DType) -> Callable:
  """The function that maps an exact result to the value `dt` holds."""
  if dt.kind == "b":
    return bool
  if dt.kind in "iu":
    mask, half = (1 << dt.bits) - 1, (1 << (dt.bits - 1)) if dt.kind == "i" else 0
    return lambda x: ((x + half) & mask) - half
  return lambda x: truncate(x, dt) if dt.name != "float64" else x


def _shift_fn(op: Ops, dt: DType, wrap: Callable) -> Callable:
  bits = dt.bits
  if op is Ops.SHL:
    return lambda a, b: wrap(a << (b % bits))
  return lambda a, b: a >> (b % bits)   # Python >> is arithmetic; unsigned values are >= 0


@lru_cache(maxsize=None)
def alu_fn(op: Ops, dtype: DType) -> Callable:
  """A function of the scalar operands computing `op` with result dtype `dtype` (scalar)."""
  dt = dtype.scalar
  if op in _COMPARE:
    return _COMPARE[op]
  wrap = _rounder(dt)
  if dt.kind in "iu" and op in (Ops.SHL, Ops.SHR):
    return _shift_fn(op, dt, wrap)
  if dt.kind == "f" and op is Ops.MULACC:
    return lambda a, b, c: _fma_exact(a, b, c, dt)
  table = {"b": BOOL_OPS, "i": INT_OPS, "u": INT_OPS, "f": FLOAT_OPS}[dt.kind]
  raw = table.get(op)
  if raw is None:
    kinds = "integer" if op in GroupOp.IntOnly else "float" if op in GroupOp.Transcendental \
      else "other"
    raise DTypeError(f"{op.name} is not defined on {dt}: it needs {kinds} operands; "
                     f"cast the operands first")
  if op is Ops.WHERE or dt == dtypes.float64 and op not in (Ops.ADD, Ops.SUB, Ops.MUL):
    return raw
  return lambda *args: wrap(raw(*args))


def exec_alu(op: Ops, dtype: DType, operands: list):
  """`op` applied to `operands` (Python values); `dtype` is the node's (result) dtype.

  For a vector dtype the operands are tuples (or scalars, broadcast) and the result is a tuple.
  """
  fn = alu_fn(op, dtype.scalar)
  if dtype.count == 1:
    return fn(*operands)
  lanes = [o if isinstance(o, tuple) else (o,) * dtype.count for o in operands]
  return tuple(fn(*args) for args in zip(*lanes))


# ---- conversions ----------------------------------------------------------------------------------

def exec_cast(value, src: DType, dst: DType):
  """`value` (of dtype `src`) converted to `dst` (IR.md CAST): float->int truncates toward zero
  and saturates (NaN -> 0); int->int wraps; to float rounds to nearest even; to bool is != 0."""
  src, dst = src.scalar, dst.scalar
  if dst.kind == "b":
    return value != 0
  if dst.kind == "f":
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 53:
      return round_exact(value, dst)
    return truncate(float(value), dst)
  return truncate(int(value) if src.kind == "b" else value, dst)


def exec_bitcast(value, src: DType, dst: DType):
  """Reinterpret the bits of `value` (dtype `src`, scalar or tuple) as `dst` (equal total width)."""
  if src.nbytes != dst.nbytes:
    raise DTypeError(f"bitcast needs dtypes of one width: {src} is {src.nbytes} bytes, {dst} is "
                     f"{dst.nbytes}; use cast to convert values instead")
  lanes = value if isinstance(value, tuple) else (value,)
  sbits, dbits = src.scalar.bits, dst.scalar.bits
  whole = 0
  for i, v in enumerate(lanes):
    whole |= to_bits(v, src.scalar) << (i * sbits)
  mask = (1 << dbits) - 1
  out = tuple(from_bits((whole >> (i * dbits)) & mask, dst.scalar) for i in range(dst.count))
  return out if dst.count > 1 else out[0]


__all__ = ["exec_alu", "exec_cast", "exec_bitcast", "alu_fn", "round_exact", "FLOAT_FORMAT"]
