"""Lowering a gather (lazy `L.GATHER`): a load whose position is a value read from data.

`GATHER(table, index)` along `axis` reads, at output position i, the table at i with i[axis]
replaced by index[i]. The index value is lowered at i (any expression: usually a load of the index
buffer), clamped into 0..n-1 (MAX / MIN, so the table is read at a position that is always
inside it, whatever the data holds), and the table's expression (a buffer, a view of one, or an
elementwise expression over them) is lowered at the clamped position: one indirect load per
output element, however long the table. Where the index was outside 0..n-1 the value is 0 (the
clamped read is discarded by a WHERE): indices computed on the device never read out of bounds.
"""
from __future__ import annotations

from ..graph.lazy import LazyOp
from ..uop.ops import UOp
from .index_math import I32


def _clamp(raw: UOp, n: int) -> tuple[UOp, UOp]:
  """(the index clamped into 0..n-1 as int32, whether it was inside) for an integer index (narrow
  ones widened to int32 first; 64-bit and uint32 ones clamped in their own dtype)."""
  if raw.dtype.itemsize < 4:
    raw = raw.cast(I32)
  low = raw if raw.dtype.is_unsigned() else raw.maximum(raw.const_like(0))
  pos = low.minimum(raw.const_like(n - 1))
  return (pos if pos.dtype == I32 else pos.cast(I32)), pos.eq(raw)


def gather_value(lw, node: LazyOp, idxs: tuple, gate: UOp | None) -> UOp:
  """The value of GATHER `node` at output indices `idxs` (lowered by Lowerer `lw`)."""
  table, index = node.src
  axis = node.arg
  n = table.shape[axis]
  if n == 0:
    return UOp.const(node.dtype, 0)
  pos, inside = _clamp(lw.value(index, idxs, gate), n)
  at = idxs[:axis] + (pos,) + idxs[axis + 1:]
  value = lw.value(table, at, gate)
  return inside.where(value, value.const_like(0))
