"""Whether the sizes operands hold on one axis combine (elementwise ops, where, cat, matmul's
inner dims), and the ShapeError where they do not: it names both sizes as the user wrote them
((n + 1) // 2 and n // 2, not their padded sizes), a binding under which they differ, and how
to make them agree. Symbolic sizes combine only when they are the same expression (graph/dims.py);
their padded shapes may agree where their values do not (x[::2] and x[1::2] of 64 rows).
"""
from __future__ import annotations

import itertools
import math

from ..errors import ShapeError
from .dims import Sym, concrete, physical, rebind


def merge_sym(shape: tuple, syms: list) -> tuple:
  """The logical shape of an elementwise node of physical `shape` from its sources' (None: a
  source with no symbolic axis). Two different symbolic sizes on one axis are a ShapeError."""
  out = list(shape)
  for sym in syms:
    if sym is None:
      continue
    for a, n in enumerate(sym):
      if isinstance(n, Sym):
        if isinstance(out[a], Sym) and out[a] != n:
          raise size_mismatch(a, out[a], n)
        out[a] = n if not isinstance(out[a], Sym) else out[a].with_bindings_of(n)
  return tuple(out)


def check_broadcast(shapes: list) -> None:
  """ShapeError naming both sizes where logical shapes (aligned at the end, as broadcasting
  does) hold different symbolic sizes on one axis, or a symbolic size and an int other than 1
  and its padded size (an int equal to it broadcasts as the padded axis does)."""
  ndim = max(len(s) for s in shapes)
  for a in range(ndim):
    sizes = [s[a - ndim + len(s)] for s in shapes if a - ndim + len(s) >= 0]
    syms = [n for n in sizes if isinstance(n, Sym)]
    for n in sizes:
      if syms and n != 1 and not agree(syms[0], n):
        raise size_mismatch(a, syms[0], n)


def agree(a, b) -> bool:
  """Whether two sizes of one axis (a Sym or an int) combine: equal, or an int equal to the
  symbolic one's padded size (such a static axis lines up with the padded one)."""
  if isinstance(a, Sym) and isinstance(b, Sym):
    return a == b
  return physical(a) == physical(b)


def differ_at(a, b) -> dict | None:
  """A binding of the dims of `a` and `b` (sizes: Sym or int) under which they take different
  values, or None when none of the values tried (each dim's first values and its ends) does."""
  ranges = {**(a.ranges if isinstance(a, Sym) else {}), **(b.ranges if isinstance(b, Sym) else {})}
  period = math.lcm(*(s.div for s in (a, b) if isinstance(s, Sym)))
  tries = [sorted({*range(lo, min(hi, lo + 2 * period) + 1), hi}) for lo, hi in ranges.values()]
  for combo in itertools.product(*tries):
    values = dict(zip(ranges, combo))
    va, vb = (rebind((s,), values)[0] for s in (a, b))
    if concrete(va) != concrete(vb):
      return values
  return None


def size_mismatch(axis: int, a, b) -> ShapeError:
  """The ShapeError for operands whose axis holds `a` elements in one and `b` in another (at
  least one symbolic): both sizes as written, where they differ, and how to make them agree."""
  at = differ_at(a, b)
  where = ""
  if at:
    va, vb = (concrete(rebind((s,), at)[0]) for s in (a, b))
    where = (f" (they differ at {', '.join(f'{k} = {v}' for k, v in at.items())}: {va} and "
             f"{vb})")
  floored = any(isinstance(s, Sym) and s.div != 1 for s in (a, b))
  fix = ("slice both to one length (for x[::2] and x[1::2] of n rows: x[:n - 1:2] has n // 2 "
         "elements, as x[1::2] does), or give the axis a size the step divides (2*h rows for "
         "h = kg.Dim('h', lo, hi): both halves have h)") if floored else \
    "slice one operand to the other's size (x[:m]), or use one dim for both"
  return ShapeError(f"axis {axis} has {a} elements in one operand and {b} in another{where}: "
                    f"symbolic sizes combine only when they are the same expression; {fix}")
