"""ONNX values whose leading axis merges several ranged symbolic dims (issue 34): the exporters'
linear layer over (batch, seq, hidden), `Reshape(x, [-1, H])` -> Gemm / MatMul -> `Reshape(y,
Concat(Gather(Shape(x), [0, 1]), [N]))`.

A padded layout cannot hold the product batch * seq on one axis (graph/dims.py: sizes are affine
in the dims, and the values would not come first). So such a Reshape does not reshape: the value
keeps its physical (batch, seq, ..., H) tensor and a `Group` records that its logical axis 0 is
the first k physical axes. Ops that treat the rows of the logical value independently run on the
physical tensor as is (their axes past 0 moved by k - 1): elementwise ops whose other operands
broadcast over the leading axis (or are grouped alike), MatMul / Gemm by a 2-d right operand,
Softmax, LayerNormalization and the like over a later axis, Split, Slice, Gather, ArgMax along a
later axis, Transpose that keeps axis 0 first, reductions (over the grouped axis: over all k).
A Reshape whose target starts with the merged dims (from the shape subgraph, or equal ints)
splits the value back: the physical tensor, viewed as is. Shape of the later axes is known.
Anything else that meets a grouped value (a graph output included) raises UnsupportedError
naming the node; fixing one of the dims at load (dims={name: size}) avoids the merge.
"""
from __future__ import annotations

import copy

from ..dtype import dtypes
from ..errors import UnsupportedError
from ..graph.dims import Sym, describe_sym
from .symshape import Product, SymStatic, has_sym
from .values import Static


class Group:
  """How a value's logical axis 0 lies in its physical tensor: the first `k` physical axes, of
  logical sizes `heads` (Sym or int: two symbolic, or one behind a static size)."""
  __slots__ = ("k", "heads")

  def __init__(self, k: int, heads: tuple):
    self.k = k                # physical leading axes merged into logical axis 0
    self.heads = heads        # their logical sizes

  def __eq__(self, other) -> bool:
    return isinstance(other, Group) and self.k == other.k and self.heads == other.heads

  def __hash__(self) -> int:
    return hash((self.k, self.heads))

  def __repr__(self) -> str:
    return " * ".join(f"({h})" if isinstance(h, Sym) else str(h) for h in self.heads)

  def rank(self, t) -> int:
    """The logical rank of physical tensor `t` grouped this way."""
    return t.ndim - self.k + 1

  def axis(self, a: int) -> int:
    """The physical axis of logical axis a >= 1."""
    return a + self.k - 1


def evaluate(runner, node, fn) -> bool:
  """Compute `node` here when it starts or meets a grouped value: True when its outputs are
  stored, False for a node to evaluate as usual; UnsupportedError for a grouped input it cannot
  take."""
  grouped = runner.grouped
  groups = {n: grouped[n] for n in node.inputs if n in grouped}
  captured = [n for n in node.captures if n in grouped]
  if captured:
    raise refuse(node, captured[0], grouped[captured[0]], "a subgraph reads it")
  if not groups:
    return node.op == "Reshape" and _merge(runner, node)
  key = node.op if node.proto.domain in ("", "ai.onnx") else (node.proto.domain, node.op)
  rule = RULES.get(key)
  if rule is None:
    name = next(iter(groups))
    raise refuse(node, name, groups[name], f"{node.op} is not an operator that keeps the rows "
                 f"apart here")
  rule(runner, node, fn, groups)
  return True


def refuse(node, name: str, group: Group, why: str) -> UnsupportedError:
  """The error for grouped value `name` reaching `node` (or a graph output when node is None)."""
  # fixing the last symbolic dim leaves a symbolic size that leads static ones (an affine merge)
  last = [h for h in group.heads if isinstance(h, Sym)][-1].names[0]
  where = node.describe() if node is not None else f"graph output {name!r}"
  back = "reshape back before this node" if node is not None else \
    f"end the graph with a Reshape back to {describe_sym(group.heads)[:-1]}, ...)"
  return UnsupportedError(
    f"{where}: {name!r} is a Reshape's merge of the axes {describe_sym(group.heads)} into "
    f"one axis (their product, {group}), which kernelgen keeps unmerged and passes only through "
    f"row-wise ops (elementwise, MatMul/Gemm by a matrix, Softmax/LayerNormalization/Split/Slice "
    f"along a later axis, reductions) and a Reshape back to {describe_sym(group.heads)}; {why}. "
    f"Fix {last} at load (kg.onnx.load(src, dims={{{last!r}: size}}), or each dim before it "
    f"to 1), or {back}")


def check_outputs(runner) -> None:
  """UnsupportedError for a graph output that is a grouped value (no layout returns it)."""
  for name in runner.model.output_names:
    if name in runner.grouped:
      raise refuse(None, name, runner.grouped[name], "a graph output has no padded layout of "
                   "the product (its rows lie apart in the padded tensor, so no flattening of it "
                   "is exact)")


# ---- the Reshape that merges, and the one that splits back ----------------------------------

def _merge(runner, node) -> bool:
  """Reshape (..symbolic.., tail) -> (-1, tail') that merges two ranged dims (or one behind a
  static size: (3, seq)): keep the physical axes, record the Group. False for every other
  Reshape (evaluated as usual)."""
  x = runner.tensors.get(node.inputs[0])
  target = _target(runner, node)
  if x is None or x.node.sym is None or not isinstance(target, Static) or not target.values:
    return False
  first, shape = target.values[0], list(target.values[1:])
  if not (_is(first, -1) or isinstance(first, Product)) or \
     any(isinstance(v, (Sym, Product)) or v <= 0 for v in shape):
    return False
  sym, want, k = x.node.sym, _prod(shape), x.ndim
  while k > 0 and isinstance(sym[k - 1], int) and _prod(sym[k - 1:]) <= want:
    k -= 1
  heads = tuple(sym[:k])
  if _prod(sym[k:]) != want or not _unlaid(heads) or \
     isinstance(first, Product) and not first.same(heads):
    return False
  _put(runner, node, [x.reshape(heads + tuple(shape))], Group(k, heads))
  return True


def _unlaid(heads) -> bool:
  """Whether merging `heads` has no padded layout: two symbolic sizes, or one behind a size
  other than 1 (graph/dims.py keeps a merged group's symbolic size in front)."""
  syms = [a for a, s in enumerate(heads) if isinstance(s, Sym)]
  lead = next(a for a, s in enumerate(heads) if isinstance(s, Sym) or s != 1) if syms else None
  return len(syms) > 1 or bool(syms) and lead != syms[0]


def _target(runner, node):
  if node.opset < 5:
    values = node.attrs.ints("shape")
    return None if values is None else Static(dtypes.int64, (len(values),), values)
  return runner.static.get(node.inputs[1]) if len(node.inputs) > 1 else None


def _reshape(runner, node, fn, groups) -> None:
  name = node.inputs[0]
  g, target = groups.get(name), _target(runner, node)
  if g is None or target is None or not isinstance(target, Static):
    raise refuse(node, next(iter(groups)), next(iter(groups.values())),
                 "its target shape must be a known value")
  x, values = runner.tensors[name], list(target.values)
  tail = x.symbolic_shape[g.k:]
  allowzero = node.attrs.int("allowzero", 0)
  heads = values[:g.k]
  if len(values) >= g.k and _matches(heads, g.heads):      # split back: (batch, seq, ...)
    rest = [_copied(v, i + g.k, x, g, allowzero) for i, v in enumerate(values[g.k:])]
    out = x.reshape(tuple(g.heads) + tuple(_resolve(rest, _prod(tail), node, g, name)))
    _put(runner, node, [out], None)
    return
  if values and (_is(values[0], -1) or isinstance(values[0], Product) and
                 values[0].same(g.heads)):                    # stays merged: (-1, tail')
    rest = [_copied(v, i + 1, x, g, allowzero) for i, v in enumerate(values[1:])]
    if not any(isinstance(v, (Sym, Product)) or v == -1 for v in rest) and \
       _prod(rest) == _prod(tail):
      _put(runner, node, [x.reshape(tuple(g.heads) + tuple(rest))], g)
      return
  raise refuse(node, name, g, f"its target {values} neither starts with the merged dims nor "
               f"keeps them merged (-1 first)")


def _matches(values, heads) -> bool:
  """Whether a Reshape target's leading values are the merged sizes (one may be -1)."""
  if len(values) != len(heads) or sum(_is(v, -1) for v in values) > 1:
    return False
  return all(_is(v, -1) or v == h and isinstance(v, Sym) == isinstance(h, Sym)
             for v, h in zip(values, heads))


def _copied(v, logical: int, x, g: Group, allowzero: int):
  """Reshape's 0 (copy the input's size at this logical axis) resolved."""
  if allowzero or not _is(v, 0) or not 1 <= logical < g.rank(x):
    return v
  return x.symbolic_shape[g.axis(logical)]


def _resolve(rest: list, total: int, node, g, name) -> list:
  """The split-back target's later sizes, one -1 resolved against the physical tail."""
  if any(isinstance(v, (Sym, Product)) for v in rest) or sum(_is(v, -1) for v in rest) > 1:
    raise refuse(node, name, g, f"its later sizes {rest} must be ints, at most one -1")
  known = _prod(v for v in rest if not _is(v, -1))
  if -1 in rest:
    rest = [total // known if _is(v, -1) else v for v in rest]
  if _prod(rest) != total:
    raise refuse(node, name, g, f"its later sizes {rest} do not hold the {total} values of a row")
  return rest


# ---- ops that keep the rows apart ----------------------------------------------------------

def _put(runner, node, outs: list, group) -> None:
  runner.put(node, outs)
  for name, out in zip(node.outputs, outs):
    if name and out is not None and group is not None:
      runner.grouped[name] = group


def _rank_of(runner, name: str):
  """The logical shape of a non-grouped input (a Tensor's or a host value's)."""
  if name in runner.tensors:
    return tuple(runner.tensors[name].symbolic_shape)
  s = runner.static.get(name)
  return tuple(s[1]) if isinstance(s, tuple) else tuple(s.shape)


def _group_of(node, groups: dict, runner) -> tuple:
  """(the one Group of the node's grouped inputs, its logical rank); refuses two groupings."""
  items = list(groups.items())
  name, g = items[0]
  ranks = {g.rank(runner.tensors[n]) for n, _ in items}
  for other, h in items[1:]:
    if h != g or len(ranks) > 1:
      raise refuse(node, other, h, f"it meets {name!r}, merged differently ({g}) or of "
                   f"another rank")
  return g, ranks.pop()


def _elementwise(runner, node, fn, groups) -> None:
  """Operands broadcast over the merged axis (rank below the grouped one's, or 1 there)."""
  g, rank = _group_of(node, groups, runner)
  for name in node.inputs:
    if not name or name in groups:
      continue
    shape = _rank_of(runner, name)
    if len(shape) > rank or len(shape) == rank and not _is(shape[0], 1):
      raise refuse(node, next(iter(groups)), g, f"its operand {name!r} of shape "
                   f"{describe_sym(shape)} does not broadcast over the merged axis")
  _put(runner, node, runner.run_node(node, fn), g)


def _matmul(runner, node, fn, groups) -> None:
  """A @ B with A grouped, B a matrix (or vector) of weights: row by row."""
  a = node.inputs[0]
  g = groups.get(a)
  if g is None or len(groups) > 1 or len(_rank_of(runner, node.inputs[1])) not in (1, 2) or \
     g.rank(runner.tensors[a]) < 2:
    name = next(iter(groups))
    raise refuse(node, name, groups[name], "only the left operand of a product by a matrix "
                 "may be merged")
  _put(runner, node, runner.run_node(node, fn), g)


def _gemm(runner, node, fn, groups) -> None:
  """alpha A B + beta C with A grouped (transA = 0), C broadcast over the rows."""
  a = node.inputs[0]
  g = groups.get(a)
  c = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
  ok = g is not None and not node.attrs.int("transA", 0) and node.inputs[1] not in groups
  if ok and c is not None and c not in groups:
    shape = _rank_of(runner, c)
    ok = len(shape) < 2 or _is(shape[0], 1)
  if not ok:
    name = next(iter(groups))
    raise refuse(node, name, groups[name], "Gemm takes it as A (transA = 0) with C broadcast "
                 "over its rows")
  _group_of(node, groups, runner)
  _put(runner, node, runner.run_node(node, fn), g)


def _along(default: int, flattens: bool = False):
  """An op along one axis (attribute `axis`) past the merged one: the axis moved by k - 1.
  flattens: before opset 13 the op (Softmax ...) takes axes axis.. (default 1) as one."""
  def rule(runner, node, fn, groups) -> None:
    name = node.inputs[0]
    g = groups.get(name)
    if g is None or len(groups) > 1:
      other = next(iter(groups))
      raise refuse(node, other, groups[other], "only its first input may be merged")
    rank = g.rank(runner.tensors[name])
    axis = node.attrs.int("axis", 1 if flattens and node.opset < 13 else default)
    a = axis + rank if axis < 0 else axis
    if not 0 < a < rank:
      raise refuse(node, name, g, f"its axis {axis} is the merged one (or no axis of it)")
    if flattens and node.opset < 13 and a != rank - 1:
      raise refuse(node, name, g, f"opset {node.opset} flattens axes {a}.. with it")
    changed = _with_attr(node, "axis", g.axis(a))
    if flattens:
      changed.opset = max(node.opset, 13)     # one (last) axis: the same in every opset
    _put(runner, node, runner.run_node(changed, fn), g)
  return rule


def _gather(runner, node, fn, groups) -> None:
  """Gather along a later axis of a grouped value (by ungrouped indices)."""
  if node.inputs[1] in groups:
    raise refuse(node, node.inputs[1], groups[node.inputs[1]], "Gather takes ungrouped indices")
  _along(0)(runner, node, fn, groups)


def _transpose(runner, node, fn, groups) -> None:
  name = node.inputs[0]
  g = groups[name]
  rank = g.rank(runner.tensors[name])
  perm = node.attrs.ints("perm") or list(range(rank - 1, -1, -1))
  if perm[0] != 0:
    raise refuse(node, name, g, f"its perm {list(perm)} moves the merged axis")
  physical = list(range(g.k)) + [g.axis(p) for p in perm[1:]]
  _put(runner, node, runner.run_node(_with_attr(node, "perm", physical, "INTS"), fn), g)


def _slice(runner, node, fn, groups) -> None:
  """Slice along later axes (the axes given)."""
  name = node.inputs[0]
  g = groups[name]
  rank = g.rank(runner.tensors[name])
  if node.opset < 10:
    axes = node.attrs.ints("axes")
  else:
    s = runner.static.get(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else None
    axes = [int(v) for v in s.values] if isinstance(s, Static) and not has_sym(s) else None
  axes = None if axes is None else [a + rank if a < 0 else a for a in axes]
  if len(groups) > 1 or axes is None or 0 in axes:
    raise refuse(node, name, g, "it slices the merged axis (give `axes` of later ones)")
  physical = [g.axis(a) for a in axes]
  changed = _with_attr(node, "axes", physical, "INTS") if node.opset < 10 else \
    _with_input(runner, node, 3, physical)
  _put(runner, node, runner.run_node(changed, fn), g)


def _squeezes(runner, node, fn, groups) -> None:
  """Unsqueeze / Squeeze of later axes (axes given)."""
  name = node.inputs[0]
  g = groups[name]
  from_input = node.opset >= 13
  axes = _axes_input(runner, node, g, name) if from_input else node.attrs.ints("axes")
  rank = g.rank(runner.tensors[name]) + (len(axes or ()) if node.op == "Unsqueeze" else 0)
  axes = None if not axes else [a + rank if a < 0 else a for a in axes]
  if len(groups) > 1 or axes is None or 0 in axes:
    raise refuse(node, name, g, f"{node.op} takes `axes` past the merged one")
  physical = [g.axis(a) for a in axes]
  changed = _with_input(runner, node, 1, physical) if from_input else \
    _with_attr(node, "axes", physical, "INTS")
  _put(runner, node, runner.run_node(changed, fn), g)


def _axes_input(runner, node, g, name):
  """The host values of `node`'s axes input (input 1), None when absent."""
  s = runner.static.get(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
  if s is not None and (not isinstance(s, Static) or has_sym(s)):
    raise refuse(node, name, g, "its axes must be a known value")
  return None if s is None else [int(v) for v in s.values]


def _reduce(runner, node, fn, groups) -> None:
  """A reduction: over later axes it stays grouped; over the merged one, over all k."""
  name = node.inputs[0]
  g = groups[name]
  x = runner.tensors[name]
  rank = g.rank(x)
  from_input = node.op == "ReduceSum" and node.opset >= 13 or node.opset >= 18
  axes = (_axes_input(runner, node, g, name) if from_input else node.attrs.ints("axes")) or []
  if len(groups) > 1 or not axes and node.attrs.int("noop_with_empty_axes", 0):
    raise refuse(node, name, g, "a reduction takes it as its only input, over given axes")
  axes = sorted({a + rank if a < 0 else a for a in axes} if axes else range(rank))
  physical = [p for a in axes for p in (range(g.k) if a == 0 else [g.axis(a)])]
  changed = _with_input(runner, node, 1, physical) if from_input else \
    _with_attr(node, "axes", physical, "INTS")
  outs = runner.run_node(changed, fn)
  if 0 not in axes:
    _put(runner, node, outs, g)
    return
  if node.attrs.int("keepdims", 1):     # (1, ..., 1, tail) -> (1, tail)
    outs = [outs[0].reshape(tuple(outs[0].symbolic_shape[g.k - 1:]))]
  _put(runner, node, outs, None)


def _shape(runner, node, fn, groups) -> None:
  """Shape of a grouped value: the merged size is the Product of the merged ones (symshape.py),
  which only a Reshape that merges or splits them takes."""
  name = node.inputs[0]
  g = groups[name]
  x = runner.tensors[name]
  rank = g.rank(x)
  start, end = node.attrs.int("start", 0), node.attrs.int("end", rank)
  start, end = (max(0, min(rank, v + rank if v < 0 else v)) for v in (start, end))
  sizes = [Product(g.heads)] + list(x.symbolic_shape[g.k:])
  part = sizes[start:end]
  cls = SymStatic if any(isinstance(v, (Sym, Product)) for v in part) else Static
  runner.static[node.outputs[0]] = cls(dtypes.int64, (len(part),), part)


def _size(runner, node, fn, groups) -> None:
  """Size of a grouped value: a Product (symshape.py)."""
  name = node.inputs[0]
  g, x = groups[name], runner.tensors[name]
  total = Product(g.heads) * _prod(x.symbolic_shape[g.k:])
  runner.static[node.outputs[0]] = SymStatic(dtypes.int64, (), [total])


def _with_attr(node, name: str, value, kind: str = "INT"):
  """A copy of `node` with attribute `name` set to `value`."""
  changed = copy.copy(node)
  changed.attrs = copy.copy(node.attrs)
  changed.attrs.values = dict(node.attrs.values, **{name: (kind, value)})
  return changed


def _with_input(runner, node, i: int, values: list):
  """A copy of `node` whose input i is the host value `values` (int64)."""
  changed = copy.copy(node)
  name = f"{node.name}:merged.{i}"
  runner.static[name] = Static(dtypes.int64, (len(values),), values)
  changed.inputs = list(node.inputs) + [""] * (i + 1 - len(node.inputs))
  changed.inputs[i] = name
  return changed


def _is(v, n: int) -> bool:
  return not isinstance(v, Sym) and v == n


def _prod(values) -> int:
  out = 1
  for v in values:
    out = out * v
  return out


_ELEMENTWISE = (
  "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Tan", "Tanh", "Sigmoid",
  "Relu", "Floor", "Ceil", "Round", "Sign", "Not", "IsNaN", "IsInf", "BitwiseNot", "Softsign",
  "Softplus", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Atan", "Asin", "Acos", "Erf", "Mish",
  "Elu", "Celu", "Selu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "PRelu",
  "Gelu", "Clip", "Add", "Sum", "Sub", "Mul", "Div", "Mod", "Pow", "Max", "Min", "Mean",
  "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where",
  "Cast", "CastLike", "Identity", "Shrink", "Dropout",
  ("com.microsoft", "Gelu"), ("com.microsoft", "FastGelu"), ("com.microsoft", "BiasGelu"),
  ("com.microsoft", "QuickGelu"),      # and onnxruntime's fused norms over the last axis:
  ("com.microsoft", "SkipLayerNormalization"),
  ("com.microsoft", "SkipSimplifiedLayerNormalization"))
RULES = {**{op: _elementwise for op in _ELEMENTWISE},
         "Reshape": _reshape, "MatMul": _matmul, "Gemm": _gemm, "Shape": _shape, "Size": _size,
         "Softmax": _along(-1, flattens=True), "LogSoftmax": _along(-1, flattens=True),
         "Hardmax": _along(-1, flattens=True), "LayerNormalization": _along(-1),
         "SimplifiedLayerNormalization": _along(-1), "RMSNormalization": _along(-1),
         "Split": _along(0), "ArgMax": _along(0), "ArgMin": _along(0), "Gather": _gather,
         "Transpose": _transpose, "Slice": _slice, "Unsqueeze": _squeezes, "Squeeze": _squeezes,
         **{op: _reduce for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                   "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                                   "ReduceSumSquare", "ReduceLogSumExp")}}

__all__ = ["Group", "RULES", "check_outputs", "evaluate", "refuse"]
