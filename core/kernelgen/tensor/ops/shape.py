"""Masks, grids and rearrangements: triu/tril, one_hot, linspace, meshgrid, split/chunk, tile,
roll, repeat_interleave and numpy.pad's non-constant modes, all as views, `where`s and `cat`s of
views (no reductions), so they fuse into whatever reads them.

Spellings: numpy's where numpy has the operation (tile, roll, linspace, meshgrid, pad modes),
torch's for the others (one_hot, chunk, repeat_interleave). `split(n_or_sizes, axis)` takes a
number of equal parts (numpy.split) or a list of part sizes (torch.split). `one_hot` gives int32
(torch: int64; WGSL has no 64-bit ints).
"""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import DTypeError, ShapeError
from ..combine import cat, where
from .advanced_indexing import device_take, run_view, take_static
from ..operands import TensorOps
from ..data import check_ints, pairs, resolve_axes

PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")


# ---- numpy.pad's modes -----------------------------------------------------------------------

def pad_source(i: int, n: int, mode: str) -> int:
  """The source position numpy.pad reads for position i (-before..n+after) of an axis of n."""
  if mode == "edge":
    return min(max(i, 0), n - 1)
  if mode == "wrap":
    return i % n
  if mode == "reflect":            # period 2(n-1), the edge not repeated
    period = 2 * (n - 1)
    if period == 0:
      return 0
    j = i % period
    return j if j < n else period - j
  j = i % (2 * n)                  # symmetric: period 2n, the edge repeated
  return j if j < n else 2 * n - 1 - j


def _segments(sources: list) -> list:
  """sources as runs (start, step, count) with step in (1, -1, 0), longest first-come."""
  runs, i = [], 0
  while i < len(sources):
    j = i + 1
    step = sources[j] - sources[i] if j < len(sources) else 1
    if step not in (1, -1, 0):
      step = 1
    while j < len(sources) and sources[j] - sources[j - 1] == step:
      j += 1
    runs.append((sources[i], step, j - i))
    i = j
  return runs


def pad_axis(x, axis: int, before: int, after: int, mode: str):
  """One axis padded with a non-constant mode: a gather of the source positions (one load per
  element, the positions computed from an arange, so a 5x5 filter over an edge-padded image reads
  25 values, not 25 selects among the pieces of a cat). While autograd records x, a cat of
  (flipped, expanded) slices instead: their gradient is views, where a gather's is a
  scatter_add (compare-based or sorted, tensor/ops/sorted_scatter.py)."""
  n = x.shape[axis]
  if not x.requires_grad:
    return device_take(x, axis, pad_index(type(x), n, before, after, mode, x.device))
  sources = [pad_source(i, n, mode) for i in range(-before, n + after)]
  pieces = [run_view(x, axis, *run) for run in _segments(sources)]
  return pieces[0] if len(pieces) == 1 else cat(pieces, axis)


def pad_index(cls, n: int, before: int, after: int, mode: str, device):
  """`pad_source` of every position -before..n+after-1 as a lazy int32 Tensor."""
  i = cls.arange(-before, n + after, dtype=dtypes.int32, device=device)
  if mode == "edge":           # MAX / MIN: value ranges then show the gather never clamps
    return i.maximum(0).minimum(n - 1)
  period = {"wrap": n, "reflect": 2 * (n - 1), "symmetric": 2 * n}[mode]
  if period == 0:                  # reflect of a single element: it, everywhere
    return i * 0
  j = (i % period + period) % period
  if mode == "wrap":
    return j
  return where(j < n, j, period - j if mode == "reflect" else period - 1 - j)


def pad_mode(x, pad_width, mode: str):
  """numpy.pad(x, pad_width, mode) for edge, reflect, symmetric and wrap, axis by axis (numpy's
  definition, widths larger than the axis included: they repeat the pattern)."""
  if mode not in PAD_MODES:
    raise ShapeError(f"pad mode {mode!r} is not one of {', '.join(PAD_MODES)}")
  pads = pairs(pad_width, x.ndim, "pad")
  check_ints([w for pair in pads for w in pair], "pad")
  if any(b < 0 or a < 0 for b, a in pads):
    raise ShapeError(f"pad widths must be >= 0, got {pads}; use shrink to cut")
  for axis, (before, after) in enumerate(pads):
    if not (before or after):
      continue
    if x.shape[axis] == 0:
      raise ShapeError(f"pad mode {mode!r} of an empty axis {axis} has nothing to repeat: "
                       f"use mode='constant'")
    x = pad_axis(x, axis, before, after, mode)
  return x


# ---- the operations --------------------------------------------------------------------------

def _tri_mask(x, k: int, upper: bool):
  if x.ndim < 2:
    raise ShapeError(f"{'triu' if upper else 'tril'} needs at least 2 dims, got {x.shape}")
  n, m = x.shape[-2:]
  rows = type(x).arange(n, device=x.device).reshape(n, 1)
  cols = type(x).arange(m, device=x.device).reshape(1, m)
  return (cols - rows >= k) if upper else (cols - rows <= k)


def linspace(cls, start, stop, num: int = 50, endpoint: bool = True, dtype=dtypes.float32,
             device=None):
  """numpy.linspace: num values from start to stop (included unless endpoint=False), computed
  as start + i * step in float32 (the last one exactly stop)."""
  check_ints([num], "linspace num")
  if num < 0:
    raise ShapeError(f"linspace num must be >= 0, got {num}")
  div = (num - 1) if endpoint else num
  step = (stop - start) / div if div > 0 else 0.0
  ramp = cls.arange(num, device=device).cast(dtypes.float32)
  out = ramp * float(step) + float(start)
  if endpoint and num > 1:
    out = where(ramp == num - 1, float(stop), out)
  return out.cast(dtype)


def meshgrid(*xs, indexing: str = "xy"):
  """numpy.meshgrid of 1-d tensors: broadcast views ("xy": the first two dims swapped)."""
  if indexing not in ("xy", "ij"):
    raise ShapeError(f"meshgrid indexing must be 'xy' or 'ij', got {indexing!r}")
  xs = [x.flatten() for x in xs]
  shape = [x.shape[0] for x in xs]
  if indexing == "xy" and len(xs) > 1:
    shape[0], shape[1] = shape[1], shape[0]
  out = []
  for i, x in enumerate(xs):
    at = {0: 1, 1: 0}.get(i, i) if indexing == "xy" and len(xs) > 1 else i
    own = [1] * len(xs)
    own[at] = x.shape[0]
    out.append(x.reshape(tuple(own)).expand(tuple(shape)))
  return out


def split(x, parts, axis: int = 0):
  """Views along axis: `parts` an int (that many equal parts, as numpy.split) or a list of part
  sizes summing to the axis (as torch.split)."""
  axis = resolve_axes(axis, x.ndim)[0]
  n = x.shape[axis]
  if isinstance(parts, int):
    if parts <= 0 or n % parts:
      raise ShapeError(f"split of an axis of {n} into {parts} equal parts: {n} must be a "
                       f"multiple of {parts}; give a list of sizes, or use chunk")
    sizes = [n // parts] * parts
  else:
    sizes = list(parts)
    check_ints(sizes, "split sizes")
    if sum(sizes) != n or any(s < 0 for s in sizes):
      raise ShapeError(f"split sizes {sizes} must be >= 0 and sum to the axis size {n}")
  out, start = [], 0
  for s in sizes:
    out.append(x.shrink(tuple((start, start + s) if d == axis else None for d in range(x.ndim))))
    start += s
  return out


def chunk(x, n: int, axis: int = 0):
  """torch.chunk: parts of ceil(size / n) along axis (the last smaller; maybe fewer than n)."""
  axis = resolve_axes(axis, x.ndim)[0]
  if n <= 0:
    raise ShapeError(f"chunk needs n >= 1, got {n}")
  size = x.shape[axis]
  step = max(1, math.ceil(size / n))
  sizes = [min(step, size - s) for s in range(0, size, step)] or [0]
  return split(x, sizes, axis)


def roll(x, shift, axis=None):
  """numpy.roll: elements shifted along axis (flattened when axis is None), wrapping around."""
  if axis is None:
    return roll(x.flatten(), shift, 0).reshape(x.shape)
  shifts = (shift,) if isinstance(shift, int) else tuple(shift)
  axes = (axis,) if isinstance(axis, int) else tuple(axis)
  if len(shifts) == 1 and len(axes) > 1:
    shifts = shifts * len(axes)
  if len(shifts) != len(axes):
    raise ShapeError(f"roll: {len(shifts)} shifts for {len(axes)} axes; give one per axis")
  for s, a in zip(shifts, axes):
    a = resolve_axes(a, x.ndim)[0]
    n = x.shape[a]
    s = s % n if n else 0
    if s:
      lead = (slice(None),) * a
      x = cat([x[lead + (slice(n - s, n),)], x[lead + (slice(0, n - s),)]], a)
  return x


def repeat_interleave(x, repeats, axis=None):
  """torch.repeat_interleave (numpy.repeat): each element `repeats` times along axis (the
  flattened tensor when None); `repeats` an int (a view) or one int per element."""
  if axis is None:
    return repeat_interleave(x.flatten(), repeats, 0)
  axis = resolve_axes(axis, x.ndim)[0]
  n = x.shape[axis]
  if isinstance(repeats, int):
    if repeats < 0:
      raise ShapeError(f"repeats must be >= 0, got {repeats}")
    shape = x.shape
    grown = x.unsqueeze(axis + 1).expand(shape[:axis + 1] + (repeats,) + shape[axis + 1:])
    return grown.reshape(shape[:axis] + (n * repeats,) + shape[axis + 1:])
  if hasattr(repeats, "node"):
    raise ShapeError("repeat_interleave with a Tensor of repeats has a shape that depends on "
                     "the data: give the repeats as a list of ints")
  repeats = list(repeats)
  check_ints(repeats, "repeats")
  if len(repeats) != n or any(r < 0 for r in repeats):
    raise ShapeError(f"repeats needs {n} ints >= 0 (one per element along axis {axis}), "
                     f"got {repeats}")
  return take_static(x, axis, [i for i, r in enumerate(repeats) for _ in range(r)])


class ShapeOps(TensorOps):
  """Tensor methods: triu, tril, one_hot, linspace, split, chunk, tile, roll,
  repeat_interleave."""
  __slots__ = ()

  def triu(self, k: int = 0):
    """Zeros below the k-th diagonal of the last two dims (numpy.triu)."""
    return where(_tri_mask(self, k, True), self, self._const(0))

  def tril(self, k: int = 0):
    """Zeros above the k-th diagonal of the last two dims (numpy.tril)."""
    return where(_tri_mask(self, k, False), self, self._const(0))

  def one_hot(self, num_classes: int):
    """torch's one_hot of an integer tensor: a new last dim of num_classes, int32 (out-of-range
    values give a row of zeros)."""
    if self.dtype.is_float() or self.dtype == dtypes.bool:
      raise DTypeError(f"one_hot needs an integer tensor of class indices, got {self.dtype}")
    check_ints([num_classes], "num_classes")
    if num_classes < 0:
      raise ShapeError("one_hot needs num_classes >= 0 (it cannot be read from the data)")
    work = dtypes.int32 if self.dtype.itemsize < 4 else self.dtype   # (no int64 promotion)
    ramp = type(self).arange(num_classes, dtype=work, device=self.device)
    return (self.cast(work).unsqueeze(-1) == ramp).cast(dtypes.int32)

  @classmethod
  def linspace(cls, start, stop, num: int = 50, endpoint: bool = True, dtype=dtypes.float32,
               device=None, requires_grad: bool = False):
    """numpy.linspace: `num` evenly spaced values from start to stop (stop included unless
    endpoint=False), a 1-d tensor of `dtype` (float32 by default) computed as start + i * step in
    float32, the last one exactly stop.

    Raises ShapeError for a negative `num`."""
    out = linspace(cls, start, stop, num, endpoint, dtypes.from_name(dtype), device)
    return out.requires_grad_(requires_grad)

  def split(self, parts, axis: int = 0):
    """The tensor cut along `axis` into a list of views: `parts` an int (that many equal parts, as
    numpy.split) or a list of part sizes that sum to the axis's size (as torch.split).

    Raises ShapeError when the parts do not divide or add up to the axis."""
    return split(self, parts, axis)

  def chunk(self, n: int, axis: int = 0):
    """torch.chunk: a list of views along `axis`, each of ceil(size / n) elements (the last one
    smaller; fewer than n parts when the size does not allow n).

    Raises ShapeError when n < 1."""
    return chunk(self, n, axis)

  def tile(self, reps):
    """numpy.tile: the tensor repeated `reps` times per dim (reps padded with 1s in front)."""
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    reps = (1,) * (self.ndim - len(reps)) + reps
    return self.repeat(*reps)

  def roll(self, shift, axis=None):
    """numpy.roll: the elements shifted by `shift` positions along `axis` (an int, or tuples of
    shifts and axes), wrapping around; with axis None the flattened tensor is rolled and reshaped
    back. Same shape and dtype.

    Raises ShapeError when shifts and axes differ in number."""
    return roll(self, shift, axis)

  def repeat_interleave(self, repeats, axis=None):
    """torch.repeat_interleave (numpy.repeat): each element repeated `repeats` times along `axis`
    (the flattened tensor when None); `repeats` is an int or one int per element of the axis.
    Same dtype.

    Raises ShapeError for a negative count or a list of counts of the wrong length."""
    return repeat_interleave(self, repeats, axis)
