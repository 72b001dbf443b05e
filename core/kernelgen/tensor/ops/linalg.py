"""The Tensor's linear algebra: matmul (and @), built from a broadcast multiply and a reduction
(the optimizer tiles it), and dot; the LinalgOps mixin that `Tensor` lists among its bases.
"""
from __future__ import annotations

from ...errors import ShapeError
from ...graph.combine_sizes import agree
from ..operands import TensorOps, acc_dtype, result_dtype


def matmul(a, b, reverse=False):
  """The matrix product self @ other (numpy.matmul): (..., n, k) @ (..., k, m) -> (..., n, m) with
  the leading dimensions broadcast; a 1-d operand is a row (left) or column (right) vector whose
  dimension is dropped from the result. Result dtype: the promoted dtype of the two (integer
  products accumulate in at least 32 bits).

  Raises ShapeError for a 0-d operand or when the inner dimensions differ."""
  a, b = (b, a) if reverse else (a, b)
  a = a if isinstance(a, TensorOps) else type(b)(a, device=b.device)
  b = b if isinstance(b, TensorOps) else type(a)(b, device=a.device)
  if a.ndim == 0 or b.ndim == 0:
    raise ShapeError("matmul needs tensors with at least 1 dim: use * for scalars")
  x = a.reshape(1, -1) if a.ndim == 1 else a
  y = b.reshape(-1, 1) if b.ndim == 1 else b
  inner = x.node.logical[-1], y.node.logical[-2]
  if x.shape[-1] != y.shape[-2] or not agree(*inner):
    raise ShapeError(f"matmul of shapes {a.node.logical} and {b.node.logical}: the inner dims "
                     f"{inner[0]} and {inner[1]} must match; transpose or reshape one")
  dtype = result_dtype(x, y)
  xs = x.cast(dtype).unsqueeze(-2)                       # (..., n, 1, k)
  ys = y.cast(dtype).swapaxes(-1, -2).unsqueeze(-3)      # (..., 1, m, k)
  out = (xs * ys).sum(-1, dtype=acc_dtype(dtype) if not dtype.is_float() else None)
  out = out.cast(dtype)
  if a.ndim == 1:
    out = out.squeeze(-2)
  if b.ndim == 1:
    out = out.squeeze(-1)
  return out


def dot(a, b):
  """The same as `matmul` (self @ other): for 1-d vectors their inner product, a 0-d tensor."""
  return matmul(a, b)


class LinalgOps(TensorOps):
  """Linear algebra: matmul (and @, reflected too) and dot."""
  __slots__ = ()
  matmul, dot = matmul, dot
  __matmul__ = matmul

  def __rmatmul__(self, other): return matmul(self, other, True)
