"""Lane semantics of PTX's arithmetic, logic, comparison and conversion instructions.

Each rule is a function of lane values (ints are unsigned bit patterns of the instruction width,
floats are exact values of the instruction format) returning the exact result; results of float
ops are then rounded to the format by the caller. Semantics follow the PTX ISA.
"""
from __future__ import annotations

import math
from fractions import Fraction

from . import numeric as nm

_fma = getattr(math, "fma", None)


# ---- integers --------------------------------------------------------------------------------

def int_binary(op: str, cls: str, w: int, hi_lo: str):
  """The lane function of a two-operand integer op of width `w` ("s" class = signed)."""
  M = (1 << w) - 1
  sg = (lambda x: nm.signed(x, w)) if cls == "s" else (lambda x: x)
  rules = {
    "add": lambda a, b: (a + b) & M,
    "sub": lambda a, b: (a - b) & M,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "min": lambda a, b: a if sg(a) <= sg(b) else b,
    "max": lambda a, b: a if sg(a) >= sg(b) else b,
    "div": lambda a, b: _idiv(sg(a), sg(b), M) & M,
    "rem": lambda a, b: _irem(sg(a), sg(b)) & M,
    # shl/shr: the amount is an unsigned 32-bit value; amounts >= w shift everything out
    "shl": lambda a, b: (a << b) & M if b < w else 0,
    "shr": (lambda a, b: (sg(a) >> min(b, w - 1)) & M) if cls == "s"
           else (lambda a, b: a >> b if b < w else 0),
  }
  if op == "mul":
    return _int_mul(cls, w, hi_lo, sg)
  return rules[op]


def _int_mul(cls: str, w: int, hi_lo: str, sg):
  M = (1 << w) - 1
  if hi_lo == "hi":
    return lambda a, b: (sg(a) * sg(b) >> w) & M
  if hi_lo == "wide":
    return lambda a, b: (sg(a) * sg(b)) & ((1 << 2 * w) - 1)
  return lambda a, b: (a * b) & M


def int_mad(cls: str, w: int, hi_lo: str):
  mul = _int_mul(cls, w, hi_lo, (lambda x: nm.signed(x, w)) if cls == "s" else (lambda x: x))
  M = (1 << (2 * w if hi_lo == "wide" else w)) - 1
  return lambda a, b, c: (mul(a, b) + c) & M


def _idiv(a: int, b: int, M: int) -> int:
  """C division (toward zero). Division by zero is unspecified in PTX; we give all ones."""
  if b == 0:
    return M
  q = abs(a) // abs(b)
  return -q if (a < 0) != (b < 0) else q


def _irem(a: int, b: int) -> int:
  """C remainder (sign of the dividend). x rem 0 is unspecified in PTX; we give x."""
  if b == 0:
    return a
  r = abs(a) % abs(b)
  return -r if a < 0 else r


def int_unary(op: str, cls: str, w: int):
  M = (1 << w) - 1
  return {"neg": lambda a: -a & M, "not": lambda a: ~a & M,
          "abs": lambda a: abs(nm.signed(a, w)) & M,
          "popc": lambda a: bin(a).count("1"),
          "clz": lambda a: w - a.bit_length(),
          "brev": lambda a: int(format(a, f"0{w}b")[::-1], 2)}[op]


def saturating(op: str, w: int):
  """add.sat.s32 / sub.sat.s32: the signed result clamped to the type's range."""
  lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
  sign = -1 if op == "sub" else 1
  return lambda a, b: max(lo, min(hi, nm.signed(a, w) + sign * nm.signed(b, w))) & ((1 << w) - 1)


# ---- floats: exact results, rounded by the caller -------------------------------------------

def nan_of(a: float, b: float, r: float) -> float:
  """The NaN an add/sub/mul/div gives (`r` its NaN result): the first NaN operand's, quieted, else
  the operation's own. Fixed here because CPython's a + b of two NaNs keeps either one, by
  code path (its specialized and generic float ops differ), and the spec must not."""
  return a + a if a != a else b + b if b != b else r


def fdiv(a: float, b: float) -> float:
  try:
    r = a / b
    return r if r == r else nan_of(a, b, r)
  except ZeroDivisionError:
    if a != a or a == 0:
      return nm.NAN
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _fmin(a: float, b: float) -> float:
  """min: the non-NaN operand if one is NaN; NaN if both; -0.0 is less than +0.0."""
  if a != a:
    return b
  if b != b or a < b:
    return a
  if a == b and math.copysign(1.0, a) < 0:
    return a
  return b


def _fmax(a: float, b: float) -> float:
  if a != a:
    return b
  if b != b or a > b:
    return a
  if a == b and math.copysign(1.0, a) > 0:
    return a
  return b


def _sqrt(a: float) -> float:
  return math.sqrt(a) if a >= 0 or a != a else nm.NAN


def _rsqrt(a: float) -> float:
  if a == 0:
    return math.copysign(math.inf, a)
  return 1.0 / math.sqrt(a) if a > 0 else (a if a != a else nm.NAN)


def _ex2(a: float) -> float:
  try:
    return 2.0 ** a
  except OverflowError:
    return math.inf


def _lg2(a: float) -> float:
  if a == 0:
    return -math.inf
  if a != a or a < 0:
    return nm.NAN
  return math.log2(a)


def _trig(fn):
  return lambda a: fn(a) if math.isfinite(a) else nm.NAN


def _float_fma(fmt: str):
  """fma with a single rounding: exact in double when possible, else exact rationals."""
  def fma(a: float, b: float, c: float) -> float:
    if fmt == "f64":
      if _fma is not None:
        return _fma(a, b, c)
      return _exact_fma(a, b, c, "f64", "rn")
    p = a * b            # exact for f32/f16/bf16 operands
    s = p + c
    if not math.isfinite(s):
      return s
    z = s - p
    if (p - (s - z)) + (c - z) != 0 and _near_tie(s, fmt):
      return _exact_fma(a, b, c, fmt, "rn")
    return s
  return fma


def _near_tie(s: float, fmt: str) -> bool:
  """Whether rounding the double `s` to `fmt` could be a double-rounding error (a tie)."""
  man = nm.FORMATS[fmt][0]
  m, e = math.frexp(s)
  scaled = math.ldexp(abs(m), man + 1)
  return scaled - math.floor(scaled) == 0.5 or abs(s) < 2.0 ** -120


def _exact_fma(a, b, c, fmt, mode):
  if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
    return a * b + c
  exact = Fraction(a) * Fraction(b) + Fraction(c)
  if exact == 0:
    return a * b + c     # the sign of a zero result follows IEEE
  return nm.round_rational(exact, fmt, mode)


FLOAT_UNARY = {"neg": lambda a: -a, "abs": abs, "sqrt": _sqrt, "rsqrt": _rsqrt, "ex2": _ex2,
               "lg2": _lg2, "sin": _trig(math.sin), "cos": _trig(math.cos), "tanh": math.tanh,
               "rcp": lambda a: fdiv(1.0, a)}
FLOAT_BINARY = {"add": lambda a, b: r if (r := a + b) == r else nan_of(a, b, r),
                "sub": lambda a, b: r if (r := a - b) == r else nan_of(a, b, r),
                "mul": lambda a, b: r if (r := a * b) == r else nan_of(a, b, r),
                "div": fdiv, "min": _fmin, "max": _fmax}
_EXACT = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b}


def directed(op: str, fmt: str, mode: str):
  """add/sub/mul/div/fma with .rz/.rm/.rp: exact rational arithmetic, then one rounding."""
  if op in ("fma", "mad"):
    return lambda a, b, c: _exact_fma(a, b, c, fmt, mode)
  fast, exact = FLOAT_BINARY[op], _EXACT[op]

  def run(a, b):
    r = fast(a, b)
    if not math.isfinite(r) or r == 0 or (op == "div" and b == 0):
      return r
    return nm.round_rational(exact(Fraction(a), Fraction(b)), fmt, mode)
  return run


# ---- comparisons (setp) -------------------------------------------------------------------------

def _unordered(a, b):
  return a != a or b != b


FLOAT_CMP = {
  "eq": lambda a, b: a == b, "ne": lambda a, b: a != b and a == a and b == b,
  "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
  "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
  "equ": lambda a, b: a == b or _unordered(a, b), "neu": lambda a, b: a != b,
  "ltu": lambda a, b: not a >= b, "leu": lambda a, b: not a > b,
  "gtu": lambda a, b: not a <= b, "geu": lambda a, b: not a < b,
  "num": lambda a, b: a == a and b == b, "nan": _unordered,
}


def int_compare(cmp: str, cls: str, w: int):
  """setp on integers: eq/ne/lt/le/gt/ge by the type's signedness; lo/ls/hi/hs unsigned."""
  if cmp in ("lo", "ls", "hi", "hs"):
    cmp, cls = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}[cmp], "u"
  if cls == "s":
    top = 1 << w
    half = 1 << (w - 1)
    key = lambda x: x - top if x >= half else x
  else:
    key = lambda x: x
  base = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
          "lt": lambda a, b: key(a) < key(b), "le": lambda a, b: key(a) <= key(b),
          "gt": lambda a, b: key(a) > key(b), "ge": lambda a, b: key(a) >= key(b)}
  return base.get(cmp)


# ---- conversions (cvt) ------------------------------------------------------------------------

def cvt(dst: str, src: str, rnd: str | None, saturate: bool, flush: bool):
  """The lane function of `cvt.rnd.sat.dst.src`, or None for an unsupported combination."""
  from .operands import TYPES
  (dc, dw), (sc, sw) = TYPES[dst], TYPES[src]
  if dst == "tf32" and src == "f32":
    return lambda a: nm.f32_bits(nm.round_rational(a, "tf32", rnd or "rna"))
  if sc == "f" and dc == "f":
    return _cvt_float(dst, src, rnd, saturate, flush)
  if sc == "f" and dc in "us":
    return _cvt_float_int(dc, dw, rnd or "rzi", flush)
  if sc in "usb" and dc == "f":
    return _cvt_int_float(dst, sc, sw, rnd or "rn", saturate)
  if sc in "usb" and dc in "usb":
    return _cvt_int_int(dc, dw, sc, sw, saturate)
  return None


def _cvt_float(dst, src, rnd, saturate, flush):
  if rnd in ("rni", "rzi", "rmi", "rpi"):
    def conv(a):
      return nm.round_int(a, rnd)
  elif dst == src or (nm.FORMATS[dst][0] >= nm.FORMATS[src][0]
                      and nm.FORMATS[dst][2] >= nm.FORMATS[src][2]):
    def conv(a):
      return a               # widening is exact
  elif rnd in (None, "rn"):
    def conv(a):
      return nm.round_to(a, dst)
  else:
    def conv(a):
      return nm.round_rational(a, dst, rnd) if math.isfinite(a) else a
  post = nm.sat if saturate else None
  if flush:
    return lambda a: _post(conv(nm.ftz(a)), post, dst)
  return conv if post is None else (lambda a: post(conv(a)))


def _post(x, post, dst):
  x = nm.ftz(x) if dst == "f32" else x
  return post(x) if post else x


def _cvt_float_int(dc: str, dw: int, rnd: str, flush: bool):
  """Float to integer: round by `rnd`, NaN -> 0, clamp to the destination range (always)."""
  lo, hi = (-(1 << (dw - 1)), (1 << (dw - 1)) - 1) if dc == "s" else (0, (1 << dw) - 1)
  M = (1 << dw) - 1

  def conv(a):
    if a != a:
      return 0
    if math.isinf(a):
      return (hi if a > 0 else lo) & M
    r = int(nm.round_int(a, rnd if rnd in ("rni", "rzi", "rmi", "rpi") else "rni"))
    return max(lo, min(hi, r)) & M
  return conv


def _cvt_int_float(dst: str, sc: str, sw: int, rnd: str, saturate: bool):
  def conv(a):
    v = nm.signed(a, sw) if sc == "s" else a
    if rnd == "rn" and abs(v) < 1 << 53:
      r = nm.round_to(float(v), dst)
    else:
      r = nm.round_rational(v, dst, rnd)
    return nm.sat(r) if saturate else r
  return conv


def _cvt_int_int(dc: str, dw: int, sc: str, sw: int, saturate: bool):
  M = (1 << dw) - 1
  lo, hi = (-(1 << (dw - 1)), (1 << (dw - 1)) - 1) if dc == "s" else (0, M)

  def conv(a):
    v = nm.signed(a, sw) if sc == "s" else a
    return (max(lo, min(hi, v)) if saturate else v) & M
  return conv
