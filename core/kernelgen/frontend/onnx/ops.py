"""The ONNX operators of the default domain, as kernelgen Tensor code.

Each operator is a function (inputs, attrs) -> output Tensor or list of outputs, registered by
name with `@op`; `inputs[i]` is a Tensor (None when the optional input is absent),
`inputs.ints(i)` the host values of a shape-like input, `inputs.opset` the model's opset, where
an operator's inputs or attributes changed between versions (Squeeze's axes, Slice's starts,
Clip's bounds ...). Semantics follow the ONNX operator documentation: numpy broadcasting,
attribute defaults, negative axes, optional inputs.
"""
from __future__ import annotations

import math

from ...dtype import dtypes, max_value, min_value
from ...errors import ModelError, ShapeError, UnsupportedError
from ...tensor import Tensor, cat, where

OPS: dict = {}


def op(*names, foldable=True):
  def register(fn):
    fn.foldable = foldable
    for name in names:
      OPS[name] = fn
    return fn
  return register


def check_supported(node) -> None:
  domain = node.proto.domain
  if domain not in ("", "ai.onnx"):
    raise UnsupportedError(f"{node.describe()}: operators of domain {domain!r} are not "
                           f"supported (only the default ONNX domain)")
  if node.op not in OPS:
    raise UnsupportedError(f"{node.describe()}: operator {node.op} is not implemented in "
                           f"kernelgen's ONNX importer")


def _needs(obj, name: str, what: str):
  fn = getattr(obj, name, None)
  if fn is None:
    raise UnsupportedError(f"{what} needs {name} (the tensor operations of issue 18), "
                           f"which this kernelgen does not have yet")
  return fn


def _axis(a: int, ndim: int) -> int:
  if not -max(ndim, 1) <= a < max(ndim, 1):
    raise ShapeError(f"axis {a} is out of range for {ndim} dims")
  return a % max(ndim, 1)


def _full(shape, value, dtype, device) -> Tensor:
  return Tensor.full(tuple(shape), value, dtype=dtype, device=device)


# ---- elementwise -----------------------------------------------------------------------------

def _unary(name, fn):
  OPS[name] = lambda ins, at: fn(ins[0])
  OPS[name].foldable = True


for _name, _fn in {
  "Abs": lambda x: x.abs(), "Neg": lambda x: -x, "Exp": lambda x: x.exp(),
  "Log": lambda x: x.log(), "Sqrt": lambda x: x.sqrt(), "Reciprocal": lambda x: x.reciprocal(),
  "Sin": lambda x: x.sin(), "Cos": lambda x: x.cos(), "Tan": lambda x: x.tan(),
  "Tanh": lambda x: x.tanh(), "Sigmoid": lambda x: x.sigmoid(), "Relu": lambda x: x.relu(),
  "Floor": lambda x: x.floor(), "Ceil": lambda x: x.ceil(), "Round": lambda x: x.round(),
  "Sign": lambda x: x.sign(), "Not": lambda x: x.logical_not(), "IsNaN": lambda x: x.isnan(),
  "Identity": lambda x: x, "BitwiseNot": lambda x: ~x,
  "Softsign": lambda x: x / (1 + x.abs()),
  "Softplus": lambda x: where(x > 20, x, (1 + x.exp()).log()),
  "Sinh": lambda x: (x.exp() - (-x).exp()) * 0.5, "Cosh": lambda x: (x.exp() + (-x).exp()) * 0.5,
  "Asinh": lambda x: x.sign() * (x.abs() + (x * x + 1).sqrt()).log(),
  "Acosh": lambda x: (x + (x * x - 1).sqrt()).log(),
  "Atanh": lambda x: ((1 + x) / (1 - x)).log() * 0.5,
  "Atan": lambda x: _atan(x), "Asin": lambda x: _atan(x / (1 - x * x).sqrt()),
  "Acos": lambda x: math.pi / 2 - _asin(x), "Erf": lambda x: _erf(x),
  "Mish": lambda x: x * where(x > 20, x, (1 + x.exp()).log()).tanh(),
}.items():
  _unary(_name, _fn)


def _asin(x):
  s = (1 - x * x).sqrt()
  return where(x.abs() == 1, x * (math.pi / 2), _atan(x / s))


def _atan(x):
  """atan: |x| > 1 by pi/2 - atan(1/|x|), two half-angle steps, then the Taylor series."""
  a = x.abs()
  big = a > 1
  r = where(big, 1 / where(big, a, 1), a)
  for _ in range(2):
    r = r / (1 + (1 + r * r).sqrt())
  r2, term, total = r * r, r, r
  for k in range(1, 9):
    term = term * r2 * -1
    total = total + term / (2 * k + 1)
  total = total * 4
  return x.sign() * where(big, math.pi / 2 - total, total)


def _erf(x):
  """erf: a Taylor series below 0.5, the Numerical Recipes erfc (rel. error < 1.2e-7) above."""
  a = x.abs()
  a2 = a * a
  series, term = a, a
  for k in range(1, 8):
    term = term * a2 * -1 / k
    series = series + term / (2 * k + 1)
  series = series * (2 / math.sqrt(math.pi))
  t = 1 / (1 + 0.5 * a)
  coeffs = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
            -1.13520398, 1.48851587, -0.82215223, 0.17087277)
  poly = t * 0 + coeffs[-1]
  for c in reversed(coeffs[:-1]):
    poly = poly * t + c
  erfc = t * (-a2 + poly).exp()
  return x.sign() * where(a < 0.5, series, 1 - erfc)


@op("IsInf")
def _isinf(ins, at):
  x = ins[0]
  pos, neg = at.int("detect_positive", 1), at.int("detect_negative", 1)
  out = x.isinf()
  if not pos:
    out = out & (x < 0)
  if not neg:
    out = out & (x > 0)
  return out


@op("Elu")
def _elu(ins, at):
  x, alpha = ins[0], at.float("alpha", 1.0)
  return where(x < 0, alpha * (x.exp() - 1), x)


@op("Celu")
def _celu(ins, at):
  x, alpha = ins[0], at.float("alpha", 1.0)
  return x.maximum(0) + (alpha * ((x / alpha).exp() - 1)).minimum(0)


@op("Selu")
def _selu(ins, at):
  x = ins[0]
  alpha, gamma = at.float("alpha", 1.67326319217681884765625), at.float("gamma",
                                                                        1.05070102214813232421875)
  return gamma * where(x <= 0, alpha * x.exp() - alpha, x)


@op("LeakyRelu")
def _leaky(ins, at):
  x = ins[0]
  return where(x < 0, x * at.float("alpha", 0.01), x)


@op("ThresholdedRelu")
def _trelu(ins, at):
  x = ins[0]
  return where(x > at.float("alpha", 1.0), x, 0)


@op("HardSigmoid")
def _hsig(ins, at):
  x = ins[0]
  return (x * at.float("alpha", 0.2) + at.float("beta", 0.5)).clip(0, 1)


@op("HardSwish")
def _hswish(ins, at):
  x = ins[0]
  return x * (x / 6 + 0.5).clip(0, 1)


@op("PRelu")
def _prelu(ins, at):
  x, slope = ins[0], ins[1]
  return where(x < 0, x * slope, x)


@op("Gelu")
def _gelu(ins, at):
  x = ins[0]
  if at.str("approximate", "none") == "tanh":
    return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
  return 0.5 * x * (1 + _erf(x * (1 / math.sqrt(2))))


@op("Clip")
def _clip(ins, at):
  x = ins[0]
  if ins.opset < 11:
    lo, hi = at.float("min", -math.inf), at.float("max", math.inf)
  else:
    lo, hi = ins.scalar(1), ins.scalar(2)
  if lo is not None:
    x = where(x < lo, lo, x) if not isinstance(lo, float) or not math.isinf(lo) else x
  if hi is not None:
    x = where(x > hi, hi, x) if not isinstance(hi, float) or not math.isinf(hi) else x
  return x


# ---- binary, variadic ------------------------------------------------------------------------

def _trunc_div(a, b):
  q = a // b
  fix = ((a % b) != 0) & ((a < 0) != (b < 0))
  return q + fix.cast(q.dtype)


@op("Add", "Sum")
def _add(ins, at):
  xs = ins.all()
  out = xs[0]
  for x in xs[1:]:
    out = out + x
  return out


@op("Sub")
def _sub(ins, at): return ins[0] - ins[1]


@op("Mul")
def _mul(ins, at): return ins[0] * ins[1]


@op("Div")
def _div(ins, at):
  a, b = ins[0], ins[1]
  return a / b if a.dtype.is_float() else _trunc_div(a, b)


@op("Mod")
def _mod(ins, at):
  a, b = ins[0], ins[1]
  if at.int("fmod", 0):
    if a.dtype.is_float():
      return a - (a / b).trunc() * b
    return a - _trunc_div(a, b) * b
  r = a % b
  if a.dtype.is_float():    # x mod +-inf: x when the signs agree (or x is 0), else the inf
    keep = (a == 0) | ((a < 0) == (b < 0))
    r = where(b.isinf() & ~a.isinf() & ~a.isnan(), where(keep, a, b), r)
  return r


@op("Pow")
def _pow(ins, at):
  a, b = ins[0], ins[1]
  if a.dtype.is_float():
    return a ** b.cast(a.dtype)
  if b.dtype.is_float():
    return (a.cast(b.dtype) ** b).cast(a.dtype)
  return a ** b.cast(a.dtype)


@op("Max", "Min", "Mean")
def _variadic(ins, at):
  xs = ins.all()
  out = xs[0]
  name = ins.node.op
  for x in xs[1:]:
    if name == "Mean":
      out = out + x
    else:
      nan = out.isnan() | x.isnan() if out.dtype.is_float() else None
      out = out.maximum(x) if name == "Max" else out.minimum(x)
      out = where(nan, math.nan, out) if nan is not None else out
  return out / len(xs) if name == "Mean" else out


_CMP = {"Equal": lambda a, b: a == b, "Less": lambda a, b: a < b, "Greater": lambda a, b: a > b,
        "LessOrEqual": lambda a, b: a <= b, "GreaterOrEqual": lambda a, b: a >= b,
        "And": lambda a, b: a.bool() & b.bool(), "Or": lambda a, b: a.bool() | b.bool(),
        "Xor": lambda a, b: a.bool() ^ b.bool(), "BitwiseAnd": lambda a, b: a & b,
        "BitwiseOr": lambda a, b: a | b, "BitwiseXor": lambda a, b: a ^ b}
for _name, _fn in _CMP.items():
  OPS[_name] = (lambda f: lambda ins, at: f(ins[0], ins[1]))(_fn)
  OPS[_name].foldable = True


@op("BitShift")
def _bitshift(ins, at):
  a, b = ins[0], ins[1]
  return a << b if at.str("direction") == "LEFT" else a >> b


@op("Where")
def _where(ins, at): return where(ins[0], ins[1], ins[2])


@op("Cast")
def _cast(ins, at):
  return ins[0].cast(ins.dtype(at.int("to")))


@op("CastLike")
def _castlike(ins, at): return ins[0].cast(ins[1].dtype)


# ---- matrix and nn ---------------------------------------------------------------------------

@op("MatMul")
def _matmul(ins, at):
  a, b = ins[0], ins[1]
  if a.ndim >= 2 and b.ndim >= 2:
    batch = _broadcast(a.shape[:-2], b.shape[:-2])
    a, b = a.expand(batch + a.shape[-2:]), b.expand(batch + b.shape[-2:])
  return a @ b


def _broadcast(*shapes):
  from ...tensor_data import broadcast_shape
  return broadcast_shape(*shapes)


@op("Gemm")
def _gemm(ins, at):
  a, b, c = ins[0], ins[1], ins[2]
  a = a.T if at.int("transA", 0) else a
  b = b.T if at.int("transB", 0) else b
  alpha, beta = at.float("alpha", 1.0), at.float("beta", 1.0)
  out = a @ b
  if alpha != 1.0:
    out = out * alpha
  if c is not None:
    out = out + (c * beta if beta != 1.0 else c)
  return out


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
  x, w, b = ins[0], ins[1], ins[2]
  if x.ndim not in (3, 4):
    raise UnsupportedError(f"Conv of a {x.ndim}-d input: kernelgen has 1-d and 2-d convolution")
  _, strides, dilations, pads = _conv_args(ins, at, x, w.shape)
  one_d = x.ndim == 3
  if one_d:
    x, w = x.unsqueeze(2), w.unsqueeze(2)
    strides, dilations, pads = [1] + strides, [1] + dilations, [(0, 0)] + pads
  x = _pad_spatial(x, pads)
  out = x.conv2d(w, b, stride=tuple(strides), padding=0, dilation=tuple(dilations),
                 groups=at.int("group", 1))
  return out.squeeze(2) if one_d else out


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
  if len(ins.node.outputs) > 1 and ins.node.outputs[1]:
    raise UnsupportedError("MaxPool's Indices output is not supported")
  fill = -math.inf if x.dtype.is_float() else min_value(x.dtype)
  xp, _, window, n = _pool_windows(x, at, ins, fill)
  out = _window_reduce(xp, window, "max")
  return out.squeeze(2) if n == 1 else out


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
  if at.int("training_mode", 0) or sum(1 for o in ins.node.outputs if o) > 1:
    raise UnsupportedError("BatchNormalization in training mode is not supported (inference "
                           "only)")
  eps = at.float("epsilon", 1e-5)
  shp = _channel_shape(x)
  inv = (var.reshape(shp) + eps).rsqrt() * scale.reshape(shp)
  return (x - mean.reshape(shp)) * inv + bias.reshape(shp)


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
  axis = _axis(at.int("axis", -1), x.ndim)
  axes = tuple(range(axis, x.ndim))
  xf = x.float() if x.dtype != dtypes.float32 and x.dtype != dtypes.float64 else x
  mean = xf.mean(axes, keepdim=True)
  var = ((xf - mean) * (xf - mean)).mean(axes, keepdim=True)
  inv = (var + at.float("epsilon", 1e-5)).rsqrt()
  out = ((xf - mean) * inv).cast(x.dtype) * scale
  if bias is not None:
    out = out + bias
  return [out, mean, inv]


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
      raise UnsupportedError("Dropout in training mode (random masks) is not supported")
  mask = Tensor.ones(*x.shape, dtype=dtypes.bool, device=ins.device)
  return [x, mask]


def _softmax_like(ins, at, fn):
  x = ins[0]
  if ins.opset < 13:
    axis = _axis(at.int("axis", 1), x.ndim)
    flat = x.reshape(math.prod(x.shape[:axis]), -1)
    return fn(flat, -1).reshape(x.shape)
  return fn(x, _axis(at.int("axis", -1), x.ndim))


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
  return _softmax_like(ins, at, hard)


# ---- reductions ------------------------------------------------------------------------------

def _reduce_axes(ins, at, x):
  axes_from_input = ins.node.op == "ReduceSum" and ins.opset >= 13 or ins.opset >= 18
  axes = ins.ints(1) if axes_from_input else at.ints("axes")
  if not axes:
    if at.int("noop_with_empty_axes", 0):
      return None
    return tuple(range(x.ndim))
  return tuple(sorted({_axis(a, x.ndim) for a in axes}))


_REDUCERS = {
  "ReduceSum": lambda x, ax, k: x.sum(ax, keepdim=k),
  "ReduceMean": lambda x, ax, k: x.mean(ax, keepdim=k),
  "ReduceMax": lambda x, ax, k: _nan_extreme(x, ax, k, True),
  "ReduceMin": lambda x, ax, k: _nan_extreme(x, ax, k, False),
  "ReduceProd": lambda x, ax, k: x.prod(ax, keepdim=k),
  "ReduceL1": lambda x, ax, k: x.abs().sum(ax, keepdim=k),
  "ReduceL2": lambda x, ax, k: (x * x).sum(ax, keepdim=k).sqrt(),
  "ReduceLogSum": lambda x, ax, k: x.sum(ax, keepdim=k).log(),
  "ReduceSumSquare": lambda x, ax, k: (x * x).sum(ax, keepdim=k),
  "ReduceLogSumExp": lambda x, ax, k: _logsumexp(x, ax, k),
}


def _nan_extreme(x, axes, keep, largest):
  if any(x.shape[a] == 0 for a in axes):
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    if not keep:
      shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    value = (-math.inf if largest else math.inf) if x.dtype.is_float() else \
      (min_value(x.dtype) if largest else max_value(x.dtype))
    return _full(shape, value, x.dtype, x.device)
  out = x.max(axes, keepdim=keep) if largest else x.min(axes, keepdim=keep)
  if x.dtype.is_float():
    nan = x.isnan().cast(dtypes.int32).max(axes, keepdim=keep) > 0
    out = where(nan, math.nan, out)
  return out


def _logsumexp(x, axes, keep):
  if any(x.shape[a] == 0 for a in axes):
    return _nan_extreme(x, axes, keep, True)       # log(sum of nothing) = -inf
  m = x.max(axes, keepdim=True)
  m = where(m.isinf(), 0, m)
  out = (x - m).exp().sum(axes, keepdim=True).log() + m
  return out if keep else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))


def _reduce(ins, at):
  x = ins[0]
  axes = _reduce_axes(ins, at, x)
  if axes is None:
    return x
  keep = bool(at.int("keepdims", 1))
  out = _REDUCERS[ins.node.op](x, axes, keep)
  return out.cast(x.dtype) if ins.node.op != "ReduceMean" or x.dtype.is_float() else out


for _name in _REDUCERS:
  OPS[_name] = _reduce
_reduce.foldable = True


@op("ArgMax", "ArgMin")
def _argextreme(ins, at):
  x = ins[0]
  axis = _axis(at.int("axis", 0), x.ndim)
  keep = bool(at.int("keepdims", 1))
  largest = ins.node.op == "ArgMax"
  if at.int("select_last_index", 0):
    n = x.shape[axis]
    idx = (x.flip(axis).argmax(axis, keep) if largest else x.flip(axis).argmin(axis, keep))
    return (n - 1 - idx).cast(ins.int_dtype)
  return (x.argmax(axis, keep) if largest else x.argmin(axis, keep)).cast(ins.int_dtype)


# ---- shapes and movement ---------------------------------------------------------------------

@op("Shape")
def _shape(ins, at):
  shape = list(ins[0].shape)
  start, end = at.int("start", 0), at.int("end", len(shape))
  shape = shape[slice(start, end)]
  return Tensor(shape, dtype=ins.int_dtype, device=ins.device) if shape else \
    Tensor.zeros(0, dtype=ins.int_dtype, device=ins.device)


@op("Size")
def _size(ins, at):
  return _full((), ins[0].numel(), ins.int_dtype, ins.device)


@op("Reshape")
def _reshape(ins, at):
  x = ins[0]
  shape = ins.ints(1) if ins.opset >= 5 else at.ints("shape")
  if not at.int("allowzero", 0):
    shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
  return x.reshape(tuple(shape))


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
  return x.squeeze(tuple(_axis(a, x.ndim) for a in axes))


@op("Unsqueeze")
def _unsqueeze(ins, at):
  x = ins[0]
  axes = ins.ints(1) if ins.opset >= 13 else at.ints("axes")
  ndim = x.ndim + len(axes)
  axes = sorted(_axis(a, ndim) for a in axes)
  shape = list(x.shape)
  for a in axes:
    shape.insert(a, 1)
  return x.reshape(tuple(shape))


@op("Concat")
def _concat(ins, at):
  xs = [x for x in ins.all()]
  axis = _axis(at.int("axis", 0), xs[0].ndim)
  nonempty = [x for x in xs if x.shape[axis] > 0] or xs[:1]
  return cat(nonempty, axis) if len(nonempty) > 1 else nonempty[0]


@op("Split")
def _split(ins, at):
  x = ins[0]
  axis = _axis(at.int("axis", 0), x.ndim)
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
    index[_axis(a, x.ndim)] = slice(s, e, k)
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
  return x.expand(_broadcast(x.shape, shape))


@op("Tile")
def _tile(ins, at):
  return ins[0].repeat(*ins.ints(1))


@op("ConstantOfShape")
def _const_of_shape(ins, at):
  shape = ins.ints(0)
  t = at.tensor("value")
  if t is None:
    return _full(shape, 0.0, dtypes.float32, ins.device)
  from .data import tensor_payload
  from ...tensor_data import unpack
  dtype, _, raw = tensor_payload(t, None, "ConstantOfShape value")
  value = unpack(raw, dtype)[0]
  return _full(shape, value, ins.dtype(t.data_type), ins.device)


@op("Constant")
def _constant(ins, at):
  from .data import tensor_payload
  from .model import narrow_bytes, tensor_from_bytes
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
      return _full((), at.float(name), dtypes.float32, ins.device)
    if kind == "i":
      return _full((), at.int(name), ins.int_dtype, ins.device)
    if kind == "fs":
      return Tensor(at.floats(name), dtype=dtypes.float32, device=ins.device)
    return Tensor(at.ints(name), dtype=ins.int_dtype, device=ins.device)
  raise UnsupportedError(f"Constant with {sorted(at.values)}: only dense values are supported")


@op("Range")
def _range(ins, at):
  start, limit, delta = ins.scalar(0), ins.scalar(1), ins.scalar(2)
  n = max(0, math.ceil((limit - start) / delta))
  dtype = ins[0].dtype
  if n == 0:
    return Tensor.zeros(0, dtype=dtype, device=ins.device)
  return (Tensor.arange(n, device=ins.device).cast(dtype) * delta + start).cast(dtype)


@op("Pad")
def _pad(ins, at):
  x = ins[0]
  mode = at.str("mode", "constant")
  if ins.opset < 11:
    pads, value, axes = at.ints("pads"), at.float("value", 0.0), None
  else:
    pads, value, axes = ins.ints(1), ins.scalar(2, 0), ins.ints(3)
  axes = [_axis(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
  widths = [(0, 0)] * x.ndim
  for i, a in enumerate(axes):
    widths[a] = (pads[i], pads[i + len(axes)])
  cut = [(max(0, -b), n - max(0, -a)) for (b, a), n in zip(widths, x.shape)]
  x = x.shrink(cut)
  widths = tuple((max(0, b), max(0, a)) for b, a in widths)
  if mode == "constant":
    return x.pad(widths, value=value if value is not None else 0)
  try:
    return x.pad(widths, mode=mode)
  except TypeError:
    raise UnsupportedError(f"Pad mode {mode!r} needs pad(mode=) (the tensor operations of "
                           f"issue 18), which this kernelgen does not have yet") from None


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
  axis = _axis(axis, ndim)
  idx = idx.cast(dtypes.int32)
  idx = where(idx < 0, idx + depth, idx).unsqueeze(axis)
  shape = [1] * ndim
  shape[axis] = depth
  hit = Tensor.arange(depth, device=idx.device).reshape(shape) == idx
  off, on = values[0], values[1]
  return where(hit, on, off)


@op("Gather")
def _gather(ins, at):
  x = ins[0]
  axis = _axis(at.int("axis", 0), x.ndim)
  static = ins.runner.known(ins.names[1])
  n = x.shape[axis]
  if static is not None and static.size <= 64:
    parts = []
    for i in static.values:
      i = int(i)
      if not -n <= i < n:
        raise ShapeError(f"Gather index {i} is out of range for axis {axis} of size {n}")
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
  import kernelgen
  return _needs(kernelgen, "take", "Gather with tensor indices")(x, idx, axis=axis)


@op("GatherElements")
def _gather_elements(ins, at):
  x, idx = ins[0], ins[1]
  axis = _axis(at.int("axis", 0), x.ndim)
  idx = where(idx < 0, idx + x.shape[axis], idx)
  return _needs(x, "gather", "GatherElements")(axis, idx)


@op("CumSum")
def _cumsum(ins, at):
  x = ins[0]
  axis = _axis(int(ins.scalar(1)), x.ndim)
  y = x.flip(axis) if at.int("reverse", 0) else x
  out = _needs(y, "cumsum", "CumSum")(axis)
  if at.int("exclusive", 0):
    out = out - y
  return out.flip(axis) if at.int("reverse", 0) else out


@op("Einsum")
def _einsum(ins, at):
  import kernelgen
  return _needs(kernelgen, "einsum", "Einsum")(at.str("equation").replace(" ", ""), *ins.all())


@op("TopK")
def _topk(ins, at):
  x = ins[0]
  k = int(ins.scalar(1)) if ins.opset >= 10 else at.int("k")
  axis = at.int("axis", -1)
  values, indices = _needs(x, "topk", "TopK")(k, axis=axis,
                                               largest=bool(at.int("largest", 1)))
  return [values, indices.cast(ins.int_dtype)]


@op("Shrink")
def _shrink(ins, at):
  x = ins[0]
  bias, lambd = at.float("bias", 0.0), at.float("lambd", 0.5)
  return where(x < -lambd, x + bias, where(x > lambd, x - bias, 0)).cast(x.dtype)


@op("Swish")
def _swish(ins, at):
  x = ins[0]
  return x * (x * at.float("alpha", 1.0)).sigmoid()


@op("LpNormalization")
def _lpnorm(ins, at):
  x = ins[0]
  axis = _axis(at.int("axis", -1), x.ndim)
  p = at.int("p", 2)
  norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
  return x / norm


@op("MeanVarianceNormalization")
def _mvn(ins, at):
  x = ins[0]
  axes = tuple(_axis(a, x.ndim) for a in at.ints("axes", [0, 2, 3]))
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
  axis = _axis(at.int("axis", -1), x.ndim)
  axes = tuple(range(axis, x.ndim))
  xf = x.float() if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
  inv = ((xf * xf).mean(axes, keepdim=True) + at.float("epsilon", 1e-5)).rsqrt()
  return (xf * inv).cast(x.dtype) * scale


def _nll(logp, target, weight, at):
  """NegativeLogLikelihoodLoss of log-probabilities (N, C, d...) and targets (N, d...)."""
  c = logp.shape[1]
  target = target.cast(dtypes.int32).unsqueeze(1)
  classes = Tensor.arange(c, device=logp.device).reshape((1, c) + (1,) * (logp.ndim - 2))
  hit = classes == target
  picked = where(hit, logp, 0).sum(1)
  w = weight.reshape((1, c) + (1,) * (logp.ndim - 2)) if weight is not None else \
    Tensor.ones(1, dtype=logp.dtype, device=logp.device)
  wsel = where(hit, w, 0).sum(1)
  ignore = at.int("ignore_index")
  if ignore is not None:
    wsel = where(target.squeeze(1) == ignore, 0, wsel)
  loss = -picked * wsel
  reduction = at.str("reduction", "mean")
  if reduction == "none":
    return loss
  if reduction == "sum":
    return loss.sum()
  return loss.sum() / wsel.sum()


@op("NegativeLogLikelihoodLoss")
def _nllloss(ins, at):
  return _nll(ins[0], ins[1], ins[2], at)


@op("SoftmaxCrossEntropyLoss")
def _sce(ins, at):
  logp = ins[0].log_softmax(1)
  return [_nll(logp, ins[1], ins[2], at), logp]


def _per_axis(param, x, at):
  """A scale or zero point (scalar or 1-d along `axis`) shaped to broadcast against x."""
  if at.int("block_size", 0):
    raise UnsupportedError("blocked quantization (block_size) is not supported")
  if param.ndim == 0 or param.numel() == 1 and param.ndim <= 1:
    return param.reshape(())
  axis = _axis(at.int("axis", 1), x.ndim)
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
  return q.clip(min_value(out), max_value(out)).cast(out)


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
  from .resize import resize
  x = ins[0]
  n = x.ndim
  if ins.opset < 11:
    scales, sizes, roi = ins.values(1), None, None
    attrs = _resize_attrs(at, coord_default="asymmetric")
  else:
    roi, scales, sizes = ins.values(1), ins.values(2), ins.ints(3)
    attrs = _resize_attrs(at)
  axes = [_axis(a, n) for a in at.ints("axes", list(range(n)))]
  full_scales, full_sizes = [1.0] * n, list(x.shape)
  if scales:
    for a, s in zip(axes, scales):
      full_scales[a], full_sizes[a] = float(s), int(math.floor(x.shape[a] * s))
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
  from .resize import resize
  x = ins[0]
  scales = at.floats("scales") if ins.opset < 9 else ins.values(1)
  attrs = _resize_attrs(at, coord_default="asymmetric")
  attrs["coord"] = "asymmetric"
  attrs["nearest_mode"] = "floor"
  sizes = [int(math.floor(d * s)) for d, s in zip(x.shape, scales)]
  return resize(x, [float(s) for s in scales], sizes, None, attrs)


@op("ConvTranspose")
def _conv_transpose(ins, at):
  """The transposed convolution as a convolution of the zero-stuffed input with the flipped,
  transposed kernel, cut to the output size (pads, output_padding, output_shape, auto_pad)."""
  x, w, b = ins[0], ins[1], ins[2]
  if x.ndim not in (3, 4):
    raise UnsupportedError(f"ConvTranspose of a {x.ndim}-d input: kernelgen has 1-d and 2-d")
  one_d = x.ndim == 3
  if one_d:
    x, w = x.unsqueeze(2), w.unsqueeze(2)
  g = at.int("group", 1)
  n_sp = 2
  pre = [1] if one_d else []
  strides = pre + at.ints("strides", [1] * (x.ndim - 2 - len(pre)))
  dil = pre + at.ints("dilations", [1] * (x.ndim - 2 - len(pre)))
  kernel = list(w.shape[2:])
  out_pad = [0] * len(pre) + at.ints("output_padding", [0] * (n_sp - len(pre)))
  full = [strides[i] * (x.shape[2 + i] - 1) + (kernel[i] - 1) * dil[i] + 1 for i in range(n_sp)]
  pads = _transpose_pads(at, x, strides, dil, kernel, out_pad, one_d)
  c, m_g = w.shape[0], w.shape[1]
  wt = w.reshape(g, c // g, m_g, *kernel).permute(0, 2, 1, 3, 4).reshape(g * m_g, c // g,
                                                                         *kernel)
  wt = wt.flip((2, 3))
  stuffed = x
  for i in range(n_sp):
    stuffed = _zero_stuff(stuffed, 2 + i, strides[i])
  edge = [((kernel[i] - 1) * dil[i],) * 2 for i in range(n_sp)]
  y = stuffed.pad(((0, 0), (0, 0)) + tuple(edge)).conv2d(wt, None, stride=1, padding=0,
                                                         dilation=tuple(dil), groups=g)
  cuts, fills = [], []
  for i in range(n_sp):      # the output window of the full result, zero-filled past its ends
    size = full[i] + out_pad[i] - pads[i][0] - pads[i][1]
    lo = pads[i][0]
    before, after = max(0, -lo), max(0, lo + size - full[i])
    fills.append((before, after))
    cuts.append((lo + before, lo + before + size))
  y = y.pad(((0, 0), (0, 0)) + tuple(fills))
  y = y.shrink([(0, y.shape[0]), (0, y.shape[1])] + cuts)
  if b is not None:
    y = y + b.reshape(1, -1, 1, 1)
  return y.squeeze(2) if one_d else y


def _zero_stuff(x, axis, s):
  """Insert s - 1 zeros between neighbours along axis."""
  if s == 1:
    return x
  n = x.shape[axis]
  y = x.unsqueeze(axis + 1)
  pads = [(0, 0)] * y.ndim
  pads[axis + 1] = (0, s - 1)
  y = y.pad(tuple(pads))
  shape = list(x.shape)
  shape[axis] = n * s
  y = y.reshape(tuple(shape))
  bounds = [(0, d) for d in y.shape]
  bounds[axis] = (0, (n - 1) * s + 1)
  return y.shrink(bounds)


def _transpose_pads(at, x, strides, dil, kernel, out_pad, one_d):
  n_sp = 2
  pads = at.ints("pads")
  auto = at.str("auto_pad", "NOTSET")
  out_shape = at.ints("output_shape")
  if out_shape is not None and one_d:
    out_shape = [1] + out_shape
  if pads is not None and auto not in ("SAME_UPPER", "SAME_LOWER") and out_shape is None:
    if one_d:
      return [(0, 0), (pads[0], pads[1])]
    return [(pads[i], pads[i + n_sp]) for i in range(n_sp)]
  if pads is None and auto not in ("SAME_UPPER", "SAME_LOWER") and out_shape is None:
    return [(0, 0)] * n_sp
  if out_shape is None:
    out_shape = [x.shape[2 + i] * strides[i] for i in range(n_sp)]
  out = []
  for i in range(n_sp):
    total = strides[i] * (x.shape[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1 - \
      out_shape[i]
    if auto == "SAME_UPPER":
      out.append((total // 2, total - total // 2))
    else:
      out.append((total - total // 2, total // 2))
  return out


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


def _window(ins, at, terms):
  size = int(ins.scalar(0))
  dtype = ins.dtype(at.int("output_datatype", 1))
  denom = size if at.int("periodic", 1) else size - 1
  n = Tensor.arange(size, device=ins.device).cast(dtypes.float32)
  out = None
  for k, coef in enumerate(terms):
    term = coef * (n * (2 * math.pi * k / denom)).cos() if k else \
      Tensor.full((size,), coef, dtype=dtypes.float32, device=ins.device)
    out = term if out is None else out + term
  return out.cast(dtype)


@op("HannWindow")
def _hann(ins, at): return _window(ins, at, (0.5, -0.5))


@op("HammingWindow")
def _hamming(ins, at): return _window(ins, at, (25 / 46, -(1 - 25 / 46)))


@op("BlackmanWindow")
def _blackman(ins, at): return _window(ins, at, (0.42, -0.5, 0.08))


@op("CenterCropPad")
def _center_crop_pad(ins, at):
  x = ins[0]
  shape = ins.ints(1)
  axes = [_axis(a, x.ndim) for a in at.ints("axes", list(range(x.ndim)))]
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


@op("Attention")
def _attention(ins, at):
  from .attention import attention
  return attention(ins, at)


@op("RNN", "GRU", "LSTM")
def _recurrent(ins, at):
  from .rnn import recurrent
  return recurrent(ins.node.op, ins, at)
