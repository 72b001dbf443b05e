"""Index arithmetic for lowering: int32 UOps of linear positions (sums of index * stride) and
their unravelling into the axes of a row-major shape, without division or modulo where the
terms' ranges show they are not needed.

A term is (index UOp, stride, extent): the index runs over range(extent).
"""
from __future__ import annotations

from ..dtype import dtypes
from ..uop.ops import Ops, UOp
from ..graph.view import prod

I32 = dtypes.int32


def int_const(v: int) -> UOp:
  return UOp.const(I32, v)


def linear_index(terms, offset: int) -> UOp:
  """sum(u * stride) + offset as int32 UOps: one left-leaning chain, a term that is itself a sum
  (stride 1) spliced in, as simplify's canonical sums are built (rules/sums.py)."""
  out = None
  for u, s, _ in terms:
    if s == 1 and out is not None and u.op is Ops.ADD:
      out = _splice(out, u)
      continue
    t = u if s == 1 else u * int_const(s)
    out = t if out is None else out + t
  if out is None:
    return int_const(offset)
  return out + int_const(offset) if offset else out


def _splice(out: UOp, u: UOp) -> UOp:
  """out + u with the sum u's pieces added one by one (out + (a + b) -> (out + a) + b)."""
  a, b = u.src
  out = _splice(out, a) if a.op is Ops.ADD else out + a
  return out + b


def _span(terms) -> tuple[int, int]:
  lo = hi = 0
  for _, s, n in terms:
    d = s * (n - 1)
    if d < 0:
      lo += d
    else:
      hi += d
  return lo, hi


def unravel(terms, offset: int, shape) -> list[UOp]:
  """Indices into `shape` (row-major) of the linear position sum(u*stride) + offset."""
  out = []
  for k, n in enumerate(shape):
    if n == 1:
      out.append(int_const(0))
      continue
    inner = prod(shape[k + 1:])
    out.append(_dim_index(terms, offset, inner, n))
  return out


def _dim_index(terms, offset: int, inner: int, n: int) -> UOp:
  period = inner * n
  kept = [t for t in terms if t[1] % period]
  off = offset % period
  whole = [(u, s // inner, e) for u, s, e in kept if s % inner == 0]
  rest = [t for t in kept if t[1] % inner]
  lo, hi = _span(rest)
  if 0 <= lo + off % inner and hi + off % inner < inner:
    q, (qlo, qhi) = linear_index(whole, off // inner), _span(whole)
    qlo, qhi = qlo + off // inner, qhi + off // inner
    if 0 <= qlo and qhi < n:
      return q
    return (q + int_const(-(qlo // n) * n)) % int_const(n) if qlo < 0 else q % int_const(n)
  for u, s, e in sorted((t for t in kept if 1 < t[1] < inner and inner % t[1] == 0 and not off),
                        key=lambda t: -t[1]):   # (u*s + rest) // inner = u // (inner/s)
    rlo, rhi = _span([t for t in kept if t[0] is not u])   # when rest lies in [0, s)
    if 0 <= rlo and rhi < s:
      q = u // int_const(inner // s)
      return q if (e - 1) // (inner // s) < n else q % int_const(n)
  lo, hi = _span(kept)
  shift = -((lo + off) // period) * period if lo + off < 0 else 0
  lin = linear_index(kept, off + shift)
  q = lin if inner == 1 else lin // int_const(inner)
  return q if hi + off + shift < period else q % int_const(n)


def gate_and(a: UOp | None, b: UOp | None) -> UOp | None:
  if a is None:
    return b
  return a if b is None else a & b


def plus_offset(u: UOp, offset: int) -> UOp:
  """u + offset, or u itself for offset 0."""
  return u + int_const(offset) if offset else u


def vectorize(values: list) -> UOp:
  """The scalars `values` as one vector (a single value stays itself)."""
  return values[0] if len(values) == 1 else \
    UOp(Ops.VECTORIZE, values[0].dtype.vec(len(values)), tuple(values))


def splat(u: UOp, width: int) -> UOp:
  """u repeated in every lane of a `width`-vector (u itself for width 1, or already a vector)."""
  return u if width == 1 or u.dtype.count == width else vectorize([u] * width)
