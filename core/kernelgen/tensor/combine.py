"""Functions that combine tensors — `where`, `cat`, `stack`, and `pad_widths` (a pad by symbolic
widths: a cat of fills) — kept below tensor.py so the operation mixins can use them (tensor.py
re-exports them as the public `kg.where` etc.)."""
from __future__ import annotations

from ..graph.combine_sizes import agree, size_mismatch
from ..graph.dims import Sym
from ..dtype import dtypes
from ..errors import DTypeError, ShapeError
from ..graph.lazy import L, LazyOp
from ..uop.ops import Ops
from .autograd import record
from .operands import TensorOps, array_operand, check_sizes, result_dtype
from .data import broadcast_shape, resolve_axes


def tensor_class(*xs) -> type:
  """The Tensor class, from the first operand that is a Tensor (a typed error when none is)."""
  for x in xs:
    if isinstance(x, TensorOps):
      return type(x)
  raise DTypeError("this operation needs at least one Tensor operand: wrap one with kg.Tensor()")


def where(cond, x, y) -> TensorOps:
  """numpy.where(cond, x, y): x where cond is true (nonzero), else y. cond, x and y are Tensors
  or Python values; the result has their broadcast shape and x's and y's promoted dtype.

  Raises ShapeError when the shapes do not broadcast."""
  cls = tensor_class(cond, x, y)
  cond = cond if isinstance(cond, TensorOps) else cls(cond)
  x, y = (array_operand(v, cls, cond.device) for v in (x, y))
  dtype = result_dtype(x, y)
  a, b = (v if isinstance(v, TensorOps) else cls(cls._full_node((), v, dtype, cond.device))
          for v in (x, y))
  check_sizes((cond, a, b))
  shape = broadcast_shape(cond.shape, a.shape, b.shape)
  c = cond.cast(dtypes.bool).expand(shape)
  a, b = a.cast(dtype).expand(shape), b.cast(dtype).expand(shape)
  return record(cls(LazyOp(L.ALU, dtype, shape, (c.node, a.node, b.node), Ops.WHERE)),
                (c, a, b), "alu", Ops.WHERE)


def cat(tensors, axis: int = 0) -> TensorOps:
  """numpy.concatenate: the tensors joined along an existing `axis` (one kernel: padded views
  added); the other dims must be equal. Result dtype: the tensors' promoted dtype.

  Raises ShapeError for no tensors, tensors of different ndim or other dims that differ."""
  tensors = list(tensors)
  if not tensors:
    raise ShapeError("cat needs at least one tensor")
  first = tensors[0]
  axis = resolve_axes(axis, first.ndim)[0]
  for t in tensors[1:]:
    if t.ndim == first.ndim and (t.node.sym or first.node.sym):
      for i, (a, b) in enumerate(zip(first.node.sym or first.shape, t.node.sym or t.shape)):
        if i != axis and (isinstance(a, Sym) or isinstance(b, Sym)) and not agree(a, b):
          raise size_mismatch(i, a, b)
    if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape))
                                   if i != axis):
      raise ShapeError(f"cat of shapes {first.shape} and {t.shape} along axis {axis}: every "
                       f"other dim must match")
  dtype = result_dtype(*tensors)
  if any(t.node.sym is not None and isinstance(t.node.sym[axis], Sym) for t in tensors):
    from .symbolic import cat as symbolic_cat      # parts at run-time offsets
    return symbolic_cat([t.cast(dtype) for t in tensors], axis)
  total = sum(t.shape[axis] for t in tensors)
  out, start = None, 0
  for t in tensors:
    pads = [(0, 0)] * first.ndim
    pads[axis] = (start, total - start - t.shape[axis])
    piece = t.cast(dtype).pad(pads)
    if out is None:
      out = piece
    elif dtype.is_float():    # not +: -0.0 + 0.0 is 0.0
      out = where(type(t).ones(*t.shape, dtype=dtypes.bool, device=t.device).pad(pads), piece, out)
    else:
      out = out | piece if dtype == dtypes.bool else out + piece
    start += t.shape[axis]
  return out


def stack(tensors, axis: int = 0) -> TensorOps:
  """numpy.stack: tensors of one shape joined along a new `axis` (0..ndim): shape
  (..., len(tensors), ...); their promoted dtype.

  Raises ShapeError for no tensors or tensors of different shapes."""
  tensors = list(tensors)
  if not tensors:
    raise ShapeError("stack needs at least one tensor")
  axis = resolve_axes(axis, tensors[0].ndim + 1)[0]
  shapes = {t.shape for t in tensors}
  if len(shapes) > 1:
    raise ShapeError(f"stack needs tensors of one shape, got {sorted(shapes)}")
  return cat([t.unsqueeze(axis) for t in tensors], axis)


def pad_widths(x, pads, value):
  """Tensor.pad (constant) with symbolic widths (`x.pad(((0, n), (0, 0)))`): along each axis with
  one, a cat of fills of the widths before and after x (kg.cat places them at run-time offsets),
  then the static widths of the other axes as usual."""
  out = x
  for a, (before, after) in enumerate(pads):
    if not isinstance(before, Sym) and not isinstance(after, Sym):
      continue
    parts = [_fill_like(out, a, before, value), out, _fill_like(out, a, after, value)]
    out = cat([p for p in parts if p is not None], a)
  rest = tuple((0, 0) if isinstance(b, Sym) or isinstance(e, Sym) else (b, e) for b, e in pads)
  return out.pad(rest, value) if any(b or e for b, e in rest) else out


def _fill_like(x, axis: int, width, value):
  """A tensor of x's logical shape but `width` along `axis`, filled with value (None: width 0)."""
  from .symbolic import full
  if not isinstance(width, Sym) and not width:
    return None
  shape = list(x.node.logical)
  shape[axis] = width
  return full(type(x), tuple(shape), value, x.dtype, x.device)
