"""Appending rows to a KV cache in place (kg.nn.kv_append; kg.generate's ONNX caches:
onnx/operators/kv_write.py): the present cache is the past's own buffer with the new rows written
at the past length by one small kernel (L.WRITE, as tensor/symbolic.write; graph/schedule.py's
write fusion), never a select or concat over every row. The past must be a realized buffer read
as itself or as a prefix of itself (a preallocated cache at the present's padded size).
"""
from __future__ import annotations

import math

from ..dtype import dtypes
from ..graph.dims import Sym, physical
from ..graph.lazy import L, LazyOp
from ..graph.view import contiguous_strides
from .symbolic import masked, scalar


def prefix_base(node: LazyOp) -> LazyOp | None:
  """The realized node whose buffer `node` reads from its start (itself, or a view that keeps
  a prefix of each axis: offset 0, no mask, the base's strides), else None."""
  if node.realized:
    return node
  if node.op is not L.VIEW or len(node.src) != 1 or not node.src[0].realized:
    return None
  base, view = node.src[0], node.arg
  if view.offset or view.mask is not None or len(view.shape) != len(base.shape) or \
     view.strides != tuple(0 if n == 1 else s for n, s in
                           zip(view.shape, contiguous_strides(base.shape))) or \
     any(n > m for n, m in zip(view.shape, base.shape)):
    return None
  return base


def append(past, new, axis: int, start, sym: tuple):
  """The KV cache append (kg.nn.kv_append, onnx/operators/kv_write.py): the tensor of logical
  shape `sym` that is past's buffer with `new` written along `axis` at rows start .. start +
  new's length - 1 (`start` an int32 tensor of shape (), or (B,) when axis 0 is a batch of B > 1
  rows: each row from its own start), by one small kernel (L.WRITE); None where past's buffer
  is not one to write (not realized, not of the present's padded shape)."""
  cls = type(past)
  base = prefix_base(past.node)
  if base is None or base.shape != tuple(physical(n) for n in sym) or \
     any(n != m for a, (n, m) in enumerate(zip(new.shape, base.shape)) if a != axis):
    return None
  v = new.cast(base.dtype)
  if v.node.sym is not None:
    v = masked(v, range(v.ndim), 0)
  n = new.symbolic_shape[axis]
  starts = math.prod(start.shape)
  if starts != 1 and (axis == 0 or starts != new.shape[0]):
    return None
  at = start.cast(dtypes.int32).reshape((starts,) if starts > 1 else ())   # > 1: one per row
  stop = at + (scalar(cls, n, new.device) if isinstance(n, Sym) else n)
  return cls(LazyOp(L.WRITE, base.dtype, base.shape, (base, v.node, at.node, stop.node), axis,
                    sym=tuple(sym)))


__all__ = ["append", "prefix_base"]
