"""ONNX shape and movement operators: Shape, Reshape, Slice, Concat, Pad, Gather, Resize ...;
registered in registry.OPS."""
from __future__ import annotations

import math

from ...dtype import dtypes
from ...errors import ModelError, ShapeError, UnsupportedError
from ...tensor.tensor import Tensor, cat, where
from ...tensor.ops.einsum import einsum
from ...tensor.ops.advanced_indexing import take
from ..registry import axis_index, broadcast, full, op
from ..values import FOLD_MAX, Static, narrow_bytes, tensor_from_bytes
from .big_weights import gather_in_pieces


# ---- shapes and movement ---------------------------------------------------------------------

def _static_shape(x, what: str, part=slice(None)) -> None:
  """Shape computations are folded on the host with ints: a symbolic dim has none."""
  from ...graph.dims import Sym
  if x.node.sym is not None and any(isinstance(s, Sym) for s in x.node.sym[part]):
    from ...errors import UnsupportedError
    raise UnsupportedError(f"{what} of a tensor with symbolic dims {x.symbolic_shape}: shape "
                           f"computations over a symbolic dim are not supported yet; fix the "
                           f"dim at load (dims={{name: size}})")


@op("Shape")
def _shape(ins, at):
  shape = list(ins[0].shape)
  start, end = at.int("start", 0), at.int("end", len(shape))
  _static_shape(ins[0], "Shape", slice(start, end))
  shape = shape[slice(start, end)]
  return Tensor(shape, dtype=ins.int_dtype, device=ins.device) if shape else \
    Tensor.zeros(0, dtype=ins.int_dtype, device=ins.device)


@op("Size")
def _size(ins, at):
  _static_shape(ins[0], "Size")
  return full((), ins[0]._elements(), ins.int_dtype, ins.device)


_shape.shape_only = _size.shape_only = True   # their values are shapes: always static


@op("Reshape")
def _reshape(ins, at):
  x = ins[0]
  shape = ins.ints(1) if ins.opset >= 5 else at.ints("shape")
  if not at.int("allowzero", 0):
    shape = [x.symbolic_shape[i] if _is_int(s, 0) else s for i, s in enumerate(shape)]
  return x.reshape(tuple(shape))


def _is_int(s, value: int) -> bool:
  """Whether shape entry `s` (an int, or a symbolic size: onnx/symshape.py) is the int `value`."""
  from ...graph.dims import Sym
  return not isinstance(s, Sym) and s == value


@op("Flatten")
def _flatten(ins, at):
  x = ins[0]
  axis = at.int("axis", 1)
  axis = axis + x.ndim if axis < 0 else axis
  return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@op("Transpose")
def _transpose(ins, at):
  x = ins[0]
  perm = at.ints("perm")
  return x.permute(*perm) if perm is not None else x.permute(*range(x.ndim - 1, -1, -1))


@op("Squeeze")
def _squeeze(ins, at):
  x = ins[0]
  axes = ins.ints(1) if ins.opset >= 13 else at.ints("axes")
  if not axes:
    return x.squeeze()
  return x.squeeze(tuple(axis_index(a, x.ndim) for a in axes))


@op("Unsqueeze")
def _unsqueeze(ins, at):
  x = ins[0]
  axes = ins.ints(1) if ins.opset >= 13 else at.ints("axes")
  ndim = x.ndim + len(axes)
  axes = sorted(axis_index(a, ndim) for a in axes)
  shape = list(x.shape)
  for a in axes:
    shape.insert(a, 1)
  return x.reshape(tuple(shape))


@op("Concat")
def _concat(ins, at):
  xs = [x for x in ins.all()]
  axis = axis_index(at.int("axis", 0), xs[0].ndim)
  nonempty = [x for x in xs if x.shape[axis] > 0] or xs[:1]
  from . import kv_write
  written = kv_write.concat(xs, axis) if kv_write.enabled(ins) else None
  if written is not None:      # kg.generate: Concat(past, new) as an in-place append
    return written
  return cat(nonempty, axis) if len(nonempty) > 1 else nonempty[0]


@op("Split")
def _split(ins, at):
  x = ins[0]
  axis = axis_index(at.int("axis", 0), x.ndim)
  n_out = len(ins.node.outputs)
  split = ins.ints(1) if ins.opset >= 13 else at.ints("split")
  if split is None:
    size = x.shape[axis]
    num = at.int("num_outputs", n_out)
    chunk = -(-size // num)
    split = [min(chunk, size - i * chunk) for i in range(num)]
  outs, start = [], 0
  for s in split:
    bounds = [(0, d) for d in x.shape]
    bounds[axis] = (start, start + s)
    outs.append(x.shrink(bounds))
    start += s
  return outs


@op("Slice")
def _slice(ins, at):
  x = ins[0]
  if ins.opset < 10:
    starts, ends, axes, steps = at.ints("starts"), at.ints("ends"), at.ints("axes"), None
  else:
    starts, ends, axes, steps = ins.ints(1), ins.ints(2), ins.ints(3), ins.ints(4)
  axes = axes if axes is not None else list(range(len(starts)))
  steps = steps if steps is not None else [1] * len(starts)
  index = [slice(None)] * x.ndim
  for s, e, a, k in zip(starts, ends, axes, steps):
    if k == 0:
      raise ShapeError("Slice step 0")
    index[axis_index(a, x.ndim)] = slice(s, e, k)
  return _slice_view(x, index)


def _slice_view(x, index):
  out = x
  for axis, sl in enumerate(index):
    if sl == slice(None):
      continue
    n = x.shape[axis]
    start, stop, step = sl.indices(n)
    count = len(range(start, stop, step))
    if count == 0:
      shape = list(out.shape)
      shape[axis] = 0
      return Tensor.zeros(*shape, dtype=x.dtype, device=x.device) if 0 in shape else out
    full = [slice(None)] * x.ndim
    full[axis] = sl
    out = out[tuple(full)]
  return out


@op("Expand")
def _expand(ins, at):
  x = ins[0]
  shape = tuple(ins.ints(1))
  if len(shape) < x.ndim:
    shape = (1,) * (x.ndim - len(shape)) + shape
  ours = (1,) * (len(shape) - x.ndim) + tuple(x.symbolic_shape)
  if any(_is_symbolic(s) for s in shape + ours):    # ONNX broadcasting, a 1 takes the other
    return x.reshape(ours).expand(tuple(b if _is_int(a, 1) else a for a, b in zip(ours, shape)))
  return x.expand(broadcast(x.shape, shape))


def _is_symbolic(s) -> bool:
  from ...graph.dims import Sym
  return isinstance(s, Sym)


@op("Tile")
def _tile(ins, at):
  return ins[0].repeat(*ins.ints(1))


@op("ConstantOfShape")
def _const_of_shape(ins, at):
  shape = ins.ints(0)
  t = at.tensor("value")
  value, dtype = 0.0, dtypes.float32
  if t is not None:
    from ..data import tensor_payload
    from ...tensor.data import unpack
    dtype, _, raw = tensor_payload(t, None, "ConstantOfShape value")
    value, dtype = unpack(raw, dtype)[0], ins.dtype(t.data_type)
  if ins.runner.folding and math.prod(shape) <= FOLD_MAX:
    # a static fill's values on the host: no fill kernel compiled on PYTHON (a warm page load
    # compiled one per constant weight of a model that fills its weights, the light corpus')
    return Static(dtype, shape, [value] * math.prod(shape))
  return full(shape, value, dtype, ins.device)


@op("Constant")
def _constant(ins, at):
  from ..data import tensor_payload
  for name, kind in (("value", "t"), ("value_float", "f"), ("value_int", "i"),
                     ("value_floats", "fs"), ("value_ints", "is")):
    if name not in at.values:
      continue
    if kind == "t":
      dtype, shape, raw = tensor_payload(at.tensor(name), None, "Constant value")
      if not ins.runner.folding:
        raw, dtype = narrow_bytes(raw, dtype, shape, f"Constant {ins.node.name!r}",
                                  ins.runner.model.float64)
      return tensor_from_bytes(raw, shape, dtype, ins.device)
    if kind == "f":
      return full((), at.float(name), dtypes.float32, ins.device)
    if kind == "i":
      return full((), at.int(name), ins.int_dtype, ins.device)
    if kind == "fs":
      return Tensor(at.floats(name), dtype=dtypes.float32, device=ins.device)
    return Tensor(at.ints(name), dtype=ins.int_dtype, device=ins.device)
  raise UnsupportedError(f"Constant with {sorted(at.values)}: only dense values are supported")


@op("Range")
def _range(ins, at):
  start, limit, delta = ins.scalar(0), ins.scalar(1), ins.scalar(2)
  if any(_is_symbolic(v) for v in (start, limit, delta)):
    return _symbolic_range(ins, start, limit, delta)
  n = max(0, math.ceil((limit - start) / delta))
  dtype = ins[0].dtype
  if n == 0:
    return Tensor.zeros(0, dtype=dtype, device=ins.device)
  return (Tensor.arange(n, device=ins.device).cast(dtype) * delta + start).cast(dtype)


def _symbolic_range(ins, start, limit, delta):
  """Range whose limit is a symbolic size (onnx/symshape.py): start and delta ints, delta 1."""
  if _is_symbolic(start) or _is_symbolic(delta) or delta != 1 or start != int(start):
    raise UnsupportedError(f"Range({start}, {limit}, {delta}) over a symbolic size: only an int "
                           f"start and a delta of 1 are supported; fix the dim at load "
                           f"(dims={{name: size}})")
  dtype = ins[0].dtype        # start: an int on the host
  return (Tensor.arange(limit - int(start), device=ins.device) + int(start)).cast(dtype)


@op("Pad")
def _pad(ins, at):
  x = ins[0]
  mode = at.str("mode", "constant")
  if ins.opset < 11:
    pads, value, axes = at.ints("pads"), at.float("value", 0.0), None
  else:
    pads, value, axes = ins.ints(1), ins.scalar(2, 0), ins.ints(3)
  axes = [axis_index(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
  widths = [(0, 0)] * x.ndim
  for i, a in enumerate(axes):
    widths[a] = (pads[i], pads[i + len(axes)])
  cut = [(max(0, -b), n - max(0, -a)) for (b, a), n in zip(widths, x.shape)]
  x = x.shrink(cut)
  widths = tuple((max(0, b), max(0, a)) for b, a in widths)
  if mode == "constant":
    return x.pad(widths, value=value if value is not None else 0)
  return x.pad(widths, mode=mode)


@op("DepthToSpace")
def _d2s(ins, at):
  x = ins[0]
  b = at.int("blocksize")
  n, c, h, w = x.shape
  if at.str("mode", "DCR") == "DCR":
    y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
  else:
    y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
  return y.reshape(n, c // (b * b), h * b, w * b)


@op("SpaceToDepth")
def _s2d(ins, at):
  x = ins[0]
  b = at.int("blocksize")
  n, c, h, w = x.shape
  y = x.reshape(n, c, h // b, b, w // b, b)
  if at.str("mode", "DCR") == "CRD":       # (c, bh, bw) blocks: the depth varies slowest
    y = y.permute(0, 1, 3, 5, 2, 4)
  else:
    y = y.permute(0, 3, 5, 1, 2, 4)
  return y.reshape(n, c * b * b, h // b, w // b)


@op("EyeLike")
def _eyelike(ins, at):
  x = ins[0]
  k = at.int("k", 0)
  dtype = ins.dtype(at.int("dtype")) if at.int("dtype") is not None else x.dtype
  rows = Tensor.arange(x.shape[0], device=ins.device).reshape(-1, 1)
  cols = Tensor.arange(x.shape[1], device=ins.device).reshape(1, -1)
  return (cols - rows == k).cast(dtype)


@op("Trilu")
def _trilu(ins, at):
  x = ins[0]
  k = ins.scalar(1, 0)
  h, w = x.shape[-2:]
  rows = Tensor.arange(h, device=x.device).reshape(-1, 1)
  cols = Tensor.arange(w, device=x.device).reshape(1, -1)
  keep = (cols - rows >= k) if at.int("upper", 1) else (cols - rows <= k)
  return where(keep, x, x._const(0))


@op("OneHot")
def _onehot(ins, at):
  idx, values = ins[0], ins[2]
  depth = int(ins.scalar(1))
  axis = at.int("axis", -1)
  ndim = idx.ndim + 1
  axis = axis_index(axis, ndim)
  idx = idx.cast(dtypes.int32)
  idx = where(idx < 0, idx + depth, idx).unsqueeze(axis)
  shape = [1] * ndim
  shape[axis] = depth
  hit = Tensor.arange(depth, device=idx.device).reshape(shape) == idx
  off, on = values[0], values[1]
  return where(hit, on, off)


@op("Gather")
def _gather(ins, at):
  if at.int("axis", 0) in (0, -2):
    pieces = gather_in_pieces(ins, ins[1])    # a table over one binding (big_weights.py)
    if pieces is not None:
      return pieces
  x = ins[0]
  axis = axis_index(at.int("axis", 0), x.ndim)
  static = ins.runner.constant(ins.names[1])     # not a feed's: token ids stay run-time data
  n = x.shape[axis]
  size = x.symbolic_shape[axis]        # (a symbolic size: -1 is its run-time last element)
  if static is not None and static.size <= 64:
    parts = []
    for i in static.values:
      i = int(i)
      if not -n <= i < n:
        raise ShapeError(f"Gather index {i} is out of range for axis {axis} of size {n}")
      if i < 0 and not isinstance(size, int):
        parts.append(x[(slice(None),) * axis + (slice(size + i, size + i + 1),)])
        continue
      parts.append(x.shrink([(0, d) if a != axis else (i % n, i % n + 1)
                             for a, d in enumerate(x.shape)]))
    out = cat(parts, axis) if len(parts) > 1 else parts[0] if parts else None
    if out is None:
      shape = list(x.shape)
      shape[axis] = 0
      out = Tensor.zeros(*shape, dtype=x.dtype, device=x.device)
    return out.reshape(x.shape[:axis] + static.shape + x.shape[axis + 1:])
  idx = ins[1]
  idx = where(idx < 0, idx + n, idx)
  return take(x, idx, axis=axis)


@op("GatherElements")
def _gather_elements(ins, at):
  x, idx = ins[0], ins[1]
  axis = axis_index(at.int("axis", 0), x.ndim)
  idx = where(idx < 0, idx + x.shape[axis], idx)
  return x.gather(axis, idx)


@op("CumSum")
def _cumsum(ins, at):
  x = ins[0]
  axis = axis_index(int(ins.scalar(1)), x.ndim)
  y = x.flip(axis) if at.int("reverse", 0) else x
  out = y.cumsum(axis)
  if at.int("exclusive", 0):      # shifted one place along the axis: exact, unlike out - y
    widths = [(0, 0)] * out.ndim
    widths[axis] = (1, 0)
    out = out.pad(widths).shrink(tuple((0, n) for n in out.shape))
  return out.flip(axis) if at.int("reverse", 0) else out


@op("Einsum")
def _einsum(ins, at):
  return einsum(at.str("equation").replace(" ", ""), *ins.all())


@op("TopK")
def _topk(ins, at):
  x = ins[0]
  k = int(ins.scalar(1)) if ins.opset >= 10 else at.int("k")
  axis = at.int("axis", -1)
  values, indices = x.topk(k, axis=axis, largest=bool(at.int("largest", 1)))
  return [values, indices.cast(ins.int_dtype)]



def _resize_attrs(at, mode_default="nearest", coord_default="half_pixel"):
  return {"mode": at.str("mode", mode_default),
          "coord": at.str("coordinate_transformation_mode", coord_default),
          "nearest_mode": at.str("nearest_mode", "round_prefer_floor"),
          "cubic_a": at.float("cubic_coeff_a", -0.75),
          "exclude_outside": at.int("exclude_outside", 0),
          "extrapolation": at.float("extrapolation_value", 0.0),
          "antialias": at.int("antialias", 0)}


@op("Resize")
def _resize(ins, at):
  from .resize import out_size, resize
  x = ins[0]
  n = x.ndim
  if ins.opset < 11:
    scales, sizes, roi = ins.values(1), None, None
    attrs = _resize_attrs(at, coord_default="asymmetric")
  else:
    roi, scales, sizes = ins.values(1), ins.values(2), ins.ints(3)
    attrs = _resize_attrs(at)
  axes = [axis_index(a, n) for a in at.ints("axes", list(range(n)))]
  full_scales, full_sizes = [1.0] * n, list(x.shape)
  if scales:
    for a, s in zip(axes, scales):
      full_scales[a], full_sizes[a] = float(s), out_size(x.shape[a], s)
  elif sizes:
    policy = at.str("keep_aspect_ratio_policy", "stretch")
    ratios = [sizes[i] / x.shape[a] for i, a in enumerate(axes)]
    if policy != "stretch":
      r = min(ratios) if policy == "not_larger" else max(ratios)
      ratios = [r] * len(axes)
    for i, a in enumerate(axes):
      full_scales[a] = ratios[i]
      full_sizes[a] = int(round(x.shape[a] * ratios[i])) if policy != "stretch" else sizes[i]
  else:
    raise ModelError("Resize needs scales or sizes")
  full_roi = None
  if roi and attrs["coord"] == "tf_crop_and_resize":
    full_roi = [0.0] * n + [1.0] * n
    for i, a in enumerate(axes):
      full_roi[a], full_roi[a + n] = roi[i], roi[i + len(axes)]
  return resize(x, full_scales, full_sizes, full_roi, attrs)


@op("Upsample")
def _upsample(ins, at):
  from .resize import out_size, resize
  x = ins[0]
  scales = at.floats("scales") if ins.opset < 9 else ins.values(1)
  attrs = _resize_attrs(at, coord_default="asymmetric")
  attrs["coord"] = "asymmetric"
  attrs["nearest_mode"] = "floor"
  sizes = [out_size(d, s) for d, s in zip(x.shape, scales)]
  return resize(x, [float(s) for s in scales], sizes, None, attrs)



@op("CenterCropPad")
def _center_crop_pad(ins, at):
  x = ins[0]
  shape = ins.ints(1)
  axes = [axis_index(a, x.ndim) for a in at.ints("axes", list(range(x.ndim)))]
  for a, want in zip(axes, shape):
    have = x.shape[a]
    if want < have:               # crop: the extra element goes to the end
      start = (have - want) // 2
      bounds = [(0, d) for d in x.shape]
      bounds[a] = (start, start + want)
      x = x.shrink(bounds)
    elif want > have:             # pad: the extra element goes to the end
      before = (want - have) // 2
      pads = [(0, 0)] * x.ndim
      pads[a] = (before, want - have - before)
      x = x.pad(tuple(pads))
  return x
