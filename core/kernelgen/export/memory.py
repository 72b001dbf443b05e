"""Sharing memory between a program's intermediate buffers: an interval allocator over launch
order.

A buffer lives from the kernel that writes it to the last kernel that reads it. Walking the
kernels in order, a buffer whose last reader has run frees its storage; each new intermediate
takes the smallest free storage that is big enough, else grows the biggest free one, else gets a
new one. A storage is a whole device buffer (WebGPU binds whole buffers: one kernel never binds
two ranges of one buffer, which WebGPU forbids when one is written), so two buffers a kernel
binds at once never share one.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Interval:
  key: int     # the buffer's id
  nbytes: int  # bytes it needs
  start: int   # the launch index of the kernel that writes it
  end: int     # the launch index of its last reader (>= start)


def assign(intervals: list[Interval]) -> tuple[dict[int, int], list[int]]:
  """(buffer id -> storage index, storage sizes in bytes) for `intervals`."""
  sizes: list[int] = []
  where: dict[int, int] = {}
  free: list[int] = []
  live: list[tuple[int, int]] = []       # (end, storage)
  for iv in sorted(intervals, key=lambda iv: (iv.start, -iv.nbytes)):
    free += [s for end, s in live if end < iv.start]
    live = [(end, s) for end, s in live if end >= iv.start]
    storage = _pick(free, sizes, iv.nbytes)
    sizes[storage] = max(sizes[storage], iv.nbytes)
    where[iv.key] = storage
    live.append((iv.end, storage))
  return where, sizes


def _pick(free: list[int], sizes: list[int], nbytes: int) -> int:
  """A free storage for `nbytes` (removed from `free`), or a new one appended to `sizes`."""
  fits = [s for s in free if sizes[s] >= nbytes]
  if fits:
    best = min(fits, key=lambda s: sizes[s])
  elif free:
    best = max(free, key=lambda s: sizes[s])
  else:
    sizes.append(0)
    return len(sizes) - 1
  free.remove(best)
  return best
