"""In-place KV cache appends for kg.generate (issues 34, 35): a decode step's present cache is the
past's own buffer with the new rows written at the past length (each batch row at its own: a
GroupQueryAttention's seqlens_k) by one small kernel (L.WRITE, tensor/symbolic.write's node;
graph/schedule.py's write fusion), never a select or concat over every row. Only where the
caller opted in (kg.generate's copy of the model sets `kv_in_place`: a model run by the user
never has its inputs written) and the past is a realized buffer fed as itself or as a prefix
of itself (kg.generate's preallocated cache at the context's size). `append` and `prefix_base`
live in tensor/kv_append.py (kg.nn.kv_append writes with them too).
"""
from __future__ import annotations

from ...graph.dims import Sym
from ...tensor.kv_append import append, prefix_base
from ...tensor.tensor import Tensor


def enabled(ins) -> bool:
  """Whether this run may write its past caches in place (kg.generate's model copy)."""
  return bool(getattr(ins.runner.model, "kv_in_place", False))


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
