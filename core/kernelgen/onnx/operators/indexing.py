"""ONNX indexing operators: ScatterElements (and the old Scatter), ScatterND, GatherND, CumProd,
and the operators whose output shape depends on the data (Compress, NonZero, Unique,
NonMaxSuppression): those need
their data on the host (a constant, a feed, or a value computed now: the lazy graph is realized
up to it), as their output size is part of the graph's static shapes.

Scatters with a reduction (add, mul, max, min) fold every update that lands on an element into it
in one reduction over the updates, or by sorting the indices above scatter.COMPARE_MAX
(deterministic either way: no races); `none` keeps the last update, as the Tensor scatter does.
Built from public Tensor methods (gather, scatter, scatter_add, comparisons, reductions) and, for
the sorted reductions, tensor/ops/sorted_scatter.py's scatter_reduce."""
from __future__ import annotations

import math

from ...dtype import dtypes, max_value, min_value
from ...errors import ShapeError, UnsupportedError
from ...tensor.ops import sorted_scatter
from ...tensor.tensor import Tensor, where
from ...tensor.ops.elementwise import maximum, minimum
from ..registry import axis_index, op

_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _wrap(idx, n: int):
  idx = idx.cast(dtypes.int32)
  return where(idx < 0, idx + n, idx)


def _identity(kind: str, dtype):
  if kind == "mul":
    return 1
  if kind == "max":
    return min_value(dtype) if not dtype.is_float() else -math.inf
  return max_value(dtype) if not dtype.is_float() else math.inf


def _scatter_reduce(t, axis: int, idx, src, kind: str):
  """t with every src[i] reduced (mul, max, min) into t[.., idx[i], ..] along axis: one
  one-hot reduction over the updates, or above scatter.COMPARE_MAX (as scatter_add) a
  segmented scan over the sorted indices (tensor/ops/sorted_scatter.py)."""
  n = t.shape[axis]
  m = idx.shape[axis]
  if sorted_scatter.sorted_pays(math.prod(idx.shape) // max(m, 1), n, m):
    return sorted_scatter.scatter_reduce(t, axis, idx, src.cast(t.dtype), kind)
  order = [d for d in range(t.ndim) if d != axis] + [axis]
  back = list(range(t.ndim - 1))
  back.insert(axis, t.ndim - 1)
  ii, ss = idx.permute(*order), src.cast(t.dtype).permute(*order)       # (..., m)
  hit = ii.unsqueeze(-1) == Tensor.arange(n, device=t.device)           # (..., m, n)
  pad = ss.unsqueeze(-1)
  vals = where(hit, pad, _identity(kind, t.dtype))
  red = vals.prod(-2) if kind == "mul" else vals.max(-2) if kind == "max" else vals.min(-2)
  red = red.cast(t.dtype).permute(*back)
  red = red.pad(tuple((0, s - r) for r, s in zip(red.shape, t.shape)),
                value=_identity(kind, t.dtype))
  if kind == "mul":
    return (t * red).cast(t.dtype)
  return maximum(t, red) if kind == "max" else minimum(t, red)


def _scatter_elements(t, axis: int, idx, src, kind: str):
  if kind not in _REDUCTIONS:
    raise UnsupportedError(f"scatter reduction {kind!r}: ONNX defines {_REDUCTIONS}")
  idx = _wrap(idx, t.shape[axis])
  if kind == "none":
    return t.scatter(axis, idx, src)
  if kind == "add":
    return t.scatter_add(axis, idx, src)
  return _scatter_reduce(t, axis, idx, src, kind)


@op("ScatterElements", "Scatter")
def _scatter_el(ins, at):
  x = ins[0]
  axis = axis_index(at.int("axis", 0), x.ndim)
  return _scatter_elements(x, axis, ins[1], ins[2], at.str("reduction", "none"))


def _linear(idx, dims: tuple):
  """Row-major linear index of the last dim of idx (k coordinates) into dims; negatives wrap."""
  k = idx.shape[-1]
  total = None
  for j in range(k):
    part = _wrap(idx[..., j], dims[j]) * math.prod(dims[j + 1:k])
    total = part if total is None else total + part
  return total


@op("ScatterND")
def _scatter_nd(ins, at):
  x, idx, upd = ins[0], ins[1], ins[2]
  k = idx.shape[-1]
  m = math.prod(idx.shape[:-1])
  rest = x.shape[k:]
  r = math.prod(rest)
  flat = x.reshape(math.prod(x.shape[:k]), r)
  lin = _linear(idx, x.shape[:k]).reshape(m, 1).expand(m, r)
  out = _scatter_elements(flat, 0, lin, upd.reshape(m, r), at.str("reduction", "none"))
  return out.reshape(x.shape)


@op("GatherND")
def _gather_nd(ins, at):
  x, idx = ins[0], ins[1]
  b = at.int("batch_dims", 0)
  k = idx.shape[-1]
  batch = math.prod(x.shape[:b])
  rest = x.shape[b + k:]
  r = math.prod(rest)
  m = math.prod(idx.shape[b:-1])
  data = x.reshape(batch, math.prod(x.shape[b:b + k]), r)
  lin = _linear(idx.reshape(batch, m, k), x.shape[b:b + k])
  out = data.gather(1, lin.reshape(batch, m, 1).expand(batch, m, r))
  return out.reshape(idx.shape[:-1] + rest)


@op("CumProd")
def _cumprod(ins, at):
  x = ins[0]
  axis = axis_index(int(ins.scalar(1)), x.ndim)
  rev = at.int("reverse", 0)
  y = x.flip(axis) if rev else x
  if at.int("exclusive", 0):      # the product of the elements before: a leading 1
    widths = [(0, 0)] * y.ndim
    widths[axis] = (1, 0)
    y = y.pad(widths, value=1).shrink(tuple((0, n) for n in y.shape))
  out = y.cumprod(axis).cast(x.dtype)
  return out.flip(axis) if rev else out


# ---- data-dependent shapes: computed from host values -------------------------------------------

def host_data(ins, i: int):
  """(values, shape, dtype) of input i on the host: a constant or feed, or realized now."""
  s = ins.runner.host_values(ins.names[i], ins.node.describe())
  return s.values, s.shape, s.dtype


def _strides(shape) -> list:
  return [math.prod(shape[d + 1:]) for d in range(len(shape))]


@op("NonZero", foldable=True)
def _nonzero(ins, at):
  values, shape, _ = host_data(ins, 0)
  shape = shape or (1,)
  hits = [i for i, v in enumerate(values) if v]
  strides = _strides(shape)
  rows = [[(i // st) % n for i in hits] for st, n in zip(strides, shape)]
  flat = [v for row in rows for v in row]
  if not hits:
    return Tensor.zeros(len(shape), 0, dtype=ins.int_dtype, device=ins.device)
  return Tensor(flat, dtype=ins.int_dtype, device=ins.device).reshape(len(shape), len(hits))


@op("Compress")
def _compress(ins, at):
  x = ins[0]
  cond, _, _ = host_data(ins, 1)
  axis = at.int("axis")
  if axis is None:
    x, axis = x.flatten(), 0
  axis = axis_index(axis, x.ndim)
  keep = [i for i, c in enumerate(cond[:x.shape[axis]]) if c]
  if not keep:
    shape = list(x.shape)
    shape[axis] = 0
    return Tensor.zeros(*shape, dtype=x.dtype, device=x.device)
  return x.take(Tensor(keep, dtype=dtypes.int32, device=x.device), axis=axis)


def _unique_rows(values, shape, axis):
  """The slices of `values` along axis as tuples (the keys Unique compares)."""
  if axis is None:
    return [(v,) for v in values], len(values)
  n = shape[axis]
  outer = math.prod(shape[:axis])
  inner = math.prod(shape[axis + 1:])
  rows = []
  for i in range(n):
    rows.append(tuple(values[(o * n + i) * inner + j] for o in range(outer)
                      for j in range(inner)))
  return rows, n


@op("Unique")
def _unique(ins, at):
  x = ins[0]
  values, shape, _ = host_data(ins, 0)
  axis = at.int("axis")
  axis = axis_index(axis, len(shape)) if axis is not None else None
  rows, n = _unique_rows(values, shape, axis)
  first: dict = {}
  for i, row in enumerate(rows):
    first.setdefault(row, i)
  keys = sorted(first, key=lambda r: first[r]) if not at.int("sorted", 1) else sorted(first)
  pos = {row: j for j, row in enumerate(keys)}
  order = [first[row] for row in keys]
  inverse = [pos[row] for row in rows]
  counts = [0] * len(keys)
  for row in rows:
    counts[pos[row]] += 1
  src = x.flatten() if axis is None else x
  y = src.take(Tensor(order, dtype=dtypes.int32, device=x.device), axis=axis or 0)
  idt, dev = ins.int_dtype, ins.device
  return [y, Tensor(order, dtype=idt, device=dev), Tensor(inverse, dtype=idt, device=dev),
          Tensor(counts, dtype=idt, device=dev)]



def _box(b, center: bool) -> tuple:
  """(x_min, x_max, y_min, y_max) of a box in either ONNX box format."""
  if center:
    x, y, w, h = b
    return x - w / 2, x + w / 2, y - h / 2, y + h / 2
  y1, x1, y2, x2 = b
  return min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)


def _overlaps(a: tuple, b: tuple, threshold: float) -> bool:
  """IoU(a, b) > threshold (degenerate boxes never suppress)."""
  w = min(a[1], b[1]) - max(a[0], b[0])
  h = min(a[3], b[3]) - max(a[2], b[2])
  if w <= 0 or h <= 0:
    return False
  inter = w * h
  area_a = (a[1] - a[0]) * (a[3] - a[2])
  area_b = (b[1] - b[0]) * (b[3] - b[2])
  union = area_a + area_b - inter
  if area_a <= 0 or area_b <= 0 or union <= 0:
    return False
  return inter / union > threshold


@op("NonMaxSuppression")
def _nms(ins, at):
  """Greedy NMS per batch and class, computed on the host from the boxes' and scores' values
  (realized first when they are computed on the device): the output's length is data."""
  boxes, bshape, _ = host_data(ins, 0)
  scores, sshape, _ = host_data(ins, 1)
  limit = int(ins.scalar(2, 0) or 0)
  iou = float(ins.scalar(3, 0.0) or 0.0)
  floor = ins.scalar(4) if ins.has(4) else None
  center = bool(at.int("center_point_box", 0))
  n_batch, n_box = bshape[0], bshape[1]
  n_class = sshape[1]
  picked = []
  for b in range(n_batch):
    rects = [_box(boxes[(b * n_box + i) * 4:(b * n_box + i) * 4 + 4], center)
             for i in range(n_box)]
    for c in range(n_class):
      row = scores[(b * n_class + c) * n_box:(b * n_class + c + 1) * n_box]
      order = sorted((i for i in range(n_box) if floor is None or row[i] > floor),
                     key=lambda i: (-row[i], i))
      chosen: list = []
      for i in order:
        if len(chosen) >= limit:
          break
        if not any(_overlaps(rects[i], rects[j], iou) for j in chosen):
          chosen.append(i)
      picked.extend([b, c, i] for i in chosen)
  if not picked:
    return Tensor.zeros(0, 3, dtype=ins.int_dtype, device=ins.device)
  flat = [v for row in picked for v in row]
  return Tensor(flat, dtype=ins.int_dtype, device=ins.device).reshape(len(picked), 3)


# ---- sequence reversal, cache updates, unpooling, col2im ----------------------------------------

@op("ReverseSequence")
def _reverse_sequence(ins, at):
  """out[b, t] = x[b, len_b - 1 - t] for t < len_b, else x[b, t]: one gather along time."""
  x = ins[0]
  t_ax = axis_index(at.int("time_axis", 0), x.ndim)
  b_ax = axis_index(at.int("batch_axis", 1), x.ndim)
  lens = ins[1].cast(dtypes.int32)
  shape_t, shape_b = [1] * x.ndim, [1] * x.ndim
  shape_t[t_ax], shape_b[b_ax] = x.shape[t_ax], x.shape[b_ax]
  t = Tensor.arange(x.shape[t_ax], device=x.device).reshape(tuple(shape_t))
  n = lens.reshape(tuple(shape_b))
  idx = where(t < n, n - 1 - t, t).expand(*x.shape)
  return x.gather(t_ax, idx)


@op("TensorScatter")
def _tensor_scatter(ins, at):
  """The update written into the cache along axis at each batch's write index (mod the cache
  length in circular mode)."""
  past, upd = ins[0], ins[1]
  axis = axis_index(at.int("axis", -2), past.ndim)
  size, steps = past.shape[axis], upd.shape[axis]
  shape_s, shape_b = [1] * past.ndim, [1] * past.ndim
  shape_s[axis], shape_b[0] = steps, past.shape[0]
  pos = Tensor.arange(steps, device=past.device).reshape(tuple(shape_s))
  if ins.has(2):
    pos = pos + ins[2].cast(dtypes.int32).reshape(tuple(shape_b))
  if at.str("mode", "linear") == "circular":
    pos = pos % size
  return past.scatter(axis, pos.expand(*upd.shape), upd)


def _spatial(at, name: str, n: int, default: int) -> list:
  return at.ints(name, [default] * n)


@op("MaxUnpool")
def _max_unpool(ins, at):
  """Each value written at its flat index (MaxPool's Indices) into a zero output."""
  x, idx = ins[0], ins[1]
  n = x.ndim - 2
  kernel = at.ints("kernel_shape")
  strides, pads = _spatial(at, "strides", n, 1), _spatial(at, "pads", 2 * n, 0)
  shape = x.shape[:2] + tuple((x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[i + n] +
                              kernel[i] for i in range(n))
  flat = Tensor.zeros(math.prod(shape), dtype=x.dtype, device=x.device)
  out = flat.scatter(0, idx.flatten().cast(dtypes.int32), x.flatten()).reshape(shape)
  if ins.has(2):        # an explicit output shape: the unpooled values at its start, zeros after
    want = ins.ints(2)
    out = out.pad(tuple((0, w - s) for s, w in zip(shape, want)))
  return out


def _col2im_matrix(image, block, dil, pads, strides, device) -> tuple:
  """The 0/1 matrix (blocks*positions, padded image size) placing each column entry."""
  n = len(image)
  padded = [image[i] + pads[i] + pads[i + n] for i in range(n)]
  counts = [(padded[i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(n)]
  rows, size = math.prod(block) * math.prod(counts), math.prod(padded)
  dense = [0.0] * (rows * size)
  r = 0
  for k in _coords(block):
    for pos in _coords(counts):
      flat = 0
      for i in range(n):
        flat = flat * padded[i] + pos[i] * strides[i] + k[i] * dil[i]
      dense[r * size + flat] = 1.0
      r += 1
  return Tensor(dense, dtype=dtypes.float32, device=device).reshape(rows, size), padded, counts


def _coords(dims) -> list:
  out = [()]
  for d in dims:
    out = [c + (i,) for c in out for i in range(d)]
  return out


@op("Col2Im")
def _col2im(ins, at):
  """Column blocks summed back into the image (overlaps add), padding cut off."""
  x = ins[0]
  image, block = ins.ints(1), ins.ints(2)
  n = len(image)
  dil, strides = _spatial(at, "dilations", n, 1), _spatial(at, "strides", n, 1)
  pads = _spatial(at, "pads", 2 * n, 0)
  place, padded, counts = _col2im_matrix(image, block, dil, pads, strides, x.device)
  b, ck, length = x.shape
  k = math.prod(block)
  if length != math.prod(counts) or ck % k:
    raise ShapeError(f"Col2Im: input {x.shape} does not fit image {image}, block {block}")
  c = ck // k
  cols = x.cast(dtypes.float32).reshape(b, c, k * length)
  out = (cols @ place).reshape((b, c) + tuple(padded))
  bounds = ((0, b), (0, c)) + tuple((pads[i], pads[i] + image[i]) for i in range(n))
  return out.shrink(bounds).cast(x.dtype)
