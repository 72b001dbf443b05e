"""ONNX neural-network operators: MatMul, Gemm, convolutions, pooling, normalizations, LRN,
softmax, Attention and the recurrent layers; registered in registry.OPS (ConvTranspose is in
conv_transpose.py, QuantizeLinear and DequantizeLinear in quant.py, the losses in losses.py)."""
from __future__ import annotations

import math

from ...dtype import dtypes, min_value
from ...errors import ModelError, UnsupportedError
from ...tensor.tensor import Tensor, stack, where
from ...tensor.operands import result_dtype
from ..registry import axis_index, broadcast, op, widened
from .big_weights import matmul_in_pieces
from .weights import held_taps_last, held_transposed, matmul_rows, row_input


# ---- matrix and nn ---------------------------------------------------------------------------

@op("MatMul")
def _matmul(ins, at):
  pieces = matmul_in_pieces(ins, _product)    # a weight over one binding (big_weights.py)
  if pieces is not None:
    return pieces
  a, b = ins[0], held_transposed(ins, 1)      # (weights.py: held (N, K) on CPU adapters)
  if b is None:
    b = ins[1]
  else:                                        # a normed row realized
    a = row_input(ins, a, matmul_rows(ins.runner))
  if a.ndim >= 2 and b.ndim >= 2:
    batch = broadcast(a.shape[:-2], b.shape[:-2])
    a, b = a.expand(batch + a.shape[-2:]), b.expand(batch + b.shape[-2:])
  return _product(a, b)


def _product(a: Tensor, b: Tensor) -> Tensor:
  """a @ b; for 16-bit floats each product in float32 (exact), summed in float32 and rounded
  once, as onnxruntime's CPU MatMul of float16 computes it."""
  return _wide_product(a, b).cast(result_dtype(a, b))


def _wide_product(a: Tensor, b: Tensor) -> Tensor:
  """a @ b in float32 where an operand is a 16-bit float (registry.widened), not rounded. The
  operands are widened after their broadcast views: a lazy operand ending in a reshape is then
  stored in its own dtype, not as float32 (graph/epilogue.py extends a reduction's tail through
  a cast after a reshape, not after an expand)."""
  if widened(a) is a and widened(b) is b or a.ndim < 2 or b.ndim < 2 or \
     a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
    return widened(a) @ widened(b)
  full = a.shape[:-1] + (b.shape[-1], a.shape[-1])                       # (..., n, m, k)
  xs = widened(a.unsqueeze(-2).expand(full))
  ys = widened(b.swapaxes(-1, -2).unsqueeze(-3).expand(full))
  return (xs * ys).sum(-1)


@op("Gemm")
def _gemm(ins, at):
  a, b, c = ins[0], ins[1], ins[2]
  a = a.T if at.int("transA", 0) else a
  b = b.T if at.int("transB", 0) else b
  alpha, beta = at.float("alpha", 1.0), at.float("beta", 1.0)
  out = _wide_product(a, b)               # float16: in float32, rounded once (_product)
  if alpha != 1.0:
    out = out * alpha
  if c is not None:
    out = out + (widened(c) * beta if beta != 1.0 else widened(c))
  return out.cast(result_dtype(a, b))


def _spatial_pads(ins, at, x, kernel, strides, dilations, ceil=False):
  """(before, after) pads per spatial dim from pads / auto_pad."""
  n = len(kernel)
  auto = at.str("auto_pad", "NOTSET")
  if auto in ("SAME_UPPER", "SAME_LOWER"):
    pads = []
    for i in range(n):
      size = x.shape[2 + i]
      out = -(-size // strides[i])
      total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size)
      small, big = total // 2, total - total // 2
      pads.append((small, big) if auto == "SAME_UPPER" else (big, small))
    return pads
  if auto == "VALID":
    return [(0, 0)] * n
  p = at.ints("pads", [0] * (2 * n))
  return [(p[i], p[i + n]) for i in range(n)]


def _conv_args(ins, at, x, w_shape):
  n = x.ndim - 2
  kernel = at.ints("kernel_shape", list(w_shape[2:]))
  strides = at.ints("strides", [1] * n)
  dilations = at.ints("dilations", [1] * n)
  pads = _spatial_pads(ins, at, x, kernel, strides, dilations)
  return kernel, strides, dilations, pads


def _pad_spatial(x, pads, value=0):
  if not any(b or a for b, a in pads):
    return x
  return x.pad(((0, 0), (0, 0)) + tuple(pads), value=value)


@op("Conv")
def _conv(ins, at):
  x, w, b = ins[0], held_taps_last(ins, 1, at.int("group", 1)), ins[2]
  w = ins[1] if w is None else w          # (weights.py: held [C][kh][kw][O] on CPU adapters)
  if x.ndim not in (3, 4, 5):
    raise UnsupportedError(f"Conv of a {x.ndim}-d input: kernelgen has 1-d to 3-d convolution")
  _, strides, dilations, pads = _conv_args(ins, at, x, w.shape)
  if x.ndim == 5:
    y = conv3d(_pad_spatial(x, pads), w, strides, dilations, at.int("group", 1))
    return y + b.reshape(1, -1, 1, 1, 1) if b is not None else y
  one_d = x.ndim == 3
  if one_d:
    x, w = x.unsqueeze(2), w.unsqueeze(2)
    strides, dilations, pads = [1] + strides, [1] + dilations, [(0, 0)] + pads
  x = _pad_spatial(x, pads)
  out = x.conv2d(w, b, stride=tuple(strides), padding=0, dilation=tuple(dilations),
                 groups=at.int("group", 1))
  return out.squeeze(2) if one_d else out


def conv3d(x, w, strides, dils, groups):
  """A 3-d convolution of an already padded x as one 2-d convolution per kernel depth tap: the
  tap's strided depth slice of x folded into the batch, the results summed."""
  n, c, d = x.shape[:3]
  kd = w.shape[2]
  od = (d - dils[0] * (kd - 1) - 1) // strides[0] + 1
  total = None
  for k in range(kd):
    start = k * dils[0]
    sl = x[:, :, start:start + strides[0] * (od - 1) + 1:strides[0]]       # (N, C, OD, H, W)
    flat = sl.permute(0, 2, 1, 3, 4).reshape(n * od, c, *x.shape[3:])
    y = flat.conv2d(w[:, :, k], None, stride=tuple(strides[1:]), padding=0,
                    dilation=tuple(dils[1:]), groups=groups)
    total = y if total is None else total + y
  return total.reshape(n, od, *total.shape[1:]).permute(0, 2, 1, 3, 4)


def _pool_windows(x, at, ins, fill):
  """(padded x, padded validity mask, kernel, strides, dilations, n) for 1-3 spatial dims; a
  1-d pool gets a size-1 leading spatial dim (n tells the caller to drop it)."""
  n = x.ndim - 2
  if n not in (1, 2, 3):
    raise UnsupportedError(f"{ins.node.op} of a {x.ndim}-d input: kernelgen pools 1-3 dims")
  kernel = at.ints("kernel_shape")
  if kernel is None:
    raise ModelError(f"{ins.node.describe()} has no kernel_shape")
  strides = at.ints("strides", [1] * n)
  dilations = at.ints("dilations", [1] * n)
  pads = _spatial_pads(ins, at, x, kernel, strides, dilations)
  if at.int("ceil_mode", 0):
    pads = [_ceil_pad(x.shape[2 + i], kernel[i], strides[i], dilations[i], pads[i])
            for i in range(n)]
  if n == 1:
    x = x.unsqueeze(2)
    kernel, strides, dilations, pads = [1] + kernel, [1] + strides, [1] + dilations, \
      [(0, 0)] + pads
  mask = Tensor.ones(*x.shape[2:], dtype=dtypes.float32, device=x.device)
  xp = _pad_spatial(x, pads, fill)
  mp = mask.pad(tuple(pads)) if any(b or a for b, a in pads) else mask
  return xp, mp, (tuple(kernel), tuple(strides), tuple(dilations)), n


def _window_reduce(t, window, how: str):
  """max or sum over every pooling window of the last 2 or 3 dims of t. A 3-d window is
  separable: the (h, w) windows first, then the d windows of their results."""
  kernel, strides, dils = window

  def reduce(w):
    return w.max((-2, -1)) if how == "max" else w.sum((-2, -1))
  if len(kernel) == 2:
    return reduce(t._windows(kernel, strides, dils))
  y = reduce(t._windows(kernel[1:], strides[1:], dils[1:]))          # (..., D, OH, OW)
  nd = y.ndim
  lead = tuple(range(nd - 3))
  y = y.permute(*lead, nd - 2, nd - 1, nd - 3).unsqueeze(-2)          # (..., OH, OW, 1, D)
  y = reduce(y._windows((1, kernel[0]), (1, strides[0]), (1, dils[0]))).squeeze(-2)
  return y.permute(*lead, nd - 1, nd - 3, nd - 2)                     # (..., OD, OH, OW)


def _ceil_pad(size, k, s, d, pad):
  """Extra end padding so the last, partial window counts (ceil_mode), as ONNX: a window must
  start inside the input or its left padding."""
  b, a = pad
  span = size + b + a - d * (k - 1) - 1
  out = -(-span // s) + 1
  if (out - 1) * s >= size + b:
    out -= 1
  need = (out - 1) * s + d * (k - 1) + 1 - (size + b + a)
  return (b, a + max(0, need))


@op("MaxPool")
def _maxpool(ins, at):
  x = ins[0]
  fill = -math.inf if x.dtype.is_float() else min_value(x.dtype)
  xp, _, window, n = _pool_windows(x, at, ins, fill)
  out = _window_reduce(xp, window, "max")
  out = out.squeeze(2) if n == 1 else out
  if len(ins.node.outputs) > 1 and ins.node.outputs[1]:
    return [out, _maxpool_indices(x, xp, at, ins, window, n)]
  return out


def _maxpool_indices(x, xp, at, ins, window, n):
  """MaxPool's Indices: the flat index (row-major, or column-major spatial dims with
  storage_order 1) of each window's first maximum in the unpadded input, for 1-3 spatial dims
  (a 1-d pool is a 2-d one of height 1: `xp` and `window` already are)."""
  spatial = x.shape[2:]
  dev = x.device
  order = range(n) if at.int("storage_order", 0) else reversed(range(n))   # fastest first
  plane, step = None, 1
  for d in order:            # the flat index of each spatial position, in the storage order
    axis = [1] * n
    axis[d] = spatial[d]
    term = Tensor.arange(spatial[d], device=dev).reshape(1, 1, *axis) * step
    plane, step = term if plane is None else plane + term, step * spatial[d]
  b, c = x.shape[:2]
  lead = Tensor.arange(b * c, device=dev).reshape(b, c, *([1] * n)) * step
  idx = (lead + plane).cast(dtypes.float32)
  kernel, strides, dils = window
  k_in = list(kernel[-n:])
  pads = _spatial_pads(ins, at, x, k_in, list(strides[-n:]), list(dils[-n:]))
  if at.int("ceil_mode", 0):
    pads = [_ceil_pad(spatial[i], k_in[i], strides[-n:][i], dils[-n:][i], pads[i])
            for i in range(n)]
  if n == 1:
    idx, pads = idx.unsqueeze(2), [(0, 0)] + pads
  ip = _pad_spatial(idx, pads, -1)
  xw, iw = _flat_windows(xp, window), _flat_windows(ip, window)
  pos = xw.argmax(-1).cast(dtypes.int32).unsqueeze(-1)
  out = iw.gather(-1, pos).squeeze(-1).cast(ins.int_dtype)
  return out.squeeze(2) if n == 1 else out


def _flat_windows(t, window):
  """(..., OH, OW, k) or (..., OD, OH, OW, k): every pooling window of t's last 2 or 3 dims,
  flattened in row-major window order (k = the window's size)."""
  kernel, strides, dils = window
  if len(kernel) == 2:
    w = t._windows(kernel, strides, dils)
    return w.reshape(w.shape[:-2] + (kernel[0] * kernel[1],))
  depth = t.shape[-3]
  od = (depth - dils[0] * (kernel[0] - 1) - 1) // strides[0] + 1
  slabs = []
  for i in range(kernel[0]):        # the (h, w) windows of each depth offset, stacked
    start = i * dils[0]
    slab = t[:, :, start:start + strides[0] * (od - 1) + 1:strides[0]]      # (N, C, D, H, W)
    slabs.append(slab._windows(kernel[1:], strides[1:], dils[1:]))
  w = stack(slabs, axis=-3)          # (..., OD, OH, OW, kd, kh, kw)
  return w.reshape(w.shape[:-3] + (kernel[0] * kernel[1] * kernel[2],))


@op("AveragePool")
def _avgpool(ins, at):
  x = ins[0]
  xp, mp, window, n = _pool_windows(x, at, ins, 0)
  total = _window_reduce(xp, window, "sum")
  if at.int("count_include_pad", 0):
    kernel = at.ints("kernel_shape")
    if at.int("ceil_mode", 0):   # the padding ceil_mode adds is not counted
      count = _count_in_padded(x, at, ins)
      out = total / count
    else:
      out = total / math.prod(kernel)
  else:
    out = total / _window_reduce(mp, window, "sum")
  return out.squeeze(2) if n == 1 else out


def _count_in_padded(x, at, ins):
  n = x.ndim - 2
  kernel = at.ints("kernel_shape")
  strides = at.ints("strides", [1] * n)
  dil = at.ints("dilations", [1] * n)
  pads = _spatial_pads(ins, at, x, kernel, strides, dil)
  padded = tuple(x.shape[2 + i] + pads[i][0] + pads[i][1] for i in range(n))
  ceil = [_ceil_pad(x.shape[2 + i], kernel[i], strides[i], dil[i], pads[i]) for i in range(n)]
  extra = [(0, c[1] - p[1]) for c, p in zip(ceil, pads)]
  mask = Tensor.ones(*padded, dtype=dtypes.float32, device=x.device).pad(tuple(extra))
  if n == 1:
    mask, kernel, strides, dil = mask.unsqueeze(0), [1] + kernel, [1] + strides, [1] + dil
  return _window_reduce(mask, (tuple(kernel), tuple(strides), tuple(dil)), "sum")


@op("GlobalAveragePool")
def _gap(ins, at):
  x = ins[0]
  return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@op("GlobalMaxPool")
def _gmp(ins, at):
  x = ins[0]
  return x.max(tuple(range(2, x.ndim)), keepdim=True)


def _channel_shape(x):
  return (1, -1) + (1,) * (x.ndim - 2)


@op("BatchNormalization")
def _batchnorm(ins, at):
  x, scale, bias, mean, var = (ins[i] for i in range(5))
  eps = at.float("epsilon", 1e-5)
  shp = _channel_shape(x)
  if at.int("training_mode", 0) or sum(1 for o in ins.node.outputs if o) > 1:
    return _batchnorm_training(ins, at, x, scale, bias, mean, var, eps)
  inv = (var.reshape(shp) + eps).rsqrt() * scale.reshape(shp)
  return (x - mean.reshape(shp)) * inv + bias.reshape(shp)


def _batchnorm_training(ins, at, x, scale, bias, mean, var, eps):
  """Training mode (opset 14+): normalized with the batch's statistics (biased variance); the
  running statistics come out updated by `momentum`."""
  if ins.opset < 14:
    raise UnsupportedError("BatchNormalization training outputs before opset 14 (saved mean "
                           "and variance) are not supported")
  axes = (0,) + tuple(range(2, x.ndim))
  shp = _channel_shape(x)
  cur_mean = x.mean(axes)
  diff = x - cur_mean.reshape(shp)
  cur_var = (diff * diff).mean(axes)
  y = diff * (cur_var.reshape(shp) + eps).rsqrt() * scale.reshape(shp) + bias.reshape(shp)
  m = at.float("momentum", 0.9)
  return [y, (mean * m + cur_mean * (1 - m)).cast(x.dtype),
          (var * m + cur_var * (1 - m)).cast(x.dtype)]


@op("InstanceNormalization")
def _instnorm(ins, at):
  x, scale, bias = ins[0], ins[1], ins[2]
  axes = tuple(range(2, x.ndim))
  mean = x.mean(axes, keepdim=True)
  var = ((x - mean) * (x - mean)).mean(axes, keepdim=True)
  shp = _channel_shape(x)
  return (x - mean) * (var + at.float("epsilon", 1e-5)).rsqrt() * scale.reshape(shp) + \
    bias.reshape(shp)


@op("LayerNormalization")
def _layernorm(ins, at):
  x, scale, bias = ins[0], ins[1], ins[2]
  axis = axis_index(at.int("axis", -1), x.ndim)
  axes = tuple(range(axis, x.ndim))
  xf = x.float() if x.dtype != dtypes.float32 and x.dtype != dtypes.float64 else x
  mean = xf.mean(axes, keepdim=True)
  var = ((xf - mean) * (xf - mean)).mean(axes, keepdim=True)
  inv = (var + at.float("epsilon", 1e-5)).rsqrt()
  out = (xf - mean) * inv * widened(scale)       # rounded once, as onnxruntime's CPU kernel
  if bias is not None:
    out = out + widened(bias)
  return [out.cast(result_dtype(x, scale)), mean, inv]


@op("LRN")
def _lrn(ins, at):
  x = ins[0]
  size = at.int("size")
  alpha, beta, bias = at.float("alpha", 1e-4), at.float("beta", 0.75), at.float("bias", 1.0)
  c = x.shape[1]
  sq = x * x
  lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
  padded = sq.pad(((0, 0), (lo, hi)) + ((0, 0),) * (x.ndim - 2))
  total = None
  for k in range(size):
    part = padded.shrink(((0, x.shape[0]), (k, k + c)) + tuple((0, s) for s in x.shape[2:]))
    total = part if total is None else total + part
  return x / (bias + (alpha / size) * total) ** beta


@op("Dropout")
def _dropout(ins, at):
  x = ins[0]
  training = ins.scalar(2, 0) if ins.opset >= 12 else 0
  if training:
    ratio = ins.scalar(1, 0.5)
    if ratio:
      from .random import dropout_training
      return dropout_training(ins, at, x, float(ratio))
  mask = Tensor.ones(*x.shape, dtype=dtypes.bool, device=ins.device)
  return [x, mask]


def _softmax_like(ins, at, fn):
  """fn(x, axis) along Softmax's axis; float16 computed in float32 and rounded once."""
  return _along_axis(ins, at, lambda x, a: fn(widened(x), a).cast(x.dtype))


def _along_axis(ins, at, fn):
  x = ins[0]
  if ins.opset < 13:
    axis = axis_index(at.int("axis", 1), x.ndim)
    flat = x.reshape(math.prod(x.shape[:axis]), -1)
    return fn(flat, -1).reshape(x.shape)
  return fn(x, axis_index(at.int("axis", -1), x.ndim))


@op("Softmax")
def _softmax(ins, at): return _softmax_like(ins, at, lambda x, a: x.softmax(a))


@op("LogSoftmax")
def _logsoftmax(ins, at): return _softmax_like(ins, at, lambda x, a: x.log_softmax(a))


@op("Hardmax")
def _hardmax(ins, at):
  def hard(x, a):
    idx = x.argmax(a, keepdim=True)
    n = x.shape[a]
    shape = [1] * x.ndim
    shape[a] = n
    return (Tensor.arange(n, device=x.device).reshape(shape) == idx).cast(x.dtype)
  return _along_axis(ins, at, hard)



@op("LpNormalization")
def _lpnorm(ins, at):
  x = ins[0]
  axis = axis_index(at.int("axis", -1), x.ndim)
  p = at.int("p", 2)
  norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
  return where(norm == 0, 0.0, x / where(norm == 0, 1.0, norm)).cast(x.dtype)  # 0-norm -> 0


@op("MeanVarianceNormalization")
def _mvn(ins, at):
  x = ins[0]
  axes = tuple(axis_index(a, x.ndim) for a in at.ints("axes", [0, 2, 3]))
  mean = x.mean(axes, keepdim=True)
  var = ((x - mean) * (x - mean)).mean(axes, keepdim=True)
  return (x - mean) / (var.sqrt() + 1e-9)


@op("GroupNormalization")
def _groupnorm(ins, at):
  x, scale, bias = ins[0], ins[1], ins[2]
  g = at.int("num_groups")
  n, c = x.shape[:2]
  xg = x.reshape(n, g, -1)
  mean = xg.mean(-1, keepdim=True)
  var = ((xg - mean) * (xg - mean)).mean(-1, keepdim=True)
  y = ((xg - mean) * (var + at.float("epsilon", 1e-5)).rsqrt()).reshape(x.shape)
  shp = _channel_shape(x)
  if ins.opset < 21:      # scale and bias per group (opset 18)
    scale = scale.reshape(g, 1).expand(g, c // g).reshape(c)
    bias = bias.reshape(g, 1).expand(g, c // g).reshape(c)
  return y * scale.reshape(shp) + bias.reshape(shp)


@op("RMSNormalization")
def _rmsnorm(ins, at):
  x, scale = ins[0], ins[1]
  axis = axis_index(at.int("axis", -1), x.ndim)
  axes = tuple(range(axis, x.ndim))
  xf = widened(x)
  inv = ((xf * xf).mean(axes, keepdim=True) + at.float("epsilon", 1e-5)).rsqrt()
  return (xf * inv * widened(scale)).cast(result_dtype(x, scale))


@op("LpPool")
def _lppool(ins, at):
  x = ins[0]
  p = at.int("p", 2)
  xp, _, window, n = _pool_windows(x.abs(), at, ins, 0)
  out = _window_reduce(xp ** p, window, "sum") ** (1.0 / p)
  return out.squeeze(2) if n == 1 else out


@op("GlobalLpPool")
def _glppool(ins, at):
  x = ins[0]
  p = at.int("p", 2)
  return (x.abs() ** p).sum(tuple(range(2, x.ndim)), keepdim=True) ** (1.0 / p)



@op("Attention")
def _attention(ins, at):
  from .attention import attention
  return attention(ins, at)


@op("RNN", "GRU", "LSTM")
def _recurrent(ins, at):
  from .rnn import recurrent
  return recurrent(ins.node.op, ins, at)
