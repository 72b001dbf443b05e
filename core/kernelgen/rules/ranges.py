"""Value ranges: the smallest and largest value every integer and bool node can take.

`value_range(u) -> (lo, hi)` is sound: every value `u` takes at run time lies in lo..hi
(inclusive). An integer op whose exact result could leave its dtype (and so wrap around) gets the
dtype's full range, so a range narrower than the dtype also says "this node never wraps".
Bool ranges are Python bools; float nodes (and nodes with no value) give (-inf, inf).
Results are cached on the node (`u._vrange`); the walk is iterative, so deep graphs are fine.
"""
from __future__ import annotations

import math

from ..dtype import DType, PtrDType, max_value, min_value
from ..uop.ops import Ops, UOp, set_vrange

_UNKNOWN = (-math.inf, math.inf)


_DTYPE_RANGES: dict = {}   # dtype -> its range, filled once per dtype (floats, pointers, None: _UNKNOWN)


def dtype_range(dt: DType | None) -> tuple:
  """The full range of a dtype's values: (min, max); (-inf, inf) for floats and non-values."""
  got = _DTYPE_RANGES.get(dt)
  if got is not None:
    return got
  if not isinstance(dt, DType) or isinstance(dt, PtrDType) or dt.kind == "f":
    if isinstance(dt, DType) or dt is None:   # dtypes are interned: one entry each
      _DTYPE_RANGES[dt] = _UNKNOWN
    return _UNKNOWN
  got = _DTYPE_RANGES[dt] = min_value(dt.scalar), max_value(dt.scalar)
  return got


def fits(u: UOp) -> bool:
  """True when `u`'s range is narrower than its dtype's, so `u` (an int node) never wraps."""
  lo, hi = u._vrange or value_range(u)
  dlo, dhi = _DTYPE_RANGES.get(u.dtype) or dtype_range(u.dtype)
  return u.dtype is not None and u.dtype.kind in "iu" and (lo > dlo or hi < dhi)


def _hull(dt: DType, *ranges) -> tuple:
  if len(ranges) == 2:
    (alo, ahi), (blo, bhi) = ranges
    return (alo if alo < blo else blo), (ahi if ahi > bhi else bhi)
  return min([r[0] for r in ranges]), max([r[1] for r in ranges])


def _exact(dt: DType, lo, hi) -> tuple:
  """(lo, hi) when it fits the dtype; otherwise the result may wrap: the dtype's full range."""
  dlo, dhi = _DTYPE_RANGES.get(dt) or dtype_range(dt)
  return (lo, hi) if dlo <= lo and hi <= dhi else (dlo, dhi)


def _corners(dt: DType, fn, a, b) -> tuple:
  vals = [fn(x, y) for x in a for y in b]
  return _exact(dt, min(vals), max(vals))


def _mul_range(u, a, b) -> tuple:
  (alo, ahi), (blo, bhi) = a, b
  vals = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
  return _exact(u.dtype, min(vals), max(vals))


def _cdiv(x: int, y: int) -> int:
  q = abs(x) // abs(y)
  return q if (x < 0) == (y < 0) else -q


# ---- per-op ranges of integers: f(node, range of src0, range of src1, ...) --------------------

def _idiv(u, a, b):
  parts = [(0, 0)] if b[0] <= 0 <= b[1] else []   # division by zero gives 0 (IR.md)
  for lo, hi in ((b[0], min(b[1], -1)), (max(b[0], 1), b[1])):
    if lo <= hi:
      parts.append(_corners(u.dtype, _cdiv, a, (lo, hi)))
  return _hull(u.dtype, *parts)


def _mod(u, a, b):
  m = max(abs(b[0]), abs(b[1]), 1) - 1   # |x % y| < |y|; y == 0 gives 0
  lo = 0 if a[0] >= 0 else max(a[0], -m)
  hi = 0 if a[1] <= 0 else min(a[1], m)
  return lo, hi


def _shift_ok(u, s) -> bool:
  return 0 <= s[0] and s[1] < u.dtype.scalar.bits


def _shl(u, a, s):
  if not _shift_ok(u, s):
    return dtype_range(u.dtype)
  return _corners(u.dtype, lambda x, y: x << y, a, s)


def _shr(u, a, s):
  if not _shift_ok(u, s):
    return dtype_range(u.dtype)
  return _corners(u.dtype, lambda x, y: x >> y, a, s)


def _and(u, a, b):
  if u.dtype.kind == "b":
    return a[0] and b[0], a[1] and b[1]
  highs = [r[1] for r in (a, b) if r[0] >= 0]
  return (0, min(highs)) if highs else dtype_range(u.dtype)


def _or(u, a, b):
  if u.dtype.kind == "b":
    return a[0] or b[0], a[1] or b[1]
  if a[0] >= 0 and b[0] >= 0:
    return max(a[0], b[0]), (1 << max(a[1], b[1]).bit_length()) - 1
  return dtype_range(u.dtype)


def _xor(u, a, b):
  if u.dtype.kind == "b":
    return (a[0] != b[0], a[0] != b[0]) if a[0] == a[1] and b[0] == b[1] else (False, True)
  if a[0] >= 0 and b[0] >= 0:
    return 0, (1 << max(a[1], b[1]).bit_length()) - 1
  return dtype_range(u.dtype)


def _not(u, a):
  if u.dtype.kind == "b":
    return not a[1], not a[0]
  top = max_value(u.dtype.scalar) if u.dtype.kind == "u" else -1
  return top - a[1], top - a[0]


def _neg(u, a):
  if u.dtype.kind == "u":
    return (0, 0) if a == (0, 0) else dtype_range(u.dtype)
  return _exact(u.dtype, -a[1], -a[0])


def _cmplt(u, a, b):
  if a[1] < b[0]:
    return True, True
  return (False, False) if a[0] >= b[1] else (False, True)


def _cmpeq(u, a, b):
  if a[0] == a[1] == b[0] == b[1]:
    return True, True
  return (False, False) if a[1] < b[0] or b[1] < a[0] else (False, True)


def _cmpne(u, a, b):
  lo, hi = _cmpeq(u, a, b)
  return not hi, not lo


def _where(u, c, x, y):
  if c[0] == c[1]:
    return x if c[0] else y
  return _hull(u.dtype, x, y)


def _cast(u, a):
  dt, src = u.dtype, u.src[0].dtype
  if src.kind == "f":
    return dtype_range(dt)
  if dt.kind == "b":
    return (a[0] > 0 or a[1] < 0), not (a[0] == a[1] == 0)
  return _exact(dt, int(a[0]), int(a[1]))


# The rule table: how each op's range follows from its sources' ranges (integers and bools).
_RANGE_OF = {
  Ops.ADD: lambda u, a, b: _exact(u.dtype, a[0] + b[0], a[1] + b[1]),
  Ops.SUB: lambda u, a, b: _exact(u.dtype, a[0] - b[1], a[1] - b[0]),
  Ops.MUL: _mul_range,
  Ops.MULACC: lambda u, a, b, c: _exact(u.dtype, *(_add(_corners(u.dtype, _mul, a, b), c))),
  Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.SHL: _shl, Ops.SHR: _shr,
  Ops.MAX: lambda u, a, b: (max(a[0], b[0]), max(a[1], b[1])),
  Ops.MIN: lambda u, a, b: (min(a[0], b[0]), min(a[1], b[1])),
  Ops.AND: _and, Ops.OR: _or, Ops.XOR: _xor, Ops.NOT: _not, Ops.NEG: _neg,
  Ops.CMPLT: _cmplt, Ops.CMPEQ: _cmpeq, Ops.CMPNE: _cmpne, Ops.WHERE: _where, Ops.CAST: _cast,
  Ops.GEP: lambda u, a: a,
  Ops.VECTORIZE: lambda u, *srcs: _hull(u.dtype, *srcs),
}


def _mul(x, y):
  return x * y


def _add(a, b):
  return a[0] + b[0], a[1] + b[1]


# Ops whose integer (or bool) result says nothing about float operands' ranges.
_FLOAT_OPERANDS = frozenset({Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE, Ops.CAST})


def _leaf_range(u: UOp) -> tuple | None:
  """The range of a node that does not follow from its sources, or None when it does."""
  if u.op is Ops.CONST:
    return (u.arg, u.arg) if u.dtype.kind != "f" else _UNKNOWN
  if u.op is Ops.VAR:
    return u.arg[1], u.arg[2]
  if u.op is Ops.SPECIAL:
    return 0, u.arg[2] - 1
  if (_DTYPE_RANGES.get(u.dtype) or dtype_range(u.dtype)) is _UNKNOWN:
    return _UNKNOWN   # floats, pointers and nodes without a value
  if u.op not in _RANGE_OF and u.op is not Ops.RANGE:
    return dtype_range(u.dtype)
  if u.op in _FLOAT_OPERANDS and u.src[0].dtype.kind == "f":
    return dtype_range(u.dtype)   # a comparison of floats, or a float cast to an integer
  return None


def _compute(u: UOp) -> tuple:
  leaf = _leaf_range(u)
  if leaf is not None:
    return leaf
  if u.op is Ops.RANGE:
    return 0, max(u.src[0]._vrange[1] - 1, 0)
  src = u.src
  if len(src) == 2:
    return _RANGE_OF[u.op](u, src[0]._vrange, src[1]._vrange)
  return _RANGE_OF[u.op](u, *[s._vrange for s in src])


def value_range(u: UOp) -> tuple:
  """(lo, hi): bounds of every value `u` can take (ints and bools; floats give (-inf, inf))."""
  if u._vrange is not None:
    return u._vrange
  for s in u.src:
    if s._vrange is None:
      break
  else:                  # the common case when rewriting bottom-up: the sources are known
    set_vrange(u, _compute(u))
    return u._vrange
  stack = [(u, False)]
  while stack:
    node, ready = stack.pop()
    if node._vrange is not None:
      continue
    pending = [s for s in node.src if s._vrange is None]
    if ready or not pending or _leaf_range(node) is not None:
      set_vrange(node, _compute(node))
      continue
    stack.append((node, True))
    stack.extend((s, False) for s in pending)
  return u._vrange


__all__ = ["value_range", "dtype_range", "fits"]


def divisible(index: UOp, n: int, memo: dict | None = None) -> bool:
  """True when `index` is provably a multiple of `n` (e.g. so a vector access is aligned).
  `memo` ({node: answer} for this n) saves re-walking subterms that several indices share."""
  op = index.op
  if op is Ops.CONST:
    return index.arg % n == 0
  if memo is not None:
    got = memo.get(index)
    if got is not None:
      return got
  if op is Ops.ADD or op is Ops.SUB:
    out = divisible(index.src[0], n, memo) and divisible(index.src[1], n, memo)
  elif op is Ops.MUL:     # the right operand first: usually the constant
    out = divisible(index.src[1], n, memo) or divisible(index.src[0], n, memo)
  elif op is Ops.SHL and index.src[1].op is Ops.CONST:
    out = (1 << index.src[1].arg) % n == 0 or divisible(index.src[0], n, memo)
  else:
    return False
  if memo is not None:
    memo[index] = out
  return out
