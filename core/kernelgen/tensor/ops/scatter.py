"""`t[index] = value`, scatter and scatter_add, as numpy and torch: deterministic and race-free
without atomics (duplicates add up in scatter_add; the last one in index order wins in scatter
and setitem). Small ones are a one-hot reduction (each output element compares every index: one
kernel); larger ones sort the indices (sorted_scatter.py). The index rules (host-known or device
indices, masks, numpy's advanced-index placement) are advanced_indexing.py's; the ScatterOps
mixin that `Tensor` lists among its bases.

`t[index] = value` is a functional update: the Tensor object `t` now holds a new lazy graph
(`where(selected, value, old t)`); other Tensors that shared t's old graph (views taken before,
the tensor t was sliced from) do not change.
"""
from __future__ import annotations

from ...dtype import dtypes
from ...errors import IndexOutOfRangeError, ShapeError
from ..combine import where
from ..operands import TensorOps
from . import sorted_scatter
from ..data import resolve_axes
from .advanced_indexing import (Adv, axis_last, axis_of, axis_unlast, device_take,
                                expand_ellipsis, gather_along, getitem, index_tensor,
                                is_advanced, is_tensor, parse, plain_int, take_static)


def _value_tensor(t, value):
  if is_tensor(value):
    return value.cast(t.dtype)
  if isinstance(value, (bool, int, float)):
    return type(t).full((), value, dtype=t.dtype, device=t.device)
  return type(t)(value, dtype=t.dtype, device=t.device)


def _unstride(v, axis: int, step: int):
  """Spread v's `axis` out by `step` (zeros in between), as pads and reshapes of views."""
  shape = v.shape
  count = shape[axis]
  v = v.unsqueeze(axis + 1)
  v = v.pad(tuple((0, step - 1) if d == axis + 1 else (0, 0) for d in range(v.ndim)))
  v = v.reshape(shape[:axis] + (count * step,) + shape[axis + 1:])
  return v.shrink(tuple((0, (count - 1) * step + 1) if d == axis else None
                        for d in range(v.ndim)))


def _place(v, t_shape: tuple, specs: list):
  """v (one dim per t dim) moved to the positions `specs` select: (lo, count, step, flip)."""
  flips = tuple(d for d, s in enumerate(specs) if s[3])
  if flips:
    v = v.flip(flips)
  for d, (_, count, step, _) in enumerate(specs):
    if step > 1 and count > 1:
      v = _unstride(v, d, step)
  pads = tuple((lo, n - lo - v.shape[d]) for d, ((lo, _, _, _), n) in
               enumerate(zip(specs, t_shape)))
  return v.pad(pads)


def setitem_basic(t, entries: list, value):
  """t with the view `t[entries]` (ints, slices, None) replaced by value."""
  region = t[tuple(entries)]
  v = _value_tensor(t, value).expand(region.shape) if region.shape else \
    _value_tensor(t, value).reshape(())
  specs, axis = [], 0
  for e in entries:
    if e is None:
      continue
    n = t.shape[axis]
    if isinstance(e, slice):
      start, stop, step = e.indices(n)
      count = len(range(start, stop, step))
      lo = start if step > 0 else start + (count - 1) * step
      specs.append((lo, count, abs(step), step < 0))
    else:
      specs.append((int(e) % n, 1, 1, False))
    axis += 1
  if any(s[1] == 0 for s in specs):
    return t
  v = v.reshape(tuple(s[1] for s in specs))
  mask = type(t).ones(*v.shape, dtype=dtypes.bool, device=t.device)
  return where(_place(mask, t.shape, specs), _place(v, t.shape, specs), t)


def scatter_flat(t, pos, v):
  """t (flat) with t[pos[k]] = v[k]; pos out of 0..n-1 writes nothing; the last k wins."""
  n, k = t.shape[0], pos.shape[0]
  if sorted_scatter.sorted_pays(1, n, k):
    return sorted_scatter.scatter(t, 0, pos, v)
  ramp = type(t).arange(n, device=t.device).reshape(n, 1)
  hit = pos.reshape(1, k) == ramp
  order = type(t).arange(k, device=t.device).reshape(1, k)
  winner = where(hit, order, -1).max(1)
  val = device_take(v, 0, winner)
  return where(winner >= 0, val, t)


def _setitem_one_axis(t, entries: list, at: int, value):
  """t[entries] = value for one host-known index array among slices and None: a scatter along
  that one axis (the last duplicate wins) as a take of the values (views where the winners form
  a few affine runs) and a mask, placed by setitem_basic; no one-hot over the whole tensor."""
  adv = entries[at]
  box = [slice(None) if k == at else e for k, e in enumerate(entries)]
  basic = t[tuple(box)]
  n, count = basic.shape[at], len(adv.values)
  if count == 0:
    return t
  region = basic.shape[:at] + adv.shape + basic.shape[at + 1:]
  v = _value_tensor(t, value).expand(region) if region else _value_tensor(t, value)
  v = v.reshape(basic.shape[:at] + (count,) + basic.shape[at + 1:])
  winner = {j: k for k, j in enumerate(adv.values)}
  order, last = [], min(winner.values())
  for j in range(n):                     # positions not written repeat a neighbour (runs stay)
    last = winner.get(j, last)
    order.append(last)
  hit = type(t)([j in winner for j in range(n)], device=t.device)
  hit = hit.reshape((1,) * at + (n,) + (1,) * (basic.ndim - at - 1))
  return setitem_basic(t, box, where(hit, take_static(v, at, order), basic))


def _one_value(value) -> bool:
  if is_tensor(value):
    return value._elements() == 1
  return isinstance(value, (bool, int, float))


def _setitem_mask(t, mask, value):
  """t[mask] = one value, for a bool Tensor mask (computed or not): where(mask, value, t), the
  same shape whatever the mask holds."""
  if mask.shape != t.shape[:mask.ndim]:
    raise IndexOutOfRangeError(f"boolean index of shape {mask.shape} does not match the "
                               f"leading dims of {t.shape}")
  mask = mask.reshape(mask.shape + (1,) * (t.ndim - mask.ndim))
  return where(mask, _value_tensor(t, value).reshape(()), t)


def setitem(t, index, value):
  """The Tensor t[index] = value makes (functional; see the module docstring)."""
  if not isinstance(index, tuple):
    index = (index,)
  if not any(is_advanced(i) for i in index if i is not None and i is not Ellipsis):
    entries = list(expand_ellipsis(index, t.ndim))
    for k, e in enumerate(entries):
      if plain_int(e):
        n = t.shape[axis_of(entries, k)]
        if not -n <= int(e) < n:
          raise IndexOutOfRangeError(f"index {int(e)} is out of bounds for axis "
                                     f"{axis_of(entries, k)} with size {n}")
    return setitem_basic(t, entries, value)
  if len(index) == 1 and is_tensor(index[0]) and index[0].dtype == dtypes.bool and \
     _one_value(value):
    return _setitem_mask(t, index[0], value)
  entries = parse(t, index)
  advs = [k for k, e in enumerate(entries) if isinstance(e, Adv)]
  if len(advs) == 1 and entries[advs[0]].values is not None and \
     not any(plain_int(e) for e in entries):
    return _setitem_one_axis(t, entries, advs[0], value)
  flat = t.flatten()
  ramp = type(t).arange(1, t._elements() + 1, device=t.device).reshape(t.shape)
  pos = getitem(ramp, index) - 1
  v = _value_tensor(t, value).expand(pos.shape).flatten()
  pos = pos.flatten()
  return scatter_flat(flat, pos, v).reshape(t.shape)


def _scatter_inputs(t, axis: int, idx, src):
  """(axis, idx, src) checked: idx an int Tensor (negative ones wrapped), src a Tensor of idx's
  shape and t's dtype."""
  axis = resolve_axes(axis, t.ndim)[0]
  idx = index_tensor(t, idx, axis)
  if idx.ndim != t.ndim or any(i > s for d, (i, s) in enumerate(zip(idx.shape, t.shape))
                               if d != axis):
    raise ShapeError(f"scatter: index shape {idx.shape} must have the tensor's ndim "
                     f"({t.ndim}) and dims no larger than {t.shape} (except along axis {axis})")
  if is_tensor(src):
    if src.ndim != idx.ndim or any(i > s for i, s in zip(idx.shape, src.shape)):
      raise ShapeError(f"scatter: src shape {src.shape} must cover the index shape "
                       f"{idx.shape}")
    src = src.shrink(tuple((0, i) for i in idx.shape)).cast(t.dtype)
  else:
    src = type(t).full(idx.shape, src, dtype=t.dtype, device=t.device)
  return axis, idx, src


def _sorts(t, axis: int, idx) -> bool:
  """Whether a scatter is done by sorting (sorted_scatter.py) rather than by comparing."""
  m = idx.shape[axis]
  return sorted_scatter.sorted_pays(idx._elements() // max(m, 1), t.shape[axis], m)


def _scatter_parts(t, axis: int, idx, src):
  n = t.shape[axis]
  ii = axis_last(idx, axis)
  hit = ii.unsqueeze(-1) == type(t).arange(n, device=t.device)   # (..., m, n)
  return axis, hit, axis_last(src, axis).unsqueeze(-1)


def _spread(x, t, axis: int):
  """A scattered (..., n) result back to t's layout, padded over the dims the index did not
  cover."""
  x = axis_unlast(x, axis)
  return x.pad(tuple((0, s - i) for i, s in zip(x.shape, t.shape)))


def scatter_add(t, axis: int, idx, src):
  """torch's scatter_add: t[..., idx[i], ...] += src[i] along axis; duplicates add up, in a
  fixed order (deterministic, no races)."""
  axis, idx, src = _scatter_inputs(t, axis, idx, src)
  if _sorts(t, axis, idx):
    return sorted_scatter.scatter_add(t, axis, idx, src)
  axis, hit, s = _scatter_parts(t, axis, idx, src)
  total = where(hit, s, 0).sum(-2).cast(t.dtype)
  return t + _spread(total, t, axis)


def scatter(t, axis: int, idx, src):
  """torch's scatter: t[..., idx[i], ...] = src[i] along axis (src a Tensor or a number); with
  duplicate indices the last one (in the index's order along axis) wins."""
  axis, idx, src = _scatter_inputs(t, axis, idx, src)
  if _sorts(t, axis, idx):
    return sorted_scatter.scatter(t, axis, idx, src)
  axis, hit, s = _scatter_parts(t, axis, idx, src)
  m = hit.shape[-2]
  order = type(t).arange(m, device=t.device).reshape(m, 1)
  winner = where(hit, order, -1).max(-2, keepdim=True)
  table = s.expand(hit.shape)       # the winner's value read, not summed: -0.0 stays -0.0
  val = gather_along(table, table.ndim - 2, where(winner >= 0, winner, 0)).squeeze(-2)
  has = winner.squeeze(-2) >= 0
  return where(_spread(has, t, axis), _spread(val, t, axis), t)


class ScatterOps(TensorOps):
  """Tensor methods: scatter, scatter_add and `t[index] = value`."""
  __slots__ = ()

  def scatter(self, axis: int, index, src):
    """torch's scatter: a copy of self with self[..., index[i], ...] = src[i] along `axis` (src a
    Tensor of index's shape or a number; index an integer Tensor with self's number of dims).
    With duplicate indices the last one along `axis` wins; negative indices count from the end,
    and out-of-range ones write nothing. Self's shape and dtype.

    Raises DTypeError for a float or bool index, ShapeError when the shapes do not fit."""
    return scatter(self, axis, index, src)

  def scatter_add(self, axis: int, index, src):
    """torch's scatter_add: a copy of self with src[i] added at self[..., index[i], ...] along
    `axis` (index as `scatter`'s); duplicate indices add up, in a fixed order (deterministic).
    Self's shape and dtype.

    Raises DTypeError for a float or bool index, ShapeError when the shapes do not fit."""
    return scatter_add(self, axis, index, src)

  def __setitem__(self, index, value):
    """Functional update: this Tensor object now holds the updated lazy graph. With a symbolic
    position (`cache[:, :, pos:pos + 1] = k`, pos a kg.Dim) it is an in-place write instead
    (tensor/symbolic.py write)."""
    from ..symbolic import symbolic_index, write
    if symbolic_index(index):
      write(self, index, value)
      return
    self.node = setitem(self, index, value).node
