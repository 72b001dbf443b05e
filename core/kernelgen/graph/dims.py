"""Symbolic sizes: a named integer with a range (`kg.Dim("n", 1, 4096)`), bound to a value per
call (`n.bind(37)`), that stands wherever a size does.

A `Sym` is an affine expression over dims, `c0 + c1*n1 + c2*n2 ...` (n + 1, 64 * n, n + m), or
such an expression floor-divided by an int, `(c0 + c1*n1 ...) // d` (the (n + 1) // 2 elements
of `x[::2]`), kept in one canonical form, so equal expressions compare and hash equal. Its range
(`lo`, `hi`) comes from its dims' ranges. A dim may carry the value it is bound to; the value is
not part of the expression (n bound to 3 and n bound to 5 are the same size to every cache), it
travels with it to the realize that reads it. A floored size runs like any other: its padded
axis holds its `hi`, and the kernels that read it compute the floor at run time (`runtime`).

How a symbolic size runs (padded layout): a tensor with a symbolic axis of size `s` holds `s.hi`
elements along it, of which the first `s` (its bound value) are its values and the rest are
unspecified; `LazyOp.shape` is that physical shape, `LazyOp.sym` the logical one. Elementwise
kernels compute the whole padded axis; a reduction over a symbolic axis first replaces the
padding with its identity (`x < s` from a run-time argument); a slice or a position at a symbolic
offset reads at a run-time index. The bound values reach each kernel as run-time arguments
(L.VAR -> UOp VAR: a WGSL uniform, a PTX parameter), so one compiled kernel serves every value in
the range.
"""
from __future__ import annotations

import math

from ..errors import ShapeError, UnsupportedError


class Sym:
  """An affine expression over named dims, or one floor-divided by an int (see the module
  docstring). Build dims with `kg.Dim(name, lo, hi)`; combine them with `+`, `-`, `*` by an int,
  and `//` by a positive int (floor division). A floored expression takes `+` and `-` of an
  affine one or an int, and `//` again, but no `*` or negation (no such size is a floored affine
  expression): UnsupportedError. `==` compares expressions; `<`, `>` with an int are decided by
  the range, else raise. int(s) raises: a symbolic size has no value until it is bound
  (`s.value`)."""
  __slots__ = ("terms", "const", "ranges", "values", "div")

  def __init__(self, terms: tuple, const: int, ranges: dict, values: dict, div: int = 1):
    self.terms = terms        # ((name, coefficient != 0), ...) sorted by name
    self.const = const        # the constant term
    self.ranges = ranges      # name -> (lo, hi) of each dim the terms use
    self.values = values      # name -> the bound value, for the dims that have one
    self.div = div            # the value is floor((const + terms) / div); 1: affine

  # ---- what it is ----
  @property
  def names(self) -> tuple[str, ...]:
    """The names of the dims the expression uses, sorted (`(n + m).names == ("m", "n")`)."""
    return tuple(n for n, _ in self.terms)

  @property
  def is_dim(self) -> bool:
    """Whether the expression is one dim itself (n, not n + 1, 2*n or n // 2)."""
    return len(self.terms) == 1 and self.terms[0][1] == 1 and not self.const and self.div == 1

  @property
  def lo(self) -> int:
    """The least value the expression takes over its dims' ranges."""
    return (self.const + sum(c * self.ranges[n][0 if c > 0 else 1] for n, c in self.terms)) \
      // self.div

  @property
  def hi(self) -> int:
    """The greatest value the expression takes over its dims' ranges."""
    return (self.const + sum(c * self.ranges[n][1 if c > 0 else 0] for n, c in self.terms)) \
      // self.div

  @property
  def bound(self) -> bool:
    """Whether every dim of the expression is bound to a value (`n.bind(3)`), so `value` is known."""
    return all(n in self.values for n in self.names)

  @property
  def value(self) -> int:
    """The value under the dims' bindings (ShapeError when one is unbound)."""
    missing = [n for n in self.names if n not in self.values]
    if missing:
      raise ShapeError(f"symbolic size {self} has no value: bind {', '.join(missing)} "
                       f"(e.g. {missing[0]}.bind(7)) before running")
    return (self.const + sum(c * self.values[n] for n, c in self.terms)) // self.div

  def bind(self, value: int) -> Sym:
    """This dim bound to `value` (a dim only, inside its range): the same size to every cache."""
    if not self.is_dim:
      raise ShapeError(f"only a dim can be bound, not the expression {self}: bind its dims")
    name = self.terms[0][0]
    lo, hi = self.ranges[name]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
      raise ShapeError(f"dim {name} takes an int in {lo}..{hi}, got {value!r}")
    return Sym(self.terms, 0, self.ranges, {name: value})

  # ---- arithmetic ----
  def _merge(self, other: Sym) -> tuple[dict, dict]:
    ranges, values = dict(self.ranges), dict(self.values)
    for n, r in other.ranges.items():
      if ranges.setdefault(n, r) != r:
        raise ShapeError(f"dim {n} is used with two ranges, {ranges[n]} and {r}: one name, one "
                         f"range")
    for n, v in other.values.items():
      if values.setdefault(n, v) != v:
        raise ShapeError(f"dim {n} is bound to {values[n]} and to {v} in one program: bind it "
                         f"once per call")
    return ranges, values

  def __add__(self, other) -> Sym | int:
    if isinstance(other, Sym):
      if self.div != 1 and other.div != 1:
        return self._floored_sum(other)
      if other.div != 1:
        return other + self
      # floor(X / d) + Y -> floor((X + d*Y) / d): Y is an int for every value
      ranges, values = self._merge(other)
      coef = dict(self.terms)
      for n, c in other.terms:
        coef[n] = coef.get(n, 0) + c * self.div
      return make(coef, self.const + other.const * self.div, ranges, values, self.div)
    if isinstance(other, int):
      return make(dict(self.terms), self.const + other * self.div, self.ranges, self.values,
                  self.div)
    return NotImplemented

  __radd__ = __add__

  def _floored_sum(self, other: Sym) -> Sym | int:
    """self + other, both floored, as one expression where some floor((a*n + b) / L) over their
    one dim equals the sum at every value ((n + 1) // 2 + n // 2 == n: the two halves of a
    stepped slice); UnsupportedError where none does (2 * ((n + 1) // 2)). Both sides grow by a
    when n grows by L = lcm(divisors), so one period of values decides it."""
    ranges, values = self._merge(other)
    if len(ranges) != 1:
      raise self._floored(f"{self} + {other}", "a sum of two floored sizes over several dims")
    (name, (lo, hi)), = ranges.items()
    period = math.lcm(self.div, other.div)
    a = sum(c * period // s.div for s in (self, other) for _, c in s.terms)
    def total(v):
      return sum((s.const + s.terms[0][1] * v) // s.div for s in (self, other))
    for r in range(period):
      b = period * total(lo) - a * lo + r
      if all((a * v + b) // period == total(v) for v in range(lo, min(hi, lo + period) + 1)):
        return make({name: a}, b, ranges, values, period)
    raise self._floored(f"{self} + {other}", "a sum of two floored sizes that no one floored "
                        "size equals")

  def _floored(self, text: str, what: str) -> UnsupportedError:
    return UnsupportedError(f"{text} is {what}, which is no size kernelgen can express (sizes are "
                            f"affine in the dims, or one affine expression floor-divided by an "
                            f"int, like the (n + 1) // 2 elements of x[::2]): slice or reshape "
                            f"before stepping, or declare the axis as a multiple of the step "
                            f"(h = kg.Dim('h', lo, hi), size 2*h)")

  def __neg__(self) -> Sym:
    if self.div != 1:
      raise self._floored(f"-({self})", "a negated floored size")
    return make({n: -c for n, c in self.terms}, -self.const, self.ranges, self.values)

  def __sub__(self, other):
    return self + (-other)

  def __rsub__(self, other):
    return (-self) + other

  def __mul__(self, other) -> Sym | int:
    if isinstance(other, int) and not isinstance(other, bool):
      if self.div != 1 and other not in (0, 1):
        raise self._floored(f"{other} * ({self})", "a multiple of a floored size")
      if self.div != 1:
        return self if other else 0
      return make({n: c * other for n, c in self.terms}, self.const * other, self.ranges,
                  self.values)
    if isinstance(other, Sym):
      raise UnsupportedError(f"a product of two symbolic sizes ({self} * {other}) is no size "
                             f"kernelgen can express (sizes are affine in the dims; an axis of "
                             f"the product would not hold its values first): keep the axes apart "
                             f"(reductions take several axes: x.sum((0, 1)), and mean divides by "
                             f"the product at run time), or make one of them a number")
    return NotImplemented

  __rmul__ = __mul__

  def __floordiv__(self, other: int) -> Sym | int:
    """floor(self / other) for a positive int: floor(floor(X / d) / k) == floor(X / (d*k))."""
    if not isinstance(other, int) or isinstance(other, bool) or other <= 0:
      raise UnsupportedError(f"{self} // {other!r}: a symbolic size divides only by a positive "
                             f"int")
    return make(dict(self.terms), self.const, self.ranges, self.values, self.div * other)

  def with_bindings_of(self, other: Sym) -> Sym:
    """This expression with `other`'s bindings too (they are equal expressions)."""
    ranges, values = self._merge(other)
    return Sym(self.terms, self.const, ranges, values, self.div)

  def divides(self, other: int) -> bool:
    """Whether `self // other` is exact for every value (each term divisible)."""
    return other > 0 and self.div == 1 and not self.const % other and \
      all(c % other == 0 for _, c in self.terms)

  def runtime(self, var, num):
    """The value as a run-time expression: `var(name, lo, hi)` is a dim's value and `num(k)` an
    int, in any type with + * // (lazy tensors, UOps). A floored expression is shifted to a
    numerator that is never negative (integer division on devices truncates)."""
    shift = max(0, -(self._low_numerator() // self.div)) if self.div != 1 else 0
    const = self.const + shift * self.div
    out = num(const) if const else None
    for name, coef in self.terms:
      term = var(name, *self.ranges[name])
      term = term if coef == 1 else term * num(coef)
      out = term if out is None else out + term
    if self.div == 1:
      return out
    out = out // num(self.div)
    return out + num(-shift) if shift else out

  def _low_numerator(self) -> int:
    return self.const + sum(c * self.ranges[n][0 if c > 0 else 1] for n, c in self.terms)

  # ---- comparisons ----
  def __eq__(self, other) -> bool:
    if isinstance(other, Sym):
      return self.terms == other.terms and self.const == other.const and self.div == other.div
    return False

  def __hash__(self) -> int:
    return hash(("sym", self.terms, self.const, self.div))

  def _decide(self, op: str, other, yes: bool, no: bool) -> bool:
    if yes:
      return True
    if no:
      return False
    raise UnsupportedError(f"{self} {op} {other} depends on the bound value ({self} is in "
                           f"{self.lo}..{self.hi}): compare the bound value (.value) instead")

  def __lt__(self, other): return self._decide("<", other, self.hi < other, self.lo >= other)
  def __le__(self, other): return self._decide("<=", other, self.hi <= other, self.lo > other)
  def __gt__(self, other): return self._decide(">", other, self.lo > other, self.hi <= other)
  def __ge__(self, other): return self._decide(">=", other, self.lo >= other, self.hi < other)

  def __ne__(self, other) -> bool:
    return not self == other

  def __int__(self):
    raise UnsupportedError(f"the symbolic size {self} has no int value: use .value (its bound "
                           f"value) or .hi (its largest)")

  def __bool__(self) -> bool:
    return True   # a size expression is an object, not its value (a range never all 0: make())

  def __repr__(self) -> str:
    parts = [n if c == 1 else f"{c}*{n}" for n, c in self.terms]
    text = " + ".join(parts).replace("+ -", "- ")
    if self.const:
      text += f" {'+' if self.const > 0 else '-'} {abs(self.const)}"
    if self.div == 1:
      return text
    return f"{text} // {self.div}" if len(parts) == 1 and not self.const else \
      f"({text}) // {self.div}"

  def describe(self) -> str:
    """`n in 1..4096` for a dim, `n + 1 in 2..4097` for an expression."""
    return f"{self} in {self.lo}..{self.hi}"


def make(coef: dict, const: int, ranges: dict, values: dict, div: int = 1) -> Sym | int:
  """The canonical expression floor((const + coef) / div) (an int when no dim is left): a
  divisor shared with every coefficient g leaves floor((g*X + c) / (g*d)) == floor((X + c // g)
  / d), so no coefficient and the divisor have a common factor."""
  terms = tuple(sorted((n, c) for n, c in coef.items() if c))
  g = math.gcd(div, *(c for _, c in terms))
  if g > 1:
    terms, const, div = tuple((n, c // g) for n, c in terms), const // g, div // g
  if not terms:
    return const // div
  used = {n for n, _ in terms}
  return Sym(terms, const, {n: ranges[n] for n in used},
             {n: v for n, v in values.items() if n in used}, div)


def Dim(name: str, lo: int, hi: int) -> Sym:
  """A symbolic dimension: a size called `name` that takes any int value in lo..hi (inclusive).

  Use it wherever a size goes (`Tensor.empty(n, 64)`, `reshape`, `expand`, slices
  `x[:, :n]`, `x[:, pos:pos + 1]`), bound to a value per call: `n.bind(37)`. Kernels take the
  bound values as run-time arguments, so one compiled kernel serves every value in the range;
  buffers with a symbolic axis hold `hi` elements along it. Raises ShapeError for a bad name or
  range."""
  if not isinstance(name, str) or not name.isidentifier():
    raise ShapeError(f"a dim's name is an identifier (letters, digits, _), got {name!r}")
  if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)) or \
     not 0 <= lo <= hi or hi >= 1 << 31:
    raise ShapeError(f"dim {name}: the range is two ints 0 <= lo <= hi < 2**31, got {lo}..{hi}")
  if lo == hi:
    raise ShapeError(f"dim {name} has a one-value range {lo}..{hi}: use the int {lo}")
  return Sym(((name, 1),), 0, {name: (lo, hi)}, {})


class Count:
  """The number of values along several symbolic axes, factor * s1 * s2 * ... - offset: no size
  (sizes are affine in the dims, and an axis of a product would not hold its values first), but a
  run-time value: tensor/symbolic.py's `scalar` multiplies the dims' values on the device (mean
  and var over two symbolic axes divide by it)."""
  __slots__ = ("factor", "syms", "offset")

  def __init__(self, factor: int, syms: tuple, offset: int = 0):
    self.factor, self.syms, self.offset = factor, syms, offset

  def __sub__(self, other: int) -> Count:
    return Count(self.factor, self.syms, self.offset + other)

  def __repr__(self) -> str:
    text = " * ".join(f"({s})" for s in self.syms)
    return (f"{self.factor} * " if self.factor != 1 else "") + text + \
      (f" - {self.offset}" if self.offset else "")


def is_sym(x) -> bool:
  return isinstance(x, Sym)


def physical(size) -> int:
  """The number of elements an axis of `size` holds (a symbolic size: its largest value)."""
  return size.hi if isinstance(size, Sym) else size


def concrete(size) -> int:
  """The size as an int under its bindings."""
  return size.value if isinstance(size, Sym) else size


def split_shape(shape) -> tuple[tuple[int, ...], tuple | None]:
  """(the physical shape, the logical one or None when no size in `shape` is symbolic)."""
  shape = tuple(shape)
  if not any(isinstance(s, Sym) for s in shape):
    return shape, None
  return tuple(physical(s) for s in shape), shape


def rebind(sym: tuple | None, values: dict) -> tuple | None:
  """A logical shape with its dims bound to `values` (those it names)."""
  if sym is None:
    return None
  return tuple(Sym(s.terms, s.const, s.ranges, {n: values[n] for n in s.names if n in values},
                   s.div) if isinstance(s, Sym) else s for s in sym)


def bindings(syms) -> dict[str, int]:
  """{dim name: bound value} over `syms` (ShapeError on a dim bound to two values)."""
  out: dict[str, int] = {}
  for s in syms:
    for n, v in s.values.items():
      if out.setdefault(n, v) != v:
        raise ShapeError(f"dim {n} is bound to {out[n]} and to {v} in one program: bind it "
                         f"once per call")
  return out


# ---- logical shapes of lazy nodes (LazyOp.sym) -------------------------------------------------

def describe_sym(sym) -> str:
  return "(" + ", ".join(str(n) for n in sym) + ("," if len(sym) == 1 else "") + ")"


def _unsupported(move: str, axis: int, size, why: str):
  return UnsupportedError(f"{move} along the symbolic axis {axis} (size {size}) {why}")


def move_sym(sym: tuple, shape: tuple, move: str, args: tuple) -> tuple:
  """The logical shape after a movement (View's methods, physical `args`) of a node with logical
  shape `sym` and physical `shape`; UnsupportedError for a movement of a symbolic axis the
  padded layout cannot express this way (Tensor's methods handle the ones they can)."""
  arg = args[0]
  if move == "permute":
    return tuple(sym[i] for i in arg)
  if move == "expand":
    return tuple(s if n == m else m for s, n, m in zip(sym, shape, arg))
  if move == "reshape":
    return reshape_sym(sym, shape, tuple(arg))
  out = list(sym)
  for a, s in enumerate(sym):
    if not isinstance(s, Sym):
      out[a] = None
      continue
    if move == "pad":
      before, after = arg[a]
      if after:
        raise _unsupported("padding", a, s, "after its end needs Tensor.pad (which masks it)")
      out[a] = s + before
    elif move == "shrink":
      out[a] = _shrunk(a, s, shape[a], *arg[a])
    elif move in ("flip", "step") and (a in arg if move == "flip" else arg[a] != 1):
      raise _unsupported(move, a, s, "is not supported")
  if move in ("pad", "shrink", "step"):
    from .view import View
    moved = getattr(View.contiguous(shape), move)(arg).shape
    out = [n if o is None else o for o, n in zip(out, moved)]
  else:
    out = [n if o is None else o for o, n in zip(out, shape)]
  return tuple(out)


def _shrunk(axis: int, s: Sym, n: int, b: int, e: int):
  """The logical size of physical elements b..e of a symbolic axis of size s (n physical)."""
  if e == n and s.lo >= b:
    return s - b
  if s.lo >= e:
    return e - b
  raise _unsupported("a slice", axis, s, f"[{b}:{e}] may end past the axis's values: slice with "
                     f"symbolic bounds (x[:n]) instead")


def reshape_sym(sym: tuple, shape: tuple, new: tuple) -> tuple:
  """The logical shape of a reshape from physical `shape` (logical `sym`) to physical `new`:
  axes are grouped where their products agree; in a group, a symbolic size may only lead (after
  axes of 1), so the padding stays at the end of the group's elements, and it leads the new
  group (UnsupportedError otherwise)."""
  out, i, k = [], 0, 0
  while i < len(shape) or k < len(new):
    gi, gk = [i] if i < len(shape) else [], [k] if k < len(new) else []
    po = shape[i] if gi else 1
    pn = new[k] if gk else 1
    while po != pn or (not gi and not gk):
      if po < pn and gi[-1] + 1 < len(shape):
        gi.append(gi[-1] + 1)
        po *= shape[gi[-1]]
      elif gk and gk[-1] + 1 < len(new):
        gk.append(gk[-1] + 1)
        pn *= new[gk[-1]]
      else:
        raise ShapeError(f"cannot reshape {shape} to {new}")
    out += _group(sym, shape, new, gi, gk)
    i, k = (gi[-1] + 1 if gi else i), (gk[-1] + 1 if gk else k)
  return tuple(out)


def _group(sym, shape, new, gi, gk) -> list:
  logical = [sym[a] for a in gi]
  syms = [a for a, s in zip(gi, logical) if isinstance(s, Sym)]
  if not syms:
    return [new[a] for a in gk]
  lead = [a for a in gi if shape[a] != 1]
  if len(syms) > 1:
    raise UnsupportedError(f"a reshape of {describe_sym(sym)} that merges the symbolic axes "
                           f"{' and '.join(str(sym[a]) for a in syms)} would hold their product, "
                           f"which no padded layout holds (sizes are affine in the dims, and the "
                           f"values would not be the first ones): keep the axes apart "
                           f"(reductions take several axes, x.sum((1, 2))), or make all but one "
                           f"of them static")
  if lead[0] != syms[0]:
    raise UnsupportedError(f"a reshape of {describe_sym(sym)} that moves the symbolic size "
                           f"{sym[syms[0]]} behind other axes is not supported (the padded "
                           f"layout would not hold the values first): only the leading axis of "
                           f"a merged or split group may be symbolic; keep the static axes "
                           f"before it apart (merge only {sym[syms[0]]} and the axes after it)")
  rows = prod_of(shape[a] for a in gi if a != syms[0])
  if sym[syms[0]].div != 1 and rows != 1:
    raise UnsupportedError(f"a reshape of {describe_sym(sym)} (flatten included) that merges "
                           f"the floored size {sym[syms[0]]} (a stepped slice's count) with "
                           f"{rows} elements of other axes is not supported: {rows} * "
                           f"({sym[syms[0]]}) is no size kernelgen can express; keep the axes "
                           f"apart (reductions take several axes: x.sum((0, 1))), or give the "
                           f"stepped axis a size the step divides (2*h rows for h = "
                           f"kg.Dim('h', lo, hi): x[::2] then has h rows and flattens)")
  total = sym[syms[0]] * rows
  heads = [a for a in gk if new[a] != 1]
  rest = prod_of(new[a] for a in heads[1:])
  if rest != 1 and not total.divides(rest) or (total // rest).hi != new[heads[0]]:
    raise UnsupportedError(f"a reshape of {describe_sym(sym)} to {new} splits the symbolic size "
                           f"{total} unevenly")
  return [total // rest if a == heads[0] else new[a] for a in gk]


def prod_of(values) -> int:
  out = 1
  for v in values:
    out *= v
  return out
