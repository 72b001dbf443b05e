"""ONNX integer and quantized operators: QuantizeLinear, DequantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv, DynamicQuantizeLinear, and BitCast. Integer products
accumulate exactly in int32 (as the operators define); requantization is float32 arithmetic,
rounded half to even and saturated to the output type, following the operator definitions."""
from __future__ import annotations

from ...dtype import dtypes, max_value, min_value
from ...errors import UnsupportedError
from ..registry import OPS, axis_index, op


def _centered(x, zp, channel_axis=None):
  """x - zero_point in int32 (a per-channel zero point along channel_axis)."""
  x = x.cast(dtypes.int32)
  if zp is None:
    return x
  zp = zp.cast(dtypes.int32)
  if zp.ndim == 1 and zp.shape[0] > 1 and channel_axis is not None:
    shape = [1] * x.ndim
    shape[channel_axis] = -1
    zp = zp.reshape(tuple(shape))
  elif zp._elements() == 1:
    zp = zp.reshape(())
  return x - zp


class _With:
  """An operator's inputs with some replaced (to reuse another operator's code)."""

  def __init__(self, ins, values: dict):
    self._ins, self._values = ins, values

  def __getitem__(self, i):
    return self._values[i] if i in self._values else self._ins[i]

  def has(self, i):
    return i in self._values and self._values[i] is not None or \
      i not in self._values and self._ins.has(i)

  def __getattr__(self, name):
    return getattr(self._ins, name)


def _conv(ins, at, x, w):
  return OPS["Conv"](_With(ins, {0: x, 1: w, 2: None}), at)


def _requantize(acc, scale, zp, out_dtype):
  y = (acc.cast(dtypes.float32) * scale).round()
  if zp is not None:
    y = y + zp.cast(dtypes.float32)
  return y.clip(min_value(out_dtype), max_value(out_dtype)).cast(out_dtype)


def _scalar_or(x, shape_for_vector):
  if x._elements() == 1:
    return x.cast(dtypes.float32).reshape(())
  return x.cast(dtypes.float32).reshape(shape_for_vector)


@op("MatMulInteger")
def _matmul_integer(ins, at):
  a = _centered(ins[0], ins[2], ins[0].ndim - 1 if ins[0].ndim == 1 else ins[0].ndim - 2)
  b = _centered(ins[1], ins[3], ins[1].ndim - 1)
  return a @ b


@op("ConvInteger")
def _conv_integer(ins, at):
  x = _centered(ins[0], ins[2])
  w = _centered(ins[1], ins[3], 0)
  return _conv(ins, at, x, w)


@op("QLinearMatMul")
def _qlinear_matmul(ins, at):
  a = _centered(ins[0], ins[2], ins[0].ndim - 2)
  b = _centered(ins[3], ins[5], ins[3].ndim - 1)
  scale = _scalar_or(ins[1], (-1, 1)) * _scalar_or(ins[4], (-1,)) / \
    ins[6].cast(dtypes.float32).reshape(())
  zp = ins[7]
  return _requantize(a @ b, scale, zp, zp.dtype if zp is not None else ins[0].dtype)


@op("QLinearConv")
def _qlinear_conv(ins, at):
  x = _centered(ins[0], ins[2])
  w = _centered(ins[3], ins[5], 0)
  acc = _conv(ins, at, x, w)
  if ins.has(8):
    acc = acc + ins[8].cast(dtypes.int32).reshape((1, -1) + (1,) * (acc.ndim - 2))
  ws = _scalar_or(ins[4], (1, -1) + (1,) * (acc.ndim - 2))
  scale = ins[1].cast(dtypes.float32).reshape(()) * ws / ins[6].cast(dtypes.float32).reshape(())
  zp = ins[7]
  return _requantize(acc, scale, zp, zp.dtype if zp is not None else ins[0].dtype)


@op("DynamicQuantizeLinear")
def _dynamic_quantize(ins, at):
  x = ins[0].cast(dtypes.float32)
  hi = x.max().maximum(0.0)
  lo = x.min().minimum(0.0)
  span = hi - lo
  scale = (span + (span == 0).cast(dtypes.float32)) / 255.0
  zp = (0.0 - lo / scale).clip(0, 255).round()
  y = ((x / scale).round() + zp).clip(0, 255).cast(dtypes.uint8)
  return [y, scale.cast(ins[0].dtype), zp.cast(dtypes.uint8)]


@op("BitCast")
def _bitcast(ins, at):
  """The bits reinterpreted; bool <-> 8-bit ints are casts (a bool's bits are 0 or 1)."""
  from ..data import elem_dtype
  x = ins[0]
  code = at.int("to")
  target = ins.dtype(code)
  if target != elem_dtype(code, ins.node.describe()) or x.dtype.itemsize != target.itemsize:
    raise UnsupportedError(f"BitCast from {x.dtype} to {elem_dtype(code, '')}: kernelgen "
                           f"computes 64-bit integer data in 32 bits (WGSL has no 64-bit "
                           f"integers), so their bits cannot be reinterpreted")
  if target == dtypes.bool:
    return x != 0
  if x.dtype == dtypes.bool:
    return x.cast(target)
  return x.bitcast(target)


def _per_axis(param, x, at):
  """A scale or zero point (scalar, 1-d along `axis`, or blocked: x's shape with the axis cut
  into blocks of block_size) shaped to broadcast against x."""
  block = at.int("block_size", 0)
  if block:
    axis = axis_index(at.int("axis", 1), x.ndim)
    n = param.shape[axis]
    rep = param.unsqueeze(axis + 1).expand(*param.shape[:axis + 1], block,
                                           *param.shape[axis + 1:])
    rep = rep.reshape(*param.shape[:axis], n * block, *param.shape[axis + 1:])
    return rep.shrink(tuple((0, d) for d in x.shape))
  if param.ndim == 0 or param._elements() == 1 and param.ndim <= 1:
    return param.reshape(())
  axis = axis_index(at.int("axis", 1), x.ndim)
  shape = [1] * x.ndim
  shape[axis] = -1
  return param.reshape(tuple(shape))


@op("DequantizeLinear")
def _dequantize(ins, at):
  x, scale, zp = ins[0], ins[1], ins[2]
  s = _per_axis(scale, x, at)
  xf = x.cast(dtypes.int32) if not x.dtype.is_float() else x
  if zp is not None:
    xf = xf - _per_axis(zp, x, at).cast(xf.dtype)
  return xf.cast(s.dtype) * s


@op("QuantizeLinear")
def _quantize(ins, at):
  x, scale, zp = ins[0], ins[1], ins[2]
  out = zp.dtype if zp is not None else \
    ins.dtype(at.int("output_dtype")) if at.int("output_dtype") else dtypes.uint8
  if out.is_float():
    raise UnsupportedError(f"QuantizeLinear to {out} is not supported (integer outputs only)")
  s = _per_axis(scale, x, at)
  q = (x.cast(dtypes.float32) / s.cast(dtypes.float32)).round()
  if zp is not None:
    q = q + _per_axis(zp, x, at).cast(dtypes.float32)
  four_bit = at.int("output_dtype") in (21, 22) or \
    ins.has(2) and ins.names[2] in getattr(ins.runner.model, "four_bit", ())
  lo, hi = ((-8, 7) if out == dtypes.int8 else (0, 15)) if four_bit else \
    (min_value(out), max_value(out))
  return q.clip(lo, hi).cast(out)          # (int4 / uint4 are held one per byte)
