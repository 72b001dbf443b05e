"""In-place KV cache appends for kg.generate (issues 34, 35): a decode step's present cache is the
past's own buffer with the new rows written at the past length (each batch row at its own: a
GroupQueryAttention's seqlens_k) by one small kernel (L.WRITE, tensor/symbolic.write's node;
graph/schedule.py's write fusion), never a select or concat over every row. Only where the
caller opted in (kg.generate's copy of the model sets `kv_in_place`: a model run by the user
never has its inputs written) and the past is a realized buffer fed as itself or as a prefix
of itself (kg.generate's preallocated cache at the context's size).
"""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...graph.dims import Sym, physical
from ...graph.lazy import L, LazyOp
from ...graph.view import contiguous_strides
from ...tensor.tensor import Tensor


def enabled(ins) -> bool:
  """Whether this run may write its past caches in place (kg.generate's model copy)."""
  return bool(getattr(ins.runner.model, "kv_in_place", False))


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


def append(past: Tensor, new: Tensor, axis: int, start: Tensor, sym: tuple) -> Tensor | None:
  """The present of logical shape `sym`: past's buffer with `new` written along `axis` at rows
  start .. start + new's length - 1 (`start` an int32 tensor of shape (), or (B,) when axis 0
  is a batch of B > 1 rows: each row from its own start); None where past's buffer is not one
  to write (not realized, not of the present's padded shape)."""
  from ...tensor.symbolic import masked, scalar
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
  stop = at + (scalar(Tensor, n, new.device) if isinstance(n, Sym) else n)
  return Tensor(LazyOp(L.WRITE, base.dtype, base.shape, (base, v.node, at.node, stop.node), axis,
                       sym=tuple(sym)))


def concat(xs: list, axis: int) -> Tensor | None:
  """Concat(past, new) along a symbolic past axis as an in-place append (see `append`)."""
  from ...tensor.symbolic import scalar
  if len(xs) != 2:
    return None
  past, new = xs
  n, m = past.symbolic_shape[axis], new.symbolic_shape[axis]
  if not isinstance(n, Sym):
    return None
  sym = list(past.symbolic_shape)
  sym[axis] = n + m          # m: the new rows, a number or a symbolic seq (rows past + seq.hi)
  return append(past, new, axis, scalar(Tensor, n, past.device), tuple(sym))


__all__ = ["append", "concat", "enabled", "prefix_base"]
