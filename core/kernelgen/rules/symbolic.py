"""Symbolic simplification: constant folding, identities, range-based folding and index math.

`symbolic` is one PatternMatcher; `simplify(sink)` rewrites a graph with it to a fixed point.
Rules are grouped by topic, each under a comment stating its identity. Integer rules follow C
division semantics (IR.md: `//` truncates toward zero, `%` has the dividend's sign) and
two's-complement wrap-around: a rule that relies on exact arithmetic first checks with value
ranges (rules/ranges.py) that nothing can wrap. Float rules never change a single bit of any
result (NaN, inf and -0.0 included): `x * 0`, `x - x`, `x + 0.0` and `x / x` stay for floats.

Sums of integers are kept in one canonical form: terms in order of first appearance, like
terms combined (`x*2 + x*3 -> x*5`), negative terms subtracted, one constant last.
"""
from __future__ import annotations

import math

from ..alu import exec_alu, exec_bitcast, exec_cast
from ..dtype import dtypes, truncate
from ..errors import DTypeError
from ..ops import GroupOp, Ops, UOp, set_sum
from ..pattern import PatternMatcher, UPat, graph_rewrite
from .ranges import dtype_range, fits, value_range

INTS = frozenset(dtypes.integers)
FLOATS = frozenset(dtypes.floats)
INTS_BOOL = INTS | {dtypes.bool}
MAX_TERMS = 128   # longer sums are left as they are (keeps every rewrite cheap)


def _lo(u: UOp):
  return value_range(u)[0]


def _hi(u: UOp):
  return value_range(u)[1]


def _is_const(u: UOp) -> bool:
  return u.op is Ops.CONST


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
  return x if _lo(x) >= _hi(y) else y if _lo(y) >= _hi(x) else None


def _min_by_range(x: UOp, y: UOp) -> UOp | None:
  return x if _hi(x) <= _lo(y) else y if _hi(y) <= _lo(x) else None


def _mod_small(x: UOp, y: UOp) -> UOp | None:
  """x % y -> x when |x| < |y| always (C remainder keeps the dividend then)."""
  bound = min(abs(_lo(y)), abs(_hi(y))) if _lo(y) > 0 or _hi(y) < 0 else 0
  return x if max(abs(_lo(x)), abs(_hi(x))) < bound else None


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
  if _lo(x) < 0:
    return None
  lin = _linear(x, exact=True)
  if lin is None:
    return None
  terms, const = lin
  n = c.arg
  quot = {t: k // n for t, k in terms.items() if k >= n}
  if not quot and const < n:
    return None
  rem_terms = {t: (k % n if k > 0 else k) for t, k in terms.items()}
  rem = _build(x.dtype, rem_terms, const % n if const > 0 else const)
  if _lo(rem) < 0 or not fits(rem):
    return None
  if _hi(rem) >= n and any(k > n and k % n for k in terms.values()):
    return None   # a term split between the quotient and the remainder: no simpler
  if d.op is Ops.MOD:
    return rem if _hi(rem) < n else rem % c
  q = _build(x.dtype, quot, const // n if const > 0 else 0)
  return q if _hi(rem) < n else q + rem // c


# ---- sums of integers ------------------------------------------------------------------------

def _linear(u: UOp, exact: bool = False) -> tuple[dict, int] | None:
  """u as ({term: coefficient}, constant), looking through +, -, negation and * constant.

  With `exact`, None when any of those nodes might wrap around (then u's terms do not add up
  to u over the integers); None too when the sum has more than MAX_TERMS pieces."""
  terms, const, pieces, exact_ok = _sum_of(u)
  if terms is None or exact and not exact_ok:
    return None
  return dict(terms), const


def _sum_of(u: UOp) -> tuple:
  """(terms, constant, pieces, exact) of u: the sum u adds up (terms in order of first
  appearance), how many nodes spell it out (a shared piece counts each time; terms None past
  MAX_TERMS), and whether none of its +, -, negation or * nodes can wrap. Cached on sum nodes
  (`u._sum`, which holds only nodes below u, so no node keeps itself alive)."""
  if u._sum is not None and u._sum is not _CANONICAL:
    return u._sum
  if _parts(u, 1) is None:
    return _leaf_sum(u)
  stack = [u]
  while stack:                # sums below first, iteratively (sums can be long chains)
    node = stack[-1]
    parts = _parts(node, 1)
    todo = [n for n, _ in parts if (n._sum is None or n._sum is _CANONICAL)
            and _parts(n, 1) is not None]
    if todo:
      stack.extend(todo)
      continue
    stack.pop()
    if node._sum is not None and node._sum is not _CANONICAL:
      continue
    ok = node.op not in _LINEAR_OPS or fits(node)
    terms: dict | None = {}
    const, pieces = 0, 1
    for n, k in parts:
      t, c, p, e = n._sum if _parts(n, 1) is not None else _leaf_sum(n)
      pieces, ok = pieces + p, ok and e
      if t is None or pieces > MAX_TERMS:
        terms = None
      if terms is not None:
        for term, coeff in t.items():
          terms[term] = terms.get(term, 0) + k * coeff
        const += k * c
    set_sum(node, (terms, const, pieces, ok))
  return u._sum


# `_sum` of the sum nodes _fold_sum built from the terms of a sum without merging pairs (its
# result and every partial sum on its left spine) until their linear form is needed: such a node
# is canonical with no pair to merge (partial sums keep the order, signs and coefficients of the
# whole), so _fold_sum skips it
_CANONICAL = object()


def _leaf_sum(u: UOp) -> tuple:
  """_sum_of a constant or a term (not cached: the terms would hold the node itself)."""
  ok = u.op not in _LINEAR_OPS or fits(u)
  return ({}, u.arg, 1, ok) if u.op is Ops.CONST else ({u: 1}, 0, 1, ok)


def _parts(node: UOp, k: int) -> list | None:
  """The (source, coefficient) pieces a sum node adds up, in order; None for a term or constant."""
  op = node.op
  if op is Ops.ADD or op is Ops.SUB:
    return [(node.src[0], k), (node.src[1], k if op is Ops.ADD else -k)]
  if op is Ops.MUL and node.src[1].op is Ops.CONST:
    return [(node.src[0], k * node.src[1].arg)]
  return [(node.src[0], -k)] if op is Ops.NEG else None


_LINEAR_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG})


def _signed(k: int, dt) -> int:
  """k as the signed integer of dt's width it is congruent to (coefficients live mod 2**bits)."""
  if dt.kind not in "iu":
    return k
  half = 1 << (dt.bits - 1)
  return k if -half <= k < half else truncate(k, dtypes.from_name(f"int{dt.bits}"))


def _coeffs(dt, terms: dict) -> list:
  """The (term, coefficient) list of the canonical sum: positive ones, then negative ones."""
  pos, neg = [], []
  half = 1 << (dt.bits - 1) if dt.kind in "iu" else None
  for t, k in terms.items():
    if half is not None and not -half <= k < half:
      k = _signed(k, dt)
    if k > 0:
      pos.append((t, k))
    elif k < 0:
      neg.append((t, k))
  return pos + neg if neg else pos


def _build(dt, terms: dict, const: int) -> UOp:
  """The canonical sum: positive terms, then negative terms subtracted, then one constant."""
  coeffs = _coeffs(dt, terms)
  out = None
  for t, k in coeffs:
    if out is None:
      out = t if k == 1 else t * k
    elif k > 0:
      out = out + (t if k == 1 else t * k)
    else:
      out = out - (t if k == -1 else t * -k)
  const = truncate(const, dt)
  if out is None:
    return UOp.const(dt, const)
  return out + const if const != 0 else out


def _pair_divmod(terms: dict) -> bool:
  """(x//y)*(k*y) + (x%y)*k -> x*k and ((x//c)%d)*(k*c) + (x%c)*k -> (x % (c*d))*k, in place;
  True when a pair was merged. Both hold for every x under C semantics (they are odd in x) when
  y is never 0. x//c may already be split into Q + R//c (x = c*Q + R, see _split_divmod)."""
  if not any(t.op is Ops.MOD for t in terms):
    return False   # every merge pairs a remainder with its partner
  dt = next(iter(terms)).dtype
  divs = {(t.src[0], t.src[1]): (t, t.src[1].arg) for t in terms
          if t.op is Ops.IDIV and _is_const(t.src[1])}
  divs.update({(t.src[0].src[0], t.src[1]): (t, 1) for t in terms if _is_div_times(t)})
  mods = {(t.src[0].src[0], t.src[0].src[1]): (t, t.src[0].src[1].arg) for t in terms
          if _is_div_mod(t)}
  split = {key: (t, key[1].arg) for key, t in _split_mods(terms).items()}
  for t in list(terms):
    if t.op is not Ops.MOD or 0 >= _lo(t.src[1]) and 0 <= _hi(t.src[1]):
      continue
    key, k = (t.src[0], t.src[1]), terms[t]
    for table, merge in ((divs, _merged_div), (mods, _merged_mod), (split, _merged_split)):
      partner, scale = table.get(key, (None, 0))
      if partner is None or _signed(terms[partner] - k * scale, dt) != 0:
        continue
      whole = merge(partner, *key)
      if whole is not None:
        del terms[partner], terms[t]
        terms[whole] = terms.get(whole, 0) + k
        return True
  return False


def _is_div_times(t: UOp) -> bool:
  """t is (x // y) * y."""
  return t.op is Ops.MUL and t.src[0].op is Ops.IDIV and t.src[0].src[1] is t.src[1]


def _merged_div(partner: UOp, x: UOp, y: UOp) -> UOp:
  return x


def _split_mods(terms: dict) -> dict:
  """{(R, c): t} for the terms t = y % d whose y is a sum holding R // c once (y = Q + R//c)."""
  found = {}
  for t in terms:
    if t.op is Ops.MOD and _is_const(t.src[1]) and t.src[0].op in (Ops.ADD, Ops.SUB):
      lin = _linear(t.src[0])
      for u, k in (lin[0].items() if lin else ()):
        if k == 1 and u.op is Ops.IDIV and _is_const(u.src[1]):
          found[(u.src[0], u.src[1])] = t
  return found


def _merged_split(t: UOp, r: UOp, cnode: UOp) -> UOp | None:
  """(Q + R//c) % d -> x % (c*d) with x = c*Q + R (paired with R % c, which is x % c when x and R
  are never negative); None when that cannot be shown or c*d does not fit."""
  terms, const = _linear(t.src[0])
  c = cnode.arg
  whole = {u: k * c for u, k in terms.items()}
  del whole[r // c]
  whole[r] = whole.get(r, 0) + 1
  x, d = _build(t.dtype, whole, const * c), t.src[1].arg
  if c <= 0 or d <= 0 or c * d > dtype_range(t.dtype)[1] or _lo(x) < 0 or _lo(r) < 0:
    return None
  return x % (c * d) if fits(x) else None


def _merged_mod(partner: UOp, x: UOp, y: UOp) -> UOp | None:
  """(x//c)%d -> x % (c*d), when c, d > 0 and c*d fits the dtype."""
  x, c, d = partner.src[0].src[0], partner.src[0].src[1].arg, partner.src[1].arg
  prod = c * d
  return x % prod if c > 0 and d > 0 and prod <= dtype_range(x.dtype)[1] else None


def _is_div_mod(t: UOp) -> bool:
  """t is (x // c) % d with constants c and d."""
  return (t.op is Ops.MOD and _is_const(t.src[1]) and t.src[0].op is Ops.IDIV
          and _is_const(t.src[0].src[1]))


def _fold_sum(s: UOp) -> UOp | None:
  """Rewrite an integer sum into its canonical form (None when it already is)."""
  if s._sum is _CANONICAL:
    return None
  lin = _linear(s)
  if lin is None:
    return None
  terms, const = lin
  merged = False
  while terms and _pair_divmod(terms):
    merged = True
  if not merged and _is_built(s, _coeffs(s.dtype, terms), truncate(const, s.dtype)):
    return None   # already canonical: checked without building (and interning) it again
  out = _build(s.dtype, terms, const)
  node = out if not merged else None   # (a merge can leave a sum as a term: not canonical yet)
  while node is not None and (node.op is Ops.ADD or node.op is Ops.SUB) and node._sum is None:
    set_sum(node, _CANONICAL)          # canonical with no pair to merge, like every partial
    node = node.src[0]                 # sum on its left spine
  return None if out is s else out


def _is_built(s: UOp, coeffs: list, const: int) -> bool:
  """s is exactly the node _build makes of (coeffs, const) (read top-down, building nothing)."""
  node = s
  if const != 0:
    c = node.src[1] if node.op is Ops.ADD else None
    if c is None or c.op is not Ops.CONST or c.arg != const:
      return False
    node = node.src[0]
  for i in range(len(coeffs) - 1, -1, -1):
    t, k = coeffs[i]
    if i:
      if node.op is not (Ops.ADD if k > 0 else Ops.SUB):
        return False
      part, node, k = node.src[1], node.src[0], abs(k)
    else:
      part = node
    if k != 1 and not (part.op is Ops.MUL and part.src[1].op is Ops.CONST
                       and part.src[1].arg == k and type(part.src[1].arg) is int):
      return False
    if (part if k == 1 else part.src[0]) is not t:
      return False
  return bool(coeffs) or node.op is Ops.CONST and node.arg == const


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
  # (a*c + b) // c -> a + b // c and (a*c + b) % c -> b % c  (a*c + b >= 0, b >= 0)
  (UPat((Ops.IDIV, Ops.MOD), name="d", src=(ix, _cpat("c", INTS, _pos))),
   _split_divmod),

  # ---- products and sums of integers ----
  # (x * c1) * c2 -> x * (c1*c2)
  (UPat(Ops.MUL, src=(UPat(Ops.MUL, src=(ix, c1)), c2)), lambda x, c1, c2: x * (c1.arg * c2.arg)),
  # sums: like terms combined (x*2 + x*3 -> x*5), constants summed on the right,
  # (x//c)*c + x%c -> x and ((x//c)%d)*c + x%c -> x % (c*d)
  (UPat((Ops.ADD, Ops.SUB), INTS, name="s"), _fold_sum),
])


def simplify(sink: UOp) -> UOp:
  """The graph under `sink`, simplified with `symbolic` to a fixed point."""
  return graph_rewrite(sink, symbolic)


__all__ = ["symbolic", "simplify"]
