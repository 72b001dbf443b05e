"""Integer-array (advanced) indexing, take and gather, as numpy (scatter and `t[index] = value`
are in scatter.py).

Indices come in two kinds:
- known when the program is built: Python ints, lists, tuples and numpy arrays (and boolean
  masks given that way, or as a realized bool Tensor: they become integer indices on the host).
  They are checked (out of range -> `kg.IndexOutOfRangeError`, an IndexError); negative ones
  count from the end.
- computed on the device: integer Tensors. They are never read back, so a program stays a program
  (its index input can be fed later). Negative ones count from the end; one still out of range
  reads 0 (gathers) and writes nothing (scatters, setitem): no access leaves the buffer.
A boolean mask that is not realized data (`t[t > 0]`) has a shape that depends on the data: a
typed error that points to `kg.where`; assigning one value through any bool Tensor mask
(`t[t < 0] = 0`) is `where(mask, value, t)` and works for computed masks too.

Advanced indices follow numpy's rules: they broadcast together; when they sit next to each other
their dims replace the indexed dims in place, when separated (by a slice, or None) their dims come
first; ints mixed with advanced indices count as advanced.

How a gather is computed: an index on the device is a lazy gather (`L.GATHER`): each output
element loads its index, clamps it into 0..n-1 and loads the table there (lowering/gather.py),
one indirect load whatever the table's length; an index that was out of range reads 0 instead
(the clamped read is discarded), so no access leaves the buffer. Indices known at build time that
form a few affine runs (t[[0, 1, 2]], t[[3, 1]], nearest upsampling's repeats) become views and a
`cat` of views; other host-known indices are uploaded and gathered. A scatter is deterministic
and race-free without atomics (WGSL has no float atomics): duplicates add up (scatter_add) or the
last one in index order wins (scatter, setitem), as numpy's setitem. Small ones (outputs x indices
up to scatter.COMPARE_MAX) are a one-hot reduction (each output element compares every index
against its position and sums or picks the matches: one kernel); larger ones sort the indices and
find each output's segment by binary search (sorted_scatter.py: O((outputs + indices) * log)
work). The gradient of a gather is such a scatter_add.

`t[index] = value` is a functional update: the Tensor object `t` now holds a new lazy graph
(`where(selected, value, old t)`); other Tensors that shared t's old graph (views taken before,
the tensor t was sliced from) do not change.
"""
from __future__ import annotations

from ...dtype import dtypes
from ...errors import DeviceError, DTypeError, IndexOutOfRangeError, ShapeError, UnsupportedError
from ...graph.lazy import L, LazyOp
from ...graph.view import prod
from ..autograd import record
from ..combine import cat, where
from ..operands import TensorOps
from . import sorted_scatter
from ..data import broadcast_shape, flatten, resolve_axes

MAX_RUNS = 8   # host-known indices in at most this many affine runs become views, not a reduction


def expand_ellipsis(index: tuple, ndim: int) -> tuple:
  """`index` with its `...` (or the missing trailing dims) spelled out as full slices."""
  used = sum(1 for i in index if i is not None and i is not Ellipsis)
  if sum(1 for i in index if i is Ellipsis) > 1:
    raise ShapeError("an index can have only one `...`")
  if used > ndim:
    raise ShapeError(f"too many indices ({used}) for a tensor with {ndim} dims")
  if Ellipsis not in index:
    return index + (slice(None),) * (ndim - used)
  at = index.index(Ellipsis)
  return index[:at] + (slice(None),) * (ndim - used) + index[at + 1:]


# ---- index entries ---------------------------------------------------------------------------

class Adv:
  """One advanced index: host values (a flat list of ints, normalized) or a device Tensor."""
  __slots__ = ("values", "shape", "tensor")

  def __init__(self, values=None, shape=(), tensor=None):
    self.values, self.shape, self.tensor = values, tuple(shape), tensor
    if tensor is not None:
      self.shape = tensor.shape


def is_tensor(x) -> bool:
  return isinstance(x, TensorOps)


def is_advanced(i) -> bool:
  """Whether `i` (one entry of an index) makes the index advanced (not a view)."""
  if isinstance(i, bool) or is_tensor(i) or isinstance(i, (list, tuple)):
    return True
  if hasattr(i, "__array_interface__"):   # numpy arrays (0-d int arrays and scalars are ints)
    return getattr(i, "ndim", 0) > 0 or getattr(getattr(i, "dtype", None), "kind", "") == "b"
  return False


def _host_values(i) -> tuple[list, tuple]:
  shape: list = []
  values = flatten(i, shape)
  return values, tuple(shape)


def _is_mask(i) -> bool:
  if is_tensor(i):
    return i.dtype == dtypes.bool
  if isinstance(i, bool):
    return True
  values, _ = _host_values(i)
  return bool(values) and all(isinstance(v, bool) for v in values)


def _mask_indices(mask, dims: tuple, axis: int) -> list:
  """A realized boolean mask over `dims` as one host index array per dim (numpy's nonzero)."""
  if is_tensor(mask):
    if not mask.node.realized:
      raise UnsupportedError(
        f"boolean-mask indexing with a computed mask (shape {mask.shape}) has a shape that "
        f"depends on the data: use kg.where(mask, t, fill) to keep the shape, or realize the "
        f"mask first (mask.realize()) to index with its values")
    values, shape = mask.tolist(), mask.shape
    values, _ = _host_values(values) if shape else ([values], ())
  else:
    values, shape = _host_values(mask)
  if isinstance(mask, bool) or not shape:
    raise ShapeError("a scalar bool index is not supported: use None to add an axis")
  if tuple(shape) != tuple(dims[:len(shape)]) or len(shape) > len(dims):
    raise IndexOutOfRangeError(f"boolean index of shape {tuple(shape)} does not match the "
                               f"indexed dims {tuple(dims[:len(shape)])} at axis {axis}")
  hits = [k for k, v in enumerate(values) if v]
  out = []
  for d in range(len(shape)):
    inner = 1
    for s in shape[d + 1:]:
      inner *= s
    out.append(Adv([(k // inner) % shape[d] for k in hits], (len(hits),)))
  return out


def _adv_of(i, n: int, axis: int) -> Adv:
  """An int, list or array index on an axis of size n, checked and normalized; or a Tensor."""
  if is_tensor(i):
    if i.dtype.is_float() or i.dtype == dtypes.bool:
      raise DTypeError(f"index tensors must have an integer dtype, got {i.dtype}: cast with "
                       f".int() (or use a bool mask that is realized data)")
    return Adv(tensor=i)
  if hasattr(i, "__index__") and not is_advanced(i):
    values, shape = [int(i)], ()
  else:
    values, shape = _host_values(i)
  for v in values:
    if isinstance(v, float) or not hasattr(v, "__index__"):
      raise DTypeError(f"index {v!r} in an index array is not an int: index with ints")
    if not -n <= v < n:
      raise IndexOutOfRangeError(f"index {v} is out of bounds for axis {axis} with size {n}: "
                                 f"use indices in {-n}..{n - 1}")
  return Adv([int(v) % n for v in values], shape)


def _expand(index: tuple, ndim: int) -> list:
  """The index with `...` expanded, counting a mask as the dims it covers."""
  def width(i):
    if i is None or i is Ellipsis:
      return 0
    if not isinstance(i, slice) and is_advanced(i) and _is_mask(i):
      return len(i.shape) if is_tensor(i) else len(_host_values(i)[1])
    return 1
  used = sum(width(i) for i in index)
  dots = [k for k, i in enumerate(index) if i is Ellipsis]
  if len(dots) > 1:
    raise ShapeError("an index can have only one `...`")
  if used > ndim:
    raise IndexOutOfRangeError(f"too many indices ({used}) for a tensor with {ndim} dims")
  index = list(index)
  at = dots[0] if dots else len(index)
  return index[:at] + [slice(None)] * (ndim - used) + index[at + 1:]


def parse(t, index) -> list:
  """Entries: None, slice, int, or Adv (one per indexed dim); masks become index arrays."""
  index = index if isinstance(index, tuple) else (index,)
  entries, axis = [], 0
  for i in _expand(index, t.ndim):
    if i is None or isinstance(i, slice):
      entries.append(i)
      axis += i is not None
    elif not is_advanced(i):
      entries.append(i)
      axis += 1
    elif _is_mask(i):
      masks = _mask_indices(i, t.shape[axis:], axis)
      entries.extend(masks)
      axis += len(masks)
    else:
      entries.append(_adv_of(i, t.shape[axis], axis))
      axis += 1
  return entries


# ---- gathers ---------------------------------------------------------------------------------

def _fill(x):
  return -0.0 if x.dtype.is_float() else 0


def same_device(t, idx) -> None:
  """DeviceError unless the index tensor `idx` lives on `t`'s device (as binary operands must:
  an index is read by the kernel that reads t, nothing moves between devices implicitly)."""
  if idx.device != t.device:
    raise DeviceError(f"a tensor on {t.device} indexed with an index tensor on {idx.device}: "
                      f"the index must live on the tensor's device; move it with "
                      f"index.to({t.device!r}) (or the tensor with .to({idx.device!r}))")


def gather_along(x, axis: int, index):
  """The lazy gather (`L.GATHER`): out[i] = x[i with i[axis] := index[i]] for an int Tensor
  `index` shaped like the result (x's shape but along axis); values outside 0..n-1 read 0. One
  indirect load per element (lowering/gather.py); differentiable in x (autograd's rule
  "gather": a scatter_add). DeviceError when index lives on another device than x."""
  same_device(x, index)
  node = LazyOp(L.GATHER, x.dtype, index.shape, (x.node, index.node), axis)
  m = index.shape[axis]
  sort = sorted_scatter.sorted_pays(prod(index.shape) // max(m, 1), x.shape[axis], m)
  return record(type(x)(node), (x,), sorted_scatter.gather_grad if sort else "gather",
                (axis, index))


def device_take(x, axis: int, idx):
  """x with `axis` replaced by idx's dims: x[..., idx, ...] for an int Tensor idx whose values
  are in 0..n-1 (others give 0), as one gather."""
  pre, post, b = x.shape[:axis], x.shape[axis + 1:], idx.shape
  m = prod(b)
  flat = idx.reshape((1,) * len(pre) + (m,) + (1,) * len(post))
  out = gather_along(x, axis, flat.expand(pre + (m,) + post))
  return out.reshape(pre + b + post)


def _affine_end(values: list, i: int) -> int:
  """The end of the affine run of values starting at i."""
  if i + 1 >= len(values):
    return i + 1
  d, j = values[i + 1] - values[i], i + 1
  while j + 1 < len(values) and values[j + 1] - values[j] == d:
    j += 1
  return j + 1


def _blocks(values: list, i: int, r: int) -> tuple[int, int]:
  """(step, blocks): values[i:] as values[i] + (k // r) * step for as many whole blocks of r."""
  n = len(values)
  step = values[i + r] - values[i] if i + r < n else 1
  blocks = 1
  while i + (blocks + 1) * r <= n and all(values[i + blocks * r + k] == values[i] + blocks * step
                                          for k in range(r)):
    blocks += 1
  return step, blocks


def pieces(values: list) -> list:
  """values as pieces (start, step, blocks, r): start + (k // r) * step, k < blocks * r (r = 1:
  an affine run; r > 1: each of an affine run repeated r times, as nearest upsampling's)."""
  out, i = [], 0
  while i < len(values):
    r = 1
    while i + r < len(values) and values[i + r] == values[i]:
      r += 1
    if r > 1:
      step, blocks = _blocks(values, i, r)
      out.append((values[i], step, blocks, r))
      i += blocks * r
    else:
      end = _affine_end(values, i)
      out.append((values[i], values[i + 1] - values[i] if end - i > 1 else 1, end - i, 1))
      i = end
  return out


def run_view(x, axis: int, start: int, step: int, count: int):
  """x[..., start, start + step, ... (count of them), ...] along `axis` as a view (step 0: one
  element expanded)."""
  lead = (slice(None),) * axis
  if step == 0 or count == 1:
    piece = x[lead + (slice(start, start + 1),)]
    shape = list(piece.shape)
    shape[axis] = count
    return piece.expand(tuple(shape))
  stop = start + step * count
  return x[lead + (slice(start, stop if stop >= 0 else None, step),)]


def _piece_view(x, axis: int, start: int, step: int, blocks: int, r: int):
  base = run_view(x, axis, start, step, blocks)
  if r == 1:
    return base
  shape = base.shape
  grown = base.unsqueeze(axis + 1).expand(shape[:axis + 1] + (r,) + shape[axis + 1:])
  return grown.reshape(shape[:axis] + (shape[axis] * r,) + shape[axis + 1:])


def take_static(x, axis: int, values: list):
  """x[..., values, ...] along `axis` for host-known in-range ints: views (and a cat of them)
  where the values form at most MAX_RUNS pieces (affine runs, or affine runs with each value
  repeated r times), else a gather of the uploaded values."""
  if not values:
    return x.shrink(tuple((0, 0) if d == axis else None for d in range(x.ndim)))
  parts = pieces(values)
  if len(parts) <= MAX_RUNS:
    views = [_piece_view(x, axis, *p) for p in parts]
    return views[0] if len(views) == 1 else cat(views, axis)
  idx = type(x)(values, dtype=dtypes.int32, device=x.device)
  return device_take(x, axis, idx)


def _wrap(idx, n: int):
  """Device indices: negative ones count from the end; the rest stay (out of range reads 0).
  64-bit indices keep their dtype (one past int32 stays out of range), others become int32."""
  if idx.dtype.itemsize == 8:
    return idx if idx.dtype.is_unsigned() else where(idx < 0, idx + n, idx)
  unsigned = idx.dtype.is_unsigned()
  idx = idx.cast(dtypes.int32)
  if unsigned:      # never from the end: uint32 values from 2^31 on (negative as int32) stay
    return idx      # out of range, as every other one past the end
  return where(idx < 0, idx + n, idx)


def _host_broadcast(advs: list, shape: tuple) -> list:
  """Each host index array broadcast to `shape`, as flat lists."""
  total = 1
  for s in shape:
    total *= s
  out = []
  for a in advs:
    own = (1,) * (len(shape) - len(a.shape)) + a.shape
    strides, acc = [], 1
    for s in reversed(own):
      strides.append(acc if s != 1 else 0)
      acc *= s
    strides.reverse()
    vals = []
    for flat in range(total):
      pos, rem = 0, flat
      for d in range(len(shape) - 1, -1, -1):
        pos += (rem % shape[d]) * strides[d]
        rem //= shape[d]
      vals.append(a.values[pos])
    out.append(vals)
  return out


def _linear_index(advs: list, sizes: list, shape: tuple):
  """The advanced indices combined into one index over their dims' flattened product."""
  if all(a.tensor is None for a in advs):
    cols = _host_broadcast(advs, shape)
    lin = [0] * len(cols[0]) if cols else []
    for col, n in zip(cols, sizes):
      lin = [v * n + c for v, c in zip(lin, col)]
    return lin
  if len(advs) == 1:       # one index: the gather itself reads 0 where it is out of range
    w = _wrap(advs[0].tensor, sizes[0])
    return w.expand(shape) if shape else w
  lin, ok = None, None
  for a, n in zip(advs, sizes):
    t = a.tensor if a.tensor is not None else _host_tensor(a, advs)
    w = _wrap(t, n).expand(shape) if shape else _wrap(t, n)
    good = (w >= 0) & (w < n)
    lin = w if lin is None else lin * n + w
    ok = good if ok is None else ok & good
  return where(ok, lin, -1)


def _host_tensor(a: Adv, advs: list):
  like = next(x.tensor for x in advs if x.tensor is not None)
  return type(like)(a.values, dtype=dtypes.int32, device=like.device).reshape(a.shape)


def plain_int(e) -> bool:
  """Whether a parsed index entry is a plain int (not an advanced index, slice or None)."""
  return not isinstance(e, (Adv, slice)) and e is not None


def axis_of(entries: list, k: int) -> int:
  """The dim of the indexed tensor that parsed entry k indexes (None entries take none)."""
  return sum(1 for e in entries[:k] if e is not None)


def getitem(t, index):
  """t[index] with at least one advanced entry (see the module docstring)."""
  entries = parse(t, index)
  if not any(isinstance(e, Adv) for e in entries):
    return t[tuple(entries)]
  entries = [_adv_of(e, t.shape[axis_of(entries, k)], axis_of(entries, k))
             if plain_int(e) else e for k, e in enumerate(entries)]
  x = t[tuple(slice(None) if isinstance(e, Adv) else e for e in entries)]
  adv = [k for k, e in enumerate(entries) if isinstance(e, Adv)]
  rest = [k for k in range(x.ndim) if k not in adv]
  at = sum(1 for k in rest if k < adv[0]) if adv == list(range(adv[0], adv[-1] + 1)) else 0
  x = x.permute(*rest[:at], *adv, *rest[at:])
  sizes = [x.shape[at + j] for j in range(len(adv))]
  n = 1
  for s in sizes:
    n *= s
  x = x.reshape(x.shape[:at] + (n,) + x.shape[at + len(adv):])
  advs = [entries[k] for k in adv]
  shape = broadcast_shape(*(a.shape for a in advs))
  lin = _linear_index(advs, sizes, shape)
  if isinstance(lin, list):
    out = take_static(x, at, lin)
    return out.reshape(x.shape[:at] + shape + x.shape[at + 1:])
  return device_take(x, at, lin)


# ---- setitem ---------------------------------------------------------------------------------


# ---- gather along an axis, scatter -------------------------------------------------------------

def index_tensor(t, idx, axis: int):
  """A gather/scatter index as an int32 Tensor with negative indices wrapped."""
  n = t.shape[axis]
  if is_tensor(idx):
    same_device(t, idx)
    if idx.dtype.is_float() or idx.dtype == dtypes.bool:
      raise DTypeError(f"index tensors must have an integer dtype, got {idx.dtype}: cast "
                       f"with .int()")
    return _wrap(idx, n)
  a = _adv_of(idx, n, axis)
  return type(t)(a.values, dtype=dtypes.int32, device=t.device).reshape(a.shape)


def axis_last(x, axis: int):
  order = [d for d in range(x.ndim) if d != axis] + [axis]
  return x.permute(*order)


def axis_unlast(x, axis: int):
  """The inverse of axis_last: the last dim back to position `axis`."""
  order = list(range(x.ndim - 1))
  order.insert(axis, x.ndim - 1)
  return x.permute(*order)


def gather(t, axis: int, idx):
  """numpy.take_along_axis(t, idx, axis): out[..., j, ...] = t[..., idx[..., j, ...], ...];
  idx has t's ndim, its other dims broadcast with t's. One gather (an indirect load each)."""
  axis = resolve_axes(axis, t.ndim)[0]
  idx = index_tensor(t, idx, axis)
  if idx.ndim != t.ndim:
    raise ShapeError(f"gather: the index has {idx.ndim} dims, the tensor {t.ndim}: they must "
                     f"match (take_along_axis); use kg.take for an index of any shape")
  lead = broadcast_shape(*(tuple(1 if d == axis else s for d, s in enumerate(a.shape))
                           for a in (t, idx)))
  table = t.expand(tuple(t.shape[axis] if d == axis else s for d, s in enumerate(lead)))
  index = idx.expand(tuple(idx.shape[axis] if d == axis else s for d, s in enumerate(lead)))
  return gather_along(table, axis, index)


def take(t, idx, axis=None):
  """numpy.take: t.flatten()[idx] (axis None) or t[..., idx, ...] along axis."""
  if axis is None:
    return t.flatten()[idx if is_advanced(idx) else int(idx)]
  axis = resolve_axes(axis, t.ndim)[0]
  return t[(slice(None),) * axis + (idx,)]


class IndexingOps(TensorOps):
  """Tensor methods: gather (take_along_axis) and take."""
  __slots__ = ()

  def gather(self, axis: int, index):
    """torch's gather, numpy's take_along_axis: out[..., j, ...] = self[..., index[..., j, ...],
    ...] along `axis`. `index` (an integer Tensor or nested list) has self's number of dims; its
    other dims broadcast with self's. Negative indices count from the end; an index out of range
    reads 0. Result: the broadcast shape with `axis` of index's size, self's dtype.

    Raises DTypeError for a float or bool index, ShapeError when the dims differ."""
    return gather(self, axis, index)

  def take_along_axis(self, index, axis: int):
    """numpy's take_along_axis(self, index, axis): the same as `gather(axis, index)`."""
    return gather(self, axis, index)

  def take(self, index, axis=None):
    """numpy.take: the elements at `index` (an int, list or integer Tensor of any shape) of the
    flattened tensor (axis None: result of index's shape) or along `axis` (result: self's shape
    with that axis replaced by index's shape). Self's dtype.

    Raises DTypeError for a float or bool index, IndexOutOfRangeError for a Python index out of
    range."""
    return take(self, index, axis)
