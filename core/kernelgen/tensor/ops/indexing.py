"""Basic indexing, as numpy: ints, slices (any step, negative too), None and `...`.

Every index is a view: ints and slices shrink, negative steps flip, steps stride, None adds a
size-1 dim. Nothing is copied.
"""
from __future__ import annotations

from ...errors import IndexOutOfRangeError, ShapeError
from . import advanced_indexing as advanced
from .advanced_indexing import expand_ellipsis


def _int_bounds(i: int, n: int, axis: int) -> tuple[int, int]:
  if not -n <= i < n:
    raise IndexOutOfRangeError(f"index {i} is out of bounds for axis {axis} with size {n}: "
                               f"use an index in {-n}..{n - 1}")
  i %= n
  return i, i + 1


def getitem(t, index):
  """t[index] as a view."""
  index = index if isinstance(index, tuple) else (index,)
  for i in index:
    if isinstance(i, float):
      raise ShapeError(f"index {i!r} is a float: index with ints (int({i!r})) or slices")
    if isinstance(i, (str, bytes, dict, set)) or (i is not None and i is not Ellipsis and not
                                                  isinstance(i, slice) and not
                                                  hasattr(i, "__index__") and not
                                                  advanced.is_advanced(i)):
      raise ShapeError(f"a tensor cannot be indexed by {type(i).__name__} {i!r:.40}: index with "
                       f"ints, slices, None, ..., int lists or int tensors")
    if isinstance(i, slice) and i.step == 0:
      raise ShapeError("a slice step cannot be 0: use a positive or negative step")
    if advanced.is_advanced(i):
      return advanced.getitem(t, index)
  index = expand_ellipsis(index, t.ndim)
  bounds, flips, steps, axis = [], [], [], 0
  for i in index:
    if i is None:
      continue
    n = t.shape[axis]
    if isinstance(i, slice):
      start, stop, step = i.indices(n)
      count = len(range(start, stop, step))
      lo = start if step > 0 else (start - (count - 1) * -step if count else 0)
      bounds.append((lo, lo + (count - 1) * abs(step) + 1) if count else (0, 0))
      flips.append(step < 0)
      steps.append(abs(step))
    else:
      bounds.append(_int_bounds(int(i), n, axis))
      flips.append(False)
      steps.append(1)
    axis += 1
  out = t.shrink(bounds)
  out = out.flip(tuple(a for a, f in enumerate(flips) if f))
  out = out._step(steps)
  shape, axis = [], 0
  for i in index:
    if i is None:
      shape.append(1)
      continue
    if isinstance(i, slice):
      shape.append(out.shape[axis])
    axis += 1
  return out.reshape(tuple(shape))
