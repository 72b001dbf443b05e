"""Indexing with symbolic bounds and steps (tensor/symbolic.py's layout): `getitem` (slices with
symbolic bounds or positions, and slices with a step along a symbolic axis), and the sliding
windows of conv and pooling over a symbolic length.

A slice's step count ceil(s / k) and a window count floor((s - span) / stride) + 1 are floored
sizes ((s + k - 1) // k, graph/dims.py): affine where the step divides each coefficient of s
(stride 1 always, stride 2 over an axis declared as 2 * h), else floor(affine / d), which every
op takes as a size (a kernel reads its value at run time).
"""
from __future__ import annotations

from ..errors import ShapeError, UnsupportedError
from ..graph.dims import Sym, physical
from .symbolic import gather_at, has_sym, logical, scalar, with_sym


def getitem(x, index):
  """x[index] where index holds symbolic bounds or positions, or x has symbolic axes and index
  a step: ints, Syms, slices of ints and Syms with a positive step, Ellipsis and None. Slices
  with a static start keep the padded layout (no kernel); a symbolic start or position reads at
  a run-time offset (a gather)."""
  index = index if isinstance(index, tuple) else (index,)
  if any(i is Ellipsis for i in index):
    at = index.index(Ellipsis)
    fill = x.ndim - (len(index) - 1 - sum(i is None for i in index))
    index = index[:at] + (slice(None),) * fill + index[at + 1:]
  out, axis, squeeze = x, 0, []
  for item in index:
    if item is None:
      out = out.reshape(logical(out)[:axis] + (1,) + logical(out)[axis:])
      axis += 1
      continue
    if not isinstance(item, (slice, int, Sym)) or isinstance(item, bool):
      raise UnsupportedError(f"indexing with symbolic bounds takes ints, symbolic sizes, slices "
                             f"and None, got {item!r}")
    if not isinstance(item, slice):
      out = _slice_axis(out, axis, item, item + 1)
      squeeze.append(axis)
    elif item.step is not None and (not isinstance(item.step, int) or item.step < 1):
      raise UnsupportedError(f"a slice with symbolic bounds (or of a tensor with symbolic "
                             f"axes) takes a positive int step, got {item.step!r}")
    else:
      out = _slice_axis(out, axis, item.start, item.stop, item.step or 1)
    axis += 1
  if squeeze:
    out = out.reshape(tuple(s for a, s in enumerate(logical(out)) if a not in squeeze))
  return out


def _slice_axis(x, axis: int, start, stop, step: int = 1):
  size = logical(x)[axis]
  start = 0 if start is None else start
  stop = size if stop is None else stop
  if isinstance(start, int) and start < 0 or isinstance(stop, int) and stop < 0:
    raise UnsupportedError("negative bounds in a slice with symbolic bounds: count from the "
                           "start")
  if isinstance(stop, int) and isinstance(size, int):
    stop = min(stop, size)
  length = stop - start
  if isinstance(length, Sym) and length.lo < 0:
    raise ShapeError(f"slice [{start}:{stop}] of an axis of {size}: it may be negative "
                     f"({length.describe()})")
  if physical(stop) > physical(size) if isinstance(stop, Sym) else False:
    raise ShapeError(f"slice [{start}:{stop}] of an axis of {size}: {stop} may pass its end "
                     f"({stop.describe()}); give the dim a range that fits")
  if step != 1:
    return strided(x, axis, start, stop, step)
  if isinstance(start, Sym):
    out = gather_at(x, axis, scalar(type(x), start, x.device), physical(length))
  elif start == 0 and physical(length) == x.shape[axis]:
    out = x
  else:
    bounds = [(0, n) for n in x.shape]
    bounds[axis] = (start, start + physical(length))
    out = with_sym(x, tuple(n if a == axis else s for a, (s, n) in
                            enumerate(zip(logical(x), x.shape))))._move("shrink", tuple(bounds))
  sym = list(logical(out))
  sym[axis] = length
  return with_sym(out, tuple(sym))


def strided(x, axis: int, start, stop, step: int):
  """x[start:stop:step] along `axis` (step > 1): ceil((stop - start) / step) elements, a floored
  size ((n + 1) // 2, graph/dims.py) unless every coefficient of stop - start is a multiple of
  step; a static start keeps the padded layout (a strided view: its first ceil(...) elements
  are the values), a symbolic one gathers."""
  size, length = logical(x)[axis], stop - start
  count = (length + step - 1) // step      # ceil(length / step): (n + 1) // 2 for x[:n:2]
  if isinstance(size, Sym) and isinstance(stop, int) and size.lo < stop:
    raise UnsupportedError(f"a slice along the symbolic axis {axis} (size {size}) [{start}:"
                           f"{stop}:{step}] may end past the axis's values: slice with symbolic "
                           f"bounds (x[:n:{step}]) instead")
  if isinstance(start, Sym):
    out = gather_at(x, axis, scalar(type(x), start, x.device), physical(count), step)
  else:
    sym = tuple(n if a == axis else s for a, (s, n) in enumerate(zip(logical(x), x.shape)))
    bounds = [(0, n) for n in x.shape]
    bounds[axis] = (start, start + physical(length))
    steps = tuple(step if a == axis else 1 for a in range(x.ndim))
    out = with_sym(x, sym)._move("shrink", tuple(bounds))._move("step", steps)
  sym = list(logical(out))
  sym[axis] = count
  return with_sym(out, tuple(sym))


def windows(x, kernel, stride, dilation):
  """Tensor._windows (the sliding windows of conv and pooling) of a tensor with symbolic axes:
  the windows of its padded layout, (..., OH, OW, kh, kw) with OH = (H - dh (kh - 1) - 1) // sh
  + 1 symbolic where H is (a floored size unless sh divides each coefficient of H); the first OH
  windows of the padded layout are those over values. ShapeError where the window is longer than
  the axis at the low end of its range."""
  sym = logical(x)
  out = []
  for a, (s, k, st, d) in enumerate(zip(sym[-2:], kernel, stride, dilation)):
    o = (s - d * (k - 1) - 1) // st + 1      # a floored size unless st divides s's terms
    if (o.lo if isinstance(o, Sym) else o) < 1:
      raise ShapeError(f"window {k} (dilation {d}) is larger than the axis of size "
                       f"{s.describe() if isinstance(s, Sym) else s} at its smallest: give the "
                       f"dim a range whose low end fits the window, or pad")
    out.append(o)
  win = with_sym(x, ())._windows(kernel, stride, dilation)
  return with_sym(win, tuple(sym[:-2]) + tuple(out) + tuple(kernel))


def stepped(x, index) -> bool:
  """Whether x has a symbolic axis and index a slice with a step over 1 (then getitem above
  reads it, so the step's count stays a symbolic size)."""
  items = index if isinstance(index, tuple) else (index,)
  return x.node.sym is not None and has_sym(x.node.sym) and any(
    isinstance(i, slice) and isinstance(i.step, int) and i.step > 1 for i in items)
