"""dropout with torch's definition (torch.nn.functional.dropout), except that the mask is drawn
from the counter-based hash behind `Tensor.rand(seed=)` (the same seed gives the same mask on every
device), not from torch's generator; the DropoutOps mixin that `Tensor` lists among its bases.
"""
from __future__ import annotations

from ...errors import ShapeError
from ..combine import where
from ..operands import TensorOps


def dropout(x, p: float = 0.5, seed: int = 0, training: bool = True):
  """Zero each element with probability p, scale the rest by 1 / (1 - p); the mask comes from
  Tensor.rand(seed=seed), so it is deterministic. Not training: x itself."""
  if not 0 <= p <= 1:
    raise ShapeError(f"dropout probability must be in [0, 1], got {p}")
  if not training or p == 0:
    return x
  if p == 1:
    return x * 0
  keep = type(x).rand(*x.shape, seed=seed, device=x.device) >= p
  return where(keep, x * (1.0 / (1.0 - p)), 0)


class DropoutOps(TensorOps):
  """Tensor methods: dropout."""
  __slots__ = ()

  def dropout(self, p: float = 0.5, seed: int = 0, training: bool = True):
    """torch's dropout: each element zeroed with probability `p` and the rest scaled by 1 / (1 - p),
    when `training`; otherwise the tensor itself. The mask comes from `Tensor.rand(seed=seed)`,
    so the same seed gives the same mask on every device. Same shape and dtype.

    Raises ShapeError when p is outside [0, 1]."""
    return dropout(self, p, seed, training)
