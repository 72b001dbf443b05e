"""Views: how a tensor's elements sit in a contiguous source, as shape, strides, offset and mask.

Movement ops (reshape, permute, expand, pad, shrink, flip, strided slices) are index math on a
View, never copies. A View maps an index tuple of its shape to a linear position in its source
(laid out contiguously, row-major) and says whether that position is valid: outside the mask
(padding) the value is zero and the source is not read. A movement a single View cannot express
(a reshape of a non-contiguous view) returns None; the tensor layer then stacks a second view.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..dtype import dtypes
from ..uop.ops import UOp


prod = math.prod   # the product of a shape (1 for ())


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
  strides, acc = [], 1
  for n in reversed(shape):
    strides.append(acc if n != 1 else 0)
    acc *= n
  return tuple(reversed(strides))


@dataclass(frozen=True)
class View:
  shape: tuple[int, ...]                          # the view's shape
  strides: tuple[int, ...]                        # elements of the source per step in each dim
  offset: int = 0                                 # source position of index (0, 0, ...)
  mask: tuple[tuple[int, int], ...] | None = None  # valid [lo, hi) per dim; None: all valid

  @staticmethod
  def contiguous(shape) -> View:
    shape = tuple(int(n) for n in shape)
    return View(shape, contiguous_strides(shape))

  @property
  def size(self) -> int:
    return prod(self.shape)

  def is_contiguous(self) -> bool:
    return self.offset == 0 and self.mask is None and \
      self.strides == contiguous_strides(self.shape)

  def _mask(self):
    return self.mask if self.mask is not None else tuple((0, n) for n in self.shape)

  def _with(self, shape, strides, offset, mask) -> View:
    mask = tuple(mask) if mask is not None else None
    if mask is not None and all(m == (0, n) for m, n in zip(mask, shape)):
      mask = None
    strides = tuple(0 if n == 1 else s for n, s in zip(shape, strides))
    return View(tuple(shape), strides, offset, mask)

  # ---- movement ----
  def permute(self, order) -> View:
    mask = None if self.mask is None else [self.mask[i] for i in order]
    return self._with([self.shape[i] for i in order], [self.strides[i] for i in order],
                      self.offset, mask)

  def expand(self, shape) -> View:
    strides = [s if n == m else 0 for n, m, s in zip(self.shape, shape, self.strides)]
    mask = None if self.mask is None else [
      m if n == new else ((0, new) if m == (0, 1) else (0, 0))
      for m, n, new in zip(self.mask, self.shape, shape)]
    return self._with(shape, strides, self.offset, mask)

  def pad(self, pads) -> View:
    offset = self.offset - sum(b * s for (b, _), s in zip(pads, self.strides))
    shape = [n + b + a for n, (b, a) in zip(self.shape, pads)]
    mask = [(lo + b, hi + b) for (lo, hi), (b, _) in zip(self._mask(), pads)]
    return self._with(shape, self.strides, offset, mask)

  def shrink(self, bounds) -> View:
    offset = self.offset + sum(b * s for (b, _), s in zip(bounds, self.strides))
    shape = [e - b for b, e in bounds]
    mask = [(max(lo - b, 0), max(min(hi - b, e - b), 0))
            for (lo, hi), (b, e) in zip(self._mask(), bounds)]
    mask = [(lo, max(lo, hi)) for lo, hi in mask]
    return self._with(shape, self.strides, offset, mask if self.mask is not None else None)

  def flip(self, axes) -> View:
    offset = self.offset + sum((self.shape[a] - 1) * self.strides[a] for a in axes)
    strides = [-s if i in axes else s for i, s in enumerate(self.strides)]
    mask = None if self.mask is None else [
      (n - hi, n - lo) if i in axes else (lo, hi)
      for i, ((lo, hi), n) in enumerate(zip(self.mask, self.shape))]
    return self._with(self.shape, strides, offset, mask)

  def step(self, steps) -> View:
    """Every `steps[d]`-th element of each dim from the start (steps are positive)."""
    shape = [-(-n // k) for n, k in zip(self.shape, steps)]
    strides = [s * k for s, k in zip(self.strides, steps)]
    mask = None if self.mask is None else [
      (-(-lo // k), max(-(-lo // k), -(-hi // k))) for (lo, hi), k in zip(self.mask, steps)]
    return self._with(shape, strides, self.offset, mask)

  def reshape(self, shape) -> View | None:
    """The same elements with a new shape, or None when one view cannot express it."""
    shape = tuple(shape)
    if self.mask is None and self.strides == contiguous_strides(self.shape):
      return View(shape, contiguous_strides(shape), self.offset)
    if [n for n in shape if n != 1] != [n for n in self.shape if n != 1]:
      return None
    kept = [(n, s, m) for n, s, m in zip(self.shape, self.strides, self._mask()) if n != 1]
    if any(m != (0, 1) for n, s, m in zip(self.shape, self.strides, self._mask()) if n == 1):
      return None
    strides, mask, it = [], [], iter(kept)
    for n in shape:
      _, s, m = next(it) if n != 1 else (1, 0, (0, 1))
      strides.append(s)
      mask.append(m)
    return self._with(shape, strides, self.offset, mask if self.mask is not None else None)

  # ---- index math ----
  def terms(self, idxs: list[UOp]) -> list[tuple[UOp, int, int]]:
    """(index, stride, extent) for each dim that moves through the source."""
    return [(i, s, n) for i, s, n in zip(idxs, self.strides, self.shape) if s != 0 and n != 1]

  def valid(self, idxs: list[UOp]) -> UOp | None:
    """A bool UOp that is true where `idxs` lies inside the mask, or None when always true."""
    if self.mask is None:
      return None
    conds = []
    for i, (lo, hi), n in zip(idxs, self.mask, self.shape):
      if lo > 0:
        conds.append(i.ge(lo))
      if hi < n:
        conds.append(i.lt(hi))
    if any(lo >= hi for lo, hi in self.mask):
      return UOp.const(dtypes.bool, False)
    out = None
    for c in conds:
      out = c if out is None else out & c
    return out
