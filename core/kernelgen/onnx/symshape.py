"""Shape computations over symbolic dims (kg.Dim): the host values of a model's shape subgraph
(Shape -> Gather -> Concat -> Reshape / Expand / Range ...) where some size is symbolic.

Static host values are folded with ints; a symbolic size has no int until a run binds it, so
these operators compute with the size's expression instead (a `Sym`, graph/dims.py): Shape of
a (n, 8) tensor is the Static [n, 8], Gather of it at 0 is [n], n * 8 stays an expression, and
a Reshape / Expand / Range / ConstantOfShape that takes it gets the symbolic size, so one
compiled program serves every value of n. A product of two symbolic sizes (batch * seq) is a
`Product`, which only a Reshape merging those axes takes (onnx/merged.py). An operator outside
this set that meets a symbolic value raises UnsupportedError (never the value of the first run).
"""
from __future__ import annotations

from ..errors import ModelError, UnsupportedError
from ..graph.dims import Sym
from .values import Static


class SymStatic(Static):
  """A Static host value that holds a symbolic size (a Sym or a Product) among its ints."""
  __slots__ = ()


class Product:
  """The product of sizes two of which are symbolic (batch * seq): no size (graph/dims.py: sizes
  are affine in the dims), but a Reshape that merges those axes recognises it (onnx/merged.py);
  any arithmetic on it but a product, or its use as a size, raises UnsupportedError."""
  __slots__ = ("factors",)

  def __init__(self, factors):
    self.factors = tuple(factors)     # the sizes multiplied (Sym or int)

  def same(self, sizes) -> bool:
    """Whether the product of `sizes` (Sym or int) is this one, in any order."""
    return _parts(self.factors) == _parts(sizes)

  def __mul__(self, other):
    if isinstance(other, Product):
      return Product(self.factors + other.factors)
    if isinstance(other, (Sym, int)) and not isinstance(other, bool):
      return Product(self.factors + (other,))
    return NotImplemented

  __rmul__ = __mul__

  def __eq__(self, other) -> bool:
    return isinstance(other, Product) and self.same(other.factors)

  def __hash__(self) -> int:
    return hash(_parts(self.factors))

  def __repr__(self) -> str:
    return " * ".join(f"({f})" if isinstance(f, Sym) else str(f) for f in self.factors)

  def _refuse(self, *_):
    raise UnsupportedError(f"the size {self} is a product of symbolic sizes, which is no size "
                           f"kernelgen holds (sizes are affine in the dims): only a Reshape that "
                           f"merges those axes takes it; fix one of the dims at load "
                           f"(dims={{name: size}})")

  __add__ = __radd__ = __sub__ = __rsub__ = __floordiv__ = __neg__ = __int__ = _refuse


def _parts(sizes) -> tuple:
  """(the symbolic factors in a canonical order, the product of the int ones)."""
  syms, n = [], 1
  for s in sizes:
    if isinstance(s, Sym):
      syms.append(s)
    else:
      n *= s
  return tuple(sorted(syms, key=repr)), n


def _static(dtype, shape, values) -> Static:
  """A Static, a SymStatic where some value is symbolic."""
  values = list(values)
  cls = SymStatic if any(isinstance(v, (Sym, Product)) for v in values) else Static
  return cls(dtype, shape, values)


def has_sym(s) -> bool:
  """Whether host value `s` holds a symbolic size (is a SymStatic)."""
  return isinstance(s, SymStatic)




def _rows(s: Static, axis: int) -> tuple[int, int, int]:
  """(outer, length, inner) of `s` around `axis`."""
  outer = 1
  for n in s.shape[:axis]:
    outer *= n
  inner = 1
  for n in s.shape[axis + 1:]:
    inner *= n
  return outer, s.shape[axis], inner


def _axis(a: int, ndim: int, what: str) -> int:
  if not -ndim <= a < max(ndim, 1):
    raise ModelError(f"{what}: axis {a} is outside a {ndim}-d value")
  return a + ndim if a < 0 else a


def shape_of(x, at) -> Static:
  """Shape of tensor `x`, its symbolic sizes kept as expressions."""
  shape = list(x.symbolic_shape)
  start, end = at.int("start", 0), at.int("end", len(shape))
  part = shape[slice(start, end)]
  from ..dtype import dtypes
  return _static(dtypes.int64, (len(part),), part)


def size_of(x) -> Static:
  from ..dtype import dtypes
  total = 1
  for s in x.symbolic_shape:
    total = _mul(total, s)
  return _static(dtypes.int64, (), [total])


def _gather(ins: list, at, what: str) -> Static:
  data, idx = ins
  axis = _axis(at.int("axis", 0), len(data.shape), what)
  outer, length, inner = _rows(data, axis)
  values = []
  for o in range(outer):
    for i in idx.values:
      i = int(i) + length if int(i) < 0 else int(i)
      if not 0 <= i < length:
        raise ModelError(f"{what}: index {i} is outside an axis of {length}")
      values += data.values[(o * length + i) * inner:(o * length + i + 1) * inner]
  shape = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
  return _static(data.dtype, shape, values)


def _concat(ins: list, at, what: str) -> Static:
  first = ins[0]
  axis = _axis(at.int("axis", 0), len(first.shape), what)
  outer = _rows(first, axis)[0]
  values, length = [], 0
  for o in range(outer):
    for s in ins:
      _, n, inner = _rows(s, axis)
      values += s.values[o * n * inner:(o + 1) * n * inner]
  length = sum(s.shape[axis] for s in ins)
  return _static(first.dtype, first.shape[:axis] + (length,) + first.shape[axis + 1:], values)


def _reshaped(ins: list, shape: tuple) -> Static:
  return _static(ins[0].dtype, shape, ins[0].values)


def _unsqueeze(ins: list, at, axes) -> Static:
  shape = list(ins[0].shape)
  for a in sorted(_axis(a, len(shape) + len(axes), "Unsqueeze") for a in axes):
    shape.insert(a, 1)
  return _reshaped(ins, tuple(shape))


def _squeeze(ins: list, at, axes) -> Static:
  shape = ins[0].shape
  drop = {_axis(a, len(shape), "Squeeze") for a in axes} if axes else \
      {a for a, n in enumerate(shape) if n == 1}
  return _reshaped(ins, tuple(n for a, n in enumerate(shape) if a not in drop))


def _slice_1d(ins: list, starts, ends, axes, steps) -> Static:
  s = ins[0]
  if len(s.shape) != 1 or (axes and list(axes) not in ([0], [-1])):
    raise UnsupportedError("Slice of a symbolic shape value: only 1-d values are supported")
  step = steps[0] if steps else 1
  part = s.values[slice(starts[0], ends[0], step)]
  return _static(s.dtype, (len(part),), part)


def _binary(ins: list, fn) -> Static:
  if len(ins) > 2:       # variadic Max / Min / Sum: pairwise
    return _binary([_binary(ins[:2], fn)] + list(ins[2:]), fn)
  a, b = ins
  if a.size != b.size and 1 not in (a.size, b.size):
    raise UnsupportedError("elementwise arithmetic on symbolic shape values of different sizes")
  n = max(a.size, b.size)
  av = a.values * n if a.size == 1 else a.values
  bv = b.values * n if b.size == 1 else b.values
  shape = a.shape if a.size >= b.size else b.shape
  return _static(a.dtype, shape, [fn(x, y) for x, y in zip(av, bv)])


def _mul(x, y):
  if isinstance(x, Sym) and isinstance(y, Sym):     # batch * seq: a Reshape merging them takes it
    return Product((x, y))
  return y * x if isinstance(y, (Sym, Product)) else x * y


def _div(x, y):
  if isinstance(y, Sym):
    raise UnsupportedError(f"a division by the symbolic size {y} is not supported")
  return x // int(y)


def _diff(x, y):
  return x - y if not isinstance(y, Sym) else -1 * y + x


# (true when the difference x - y is in lo..hi, false when) for each comparison: ranges decide
_TEST = {"Equal": (lambda lo, hi: lo == hi == 0, lambda lo, hi: lo > 0 or hi < 0),
         "Less": (lambda lo, hi: hi < 0, lambda lo, hi: lo >= 0),
         "Greater": (lambda lo, hi: lo > 0, lambda lo, hi: hi <= 0),
         "LessOrEqual": (lambda lo, hi: hi <= 0, lambda lo, hi: lo > 0),
         "GreaterOrEqual": (lambda lo, hi: lo >= 0, lambda lo, hi: hi < 0)}


def _decide(op: str, x, y) -> bool:
  """Comparison `op` of x and y (ints or symbolic sizes), decided for every value of the dims
  by the range of x - y; UnsupportedError when the answer depends on the bound values."""
  d = _diff(x, y)
  lo, hi = (d.lo, d.hi) if isinstance(d, Sym) else (d, d)
  yes, no = _TEST[op]
  if yes(lo, hi):
    return True
  if no(lo, hi):
    return False
  raise UnsupportedError(f"{op} of {x} and {y} depends on the bound values ({d} is in "
                         f"{lo}..{hi}): fix a dim at load (dims={{name: size}})")


def _compare(op: str):
  return lambda x, y: int(_decide(op, x, y))


def _extreme(op: str):
  """Max or Min of two sizes (a symbolic one decided by the range: max(n, 1) is n for n >= 1)."""
  def pick(x, y):
    return x if _decide("GreaterOrEqual" if op == "Max" else "LessOrEqual", x, y) else y
  return pick


_COMPARE = tuple(_TEST)
_BINARY = {"Add": lambda x, y: x + y if not isinstance(y, Sym) else y + x,
           "Sub": lambda x, y: x - y if not isinstance(y, Sym) else -1 * y + x,
           "Mul": _mul, "Div": _div, "Max": _extreme("Max"), "Min": _extreme("Min"),
           **{op: _compare(op) for op in _COMPARE}}


def _broadcast(ins: list) -> tuple:
  """(shape, [flat values of each input broadcast to it]) of 0-d and 1-d host values."""
  n = max(s.size for s in ins)
  if any(s.size not in (1, n) for s in ins):
    raise UnsupportedError("elementwise arithmetic on symbolic shape values of different sizes")
  shape = next(s.shape for s in ins if s.size == n)
  return shape, [s.values * n if s.size == 1 and n != 1 else s.values for s in ins]


def _where(ins: list) -> Static:
  """Where(cond, a, b) over shape values: cond must be known (a comparison decided above)."""
  cond = ins[0]
  if has_sym(cond):
    raise UnsupportedError("Where whose condition holds a symbolic size")
  shape, (c, a, b) = _broadcast(ins)
  return _static(ins[1].dtype, shape, [x if k else y for k, x, y in zip(c, a, b)])


def _unary(op: str, s: Static) -> Static | None:
  if op == "Neg":
    return _static(s.dtype, s.shape, [-1 * v for v in s.values])
  if op == "Abs":
    return _static(s.dtype, s.shape, [v if _decide("GreaterOrEqual", v, 0) else -1 * v
                                      for v in s.values])
  return None


def evaluate(op: str, ins: list, at, opset: int, what: str):
  """The Static result of shape operator `op` over Static inputs `ins` (some holding symbolic
  sizes), or None when `op` is not one computed here."""
  if op in _BINARY:
    out = _binary(ins, _BINARY[op])
    if op in _COMPARE:
      from ..dtype import dtypes
      return Static(dtypes.bool, out.shape, [bool(v) for v in out.values])
    return out
  if op == "Where":
    return _where(ins)
  if op in ("Neg", "Abs"):
    return _unary(op, ins[0])
  if op in ("Identity", "Cast"):
    return _static(ins[0].dtype, ins[0].shape, ins[0].values)
  if op == "Gather":
    return _gather(ins, at, what)
  if op == "Concat":
    return _concat(ins, at, what)
  if op in ("Unsqueeze", "Squeeze"):
    axes = [int(v) for v in ins[1].values] if len(ins) > 1 and ins[1] is not None else \
        (at.ints("axes") or [])
    return (_unsqueeze if op == "Unsqueeze" else _squeeze)(ins[:1], at, axes)
  if op == "Slice" and opset >= 10:
    ints = [[int(v) for v in s.values] if s is not None else None for s in ins[1:5]]
    ints += [None] * (4 - len(ints))
    return _slice_1d(ins, *ints)
  return None


def refuse(op: str, what: str):
  """The error for a symbolic size reaching an operator that cannot compute with it."""
  return UnsupportedError(f"{what}: {op} of a shape value that holds a symbolic size: shape "
                          f"computations over a symbolic dim support Shape, Size, Gather, "
                          f"Concat, Unsqueeze, Squeeze, Slice, Add, Sub, Mul, Div, Max, Min, "
                          f"Neg, Abs, Equal, Less, Greater (decided by the dims' ranges), "
                          f"Where, Cast into "
                          f"Reshape, Expand, Range and ConstantOfShape; fix the dim at load "
                          f"(dims={{name: size}}) to fold the rest")


__all__ = ["Product", "SymStatic", "evaluate", "has_sym", "refuse", "shape_of", "size_of"]
