"""ONNX elementwise operators (activations, arithmetic, comparisons, casts), reductions and
window functions; registered in registry.OPS."""
from __future__ import annotations

import math

from ...dtype import dtypes, max_value, min_value
from ...tensor.tensor import Tensor, where
from ..registry import OPS, axis_index, full, op


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
  "BitwiseNot": lambda x: ~x,
  "Softsign": lambda x: x / (1 + x.abs()),
  "Softplus": lambda x: x.softplus(), "Sinh": lambda x: x.sinh(), "Cosh": lambda x: x.cosh(),
  "Asinh": lambda x: x.asinh(), "Acosh": lambda x: x.acosh(), "Atanh": lambda x: x.atanh(),
  "Atan": lambda x: x.atan(), "Asin": lambda x: x.asin(), "Acos": lambda x: x.acos(),
  "Erf": lambda x: x.erf(), "Mish": lambda x: x.mish(),
}.items():
  _unary(_name, _fn)


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
  return x.gelu("tanh" if at.str("approximate", "none") == "tanh" else "none")


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
  n = _small_int_exponent(ins)
  if a.dtype.is_float() and n is not None:   # x ** 2.0 -> x * x (Silero VAD's STFT magnitude)
    extra = len(b.shape) - len(a.shape)      # an exponent of more axes (of 1) adds them
    return (a ** n).reshape((1,) * extra + tuple(a.shape)) if extra > 0 else a ** n
  if a.dtype.is_float():
    return a ** b.cast(a.dtype)
  if b.dtype.is_float():
    return (a.cast(b.dtype) ** b).cast(a.dtype)
  return a ** b.cast(a.dtype)


def _small_int_exponent(ins):
  """Pow's exponent as a Python int when the program fixes it to one whole number in [0, 64)
  (a Constant or an initializer of one element), else None: x ** n is then n's repeated
  squaring, no exp2 and log2 (x * x for 2: correctly rounded, as onnxruntime's; each further
  product rounds once)."""
  s = ins.runner.constant(ins.names[1])
  if s is None or len(s.values) != 1:
    return None
  v = s.values[0]
  if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
    return None
  return int(v) if v == int(v) and 0 <= v < 64 else None


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
  from ..data import NIBBLES
  code = at.int("to")
  if code in NIBBLES:       # int4 / uint4 (held one per byte): the low 4 bits, as onnxruntime
    low = ins[0].cast(dtypes.int32) & 15
    return (low if code == 21 else (low ^ 8) - 8).cast(NIBBLES[code])
  return ins[0].cast(ins.dtype(code))


@op("CastLike")
def _castlike(ins, at): return ins[0].cast(ins[1].dtype)



# ---- reductions ------------------------------------------------------------------------------

def _reduce_axes(ins, at, x):
  axes_from_input = ins.node.op == "ReduceSum" and ins.opset >= 13 or ins.opset >= 18
  axes = ins.ints(1) if axes_from_input else at.ints("axes")
  if not axes:
    if at.int("noop_with_empty_axes", 0):
      return None
    return tuple(range(x.ndim))
  return tuple(sorted({axis_index(a, x.ndim) for a in axes}))


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
    return full(shape, value, x.dtype, x.device)
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
  axis = axis_index(at.int("axis", 0), x.ndim)
  keep = bool(at.int("keepdims", 1))
  largest = ins.node.op == "ArgMax"
  if at.int("select_last_index", 0):
    n = x.shape[axis]
    idx = (x.flip(axis).argmax(axis, keep) if largest else x.flip(axis).argmin(axis, keep))
    return (n - 1 - idx).cast(ins.int_dtype)
  return (x.argmax(axis, keep) if largest else x.argmin(axis, keep)).cast(ins.int_dtype)



@op("Shrink")
def _shrink(ins, at):
  x = ins[0]
  bias, lambd = at.float("bias", 0.0), at.float("lambd", 0.5)
  return where(x < -lambd, x + bias, where(x > lambd, x - bias, 0)).cast(x.dtype)


@op("Swish")
def _swish(ins, at):
  x = ins[0]
  return x * (x * at.float("alpha", 1.0)).sigmoid()



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
