"""Basic indexing, as numpy: ints, slices (any step, negative too), None and `...`.

Every index is a view: ints and slices shrink, negative steps flip, steps stride, None adds a
size-1 dim. Nothing is copied.
"""
from __future__ import annotations

from .errors import OutOfBoundsError, ShapeError


def _expand_ellipsis(index: tuple, ndim: int) -> tuple:
  used = sum(1 for i in index if i is not None and i is not Ellipsis)
  if sum(1 for i in index if i is Ellipsis) > 1:
    raise ShapeError("an index can have only one `...`")
  if used > ndim:
    raise ShapeError(f"too many indices ({used}) for a tensor with {ndim} dims")
  if Ellipsis not in index:
    return index + (slice(None),) * (ndim - used)
  at = index.index(Ellipsis)
  return index[:at] + (slice(None),) * (ndim - used) + index[at + 1:]


def _int_bounds(i: int, n: int, axis: int) -> tuple[int, int]:
  if not -n <= i < n:
    raise OutOfBoundsError(f"index {i} is out of bounds for axis {axis} with size {n}: "
                     f"use an index in {-n}..{n - 1}")
  i %= n
  return i, i + 1


def getitem(t, index):
  """t[index] as a view."""
  from .tensor import Tensor
  index = index if isinstance(index, tuple) else (index,)
  for i in index:
    if isinstance(i, float):
      raise ShapeError(f"index {i!r} is a float: index with ints (int({i!r})) or slices")
    if isinstance(i, slice) and i.step == 0:
      raise ShapeError("a slice step cannot be 0: use a positive or negative step")
    if isinstance(i, Tensor) or isinstance(i, list):
      raise ShapeError("indexing with tensors or lists (fancy indexing) is not supported: "
                       "use ints, slices, None and ..., or kg.where")
  index = _expand_ellipsis(index, t.ndim)
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
