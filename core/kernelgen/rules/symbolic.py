"""Symbolic simplification: constant folding, identities, range-based folding and index math.

`symbolic` is one PatternMatcher; `simplify(sink)` rewrites a graph with it to a fixed point.
Rules are grouped by topic, each under a comment stating its identity. Integer rules follow C
division semantics (IR.md: `//` truncates toward zero, `%` has the dividend's sign) and
two's-complement wrap-around: a rule that relies on exact arithmetic first checks with value
ranges (rules/ranges.py) that nothing can wrap. Float rules never change a single bit of any
result (NaN, inf and -0.0 included): `x * 0`, `x - x`, `x + 0.0` and `x / x` stay for floats.

Sums of integers are kept in one canonical form: terms in order of first appearance, like
terms combined (`x*2 + x*3 -> x*5`), negative terms subtracted, one constant last (rules/sums.py).
"""
from __future__ import annotations

import math

from ..uop.alu import exec_alu, exec_bitcast, exec_cast
from ..dtype import dtypes, truncate
from ..errors import DTypeError
from ..uop.ops import GroupOp, Ops, UOp
from ..uop.pattern import PatternMatcher, UPat, graph_rewrite
from .ranges import dtype_range, fits, value_range
from .sums import MAX_TERMS, build_sum, fold_sum, high_of, linear_sum, low_of  # noqa: F401 (re-exported)

INTS = frozenset(dtypes.integers)
FLOATS = frozenset(dtypes.floats)
INTS_BOOL = INTS | {dtypes.bool}


def _all_const(u: UOp) -> bool:
  for s in u.src:     # a loop, not all(generator): this runs on every ALU node
    if s.op is not Ops.CONST:
      return False
  return len(u.src) > 0


def _not_const(u: UOp) -> bool:
  return u.op is not Ops.CONST


def _neg_zero(u: UOp) -> bool:
  return isinstance(u.arg, float) and u.arg == 0 and math.copysign(1.0, u.arg) < 0


def _all_ones(u: UOp) -> bool:
  return u.dtype.kind in "iu" and u.arg == truncate(-1, u.dtype)


def _pos(u: UOp) -> bool:
  return u.arg > 0


def _nonzero(u: UOp) -> bool:
  return u.arg != 0


def _unit(u: UOp) -> bool:
  return u.arg in (1, -1)


def _pos_zero(u: UOp) -> bool:
  return u.arg == 0 and not _neg_zero(u)


def _one(u: UOp) -> bool:
  return u.arg == 1 and u.dtype.kind != "b"


def _icon(value) -> UPat:
  return UPat.const(INTS, value)


def _cpat(name: str | None, dtype, custom) -> UPat:
  """A constant of `dtype` (a dtype set) for which `custom(node)` holds."""
  return UPat(Ops.CONST, dtype, name=name, custom=custom)


x, y = UPat.var("x"), UPat.var("y")
c1, c2 = UPat.cvar("c1"), UPat.cvar("c2")
ix, iy = UPat.var("x", INTS), UPat.var("y", INTS)
pc1, pc2 = _cpat("c1", INTS, _pos), _cpat("c2", INTS, _pos)


# ---- constant folding ------------------------------------------------------------------------

def _fold_alu(x: UOp) -> UOp | None:
  try:
    value = exec_alu(x.op, x.dtype, [s.arg for s in x.src])
  except DTypeError:
    return None   # an ill-typed node: left for the verifier to name
  return UOp.const(x.dtype, value)


def _fold_cast(x: UOp, c: UOp) -> UOp:
  return UOp.const(x.dtype, exec_cast(c.arg, c.dtype, x.dtype))


def _fold_bitcast(x: UOp, c: UOp) -> UOp | None:
  if x.dtype.nbytes != c.dtype.nbytes:
    return None
  return UOp.const(x.dtype, exec_bitcast(c.arg, c.dtype, x.dtype))


def _fold_range(x: UOp) -> UOp | None:
  """An integer or bool op whose value range is a single value is that constant."""
  lo, hi = value_range(x)
  return UOp.const(x.dtype, lo) if lo == hi else None


def _bool_absorb(o: UOp, x: UOp, c: UOp) -> UOp:
  """b & c and b | c for a constant bool c: b itself, or c."""
  return x if c.arg == (o.op is Ops.AND) else c


def _lossless_cast(x: UOp, y: UOp) -> UOp | None:
  """cast(cast(y, mid), dst) -> cast(y, dst) when `mid` holds every value of y's dtype."""
  mid, src = x.src[0].dtype, y.dtype
  if mid.kind not in "iu" or src.kind not in "iub":
    return None
  lo, hi = dtype_range(src)
  mlo, mhi = dtype_range(mid)
  return y.cast(x.dtype) if mlo <= lo and hi <= mhi else None


# ---- decisions by value ranges ---------------------------------------------------------------

def _max_by_range(x: UOp, y: UOp) -> UOp | None:
  return x if low_of(x) >= high_of(y) else y if low_of(y) >= high_of(x) else None


def _min_by_range(x: UOp, y: UOp) -> UOp | None:
  return x if high_of(x) <= low_of(y) else y if high_of(y) <= low_of(x) else None


def _mod_small(x: UOp, y: UOp) -> UOp | None:
  """x % y -> x when |x| < |y| always (C remainder keeps the dividend then)."""
  bound = min(abs(low_of(y)), abs(high_of(y))) if low_of(y) > 0 or high_of(y) < 0 else 0
  return x if max(abs(low_of(x)), abs(high_of(x))) < bound else None


# ---- division and remainder ------------------------------------------------------------------

def _div_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """(x // c1) // c2 -> x // (c1*c2) for positive constants whose product fits."""
  prod = c1.arg * c2.arg
  return x // prod if prod <= dtype_range(x.dtype)[1] else None


def _mod_mod(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """(x % c1) % c2 -> x % c2 when c2 divides c1 (|x % c1| keeps |x|'s residue mod c2)."""
  return x % c2 if c1.arg % c2.arg == 0 else None


def _mod_then_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """(x % c1) // c2 -> (x // c2) % (c1 // c2) when c2 divides c1 (c1, c2 > 0)."""
  return (x // c2) % (c1.arg // c2.arg) if c1.arg % c2.arg == 0 else None


def _mul_div(m: UOp, x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """(x*c1) // c2 -> x*(c1/c2) or x // (c2/c1) when one divides the other and x*c1 never wraps."""
  if not fits(m):
    return None
  if c1.arg % c2.arg == 0:
    return x * (c1.arg // c2.arg)
  return x // (c2.arg // c1.arg) if c1.arg > 0 and c2.arg % c1.arg == 0 else None


def _mul_mod(m: UOp, x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """(x*c1) % c2 -> 0 when c2 divides c1 and x*c1 never wraps."""
  return m.const_like(0) if c1.arg % c2.arg == 0 and fits(m) else None


def _split_divmod(d: UOp, x: UOp, c: UOp) -> UOp | None:
  """x = c*Q + R with R's coefficients in 0..c-1: x // c -> Q + R // c and x % c -> R % c,
  when x and R are never negative and nothing in x wraps (then floor and C division agree)."""
  if low_of(x) < 0:
    return None
  lin = linear_sum(x, exact=True)
  if lin is None:
    return None
  terms, const = lin
  n = c.arg
  quot = {t: k // n for t, k in terms.items() if k >= n}
  if not quot and const < n:
    return None
  rem_terms = {t: (k % n if k > 0 else k) for t, k in terms.items()}
  rem = build_sum(x.dtype, rem_terms, const % n if const > 0 else const)
  if low_of(rem) < 0 or not fits(rem):
    return None
  if high_of(rem) >= n and any(k > n and k % n for k in terms.values()):
    return None   # a term split between the quotient and the remainder: no simpler
  if d.op is Ops.MOD:
    return rem if high_of(rem) < n else rem % c
  q = build_sum(x.dtype, quot, const // n if const > 0 else 0)
  return q if high_of(rem) < n else q + rem // c


# _drop_low_bits (issue 42): PP-OCRv4 det's head input, a concat of four maps upsampled x8, x4,
# x2, x1 (8 outputs a thread), divided every output's index again: 79 divisions and remainders a
# thread, 24 with this rule. SwiftShader's Subzero divides lane by lane (lavapipe's LLVM by a
# multiply): natively, that kernel alone, CPU ms best / median of 7 interleaved, load ~8, 34.0 /
# 35.2 -> 16.0 / 16.5; in det's call (one process, off -> on, load ~18.7) 32.0 -> 26.0, the call's
# launches CPU 537.8 / 543.2 -> 517.5 / 530.3; lavapipe that kernel 6.9 -> 6.9, three others
# 3-12 % less. 4 of det's 79 kernels change (its three elementwise kernels, a 3x3 conv at 10x10).
def _drop_low_bits(d: UOp, x: UOp, c: UOp) -> UOp | None:
  """x = g*Q + r, g dividing c and every coefficient of x, 0 < r < g: x // c -> (x - r) // c and
  x % c -> (x - r) % c + r, when x - r is never negative and nothing in x wraps (a thread's
  upcast outputs base + j share base's quotients: base // c, not (base + j) // c per j)."""
  lin = linear_sum(x, exact=True)
  if lin is None or not lin[0] or not fits(x):
    return None
  terms, const = lin
  g = math.gcd(c.arg, *terms.values())
  if g < 2 or not 0 < const % g:
    return None
  base = build_sum(x.dtype, terms, const - const % g)
  if low_of(base) < 0 or not fits(base):
    return None
  return base // c if d.op is Ops.IDIV else base % c + base.const_like(const % g)


# ---- the rule set ----------------------------------------------------------------------------

symbolic = PatternMatcher([
  # ---- constant folding (exact dtype semantics: kernelgen.alu) ----
  # op(c1, c2, ...) -> c
  (UPat(GroupOp.ALU, name="x", custom=_all_const), _fold_alu),
  # cast(c) -> c
  (UPat(Ops.CAST, name="x", src=(UPat.cvar("c"),)), _fold_cast),
  # bitcast(c) -> c
  (UPat(Ops.BITCAST, name="x", src=(UPat.cvar("c"),)), _fold_bitcast),

  # ---- canonical order ----
  # c op x -> x op c  (commutative ops: constants go to the right)
  (UPat(GroupOp.Commutative, name="o", src=(c1, UPat(name="x", custom=_not_const))),
   lambda o, c1, x: o.replace(src=(x, c1))),

  # ---- identities on integers ----
  # x + 0 -> x
  (UPat(Ops.ADD, src=(ix, _icon(0))), lambda x: x),
  # x - 0 -> x
  (UPat(Ops.SUB, src=(ix, _icon(0))), lambda x: x),
  # x - x -> 0
  (UPat(Ops.SUB, INTS, src=(x, x), name="s"), lambda s, x: s.const_like(0)),
  # x * 0 -> 0
  (UPat(Ops.MUL, src=(ix, _icon(0)), name="m"), lambda m, x: m.const_like(0)),
  # x // 1 -> x
  (UPat(Ops.IDIV, src=(ix, _icon(1))), lambda x: x),
  # x // -1 -> -x
  (UPat(Ops.IDIV, src=(ix, _icon(-1))), lambda x: -x),
  # x % 1 -> 0 and x % -1 -> 0
  (UPat(Ops.MOD, src=(ix, _cpat(None, INTS, _unit)), name="m"),
   lambda m, x: m.const_like(0)),
  # x ^ x -> 0
  (UPat(Ops.XOR, INTS_BOOL, src=(x, x), name="o"), lambda o, x: o.const_like(0)),
  # x & 0 -> 0
  (UPat(Ops.AND, src=(ix, _icon(0)), name="o"), lambda o, x: o.const_like(0)),
  # x & ~0 -> x
  (UPat(Ops.AND, src=(ix, _cpat(None, INTS, _all_ones))), lambda x: x),
  # x | 0 -> x and x ^ 0 -> x
  (UPat((Ops.OR, Ops.XOR), src=(ix, _icon(0))), lambda x: x),
  # x << 0 -> x and x >> 0 -> x
  (UPat((Ops.SHL, Ops.SHR), src=(ix, _icon(0))), lambda x: x),
  # x == x -> True, x != x -> False (not for floats: NaN != NaN)
  (UPat((Ops.CMPEQ, Ops.CMPNE), name="o", src=(UPat.var("x", INTS_BOOL), x)),
   lambda o, x: o.const_like(o.op is Ops.CMPEQ)),

  # ---- identities on every dtype ----
  # x * 1 -> x  (exact for floats too: NaN stays NaN, -0.0 stays -0.0)
  (UPat(Ops.MUL, src=(x, _cpat(None, None, _one))), lambda x: x),
  # x + -0.0 -> x and x - 0.0 -> x  (floats; x + 0.0 is not x when x is -0.0)
  (UPat(Ops.ADD, src=(x, _cpat(None, FLOATS, _neg_zero))), lambda x: x),
  (UPat(Ops.SUB, src=(x, _cpat(None, FLOATS, _pos_zero))), lambda x: x),
  # x / 1.0 -> x
  (UPat(Ops.FDIV, src=(x, UPat.const(FLOATS, 1.0))), lambda x: x),
  # -(-x) -> x
  (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(x,)),)), lambda x: x),
  # ~~x -> x  (bitwise not of ints, logical not of bools)
  (UPat(Ops.NOT, src=(UPat(Ops.NOT, src=(x,)),)), lambda x: x),
  # x & x -> x, x | x -> x, max(x, x) -> x, min(x, x) -> x
  (UPat((Ops.AND, Ops.OR, Ops.MAX, Ops.MIN), src=(x, x)), lambda x: x),
  # x < x -> False  (floats too: NaN < NaN is False)
  (UPat(Ops.CMPLT, name="o", src=(x, x)), lambda o, x: o.const_like(False)),
  # b & True -> b, b | False -> b, b & False -> False, b | True -> True
  (UPat((Ops.AND, Ops.OR), name="o", src=(x, UPat.cvar("c", dtypes.bool))), _bool_absorb),

  # ---- where ----
  # where(True, x, y) -> x and where(False, x, y) -> y
  (UPat(Ops.WHERE, src=(UPat.cvar("c"), x, y)), lambda c, x, y: x if c.arg else y),
  # where(c, x, x) -> x
  (UPat(Ops.WHERE, src=(UPat.var("c"), x, x)), lambda c, x: x),
  # where(c, True, False) -> c
  (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.const(dtypes.bool, True),
                        UPat.const(dtypes.bool, False))), lambda c: c),
  # where(!c, x, y) -> where(c, y, x)
  (UPat(Ops.WHERE, src=(UPat(Ops.NOT, src=(UPat.var("c"),)), x, y)),
   lambda c, x, y: c.where(y, x)),

  # ---- gated loads ----
  # load(buf, i, False, alt) -> alt  (never read: WGSL rejects a constant index out of bounds)
  (UPat(Ops.LOAD, src=(UPat.var("b"), UPat.var("i"), UPat.const(dtypes.bool, False),
                       UPat.var("alt"))), lambda b, i, alt: alt),
  # load(buf, i, True, alt) -> load(buf, i)
  (UPat(Ops.LOAD, name="ld", src=(UPat.var("b"), UPat.var("i"), UPat.const(dtypes.bool, True),
                                  UPat.var("alt"))), lambda ld, b, i, alt: b.load(i, dtype=ld.dtype)),

  # ---- casts ----
  # cast(cast(x, mid), dst) -> cast(x, dst) when mid holds every value of x's dtype
  (UPat(Ops.CAST, name="x", src=(UPat(Ops.CAST, src=(y,)),)), _lossless_cast),

  # ---- decided by value ranges ----
  # x -> c when x's range is the single value c (comparisons, where, div/mod, ...)
  (UPat(GroupOp.ALU | {Ops.CAST}, INTS_BOOL, name="x"), _fold_range),
  # max(x, y) -> x when x >= y always (and the mirror); min likewise
  (UPat(Ops.MAX, src=(ix, iy)), _max_by_range),
  (UPat(Ops.MIN, src=(ix, iy)), _min_by_range),
  # x % y -> x when |x| < |y| always
  (UPat(Ops.MOD, src=(ix, iy)), _mod_small),

  # ---- division and remainder (index math) ----
  # (x // c1) // c2 -> x // (c1*c2)
  (UPat(Ops.IDIV, src=(UPat(Ops.IDIV, src=(ix, pc1)), pc2)), _div_div),
  # (x % c1) % c2 -> x % c2 when c2 divides c1
  (UPat(Ops.MOD, src=(UPat(Ops.MOD, src=(ix, pc1)), pc2)), _mod_mod),
  # (x % c1) // c2 -> (x // c2) % (c1 // c2) when c2 divides c1
  (UPat(Ops.IDIV, src=(UPat(Ops.MOD, src=(ix, pc1)), pc2)), _mod_then_div),
  # (x * c1) // c2 -> x * (c1 / c2), or x // (c2 / c1)
  (UPat(Ops.IDIV, src=(UPat(Ops.MUL, name="m", src=(ix, UPat.cvar("c1", INTS))),
                       _cpat("c2", INTS, _nonzero))), _mul_div),
  # (x * c1) % c2 -> 0 when c2 divides c1
  (UPat(Ops.MOD, src=(UPat(Ops.MUL, name="m", src=(ix, UPat.cvar("c1", INTS))), pc2)), _mul_mod),
  # (g*Q + r) // c -> (g*Q) // c, (g*Q + r) % c -> (g*Q) % c + r  (g | c, 0 < r < g)
  (UPat((Ops.IDIV, Ops.MOD), name="d", src=(ix, _cpat("c", INTS, _pos))), _drop_low_bits),
  # (a*c + b) // c -> a + b // c and (a*c + b) % c -> b % c  (a*c + b >= 0, b >= 0)
  (UPat((Ops.IDIV, Ops.MOD), name="d", src=(ix, _cpat("c", INTS, _pos))),
   _split_divmod),

  # ---- products and sums of integers ----
  # (x * c1) * c2 -> x * (c1*c2)
  (UPat(Ops.MUL, src=(UPat(Ops.MUL, src=(ix, c1)), c2)), lambda x, c1, c2: x * (c1.arg * c2.arg)),
  # sums: like terms combined (x*2 + x*3 -> x*5), constants summed on the right,
  # (x//c)*c + x%c -> x and ((x//c)%d)*c + x%c -> x % (c*d)
  (UPat((Ops.ADD, Ops.SUB), INTS, name="s"), fold_sum),
])


def simplify(sink: UOp) -> UOp:
  """The graph under `sink`, simplified with `symbolic` to a fixed point."""
  return graph_rewrite(sink, symbolic, memo=True)


__all__ = ["symbolic", "simplify"]
