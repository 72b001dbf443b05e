"""Sums of integers in one canonical form: terms in order of first appearance, like terms combined
(`x*2 + x*3 -> x*5`), negative terms subtracted, one constant last. `linear_sum(u)` reads a node as
({term: coefficient}, constant); `fold_sum` is the rule (rules/symbolic.py) that rewrites a sum
into the canonical form, merging division/remainder pairs (`(x//y)*y + x%y -> x`) on the way.
"""
from __future__ import annotations

from ..dtype import dtypes, truncate
from ..uop.ops import Ops, UOp, set_sum
from .ranges import dtype_range, fits, value_range

MAX_TERMS = 128   # longer sums are left as they are (keeps every rewrite cheap)


def low_of(u: UOp):
  return value_range(u)[0]


def high_of(u: UOp):
  return value_range(u)[1]


def _is_const(u: UOp) -> bool:
  return u.op is Ops.CONST


def linear_sum(u: UOp, exact: bool = False) -> tuple[dict, int] | None:
  """u as ({term: coefficient}, constant), looking through +, -, negation and * constant.

  With `exact`, None when any of those nodes might wrap around (then u's terms do not add up
  to u over the integers); None too when the sum has more than MAX_TERMS pieces."""
  terms, const, pieces, exact_ok = sum_of(u)
  if terms is None or exact and not exact_ok:
    return None
  return dict(terms), const


def sum_of(u: UOp) -> tuple:
  """(terms, constant, pieces, exact) of u: the sum u adds up (terms in order of first
  appearance), how many nodes spell it out (a shared piece counts each time; terms None past
  MAX_TERMS), and whether none of its +, -, negation or * nodes can wrap. Cached on sum nodes
  (`u._sum`, which holds only nodes below u, so no node keeps itself alive)."""
  got = u._sum
  if got is not None and got is not _CANONICAL:
    return got
  if _parts(u, 1) is None:
    return _leaf_sum(u)
  stack = [u]
  while stack:                # sums below first, iteratively (sums can be long chains)
    node = stack[-1]
    parts = _parts(node, 1)
    todo = None
    pieces_of = []            # each part's (its own parts or None, node)
    for n, _ in parts:
      sub = _parts(n, 1)
      pieces_of.append(sub)
      if sub is not None and (n._sum is None or n._sum is _CANONICAL):
        if todo is None:
          todo = []
        todo.append(n)
    if todo:
      stack.extend(todo)
      continue
    stack.pop()
    if node._sum is not None and node._sum is not _CANONICAL:
      continue
    ok = node.op not in _LINEAR_OPS or fits(node)
    terms: dict | None = {}
    const, pieces = 0, 1
    for (n, k), sub in zip(parts, pieces_of):
      t, c, p, e = n._sum if sub is not None else _leaf_sum(n)
      pieces, ok = pieces + p, ok and e
      if t is None or pieces > MAX_TERMS:
        terms = None
      if terms is not None:
        for term, coeff in t.items():
          terms[term] = terms.get(term, 0) + k * coeff
        const += k * c
    set_sum(node, (terms, const, pieces, ok))
  return u._sum


# `_sum` of the sum nodes fold_sum built from the terms of a sum without merging pairs (its
# result and every partial sum on its left spine) until their linear form is needed: such a node
# is canonical with no pair to merge (partial sums keep the order, signs and coefficients of the
# whole), so fold_sum skips it
_CANONICAL = object()


def _leaf_sum(u: UOp) -> tuple:
  """sum_of a constant or a term (not cached: the terms would hold the node itself)."""
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


def build_sum(dt, terms: dict, const: int) -> UOp:
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
  for t in terms:
    if t.op is Ops.MOD:
      break
  else:
    return False   # every merge pairs a remainder with its partner
  dt = next(iter(terms)).dtype
  divs = {(t.src[0], t.src[1]): (t, t.src[1].arg) for t in terms
          if t.op is Ops.IDIV and _is_const(t.src[1])}
  divs.update({(t.src[0].src[0], t.src[1]): (t, 1) for t in terms if _is_div_times(t)})
  mods = {(t.src[0].src[0], t.src[0].src[1]): (t, t.src[0].src[1].arg) for t in terms
          if _is_div_mod(t)}
  split = {key: (t, key[1].arg) for key, t in _split_mods(terms).items()}
  for t in list(terms):
    if t.op is not Ops.MOD or 0 >= low_of(t.src[1]) and 0 <= high_of(t.src[1]):
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
      lin = linear_sum(t.src[0])
      for u, k in (lin[0].items() if lin else ()):
        if k == 1 and u.op is Ops.IDIV and _is_const(u.src[1]):
          found[(u.src[0], u.src[1])] = t
  return found


def _merged_split(t: UOp, r: UOp, cnode: UOp) -> UOp | None:
  """(Q + R//c) % d -> x % (c*d) with x = c*Q + R (paired with R % c, which is x % c when x and R
  are never negative); None when that cannot be shown or c*d does not fit."""
  terms, const = linear_sum(t.src[0])
  c = cnode.arg
  whole = {u: k * c for u, k in terms.items()}
  del whole[r // c]
  whole[r] = whole.get(r, 0) + 1
  x, d = build_sum(t.dtype, whole, const * c), t.src[1].arg
  if c <= 0 or d <= 0 or c * d > dtype_range(t.dtype)[1] or low_of(x) < 0 or low_of(r) < 0:
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


def fold_sum(s: UOp) -> UOp | None:
  """Rewrite an integer sum into its canonical form (None when it already is)."""
  if s._sum is _CANONICAL or _plainly_canonical(s):
    return None
  lin = linear_sum(s)
  if lin is None:
    return None
  terms, const = lin
  merged = False
  while terms and _pair_divmod(terms):
    merged = True
  if not merged and _is_built(s, _coeffs(s.dtype, terms), truncate(const, s.dtype)):
    return None   # already canonical: checked without building (and interning) it again
  out = build_sum(s.dtype, terms, const)
  node = out if not merged else None   # (a merge can leave a sum as a term: not canonical yet)
  while node is not None and (node.op is Ops.ADD or node.op is Ops.SUB) and node._sum is None:
    set_sum(node, _CANONICAL)          # canonical with no pair to merge, like every partial
    node = node.src[0]                 # sum on its left spine
  return None if out is s else out


# what a term of a plainly canonical sum may not be: a node _parts reads through, a constant, or
# a remainder (which a division term could pair with)
_NOT_PLAIN = frozenset({Ops.ADD, Ops.SUB, Ops.NEG, Ops.CONST, Ops.MOD})


def _plainly_canonical(s: UOp) -> bool:
  """s is a chain of additions of distinct terms x or x*k (k an int constant, 2 <= k < 2**(bits-1),
  x none of _NOT_PLAIN nor a product by a constant), then at most one nonzero constant: the form
  build_sum gives those terms, with no pair to merge (read off the chain, without its linear form;
  False where that is not plain to see, and the full check runs)."""
  node, seen, n = s, set(), 0
  most = 1 << (s.dtype.bits - 1)   # (a larger coefficient is a negative one, subtracted)
  if node.op is Ops.ADD and node.src[1].op is Ops.CONST:
    c = node.src[1].arg
    if c == 0 or type(c) is not int or c != truncate(c, s.dtype):
      return False
    node = node.src[0]
  while True:
    if n > MAX_TERMS:
      return False
    n += 1
    term = node.src[1] if node.op is Ops.ADD else node
    if term.op is Ops.MUL and term.src[1].op is Ops.CONST:
      k = term.src[1].arg
      if type(k) is not int or not 2 <= k < most:
        return False
      term = term.src[0]
    if term.op in _NOT_PLAIN or term.op is Ops.MUL and term.src[1].op is Ops.CONST or \
       term in seen:
      return False
    seen.add(term)
    if node.op is not Ops.ADD:
      return True
    node = node.src[0]


def _is_built(s: UOp, coeffs: list, const: int) -> bool:
  """s is exactly the node build_sum makes of (coeffs, const) (read top-down, building nothing)."""
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
